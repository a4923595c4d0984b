"""One model, four contenders: ONNX Runtime, OpenVINO, stock TVM, tvm-cocopie.

The comparison behind ``tvm-cocopie demo`` and ``scripts/bench_e2e.py``: compile the
workload with OpenVINO's CPU plugin, stock TVM's default pipeline and the cocopie
pipeline, check each against ONNX Runtime, then time all four side by side in blocks
(medians). Beside the cocopie latency the record says what a cocopie inference does:
VM calls, allocations and kernels per run, and the layout transforms the layout stage
left (:mod:`.runtime_stats`).
"""

from __future__ import annotations

import logging
import time

from ..api import compile_model
from ..errors import CocopieError, last_line
from ..models.workloads import Workload
from . import timing as bm
from .runtime_stats import compiled_model_stats, layout_transform_count

log = logging.getLogger(__name__)

COLUMNS = [
    ("model", "model", "{}"), ("ort_ms", "ORT ms", "{:.2f}"),
    ("openvino_ms", "OV ms", "{:.2f}"), ("tvm_ms", "TVM ms", "{:.2f}"),
    ("cocopie_ms", "cocopie ms", "{:.2f}"), ("cocopie_over_ort", "cocopie/ORT", "{:.2f}"),
    ("cocopie_over_openvino", "cocopie/OV", "{:.2f}"),
    ("cocopie_over_tvm", "cocopie/TVM", "{:.3f}"), ("max_abs_err", "max abs err", "{:.2e}"),
    ("allocations_per_run", "allocs", "{}"), ("vm_calls_per_run", "VM calls", "{}"),
    ("kernel_calls_per_run", "kernels", "{}"),
    ("layout_transforms", "layout tf", "{}"),
    ("cocopie_compile_s", "compile s", "{:.1f}"), ("cocopie_build_s", "build s", "{:.1f}"),
]


def compare_workload(wl: Workload, target, threads: int, repeat: int = 10,
                     max_seconds: float | None = 60.0, stock: bool = True,
                     openvino: bool = True, openvino_precision: str | None = "f32",
                     openvino_pinning: bool | None = False) -> dict:
    """Compile, check and time ``wl``; return one benchmark record.

    Raises what the cocopie build raises. A model stock TVM or OpenVINO cannot build
    is recorded (``tvm_error``, ``openvino_error``) and timed without that contender.
    ``openvino_precision`` and ``openvino_pinning`` go to
    :func:`~tvm_cocopie.bench.timing.openvino_model`.
    """
    # ORT as it ships (spinning intra-op threads): timed in blocks, its spin cannot
    # reach TVM's timed calls
    sess = bm.ort_session(wl.model, threads, spinning=True)
    ref = sess.run(None, wl.inputs)
    builds, errors, ov_config = {}, {}, None
    t0 = time.perf_counter()
    builds["cocopie"] = compile_model(wl.model, target, shapes=wl.shapes)
    cocopie_compile = time.perf_counter() - t0
    if stock:
        try:
            builds["tvm"] = compile_model(wl.model, target, shapes=wl.shapes, pipeline="default")
        except CocopieError as err:
            errors["tvm"] = last_line(err)
            log.warning("%s: stock TVM failed: %s", wl.name, errors["tvm"])
    outs = {k: bm.output_list(b(**wl.inputs)) for k, b in builds.items()}
    contenders = {"ort": bm.ort_runner(sess, wl.inputs)}
    if openvino:
        try:
            ov_model = bm.openvino_model(wl.model, threads, wl.shapes, openvino_precision,
                                         openvino_pinning)
            ov_run = bm.openvino_runner(ov_model, wl.inputs)
            outs["openvino"] = ov_run()
            ov_config = bm.openvino_config(ov_model)
            contenders["openvino"] = ov_run
        except Exception as err:  # noqa: BLE001 - any OpenVINO failure: record it, go on
            errors["openvino"] = last_line(err) or type(err).__name__
            log.warning("%s: OpenVINO failed: %s", wl.name, errors["openvino"])
    contenders.update({k: (lambda b=b: b(**wl.inputs)) for k, b in builds.items()})
    # the counting VM is a separate one, so its instrument never runs in the timed calls
    stats = compiled_model_stats(builds["cocopie"], wl.inputs)
    layout = layout_transform_count(wl.model, target, wl.shapes)
    # blocks of 4 calls, the first untimed: see interleaved_times on why not 1
    times = bm.interleaved_times(contenders, repeat=repeat, warmup=1, max_seconds=max_seconds,
                                 block=4)

    def ms(name):
        return bm.median(times[name]) if name in times else None

    def err(name, fn):
        return fn(outs[name], ref) if name in outs else None

    rec = {
        "model": wl.name,
        "input_shapes": wl.shapes,
        "ort_ms": ms("ort"),
        "openvino_ms": ms("openvino"),
        "tvm_ms": ms("tvm"),
        "cocopie_ms": ms("cocopie"),
        "max_abs_err": bm.max_abs_error(outs["cocopie"], ref),
        "max_rel_err": bm.max_rel_error(outs["cocopie"], ref),
        "tvm_max_abs_err": err("tvm", bm.max_abs_error),
        "openvino_max_abs_err": err("openvino", bm.max_abs_error),
        "openvino_max_rel_err": err("openvino", bm.max_rel_error),
        "cocopie_compile_s": round(cocopie_compile, 2),  # ONNX import + tvm.compile
        "cocopie_build_s": round(builds["cocopie"].compile_seconds, 2),  # tvm.compile only
        # allocations_per_run (output_/intermediate_allocations_per_run), vm_calls_per_run,
        # kernel_calls_per_run
        **stats,
        "layout_transforms": layout,
        "rounds": len(times["ort"]),
    }
    if openvino:
        rec["openvino_config"] = ov_config  # what it ran with (None: it did not build)
    rec.update({f"{k}_error": v for k, v in errors.items()})
    rec["cocopie_over_ort"] = rec["cocopie_ms"] / rec["ort_ms"]
    rec["cocopie_over_openvino"] = (rec["cocopie_ms"] / rec["openvino_ms"]
                                    if rec["openvino_ms"] else None)
    rec["cocopie_over_tvm"] = rec["cocopie_ms"] / rec["tvm_ms"] if rec["tvm_ms"] else None
    return rec


def summarize(records: list[dict]) -> dict:
    """The summary keys the e2e issue asks for, over the records that ran."""
    done = [r for r in records if "skipped" not in r]
    worst = max(done, key=lambda r: r["cocopie_over_ort"], default=None)
    return {
        "models": len(done),
        "skipped": [r["model"] for r in records if "skipped" in r],
        "geomean_cocopie_over_ort": bm.geomean_or_none(r["cocopie_over_ort"] for r in done),
        "worst_cocopie_over_ort": worst["cocopie_over_ort"] if worst else None,
        "worst_cocopie_over_ort_model": worst["model"] if worst else None,
        "geomean_cocopie_over_openvino": bm.geomean_or_none(
            r.get("cocopie_over_openvino") for r in done),
        "geomean_cocopie_over_tvm": bm.geomean_or_none(r["cocopie_over_tvm"] for r in done),
        "openvino_failed": {r["model"]: r["openvino_error"] for r in done
                            if r.get("openvino_error")},
        "max_abs_err": max((r["max_abs_err"] for r in done), default=None),
        "max_rel_err": max((r["max_rel_err"] for r in done), default=None),
        "openvino_max_rel_err": max((r["openvino_max_rel_err"] for r in done
                                     if r.get("openvino_max_rel_err") is not None), default=None),
        "max_allocations_per_run": max((r["allocations_per_run"] for r in done
                                        if "allocations_per_run" in r), default=None),
        "max_intermediate_allocations_per_run": max(
            (r["intermediate_allocations_per_run"] for r in done
             if "intermediate_allocations_per_run" in r), default=None),
        "total_layout_transforms": sum(r.get("layout_transforms") or 0 for r in done),
        "max_compile_s": max((r["cocopie_compile_s"] for r in done), default=None),
        "max_build_s": max((r.get("cocopie_build_s", 0) for r in done), default=None),
    }


def table(records: list[dict]) -> str:
    """The records (skipped models left out) as a text table of :data:`COLUMNS`."""
    return bm.format_table([r for r in records if "skipped" not in r], COLUMNS)

"""One model, three contenders: ONNX Runtime, stock TVM, tvm-cocopie.

The comparison behind ``tvm-cocopie demo`` and ``scripts/bench_e2e.py``: compile the
workload with stock TVM's default pipeline and with the cocopie pipeline, check both
against ONNX Runtime, then time all three interleaved (medians).
"""

from __future__ import annotations

import time

from ..api import compile_model
from ..models.workloads import Workload
from . import timing as bm

COLUMNS = [
    ("model", "model", "{}"), ("ort_ms", "ORT ms", "{:.2f}"), ("tvm_ms", "TVM ms", "{:.2f}"),
    ("cocopie_ms", "cocopie ms", "{:.2f}"), ("cocopie_over_ort", "cocopie/ORT", "{:.2f}"),
    ("cocopie_over_tvm", "cocopie/TVM", "{:.3f}"), ("max_abs_err", "max abs err", "{:.2e}"),
    ("cocopie_compile_s", "compile s", "{:.1f}"), ("cocopie_build_s", "build s", "{:.1f}"),
]


def compare_workload(wl: Workload, target, threads: int, repeat: int = 10,
                     max_seconds: float | None = 60.0, stock: bool = True) -> dict:
    """Compile, check and time ``wl``; return one benchmark record."""
    # ORT as it ships (spinning intra-op threads): timed in blocks, its spin cannot
    # reach TVM's timed calls
    sess = bm.ort_session(wl.model, threads, spinning=True)
    ref = sess.run(None, wl.inputs)
    builds = {}
    t0 = time.perf_counter()
    builds["cocopie"] = compile_model(wl.model, target, shapes=wl.shapes)
    cocopie_compile = time.perf_counter() - t0
    if stock:
        builds["tvm"] = compile_model(wl.model, target, shapes=wl.shapes, pipeline="default")
    outs = {k: _as_list(b(**wl.inputs)) for k, b in builds.items()}
    contenders = {"ort": bm.ort_runner(sess, wl.inputs)}
    contenders.update({k: (lambda b=b: b(**wl.inputs)) for k, b in builds.items()})
    # blocks of 4 calls, the first untimed: see interleaved_times on why not 1
    times = bm.interleaved_times(contenders, repeat=repeat, warmup=1, max_seconds=max_seconds,
                                 block=4)
    rec = {
        "model": wl.name,
        "input_shapes": wl.shapes,
        "ort_ms": bm.median(times["ort"]),
        "tvm_ms": bm.median(times["tvm"]) if "tvm" in times else None,
        "cocopie_ms": bm.median(times["cocopie"]),
        "max_abs_err": bm.max_abs_error(outs["cocopie"], ref),
        "max_rel_err": bm.max_rel_error(outs["cocopie"], ref),
        "tvm_max_abs_err": bm.max_abs_error(outs["tvm"], ref) if "tvm" in outs else None,
        "cocopie_compile_s": round(cocopie_compile, 2),  # ONNX import + tvm.compile
        "cocopie_build_s": round(builds["cocopie"].compile_seconds, 2),  # tvm.compile only
        "rounds": len(times["ort"]),
    }
    rec["cocopie_over_ort"] = rec["cocopie_ms"] / rec["ort_ms"]
    rec["cocopie_over_tvm"] = rec["cocopie_ms"] / rec["tvm_ms"] if rec["tvm_ms"] else None
    return rec


def summarize(records: list[dict]) -> dict:
    """The summary keys the e2e issue asks for, over the records that ran."""
    done = [r for r in records if "skipped" not in r]
    return {
        "models": len(done),
        "skipped": [r["model"] for r in records if "skipped" in r],
        "geomean_cocopie_over_ort": _geomean_or_none(r["cocopie_over_ort"] for r in done),
        "geomean_cocopie_over_tvm": _geomean_or_none(r["cocopie_over_tvm"] for r in done),
        "max_abs_err": max((r["max_abs_err"] for r in done), default=None),
        "max_rel_err": max((r["max_rel_err"] for r in done), default=None),
        "max_compile_s": max((r["cocopie_compile_s"] for r in done), default=None),
        "max_build_s": max((r.get("cocopie_build_s", 0) for r in done), default=None),
    }


def _geomean_or_none(values):
    """Geometric mean, or None (valid JSON, unlike NaN) when nothing was measured."""
    vals = [v for v in values if v]
    return bm.geomean(vals) if vals else None


def table(records: list[dict]) -> str:
    """The records (skipped models left out) as a text table of :data:`COLUMNS`."""
    return bm.format_table([r for r in records if "skipped" not in r], COLUMNS)


def _as_list(out):
    return out if isinstance(out, list) else [out]

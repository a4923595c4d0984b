#!/usr/bin/env python
"""End-to-end latency: ONNX Runtime vs OpenVINO vs stock TVM vs tvm-cocopie, per model.

For each model: ONNX Runtime as it ships (CPU, same thread count), OpenVINO's CPU
plugin (``PERFORMANCE_HINT: LATENCY``, ``INFERENCE_NUM_THREADS`` = the thread count,
float32: its bfloat16 default on CPUs that have it is not what the others compute;
threads unpinned unless ``--openvino-pinning``, as TVM's; compiled from the same ONNX
model at the same static input shapes), stock TVM's
default pipeline (``relax_pipeline="default"``: untuned loops) and the cocopie
pipeline, run side by side in one process in blocks of 4 calls (the first untimed);
medians; max abs error of each build against ONNX Runtime. Per cocopie build also
``allocations_per_run`` (``vm.builtin.alloc_tensor``/``alloc_storage`` calls in a run
after the first; ``output_allocations_per_run`` of them make what the model returns,
``intermediate_allocations_per_run`` the rest), ``vm_calls_per_run``,
``kernel_calls_per_run`` (calls that are not the VM runtime's), counted on a separate
instrumented VM, and ``layout_transforms`` (left
after the layout stage). JSON (``--json PATH``): records ``{model, ort_ms,
openvino_ms, tvm_ms, cocopie_ms, cocopie_over_ort, cocopie_over_openvino, max_abs_err,
openvino_max_abs_err, allocations_per_run, ..., cocopie_compile_s (ONNX import +
tvm.compile), cocopie_build_s (tvm.compile only)}`` (``openvino_error`` / ``tvm_error``
when that contender could not build the model), summary ``geomean_cocopie_over_ort``,
``worst_cocopie_over_ort`` (the largest per-model ratio), ``geomean_cocopie_over_openvino``,
``geomean_cocopie_over_tvm``, ``max_abs_err``, ``max_intermediate_allocations_per_run``,
``max_compile_s``, ``max_build_s``, ...
Image models run at 224 px (``yolo_detector`` at 416; the CRNN at its 32x320 text
line), ``--quick`` at 112 (128 and 32x160). TVM's thread pool runs unpinned
(``TVM_BIND_THREADS=0`` unless set): pinned workers stall every fork-join on a shared
machine. ``--busy N`` keeps N processes spinning on a core while each model is timed:
``--busy 1`` on two cores is the thread-pool robustness measurement (how much each
contender degrades when one core is taken).

    python scripts/bench_e2e.py --quick --json bench_e2e.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tvm_cocopie.threads import configure_thread_pool

#: The zoo's newer families, in both lists.
NEW_FAMILIES = [
    "mobilenetv3_large", "mobilenetv3_small", "efficientnet_b0", "shufflenetv2",
    "yolo_detector", "vit_tiny", "crnn_large_vocab",
]
QUICK_MODELS = ["resnet18", "mobilenetv2", "bert_encoder", *NEW_FAMILIES, "ppocr_cls"]
#: The full run adds the real published models of other wheels (models.workloads.
#: WHEEL_WORKLOADS); one that cannot be fetched or imported is recorded as skipped.
FULL_MODELS = [
    "resnet18", "resnet50", "mobilenetv2", "resnext50_32x4d", "vgg16", "bert_encoder",
    *NEW_FAMILIES, "ppocr_det", "ppocr_rec", "ppocr_cls",
]
#: Input size per model ("*": every other model that takes an image size; None: the
#: builder's own). The CRNN's size is its text line's width (the height is 32).
FULL_SIZES = {"*": 224, "yolo_detector": 416, "crnn_large_vocab": None}
QUICK_SIZES = {"*": 112, "yolo_detector": 128, "crnn_large_vocab": 160}


def image_sizes(quick: bool, override: int | None) -> dict:
    """The size policy of this run: ``--image-size`` replaces the square images' size."""
    sizes = dict(QUICK_SIZES if quick else FULL_SIZES)
    if override:
        sizes.update({"*": override, "yolo_detector": override})
    return sizes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="the models at 112x112, few rounds (a few minutes)")
    p.add_argument("--models", help="comma-separated workload names (zoo or ppocr_det/rec/cls)")
    p.add_argument("--threads", type=int, default=min(2, len(os.sched_getaffinity(0))))
    p.add_argument("--image-size", type=int, default=None,
                   help="input size of the zoo's image models (not the CRNN's line width)")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per contender")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop timing a model after this long (>= 3 rounds are kept)")
    p.add_argument("--no-stock", action="store_true", help="skip stock TVM (it is slow)")
    p.add_argument("--no-openvino", action="store_true", help="skip OpenVINO")
    p.add_argument("--openvino-precision", default="f32",
                   help="OpenVINO's INFERENCE_PRECISION_HINT ('default': the plugin's own, "
                        "bf16 on CPUs that have it)")
    p.add_argument("--openvino-pinning", action="store_true",
                   help="let OpenVINO pin its threads (its default; off here, as TVM's pool, "
                        "since pinned workers stall beside other runtimes on a shared machine)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="N background processes spinning on a core while every contender is "
                        "timed (thread-pool robustness: 1 = one of two cores busy)")
    p.add_argument("--json", metavar="PATH", help="write results here (atomically, per model)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --json PATH and run only the missing "
                        "models (refused if they were taken at other settings)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    configure_thread_pool(args.threads, override=True)  # before TVM's pool starts
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tqdm import tqdm

    import tvm_cocopie
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.bench.e2e import compare_workload, summarize, table
    from tvm_cocopie.errors import CocopieError
    from tvm_cocopie.models.workloads import WHEEL_WORKLOADS, get_workload
    from tvm_cocopie.target import host_target

    models = (args.models.split(",") if args.models
              else QUICK_MODELS if args.quick else FULL_MODELS + list(WHEEL_WORKLOADS))
    sizes = image_sizes(args.quick, args.image_size)
    ov_precision = None if args.openvino_precision == "default" else args.openvino_precision
    repeat = args.repeat or (3 if args.quick else 10)
    max_seconds = args.max_seconds or (10.0 if args.quick else 60.0)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"],
              "num-cores": args.threads}
    tvm_cocopie.register()
    settings = {"threads": args.threads, "repeat": repeat, "image_sizes": sizes,
                "max_seconds": max_seconds, "stock": not args.no_stock,
                "openvino": None if args.no_openvino else args.openvino_precision,
                "openvino_pinning": args.openvino_pinning,
                "mcpu": str(target["mcpu"]), "block": 4, "busy": args.busy}
    try:
        records = bm.previous_records(args.json, settings) if args.resume else []
    except CocopieError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finished = {r["model"] for r in records}

    def save():
        if args.json:
            summary = summarize(records)
            summary.update(threads=args.threads, repeat=repeat, image_sizes=sizes,
                           settings=settings)
            bm.write_json_atomic(args.json, bm.bench_result("e2e", records, summary, args.threads))
            return summary
        return None

    for name in tqdm([m for m in models if m not in finished], desc="models", unit="model"):
        try:
            wl = get_workload(name, image_size=sizes.get(name, sizes["*"]))
            with bm.busy_processes(args.busy):
                records.append(compare_workload(
                    wl, target, args.threads, repeat=repeat, max_seconds=max_seconds,
                    stock=not args.no_stock, openvino=not args.no_openvino,
                    openvino_precision=ov_precision, openvino_pinning=args.openvino_pinning))
        except CocopieError as err:  # a model that cannot be fetched, built or compiled
            logging.getLogger("bench_e2e").warning("skipping %s: %s", name, err)
            records.append({"model": name, "skipped": str(err)})
        save()

    summary = save() or summarize(records)
    print(table(records))
    print(f"geomean cocopie/ORT {_fmt(summary['geomean_cocopie_over_ort'])} (worst "
          f"{_fmt(summary['worst_cocopie_over_ort'])}, {summary['worst_cocopie_over_ort_model']}), "
          f"cocopie/OpenVINO {_fmt(summary['geomean_cocopie_over_openvino'])}, "
          f"cocopie/TVM {_fmt(summary['geomean_cocopie_over_tvm'])}")
    for name, why in summary["openvino_failed"].items():
        print(f"OpenVINO could not run {name}: {why}")
    if summary["skipped"]:
        print(f"skipped: {', '.join(summary['skipped'])}")
    return 0


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""End-to-end latency: ONNX Runtime vs stock TVM vs tvm-cocopie, per model.

For each model: ONNX Runtime (CPU, same thread count), stock TVM's default pipeline
(``relax_pipeline="default"``: untuned loops) and the cocopie pipeline, run
interleaved in one process; medians; max abs error of each TVM build against ONNX
Runtime. JSON (``--json PATH``): records ``{model, ort_ms, tvm_ms, cocopie_ms,
max_abs_err, cocopie_compile_s (ONNX import + tvm.compile), cocopie_build_s
(tvm.compile only), ...}``, summary ``geomean_cocopie_over_ort``,
``geomean_cocopie_over_tvm``, ``max_abs_err``, ``max_compile_s``, ``max_build_s``.
TVM's thread pool runs unpinned (``TVM_BIND_THREADS=0`` unless set): pinned workers
stall every fork-join on a shared machine.

    python scripts/bench_e2e.py --quick --json bench_e2e.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tvm_cocopie.threads import configure_thread_pool

QUICK_MODELS = ["resnet18", "mobilenetv2", "bert_encoder"]
FULL_MODELS = [
    "resnet18", "resnet50", "mobilenetv2", "resnext50_32x4d", "vgg16", "bert_encoder",
    "ppocr_det", "ppocr_rec", "ppocr_cls",
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 models at 112x112, few runs (< 2 min)")
    p.add_argument("--models", help="comma-separated workload names (zoo or ppocr_det/rec/cls)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--image-size", type=int, default=None, help="input size for zoo CNNs")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per contender")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop timing a model after this long (>= 3 rounds are kept)")
    p.add_argument("--no-stock", action="store_true", help="skip stock TVM (it is slow)")
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
    from tvm_cocopie.errors import CocopieError, ModelFetchError
    from tvm_cocopie.models.workloads import get_workload
    from tvm_cocopie.target import host_target

    models = (args.models.split(",") if args.models
              else QUICK_MODELS if args.quick else FULL_MODELS)
    image_size = args.image_size or (112 if args.quick else None)
    repeat = args.repeat or (3 if args.quick else 10)
    max_seconds = args.max_seconds or (10.0 if args.quick else 60.0)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"],
              "num-cores": args.threads}
    tvm_cocopie.register()
    settings = {"threads": args.threads, "repeat": repeat, "image_size": image_size,
                "max_seconds": max_seconds, "stock": not args.no_stock,
                "mcpu": str(target["mcpu"]), "block": 4}
    try:
        records = bm.previous_records(args.json, settings) if args.resume else []
    except CocopieError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finished = {r["model"] for r in records}

    def save():
        if args.json:
            summary = summarize(records)
            summary.update(threads=args.threads, repeat=repeat, image_size=image_size,
                           settings=settings)
            bm.write_json_atomic(args.json, bm.bench_result("e2e", records, summary, args.threads))
            return summary
        return None

    for name in tqdm([m for m in models if m not in finished], desc="models", unit="model"):
        try:
            wl = get_workload(name, image_size=image_size)
        except ModelFetchError as err:
            logging.getLogger("bench_e2e").warning("skipping %s: %s", name, err)
            records.append({"model": name, "skipped": str(err)})
            continue
        records.append(compare_workload(wl, target, args.threads, repeat=repeat,
                                        max_seconds=max_seconds, stock=not args.no_stock))
        save()

    summary = save() or summarize(records)
    print(table(records))
    print(f"geomean cocopie/ORT {summary['geomean_cocopie_over_ort']}, "
          f"cocopie/TVM {summary['geomean_cocopie_over_tvm']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

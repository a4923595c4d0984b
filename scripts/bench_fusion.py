#!/usr/bin/env python
"""DNNFusion against stock FuseOps, every other stage of the cocopie pipeline equal.

Per model: kernels launched (PrimFunc calls in ``main``), bytes of intermediate tensors
written, fused kernels left to the generic schedule although they hold a conv/matmul
(fallbacks), end-to-end latency of both builds in blocked interleaved timing, both
checked against ONNX Runtime, and the compile time of DNNFusion on an empty profiling
database and again on the filled one (each model gets a fresh database in ``--work``,
so the first compile measures every yellow candidate it meets).

JSON (``--json PATH``, written atomically after each model; ``--resume`` keeps the
finished ones): records ``{model, family, stock_kernels, dnnfusion_kernels,
kernel_ratio, stock_intermediate_bytes, dnnfusion_intermediate_bytes, bytes_ratio,
dnnfusion_fallbacks, stock_ms, dnnfusion_ms, fusion_speedup, compile_s_first,
compile_s_second, recompile_speedup, stock_max_rel_err, dnnfusion_max_rel_err}``;
summary ``kernel_ratio_cnn``, ``kernel_ratio_transformer``, ``fusion_speedup_cnn``,
``fusion_speedup_transformer`` (geomeans per family), ``recompile_speedup``,
``fallbacks``, ``max_rel_err``, the machine's load.

    python scripts/bench_fusion.py --quick --json bench_fusion.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from tvm_cocopie.threads import configure_thread_pool

QUICK_MODELS = ["resnet18", "mobilenetv2", "bert_encoder"]
FULL_MODELS = [
    "resnet18", "resnet34", "resnet50", "mobilenetv2", "resnext50_32x4d", "vgg16",
    "wrn40_2", "wrn40_2_g4", "bert_encoder", "crnn", "kws_gru",
    "ppocr_det", "ppocr_rec", "ppocr_cls",
    # the families the generalization issue added
    "mobilenetv3_large", "mobilenetv3_small", "efficientnet_b0", "shufflenetv2",
    "yolo_detector", "vit_tiny", "crnn_large_vocab",
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 models at 112x112, few runs")
    p.add_argument("--models", help="comma-separated workload names (zoo or ppocr_det/rec/cls)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--image-size", type=int, default=None, help="input size for zoo CNNs")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per build")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop timing a model after this long (>= 3 rounds are kept)")
    p.add_argument("--work", default="bench_fusion_work",
                   help="folder of the per-model profiling databases")
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
    from tvm_cocopie.bench.fusion import compare_fusion, summarize, table
    from tvm_cocopie.errors import CocopieError, ModelFetchError
    from tvm_cocopie.models.workloads import get_workload
    from tvm_cocopie.target import host_target

    models = (args.models.split(",") if args.models
              else QUICK_MODELS if args.quick else FULL_MODELS)
    image_size = args.image_size or (112 if args.quick else None)
    repeat = args.repeat or (4 if args.quick else 10)
    max_seconds = args.max_seconds or (10.0 if args.quick else 40.0)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"], "num-cores": args.threads}
    tvm_cocopie.register()
    settings = {"threads": args.threads, "repeat": repeat, "image_size": image_size,
                "max_seconds": max_seconds, "mcpu": str(target["mcpu"]), "block": 4}
    try:
        records = bm.previous_records(args.json, settings) if args.resume else []
    except CocopieError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finished = {r["model"] for r in records}
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    def save():
        summary = summarize(records)
        summary.update(threads=args.threads, settings=settings,
                       load_avg=list(os.getloadavg()))
        if args.json:
            bm.write_json_atomic(args.json, bm.bench_result("fusion", records, summary,
                                                            args.threads))
        return summary

    for name in tqdm([m for m in models if m not in finished], desc="models", unit="model"):
        try:
            wl = get_workload(name, image_size=image_size)
        except ModelFetchError as err:
            logging.getLogger("bench_fusion").warning("skipping %s: %s", name, err)
            records.append({"model": name, "skipped": str(err)})
            continue
        db = work / f"fusion_{name}.sqlite"
        for stale in work.glob(f"fusion_{name}.sqlite*"):
            stale.unlink()
        records.append(compare_fusion(wl, target, args.threads, db, repeat=repeat,
                                      max_seconds=max_seconds))
        save()

    summary = save()
    print(table(records))
    print("summary: " + ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()
        if k not in ("settings", "skipped")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

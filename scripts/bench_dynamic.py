#!/usr/bin/env python
"""Dynamic models compiled once (issue 17, SOD²): the dynamic cocopie build against a
cocopie build with the size fixed and against ONNX Runtime, per model and size.

Models (``tvm_cocopie.bench.dynamic.CASES``): the BERT-style encoder with a symbolic
sequence length (S 32, 64, 128, 256), the zoo's large-vocabulary CRNN with a symbolic
line width (W 64, 128, 256, 320), PP-OCRv4 rec with a symbolic width (``{"x": [1, 3,
48, "W"]}``, W 100, 200, 320, 480), PP-OCRv4 det with symbolic height and width
(320x320, 256x416, 480x640) and ResNet-50 with a symbolic batch (224 px, N 1, 2, 4).
Each is compiled once with its symbolic dims (``specialize=False``); at each size a
build with that size fixed is compiled, every output of the dynamic build is checked
against ONNX Runtime (run on the dynamic model, same thread count, as it ships) and the
static build, and the three are timed side by side in blocks of 4 calls (the first
untimed), medians. Per model, at its largest size: peak memory of the dynamic build and
of ONNX Runtime, each in a subprocess (RSS peak over the RSS after loading and trimming
the heap, less the code pages the runs faulted in: ``tvm_cocopie.bench.memory``). A model that cannot be
fetched or compiled is recorded (``{"model", "error"}``) and the run goes on.

JSON (``--json PATH``, written atomically after every size; ``--resume`` keeps the
finished sizes and models): ``records`` per (model, size) ``{model, size, input_shapes,
static_ms, dynamic_ms, ort_ms, dynamic_over_static, dynamic_over_ort, max_abs_err,
max_rel_err, matches_ort, static_max_abs_err, dynamic_allocations_per_run, ...,
load_avg}``, ``models`` per model ``{model, compile_s (ONNX import + tvm.compile of the
dynamic build), build_s, sizes, dynamic_memory_mib, ort_memory_mib, memory_over_ort,
memory}`` or ``{model, error}``; summary ``dynamic_over_static``, ``dynamic_over_ort``,
``memory_over_ort`` (geomeans), ``max_abs_err``, ``all_match_ort``, ``models``,
``failed``, the goals (1.15, 1.0), the machine's load.

    python scripts/bench_dynamic.py --quick --json bench_dynamic.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tvm_cocopie.threads import configure_thread_pool


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="the CRNN and PP-OCR rec at two widths each, few rounds")
    p.add_argument("--models", help="comma-separated: bert_encoder, crnn_large_vocab, "
                                    "ppocr_rec, ppocr_det, resnet50")
    p.add_argument("--threads", type=int, default=min(2, len(os.sched_getaffinity(0))))
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per size")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop timing a size after this long (>= 3 rounds are kept)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory measure")
    p.add_argument("--divisible-dims", action="store_true",
                   help="dynamic builds with PipelineOptions(divisible_dims=True): dims the "
                        "model takes only in multiples written as multiples")
    p.add_argument("--json", metavar="PATH", help="write results here (atomically, per size)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --json PATH and run only the missing "
                        "sizes and models (refused if they were taken at other settings)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    configure_thread_pool(args.threads, override=True)  # before TVM's pool starts
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tqdm import tqdm

    import tvm_cocopie
    from tvm_cocopie.bench import dynamic
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.errors import CocopieError
    from tvm_cocopie.target import host_target

    names = (args.models.split(",") if args.models
             else list(dynamic.QUICK_MODELS) if args.quick else list(dynamic.CASES))
    unknown = sorted(set(names) - set(dynamic.CASES))
    if unknown:
        print(f"error: unknown models {unknown}; known: {', '.join(dynamic.CASES)}",
              file=sys.stderr)
        return 2
    repeat = args.repeat or (3 if args.quick else 10)
    max_seconds = args.max_seconds or (10.0 if args.quick else 60.0)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"], "num-cores": args.threads}
    tvm_cocopie.register()
    settings = {"threads": args.threads, "repeat": repeat, "max_seconds": max_seconds,
                "divisible_dims": args.divisible_dims,
                "quick": args.quick, "mcpu": str(target["mcpu"]), "block": 4,
                "memory": not args.no_memory}
    try:
        records = bm.previous_records(args.json, settings) if args.resume else []
    except CocopieError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # a failed model or size is tried again
    records = [r for r in records if "error" not in r]
    models = ([m for m in bm.previous_part(args.json, "models") if "error" not in m]
              if args.resume else [])
    finished = {m["model"] for m in models}

    def save():
        summary = dynamic.summarize(records, models)
        summary.update(threads=args.threads, settings=settings, load_avg=list(os.getloadavg()))
        if args.json:
            result = bm.bench_result("dynamic", records, summary, args.threads)
            result["models"] = models
            bm.write_json_atomic(args.json, result)
        return summary

    def on_record(record):
        records.append(record)
        save()

    bar = tqdm([n for n in names if n not in finished], desc="models", unit="model")
    for name in bar:
        bar.set_postfix_str(name)
        case = dynamic.CASES[name]
        sizes = case.quick_sizes if args.quick else case.sizes
        done = [r["size"] for r in records if r["model"] == name]
        model_rec, _ = dynamic.bench_model(
            case, target, args.threads, sizes, repeat=repeat, max_seconds=max_seconds,
            memory=not args.no_memory, done=done, on_record=on_record,
            divisible_dims=args.divisible_dims)
        models.append(model_rec)
        save()

    summary = save()
    print(dynamic.tables(records, models))
    print(f"dynamic/static {_fmt(summary['dynamic_over_static'])} (goal <= "
          f"{dynamic.GOALS['dynamic_over_static']}), dynamic/ORT "
          f"{_fmt(summary['dynamic_over_ort'])} (goal <= {dynamic.GOALS['dynamic_over_ort']}), "
          f"memory/ORT {_fmt(summary['memory_over_ort'])} (geomeans); max abs err "
          f"{_fmt(summary['max_abs_err'], '.1e')}, every output matches ORT: "
          f"{summary['all_match_ort']}; load {', '.join(f'{x:.2f}' for x in summary['load_avg'])}")
    for where, why in {**summary["failed"], **summary["failed_sizes"]}.items():
        print(f"failed: {where}: {why}")
    for where, why in summary["static_failed"].items():
        print(f"static build failed: {where}: {why}")
    if summary["mismatched"]:
        print(f"outputs differ from ORT: {', '.join(summary['mismatched'])}")
    return 0


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    sys.exit(main())

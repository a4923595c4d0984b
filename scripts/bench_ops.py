#!/usr/bin/env python
"""Single operators against ONNX Runtime: cases far off its speed, kernel by kernel.

Each case (:data:`tvm_cocopie.bench.ops.CASES`: transposed and 3-D convs, resizes,
normalizations, attention products, reductions... at shapes real models use) is compiled
with the cocopie pipeline, checked against ONNX Runtime, timed against it in blocks of 4
calls (medians), and its kernels timed alone inside the VM. ``kernels_over_ort`` is the
figure to watch: a single operator's call also copies its input and output, which a
model pays once.

JSON (``--json PATH``, written after every case, ``--resume`` to go on): records
``{case, ort_ms, cocopie_ms, kernels_ms, kernels_over_ort, cocopie_over_ort,
max_abs_err, max_rel_err, slowest_kernels, compile_s}`` (``error`` for a failing case);
summary ``geomean_kernels_over_ort``, ``worst_kernels_over_ort``, ``worst_case``,
``over_2x_ort``, ``failed``, ``max_rel_err``, the machine's load.

    python scripts/bench_ops.py --quick --json bench_ops.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tvm_cocopie.threads import configure_thread_pool


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="six cases, few rounds (~1 min)")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--resume", action="store_true",
                   help="keep the records in --json PATH and run the missing cases")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    configure_thread_pool(args.threads, override=True)  # before TVM's pool starts
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tqdm import tqdm

    import tvm_cocopie
    from tvm_cocopie.bench import ops
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.errors import CocopieError
    from tvm_cocopie.target import host_target

    names = (args.cases.split(",") if args.cases
             else list(ops.QUICK) if args.quick else list(ops.CASES))
    unknown = sorted(set(names) - set(ops.CASES))
    if unknown:
        print(f"error: unknown cases {unknown}; known: {', '.join(ops.CASES)}", file=sys.stderr)
        return 2
    repeat = args.repeat or (3 if args.quick else 8)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"], "num-cores": args.threads}
    tvm_cocopie.register()
    settings = {"threads": args.threads, "repeat": repeat, "quick": args.quick,
                "mcpu": str(target["mcpu"]), "block": 4}
    try:
        records = bm.previous_records(args.json, settings) if args.resume else []
    except CocopieError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    records = [r for r in records if "error" not in r]  # a failed case is tried again
    done = {r["case"] for r in records}

    def save():
        summary = ops.summarize(records)
        summary.update(threads=args.threads, settings=settings, load_avg=list(os.getloadavg()))
        if args.json:
            bm.write_json_atomic(args.json, bm.bench_result("ops", records, summary,
                                                            args.threads))
        return summary

    bar = tqdm([n for n in names if n not in done], desc="cases", unit="case")
    for name in bar:
        bar.set_postfix_str(name)
        records.append(ops.measure_case(name, target, args.threads, repeat=repeat))
        save()
    summary = save()
    print(bm.format_table(records, ops.COLUMNS))
    print(f"geomean kernels/ORT {summary['geomean_kernels_over_ort'] or float('nan'):.3f}, "
          f"worst {summary['worst_kernels_over_ort'] or float('nan'):.2f} "
          f"({summary['worst_case']}); over 2x: {', '.join(summary['over_2x_ort']) or 'none'}; "
          f"failed: {', '.join(summary['failed']) or 'none'}; load {summary['load_avg']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

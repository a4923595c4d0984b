#!/usr/bin/env python
"""Pattern-sparse convolution (PatDNN) per layer and end to end, against our dense convs,
ONNX Runtime and CSR.

Layers: VGG-16's unique 3x3 convs L1-L9 (224x224 input), 8 patterns, 3.6x connectivity
(L1 keeps its connections), conv + bias + ReLU, timed with 1 and 2 threads
(``--threads``) in blocked interleaved rounds: our dense conv (Winograd where chosen)
and the direct one, ONNX Runtime, the pipeline's pattern kernel, the breakdown of the
thesis' Fig. 2.13 (no-opt, + reorder/FKW, + LRE, + tuning) and CSR
(:mod:`tvm_cocopie.bench.pattern` says how). Models: VGG-16 and ResNet-50 with their
3x3 convs pattern-pruned, through cocopie with and without the pattern kernels and
through ONNX Runtime.

JSON (``--json PATH``, written atomically after each layer and model; ``--resume``
keeps the finished ones): ``records`` (layers), ``models``; summary geomeans
``speedup_vs_dense``, ``speedup_vs_dense_direct``, ``speedup_vs_ort``, ``speedup_vs_csr``
(the tuned kernel), ``pipeline_speedup_vs_dense`` (untuned, as the pipeline builds it),
``breakdown_reorder`` / ``_lre`` / ``_tuning``, ``fkw_index_saving`` (FKW's index bytes
against CSR's), ``e2e_speedup_vgg16`` / ``e2e_speedup_resnet50`` (over dense cocopie on
the same pruned model) and ``e2e_speedup_vs_ort_*``, the largest error, the load.

    python scripts/bench_pattern.py --quick --json bench_pattern.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tvm_cocopie.threads import configure_thread_pool

MODELS = ("vgg16", "resnet50")
LAYER_COLUMNS = [("layer", "layer", "{}"), ("threads", "thr", "{}"),
                 ("dense_ms", "dense ms", "{:.3f}"), ("ort_ms", "ORT ms", "{:.3f}"),
                 ("csr_ms", "CSR ms", "{:.3f}"), ("tuned_ms", "pattern ms", "{:.3f}"),
                 ("speedup_vs_dense", "x dense", "{:.2f}"),
                 ("speedup_vs_dense_direct", "x direct", "{:.2f}"),
                 ("speedup_vs_ort", "x ORT", "{:.2f}"), ("speedup_vs_csr", "x CSR", "{:.2f}"),
                 ("tuned_knobs", "tile", "{}")]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="layers L4 and L9, VGG-16 only at 128 px, few rounds")
    p.add_argument("--layers", help="comma-separated layer names (L1..L9)")
    p.add_argument("--models", help=f"comma-separated: {', '.join(MODELS)}")
    p.add_argument("--threads", default=None,
                   help="comma-separated thread counts (default: 1 and this machine's cores)")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per layer/model")
    p.add_argument("--no-layers", action="store_true", help="models only")
    p.add_argument("--no-models", action="store_true", help="layers only")
    p.add_argument("--no-tune", action="store_true",
                   help="skip the measured register-tile choice (tuned = untuned)")
    p.add_argument("--json", metavar="PATH", help="write results here (atomically)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --json PATH, run only the missing ones "
                        "(refused if they were taken at other settings)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    threads = ([int(t) for t in args.threads.split(",")] if args.threads
               else sorted({1, cores}))
    configure_thread_pool(max(threads), override=True)  # before TVM's pool starts
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tqdm import tqdm

    import tvm_cocopie
    from tvm_cocopie.bench import pattern
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.errors import CocopieError
    from tvm_cocopie.target import host_target

    names = (args.layers.split(",") if args.layers
             else list(pattern.QUICK_LAYERS) if args.quick else None)
    layers = pattern.vgg_layers(names)
    known = [n for n, *_ in pattern.VGG_LAYERS]
    if names and len(layers) != len(names):
        print(f"error: unknown layers {sorted(set(names) - set(known))}; known: "
              f"{', '.join(known)}", file=sys.stderr)
        return 2
    models = (args.models.split(",") if args.models
              else ["vgg16"] if args.quick else list(MODELS))
    if set(models) - set(MODELS):
        print(f"error: unknown models {sorted(set(models) - set(MODELS))}; known: "
              f"{', '.join(MODELS)}", file=sys.stderr)
        return 2
    image_size = 128 if args.quick else None
    repeat = args.repeat or (5 if args.quick else 10)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"], "num-cores": max(threads)}
    tvm_cocopie.register()
    settings = {"threads": threads, "repeat": repeat, "quick": args.quick,
                "mcpu": str(target["mcpu"]), "block": 4, "tune": not args.no_tune,
                "image_size": image_size}
    try:
        records = bm.previous_records(args.json, settings) if args.resume else []
    except CocopieError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    model_records = bm.previous_part(args.json, "models") if args.resume else []

    def save():
        summary = pattern.summarize(records, model_records)
        summary.update(threads=threads, settings=settings, load_avg=list(os.getloadavg()))
        if args.json:
            result = bm.bench_result("pattern", records, summary, max(threads))
            result["models"] = model_records
            bm.write_json_atomic(args.json, result)
        return summary

    if not args.no_layers:
        done = {r["layer"] for r in records}
        for layer in tqdm([x for x in layers if x.name not in done], desc="layers",
                          unit="layer"):
            records.extend(pattern.compare_layer(layer, target, threads, repeat=repeat,
                                                 tuning=not args.no_tune))
            save()
    if not args.no_models:
        done = {r["model"] for r in model_records}
        for name in tqdm([m for m in models if m not in done], desc="models", unit="model"):
            model_records.extend(pattern.compare_model(name, target, threads, repeat=repeat,
                                                       image_size=image_size))
            save()

    summary = save()
    if records:
        print(bm.format_table(records, LAYER_COLUMNS))
    for r in model_records:
        print(f"{r['model']} {r['threads']} thr: pattern {r['pattern_ms']:.1f} ms, dense "
              f"{r['dense_ms']:.1f} ms, ORT {r['ort_ms']:.1f} ms -> x{r['speedup_vs_dense']:.2f} "
              f"dense, x{r['speedup_vs_ort']:.2f} ORT")
    print("summary: " + ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()
        if k != "settings"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

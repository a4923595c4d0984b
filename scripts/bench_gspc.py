#!/usr/bin/env python
"""Grouped convolution (GSPC) per layer and per model, against ONNX Runtime, stock TVM
and the CPU layer's grouped conv before GSPC.

Layers: every distinct grouped conv of WRN-40-2, ResNet-34 and MobileNetV2 in their
G(2), G(4), G(8), G(16), G(N) variants (Gibson's thesis, chapter 5) and of ResNeXt-50,
each a conv + bias + ReLU, timed with 1 and 2 threads (``--threads``) in blocked
interleaved rounds: cocopie, previous (``PipelineOptions(grouped="blocked")``), stock
TVM's default pipeline, ONNX Runtime (:mod:`tvm_cocopie.bench.gspc` says how). Models:
each variant and its S model end to end, cocopie and ONNX Runtime, with their MACs:
the thesis' Tables 5.2-5.4 in our numbers (ms and speedup over S per G(g)).

With ``--ms-trials 64``, the largest layer of each variant is also MetaSchedule-tuned
both ways (stock TVM in MetaSchedule's space, cocopie in its own) and timed against the
untuned cocopie kernel.

JSON (``--json PATH``, written atomically after each layer and model; ``--resume``
keeps the finished ones): ``records`` (layers), ``models``, ``tables``, ``tuned``; summary
``mean_speedup_vs_tvm_default``, ``geomean_speedup_vs_ort`` (G(2)-G(16) layers, not
depthwise), ``min_speedup_vs_ort``, ``layers_slower_than_ort``, ``speedup_vs_previous``
(geomean), ``untuned_over_ms_tuned`` and ``tuned_over_ms_tuned`` (geomeans over the
tuned layers), ``g2_speedup_over_s`` per family and thread count, the largest errors,
the machine's load.

    python scripts/bench_gspc.py --quick --json bench_gspc.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from tvm_cocopie.threads import configure_thread_pool

#: --quick: WRN-40-2's layers and three of its variants, ResNeXt-50's layers
QUICK_FAMILIES = ["wrn40_2", "resnext50"]
QUICK_MODEL_GROUPS = ["S", 2, 8]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="WRN-40-2 and ResNeXt-50 layers, 3 WRN variants, few rounds")
    p.add_argument("--families", help="comma-separated: wrn40_2, resnet34, mobilenetv2, "
                                      "resnext50")
    p.add_argument("--threads", default=None,
                   help="comma-separated thread counts (default: 1 and this machine's cores)")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per layer/model")
    p.add_argument("--no-layers", action="store_true", help="models only")
    p.add_argument("--no-models", action="store_true", help="layers only")
    p.add_argument("--no-stock", action="store_true", help="skip stock TVM's default pipeline")
    p.add_argument("--ms-trials", type=int, default=0,
                   help="MetaSchedule trials per tuned layer (0: no tuning; the issue's "
                        "comparison is 64): stock TVM in MetaSchedule's space and cocopie in "
                        "its own, timed against untuned cocopie at the largest thread count")
    p.add_argument("--ms-layers", type=int, default=None,
                   help="tune at most this many layers (the largest of each variant first)")
    p.add_argument("--ms-work", default="bench_gspc_tuning",
                   help="folder of the tuning work dirs (a finished one is reused)")
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
    from tvm_cocopie.bench import gspc
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.errors import CocopieError
    from tvm_cocopie.models import build
    from tvm_cocopie.target import host_target
    from tvm_cocopie.threads import set_pool_threads

    families = (args.families.split(",") if args.families
                else QUICK_FAMILIES if args.quick else list(gspc.FAMILIES))
    unknown = [f for f in families if f not in gspc.FAMILIES]
    if unknown:
        print(f"error: unknown families {unknown}; known: {', '.join(gspc.FAMILIES)}",
              file=sys.stderr)
        return 2
    repeat = args.repeat or (5 if args.quick else 10)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"], "num-cores": max(threads)}
    tvm_cocopie.register()
    settings = {"threads": threads, "repeat": repeat, "quick": args.quick,
                "mcpu": str(target["mcpu"]), "block": 4, "stock": not args.no_stock,
                "ms_trials": args.ms_trials}
    try:
        previous = bm.previous_records(args.json, settings) if args.resume else []
        models_done = bm.previous_part(args.json, "models") if args.resume else []
    except CocopieError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    records, model_records = list(previous), list(models_done)
    tuned_records = bm.previous_part(args.json, "tuned") if args.resume else []

    def save():
        summary = gspc.summarize(records, model_records, tuned_records)
        summary.update(threads=threads, settings=settings, load_avg=list(os.getloadavg()))
        if args.json:
            result = bm.bench_result("gspc", records, summary, max(threads))
            result["models"] = model_records
            result["tables"] = gspc.thesis_tables(model_records)
            result["tuned"] = tuned_records
            bm.write_json_atomic(args.json, result)
        return summary

    # the variants each family is measured in, S first
    variants = []
    for family in families:
        s_model, by_group = gspc.FAMILIES[family]
        groups = [g for g in (["S", *by_group]) if not args.quick or family == "resnext50"
                  or g in QUICK_MODEL_GROUPS]
        for g in groups:
            name = s_model if g == "S" else by_group[g]
            if name:
                variants.append((family, g, name))
    # each grouped variant's layers, read once from its graph (S models have none to time)
    layers_of = {name: gspc.grouped_layers(build(name)) for _, g, name in variants
                 if g != "S" and (not args.no_layers or args.ms_trials)}

    if not args.no_layers:
        layers = []
        for variant_layers in layers_of.values():
            for layer in variant_layers:
                if layer not in layers:
                    layers.append(layer)
        done = {r["layer"] for r in records}
        for layer in tqdm([x for x in layers if x.name not in done], desc="layers",
                          unit="layer"):
            records.extend(gspc.compare_layer(layer, target, threads, repeat=repeat,
                                              stock=not args.no_stock))
            save()
    if args.ms_trials:
        # the largest layer of each variant, variants in order, up to --ms-layers
        chosen = []
        for variant_layers in layers_of.values():
            if variant_layers:
                top = max(variant_layers, key=lambda x: x.macs)
                if top not in chosen:
                    chosen.append(top)
        chosen = chosen[:args.ms_layers] if args.ms_layers else chosen
        set_pool_threads(max(threads))
        done = {r["layer"] for r in tuned_records}
        for layer in tqdm([x for x in chosen if x.name not in done], desc="tuned layers",
                          unit="layer"):
            tuned_records.append(tune_layer(layer, target, args.ms_work, args.ms_trials,
                                            repeat=repeat))
            save()
    if not args.no_models:
        done = {r["model"] for r in model_records}
        for family, g, name in tqdm([v for v in variants if v[2] not in done], desc="models",
                                    unit="model"):
            model_records.extend(gspc.compare_model(name, family, g, target, threads,
                                                    repeat=repeat))
            save()

    summary = save()
    if records:
        print(bm.format_table(records, gspc.LAYER_COLUMNS))
    if model_records:
        print(bm.format_table(gspc.thesis_tables(model_records), gspc.TABLE_COLUMNS))
    print("summary: " + ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()
        if k != "settings"))
    return 0


def tune_layer(layer, target, work_dir, trials: int = 64,
               repeat: int = 10, max_seconds: float | None = 20.0,
               population: int = 64) -> dict:
    """MetaSchedule with ``trials`` trials on ``layer``, both ways, timed against the
    untuned cocopie kernel at the pool's thread count: stock TVM's grouped conv (NCHW,
    TVM's own legalization) in MetaSchedule's stock CPU space, and the cocopie kernel in
    cocopie's design space (:mod:`..transfer_tuning.space`: register tile, loop order,
    padding placement, unroll). Each tuning leaves its work dir under ``work_dir``
    (reused when finished: ``tuning.json`` says so)."""
    from pathlib import Path

    from tvm_cocopie.bench import gspc
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.pipeline import PipelineOptions, cocopie_pipeline
    from tvm_cocopie.target import cpu_info, parse_target
    from tvm_cocopie.topi.cpu.tiling import channel_block
    from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels
    from tvm_cocopie.transfer_tuning.tune import read_tuning, tune_model

    target = parse_target(target)
    info = cpu_info(target)
    w, b, x = gspc.layer_data(layer)
    ib, ob = channel_block(layer.c, info), channel_block(layer.o, info)
    xb = gspc.blocked_array(x, ib)
    blocked = gspc.relax_layer(layer, w, b, ib, ob)
    plain = gspc.relax_layer(layer, w, b, 0, 0)
    # stock TVM: its own layout, legalization and fusion; only MetaSchedule's schedules
    stock = PipelineOptions(rewrite=False, layout=False, custom_legalize=False, schedule=False)
    key = layer.name.replace(" ", "_").replace("@", "at").replace(">", "")
    runs, outs = {}, {}
    runs["cocopie"], outs["cocopie"] = gspc.vm_runner(blocked, target, xb, cocopie_pipeline())
    for name, mod, arg, options, space in (
            ("ms_tuned", plain, x, stock, "stock"),
            ("cocopie_tuned", blocked, xb, PipelineOptions(), "cocopie")):
        log_dir = Path(work_dir) / f"{key}_{space}_{trials}"
        if read_tuning(log_dir) is None:
            kernels = extract_kernels(mod, target, options=options)
            tune_model(mod, target, log_dir, trials, kernels=kernels, space=space,
                       population=population)
        runs[name], outs[name] = gspc.vm_runner(
            mod, target, arg, cocopie_pipeline(**vars(options.replace(database=str(log_dir)))),
            "default" if space == "stock" else None)
    ref = outs["ms_tuned"]
    errs = {k: bm.max_rel_error(gspc.nchw_array(v), ref) for k, v in outs.items()}
    ms_ = bm.time_per_call(runs, repeat, max_seconds)
    return {"layer": layer.name, "trials": trials, "threads": info.num_cores,
            **{f"{k}_ms": v for k, v in ms_.items()},
            "untuned_over_ms_tuned": ms_["ms_tuned"] / ms_["cocopie"],
            "tuned_over_ms_tuned": ms_["ms_tuned"] / ms_["cocopie_tuned"],
            "max_rel_err": max(errs.values()), "out_hw": list(layer.out_hw)}


if __name__ == "__main__":
    sys.exit(main())

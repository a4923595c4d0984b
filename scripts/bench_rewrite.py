#!/usr/bin/env python
"""Math-property graph rewriting (DNNFusion §3.3): rules, FLOPs, kernels, latency.

Part 1, the rule table: every rule is applied to its generated example graph, checked
for a numeric match (stock TVM build of both versions), for its precondition guard,
and for its FLOP accounting. Part 2, per model (zoo, PP-OCR, and generated graphs
holding the thesis' Table 3.4 patterns): FLOPs and operator count before and after
rewriting, fused kernel count with and without it, end-to-end latency of the cocopie
pipeline with ``options={"rewrite": False}`` vs default (interleaved, medians), and
the max error of both against ONNX Runtime.

JSON (``--json PATH``): records ``{"kind": "rule", ...}`` and ``{"kind": "model",
model, flops_before, flops_after, flop_ratio, ops_before, ops_after, kernels_without,
kernels_with, ms_without, ms_with, speedup, speedup_paired_median, speedup_paired_iqr,
speedup_best, max_rel_err, ...}``; summary ``rules``, ``rules_tested``, ``categories``,
``geomean_flop_ratio``, ``geomean_speedup`` (and both split into the generated graphs
and the real models), ``max_rel_err``, ``all_match_ort``.

Latency: rounds of a block of 4 calls with and 4 without rewriting, the first call
of each block untimed (:func:`tvm_cocopie.bench.timing.interleaved_times`,
``block=4``), alternating which goes first; ``speedup`` is the ratio of the medians,
``speedup_paired_median`` the median of the per-round ratios of the block medians,
with its interquartile range (on a loaded machine that range is the honest error
bar). A model with nothing to rewrite compiles the same graph twice, so its speedup
shows the noise floor.

    python scripts/bench_rewrite.py --quick --json bench_rewrite.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from tvm_cocopie.threads import configure_thread_pool

log = logging.getLogger("bench_rewrite")

#: graphs generated to hold the thesis' Table 3.4 patterns and the simplifications
#: (:mod:`tvm_cocopie.relay_passes.rewriting.generated`)
GENERATED = ("table34", "bn_pad_cnn", "layout_sandwich")
QUICK_MODELS = ["table34", "resnet18", "mobilenetv2"]
FULL_MODELS = ["table34", "bn_pad_cnn", "layout_sandwich", "resnet18", "resnet50",
               "mobilenetv2", "resnext50_32x4d", "vgg16", "bert_encoder", "ppocr_det",
               "ppocr_cls", "ppocr_rec"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 small models, few runs (< 2 min)")
    p.add_argument("--models", help="comma-separated: zoo names, ppocr_*, " + ", ".join(GENERATED))
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--no-rules", action="store_true", help="skip the rule-table part")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--resume", action="store_true",
                   help="keep the model records already in --json PATH, run the rest")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def load(name: str, image_size: int | None):
    from tvm_cocopie.models.workloads import get_workload
    from tvm_cocopie.relay_passes.rewriting.generated import GENERATED as BUILDERS

    if name in BUILDERS:  # table34: m x n = 64 x 64 in --quick, 512 x 512 by default
        build, default = BUILDERS[name]
        if name == "table34" and image_size is not None:
            return build(max(image_size, 64))
        return build(image_size or default)
    wl = get_workload(name, image_size=image_size)
    return wl.model, wl.inputs


# --------------------------------------------------------------------------- measurements

def rule_records() -> list[dict]:
    import numpy as np
    import tvm
    from tvm import relax

    from tvm_cocopie.relay_passes import rewriting as rw
    from tvm_cocopie.relay_passes.rewriting.cost import module_cost
    from tvm_cocopie.relay_passes.rewriting.examples import build_example

    out = []
    for rule in rw.RULES:
        rec = {"kind": "rule", "rule": rule.name, "category": rule.category}
        mod, inputs = build_example(rule)
        new, stats = rw.rewrite_module(mod, [rule])
        rec["matches"] = stats.applied[rule.name] >= 1
        before, after = module_cost(mod), module_cost(new)
        rec.update(flops_before=before.flops, flops_after=after.flops,
                   flop_accounting=stats.before == before and stats.after == after
                   and (before - after).positive())
        both = tvm.IRModule({"main": mod["main"],
                             "rw": new["main"].with_attr("global_symbol", "rw")})
        vm = relax.VirtualMachine(tvm.compile(both, target="llvm"), tvm.cpu())
        res = []
        for fname, fn in (("main", mod["main"]), ("rw", new["main"])):
            res.append(vm[fname](*[tvm.runtime.tensor(inputs[p.name]) for p in fn.params]).numpy())
        scale = float(np.max(np.abs(res[0]))) or 1.0
        rec["max_rel_err"] = float(np.max(np.abs(res[1].astype(np.float64) - res[0]))) / scale
        if rule.counter is not None:
            cmod, _ = build_example(rule, rule.counter)
            rec["guard_holds"] = rw.rewrite_module(cmod, [rule])[1].applied[rule.name] == 0
        rec["ok"] = bool(rec["matches"] and rec["flop_accounting"] and rec["max_rel_err"] <= 1e-5
                         and rec.get("guard_holds", True))
        out.append(rec)
    return out


def count_kernels(mod, target, rewrite: bool) -> int:
    """PrimFuncs left after the cocopie pipeline's fusion stage."""
    import tvm

    from tvm_cocopie.pipeline import PipelineOptions, run_until

    mod = run_until(mod, target, "fusion", PipelineOptions(rewrite=rewrite))
    return sum(1 for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


def model_record(name, model, feeds, target, threads, repeat) -> dict:
    from tvm_cocopie.api import compile_model
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.frontend.importer import from_onnx
    from tvm_cocopie.relay_passes import rewriting as rw
    from tvm_cocopie.relay_passes.rewriting.cost import module_cost
    from tvm_cocopie.target import parse_target

    shapes = {k: list(v.shape) for k, v in feeds.items()}
    mod = from_onnx(model, shapes=shapes)
    t0 = time.perf_counter()
    new, stats = rw.rewrite_module(mod, rw.RULES)
    rewrite_s = time.perf_counter() - t0
    before, after = module_cost(mod), module_cost(new)
    tgt = parse_target(target)
    rec = {
        "kind": "model", "model": name, "input_shapes": shapes,
        "flops_before": before.flops, "flops_after": after.flops,
        "flop_ratio": after.flops / before.flops if before.flops else 1.0,
        "bytes_before": before.bytes, "bytes_after": after.bytes,
        "ops_before": before.ops, "ops_after": after.ops,
        "partitions": stats.partitions, "rewrites": sum(stats.applied.values()),
        "rules_applied": dict(stats.applied), "rewrite_s": round(rewrite_s, 3),
        "kernels_without": count_kernels(mod, tgt, False),
        "kernels_with": count_kernels(mod, tgt, True),
    }
    ref = bm.ort_session(model, threads).run(None, feeds)
    builds = {
        "without": compile_model(model, target, shapes=shapes, options={"rewrite": False}),
        "with": compile_model(model, target, shapes=shapes),
    }
    for key, b in builds.items():
        out = b(**feeds)
        rec[f"max_rel_err_{key}"] = bm.max_rel_error(out if isinstance(out, list) else [out], ref)
    rec.update(paired_speedup(builds, feeds, repeat))
    rec["max_rel_err"] = rec["max_rel_err_with"]
    rec["matches_ort"] = rec["max_rel_err"] <= 1e-3
    return rec


def paired_speedup(builds: dict, feeds: dict, repeat: int, max_seconds: float = 60.0,
                   block: int = 4) -> dict:
    """Latency with and without rewriting, measured side by side: rounds of a block of
    ``block`` calls each, the first call of a block untimed (it pays for the switch),
    the order alternating between rounds (no contender always runs first on a machine
    whose load drifts); medians of each, and the median of the per-round ratios of the
    block medians with its interquartile range (the spread a reader should trust)."""
    import statistics

    from tvm_cocopie.bench import timing as bm

    calls = {k: (lambda b=b: b(**feeds)) for k, b in builds.items()}
    for fn in calls.values():  # warm-up
        fn()
    times = {"without": [], "with": []}
    ratios = []
    start = time.perf_counter()
    for i in range(repeat):
        order = ("without", "with") if i % 2 == 0 else ("with", "without")
        got = bm.interleaved_times({k: calls[k] for k in order}, repeat=1, warmup=0,
                                   block=block)
        for k in order:
            times[k].extend(got[k])
        ratios.append(bm.median(got["without"]) / bm.median(got["with"]))
        if i >= 5 and time.perf_counter() - start > max_seconds:
            break
    ratios.sort()
    best = min(times["without"]) / min(times["with"])
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    ms_without, ms_with = bm.median(times["without"]), bm.median(times["with"])
    return {"ms_without": ms_without, "ms_with": ms_with, "speedup": ms_without / ms_with,
            "speedup_paired_median": bm.median(ratios),
            "speedup_paired_iqr": [q[0], q[2]], "speedup_best": best,
            "rounds": len(ratios), "block": block}


def summarize(records: list[dict]) -> dict:
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.relay_passes import rewriting as rw

    rules = [r for r in records if r["kind"] == "rule"]
    models = [r for r in records if r["kind"] == "model" and "skipped" not in r]
    return {
        "rules": len(rw.RULES),
        "rules_tested": sum(1 for r in rules if r["ok"]),
        "categories": {k: len(v) for k, v in rw.rules_by_category().items()},
        "excluded_rules": rw.EXCLUDED,
        "models": len(models),
        "geomean_flop_ratio": bm.geomean(r["flop_ratio"] for r in models),
        "geomean_speedup": bm.geomean(r["speedup"] for r in models),
        "geomean_speedup_generated": bm.geomean(r["speedup"] for r in models
                                                if r["model"] in GENERATED),
        "geomean_speedup_real": bm.geomean(r["speedup"] for r in models
                                           if r["model"] not in GENERATED),
        "geomean_flop_ratio_real": bm.geomean(r["flop_ratio"] for r in models
                                              if r["model"] not in GENERATED),
        "models_unchanged": sorted(r["model"] for r in models if not r["rewrites"]),
        "kernels_without": sum(r["kernels_without"] for r in models),
        "kernels_with": sum(r["kernels_with"] for r in models),
        "max_rel_err": max((r["max_rel_err"] for r in models), default=None),
        "all_match_ort": all(r["matches_ort"] for r in models),
    }


def _previous(path) -> list[dict]:
    import json

    if not path or not os.path.exists(path):
        return []
    with open(path) as fh:
        return list(json.load(fh).get("records", []))


def main(argv=None) -> int:
    args = parse_args(argv)
    configure_thread_pool(args.threads, override=True)  # before TVM's pool starts
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    import tvm_cocopie
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.errors import ModelFetchError
    from tvm_cocopie.target import host_target

    tvm_cocopie.register()
    models = (args.models.split(",") if args.models
              else QUICK_MODELS if args.quick else FULL_MODELS)
    image_size = args.image_size or (48 if args.quick else None)
    repeat = args.repeat or (8 if args.quick else 30)
    target = {"kind": "llvm", "mcpu": host_target().attrs["mcpu"], "num-cores": args.threads}
    records: list[dict] = _previous(args.json) if args.resume else []
    done = {r["model"] for r in records if r["kind"] == "model"}

    def save():
        summary = summarize(records)
        summary.update(threads=args.threads, repeat=repeat, image_size=image_size)
        if args.json:
            bm.write_json_atomic(args.json, bm.bench_result("rewrite", records, summary,
                                                            args.threads))
        return summary

    if not args.no_rules and not any(r["kind"] == "rule" for r in records):
        t0 = time.perf_counter()
        records.extend(rule_records())
        log.info("rule table: %.1fs", time.perf_counter() - t0)
        save()
    for name in models:
        if name in done:
            continue
        try:
            model, feeds = load(name, image_size)
        except ModelFetchError as err:
            log.warning("skipping %s: %s", name, err)
            records.append({"kind": "model", "model": name, "skipped": str(err)})
            continue
        rec = model_record(name, model, feeds, target, args.threads, repeat)
        records.append(rec)
        print(f"{name:14s} FLOPs {rec['flops_before']:>12d} -> {rec['flops_after']:>12d} "
              f"({rec['flop_ratio']:.3f})  ops {rec['ops_before']} -> {rec['ops_after']}  "
              f"kernels {rec['kernels_without']} -> {rec['kernels_with']}  "
              f"{rec['ms_without']:.2f} -> {rec['ms_with']:.2f} ms ({rec['speedup']:.2f}x)  "
              f"err {rec['max_rel_err']:.1e}", flush=True)
        save()
    summary = save()
    print(f"rules {summary['rules']} ({summary['rules_tested']} pass their tests) "
          f"{summary['categories']}")
    print(f"geomean FLOP ratio {summary['geomean_flop_ratio']:.3f}, geomean speedup "
          f"{summary['geomean_speedup']:.3f} (generated graphs "
          f"{summary['geomean_speedup_generated']:.3f}, real models "
          f"{summary['geomean_speedup_real']:.3f}), all match ORT: {summary['all_match_ort']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

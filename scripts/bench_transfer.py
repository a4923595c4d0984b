#!/usr/bin/env python
"""Transfer-tuning (thesis ch. 6) against full MetaSchedule tuning on zoo model pairs.

For every pair "TARGET from SOURCE": MetaSchedule tunes SOURCE (its log is the pool
transfer-tuning draws from; ``--source-trials-per-kernel`` trials per kernel) and
TARGET (the reference, "full tuning"; ``--trials-per-kernel``), in ``--space`` (default ``cocopie``: the
free choices of cocopie's schedule rules, :mod:`tvm_cocopie.transfer_tuning.space`;
``stock``: MetaSchedule's own CPU rules). Full tuning's database is then the
per-kernel best of its best record, our default schedule and the untuned kernel,
measured alike (:func:`~tvm_cocopie.transfer_tuning.search.select_tuned`; its time is
added to full tuning's). Transfer-tuning tunes TARGET from SOURCE's log, measuring
per kernel the untuned kernel, the default schedule and up to ``--max-candidates``
transferred schedules of the nearest source kernels of its class. TARGET is compiled
five ways and timed in blocks (medians):

* ``stock``: stock TVM's default Relax pipeline, untuned;
* ``default``: the cocopie pipeline with its default schedules (the headline baseline);
* ``transfer``: the cocopie pipeline with the transfer-tuned database;
* ``full``: the cocopie pipeline with full tuning's database;
* ``ms_same_time``: with what MetaSchedule had found after as many seconds as
  transfer-tuning took (the first records of its database, from its timeline).

Every variant's outputs are checked against the stock build. Per pair:
``pct_of_full_speedup`` = 100 · S_transfer / S_full (speedups over the same baseline,
the thesis' "proportion of the maximum speedup"; ``*_over_stock`` over stock TVM),
``pct_of_full_gain`` = 100 · (S_transfer - 1) / (S_full - 1) (the share of full
tuning's *gain* over the baseline: with a strong baseline both speedups are near 1
and the ratio of speedups says little), ``pct_of_full_time`` = 100 · transfer-tuning
seconds / full tuning seconds, and ``ms_time_to_match_ratio``: seconds MetaSchedule
needed until its database's kernel sum (its own standalone times; kernels it has not
reached counted at their default schedule's time) was no slower than
transfer-tuning's, over transfer-tuning's seconds (None when it never got there;
``ms_time_to_match_lower_bound`` then holds full time over transfer time). The real
Ansor ResNet-50 x86 log is imported and transferred to NHWC builds of the zoo's
ResNet-18/34/50 (records imported and skipped, speedup over untuned).

Summary keys: ``mean_pct_of_full_speedup`` and ``mean_pct_of_full_gain`` (over the
pairs where full tuning beat the baseline at all;
``pairs_full_tuning_slower_than_default`` counts the others),
``mean_pct_of_full_time``, ``ms_time_to_match_ratio``, ``ansor_records_imported``
and the ``*_over_stock`` variants. On a 2-core machine MetaSchedule gets 16 trials
per kernel by default (``--trials-per-kernel``; quick: 2) and a population of 64;
the source logs as many unless ``--source-trials-per-kernel`` (the source's tuning
time is not charged to transfer-tuning, as in the thesis).
Resumable: tuning logs, transfer outputs and per-pair results live under ``--work``
(each written atomically); a rerun redoes only what is missing.

    python scripts/bench_transfer.py --quick --json bench_transfer.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

log = logging.getLogger("bench_transfer")

LLVM = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}
#: ../shared beside the checkout (as CI lays it out)
ANSOR_LOG = (Path(__file__).resolve().parents[2] / "shared" / "data" / "ansor"
             / "resnet-50-NHWC-B1-llvm.json")
BERT_SMALL = {"num_layers": 1, "hidden": 64, "heads": 2, "ffn": 128, "seq": 16, "vocab": 100}
BERT_LARGE = {"num_layers": 1, "hidden": 128, "heads": 2, "ffn": 256, "seq": 16, "vocab": 100}
#: the encoder pair of the full run: two layers at sequence 64, hidden 128 and 256
BERT_S64 = {"num_layers": 2, "heads": 2, "seq": 64, "vocab": 1000}
#: name -> (zoo builder, kwargs without the image size)
MODELS = {
    "resnet18": ("resnet18", {}), "resnet34": ("resnet34", {}), "resnet50": ("resnet50", {}),
    "resnext50_32x4d": ("resnext50_32x4d", {}), "mobilenetv2": ("mobilenetv2", {}),
    "bert_h64": ("bert_encoder", BERT_SMALL), "bert_h128": ("bert_encoder", BERT_LARGE),
    "bert_h128_s64": ("bert_encoder", BERT_S64 | {"hidden": 128, "ffn": 512}),
    "bert_h256_s64": ("bert_encoder", BERT_S64 | {"hidden": 256, "ffn": 1024}),
}
#: (target, source)
PAIRS = [("resnet18", "resnet50"), ("resnet34", "resnet18"), ("mobilenetv2", "resnext50_32x4d"),
         ("bert_h128_s64", "bert_h256_s64")]
QUICK_PAIRS = [("bert_h64", "bert_h128")]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="one small pair (BERT encoders), 1 trial per kernel, few rounds")
    p.add_argument("--pairs", help="comma-separated TARGET:SOURCE, e.g. resnet18:resnet50")
    p.add_argument("--trials-per-kernel", type=int, default=None,
                   help="MetaSchedule trials per kernel for the reference (full tuning of the "
                        "target), and for the source unless --source-trials-per-kernel")
    p.add_argument("--source-trials-per-kernel", type=int, default=None,
                   help="MetaSchedule trials per kernel for the source model's log (its tuning "
                        "time is not charged to transfer-tuning; fewer trials only make the "
                        "source schedules worse)")
    p.add_argument("--population", type=int, default=64,
                   help="MetaSchedule's evolutionary population (its default 512 costs minutes "
                        "per kernel and round here)")
    p.add_argument("--image-size", type=int, default=64, help="input size of the CNNs")
    p.add_argument("--space", choices=("cocopie", "stock"), default="cocopie",
                   help="the design space MetaSchedule searches: cocopie's rules' free choices "
                        "(register tiles, loop order, padding placement, unroll) or its own "
                        "CPU rules")
    p.add_argument("--second-pass", action="store_true",
                   help="profile the tuned model and retry kernels slower in it than predicted, "
                        "for transfer-tuning and full tuning's selection alike (adds its time)")
    p.add_argument("--max-candidates", type=int, default=3,
                   help="transferred schedules measured per kernel (nearest source kernels first)")
    p.add_argument("--prescreen", metavar="MODEL_FILE",
                   help="also transfer-tune each pair with this latency model pre-screening "
                        "the candidates (scripts/bench_latency_model.py saves one): only the "
                        "--prescreen-keep fastest predicted of each kernel are measured; the "
                        "pair reports both searches' time and kernel sums side by side")
    p.add_argument("--prescreen-keep", type=int, default=1)
    p.add_argument("--mcpu", default=None,
                   help="the target's CPU (default: this host's, as tvm_cocopie.target."
                        "host_target finds it; a latency model is trained for one)")
    p.add_argument("--repeat", type=int, default=None, help="timed rounds per variant")
    p.add_argument("--work", default="bench_transfer_work", help="logs and per-pair results")
    p.add_argument("--no-ansor", action="store_true", help="skip the Ansor ResNet-50 log part")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def pass_suffix(args) -> str:
    """What a ``--second-pass`` run adds to its work and result names."""
    return "_2p" if args.second_pass else ""


def model_file(name: str, args) -> Path:
    from tvm_cocopie import models

    path = Path(args.work) / "models" / f"{name}_{args.image_size}.onnx"
    if not path.exists():
        builder, kwargs = MODELS[name]
        if builder != "bert_encoder":
            kwargs = kwargs | {"image_size": args.image_size}
        models.save(models.build(builder, **kwargs), path)
    return path


def tuned(name: str, args, trials_per_kernel: int) -> tuple[Path, dict]:
    """MetaSchedule's log dir of model ``name`` (tuned now unless a finished run exists)."""
    from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels
    from tvm_cocopie.transfer_tuning.tune import read_tuning, tune_model

    log_dir = (Path(args.work) / "tune" / f"{name}_{args.image_size}_t{trials_per_kernel}"
               f"_p{args.population}_{args.space}" / name)
    meta = read_tuning(log_dir)
    if meta is None:
        shutil.rmtree(log_dir, ignore_errors=True)  # an interrupted run starts over
        kernels = extract_kernels(str(model_file(name, args)), LLVM)
        print(f"tuning {name}: {len(kernels)} kernels x {trials_per_kernel} trials", flush=True)
        tune_model(str(model_file(name, args)), LLVM, log_dir, trials_per_kernel * len(kernels),
                   kernels=kernels, population=args.population, space=args.space)
        meta = read_tuning(log_dir)
    return log_dir, meta


def ms_time_to_match(log_dir: Path, report: dict, target_seconds: float) -> float | None:
    """Seconds until MetaSchedule's kernel sum was no slower than transfer-tuning's."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from tvm_cocopie.transfer_tuning import readers
    from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels

    kernels = {tvm_ffi.structural_hash(k.mod): k.name for k in extract_kernels(report["_model"], LLVM)}
    per_kernel = {k["name"]: k for k in report["kernels"]}
    workloads = []
    for line in (log_dir / readers.WORKLOAD_FILE).read_text().splitlines():
        wl = ms.database.Workload.from_json(json.loads(line))
        workloads.append(kernels.get(tvm_ffi.structural_hash(wl.mod)))
    best: dict[str, float] = {}
    records = (log_dir / readers.RECORD_FILE).read_text().splitlines()
    meta = json.loads((log_dir / "tuning.json").read_text())

    def kernel_sum() -> float:
        total = 0.0
        for name, k in per_kernel.items():
            if None in (k["untuned_secs"], k["default_secs"], k["best_secs"]):
                continue  # not timed standalone: left out of transfer-tuning's sum too
            total += k["weight"] * best.get(name, k["default_secs"])
        return total

    done = 0
    for elapsed, lines in meta["timeline"]:
        for line in records[done:lines]:
            idx, body = json.loads(line)
            name = workloads[idx] if idx < len(workloads) else None
            secs = [float(s) for s in body[1] or []] if isinstance(body[1], list) else []
            if name and secs and max(secs) < 1e9:
                best[name] = min(best.get(name, float("inf")), min(secs))
        done = lines
        if kernel_sum() <= target_seconds:
            return float(elapsed)
    return None


def run_pair(target: str, source: str, args, trials: int, source_trials: int,
             prescreen_first: bool = False) -> dict:
    from tvm_cocopie.bench.compare import compare_builds
    from tvm_cocopie.models import sample_inputs
    from tvm_cocopie.pipeline import PipelineOptions
    from tvm_cocopie.transfer_tuning import readers, search
    from tvm_cocopie.transfer_tuning.tune import truncated_database

    src_dir, _src_meta = tuned(source, args, source_trials)
    full_dir, full_meta = tuned(target, args, trials)
    model = str(model_file(target, args))
    # full tuning's final database: per kernel the best of its tuned record, default, untuned
    print(f"selecting {target}'s full-tuning winners", flush=True)
    suffix = pass_suffix(args)
    full_sel = search.select_tuned(model, full_dir, LLVM, full_dir.parent / f"selected{suffix}",
                                   progress=True, second_pass=args.second_pass)
    full_seconds = full_meta["seconds"] + full_sel.seconds
    pair_dir = (Path(args.work) / "transfer" / f"{target}_from_{source}_{args.image_size}"
                f"_t{trials}_s{source_trials}_{args.space}_c{args.max_candidates}{suffix}")
    records, summary = readers.read_logs(src_dir, LLVM)  # its MetaSchedule work dir only
    records = readers.best_per_workload(records)
    print(f"transfer-tuning {target} from {source} ({len(records)} tuned kernels)", flush=True)

    def plain():
        return search.transfer_tune(model, records, LLVM, pair_dir, mode="pool", progress=True,
                                    max_candidates=args.max_candidates,
                                    second_pass=args.second_pass)

    def prescreened():
        from tvm_cocopie.latency import LatencyModel

        screen_dir = pair_dir.with_name(pair_dir.name + f"_pre{args.prescreen_keep}")
        print(f"transfer-tuning {target} from {source} with the latency model's pre-screen",
              flush=True)
        begin = time.perf_counter()
        latency_model = LatencyModel.load(LLVM, args.prescreen)
        load_seconds[0] = time.perf_counter() - begin  # charged to the pre-screened search
        return search.transfer_tune(
            model, records, LLVM, screen_dir, mode="pool", progress=True,
            max_candidates=args.max_candidates, second_pass=args.second_pass,
            prescreen=latency_model, prescreen_keep=args.prescreen_keep)

    screened, load_seconds = None, [0.0]
    # with a pre-screen the two searches run in alternating order over the pairs: the
    # one run second finds the builder's and runner's pools and the OS caches warm
    if args.prescreen and prescreen_first:
        screened = prescreened()
    report = plain()
    if args.prescreen and not prescreen_first:
        screened = prescreened()
    rep = report.as_dict()
    tt_secs = report.seconds
    same_dir, same_n = truncated_database(full_dir, tt_secs, pair_dir / "ms_same_time")
    import onnx

    inputs = sample_inputs(onnx.load(model))
    variants = {"stock": ("default", None), "default": ("cocopie", PipelineOptions()),
                # the same build compiled again: how far apart two identical builds time
                "default_again": ("cocopie", PipelineOptions(database=None)),
                "transfer": ("cocopie", PipelineOptions(database=str(pair_dir))),
                "full": ("cocopie", PipelineOptions(database=str(full_sel.database))),
                "ms_same_time": ("cocopie", PipelineOptions(database=str(same_dir)))}
    times = compare_builds(model, LLVM, variants, inputs, "stock", repeat=args.repeat,
                                  max_seconds=60 if args.quick else 120)
    s = {v: times["default"] / times[v] for v in variants}
    s_stock = {v: times["stock"] / times[v] for v in variants}
    # every kernel sum from one measurement run, side by side (the reports' own sums
    # come from separate runs minutes apart)
    sums_of = {"default": None, "transfer": pair_dir, "full": full_sel.database}
    if screened is not None:
        sums_of["prescreened"] = Path(screened.database)
    ksum = search.kernel_sums(model, LLVM, sums_of)
    match = ms_time_to_match(full_dir, rep | {"_model": model}, ksum["transfer"])
    result = {
        "target": target, "source": source, "image_size": args.image_size,
        "trials_per_kernel": trials, "full_trials": full_meta["trials"], "space": args.space,
        "source_trials_per_kernel": source_trials,
        "max_candidates": args.max_candidates, "second_pass": args.second_pass,
        "records_imported": summary.kept, "records_skipped": dict(summary.skipped),
        "ms": {v: times[v] for v in variants}, "max_abs_err_vs_stock": times["max_abs_err"],
        "noise_identical_builds": abs(times["default_again"] / times["default"] - 1.0),
        "speedup_over_default": s, "speedup_over_stock": s_stock,
        "transfer_seconds": tt_secs, "full_seconds": full_seconds,
        "full_search_seconds": full_meta["seconds"], "full_selection_seconds": full_sel.seconds,
        "kernel_sums_ms": {v: 1e3 * secs for v, secs in ksum.items()},
        "ms_same_time_records": same_n,
        "pct_of_full_speedup": 100 * s["transfer"] / s["full"],
        "pct_of_full_speedup_over_stock": 100 * s_stock["transfer"] / s_stock["full"],
        "pct_of_full_gain": (100 * (s["transfer"] - 1) / (s["full"] - 1)
                             if s["full"] > 1 else None),
        # the same from the standalone kernel sums (each kernel's min-of-repeats time
        # times its calls): free of the in-model timing noise of a few percent
        "kernel_sum_speedup_over_default": {v: ksum["default"] / ksum[v] for v in ksum},
        "pct_of_full_speedup_kernel_sum": 100 * ksum["full"] / ksum["transfer"],
        "pct_of_full_time": 100 * tt_secs / full_seconds,
        "ms_time_to_match_seconds": match,
        "ms_time_to_match_ratio": None if match is None else match / tt_secs,
        "ms_time_to_match_lower_bound": full_seconds / tt_secs if match is None else None,
        "kernels": [{k: v for k, v in kr.items() if k in ("name", "label", "weight", "best",
                                                             "speedup", "candidates")}
                    for kr in rep["kernels"]],
        "kernels_transferred": sum(1 for k in rep["kernels"]
                                   if k["best"] not in (search.UNTUNED, search.DEFAULT)),
    }
    if screened is not None:
        # the same search with the latency model's pre-screen: its time against the
        # plain search's, its kernel sum's speedup against the plain one's (side by side)
        result["prescreen"] = {
            "keep": args.prescreen_keep, "seconds": screened.seconds + load_seconds[0],
            "model_load_seconds": load_seconds[0], "ran_first": prescreen_first,
            "prescreened": screened.prescreened,
            "time_saved_pct": 100 * (1 - (screened.seconds + load_seconds[0]) / tt_secs),
            "kernel_sum_speedup_over_default": ksum["default"] / ksum["prescreened"],
            "speedup_vs_plain_pct": 100 * ksum["transfer"] / ksum["prescreened"] - 100,
        }
    return result


ANSOR_MODELS = ("resnet18", "resnet34", "resnet50")


def run_ansor(args) -> dict:
    """Import the real Ansor ResNet-50 x86 log; transfer it to the zoo's ResNets in NHWC.

    The models are built as the log's was (:mod:`tvm_cocopie.transfer_tuning.nhwc`:
    NHWC/HWIO, TVM's computes); each is timed untuned, with cocopie's default rules
    on those NHWC kernels, and transfer-tuned; ``cocopie_nchwc`` is our own blocked
    build, for scale.
    """
    import onnx

    from tvm_cocopie.bench.compare import compare_builds
    from tvm_cocopie.models import sample_inputs
    from tvm_cocopie.pipeline import PipelineOptions
    from tvm_cocopie.transfer_tuning import ansor, search
    from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels
    from tvm_cocopie.transfer_tuning.nhwc import NHWC_OPTIONS, nhwc_module

    records, summary = ansor.read_ansor_log(ANSOR_LOG, LLVM)
    out = {"log": str(ANSOR_LOG), "records_imported": summary.kept, "lines": summary.lines,
           "skipped": dict(summary.skipped), "notes": dict(summary.notes), "models": {}}
    if args.quick:  # the import only; transferring to the ResNets takes minutes
        return out
    for name in ANSOR_MODELS:
        path = model_file(name, args)
        mod = nhwc_module(str(path), LLVM)
        kernels = extract_kernels(mod, LLVM, options=NHWC_OPTIONS)
        print(f"transferring the Ansor log to {name} (NHWC, {len(kernels)} kernels)", flush=True)
        report = search.transfer_tune(mod, records, LLVM, Path(args.work) / f"ansor_{name}_nhwc"
                                      f"{pass_suffix(args)}",
                                      mode="pool", kernels=kernels, progress=True,
                                      max_candidates=args.max_candidates,
                                      second_pass=args.second_pass, options=NHWC_OPTIONS)
        variants = {"untuned": ("cocopie", NHWC_OPTIONS.replace(schedule=False)),
                    "default": ("cocopie", NHWC_OPTIONS),
                    "transfer": ("cocopie", NHWC_OPTIONS.replace(database=report.database)),
                    "cocopie_nchwc": ("cocopie", PipelineOptions())}
        inputs = sample_inputs(onnx.load(str(path)))
        models = {v: mod if v != "cocopie_nchwc" else str(path) for v in variants}
        times = compare_builds(models, LLVM, variants, inputs, "untuned",
                                      repeat=args.repeat, max_seconds=120)
        totals = report.totals()
        out["models"][name] = {
            "kernels": len(kernels),
            "kernels_with_a_class_in_the_log": sum(1 for k in report.kernels if k.candidates > 2),
            "kernels_transferred": sum(1 for k in report.kernels
                                       if k.best not in (search.UNTUNED, search.DEFAULT)),
            "ms": {v: times[v] for v in variants}, "max_abs_err": times["max_abs_err"],
            "speedup_over_untuned": times["untuned"] / times["transfer"],
            "speedup_over_default_nhwc": times["default"] / times["transfer"],
            "kernel_sum_speedup_over_untuned": totals["untuned"] / totals["transfer"],
            "search_seconds": report.seconds,
        }
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.target import host_target

    # every step of this run builds for the one target
    LLVM["mcpu"] = args.mcpu or str(host_target().attrs["mcpu"])

    trials = args.trials_per_kernel or (2 if args.quick else 16)
    source_trials = args.source_trials_per_kernel or trials
    src_tag = "" if source_trials == trials else f"_s{source_trials}"
    args.repeat = args.repeat or (20 if args.quick else 200)
    pairs = ([tuple(p.split(":")) for p in args.pairs.split(",")] if args.pairs
             else QUICK_PAIRS if args.quick else PAIRS)
    results_dir = Path(args.work) / "results"
    records = []
    for index, (target, source) in enumerate(pairs):
        path = (results_dir / f"{target}_from_{source}_{args.image_size}_t{trials}{src_tag}_{args.space}"
                              f"_c{args.max_candidates}{pass_suffix(args)}"
                              f"{f'_pre{args.prescreen_keep}' if args.prescreen else ''}.json")
        if path.exists():
            records.append(json.loads(path.read_text()))
            print(f"{target} from {source}: done earlier ({path})")
            continue
        start = time.perf_counter()
        rec = run_pair(target, source, args, trials, source_trials,
                       prescreen_first=index % 2 == 1)
        rec["bench_seconds"] = time.perf_counter() - start
        bm.write_json_atomic(path, rec)
        records.append(rec)
        print(f"{target} from {source}: transfer {rec['speedup_over_default']['transfer']:.2f}x, "
              f"full {rec['speedup_over_default']['full']:.2f}x over default "
              f"({rec['pct_of_full_speedup']:.0f}% of full in {rec['pct_of_full_time']:.1f}% "
              "of its time)", flush=True)
    ansor_rec = None
    if not args.no_ansor and ANSOR_LOG.exists():
        path = results_dir / (f"ansor_resnets_{args.image_size}{'_quick' if args.quick else ''}"
                              f"{pass_suffix(args)}.json")
        if path.exists():
            ansor_rec = json.loads(path.read_text())
        else:
            ansor_rec = run_ansor(args)
            bm.write_json_atomic(path, ansor_rec)

    def mean(key, over=None):
        """Mean over the pairs; a percentage of full tuning's speedup only where full
        tuning beat that baseline (else "percent of a slowdown" means nothing)."""
        vals = [r[key] for r in records if r.get(key) is not None
                and (over is None or r[over]["full"] > 1.0)]
        return sum(vals) / len(vals) if vals else None

    def mean_of(values):
        vals = list(values)
        return sum(vals) / len(vals) if vals else None

    summary = {
        "pairs": len(records), "trials_per_kernel": trials, "image_size": args.image_size,
        "source_trials_per_kernel": source_trials,
        "baseline": "cocopie default schedules",
        "mean_pct_of_full_speedup": mean("pct_of_full_speedup", "speedup_over_default"),
        "mean_pct_of_full_speedup_over_stock": mean("pct_of_full_speedup_over_stock",
                                                    "speedup_over_stock"),
        "pairs_full_tuning_slower_than_default": sum(
            1 for r in records if r["speedup_over_default"]["full"] <= 1.0),
        "pairs_full_tuning_slower_than_stock": sum(
            1 for r in records if r["speedup_over_stock"]["full"] <= 1.0),
        "mean_transfer_speedup_over_default": mean_of(r["speedup_over_default"]["transfer"]
                                                      for r in records),
        "mean_full_speedup_over_default": mean_of(r["speedup_over_default"]["full"]
                                                  for r in records),
        "mean_pct_of_full_gain": mean("pct_of_full_gain"),
        "mean_pct_of_full_speedup_kernel_sum": mean("pct_of_full_speedup_kernel_sum"),
        "mean_pct_of_full_time": mean("pct_of_full_time"),
        "space": args.space, "max_candidates": args.max_candidates,
        "ms_time_to_match_ratio": mean("ms_time_to_match_ratio"),
        "ms_never_matched": sum(1 for r in records if r["ms_time_to_match_seconds"] is None),
        "mean_noise_identical_builds": mean("noise_identical_builds"),
        "transfer_time_saved_pct": mean_of(r["prescreen"]["time_saved_pct"]
                                           for r in records if "prescreen" in r),
        "prescreen_speedup_vs_plain_pct": mean_of(r["prescreen"]["speedup_vs_plain_pct"]
                                                  for r in records if "prescreen" in r),
        "ansor_records_imported": ansor_rec["records_imported"] if ansor_rec else None,
        "ansor_speedup_over_untuned": ({n: m["speedup_over_untuned"]
                                        for n, m in ansor_rec["models"].items()}
                                       if ansor_rec and ansor_rec.get("models") else None),
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        result = bm.bench_result("transfer", records, summary, len(os.sched_getaffinity(0)))
        bm.write_json_atomic(args.json, result | {"ansor": ansor_rec})
    return 0


if __name__ == "__main__":
    sys.exit(main())

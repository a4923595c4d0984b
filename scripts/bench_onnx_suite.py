#!/usr/bin/env python
"""ONNX backend-suite coverage: stock TVM vs tvm-cocopie vs ONNX Runtime.

Runs ONNX's own backend node cases (``onnx.backend.test.case.node``, 1884 in
onnx 1.23) and the ``light`` models (AlexNet ... ZFNet-512) for each contender, each
case in an isolated worker process with a timeout (a TVM segfault costs that case,
not the run), and counts passes under ONNX's own output comparison.

Contenders: ``cocopie`` (our importer through ``--pipeline``), ``baseline`` (our importer
through stock TVM's ``default`` pipeline; run by default when ``--pipeline`` is not
``default``), ``stock`` (TVM's own importer and pipeline) and ``ort`` (ONNX Runtime).

JSON (``--json PATH``, written atomically after every batch): records
``{case, kind, group, contender, status, stage, error, ops, opset, seconds}``;
summary ``cocopie_pass``, ``baseline_pass``, ``stock_tvm_pass``, ``ort_pass``,
``pipeline_regressions`` (cases the baseline passes and the cocopie contender fails: what
the ``--pipeline`` breaks, goal 0; the cases in ``pipeline_regression_cases``),
``recurrent_models`` (the zoo's CRNN and GRU keyword spotter compiled with the cocopie
pipeline: error and median latency next to ONNX Runtime, one thread each),
``pass_rate_of_ort_passing`` (cocopie passes among the cases ONNX Runtime passes,
goal >= 0.95), ``light_models_failed`` (goal 0), and the failing cases grouped by
op and by error.

    python scripts/bench_onnx_suite.py --quick --json onnx_suite.json
    python scripts/bench_onnx_suite.py --pipeline cocopie --contenders cocopie,baseline \
        --jobs 2 --no-light --models '' --json pipelines.json   # cocopie vs stock pipeline
    python scripts/bench_onnx_suite.py --jobs 2 --json onnx_suite.json   # all cases
    python scripts/bench_onnx_suite.py --jobs 2 --json onnx_suite.json --resume  # continue
    python scripts/bench_onnx_suite.py --models-only --json models.json   # CRNN, KWS timing

``--reuse OLD.json`` takes the stock TVM and ONNX Runtime records from an earlier run
(their results do not change with tvm-cocopie), so only the cocopie contender runs.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import time
from collections import Counter, defaultdict

log = logging.getLogger("bench_onnx_suite")

CONTENDER_KEYS = {"cocopie": "cocopie_pass", "baseline": "baseline_pass", "stock": "stock_tvm_pass",
                  "ort": "ort_pass"}

#: The recurrent zoo models (issue 7): a CRNN text recognizer and a GRU keyword spotter.
RECURRENT_MODELS = ("crnn", "kws_gru")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="a stratified subset: one case per operator, one light model")
    p.add_argument("--cases", help="comma-separated case names or regexes (re.search)")
    p.add_argument("--contenders", default=None,
                   help="comma-separated subset of cocopie,baseline,stock,ort (default: "
                        "cocopie,stock,ort, and baseline when --pipeline is not default)")
    p.add_argument("--no-light", action="store_true", help="skip the light models")
    p.add_argument("--models", default=",".join(RECURRENT_MODELS),
                   help="zoo models timed against ONNX Runtime after the cases "
                        "(comma-separated; empty to skip)")
    p.add_argument("--models-only", action="store_true",
                   help="only time the --models (no conformance cases)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per node case")
    p.add_argument("--light-timeout", type=float, default=900.0,
                   help="seconds per light model (compiling DenseNet-121 takes minutes)")
    p.add_argument("--pipeline", default="default",
                   help="Relax pipeline of the cocopie contender (default or cocopie; the "
                        "baseline contender always runs default)")
    p.add_argument("--reuse", metavar="PATH",
                   help="take stock/ort records from this earlier JSON instead of re-running")
    p.add_argument("--json", metavar="PATH", help="write results here (atomically)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --json PATH and run only the rest")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.contenders is None:
        args.contenders = "cocopie,stock,ort" + (",baseline" if args.pipeline != "default" else "")
    return args


def select_cases(cases, quick: bool, patterns: str | None):
    import re

    from tvm_cocopie.bench.conformance import case_ops, primary_op

    groups: dict[str, list] = defaultdict(list)
    for case in cases:
        groups[primary_op(case.name, case_ops(case.proto()))].append(case)
    if patterns:
        regexes = [re.compile(p) for p in patterns.split(",") if p]
        return [c for c in cases if any(r.search(c.name) for r in regexes)], groups
    if quick:  # stratified: the first non-expanded case of every operator, by name
        picked = []
        for op in sorted(groups):
            members = sorted(groups[op], key=lambda c: ("_expanded" in c.name, c.name))
            picked.append(members[0])
        return picked, groups
    return list(cases), groups


def time_models(names: list[str], quick: bool) -> list[dict]:
    """Compile each zoo model with the cocopie pipeline; error and latency vs ONNX Runtime.

    One thread each (``TVM_NUM_THREADS=1``, ORT ``intra_op_num_threads=1``), the two
    runs interleaved (:func:`tvm_cocopie.bench.timing.interleaved_times`), medians.
    """
    import tvm_cocopie
    from tvm_cocopie import models
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.target import host_target

    results = []
    for name in names:
        model = models.build(name)
        feeds = models.sample_inputs(model, seed=0)
        start = time.perf_counter()
        compiled = tvm_cocopie.compile(model, target=host_target(1))
        compile_s = time.perf_counter() - start
        session = bm.ort_session(model, threads=1, spinning=True)  # ORT as it ships
        reference = session.run(None, feeds)
        ours = compiled(**feeds)
        error = bm.max_rel_error(ours if isinstance(ours, list) else [ours], reference)
        times = bm.interleaved_times(
            {"cocopie": functools.partial(compiled, **feeds), "ort": bm.ort_runner(session, feeds)},
            repeat=5 if quick else 30, max_seconds=30 if quick else 120,
            block=4)  # blocks, first call untimed: see interleaved_times
        cocopie_ms, ort_ms = bm.median(times["cocopie"]), bm.median(times["ort"])
        results.append({
            "model": name, "inputs": {k: list(v.shape) for k, v in feeds.items()},
            "max_rel_error_vs_ort": error, "matches_ort": error < 1e-3,
            "cocopie_ms": round(cocopie_ms, 3), "ort_ms": round(ort_ms, 3),
            "cocopie_over_ort": round(cocopie_ms / ort_ms, 3), "runs": len(times["ort"]),
            "compile_seconds": round(compile_s, 1), "threads": 1})
        print(f"{name}: cocopie {cocopie_ms:.2f} ms, ORT {ort_ms:.2f} ms "
              f"(x{cocopie_ms / ort_ms:.2f}), max rel error vs ORT {error:.1e}")
    return results


def summarize(records: list[dict], group_of: dict[str, str]) -> dict:
    status: dict[str, dict[str, str]] = defaultdict(dict)
    errors: dict[str, str] = {}
    for r in records:
        status[r["contender"]][r["case"]] = r["status"]
        if r["contender"] == "cocopie" and r["status"] != "pass":
            errors[r["case"]] = r.get("error", "")
    summary: dict = {}
    for contender, key in CONTENDER_KEYS.items():
        results = status.get(contender, {})
        summary[key] = sum(s == "pass" for s in results.values()) if results else None
        summary[key.replace("_pass", "_run")] = len(results) if results else None
    ours, ort = status.get("cocopie", {}), status.get("ort", {})
    ort_passing = [c for c, s in ort.items() if s == "pass" and c in ours]
    summary["ort_passing_cases"] = len(ort_passing)
    summary["pass_rate_of_ort_passing"] = (
        round(sum(ours[c] == "pass" for c in ort_passing) / len(ort_passing), 4)
        if ort_passing else None)
    stock = status.get("stock", {})
    summary["stock_pass_rate_of_ort_passing"] = (
        round(sum(stock.get(c) == "pass" for c in ort_passing) / len(ort_passing), 4)
        if ort_passing and stock else None)
    baseline = status.get("baseline", {})
    regressions = sorted(c for c, s in baseline.items()
                         if s == "pass" and c in ours and ours[c] != "pass")
    summary["pipeline_regressions"] = len(regressions) if baseline and ours else None
    summary["pipeline_regression_cases"] = regressions
    summary["pipeline_gains"] = sorted(c for c, s in baseline.items()
                                       if s != "pass" and ours.get(c) == "pass")
    light = {r["case"] for r in records if r["kind"] == "light"}
    summary["light_models"] = sorted(light)
    summary["light_models_failed"] = sorted(c for c in light if ours.get(c) != "pass")
    summary["light_models_failed_count"] = len(summary["light_models_failed"])
    failing = [c for c, s in ours.items() if s != "pass"]
    summary["cocopie_failing_ort_passing"] = sorted(c for c in failing if ort.get(c) == "pass")
    by_op = Counter(group_of.get(c, "?") for c in failing)
    summary["cocopie_failures_by_op"] = dict(by_op.most_common())
    by_error = Counter(_error_class(errors[c]) for c in failing)
    summary["cocopie_failures_by_error"] = dict(by_error.most_common(40))
    summary["crashes"] = sorted({(r["contender"], r["case"]) for r in records
                                 if r["status"] in ("crash", "timeout")})
    return summary


def _error_class(error: str) -> str:
    import re

    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", error)
    text = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)
    return text[:120]


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from tqdm import tqdm

    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.bench.conformance import IsolatedRunner, light_cases, node_cases

    contenders = [c for c in args.contenders.split(",") if c]
    unknown = set(contenders) - set(CONTENDER_KEYS)
    if unknown:
        print(f"unknown contender(s) {sorted(unknown)}; pick from {list(CONTENDER_KEYS)}",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    model_names = [m for m in args.models.split(",") if m]
    if args.models_only:
        timed = time_models(model_names, args.quick)
        if args.json:
            bm.write_json_atomic(args.json, bm.bench_result(
                "onnx_suite", [], {"recurrent_models": timed, "quick": args.quick}, threads=1))
        return 0
    cases = node_cases()
    selected, groups = select_cases(cases, args.quick, args.cases)
    if not args.no_light:
        lights = light_cases(["test_bvlc_alexnet"] if args.quick else None)
        if args.cases:
            import re

            lights = [c for c in lights
                      if any(re.search(p, c.name) for p in args.cases.split(",") if p)]
        selected += lights
        for case in lights:
            groups[f"light:{case.name}"].append(case)
    group_of = {c.name: op for op, members in groups.items() for c in members}

    reused: list[dict] = []
    if args.reuse:
        import json

        with open(args.reuse) as fh:
            previous = json.load(fh)["records"]
        names = {c.name for c in selected}
        reused = [r for r in previous if r["contender"] in ("stock", "ort") and r["case"] in names]
        have = {(r["case"], r["contender"]) for r in reused}
        log.info("reusing %d stock/ort records from %s", len(reused), args.reuse)
    else:
        have = set()
    if args.resume and args.json and os.path.exists(args.json):
        import json

        with open(args.json) as fh:
            done = [r for r in json.load(fh)["records"]
                    if r["case"] in {c.name for c in selected}
                    and (r["case"], r["contender"]) not in have]
        reused += done
        have |= {(r["case"], r["contender"]) for r in done}
        log.warning("resuming: %d records already in %s", len(done), args.json)
    tasks = [(case, c) for case in selected for c in contenders if (case.name, c) not in have]
    records = list(reused)

    def save():
        summary = summarize(records, group_of)
        summary.update(recurrent_models=timed, cases=len(selected), quick=args.quick,
                       jobs=args.jobs,
                       pipeline=args.pipeline, timeout=args.timeout,
                       seconds=round(time.perf_counter() - start, 1))
        if args.json:
            bm.write_json_atomic(args.json, bm.bench_result("onnx_suite", records, summary,
                                                            threads=1))
        return summary

    timed: list[dict] = []
    runner = IsolatedRunner(jobs=args.jobs, timeout=args.timeout, pipeline=args.pipeline,
                            light_timeout=args.light_timeout)
    bar = tqdm(total=len(tasks), desc="onnx cases", unit="case", file=sys.stderr)
    last_save = time.monotonic()
    for record in runner.run(tasks):
        record["group"] = group_of.get(record["case"], "?")
        records.append(record)
        bar.update(1)
        if time.monotonic() - last_save > 30:
            save()
            last_save = time.monotonic()
    bar.close()
    for r in records:
        r.setdefault("group", group_of.get(r["case"], "?"))
    save()
    timed += time_models(model_names, args.quick)
    summary = save()
    lines = [f"{k}: {summary[k]}" for k in ("cases", "cocopie_pass", "baseline_pass",
                                             "stock_tvm_pass", "ort_pass",
                                             "pipeline_regressions", "pipeline_regression_cases",
                                             "pass_rate_of_ort_passing",
                                             "light_models_failed", "seconds")]
    print("\n".join(lines))
    top = list(summary["cocopie_failures_by_op"].items())[:25]
    print("cocopie failures by op:", ", ".join(f"{op} {n}" for op, n in top))
    return 0


if __name__ == "__main__":
    from tvm_cocopie.threads import configure_thread_pool

    configure_thread_pool(1)  # one thread each, before TVM's pool starts
    sys.exit(main())

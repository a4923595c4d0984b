"""The transfer-tuning search (thesis §6.2.3, §6.2.4, §6.3.4).

For a target model M: extract its kernels and classes; measure every kernel
untuned and with cocopie's default schedule (both are always candidates); choose
the source model T maximizing

    score(T) = Σ_c P_c² · sqrt(|W_Tc|)          (Eq. 6.1)

(P_c: class c's share of M's untuned time; W_Tc: T's tuned schedules of class c),
or, in *pool* mode (§6.3.4), take every model's schedules; transfer each same-class
schedule to each kernel, check it builds and computes what the unscheduled kernel
computes, measure it standalone, keep the fastest. Winners are written as a
MetaSchedule database that ``PipelineOptions(database=DIR)`` and stock
``MetaScheduleApplyDatabase`` apply.

Measurements use MetaSchedule's ``LocalBuilder`` and ``LocalRunner`` (worker
subprocesses: a crash or a hang costs that candidate only) or its ``RPCRunner``
through a tracker. Each finished measurement is saved at once (atomic rename) in
``OUT/measurements.json``; a rerun repeats none of them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..benchmarking import write_json_atomic
from ..errors import ScheduleError, TuningLogError
from .kernel_class import Kernel, class_key, class_report, extract_kernels
from .transfer import check_numerics, transfer

log = logging.getLogger(__name__)

UNTUNED, DEFAULT = "untuned", "default"
CACHE_FILE = "measurements.json"
REPORT_FILE = "report.json"
FAILED = float("inf")


@dataclass
class Measurer:
    """Builds and times kernels standalone with MetaSchedule's builder and runner.

    ``rpc``: ``(host, port, key)`` of an RPC tracker, else the local runner.
    """

    target: object
    rpc: tuple | None = None
    build_timeout: float = 300.0
    run_timeout: float = 120.0
    number: int = 3
    repeat: int = 3

    def _runner(self):
        config = ms.runner.EvaluatorConfig(number=self.number, repeat=self.repeat,
                                           min_repeat_ms=0, enable_cpu_cache_flush=False)
        if self.rpc:
            host, port, key = self.rpc
            rpc_config = ms.runner.RPCConfig(tracker_host=host, tracker_port=int(port),
                                             tracker_key=key, session_timeout_sec=self.run_timeout)
            return ms.runner.RPCRunner(rpc_config=rpc_config, evaluator_config=config, max_workers=1)
        return ms.runner.LocalRunner(timeout_sec=self.run_timeout, evaluator_config=config)

    def measure(self, mods: list[tvm.IRModule]) -> list[tuple[float, str]]:
        """``[(mean seconds or inf, error message)]``, one per module, in order."""
        if not mods:
            return []
        builder = ms.builder.LocalBuilder(max_workers=1, timeout_sec=self.build_timeout)
        built = builder.build([ms.builder.BuilderInput(m, self.target) for m in mods])
        out: list[tuple[float, str]] = [(FAILED, "")] * len(mods)
        inputs, where = [], []
        for i, (mod, res) in enumerate(zip(mods, built)):
            if res.error_msg:
                out[i] = (FAILED, "build: " + _last_line(res.error_msg))
                continue
            func = next(f for _, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
            device = "cpu" if self.target.kind.name == "llvm" else self.target.kind.name
            inputs.append(ms.runner.RunnerInput(res.artifact_path, device,
                                                ms.arg_info.ArgInfo.from_prim_func(func)))
            where.append(i)
        try:
            futures = self._runner().run(inputs) if inputs else []
            for i, fut in zip(where, futures):
                res = fut.result()
                if res.error_msg:
                    out[i] = (FAILED, "run: " + _last_line(res.error_msg))
                else:
                    secs = [float(s) for s in res.run_secs]
                    out[i] = (sum(secs) / len(secs), "")
        finally:
            for res in built:
                if res.artifact_path:
                    shutil.rmtree(os.path.dirname(res.artifact_path), ignore_errors=True)
        return out


class MeasurementCache:
    """``{kernel hash:candidate: [seconds, error]}`` on disk, rewritten atomically."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.data: dict = {}
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
            except (OSError, ValueError) as err:
                log.warning("ignoring unreadable measurement cache %s (%s)", self.path, err)
        self.hits = 0

    @staticmethod
    def key(mod: tvm.IRModule, candidate: str) -> str:
        return f"{tvm_ffi.structural_hash(mod) & 0xFFFFFFFFFFFF:x}:{candidate}"

    def get(self, mod, candidate):
        value = self.data.get(self.key(mod, candidate))
        if value is not None:
            return (FAILED if value[0] is None else float(value[0]), value[1])
        return None

    def put(self, mod, candidate, secs: float, error: str) -> None:
        self.data[self.key(mod, candidate)] = [None if math.isinf(secs) else secs, error]

    def save(self) -> None:
        write_json_atomic(self.path, self.data)


def default_schedule(mod: tvm.IRModule, target) -> tvm.IRModule | None:
    """The kernel scheduled by cocopie's default rules (None if no rule applies)."""
    from ..pipeline import PipelineOptions
    from ..schedules import default_rules

    func = mod["main"]
    for rule in default_rules(target, PipelineOptions()):
        try:
            sch = rule.apply(func, target, False)
        except Exception as err:  # noqa: BLE001 - a failing rule is just no default
            log.warning("default rule %s failed on a kernel: %s", type(rule).__name__, err)
            continue
        if sch is not None:
            return sch.mod if isinstance(sch, tvm.s_tir.Schedule) else sch[0].mod
    return None


def model_scores(kernels: list[Kernel], records: list) -> dict[str, float]:
    """score(T) = Σ_c P_c² · sqrt(|W_Tc|) for every source model T (Eq. 6.1)."""
    shares = {row.key: row.share for row in class_report(kernels)}
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for rec in records:
        counts[rec.model][class_key(rec.workload)] += 1
    return {model: sum(shares.get(c, 0.0) ** 2 * math.sqrt(n) for c, n in per.items())
            for model, per in counts.items()}


@dataclass
class KernelResult:
    name: str
    label: str
    weight: int
    untuned_secs: float
    default_secs: float
    best: str
    best_secs: float
    candidates: int = 0
    rejected: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.untuned_secs / self.best_secs if self.best_secs else float("nan")


@dataclass
class Report:
    """What a transfer-tuning run found, per kernel and for the model."""

    kernels: list[KernelResult]
    source_model: str | None
    scores: dict
    seconds: float
    cache_hits: int
    database: str
    model: dict = field(default_factory=dict)

    def totals(self) -> dict:
        tot = {"untuned": 0.0, "default": 0.0, "transfer": 0.0}
        for k in self.kernels:
            tot["untuned"] += k.weight * k.untuned_secs
            tot["default"] += k.weight * k.default_secs
            tot["transfer"] += k.weight * k.best_secs
        return tot

    def as_dict(self) -> dict:
        d = {"source_model": self.source_model, "scores": self.scores, "seconds": self.seconds,
             "cache_hits": self.cache_hits, "database": self.database,
             "kernel_totals_secs": self.totals(), "model": self.model,
             "kernels": [asdict(k) | {"speedup": k.speedup} for k in self.kernels]}
        return json.loads(json.dumps(d, default=str).replace("Infinity", "null"))

    def table(self) -> str:
        header = (f"{'kernel':<40}{'calls':>6}{'untuned ms':>12}{'default ms':>12}"
                  f"{'best ms':>10}{'speedup':>9}  source")
        lines = [header]
        for k in self.kernels:
            lines.append(f"{k.name[:39]:<40}{k.weight:>6}{1e3 * k.untuned_secs:>12.3f}"
                         f"{1e3 * k.default_secs:>12.3f}{1e3 * k.best_secs:>10.3f}"
                         f"{k.speedup:>8.2f}x  {k.best}")
        t = self.totals()
        lines.append(f"kernel sum: untuned {1e3 * t['untuned']:.3f} ms, default "
                     f"{1e3 * t['default']:.3f} ms, transfer-tuned {1e3 * t['transfer']:.3f} ms "
                     f"({t['untuned'] / t['transfer']:.2f}x over untuned, "
                     f"{t['default'] / t['transfer']:.2f}x over default)")
        if self.model:
            m = self.model
            lines.append(f"model end to end: untuned {m['untuned_ms']:.3f} ms, default "
                         f"{m['default_ms']:.3f} ms, transfer-tuned {m['transfer_ms']:.3f} ms "
                         f"({m['speedup_over_untuned']:.2f}x over untuned, "
                         f"{m['speedup_over_default']:.2f}x over default)")
        return "\n".join(lines)


def _progress(iterable, total, desc, enabled):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="kernel")


def transfer_tune(model, records: list, target, out_dir, mode: str = "select",
                  measurer: Measurer | None = None, budget_seconds: float | None = None,
                  check: bool = True, progress: bool = False, kernels: list[Kernel] | None = None,
                  shapes=None) -> Report:
    """Transfer-tune ``model`` from ``records`` (:class:`~.readers.SourceRecord`).

    ``mode``: ``"select"`` (one source model by Eq. 6.1) or ``"pool"`` (all records).
    Writes the winners' database to ``out_dir`` and returns a :class:`Report`.
    ``budget_seconds``: stop trying new candidates once spent (kernels not reached
    keep the better of untuned and default).
    """
    from ..target import parse_target

    start = time.perf_counter()
    target = parse_target(target)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if mode not in ("select", "pool"):
        raise ValueError(f"mode must be 'select' or 'pool', not {mode!r}")
    measurer = measurer or Measurer(target)
    cache = MeasurementCache(out / CACHE_FILE)
    kernels = kernels if kernels is not None else extract_kernels(model, target, shapes=shapes)

    def measure(pairs: list[tuple[tvm.IRModule, str, tvm.IRModule]]) -> list[tuple[float, str]]:
        """pairs: (kernel workload, candidate id, module to time); cached by (kernel, id)."""
        todo = [(i, p) for i, p in enumerate(pairs) if cache.get(p[0], p[1]) is None]
        cache.hits += len(pairs) - len(todo)
        results = measurer.measure([p[2] for _, p in todo])
        for (_, (kmod, cid, _m)), (secs, err) in zip(todo, results):
            cache.put(kmod, cid, secs, err)
        if todo:
            cache.save()
        return [cache.get(k, c) for k, c, _ in pairs]

    # 1. untuned and default times of every kernel: P_c and the baselines
    defaults = {}
    for k in _progress(kernels, len(kernels), "baselines", progress):
        defaults[k.name] = default_schedule(k.mod, target)
        pairs = [(k.mod, UNTUNED, k.mod)]
        if defaults[k.name] is not None:
            pairs.append((k.mod, DEFAULT, defaults[k.name]))
        res = measure(pairs)
        k.untuned_secs = res[0][0] if not math.isinf(res[0][0]) else None

    # 2. the source schedules to try
    scores = model_scores(kernels, records)
    source_model = None
    if mode == "select" and scores:
        source_model = max(scores, key=scores.get)
        records = [r for r in records if r.model == source_model]
        log.info("source model %s (score %.3f; all: %s)", source_model, scores[source_model], scores)
    by_class: dict[str, list] = defaultdict(list)
    for rec in records:
        by_class[class_key(rec.workload)].append(rec)

    # 3. transfer, check and measure, kernel by kernel
    winners: list[tuple[Kernel, str, object, float]] = []
    results: list[KernelResult] = []
    for k in _progress(kernels, len(kernels), "transfer", progress):
        base = measure([(k.mod, UNTUNED, k.mod)] +
                       ([(k.mod, DEFAULT, defaults[k.name])] if defaults[k.name] is not None else []))
        untuned = base[0][0]
        default = base[1][0] if len(base) > 1 else FAILED
        best, best_secs, best_sch = (DEFAULT, default, None) if default <= untuned else (UNTUNED, untuned, None)
        rejected: dict[str, str] = {}
        pairs, schedules = [], {}
        over_budget = budget_seconds is not None and time.perf_counter() - start > budget_seconds
        for rec in ([] if over_budget else by_class.get(k.key, [])):
            seen = cache.get(k.mod, rec.origin)
            if seen is not None and seen[1].startswith("rejected"):
                rejected[rec.origin] = seen[1]
                continue
            result = transfer(rec, k.mod, target)
            if result.ok and check:
                try:
                    check_numerics(result.mod, k.mod, target)
                except ScheduleError as err:
                    result.ok, result.reason = False, str(err)
                except Exception as err:  # noqa: BLE001 - a crash while checking rejects it
                    result.ok, result.reason = False, f"check crashed: {_last_line(str(err))}"
            if not result.ok:
                rejected[rec.origin] = result.reason
                cache.put(k.mod, rec.origin, FAILED, f"rejected: {result.reason}")
                log.info("kernel %s: schedule %s rejected: %s", k.name, rec.origin, result.reason)
                continue
            schedules[rec.origin] = result.schedule
            pairs.append((k.mod, rec.origin, result.mod))
        cache.save()
        for (_, cid, _m), (secs, err) in zip(pairs, measure(pairs)):
            if err:
                rejected[cid] = err
                log.info("kernel %s: schedule %s failed to measure: %s", k.name, cid, err)
            elif secs < best_secs:
                best, best_secs, best_sch = cid, secs, schedules[cid]
        if best != DEFAULT:
            winners.append((k, best, best_sch, best_secs))
        results.append(KernelResult(k.name, k.label, k.weight, untuned, default, best, best_secs,
                                    len(pairs) + len(base), rejected))

    db_dir = write_database(winners, target, out)
    report = Report(results, source_model, scores, time.perf_counter() - start, cache.hits, str(db_dir))
    write_json_atomic(out / REPORT_FILE, report.as_dict())
    return report


def write_database(winners, target, out: Path) -> Path:
    """Commit the winning schedules as a MetaSchedule database in ``out`` (atomically).

    An untuned winner is stored with an empty trace so that the pipeline leaves the
    kernel as it is instead of applying the default rules.
    """
    from tvm.s_tir import Schedule

    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".db."))
    try:
        db = ms.database.JSONDatabase(work_dir=str(tmp))
        for kernel, _cid, sch, secs in winners:
            sch = sch if sch is not None else Schedule(kernel.mod)
            func = next(f for _, f in kernel.mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
            db.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, db.commit_workload(kernel.mod), [secs], target,
                ms.arg_info.ArgInfo.from_prim_func(func)))
        del db
        for name in ("database_workload.json", "database_tuning_record.json"):
            src = tmp / name
            if not src.exists():
                src.write_text("")
            os.replace(src, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def measure_model(model, target, database: str | Path, inputs: dict, repeat: int = 10,
                  max_seconds: float = 30.0) -> dict:
    """End-to-end latency (median ms) untuned, with default schedules, with the database."""
    from ..benchmarking import interleaved_times, median
    from ..compiler import compile_model
    from ..pipeline import PipelineOptions

    variants = {"untuned": PipelineOptions(schedule=False), "default": PipelineOptions(),
                "transfer": PipelineOptions(database=str(database))}
    compiled = {name: compile_model(model, target=target, options=opt) for name, opt in variants.items()}
    ref = compiled["untuned"](**inputs)
    import numpy as np

    err = max(float(np.max(np.abs(np.asarray(compiled[n](**inputs)) - np.asarray(ref))))
              for n in ("default", "transfer"))
    times = interleaved_times({n: (lambda c=c: c(**inputs)) for n, c in compiled.items()},
                              repeat=repeat, max_seconds=max_seconds)
    ms_ = {n: median(t) for n, t in times.items()}
    return {"untuned_ms": ms_["untuned"], "default_ms": ms_["default"], "transfer_ms": ms_["transfer"],
            "speedup_over_untuned": ms_["untuned"] / ms_["transfer"],
            "speedup_over_default": ms_["default"] / ms_["transfer"], "max_abs_err": err}


def require_records(records: list, where: str) -> None:
    if not records:
        raise TuningLogError(f"no usable tuning record in {where}; nothing to transfer")


def _last_line(text: str) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:300]

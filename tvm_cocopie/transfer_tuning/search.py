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

from ..bench.timing import write_json_atomic
from ..errors import ScheduleError, TuningLogError, last_line
from ..metaschedule import FAILED, Measurer
from .kernel_class import (
    Kernel,
    blocks_of,
    class_key,
    class_report,
    extract_kernels,
    shape_distance,
)
from .transfer import check_numerics, transfer

log = logging.getLogger(__name__)

UNTUNED, DEFAULT = "untuned", "default"
CACHE_FILE = "measurements.json"
REPORT_FILE = "report.json"


class MeasurementCache:
    """``{kernel hash:candidate: [seconds, error]}`` on disk, rewritten atomically.

    It also keeps the search time spent by earlier (interrupted) runs under
    ``_search_seconds``, so that a resumed run reports the whole search time.
    """

    SPENT = "_search_seconds"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.data: dict = {}
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text())
            except (OSError, ValueError) as err:
                log.warning("ignoring unreadable measurement cache %s (%s)", self.path, err)
        self.hits = 0
        self.prior_seconds = float(self.data.get(self.SPENT, 0.0))
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        """Search time of this run plus that of the runs it resumes."""
        return self.prior_seconds + time.perf_counter() - self.start

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
        self.data[self.SPENT] = self.seconds
        write_json_atomic(self.path, self.data)


def default_schedule(mod: tvm.IRModule, target) -> tvm.IRModule | None:
    """The kernel scheduled by cocopie's default rules (None if no rule applies)."""
    from ..pipeline import PipelineOptions
    from ..schedules import default_rules
    from ..target import parse_target

    target = parse_target(target)
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
    #: kernels the second pass retried: standalone, in-model, in-model on default, kept
    second_pass: dict = field(default_factory=dict)

    def totals(self) -> dict:
        """Weighted kernel sums; kernels that could not be timed standalone (e.g. a
        gather whose random indices fall out of bounds) are left out of all three."""
        tot = {"untuned": 0.0, "default": 0.0, "transfer": 0.0}
        for k in self.kernels:
            if not all(math.isfinite(t) for t in (k.untuned_secs, k.default_secs, k.best_secs)):
                continue
            tot["untuned"] += k.weight * k.untuned_secs
            tot["default"] += k.weight * k.default_secs
            tot["transfer"] += k.weight * k.best_secs
        return tot

    def as_dict(self) -> dict:
        d = {"source_model": self.source_model, "scores": self.scores, "seconds": self.seconds,
             "cache_hits": self.cache_hits, "database": self.database,
             "kernel_totals_secs": self.totals(), "model": self.model,
             "second_pass": self.second_pass,
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
        for name, row in self.second_pass.items():
            lines.append(f"second pass: {name} ran {1e3 * row['in_model']:.3f} ms in the model "
                         f"(standalone {1e3 * row['standalone']:.3f} ms); on its default schedule "
                         f"{1e3 * (row['in_model_default'] or float('nan')):.3f} ms: "
                         f"{'kept' if row['kept'] else 'back to default'}")
        if self.model:
            m = self.model
            lines.append(f"model end to end: untuned {m['untuned_ms']:.3f} ms, default "
                         f"{m['default_ms']:.3f} ms, transfer-tuned {m['transfer_ms']:.3f} ms "
                         f"({m['speedup_over_untuned']:.2f}x over untuned, "
                         f"{m['speedup_over_default']:.2f}x over default)")
        return "\n".join(lines)


def _progress(iterable, total, desc, enabled, unit="kernel"):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit)


def transfer_tune(model, records: list, target, out_dir, mode: str = "select",
                  measurer: Measurer | None = None, budget_seconds: float | None = None,
                  check: bool = True, progress: bool = False, kernels: list[Kernel] | None = None,
                  shapes=None, batch: int = 64, max_candidates: int | None = None,
                  same_workload: bool = False, second_pass: bool = False,
                  second_pass_tolerance: float = 1.25, margin: float = 0.02,
                  options=None) -> Report:
    """Transfer-tune ``model`` from ``records`` (:class:`~.readers.SourceRecord`).

    ``mode``: ``"select"`` (one source model by Eq. 6.1) or ``"pool"`` (all records).
    Writes the winners' database to ``out_dir`` and returns a :class:`Report`.
    ``budget_seconds``: stop trying new candidates once spent (kernels not reached
    keep the better of untuned and default). Candidates are measured ``batch`` at a
    time (one builder and one runner call each), the cache saved after every batch.
    A measured candidate faster than the kernel's baselines must also compute what
    the unscheduled kernel computes (checked in this process once it has run safely
    in the runner's); one that does not is rejected and the next fastest is checked.

    ``max_candidates``: per kernel, transfer only the source schedules of the
    kernels nearest in shape (:func:`~.kernel_class.shape_distance`), up to this
    many distinct results (transfers giving the same module count once).
    ``same_workload``: use only records of the kernel itself (the selection step
    that turns a MetaSchedule log of this very model into its final database).
    ``options``: the pipeline options of the build the kernels come from (default:
    the cocopie pipeline's; :data:`~.nhwc.NHWC_OPTIONS` for an NHWC build).
    ``margin``: a candidate replaces the kernel's baseline only when it is that much
    faster in a side-by-side re-measurement of the two (step 5).
    ``second_pass``: profile the model built with the winners and put back on their
    default schedule the transferred kernels that run slower in the model than
    ``second_pass_tolerance`` times their standalone time and than the default
    there (:func:`~.profile.second_pass`).
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
    kernels = (kernels if kernels is not None
               else extract_kernels(model, target, shapes=shapes, options=options))

    def over_budget() -> bool:
        return budget_seconds is not None and time.perf_counter() - start > budget_seconds

    def measure(pairs: list[tuple[tvm.IRModule, str, tvm.IRModule]], desc: str, budgeted=False):
        """pairs: (kernel workload, candidate id, module to time); cached by (kernel, id).

        Returns ``[(secs, error)]`` per pair; None for a pair the budget left out.
        """
        todo = [p for p in pairs if cache.get(p[0], p[1]) is None]
        cache.hits += len(pairs) - len(todo)
        chunks = [todo[i:i + batch] for i in range(0, len(todo), batch)]
        for chunk in _progress(chunks, len(chunks), desc, progress and bool(chunks), unit="batch"):
            if budgeted and over_budget():
                break
            for (kmod, cid, _m), (secs, err) in zip(chunk, measurer.measure([c[2] for c in chunk])):
                cache.put(kmod, cid, secs, err)
            cache.save()
        return [cache.get(k, c) for k, c, _ in pairs]

    # 1. untuned and default times of every kernel: P_c and the baselines
    defaults = {k.name: default_schedule(k.mod, target) for k in kernels}

    def base_pairs(k):
        return [(k.mod, UNTUNED, k.mod)] + (
            [(k.mod, DEFAULT, defaults[k.name])] if defaults[k.name] is not None else [])

    measure([p for k in kernels for p in base_pairs(k)], "baselines")
    base = {k.name: measure(base_pairs(k), "") for k in kernels}
    for k in kernels:
        k.untuned_secs = None if math.isinf(base[k.name][0][0]) else base[k.name][0][0]

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

    # 3. transfer every same-class schedule to every kernel (rejects are cached too)
    rejected: dict[str, dict[str, str]] = {k.name: {} for k in kernels}
    candidates: dict[str, list] = {k.name: [] for k in kernels}
    for k in _progress(kernels, len(kernels), "transfer", progress):
        pool = by_class.get(k.key, [])
        if same_workload:
            pool = [r for r in pool if tvm_ffi.structural_equal(r.workload, k.mod)]
        pool = sorted(pool, key=lambda r: shape_distance(r.workload, k.mod))
        # a transfer that gives the untuned kernel or the default schedule adds nothing
        seen_mods = {tvm_ffi.structural_hash(m) for _, _, m in base_pairs(k)}
        for rec in pool:
            if over_budget() or (max_candidates and len(candidates[k.name]) >= max_candidates):
                break
            seen = cache.get(k.mod, rec.origin)
            if seen is not None and seen[1].startswith("rejected"):
                rejected[k.name][rec.origin] = seen[1]
                continue
            result = transfer(rec, k.mod, target, validate=False)
            if not result.ok:
                rejected[k.name][rec.origin] = result.reason
                cache.put(k.mod, rec.origin, FAILED, f"rejected: {result.reason}")
                log.info("kernel %s: schedule %s rejected: %s", k.name, rec.origin, result.reason)
                continue
            digest = tvm_ffi.structural_hash(result.schedule.mod)
            if digest in seen_mods:  # another source gave the same schedule
                continue
            seen_mods.add(digest)
            candidates[k.name].append((rec.origin, result.schedule))
    cache.save()

    # 4. measure them all standalone, in builder/runner subprocesses
    pairs = [(k.mod, cid, sch.mod) for k in kernels for cid, sch in candidates[k.name]]
    timed = dict(zip([(k.name, cid) for k in kernels for cid, _ in candidates[k.name]],
                     measure(pairs, "measure", budgeted=True)))

    # 5. per kernel, the fastest candidate that computes the right values ...
    challengers: dict[str, tuple[float, str, object]] = {}
    baselines: dict[str, tuple[str, float]] = {}
    untuned_default: dict[str, tuple[float, float]] = {}
    for k in kernels:
        untuned = base[k.name][0][0]
        default = base[k.name][1][0] if len(base[k.name]) > 1 else FAILED
        untuned_default[k.name] = (untuned, default)
        baselines[k.name] = (DEFAULT, default) if default <= untuned else (UNTUNED, untuned)
        ranked = []
        for cid, sch in candidates[k.name]:
            res = timed[(k.name, cid)]
            if res is None:
                rejected[k.name][cid] = "not measured: budget spent"
            elif res[1]:
                rejected[k.name][cid] = res[1]
                log.info("kernel %s: schedule %s failed to measure: %s", k.name, cid, res[1])
            else:
                ranked.append((res[0], cid, sch))
        for secs, cid, sch in sorted(ranked, key=lambda r: r[0]):
            if secs >= baselines[k.name][1]:
                break
            reason = _numerics_problem(sch.mod, k.mod, target) if check else ""
            if reason:
                rejected[k.name][cid] = reason
                cache.put(k.mod, cid, FAILED, f"rejected: {reason}")
                log.info("kernel %s: schedule %s rejected: %s", k.name, cid, reason)
                continue
            challengers[k.name] = (secs, cid, sch)
            break
    cache.save()

    # ... confirmed against the baseline it beat, timed side by side (baseline,
    # challenger, challenger, baseline: drift between batches cancels); it wins only by
    # more than ``margin``. Standalone times taken minutes apart differ by 10-20% on a
    # shared machine, more than most schedule choices are worth.
    confirm = []
    for k in kernels:
        if k.name in challengers:
            bid = baselines[k.name][0]
            bmod = defaults[k.name] if bid == DEFAULT else k.mod
            cid, cmod = challengers[k.name][1], challengers[k.name][2].mod
            confirm += [(k.mod, f"confirm1:{bid}", bmod), (k.mod, f"confirm1:{cid}", cmod),
                        (k.mod, f"confirm2:{cid}", cmod), (k.mod, f"confirm2:{bid}", bmod)]
    confirmed = iter(measure(confirm, "confirm"))
    winners: list[tuple[Kernel, str, object, float]] = []
    results: list[KernelResult] = []
    for k in kernels:
        untuned, default = untuned_default[k.name]
        best, best_secs = baselines[k.name]
        best_sch = None
        if k.name in challengers:
            b1, c1, c2, b2 = (next(confirmed) for _ in range(4))
            b_secs, c_secs = min(b1[0], b2[0]), min(c1[0], c2[0])
            cid, sch = challengers[k.name][1], challengers[k.name][2]
            if c_secs < (1.0 - margin) * b_secs:
                best, best_secs, best_sch = cid, c_secs, sch
            else:
                rejected[k.name][cid] = (f"not confirmed: {1e3 * c_secs:.4f} ms against "
                                         f"{best}'s {1e3 * b_secs:.4f} ms side by side")
                best_secs = b_secs
        if best != DEFAULT:
            winners.append((k, best, best_sch, best_secs))
        results.append(KernelResult(k.name, k.label, k.weight, untuned, default, best, best_secs,
                                    len(candidates[k.name]) + len(base[k.name]), rejected[k.name]))
    cache.save()

    retried: dict = {}
    if second_pass:
        from .profile import second_pass as profile_pass

        winners, retried = profile_pass(model, target, winners,
                                        lambda sel, where: write_database(sel, target, where),
                                        out, second_pass_tolerance, shapes=shapes,
                                        options=options)
        for res in results:
            if res.name in retried and not retried[res.name]["kept"]:
                res.rejected[res.best] = "second pass: slower than the default inside the model"
                res.best, res.best_secs = DEFAULT, res.default_secs
    db_dir = write_database(winners, target, out)
    report = Report(results, source_model, scores, cache.seconds, cache.hits, str(db_dir),
                    second_pass=retried)
    write_json_atomic(out / REPORT_FILE, report.as_dict())
    return report


def select_tuned(model, log_dir, target, out_dir, **kwargs) -> Report:
    """The final database of a plain MetaSchedule run: per kernel the fastest of its
    best tuned record, the default schedule and the untuned kernel, measured alike.

    MetaSchedule's database holds whatever it measured best, even where that is
    slower than our default schedule; the reference "full tuning" of the benchmark
    is this selection, so that it is never worse than the baseline both are compared
    with. ``kwargs`` go to :func:`transfer_tune`.
    """
    from .readers import best_per_workload, read_database_dir

    records, _summary = read_database_dir(log_dir, target)
    return transfer_tune(model, best_per_workload(records), target, out_dir, mode="pool",
                         same_workload=True, max_candidates=1, **kwargs)


def _numerics_problem(scheduled: tvm.IRModule, reference: tvm.IRModule, target) -> str:
    """Why ``scheduled`` is not the same computation as ``reference`` ('' if it is)."""
    try:
        check_numerics(scheduled, reference, target)
    except ScheduleError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - a crash while checking rejects it
        return f"check crashed: {last_line(str(err))}"
    return ""


def write_database(winners, target, out: Path) -> Path:
    """Commit the winning schedules as a MetaSchedule database in ``out`` (atomically).

    An untuned winner is stored with a trace that changes nothing (one block lookup:
    MetaSchedule's queries skip records with empty traces) so that the pipeline
    leaves the kernel as it is instead of applying the default rules.
    """
    from tvm.s_tir import Schedule

    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".db."))
    try:
        db = ms.database.JSONDatabase(work_dir=str(tmp))
        for kernel, _cid, sch, secs in winners:
            if sch is None:  # untuned: a no-op trace (an empty one is never returned by queries)
                sch = Schedule(kernel.mod)
                blocks = blocks_of(kernel.mod["main"])
                if blocks:
                    sch.get_sblock(blocks[0].name)
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


def compare_builds(model, target, variants: dict, inputs: dict, reference: str,
                   repeat: int = 10, max_seconds: float = 30.0) -> dict:
    """Compile ``model`` once per variant and time them interleaved in blocks (median ms).

    ``variants``: ``{name: (pipeline, PipelineOptions or None)}``; ``model`` is one
    model for all, or ``{name: model}`` (e.g. an NHWC build beside the ONNX file).
    Every variant's outputs are compared with ``reference``'s; returns ``{name: ms,
    ..., "max_abs_err": worst difference}``.
    """
    import numpy as np

    from ..api import compile_model
    from ..bench.timing import interleaved_times, median

    models = model if isinstance(model, dict) else {name: model for name in variants}
    compiled = {name: compile_model(models[name], target=target, pipeline=pipe, options=opt)
                for name, (pipe, opt) in variants.items()}
    ref = [np.asarray(o) for o in _outputs(compiled[reference](**inputs))]
    err = 0.0
    for comp in compiled.values():
        for got, want in zip(_outputs(comp(**inputs)), ref):
            err = max(err, float(np.max(np.abs(np.asarray(got, "float64") - want), initial=0.0)))
    times = interleaved_times({n: (lambda c=c: c(**inputs)) for n, c in compiled.items()},
                              repeat=repeat, max_seconds=max_seconds, block=4)
    return {n: median(t) for n, t in times.items()} | {"max_abs_err": err}


def _outputs(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def measure_model(model, target, database: str | Path, inputs: dict, repeat: int = 10,
                  max_seconds: float = 30.0) -> dict:
    """End-to-end latency (median ms) untuned, with default schedules, with the database.

    Outputs are checked against the untuned build (``max_abs_err``).
    """
    from ..pipeline import PipelineOptions

    res = compare_builds(model, target, {
        "untuned": ("cocopie", PipelineOptions(schedule=False)),
        "default": ("cocopie", PipelineOptions()),
        "transfer": ("cocopie", PipelineOptions(database=str(database)))},
        inputs, "untuned", repeat, max_seconds)
    return {"untuned_ms": res["untuned"], "default_ms": res["default"], "transfer_ms": res["transfer"],
            "speedup_over_untuned": res["untuned"] / res["transfer"],
            "speedup_over_default": res["default"] / res["transfer"], "max_abs_err": res["max_abs_err"]}


def require_records(records: list, where: str) -> None:
    if not records:
        raise TuningLogError(f"no usable tuning record in {where}; nothing to transfer")

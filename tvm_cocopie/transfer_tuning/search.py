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

With a latency model (``prescreen``, :class:`~tvm_cocopie.latency.LatencyModel`) a
kernel's transferred candidates are ranked first (its ranking head) and only the
fastest ranked few are measured. With a latency dataset (``dataset``,
:class:`~tvm_cocopie.latency.Dataset`) every candidate measured is stored there (kind
``tuning``), to train the latency model.

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
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..errors import ScheduleError, TuningLogError, last_line
from ..latency import Dataset, LatencyModel, Row, kernel_features
from ..metaschedule import FAILED, Measurer
from ..paths import write_json_atomic
from ..schedules import default_rules
from ..target import parse_target
from .database import write_database
from .kernel_class import Kernel, class_key, class_report, extract_kernels, shape_distance
from .profile import second_pass as profile_second_pass
from .readers import best_per_workload, read_database_dir
from .report import KernelResult, Report
from .space import alloc_arguments
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
        """The cache key of ``candidate`` on kernel ``mod``."""
        return f"{tvm_ffi.structural_hash(mod) & 0xFFFFFFFFFFFF:x}:{candidate}"

    def get(self, mod, candidate):
        """``(seconds, error)`` measured for ``candidate`` on ``mod``, or ``None`` if never
        measured."""
        value = self.data.get(self.key(mod, candidate))
        if value is not None:
            return (FAILED if value[0] is None else float(value[0]), value[1])
        return None

    def put(self, mod, candidate, secs: float, error: str) -> None:
        """Record ``candidate``'s time (``inf``: failed) and error on ``mod``."""
        self.data[self.key(mod, candidate)] = [None if math.isinf(secs) else secs, error]

    def save(self) -> None:
        """Write the cache (and the search time so far) atomically."""
        self.data[self.SPENT] = self.seconds
        write_json_atomic(self.path, self.data)


def default_schedule(mod: tvm.IRModule, target) -> tvm.IRModule | None:
    """The kernel scheduled by cocopie's default rules (None if no rule applies)."""
    target = parse_target(target)
    func = mod["main"]
    for rule in default_rules(target):
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


def _progress(iterable, total, desc, enabled, unit="kernel"):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit)


@dataclass
class _Search:
    """The state one :func:`transfer_tune` run's steps share: the target, the measurer,
    the measurement cache, the time budget, the latency model that pre-screens and the
    dataset that keeps measurements, and what each kernel's candidates became."""

    target: object
    measurer: Measurer
    cache: MeasurementCache
    kernels: list
    batch: int
    progress: bool
    budget_seconds: float | None
    start: float = field(default_factory=time.perf_counter)
    prescreen: LatencyModel | None = None
    prescreen_keep: int = 3
    dataset: Dataset | None = None
    source: str = "transfer"  # the dataset rows' source
    prescreened: int = 0  # candidates the latency model left unmeasured
    defaults: dict = field(default_factory=dict)  # kernel -> default-scheduled module
    base: dict = field(default_factory=dict)  # kernel -> [(secs, err) untuned, default]
    rejected: dict = field(default_factory=dict)  # kernel -> {candidate: reason}
    candidates: dict = field(default_factory=dict)  # kernel -> [(candidate, schedule)]

    def over_budget(self) -> bool:
        return (self.budget_seconds is not None
                and time.perf_counter() - self.start > self.budget_seconds)

    def measure(self, pairs: list, desc: str, budgeted: bool = False) -> list:
        """``pairs``: ``(kernel workload, candidate id, module to time)``, cached by
        (kernel, id). ``[(secs, error)]`` per pair; ``None`` for one the budget left out."""
        todo = [p for p in pairs if self.cache.get(p[0], p[1]) is None]
        self.cache.hits += len(pairs) - len(todo)
        chunks = [todo[i:i + self.batch] for i in range(0, len(todo), self.batch)]
        for chunk in _progress(chunks, len(chunks), desc, self.progress and bool(chunks),
                               unit="batch"):
            if budgeted and self.over_budget():
                break
            timed = self.measurer.measure([c[2] for c in chunk])
            for (kmod, cid, _m), (secs, err) in zip(chunk, timed):
                self.cache.put(kmod, cid, secs, err)
            self.cache.save()
        return [self.cache.get(k, c) for k, c, _ in pairs]

    def base_pairs(self, k: Kernel) -> list:
        """The kernel untuned and on its default schedule: always candidates."""
        default = self.defaults[k.name]
        return [(k.mod, UNTUNED, k.mod)] + ([(k.mod, DEFAULT, default)] if default is not None
                                             else [])

    def baseline(self, k: Kernel) -> tuple[str, float]:
        """``(UNTUNED or DEFAULT, seconds)``: the faster of the two baselines."""
        untuned, default = self.untuned_default(k)
        return (DEFAULT, default) if default <= untuned else (UNTUNED, untuned)

    def untuned_default(self, k: Kernel) -> tuple[float, float]:
        rows = self.base[k.name]
        return rows[0][0], (rows[1][0] if len(rows) > 1 else FAILED)

    def record(self, k: Kernel, measured: list) -> None:
        """Store ``measured`` (``(candidate id, module, (secs, error) or None)``) of kernel
        ``k`` in the dataset (kind ``tuning``), those timed successfully; a module
        whose features cannot be computed is left out (logged)."""
        if self.dataset is None:
            return
        rows = []
        for cid, mod, res in measured:
            if res is None or res[1] or not math.isfinite(res[0]):
                continue
            try:
                features = kernel_features(mod["main"], self.target, standalone=True)
            except Exception as err:  # noqa: BLE001 - a row less, the search goes on
                log.info("kernel %s: schedule %s not stored for the latency model: %s",
                         k.name, cid, last_line(err))
                continue
            rows.append(Row(self.source, "tuning", MeasurementCache.key(k.mod, cid), k.name,
                            features, 1e6 * res[0], k.weight, func=mod["main"]))
        self.dataset.put(rows)


def _measure_baselines(run: _Search) -> None:
    """Step 1: every kernel untuned and with its default schedule (P_c, the baselines)."""
    run.defaults = {k.name: default_schedule(k.mod, run.target) for k in run.kernels}
    run.measure([p for k in run.kernels for p in run.base_pairs(k)], "baselines")
    run.base = {k.name: run.measure(run.base_pairs(k), "") for k in run.kernels}
    for k in run.kernels:
        run.record(k, [(cid, mod, res) for (_, cid, mod), res in zip(run.base_pairs(k),
                                                                      run.base[k.name])])
        untuned = run.base[k.name][0][0]
        k.untuned_secs = None if math.isinf(untuned) else untuned


def _choose_sources(kernels: list, records: list, mode: str):
    """Step 2: the source schedules to try, by kernel class: ``(source model or None,
    scores of every model, {class key: [records]})`` (one model by Eq. 6.1 in select
    mode, every record in pool mode)."""
    scores = model_scores(kernels, records)
    source_model = None
    if mode == "select" and scores:
        source_model = max(scores, key=scores.get)
        records = [r for r in records if r.model == source_model]
        log.info("source model %s (score %.3f; all: %s)", source_model, scores[source_model],
                 scores)
    by_class: dict[str, list] = defaultdict(list)
    for rec in records:
        by_class[class_key(rec.workload)].append(rec)
    return source_model, scores, by_class


def _transfer_all(run: _Search, by_class: dict, same_workload: bool,
                  max_candidates: int | None) -> None:
    """Step 3: transfer every same-class schedule to every kernel, nearest in shape
    first; rejects are cached too, and a transfer giving a module already tried (a
    baseline or another source's) counts once."""
    run.rejected = {k.name: {} for k in run.kernels}
    run.candidates = {k.name: [] for k in run.kernels}
    for k in _progress(run.kernels, len(run.kernels), "transfer", run.progress):
        pool = by_class.get(k.key, [])
        if same_workload:
            pool = [r for r in pool if tvm_ffi.structural_equal(r.workload, k.mod)]
        pool = sorted(pool, key=lambda r: shape_distance(r.workload, k.mod))
        seen_mods = {tvm_ffi.structural_hash(m) for _, _, m in run.base_pairs(k)}
        for rec in pool:
            if run.over_budget() or (max_candidates
                                     and len(run.candidates[k.name]) >= max_candidates):
                break
            seen = run.cache.get(k.mod, rec.origin)
            if seen is not None and seen[1].startswith("rejected"):
                run.rejected[k.name][rec.origin] = seen[1]
                continue
            result = transfer(rec, k.mod, run.target, validate=False)
            if not result.ok:
                run.rejected[k.name][rec.origin] = result.reason
                run.cache.put(k.mod, rec.origin, FAILED, f"rejected: {result.reason}")
                log.info("kernel %s: schedule %s rejected: %s", k.name, rec.origin, result.reason)
                continue
            digest = tvm_ffi.structural_hash(result.schedule.mod)
            if digest not in seen_mods:
                seen_mods.add(digest)
                run.candidates[k.name].append((rec.origin, result.schedule))
    run.cache.save()


def _prescreen(run: _Search, k: Kernel) -> list:
    """Kernel ``k``'s candidates to measure: all of them, or, with a latency model and
    more than ``prescreen_keep`` of them, the ``prescreen_keep`` fastest predicted (and
    any whose features cannot be computed); the others are rejected unmeasured."""
    candidates = run.candidates[k.name]
    if run.prescreen is None or len(candidates) <= run.prescreen_keep:
        return candidates
    keep, scored, features = set(), [], []
    for cid, sch in candidates:
        try:
            features.append(kernel_features(sch.mod["main"], run.target, standalone=True))
        except Exception as err:  # noqa: BLE001 - not predicted: measured
            log.info("kernel %s: schedule %s not predicted (measured): %s", k.name, cid,
                     last_line(err))
            keep.add(cid)
            continue
        scored.append(cid)
    scores = run.prescreen.rank(features) if features else []
    predicted = run.prescreen.predict(features) if features else []
    ranked = sorted(zip(scores, predicted, scored), key=lambda r: r[0])
    for rank, (_, us, cid) in enumerate(ranked):
        if rank < run.prescreen_keep:
            keep.add(cid)
            continue
        run.rejected[k.name][cid] = (f"pre-screened out: ranked {rank + 1} of {len(ranked)} "
                                     f"by the latency model, predicted {us:.1f} us (kept "
                                     f"the {run.prescreen_keep} fastest ranked)")
        run.prescreened += 1
    log.info("kernel %s: %d of %d candidates left to measure by the latency model", k.name,
             len(keep), len(candidates))
    return [(cid, sch) for cid, sch in candidates if cid in keep]


def _pick_challengers(run: _Search, check: bool) -> dict:
    """Steps 4-5: measure every candidate (the pre-screen's choice) standalone; per
    kernel the fastest that beats its baseline and computes the right values:
    ``{kernel: (secs, candidate, schedule)}``."""
    chosen = {k.name: _prescreen(run, k) for k in run.kernels}
    order = [(k.name, cid) for k in run.kernels for cid, _ in chosen[k.name]]
    pairs = [(k.mod, cid, sch.mod) for k in run.kernels for cid, sch in chosen[k.name]]
    timed = dict(zip(order, run.measure(pairs, "measure", budgeted=True)))
    challengers = {}
    for k in run.kernels:
        run.record(k, [(cid, sch.mod, timed[(k.name, cid)]) for cid, sch in chosen[k.name]])
        ranked = []
        for cid, sch in chosen[k.name]:
            res = timed[(k.name, cid)]
            if res is None:
                run.rejected[k.name][cid] = "not measured: budget spent"
            elif res[1]:
                run.rejected[k.name][cid] = res[1]
                log.info("kernel %s: schedule %s failed to measure: %s", k.name, cid, res[1])
            else:
                ranked.append((res[0], cid, sch))
        for secs, cid, sch in sorted(ranked, key=lambda r: r[0]):
            if secs >= run.baseline(k)[1]:
                break
            reason = _numerics_problem(sch.mod, k.mod, run.target) if check else ""
            if reason:
                run.rejected[k.name][cid] = reason
                run.cache.put(k.mod, cid, FAILED, f"rejected: {reason}")
                log.info("kernel %s: schedule %s rejected: %s", k.name, cid, reason)
                continue
            challengers[k.name] = (secs, cid, sch)
            break
    run.cache.save()
    return challengers


def _confirm(run: _Search, challengers: dict, margin: float):
    """Step 5, confirmation: each challenger against the baseline it beat, timed side by
    side (baseline, challenger, challenger, baseline: drift between batches cancels); it
    wins only by more than ``margin``. Standalone times taken minutes apart differ by
    10-20% on a shared machine, more than most schedule choices are worth.

    Returns ``(winners [(kernel, id, schedule or None, secs)], [KernelResult])``.
    """
    confirm = []
    for k in run.kernels:
        if k.name in challengers:
            bid = run.baseline(k)[0]
            bmod = run.defaults[k.name] if bid == DEFAULT else k.mod
            cid, cmod = challengers[k.name][1], challengers[k.name][2].mod
            confirm += [(k.mod, f"confirm1:{bid}", bmod), (k.mod, f"confirm1:{cid}", cmod),
                        (k.mod, f"confirm2:{cid}", cmod), (k.mod, f"confirm2:{bid}", bmod)]
    confirmed = iter(run.measure(confirm, "confirm"))
    winners, results = [], []
    for k in run.kernels:
        untuned, default = run.untuned_default(k)
        best, best_secs = run.baseline(k)
        best_sch = None
        if k.name in challengers:
            b1, c1, c2, b2 = (next(confirmed) for _ in range(4))
            b_secs, c_secs = min(b1[0], b2[0]), min(c1[0], c2[0])
            cid, sch = challengers[k.name][1], challengers[k.name][2]
            if c_secs < (1.0 - margin) * b_secs:
                best, best_secs, best_sch = cid, c_secs, sch
            else:
                run.rejected[k.name][cid] = (f"not confirmed: {1e3 * c_secs:.4f} ms against "
                                             f"{best}'s {1e3 * b_secs:.4f} ms side by side")
                best_secs = b_secs
        if best != DEFAULT:
            winners.append((k, best, best_sch, best_secs))
        tried = len(run.candidates[k.name]) + len(run.base[k.name])
        results.append(KernelResult(k.name, k.label, k.weight, untuned, default, best,
                                    best_secs, tried, run.rejected[k.name]))
    run.cache.save()
    return winners, results


def transfer_tune(model, records: list, target, out_dir, mode: str = "select",
                  measurer: Measurer | None = None, budget_seconds: float | None = None,
                  check: bool = True, progress: bool = False, kernels: list[Kernel] | None = None,
                  shapes=None, batch: int = 64, max_candidates: int | None = None,
                  same_workload: bool = False, second_pass: bool = False,
                  second_pass_tolerance: float = 1.25, margin: float = 0.02,
                  options=None, prescreen: LatencyModel | None = None, prescreen_keep: int = 3,
                  dataset: Dataset | None = None) -> Report:
    """Transfer-tune ``model`` from ``records`` (:class:`~.readers.SourceRecord`).

    ``mode``: ``"select"`` (one source model by Eq. 6.1) or ``"pool"`` (all records).
    Writes the winners' database to ``out_dir`` and returns a :class:`~.report.Report`.
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
    ``prescreen``: a latency model (:class:`~tvm_cocopie.latency.LatencyModel`) for
    ``target``: of a kernel's transferred candidates only the ``prescreen_keep``
    predicted fastest are measured (the others are rejected as pre-screened out).
    ``dataset``: a :class:`~tvm_cocopie.latency.Dataset` every candidate measured
    successfully (baselines included) is stored in, kind ``tuning``, its source the
    model file's name (``"transfer"`` for a model given otherwise).
    """
    if mode not in ("select", "pool"):
        raise ValueError(f"mode must be 'select' or 'pool', not {mode!r}")
    if prescreen_keep < 1:
        raise ValueError(f"prescreen_keep must be 1 or more, not {prescreen_keep}")
    start = time.perf_counter()
    target = parse_target(target)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kernels = (kernels if kernels is not None
               else extract_kernels(model, target, shapes=shapes, options=options))
    run = _Search(target, measurer or Measurer(target, f_alloc_argument=alloc_arguments), MeasurementCache(out / CACHE_FILE),
                  kernels, batch, progress, budget_seconds, start, prescreen=prescreen,
                  prescreen_keep=prescreen_keep, dataset=dataset, source=model_label(model))
    _measure_baselines(run)
    source_model, scores, by_class = _choose_sources(kernels, records, mode)
    _transfer_all(run, by_class, same_workload, max_candidates)
    winners, results = _confirm(run, _pick_challengers(run, check), margin)
    retried: dict = {}
    if second_pass:
        winners, retried = _second_pass(model, target, winners, results, out,
                                        second_pass_tolerance, shapes, options)
    db_dir = write_database(winners, target, out)
    report = Report(results, source_model, scores, run.cache.seconds, run.cache.hits,
                    str(db_dir), second_pass=retried, prescreened=run.prescreened)
    write_json_atomic(out / REPORT_FILE, report.as_dict())
    return report


def model_label(model) -> str:
    """A model's name for the latency dataset: an ONNX file's stem, else ``"transfer"``."""
    if isinstance(model, (str, os.PathLike)):
        return Path(model).stem
    return "transfer"


def _second_pass(model, target, winners, results, out, tolerance, shapes, options):
    """The optional second pass (:func:`~.profile.second_pass`); kernels it puts back on
    their default schedule are marked so in ``results``. ``(winners, retried)``."""
    winners, retried = profile_second_pass(
        model, target, winners, lambda sel, where: write_database(sel, target, where), out,
        tolerance, shapes=shapes, options=options)
    for res in results:
        if res.name in retried and not retried[res.name]["kept"]:
            res.rejected[res.best] = "second pass: slower than the default inside the model"
            res.best, res.best_secs = DEFAULT, res.default_secs
    return winners, retried


def select_tuned(model, log_dir, target, out_dir, **kwargs) -> Report:
    """The final database of a plain MetaSchedule run: per kernel the fastest of its
    best tuned record, the default schedule and the untuned kernel, measured alike.

    MetaSchedule's database holds whatever it measured best, even where that is
    slower than our default schedule; the reference "full tuning" of the benchmark
    is this selection, so that it is never worse than the baseline both are compared
    with. ``kwargs`` go to :func:`transfer_tune`.
    """
    records, _summary = read_database_dir(log_dir, target)
    return transfer_tune(model, best_per_workload(records), target, out_dir, mode="pool",
                         same_workload=True, max_candidates=1, **kwargs)


def kernel_sums(model, target, databases: dict, kernels: list[Kernel] | None = None,
                measurer: Measurer | None = None, shapes=None, options=None) -> dict:
    """Weighted kernel sums (seconds) of ``model`` under each database, measured in one
    run: every kernel's schedule from every database timed side by side in one batch,
    so that the sums compare (standalone times minutes apart differ by 10-20%).

    ``databases``: ``{name: MetaSchedule work dir, or None for the default schedules}``;
    a kernel a database has no record of takes its default schedule (as in the
    pipeline). Kernels that cannot be timed under every database are left out of all
    sums. Returns ``{name: seconds}``.
    """
    target = parse_target(target)
    measurer = measurer or Measurer(target, f_alloc_argument=alloc_arguments)
    kernels = (kernels if kernels is not None
               else extract_kernels(model, target, shapes=shapes, options=options))
    dbs = {name: (ms.database.JSONDatabase(work_dir=str(d), allow_missing=False)
                  if d is not None else None) for name, d in databases.items()}
    mods = []
    for k in kernels:
        default = default_schedule(k.mod, target) or k.mod
        for db in dbs.values():
            sch = db.query_schedule(k.mod, target, "main") if db is not None else None
            mods.append(sch.mod if sch is not None else default)
    times = iter(secs for secs, _err in measurer.measure(mods))
    sums = dict.fromkeys(databases, 0.0)
    for k in kernels:
        row = {name: next(times) for name in databases}
        if all(math.isfinite(t) for t in row.values()):
            for name, secs in row.items():
                sums[name] += k.weight * secs
    return sums


def _numerics_problem(scheduled: tvm.IRModule, reference: tvm.IRModule, target) -> str:
    """Why ``scheduled`` is not the same computation as ``reference`` ('' if it is)."""
    try:
        check_numerics(scheduled, reference, target)
    except ScheduleError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - a crash while checking rejects it
        return f"check crashed: {last_line(str(err))}"
    return ""


def require_records(records: list, where: str) -> None:
    """Raise :class:`~tvm_cocopie.errors.TuningLogError` when ``records`` is empty."""
    if not records:
        raise TuningLogError(f"no usable tuning record in {where}; nothing to transfer")

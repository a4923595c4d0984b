"""Random points of cocopie's design spaces: schedules to time for the latency model.

:func:`sample_schedules` replays a kernel's design spaces (:func:`.space.design_spaces`)
with every sampling decision drawn afresh (tiles, unroll budget), runs MetaSchedule's
post-processors and the register budget on each (a point they reject is not a
schedule tuning would ever time), and returns distinct schedules. Timed standalone
(:class:`~tvm_cocopie.metaschedule.Measurer`, as transfer-tuning times its
candidates), they teach the latency model how a kernel's speed moves with its
schedule, which rows taken from compiled models (one schedule per kernel) cannot.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm.s_tir import Schedule

from ..errors import last_line
from ..metaschedule import initialized_postprocs
from ..target import parse_target
from .kernel_class import extract_kernels
from .space import SAMPLES, RegisterBudget, as_main, design_spaces, registers_of, space_tag

log = logging.getLogger(__name__)


def sample_schedules(mod: tvm.IRModule, target, count: int, seed: int = 1,
                     attempts: int | None = None) -> list[Schedule]:
    """Up to ``count`` distinct random schedules of kernel ``mod`` from its design
    spaces (each space in turn), seeded by ``seed``; ``attempts`` (default
    ``4 * count``) bounds the draws (a small space has fewer points)."""
    target = parse_target(target)
    mod = as_main(mod)
    spaces = [s for s in design_spaces(mod, target) if space_tag(s.trace) is not None]
    if not spaces:
        return []
    procs = initialized_postprocs(mod, target) + [RegisterBudget(registers_of(target))]
    found, seen = [], set()
    for i in range(attempts if attempts is not None else 4 * count):
        if len(found) >= count:
            break
        space = spaces[i % len(spaces)]
        sch = Schedule(mod, seed=max(1, (seed * 7919 + i) % 2147483647))

        def fresh(inst, _inputs, _attrs, decision):
            return None if inst.kind.name in SAMPLES else decision

        try:
            space.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=fresh)
            sch.enter_postproc()
            if not all(proc.apply(sch) for proc in procs):
                continue
        except Exception as err:  # noqa: BLE001 - a draw that does not apply is skipped
            log.debug("design-space draw %d does not apply: %s", i, last_line(err))
            continue
        digest = tvm_ffi.structural_hash(sch.mod)
        if digest in seen:
            continue
        seen.add(digest)
        found.append(sch)
    return found


def collect_samples(source: str, model, dataset, target, measurer, per_model: int = 6,
                    per_kernel: int = 8, shapes=None, options=None, seed: int = 1,
                    progress: bool = False) -> int:
    """Time ``per_kernel`` design-space samples of the ``per_model`` heaviest tunable
    kernels of ``model`` standalone with ``measurer`` and store them in ``dataset``
    (:class:`~tvm_cocopie.latency.Dataset`) as rows of kind ``sample`` from ``source``
    (the kernel key of each is its workload's hash and the sample's index). The
    heaviest: by the in-model time the dataset holds for ``source`` (calls times
    microseconds), else by call count. Returns the rows stored."""
    from ..latency import Row, kernel_features
    from ..latency.dataset import kernel_key

    target = parse_target(target)
    kernels = extract_kernels(model, target, shapes=shapes, options=options)
    weight = {r.name: r.latency_us * r.calls for r in dataset.rows(kinds=("model",),
                                                                   sources=(source,))}
    kernels.sort(key=lambda k: -weight.get(k.name, float(k.weight)))
    picked = []
    for k in kernels:
        if len(picked) >= per_model:
            break
        schedules = sample_schedules(k.mod, target, per_kernel, seed=seed)
        if len(schedules) >= 2:
            picked.append((k, schedules))
    stored = 0
    items = picked
    if progress:
        from tqdm import tqdm

        items = tqdm(picked, desc=f"samples of {source}", unit="kernel")
    for k, schedules in items:
        key = kernel_key(k.mod)
        timed = measurer.measure([s.mod for s in schedules])
        rows = []
        for i, (sch, (secs, err)) in enumerate(zip(schedules, timed)):
            if err:
                log.info("%s: sample %d of %s not timed: %s", source, i, k.name, err)
                continue
            func = sch.mod["main"]
            rows.append(Row(source, "sample", f"{key}:{i}", k.name,
                            kernel_features(func, target, standalone=True), 1e6 * secs, 1,
                            func))
        dataset.put(rows)
        stored += len(rows)
    return stored


def rows_from_records(records: list, target, source: str) -> list:
    """Latency-model rows (kind ``tuning``) from tuning records
    (:class:`~.readers.SourceRecord`: a MetaSchedule database, a transfer-tuning log):
    each record's trace replayed on its own workload, its features taken standalone
    (MetaSchedule's runner times kernels alone, hot), its latency the fastest of its run
    times. Records that do not replay or carry no finite time are left out (logged)."""
    import math

    from ..latency import Row, kernel_features
    from ..latency.dataset import kernel_key
    from .transfer import transfer

    target = parse_target(target)
    rows = []
    for rec in records:
        secs = [float(s) for s in rec.run_secs or [] if math.isfinite(float(s))]
        if not secs:
            continue
        result = transfer(rec, rec.workload, target, validate=False)
        if not result.ok:
            log.info("record %s does not replay on its workload: %s", rec.origin, result.reason)
            continue
        func = result.schedule.mod["main"]
        key = f"{kernel_key(rec.workload)}:{rec.origin}"
        name = next(iter(gv.name_hint for gv in rec.workload.get_global_vars()), "main")
        try:
            features = kernel_features(func, target, standalone=True)
        except Exception as err:  # noqa: BLE001 - a row less, the others are kept
            log.info("record %s: no features (%s)", rec.origin, last_line(err))
            continue
        rows.append(Row(source, "tuning", key, name, features, 1e6 * min(secs), 1, func))
    return rows

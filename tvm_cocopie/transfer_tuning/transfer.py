"""Transferring a schedule to another kernel of the same class (thesis §6.2.1, §6.2.3).

Ansor stores splits as inner factors and recomputes the outer extent from the
loop it is applied to, so a schedule often stays valid on a kernel of the same class
with other shapes (§6.2.1). A MetaSchedule trace samples tiles with
``SamplePerfectTile`` whose decision is the whole factorization; replaying it on new
shapes therefore *adapts* each tile decision (:func:`adapt_tile`):

* inner factors that still divide what is left are kept, innermost first;
* a factor that does not divide is replaced by the nearest divisor (in log scale)
  of what is left; the outermost factor takes the rest;
* categorical decisions (unroll depth, compute location) are kept as they are.

The trace is replayed without its post-processing, MetaSchedule's default
post-processors for the target are run again, and the result is built; a pair that
fails to apply, to post-process or to build is rejected with its reason ("invalid
pairs are dropped", §6.2.3).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from ..errors import ScheduleError
from .kernel_class import blocks_of

log = logging.getLogger(__name__)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def adapt_tile(decision: list[int], extent: int, max_innermost: int = -1) -> list[int]:
    """A perfect tiling of ``extent`` into ``len(decision)`` factors close to ``decision``.

    >>> adapt_tile([7, 2, 4, 8], 64)      # 8 and 4 divide: keep; 2 too; outer = 1
    [1, 2, 4, 8]
    >>> adapt_tile([1, 1, 16, 3], 56)     # 3 does not divide 56: nearest divisor 2 ... 4
    [1, 2, 7, 4]
    """
    n = len(decision)
    inner: list[int] = []
    left = int(extent)
    for pos, factor in enumerate(reversed(decision[1:])):
        factor = max(1, int(factor))
        if left % factor:
            factor = min(_divisors(left), key=lambda d: (abs(math.log(d / factor)), -d))
        if pos == 0 and max_innermost > 0 and factor > max_innermost:
            factor = max(d for d in _divisors(left) if d <= max_innermost)
        inner.append(factor)
        left //= factor
    result = [left] + list(reversed(inner))
    assert len(result) == n and math.prod(result) == extent
    return result


@dataclass
class Transferred:
    """The outcome of one (kernel, source schedule) pair."""

    ok: bool
    reason: str = ""
    schedule: object | None = None  # tvm.s_tir.Schedule
    changed_tiles: int = 0

    @property
    def mod(self) -> tvm.IRModule | None:
        return self.schedule.mod if self.schedule is not None else None


def tune_context(mod: tvm.IRModule, target, space_generator, search_strategy=None,
                 task_name: str = "main"):
    """A MetaSchedule ``TuneContext``; for CPU targets without ``TuneContext.__init__``'s
    import of every target's tensor intrinsics (100 s on this machine, where a design
    space takes 0.1 s; CPU schedules here use no tensor intrinsic)."""
    if target.kind.name != "llvm":
        return ms.TuneContext(mod=mod, target=target, space_generator=space_generator,
                              search_strategy=search_strategy, task_name=task_name)
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func
    from tvm.s_tir.meta_schedule.utils import cpu_count

    if isinstance(space_generator, str):
        space_generator = ms.space_generator.SpaceGenerator.create(space_generator)
    ctx = ms.TuneContext.__new__(ms.TuneContext)
    ctx.__init_handle_by_constructor__(
        _ffi_api.TuneContext, mod, target, space_generator, search_strategy, task_name,
        cpu_count(logical=False), -1, get_logging_func(get_logger("tvm.s_tir.meta_schedule")))
    _ffi_api.TuneContextInitialize(ctx)
    return ctx


def _postprocs(mod: tvm.IRModule, target) -> list:
    kind = target.kind.name
    procs = ms.postproc.Postproc.create("llvm" if kind not in ("cuda",) else "cuda")
    ctx = tune_context(mod, target, ms.space_generator.PostOrderApply(
        sch_rules=[], postprocs=procs, mutator_probs={}), task_name="transfer")
    for p in procs:
        p._initialize_with_tune_context(ctx)
    return procs


def apply_trace(trace, mod: tvm.IRModule, target, adapt: bool = True) -> Transferred:
    """Replay ``trace`` on ``mod`` with tile decisions adapted to its shapes.

    Returns a :class:`Transferred`; never raises for a schedule that does not fit.
    """
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    changed = [0]

    def provider(inst, inputs, attrs, decision):
        if not adapt or inst.kind.name != "SamplePerfectTile" or decision is None:
            return decision
        loop = sch.get(inputs[0])
        extent = loop.extent
        if not isinstance(extent, tvm.tirx.IntImm):
            return decision
        old = [int(d) for d in decision]
        max_inner = int(attrs[1]) if len(attrs) > 1 else -1
        new = old if math.prod(old) == int(extent.value) else adapt_tile(old, int(extent.value), max_inner)
        if new != old:
            changed[0] += 1
        return new

    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except Exception as err:  # noqa: BLE001 - every failure rejects the pair
        return Transferred(False, f"trace does not apply: {_short(err)}")
    try:
        sch.enter_postproc()
        for proc in _postprocs(mod, target):
            if not proc.apply(sch):
                return Transferred(False, f"post-processor {type(proc).__name__} rejected it")
    except Exception as err:  # noqa: BLE001
        return Transferred(False, f"post-processing failed: {_short(err)}")
    return Transferred(True, "", sch, changed[0])


def same_blocks(src: tvm.IRModule, dst: tvm.IRModule) -> bool:
    """Whether the two kernels name their blocks alike (the trace looks blocks up by name)."""
    a = [b.name for b in blocks_of(_func(src))]
    b = [b.name for b in blocks_of(_func(dst))]
    return a == b


def transfer(record, mod: tvm.IRModule, target, validate: bool = True) -> Transferred:
    """Transfer source ``record`` (a :class:`~.readers.SourceRecord`) to kernel ``mod``.

    A record sampled in cocopie's design space has its decisions replayed on ``mod``'s
    own space (:func:`~.space.replay_decisions`); any other trace is replayed as it is,
    with its tile decisions adapted (:func:`apply_trace`).

    With ``validate`` the result is built for ``target``: one that fails to build is
    rejected. Numerical checks are :func:`check_numerics`.
    """
    from ..target import parse_target
    from .space import replay_decisions, space_tag

    target = parse_target(target)
    if space_tag(record.trace) is not None:  # sampled in cocopie's space: replay decisions
        sch, reason = replay_decisions(record.trace, mod, target)
        result = Transferred(sch is not None, reason or "", sch)
    elif not same_blocks(record.workload, mod):
        return Transferred(False, "block names differ from the source kernel's")
    else:
        result = apply_trace(record.trace, mod, target)
    if result.ok and validate:
        try:
            tvm.compile(result.schedule.mod, target=target)
        except Exception as err:  # noqa: BLE001
            return Transferred(False, f"does not build: {_short(err)}")
    return result


def random_args(mod: tvm.IRModule, seed: int = 0) -> list[np.ndarray]:
    """Random inputs (and zeroed outputs) for every buffer parameter of ``mod``'s kernel."""
    rng = np.random.default_rng(seed)
    arrays = []
    for info in ms.arg_info.ArgInfo.from_prim_func(_func(mod)):
        shape = [int(d) for d in info.shape]
        dtype = str(info.dtype)
        if dtype.startswith("float"):
            arrays.append(rng.uniform(-1, 1, shape).astype(dtype))
        else:
            arrays.append(rng.integers(0, 4, shape).astype(dtype))
    return arrays


def run_kernel(mod: tvm.IRModule, target, arrays: list[np.ndarray]) -> list[np.ndarray]:
    from ..target import parse_target

    target = parse_target(target)
    lib = tvm.compile(mod, target=target)
    dev = tvm.cpu(0)
    tensors = [tvm.runtime.tensor(a.copy(), dev) for a in arrays]
    name = next(str(gv.name_hint) for gv in mod.get_global_vars())
    lib[name](*tensors)
    return [t.numpy() for t in tensors]


def check_numerics(scheduled: tvm.IRModule, reference: tvm.IRModule, target,
                   rtol: float = 1e-4, atol: float = 1e-4) -> float:
    """Max abs difference between ``scheduled`` and the unscheduled ``reference`` build.

    Raises :class:`~tvm_cocopie.errors.ScheduleError` when they disagree.
    """
    arrays = random_args(reference)
    want = run_kernel(reference, target, arrays)
    got = run_kernel(scheduled, target, arrays)
    worst = 0.0
    for w, g in zip(want, got):
        worst = max(worst, float(np.max(np.abs(w.astype("float64") - g.astype("float64")), initial=0.0)))
        if not np.allclose(g, w, rtol=rtol, atol=atol):
            raise ScheduleError(f"transferred schedule computes wrong values (max abs diff {worst:.3g}); "
                                "it is dropped")
    return worst


def _func(mod: tvm.IRModule):
    return next(f for _, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))


def _short(err: Exception) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(err).__name__)[:300]

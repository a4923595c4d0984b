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

from ..errors import ScheduleError, last_line
from ..metaschedule import initialized_postprocs
from ..target import parse_target
from .kernel_class import blocks_of
from .space import replay_decisions, space_tag
from .tiles import adapt_tile

log = logging.getLogger(__name__)


@dataclass
class Transferred:
    """The outcome of one (kernel, source schedule) pair."""

    ok: bool
    reason: str = ""
    schedule: object | None = None  # tvm.s_tir.Schedule
    changed_tiles: int = 0

    @property
    def mod(self) -> tvm.IRModule | None:
        """The transferred schedule's module (``None`` when the transfer failed)."""
        return self.schedule.mod if self.schedule is not None else None


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
        return Transferred(False, f"trace does not apply: {last_line(err)}")
    try:
        sch.enter_postproc()
        for proc in initialized_postprocs(mod, target):
            if not proc.apply(sch):
                return Transferred(False, f"post-processor {type(proc).__name__} rejected it")
    except Exception as err:  # noqa: BLE001
        return Transferred(False, f"post-processing failed: {last_line(err)}")
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
            return Transferred(False, f"does not build: {last_line(err)}")
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
    """Build kernel ``mod`` for ``target`` and run it on ``arrays`` (outputs included,
    overwritten); the arrays after the call."""
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

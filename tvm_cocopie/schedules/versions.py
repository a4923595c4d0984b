"""Two schedules of one kernel, chosen at run time: multi-versioning for symbolic extents.

SOD² (issue 17) compiles a model once for every size of its symbolic dims. Some choices
of a schedule depend on a size a static build knows: above all whether a loop nest runs
on the thread pool at all (:data:`~.base.MIN_PARALLEL_WORK`: a fork-join costs
microseconds on an idle machine and a time slice when a worker was preempted, so small
kernels stay serial). With a symbolic extent that size is known only at run time, so the
kernel carries both versions: ``if condition: first else: second``, the condition an
expression of its symbolic extents, evaluated once per call.

TIR allows no variable or buffer to be defined twice, and two schedules of one PrimFunc
share its block iterators. The second version is therefore scheduled on a copy with
fresh definitions (``renew_defs``), whose parameters are then bound to the first's: its
shape variables by ``Bind``, its buffers by ``DeclBuffer`` views of the same data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable

from tvm import relax, s_tir, tirx
from tvm.sym import Analyzer

from ..errors import last_line
from ..target import CpuInfo
from .base import root_blocks

log = logging.getLogger(__name__)


def is_symbolic(func: tirx.PrimFunc) -> bool:
    """Whether any loop extent of ``func`` (before scheduling) is symbolic."""
    sch = s_tir.Schedule(func)
    return any(not isinstance(sch.get(loop).extent, tirx.IntImm)
               for block in root_blocks(sch) for loop in sch.get_loops(block))


def block_iterations(func: tirx.PrimFunc) -> list:
    """Iterations of each root block of ``func`` (expressions of its symbolic extents)."""
    sch = s_tir.Schedule(func)
    totals = []
    for block in root_blocks(sch):
        total = tirx.const(1, "int64")
        for loop in sch.get_loops(block):
            total = total * tirx.Cast("int64", sch.get(loop).extent)
        totals.append(total)
    return totals


def _is_buffer(param) -> bool:
    return isinstance(param.ty, tirx.BufferType)


def _bind_params(first: tirx.PrimFunc, second: tirx.PrimFunc) -> list:
    """Statements that define the parameters of ``second`` (fresh definitions of the same
    function) as those of ``first``: scalars and shape variables bound, buffers declared
    as views of the same data."""
    binds, buffers, bound = [], [], []

    def bind(var, value):
        if not any(var.same_as(v) for v in bound):
            bound.append(var)
            binds.append(tirx.Bind(var, value))

    for a, b in zip(first.params, second.params):
        if not _is_buffer(b):
            bind(b, a)
            continue
        for da, db in zip(a.shape, b.shape):
            if isinstance(db, tirx.Var):
                bind(db, da)
        buffers.append(tirx.DeclBuffer(b, data=a.data))
    return binds + buffers


def _renamed(realize: s_tir.SBlockRealize, name: str) -> s_tir.SBlockRealize:
    """A version's root block under another name (``get_sblock("root")`` stays unique)."""
    b = realize.block
    block = s_tir.SBlock(b.iter_vars, b.reads, b.writes, name, b.body, b.init,
                         b.alloc_buffers, b.match_buffers, b.annotations)
    return s_tir.SBlockRealize(realize.iter_values, realize.predicate, block)


def _only_empty(func: tirx.PrimFunc, condition: tirx.PrimExpr) -> bool:
    """Whether, where ``condition`` holds, some buffer of ``func`` provably has no elements.

    A version for such sizes never does work, and it must not be built at all: TIR's
    simplifier, knowing the branch's bounds (``W < 4``, so ``W // 4`` is 0, inside loops
    over ``W // 4``), folds a reshape's index arithmetic (``... // (W // 4)``) into a
    division by zero and the build fails. Shape variables are taken as non-negative."""
    analyzer = Analyzer()
    dims = [dim for param in func.params if _is_buffer(param) for dim in param.shape
            if not isinstance(dim, tirx.IntImm)]
    free = {var for expr in [condition, *dims] for var in tirx.analysis.undefined_vars(expr)}
    with contextlib.ExitStack() as scopes:
        for var in free:
            scopes.enter_context(analyzer.constraint_scope(var >= 0))
        # simplified first: the analyzer bounds a variable only from a simple condition
        scopes.enter_context(analyzer.constraint_scope(analyzer.simplify(condition)))
        return any(analyzer.can_prove(dim <= 0) for dim in dims)


def versioned(func: tirx.PrimFunc, schedule: Callable[[s_tir.Schedule, bool], object],
              condition: tirx.PrimExpr) -> s_tir.Schedule | None:
    """``func`` scheduled twice, ``schedule(sch, True)`` and ``schedule(sch, False)``, in one
    PrimFunc that runs the first where ``condition`` (over the variables of ``func``, which
    its schedules keep) holds and the second elsewhere.

    ``schedule`` returns the schedule to use (maybe a copy) or ``None``; without a second
    version (``None``, or a combination TVM refuses: logged) the first is returned alone.
    """
    first = schedule(s_tir.Schedule(func), True)
    if first is None:
        return None
    second = schedule(s_tir.Schedule(s_tir.renew_defs(func)), False)
    if second is None:
        return first
    fa, fb = first.mod["main"], second.mod["main"]
    condition = Analyzer().simplify(condition)
    if _only_empty(fa, tirx.Not(condition)):
        log.debug("one version only: the second would run on empty tensors only")
        return first
    if _only_empty(fa, condition):
        log.debug("one version only: the first would run on empty tensors only")
        return second
    try:
        both = tirx.IfThenElse(condition, _renamed(fa.body, "version_0"), tirx.SeqStmt(
            [*_bind_params(fa, fb), _renamed(fb.body, "version_1")]))
        # one root block over both: Relax's lowering reads a PrimFunc's body as one
        root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", both))
        return s_tir.Schedule(fa.with_body(root))
    except (RuntimeError, ValueError, TypeError) as err:  # TVM errors are RuntimeErrors
        log.debug("one version only: %s", last_line(err))
        return first


def parallel_when(sch: s_tir.Schedule, info: CpuInfo,
                  schedule: Callable[[s_tir.Schedule, CpuInfo], object],
                  work: Callable[[tirx.PrimFunc], tirx.PrimExpr], threshold: int):
    """``schedule(sch, info)``; for a PrimFunc with symbolic extents on a multi-core CPU, two
    versions of it: the multi-core one where ``work(func)`` reaches ``threshold``, a
    one-core one (no fork-join) elsewhere, the choice a static build of each size makes.

    Measured on the encoder compiled with a symbolic length (2 cores): at 32 tokens its
    layer-norm, softmax and attention kernels ran 1.4-2.2x their static time in parallel
    where the static build runs them serial (Q K^T 19.9 against 14.5 us); with the serial
    version 1.0-1.06x (13.4 against 12.6 us)."""
    func = sch.mod["main"]
    # a reshape stays one version: Relax's lowering makes a call of it a view of its input
    # (no kernel at all), and it sees the pattern only in a body of one root block
    if info.num_cores < 2 or not is_symbolic(func) or relax.analysis.has_reshape_pattern(func):
        return schedule(sch, info)
    serial = dataclasses.replace(info, num_cores=1)
    return versioned(func, lambda s, parallel: schedule(s, info if parallel else serial),
                     work(func) >= threshold)


__all__ = ["block_iterations", "is_symbolic", "parallel_when", "versioned"]

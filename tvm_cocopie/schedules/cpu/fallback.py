"""The schedule every other PrimFunc gets: parallel outer loops, vectorized inner loop.

Applies to anything (element-wise chains, layout transforms, padding, pooling,
global pooling, softmax, layer norm, reductions, concatenation...), and each step is
tried on its own, so that a step TVM refuses is skipped, never half-applied:

1. spatial blocks whose consumers are all spatial are inlined into them (one pass
   over memory for a chain of element-wise ops);
2. a spatial block gets its leading loops fused and parallelized (8 iterations per
   core at least) and its innermost loop vectorized;
3. a reduction block gets its spatial loops parallelized; when its innermost spatial
   axis is contiguous in its output and in an input (the channel lanes of a NCHWc
   pooling, the columns of a NCHW pooling), the reduction loops move outside that
   axis, which is then vectorized: one vector accumulator per output row.

Symbolic extents (SOD², issue 17: a sequence length known at run time) are fine: loops
of unknown extent are parallelized, and an innermost one is vectorized in whole vectors
with a scalar tail (:func:`~.row_reduction.vectorize_symbolic`). Such a kernel carries a
serial version too, run where its work is below :data:`MIN_PARALLEL_WORK` as a static
build of that size would (:func:`~tvm_cocopie.schedules.versions.parallel_when`).
"""

from __future__ import annotations

import logging

from tvm import ir, s_tir, tirx

from ...errors import last_line
from ...exprs import is_load
from ...target import CpuInfo
from ..base import (
    DATA_PAR,
    MIN_PARALLEL_WORK,
    CpuRule,
    block_work,
    const_extent,
    fuse_parallel,
    is_spatial,
    iter_types,
    parallel_spatial,
    root_blocks,
    try_apply,
    uses_var,
    vectorizable,
    vectorize_inner,
    writes_output,
)
from ..versions import block_iterations, parallel_when
from .row_reduction import vectorize_symbolic

log = logging.getLogger(__name__)



def _contiguous_in(regions, var) -> bool:
    return any(r.region and uses_var(r.region[-1].min, var) for r in regions)


def is_padding(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` only selects between one input element and a constant (a pad)."""
    body = sch.get(block).body
    value = getattr(body, "value", None)
    if isinstance(value, ir.Call) and getattr(value.op, "name", "") == "prim.if_then_else":
        branches = list(value.args[1:])
    elif isinstance(value, tirx.Select):
        branches = [value.true_value, value.false_value]
    else:
        return False
    return (sum(is_load(b) for b in branches) == 1
            and sum(isinstance(b, (tirx.FloatImm, tirx.IntImm)) for b in branches) == 1)


#: Most expression nodes a block may carry into its consumers by inlining when they read it
#: more than once (inlining then copies it). A chain whose every step reads its predecessor
#: twice doubles with each inlined step: MaxPool with Indices, imported as one
#: ``where(prev < window[k], window[k], prev)`` step per window position, would build a
#: 2^25-node expression for a 5x5 window, and ``compute_inline`` never returns. Past this
#: size such a block stays materialized, which cuts the chain every few steps (TIR lowering
#: slows down with longer steps: the 5x5 case builds in 3-6 s on this loaded machine at 64,
#: stock TVM 2.7 s). A block read once is inlined whatever its size: that copies nothing,
#: and a chain of those grows linearly. Zoo models affected: CRNN (a 65+-node clip read 19
#: times), the encoder and YOLO (fast_exp read twice), all as fast or faster materialized.
MAX_DUPLICATED_NODES = 64

#: Fields of TIR expression nodes that hold sub-expressions.
_EXPR_FIELDS = ("a", "b", "condition", "true_value", "false_value", "value", "body", "args",
                "indices", "base", "stride")


def _walk(expr, limit: int):
    """The nodes of the TIR expression ``expr`` as a tree (a shared sub-expression once per
    use), at most ``limit`` of them."""
    stack = [expr]
    seen = 0
    while stack and seen < limit:
        node = stack.pop()
        if isinstance(node, (list, tuple)) or type(node).__name__ in ("Array", "List"):
            stack.extend(node)
            continue
        if not isinstance(node, ir.expr.Expr):
            continue
        seen += 1
        yield node
        for name in _EXPR_FIELDS:
            child = getattr(node, name, None)
            if child is not None and not isinstance(child, (int, float, str)):
                stack.append(child)


def expr_nodes(expr, limit: int = 1 << 20) -> int:
    """The number of nodes of the TIR expression ``expr`` as a tree (a shared
    sub-expression counts each time it is used), at most ``limit``."""
    return sum(1 for _ in _walk(expr, limit))


def _stored_value(sch: s_tir.Schedule, block):
    return getattr(sch.get(block).body, "value", None)


def inline_copies(sch: s_tir.Schedule, block) -> tuple[int, int]:
    """``(nodes, reads)``: the expression nodes ``block`` stores (its producers already
    inlined into it; at most :data:`MAX_DUPLICATED_NODES` + 1) and how many times its
    consumers read it, so how many copies of it inlining makes. A body that is not a single
    store counts as small, a consumer that is not as one read."""
    value = _stored_value(sch, block)
    nodes = expr_nodes(value, MAX_DUPLICATED_NODES + 1) if value is not None else 0
    written = [w.source for w in sch.get(block).writes]
    reads = 0
    for consumer in sch.get_consumers(block):
        consumed = _stored_value(sch, consumer)
        if consumed is None:
            reads += 1
            continue
        reads += sum(1 for n in _walk(consumed, 1 << 16)
                     if is_load(n) and any(n.source.same_as(b) for b in written))
    return nodes, reads


def _select_parts(value) -> tuple | None:
    """``(condition, [branches])`` of an ``if_then_else`` or ``Select``, else ``None``."""
    if isinstance(value, ir.Call) and getattr(value.op, "name", "") == "prim.if_then_else":
        return value.args[0], list(value.args[1:])
    if isinstance(value, tirx.Select):
        return value.condition, [value.true_value, value.false_value]
    return None


def is_concatenation(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` selects between reads of two buffers by position (a concatenation:
    ``if_then_else(4 <= j, b[j - 4], a[j])``; a condition that reads a buffer, as ONNX
    ``Where`` does, is not one).

    Such a block stays materialized. Inlined into its consumer, the branch not taken
    indexes out of its buffer (``b[-4]`` at ``j = 0``), and through a consumer's reshape
    arithmetic TVM 0.27 miscompiled that once its indices were narrowed to 32 bits: ONNX's
    RotaryEmbedding with a 3-D input (reshape, slices, products, concatenation, reshape
    fused into one function) returned garbage for every other head, right with
    ``tirx.NarrowDataType`` or the late ``tirx.StmtSimplify`` disabled, and right with the
    concatenation materialized, as stock TVM (which inlines nothing) leaves it.
    """
    parts = _select_parts(_stored_value(sch, block))
    if parts is None:
        return False
    condition, branches = parts

    def reads(expr) -> bool:
        return any(is_load(n) for n in _walk(expr, 1 << 12))

    return not reads(condition) and all(reads(b) for b in branches)


def inline_spatial_chains(sch: s_tir.Schedule) -> None:
    """Inline spatial blocks into their consumers when all of those are spatial, and
    padding into any consumer (a pooling window re-reads a select, not a pass over a
    padded copy: 4-5 us against 45 us for a ResNet stem max pool at 64 px). A block
    its consumers read more than once stays materialized once its expression (with what
    was inlined into it) has grown past :data:`MAX_DUPLICATED_NODES`; so does a
    concatenation (:func:`is_concatenation`)."""
    for block in root_blocks(sch):
        if not is_spatial(sch, block) or writes_output(sch, block):
            continue
        if is_concatenation(sch, block):
            log.debug("not inlined: %s is a concatenation", sch.get(block).name_hint)
            continue
        nodes, reads = inline_copies(sch, block)
        if reads > 1 and nodes > MAX_DUPLICATED_NODES:
            log.debug("not inlined: %s (%d+ expression nodes) is read %d times",
                      sch.get(block).name_hint, nodes, reads)
            continue
        consumers = sch.get_consumers(block)
        if not consumers or not (all(is_spatial(sch, c) for c in consumers)
                                 or is_padding(sch, block)):
            continue
        try:
            sch.compute_inline(block)
        except Exception as err:  # noqa: BLE001 - kept materialized, scheduled on its own
            log.debug("not inlined: %s", last_line(err))


def contiguous_lane_axis(sch: s_tir.Schedule, block):
    """The loop of ``block``'s (a reduction's) innermost spatial axis if it is contiguous
    in its output and in an input, of at least 4 iterations, with another spatial loop
    outside it: the axis its reduction can run along in vector accumulators; else
    ``None``."""
    loops = sch.get_loops(block)
    kinds = iter_types(sch, block)
    if len(loops) != len(kinds):
        return None
    stmt = sch.get(block)
    spatial = [lp for lp, k in zip(loops, kinds) if k == DATA_PAR]
    if len(spatial) < 2 or len(spatial) == len(loops):
        return None
    candidate = [iv.var for iv, k in zip(stmt.iter_vars, kinds) if k == DATA_PAR][-1]
    ext = sch.get(spatial[-1]).extent
    if (isinstance(ext, tirx.IntImm) and int(ext) >= 4
            and _contiguous_in(stmt.writes, candidate)
            and _contiguous_in(stmt.reads, candidate)):
        return spatial[-1]
    return None


def schedule_reduction(sch: s_tir.Schedule, block, info: CpuInfo) -> None:
    """Parallel spatial loops; vectorize a contiguous inner spatial axis if there is one."""
    loops = sch.get_loops(block)
    kinds = iter_types(sch, block)
    if len(loops) != len(kinds):
        fuse_parallel(sch, loops[:1], info, block_work(sch, block))
        return
    work = block_work(sch, block)
    spatial = [lp for lp, k in zip(loops, kinds) if k == DATA_PAR]
    reduce = [lp for lp, k in zip(loops, kinds) if k != DATA_PAR]
    if not spatial:
        return
    vec_var = contiguous_lane_axis(sch, block)
    if vec_var is not None and vectorizable(sch, block):
        sch.reorder(*spatial[:-1], *reduce, vec_var)
        fuse_parallel(sch, spatial[:-1], info, work)
        vectorize_inner(sch, vec_var, info.f32_lanes)
        sch.decompose_reduction(block, reduce[0])
    else:
        leading = kinds[: len(spatial)] == [DATA_PAR] * len(spatial)
        fuse_parallel(sch, spatial if leading else spatial[:1], info, work)
        if any(const_extent(sch, lp) is None for lp in reduce):
            # TIR runs the init at a reduction's first iteration: over an empty symbolic
            # extent (a row's tail of ``n % lanes``, :func:`~tvm_cocopie.topi.cpu.fast_math.
            # row_softmax`) the result would never be written
            sch.decompose_reduction(block, reduce[0])


def spatial_recipe(sch: s_tir.Schedule, block, info: CpuInfo) -> None:
    """:func:`~tvm_cocopie.schedules.base.parallel_spatial`, and a symbolic innermost loop
    (the key axis of attention scores) vectorized by :func:`vectorize_symbolic`."""
    parallel_spatial(sch, block, info)
    loops = sch.get_loops(block)
    if len(loops) >= 2 and const_extent(sch, loops[-1]) is None and vectorizable(sch, block):
        vectorize_symbolic(sch, loops[-1], info.f32_lanes)


def schedule_any(sch: s_tir.Schedule, info: CpuInfo) -> s_tir.Schedule:
    """The fallback recipe on ``sch`` (returns the schedule to use, maybe a copy)."""
    inline_spatial_chains(sch)
    return schedule_blocks(sch, info)


def schedule_blocks(sch: s_tir.Schedule, info: CpuInfo,
                    reduction=None) -> s_tir.Schedule:
    """Each root block of ``sch`` parallel and vectorized on its own: spatial blocks by
    :func:`spatial_recipe`, reductions by ``reduction(sch, block, info)`` (default
    :func:`schedule_reduction`); returns the schedule to use, maybe a copy."""
    for block in root_blocks(sch):
        if not sch.get_loops(block):
            continue
        name = sch.get(block).name_hint
        recipe = (spatial_recipe if is_spatial(sch, block)
                  else reduction or schedule_reduction)
        trial = try_apply(sch, lambda s, b=block, f=recipe: f(s, b, info))
        if trial is None:  # e.g. vectorizing an opaque access: parallel only
            trial = try_apply(sch, lambda s, b=block: fuse_parallel(s, s.get_loops(b)[:1], info))
        if trial is None:
            log.warning("fallback schedule: block %s left serial", name)
            continue
        sch = trial
    return sch


class Fallback(CpuRule):
    """Parallel + vectorized default for any PrimFunc on a CPU."""

    name = "fallback"
    generic = True

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """Parallelize and vectorize every root block of ``sch``; the schedule (a list when
        ``tunable``), or ``None`` when nothing can be scheduled."""
        if not root_blocks(sch):
            return None
        if tunable:
            return schedule_any(sch, info)
        return parallel_when(sch, info, schedule_any,
                             lambda func: _largest(block_iterations(func)), MIN_PARALLEL_WORK)


def _largest(values: list) -> tirx.PrimExpr:
    largest = values[0]
    for value in values[1:]:
        largest = tirx.max(largest, value)
    return largest

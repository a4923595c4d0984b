"""Row-wise kernels: reductions over the innermost axis with their producers and consumers.

Softmax, layer norm (``mean``, ``x - mean``, ``mean((x - mean)^2)``, ``rsqrt``, scale and
shift), RMS norm, log-softmax and a plain ``ReduceMean`` / ``ReduceSum`` over the last
axis all have one shape: every block iterates over the same rows, and the reductions run
along the row. The generic schedule (:mod:`.fallback`) runs each block as its own
parallel pass over the whole tensor, its reductions scalar, and a row whose length is not
a multiple of the vector width unvectorized: ViT-tiny's 197-wide softmax took 0.37 ms.
Here the kernel becomes one parallel loop over rows (DNNFusion's row-wise fusion, seed
004 §3.4, at the level of the schedule), and per row:

1. element-wise blocks are inlined into element-wise consumers of the same size (one
   pass), never a per-row value into a per-element consumer (``rsqrt`` once per row);
2. every other block is computed at the row loop, so a row's intermediate values (the
   exponentials of a softmax) stay in L1 between the passes;
3. a reduction over a multiple of the vector width is split into vector-width partial
   results (``rfactor``), vectorized; other rows keep one scalar chain;
4. element-wise loops are vectorized, a row that is not a multiple of the vector
   width in a vector part and a scalar tail (``loop_partition``), without a predicate
   in the vector loop.

It takes a PrimFunc whose reductions all run over trailing axes read contiguously (the
last index of an input), whose last block writes the result and whose other blocks are
computed per row of it; anything else is left to the next rule.
"""

from __future__ import annotations

import logging

from tvm import s_tir

from ...errors import last_line
from ...target import CpuInfo
from ..base import (
    DATA_PAR,
    MIN_PARALLEL_WORK,
    CpuRule,
    block_work,
    const_extent,
    is_spatial,
    iter_types,
    root_blocks,
    try_apply,
    uses_var,
    vectorizable,
    writes_output,
)

log = logging.getLogger(__name__)



def _is_row_reduction(sch: s_tir.Schedule, block) -> bool:
    """Spatial iterators first, then reduction ones, and the innermost reduction variable
    alone indexes the last dimension of an input (the reduction runs along a row)."""
    kinds = iter_types(sch, block)
    loops = sch.get_loops(block)
    if len(loops) != len(kinds) or DATA_PAR not in kinds:
        return False
    first_reduce = kinds.index(next(k for k in kinds if k != DATA_PAR))
    if any(k == DATA_PAR for k in kinds[first_reduce:]):
        return False
    stmt = sch.get(block)
    inner = stmt.iter_vars[-1].var
    spatial = [iv.var for iv, k in zip(stmt.iter_vars, kinds) if k == DATA_PAR]
    return any(r.region and uses_var(r.region[-1].min, inner)
               and not any(uses_var(r.region[-1].min, v) for v in spatial)
               for r in stmt.reads)  # a pooling window's ``ow * 2 + rw`` is not a row


def _row_count(sch: s_tir.Schedule, block) -> int | None:
    """Iterations of the spatial loops of a row reduction: its number of rows."""
    total = 1
    for loop, kind in zip(sch.get_loops(block), iter_types(sch, block)):
        if kind == DATA_PAR:
            extent = const_extent(sch, loop)
            if extent is None:
                return None
            total *= extent
    return total


def inline_elementwise(sch: s_tir.Schedule) -> None:
    """Inline spatial blocks into spatial consumers with the same iteration count."""
    for block in root_blocks(sch)[:-1]:
        if not is_spatial(sch, block) or writes_output(sch, block):
            continue
        consumers = sch.get_consumers(block)
        size = block_work(sch, block)
        if consumers and all(is_spatial(sch, c) and block_work(sch, c) == size
                             for c in consumers):
            sch.compute_inline(block)


def lane_partials(sch: s_tir.Schedule, block, lanes: int):
    """``rfactor`` the reduction of ``block`` over ``lanes`` partial results; the rfactor
    block, or ``None`` for a reduction shorter than two vectors or not a multiple of one.

    Only whole vectors: the split of a row that is not a multiple of ``lanes`` puts a
    predicate on the rfactor block, and ``compute_at`` dropped it (TVM 0.27, checked:
    ViT-tiny's 197-long attention rows then read past the row); such a reduction stays
    one scalar chain per row.
    """
    kinds = iter_types(sch, block)
    loops = sch.get_loops(block)
    reduce_loops = loops[kinds.index(next(k for k in kinds if k != DATA_PAR)):]
    k = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
    extent = const_extent(sch, k)
    if extent is None or extent < 2 * lanes or extent % lanes:
        return None
    _, ki = sch.split(k, [None, lanes])
    return sch.rfactor(ki, 0)


#: a block computed per row may iterate at most this many times the result's row
ROW_RECOMPUTE = 4


def work_under(sch: s_tir.Schedule, block, rows) -> int:
    """Iterations of ``block`` per iteration of the row loop (symbolic extents: huge)."""
    total = 1
    for loop in loops_under(sch, block, rows):
        total *= const_extent(sch, loop) or (1 << 30)
    return total


def loops_under(sch: s_tir.Schedule, block, rows) -> list:
    """The loops of ``block`` inside the row loop ``rows``."""
    loops = sch.get_loops(block)
    at = [sch.get(lp).same_as(sch.get(rows)) for lp in loops]
    return loops[at.index(True) + 1:] if True in at else []


def schedule_partials(sch: s_tir.Schedule, rf, rows, lanes: int) -> None:
    """The lane loop of an rfactor block computed at ``rows`` innermost and vectorized.

    Under the row loop the block's loops are its non-unit iterators in order: the lane
    iterator ``rfactor`` put first, the reduction over vectors last."""
    inner = loops_under(sch, rf, rows)
    if len(inner) < 2 or const_extent(sch, inner[0]) != lanes:
        return
    lane, reduce_loop = inner[0], inner[-1]
    sch.reorder(reduce_loop, lane)
    if vectorizable(sch, rf):
        sch.vectorize(lane)
    else:
        sch.unroll(lane)


def vectorize_row(sch: s_tir.Schedule, block, rows, lanes: int) -> None:
    """Vectorize the innermost loop of a spatial ``block`` inside the row loop: whole
    vectors, a scalar tail."""
    inner = loops_under(sch, block, rows)
    if not inner or not vectorizable(sch, block):
        return
    loop = inner[-1]
    extent = const_extent(sch, loop)
    if extent is None or extent < lanes:
        return
    tail = extent % lanes
    if tail:
        loop = sch.loop_partition(loop, [extent - tail, None])[0]
    _, inner = sch.split(loop, [None, lanes])
    sch.vectorize(inner)


def schedule_rows(sch: s_tir.Schedule, info: CpuInfo) -> s_tir.Schedule | None:
    """The module docstring's recipe on ``sch`` (changed in place); ``None`` when the
    PrimFunc is not row-wise."""
    blocks = root_blocks(sch)
    if len(blocks) < 1 or not writes_output(sch, blocks[-1]):
        return None
    reductions = [b for b in blocks if not is_spatial(sch, b)]
    if not reductions or not all(_is_row_reduction(sch, b) for b in reductions):
        return None
    final = blocks[-1]
    final_loops = sch.get_loops(final)
    if is_spatial(sch, final):
        if len(final_loops) < 2:
            return None
        inner_var = sch.get(final).iter_vars[-1].var
        written = sch.get(final).writes[0].region
        if not written or not uses_var(written[-1].min, inner_var):
            return None  # its innermost loop is not along the row
    lanes = info.f32_lanes
    row_count = _row_count(sch, reductions[0])  # before rfactor reorders its iterators
    row_length = max((block_work(sch, b) or 0) // max(1, _row_count(sch, b) or 1)
                     for b in reductions)
    inline_elementwise(sch)
    partials = set()
    for block in root_blocks(sch):
        if not is_spatial(sch, block):
            rf = lane_partials(sch, block, lanes)
            if rf is not None:
                partials.add(sch.get(rf).name_hint)
    blocks = root_blocks(sch)
    final = blocks[-1]
    loops = sch.get_loops(final)
    if not is_spatial(sch, final):
        row_loops = loops[: iter_types(sch, final).count(DATA_PAR)]
    elif row_count is not None and block_work(sch, final) == row_count:
        row_loops = loops  # one result per row (the division of a mean)
    else:
        row_loops = loops[:-1]
    if not row_loops:
        return None
    work = block_work(sch, final)
    rows = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
    for block in reversed(blocks[:-1]):
        sch.compute_at(block, rows, preserve_unit_loops=False)
    row = max(work_under(sch, final, rows), row_length)
    if any(work_under(sch, b, rows) > ROW_RECOMPUTE * row for b in blocks[:-1]):
        return None  # a block needs more than its share of a row: not row-wise
    # a row kernel makes several passes per element: parallel from less work than the
    # fallback's element-wise threshold
    if info.num_cores > 1 and (work is None or work >= MIN_PARALLEL_WORK // 4):
        sch.parallel(rows)
    for block in sch.get_child_blocks(rows):
        name = sch.get(block).name_hint
        if name in partials:
            schedule_partials(sch, block, rows, lanes)
        elif is_spatial(sch, block):
            # loop_partition refused some blocks (TVM 0.27: "Buffer rank and region
            # dimension mismatch" on log-softmax's last pass): then that loop stays scalar
            sch = try_apply(sch, lambda s, b=block: vectorize_row(s, b, rows, lanes)) or sch
    return sch


class RowReduction(CpuRule):
    """Row-wise reduction kernels (softmax, layer norm, reductions over the last axis)."""

    name = "row_reduction"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """One parallel loop over rows, per row the blocks in cache, reductions in vector
        lanes; ``None`` when the PrimFunc is not row-wise (a block that cannot be computed
        per row included: the next rule takes it, no warning)."""
        try:
            return schedule_rows(sch, info)
        except Exception as err:  # noqa: BLE001 - a primitive refused: not a row-wise kernel
            log.debug("not row-wise: %s", last_line(err))
            return None

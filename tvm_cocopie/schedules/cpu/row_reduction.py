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

Symbolic extents (SOD², issue 17: a sequence length known at run time) take the same
path: the rows are one loop whatever their count (parallel in the version for many rows,
:func:`~tvm_cocopie.schedules.versions.parallel_when`), a reduction over a row of
symbolic length splits into lanes when its extent is provably whole vectors (the
softmax's body, :func:`~tvm_cocopie.topi.cpu.fast_math.row_softmax`), and an
element-wise loop of symbolic extent splits into vectors with a partition hint
(:func:`vectorize_symbolic`). Sizes that decide the recipe (a row's share of work) are
judged at :data:`~tvm_cocopie.topi.cpu.dense_packed.PLANNED_EXTENT`.
"""

from __future__ import annotations

import logging

from tvm import s_tir, tirx
from tvm.sym import Analyzer

from ...errors import last_line
from ...target import CpuInfo
from ...topi.cpu.dense_packed import PLANNED_EXTENT
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
from ..versions import block_iterations, parallel_when

log = logging.getLogger(__name__)



def is_row_reduction(sch: s_tir.Schedule, block) -> bool:
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


def _row_count(sch: s_tir.Schedule, block):
    """Iterations of the spatial loops of a row reduction: its number of rows (an
    expression when symbolic)."""
    total = 1
    for loop, kind in zip(sch.get_loops(block), iter_types(sch, block)):
        if kind == DATA_PAR:
            total *= extent_of(sch, loop)
    return total


def extent_of(sch: s_tir.Schedule, loop):
    """A loop's extent: an ``int`` when constant, else the TIR expression."""
    ext = sch.get(loop).extent
    return int(ext.value) if isinstance(ext, tirx.IntImm) else ext


def iterations(sch: s_tir.Schedule, block):
    """Iterations of the loops around ``block`` (an expression when symbolic)."""
    total = 1
    for loop in sch.get_loops(block):
        total *= extent_of(sch, loop)
    return total


def planned_value(extent) -> int:
    """``extent`` with every variable at :data:`PLANNED_EXTENT` (an int stays itself)."""
    if isinstance(extent, int):
        return extent
    analyzer = Analyzer()
    for var in tirx.analysis.undefined_vars(extent):
        analyzer.bind(var, tirx.const(PLANNED_EXTENT, var.ty.dtype))
    return int(analyzer.simplify(extent))


def same_extent(a, b) -> bool:
    """Whether two extents (ints or expressions) are provably equal."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(Analyzer().can_prove_equal(a, b))


def whole_vectors(extent, lanes: int) -> bool:
    """Whether a symbolic ``extent`` is provably a multiple of ``lanes``."""
    return bool(Analyzer().can_prove_equal(tirx.floormod(extent, lanes), 0))


def inline_elementwise(sch: s_tir.Schedule) -> None:
    """Inline spatial blocks into spatial consumers with the same iteration count."""
    for block in root_blocks(sch)[:-1]:
        if not is_spatial(sch, block) or writes_output(sch, block):
            continue
        consumers = sch.get_consumers(block)
        size = iterations(sch, block)
        if consumers and all(is_spatial(sch, c) and same_extent(iterations(sch, c), size)
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
    # the innermost loops, one per reduction iterator (the block may sit under a row
    # loop it was computed at, its own spatial loops gone)
    reduce_loops = loops[len(loops) - sum(k != DATA_PAR for k in kinds):]
    k = sch.fuse(*reduce_loops) if len(reduce_loops) > 1 else reduce_loops[0]
    extent = const_extent(sch, k)
    if extent is None:
        if not whole_vectors(sch.get(k).extent, lanes):
            return None  # symbolic and maybe not whole vectors: one scalar chain
    elif extent < 2 * lanes or extent % lanes:
        return None
    _, ki = sch.split(k, [None, lanes])
    return sch.rfactor(ki, 0)


def row_has_tail(sch: s_tir.Schedule, block, lanes: int) -> bool:
    """Whether ``block`` reduces along rows of a buffer computed in the function (by a
    block before it) whose length is not whole vectors. Placed under a row loop after that
    buffer's producer with ``reverse_compute_at``, the lane partials of such a row (a
    layer norm's body of 112 of 120: 7 vectors, a tail of 8) came out with 8 of their
    16 lanes (TVM 0.27 bounds the lane by the last vector's remainder) and every
    normalized value was wrong (PP-OCR rec's projection + residual + layer norm, caught
    by DNNFusion's check): the schedules that place reductions so
    (:mod:`.matmul_packed`'s row epilogue, :mod:`.matmul_chain`) keep such a reduction
    one scalar chain per row."""
    written = [w.source for p in sch.get_producers(block) for w in sch.get(p).writes]
    for region in sch.get(block).reads:
        buf = region.source
        if not any(buf.same_as(w) for w in written) or not buf.shape:
            continue  # a parameter only read: nothing bounds it under the row loop
        last = buf.shape[-1]
        if hasattr(last, "value") and int(last.value) % lanes:
            return True
    return False


#: a block computed per row may iterate at most this many times the result's row
ROW_RECOMPUTE = 4


def work_under(sch: s_tir.Schedule, block, rows) -> int:
    """Iterations of ``block`` per iteration of the row loop (symbolic extents at
    :data:`PLANNED_EXTENT`)."""
    total = 1
    for loop in loops_under(sch, block, rows):
        total *= planned_value(extent_of(sch, loop))
    return total


def loops_under(sch: s_tir.Schedule, block, rows) -> list:
    """The loops of ``block`` inside the row loop ``rows``."""
    loops = sch.get_loops(block)
    at = [sch.get(lp).same_as(sch.get(rows)) for lp in loops]
    return loops[at.index(True) + 1:] if True in at else []


def schedule_partials(sch: s_tir.Schedule, rf, rows, lanes: int) -> None:
    """The lane loop of an rfactor block computed at ``rows`` innermost and vectorized.

    Under the row loop the block's loops are its non-unit iterators in order: the lane
    iterator ``rfactor`` put first, the reduction over vectors last. Where ``rows`` is a
    tile of several rows (a matmul's row tile with its layer norm, :mod:`.matmul_packed`),
    the tile's rows lie between them: they go outside the reduction, and the partials'
    buffer takes the lane as its last axis, so that a row's partials are one contiguous
    vector (``rfactor`` puts the lane first: with the rows inside, every partial vector
    was a gather and a scatter of lanes a row length apart)."""
    inner = loops_under(sch, rf, rows)
    if len(inner) < 2 or const_extent(sch, inner[0]) != lanes:
        return
    lane, reduce_loop = inner[0], inner[-1]
    if len(inner) > 2:
        sch.reorder(*inner[1:-1], reduce_loop, lane)
        sch.transform_layout(rf, ("write", 0), lambda k, *rest: (*rest, k))
    else:
        sch.reorder(reduce_loop, lane)
    if vectorizable(sch, rf):
        sch.vectorize(lane)
    else:
        sch.unroll(lane)


#: The annotation that makes TVM's ``LoopPartition`` lowering pass split a loop at the
#: conditions inside it, whatever its extent (the ``loop_partition`` primitive refuses
#: symbolic ones)
PARTITION_HINT = "pragma_loop_partition_hint"


def vectorize_symbolic(sch: s_tir.Schedule, loop, lanes: int) -> None:
    """Vectorize a loop of symbolic extent: split by ``lanes`` (a predicate on the last
    vector), the outer loop hinted for partitioning, so that lowering makes it a loop of
    whole vectors without the predicate and a scalar tail. A predicate left in the
    vector loop makes TVM's vectorizer scalarize all of it."""
    outer, inner = sch.split(loop, [None, lanes])
    sch.annotate(outer, PARTITION_HINT, 1)
    sch.vectorize(inner)


def vectorize_row(sch: s_tir.Schedule, block, rows, lanes: int) -> None:
    """Vectorize the innermost loop of a spatial ``block`` inside the row loop: whole
    vectors, a scalar tail."""
    inner = loops_under(sch, block, rows)
    if not inner or not vectorizable(sch, block):
        return
    loop = inner[-1]
    extent = const_extent(sch, loop)
    if extent is None:
        vectorize_symbolic(sch, loop, lanes)
        return
    if extent < lanes:
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
    if not reductions or not all(is_row_reduction(sch, b) for b in reductions):
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
    row_length = max(planned_value(iterations(sch, b)) // max(1, planned_value(_row_count(sch, b)))
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
    elif same_extent(iterations(sch, final), row_count):
        row_loops = loops  # one result per row (the division of a mean)
    else:
        row_loops = _leading_rows(sch, final, row_count)
    if not row_loops:
        return None
    work = block_work(sch, final)
    if work is not None:  # the final block may write one value per row (a variance)
        work = max(work, planned_value(row_count) * row_length)
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
    init_reductions_first(sch, rows)
    return sch


def is_row_pass(sch: s_tir.Schedule, names: list) -> bool:
    """Whether the root blocks ``names`` are what :func:`schedule_row_pass` takes: a row
    reduction first, then row reductions and element-wise blocks."""
    blocks = [sch.get_sblock(n) for n in names]
    return bool(blocks) and not is_spatial(sch, blocks[0]) and all(
        is_spatial(sch, b) or is_row_reduction(sch, b) for b in blocks)


def schedule_row_pass(sch: s_tir.Schedule, names: list, info: CpuInfo):
    """The root blocks ``names`` (in program order: a row-wise computation whose per-row
    results other blocks read, a layer norm's mean and inverse deviation ahead of the
    matmul that normalizes its rows on the fly, :mod:`.matmul_packed`) as one pass over
    rows: the first block's row loops fused (parallel with enough work), every other
    block computed under them (``reverse_compute_at``: its results leave the pass, so it
    cannot be computed at a consumer), reductions in vector partials, row loops
    vectorized. The first block must be a row reduction. Returns ``(the schedule, the row
    loop)``: the schedule may be a copy of ``sch`` (a step tried on a copy), so go on
    with the one returned; ``None`` (nothing changed) when the blocks are not such a
    pass."""
    if not is_row_pass(sch, names):
        return None
    blocks = [sch.get_sblock(n) for n in names]
    row_dims = len(sch.get(blocks[0]).writes[0].source.shape)
    work = iterations(sch, blocks[0])
    lanes = info.f32_lanes
    partials = set()
    for block in blocks:
        if not is_spatial(sch, block):
            rf = lane_partials(sch, block, lanes)
            if rf is not None:
                partials.add(sch.get(rf).name_hint)
    members = set(names) | partials
    stage = [b for b in root_blocks(sch) if sch.get(b).name_hint in members]
    loops = sch.get_loops(stage[0])
    rows = sch.fuse(*loops[:row_dims]) if row_dims > 1 else loops[0]
    for block in stage[1:]:
        if not sch.get_producers(block):
            # it reads only parameters (a layer norm's tail past the last whole vector,
            # 112 + 8 of 120): nothing under the row loop bounds it, so
            # ``reverse_compute_at`` computed every row in every row's iteration (40x
            # the work, and in parallel the rows' statistics raced): its own row loop
            # merged with the pass's instead
            own = sch.get_loops(block)
            rows = sch.merge(rows, sch.fuse(*own[:row_dims]) if row_dims > 1 else own[0])
            continue
        sch.reverse_compute_at(block, rows, preserve_unit_loops=False)
    if info.num_cores > 1 and planned_value(work) >= MIN_PARALLEL_WORK // 4:
        sch.parallel(rows)
    for block in sch.get_child_blocks(rows):
        if sch.get(block).name_hint in partials:
            schedule_partials(sch, block, rows, lanes)
        elif is_spatial(sch, block):
            sch = try_apply(sch, lambda s, b=block: vectorize_row(s, b, rows, lanes)) or sch
    init_reductions_first(sch, rows)
    return sch, rows


def _leading_rows(sch: s_tir.Schedule, final, row_count) -> list:
    """The loops of the result block that iterate over the reductions' rows: the leading
    ones whose extents multiply to ``row_count``, the rest fused into one loop along the
    row. A reduction over several trailing axes (an instance norm's mean over H and W)
    has rows of more than the last axis: taking every loop but the last as the rows
    recomputed the whole mean once per image row (1 x 64 x 128 x 128: 6.2 ms, 128x the
    work). Else every loop but the last (a row along the last axis)."""
    loops = sch.get_loops(final)
    total = 1
    for k, loop in enumerate(loops):
        if isinstance(row_count, int) and total == row_count and 0 < k < len(loops) - 1:
            sch.fuse(*loops[k:])
            return sch.get_loops(final)[:k]
        extent = extent_of(sch, loop)
        if not isinstance(extent, int):
            break
        total *= extent
    return loops[:-1]


def init_reductions_first(sch: s_tir.Schedule, rows) -> None:
    """Give each reduction under ``rows`` whose loops have a symbolic extent its init
    before those loops. TIR runs a reduction's init at its first iteration, which a loop
    of extent 0 never has: the tail of a row of whole vectors (``n % lanes``) or the
    vector body of a row shorter than a vector, whose results were then never written
    (a softmax over one token returned garbage)."""
    for block in sch.get_child_blocks(rows):
        if is_spatial(sch, block) or sch.get(block).init is None:
            continue
        inner = loops_under(sch, block, rows)
        if inner and any(const_extent(sch, lp) is None for lp in inner):
            sch.decompose_reduction(block, inner[0])


class RowReduction(CpuRule):
    """Row-wise reduction kernels (softmax, layer norm, reductions over the last axis)."""

    name = "row_reduction"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """One parallel loop over rows, per row the blocks in cache, reductions in vector
        lanes; ``None`` when the PrimFunc is not row-wise (a block that cannot be computed
        per row included: the next rule takes it, no warning)."""
        try:
            if tunable:
                return schedule_rows(sch, info)
            return parallel_when(sch, info, schedule_rows, lambda func: block_iterations(func)[-1],
                                 MIN_PARALLEL_WORK // 4)
        except Exception as err:  # noqa: BLE001 - a primitive refused: not a row-wise kernel
            log.debug("not row-wise: %s", last_line(err))
            return None

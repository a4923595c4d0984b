"""Register-blocked schedule of the packed matmul (dense, matmul, batch matmul).

The compute (:mod:`tvm_cocopie.topi.cpu.dense_packed`) reads B from column panels of
``nb`` contiguous floats and computes a padded ``M' x N'`` product. The nest::

    parallel  batch, M' / tm               (fused)
      serial  N' / nb                      <- the epilogue runs here, per tile
        k                                  the whole reduction (accumulators stay put)
          mi   (unrolled, tm)              one broadcast of A per row
            nr (unrolled, nb / lanes)      one vector of the B panel each
              nv (vectorized, lanes)       FMA into the tm x nb accumulator tile

Element-wise consumers (bias, GELU, residual add...) are inlined into the result
block, computed per tile like in :mod:`.conv2d_nchwc`.

Consumers that reduce along the row (a layer norm after the output projection, a
softmax after ``Q K^T``: DNNFusion joins them when they read the matmul row-locally,
:mod:`tvm_cocopie.relay_passes.fusion.locality`) cannot be inlined; then the row tile
is the unit: the parallel loop runs over row tiles, each computes its ``tm`` whole rows
of the product (every column panel) and then the row kernel's passes over them
(:mod:`.row_reduction`: element-wise chains inlined, reductions in vector partials)
while the rows are in L1.

A producer that reduces along A's rows (a layer norm before the QKV projection or the
MLP of a pre-norm transformer, RMS norm, a softmax: DNNFusion joins them when the
matmul reads its result row-locally) becomes a pass of its own ahead of the tiles
(:func:`.row_reduction.schedule_row_pass`: one parallel loop over rows, the per-row
values only, a mean and an inverse deviation) and the element-wise end of it (the
normalization) is computed per row tile into a local copy of the tile's A rows, so
the normalized tensor never goes to memory::

    parallel  rows: the row statistics (vector partials)
    parallel  batch, M' / tm
      the tile's tm x K rows of A, normalized (L1)
      serial  N' / nb  ... as above

Such a matmul keeps its row tiles outermost whatever the size of B (in the nest below,
the panels outermost, the tile would be normalized once per panel).

A small A computed by reductions over other axes (a global average pool, then the
classifier: its pooled vector, :data:`SMALL_PROLOGUE_BYTES` at most) is computed at the
kernel's root, each reduction one parallel pass with the lanes of the blocked layout in
vector accumulators (:func:`~..base.lanes_inside_reduction`), before the tiles.

A B too large for the cache (the compute's ``colout``, :func:`~tvm_cocopie.topi.cpu.
tiling.matmul_blocking`) turns the nest around: the column panels go outermost and in
parallel, the row tiles inside, so every panel of B comes from memory once; with a
reduction block ``kb < K`` the ``kb x nb`` slice of B stays in L1 while the row tiles
pass over it, the accumulators of the whole panel living in a small local buffer::

    parallel  N' / nb
      serial  K / kb
        serial  M' / tm
          kb                               <- unroll, FMA micro-kernel as above
      epilogue over the panel

Symbolic extents (SOD², issue 17: rows of a run-time sequence, a symbolic batch, the key
axis of attention) keep the same nest: ``M'`` is a multiple of ``tm`` by construction, so
every tile is whole and only the epilogue's rows carry a bound; a symbolic row loop is
parallel on its own (the panels stay serial inside it, see :func:`schedule_matmul`), and
the kernel has a serial version for sizes below :data:`MIN_PARALLEL_MACS`
(:func:`~tvm_cocopie.schedules.versions.parallel_when`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.dense_packed import ANNOTATION
from ..base import (
    DATA_PAR,
    MIN_PARALLEL_MACS,
    CpuRule,
    annotated_blocks,
    block_work,
    blocks_after,
    blocks_before,
    const_extent,
    fuse_parallel,
    fuse_parallel_upto,
    inline_consumers,
    inline_prologue,
    is_spatial,
    iter_types,
    lanes_inside_reduction,
    loops_above,
    parallel_spatial,
    reads_plainly,
    root_blocks,
    spills_over,
    try_apply,
    vectorizable,
    vectorize_inner,
    writes_output,
)
from ..tunable import SPACE_ANNOTATION, sample_unroll_budget, split_tile
from ..versions import block_iterations, parallel_when
from .row_reduction import (
    init_reductions_first,
    inline_elementwise,
    is_row_pass,
    lane_partials,
    row_has_tail,
    schedule_partials,
    schedule_row_pass,
    vectorize_row,
)

#: Largest local buffer of a column panel's accumulators over every row (and batch) of
#: the blocked-reduction nest; beyond it the batch loops stay outside the panels.
PANEL_ACCUMULATOR_BYTES = 64 * 1024


@dataclass(frozen=True)
class MatmulKnobs:
    """Free choices of the matmul schedule (``tm`` and ``nb`` are fixed by the compute)."""

    tm: int
    nb: int
    columns_outer: bool = False  # iterate column panels outside row blocks
    kb: int = 0  # reduction block with columns_outer (0: the whole reduction)
    sample_unroll: bool = False  # tuning: sample LLVM's unroll budget of the k loop
    sample_tiles: bool = False  # tuning: sample the rows of the register tile (tm)


def row_prologue(sch: s_tir.Schedule, anchor) -> tuple[list, str] | None:
    """``(the row pass's block names, the name of A's producer)`` when blocks before
    ``anchor`` reduce (module docstring): A's producer is spatial, the last block before
    the matmul and read by it alone, every other block before it feeds only that pass,
    and they are a row pass (:func:`.row_reduction.is_row_pass`: not a pooling window);
    ``None`` otherwise (no reduction before the matmul, or another structure)."""
    before = blocks_before(sch, anchor)
    if not before or all(is_spatial(sch, b) for b in before):
        return None
    producer = before[-1]
    a_buffer = sch.get(anchor).reads[0].source
    name = sch.get(anchor).name_hint
    if (not sch.get(producer).writes[0].source.same_as(a_buffer)
            or not is_spatial(sch, producer)
            or [sch.get(c).name_hint for c in sch.get_consumers(producer)] != [name]):
        return None
    stage = {sch.get(b).name_hint for b in before}
    if any(sch.get(c).name_hint not in stage for b in before[:-1]
           for c in sch.get_consumers(b)):
        return None
    names = [sch.get(b).name_hint for b in before[:-1]]
    return (names, sch.get(producer).name_hint) if is_row_pass(sch, names) else None


#: the largest left operand computed at the kernel's root by reductions that are not a
#: row pass (module docstring): a pooled feature vector (2048 floats of ResNet-50's)
SMALL_PROLOGUE_BYTES = 16 * 1024


def small_prologue(sch: s_tir.Schedule, anchor) -> bool:
    """Whether the blocks before ``anchor`` reduce into an A of at most
    :data:`SMALL_PROLOGUE_BYTES` (module docstring), each reduction with trailing
    reduction loops and a spatial loop inside the last spatial one's (a blocked lane)."""
    before = blocks_before(sch, anchor)
    reductions = [b for b in before if not is_spatial(sch, b)]
    if not reductions:
        return False
    a_buffer = sch.get(anchor).reads[0].source
    size = 4
    for dim in a_buffer.shape:
        if not hasattr(dim, "value"):
            return False
        size *= int(dim.value)
    for block in reductions:
        kinds = iter_types(sch, block)
        first_reduce = next(i for i, k in enumerate(kinds) if k != DATA_PAR)
        loops = sch.get_loops(block)
        if (first_reduce == 0 or any(k == DATA_PAR for k in kinds[first_reduce:])
                or len(loops) != len(kinds)
                or not 0 < (const_extent(sch, loops[first_reduce - 1]) or 0) <= MAX_LANES):
            return False
    return size <= SMALL_PROLOGUE_BYTES


#: the longest innermost spatial loop :func:`small_prologue` vectorizes (four vectors)
MAX_LANES = 64


def _schedule_small_prologue(sch: s_tir.Schedule, anchor, info: CpuInfo) -> None:
    """:func:`small_prologue`'s blocks at the root: reductions with their lanes in vector
    accumulators, in parallel over their other spatial loops; element-wise blocks inlined
    where they can be, else a parallel pass."""
    for block in inline_prologue(sch, anchor):
        if is_spatial(sch, block):
            parallel_spatial(sch, block, info)
            continue
        work = block_work(sch, block)
        window = lanes_inside_reduction(sch, block)
        fuse_parallel(sch, loops_above(sch, block, window), info, work)
        sch.decompose_reduction(block, window)


def schedule_row_prologue(sch: s_tir.Schedule, anchor, plan: tuple[list, str],
                           info: CpuInfo):
    """The row pass of :func:`row_prologue`'s ``plan``, A's producer inlined into a local
    copy of A that the nest computes per row tile: ``(the schedule, the copy's block)``.
    Raises when a primitive refuses (the rule then answers ``None``)."""
    stage, producer = plan
    done = schedule_row_pass(sch, stage, info)
    if done is None:
        raise ValueError(f"the blocks {stage} before the matmul are not a row pass")
    sch, _ = done
    a_tile = sch.cache_read(sch.get_sblock(sch.get(anchor).name_hint), 0, "local")
    sch.compute_inline(sch.get_sblock(producer))
    return sch, a_tile


def tile_rows_at(sch: s_tir.Schedule, a_tile, loop, lanes: int) -> None:
    """``a_tile`` (:func:`schedule_row_prologue`) computed under ``loop``, vectorized."""
    sch.compute_at(a_tile, loop, preserve_unit_loops=False)
    if vectorizable(sch, a_tile):
        vectorize_inner(sch, sch.get_loops(a_tile)[-1], lanes)


def schedule_matmul(sch: s_tir.Schedule, anchor, knobs: MatmulKnobs, info: CpuInfo):
    """Apply the module docstring's nest to ``anchor``; return ``sch``."""
    work = block_work(sch, anchor)
    name = sch.get(anchor).name_hint
    a_tile = None
    plan = row_prologue(sch, anchor)
    if plan is not None:
        sch, a_tile = schedule_row_prologue(sch, anchor, plan, info)
        anchor = sch.get_sblock(name)
        knobs = dataclasses.replace(knobs, columns_outer=False, kb=0)
    elif small_prologue(sch, anchor):
        _schedule_small_prologue(sch, anchor, info)
    else:
        for block in inline_prologue(sch, anchor):
            parallel_spatial(sch, block, info)
    if any(not is_spatial(sch, b) for b in blocks_after(sch, anchor)):
        # rows outermost whatever the size of B: a row's reductions need the whole row
        return _schedule_row_epilogue(sch, anchor, knobs, info, work, a_tile)
    final = inline_consumers(sch, anchor)
    detached = None
    if final is not None and (not reads_plainly(sch, final, anchor)
                              or spills_over(sch, final, anchor)):
        detached, final = final, None  # a permuting epilogue: its own pass after the tiles
    if final is None:
        final = sch.cache_write(anchor, 0, "local")
    else:
        sch.set_scope(anchor, 0, "local")
    *batch, m, n, k = sch.get_loops(anchor)
    lanes = info.f32_lanes
    if knobs.sample_tiles:
        sch.annotate(anchor, SPACE_ANNOTATION, f"kind=matmul;colout={int(knobs.columns_outer)};"
                                               f"nvec={max(1, knobs.nb // lanes)}")
    mo, mi = split_tile(sch, m, knobs.tm, 8, knobs.sample_tiles)
    no, nr, nv = split_columns(sch, n, knobs.nb, lanes)
    inner = [mi, *nr]
    k_extent = const_extent(sch, k) or 0
    reduce_at = k
    # B is shared by every batch when its panels come first (only a shared B takes
    # columns_outer): the batch loops go inside the panel loop, so that each panel comes
    # from memory once for all of them, not once per batch (a Linear over an NHWC map,
    # ConvNeXt's MLP at 7x7: 7 batches of 7 rows streamed its 9.4 MB weight 7 times)
    if knobs.columns_outer and 0 < knobs.kb < k_extent and k_extent % knobs.kb == 0:
        ko, ki = sch.split(k, [None, knobs.kb])
        rows = math.prod(const_extent(sch, loop) or 0 for loop in [*batch, mo]) * knobs.tm
        if 0 < rows * knobs.nb * 4 <= PANEL_ACCUMULATOR_BYTES:
            sch.reorder(no, ko, *batch, mo, ki, *inner, nv)
            fuse_parallel(sch, [no], info, work, MIN_PARALLEL_MACS)
        else:
            sch.reorder(*batch, no, ko, mo, ki, *inner, nv)
            fuse_parallel(sch, [*batch, no], info, work, MIN_PARALLEL_MACS)
        attach, reduce_at = no, ko
    else:
        if knobs.columns_outer:
            sch.reorder(no, *batch, mo, k, *inner, nv)
            par_loops, attach = [no, *batch], mo
        else:
            sch.reorder(*batch, mo, no, k, *inner, nv)
            par_loops, attach = [*batch, mo], no
        extents = [const_extent(sch, loop) for loop in par_loops]
        iters = math.prod(e or 1 for e in extents)
        # a symbolic extent (rows of a sequence) after static ones counts as enough:
        # fusing the panel loop in too would divide by symbolic extents in every tile
        # (int64 divisions: attention's Q K^T at 128 tokens 158 -> 128 us without, the
        # static kernel's 127); outermost, the panels join it (their index is the fused
        # one modulo a constant): 32 tokens in 13-row tiles were 3 tasks for 2 cores
        # (BERT's projections at S=32 1.45x their static time)
        leading = extents[0] is None and None not in extents[1:]
        if iters < 4 * max(1, info.num_cores) and (None not in extents or leading):
            _, attach = fuse_parallel_upto(sch, [*par_loops, attach], info, work,
                                           MIN_PARALLEL_MACS)
        else:
            fuse_parallel(sch, par_loops, info, work, MIN_PARALLEL_MACS)
    sch.reverse_compute_at(final, attach, preserve_unit_loops=knobs.sample_tiles)
    if vectorizable(sch, final):
        vectorize_inner(sch, sch.get_loops(final)[-1], lanes)
    if a_tile is not None:  # at the row tile: the loop around the panels (or fused with them)
        above = loops_above(sch, sch.get_sblock(name), attach)
        tile_rows_at(sch, a_tile, above[-1] if above and attach.same_as(no) else attach,
                      lanes)
    for loop in inner:
        sch.unroll(loop)
    if knobs.sample_unroll:
        sample_unroll_budget(sch, k)
    sch.vectorize(nv)
    sch.decompose_reduction(anchor, reduce_at)
    if detached is not None:
        parallel_spatial(sch, detached, info)
    return sch


def split_columns(sch: s_tir.Schedule, n, nb: int, lanes: int):
    """``n`` in column panels of ``nb``: ``(panel loop, [vectors of the panel, when nb is
    whole vectors], lane loop)``."""
    if nb % lanes == 0:
        no, nr, nv = sch.split(n, [None, nb // lanes, lanes])
        return no, [nr], nv
    no, nv = sch.split(n, [None, nb])
    return no, [], nv


def _schedule_row_epilogue(sch: s_tir.Schedule, anchor, knobs: MatmulKnobs, info: CpuInfo,
                           work: int | None, a_tile=None):
    """The module docstring's row-tile nest: a matmul whose consumers reduce along rows
    (``a_tile``: the local copy of A rows of a row prologue, computed per row tile)."""
    lanes = info.f32_lanes
    name = sch.get(anchor).name_hint
    inline_elementwise(sch)
    partials = set()
    for block in blocks_after(sch, sch.get_sblock(name)):
        if not is_spatial(sch, block) and not row_has_tail(sch, block, lanes):
            rf = lane_partials(sch, block, lanes)
            if rf is not None:
                partials.add(sch.get(rf).name_hint)
    anchor = sch.get_sblock(name)
    write_back = sch.cache_write(anchor, 0, "local")
    *batch, m, n, k = sch.get_loops(anchor)
    mo, mi = sch.split(m, [None, knobs.tm])
    no, nr, nv = split_columns(sch, n, knobs.nb, lanes)
    inner = [mi, *nr]
    sch.reorder(*batch, mo, no, k, *inner, nv)
    rows = sch.fuse(*batch, mo) if batch else mo
    if info.num_cores > 1 and (work is None or work >= MIN_PARALLEL_MACS):
        sch.parallel(rows)
    if a_tile is not None:
        tile_rows_at(sch, a_tile, rows, lanes)
    sch.reverse_compute_at(write_back, no)
    if vectorizable(sch, write_back):
        vectorize_inner(sch, sch.get_loops(write_back)[-1], lanes)
    for block in blocks_after(sch, write_back):
        sch.reverse_compute_at(block, rows, preserve_unit_loops=False)
    for block in sch.get_child_blocks(rows):
        block_name = sch.get(block).name_hint
        if block_name in partials:
            schedule_partials(sch, block, rows, lanes)
        elif block_name not in (name, sch.get(write_back).name_hint) and is_spatial(sch, block):
            sch = try_apply(sch, lambda s, b=block: vectorize_row(s, b, rows, lanes)) or sch
    anchor = sch.get_sblock(name)
    for loop in inner:
        sch.unroll(loop)
    sch.vectorize(nv)
    sch.decompose_reduction(anchor, k)
    init_reductions_first(sch, rows)  # a softmax's tail over a symbolic row
    return sch


def _panels(sch: s_tir.Schedule, anchor, nb: int) -> int:
    """Column panels of the annotated block (its second-innermost spatial loop / ``nb``)."""
    extent = const_extent(sch, sch.get_loops(anchor)[-2]) or 0
    return extent // nb


class MatmulPacked(CpuRule):
    """Schedules PrimFuncs holding one ``cocopie.matmul``-annotated block."""

    name = "matmul_packed"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """Schedule the one annotated matmul block of ``sch`` and its epilogue; the schedule (a
        list when ``tunable``), or ``None``."""
        anchors = annotated_blocks(sch, ANNOTATION)
        if len(anchors) != 1:
            return None
        anchor = anchors[0]
        name = sch.get(anchor).name_hint
        if (row_prologue(sch, anchor) is None and not small_prologue(sch, anchor)
                and not all(is_spatial(sch, b) for b in blocks_before(sch, anchor))):
            return None  # reductions before the matmul that are neither
        if any(writes_output(sch, b) for b in blocks_after(sch, anchor)[:-1]):
            # an epilogue that also writes a result on the way (a DNNFusion block of two
            # outputs): element-wise, it cannot be inlined into the tile; before row
            # reductions it computed PP-OCR rec's projection + residual + layer norm at
            # 40 x 120 wrong (caught by the profiler's check; the lane defect behind it
            # is now avoided by row_has_tail, but such blocks are not tested here)
            return None
        ann = sch.get(anchor).annotations[ANNOTATION]
        knobs = MatmulKnobs(int(ann["tm"]), int(ann["nb"]))
        if int(ann.get("colout", 0)) and _panels(sch, anchor, knobs.nb) >= 2 * info.num_cores:
            knobs = MatmulKnobs(knobs.tm, knobs.nb, columns_outer=True, kb=int(ann["kb"]))
        if not tunable:
            index = [sch.get(b).name_hint for b in root_blocks(sch)].index(name)
            return parallel_when(
                sch, info, lambda s, i: schedule_matmul(s, s.get_sblock(name), knobs, i),
                lambda func: block_iterations(func)[index], MIN_PARALLEL_MACS)
        spaces = []
        for columns_outer in (False, True):
            trial = sch.copy()
            variant = MatmulKnobs(knobs.tm, knobs.nb, columns_outer, sample_unroll=True,
                                  sample_tiles=True)
            spaces.append(schedule_matmul(trial, trial.get_sblock(name), variant, info))
        return spaces

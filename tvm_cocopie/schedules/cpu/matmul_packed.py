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
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.dense_packed import ANNOTATION
from ..base import (
    MIN_PARALLEL_MACS,
    CpuRule,
    annotated_blocks,
    block_work,
    const_extent,
    fuse_parallel,
    inline_consumers,
    inline_prologue,
    parallel_spatial,
    vectorizable,
    vectorize_inner,
)
from ..tunable import SPACE_ANNOTATION, sample_unroll_budget, split_tile


@dataclass(frozen=True)
class MatmulKnobs:
    """Free choices of the matmul schedule (``tm`` and ``nb`` are fixed by the compute)."""

    tm: int
    nb: int
    columns_outer: bool = False  # iterate column panels outside row blocks
    kb: int = 0  # reduction block with columns_outer (0: the whole reduction)
    sample_unroll: bool = False  # tuning: sample LLVM's unroll budget of the k loop
    sample_tiles: bool = False  # tuning: sample the rows of the register tile (tm)


def schedule_matmul(sch: s_tir.Schedule, anchor, knobs: MatmulKnobs, info: CpuInfo):
    """Apply the module docstring's nest to ``anchor``; return ``sch``."""
    work = block_work(sch, anchor)
    for block in inline_prologue(sch, anchor):
        parallel_spatial(sch, block, info)
    final = inline_consumers(sch, anchor)
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
    if knobs.nb % lanes == 0:
        no, nr, nv = sch.split(n, [None, knobs.nb // lanes, lanes])
        inner = [mi, nr]
    else:
        no, nv = sch.split(n, [None, knobs.nb])
        inner = [mi]
    k_extent = const_extent(sch, k) or 0
    reduce_at = k
    if knobs.columns_outer and 0 < knobs.kb < k_extent and k_extent % knobs.kb == 0:
        ko, ki = sch.split(k, [None, knobs.kb])
        sch.reorder(*batch, no, ko, mo, ki, *inner, nv)
        fuse_parallel(sch, [*batch, no], info, work, MIN_PARALLEL_MACS)
        attach, reduce_at = no, ko
    else:
        if knobs.columns_outer:
            sch.reorder(*batch, no, mo, k, *inner, nv)
            par_loops, attach = [*batch, no], mo
        else:
            sch.reorder(*batch, mo, no, k, *inner, nv)
            par_loops, attach = [*batch, mo], no
        iters = 1
        for loop in par_loops:
            iters *= const_extent(sch, loop) or 1
        if iters < 4 * max(1, info.num_cores):
            attach = fuse_parallel(sch, [*par_loops, attach], info, work, MIN_PARALLEL_MACS)
        else:
            fuse_parallel(sch, par_loops, info, work, MIN_PARALLEL_MACS)
    sch.reverse_compute_at(final, attach, preserve_unit_loops=knobs.sample_tiles)
    if vectorizable(sch, final):
        vectorize_inner(sch, sch.get_loops(final)[-1], lanes)
    for loop in inner:
        sch.unroll(loop)
    if knobs.sample_unroll:
        sample_unroll_budget(sch, k)
    sch.vectorize(nv)
    sch.decompose_reduction(anchor, reduce_at)
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
        ann = sch.get(anchor).annotations[ANNOTATION]
        knobs = MatmulKnobs(int(ann["tm"]), int(ann["nb"]))
        if int(ann.get("colout", 0)) and _panels(sch, anchor, knobs.nb) >= 2 * info.num_cores:
            knobs = MatmulKnobs(knobs.tm, knobs.nb, columns_outer=True, kb=int(ann["kb"]))
        if not tunable:
            return schedule_matmul(sch, anchor, knobs, info)
        spaces = []
        for columns_outer in (False, True):
            trial = sch.copy()
            variant = MatmulKnobs(knobs.tm, knobs.nb, columns_outer, sample_unroll=True,
                                  sample_tiles=True)
            spaces.append(schedule_matmul(trial, trial.get_sblock(name), variant, info))
        return spaces

"""Schedule of the one-kernel attention (:mod:`tvm_cocopie.topi.cpu.attention`).

::

    parallel  batch x head x D                      attn_k_pack: K^T, padded columns
    parallel  batch x head, query-row chunks         (fused; about 8 tasks per core)
      serial  row tiles of ``rows`` in the chunk     (a run-time sequence: a task per tile)
        attn_q_pack  the tile's query rows
        attn_scores  tiles of rows x (cols x lanes) accumulators over D (FMA)
        attn_max*    row maximum in vector lanes, tail, lanes combined
        attn_exp     exp((s - max) * scale) vectorized (fast_exp inlined), 0 on padding
        attn_sum*    row sum in vector lanes
        attn_pv      rows x 2 vectors of E accumulators over the T real columns
        attn_norm    divided by the row sum, vectorized
        attn_out     the tile's real rows (S rounded up to tiles for the steps above)

A row tile's scores (``rows x T'`` floats) and probabilities stay in L1 between the
steps: nothing of size ``S x T`` is written to memory. ``K^T`` (``D x T'`` per head)
is packed once, before the tasks.
"""

from __future__ import annotations

import math

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.attention import BLOCKS
from ..base import CpuRule, const_extent, root_blocks

#: parallel tasks per core (balance between the cores against each task's setup)
TASKS_PER_CORE = 8


def chunk_count(batch: int, tiles: int, cores: int) -> int:
    """Chunks per head of ``tiles`` row tiles: a divisor of ``tiles`` (whole chunks, no
    bound in the loops) giving about :data:`TASKS_PER_CORE` tasks per core over
    ``batch`` heads, at least one task per core where the tiles allow."""
    want = TASKS_PER_CORE * cores / max(batch, 1)
    divisors = [d for d in range(1, tiles + 1) if tiles % d == 0]
    enough = [d for d in divisors if batch * d >= cores] or divisors[-1:]
    return min(enough, key=lambda d: (abs(math.log(d / want)) if want >= 1 else d))


def _vectorize_last(sch: s_tir.Schedule, block, lanes: int, unroll: bool = True) -> None:
    """Split the block's innermost loop into vectors of ``lanes`` (it is a multiple)."""
    loops = sch.get_loops(block)
    outer, vec = sch.split(loops[-1], [None, lanes])
    sch.vectorize(vec)
    if unroll and const_extent(sch, outer) is not None and const_extent(sch, outer) <= 8:
        sch.unroll(outer)


def schedule_attention(sch: s_tir.Schedule, info: CpuInfo, rows: int, cols: int) -> None:
    """The nest of the module doc on ``sch``'s attention kernel."""
    lanes = info.f32_lanes
    b = {name: sch.get_sblock(name) for name in BLOCKS}
    expo = sch.get_producers(b["attn_exp"])[0]  # TOPI's fast_exp
    sch.compute_inline(b["attn_delta"])
    sch.compute_inline(expo)

    out = b["attn_norm"]
    *batch, i, _ = sch.get_loops(out)
    extents = [const_extent(sch, lp) for lp in (*batch, i)]
    if None in extents[:-1]:
        raise ValueError("attention with a symbolic batch or head count")
    if extents[-1] is None:  # a sequence of run-time length: a task per row tile
        it, _ = sch.split(i, [None, rows])
        it = sch.fuse(*batch, it) if batch else it
        sch.parallel(it)
    else:
        nbatch, tiles = math.prod(extents[:-1]), extents[-1] // rows
        chunks = chunk_count(nbatch, tiles, info.num_cores)
        ic, it, _ = sch.split(i, [chunks, tiles // chunks, rows])
        task = sch.fuse(*batch, ic) if batch else ic
        sch.parallel(task)

    # producers at the row tile, last first so each finds its consumer placed
    for name in ("attn_pv", "attn_sum", "attn_sum_part", "attn_exp", "attn_max",
                 "attn_max_lanes", "attn_max_tail", "attn_max_part", "attn_scores",
                 "attn_q_pack"):
        sch.compute_at(b[name], it)
    _vectorize_last(sch, out, lanes, unroll=False)
    sch.reverse_compute_at(b["attn_out"], it)  # the real rows of the tile
    _vectorize_last(sch, b["attn_out"], lanes, unroll=False)

    # K^T packed once per head, in parallel over heads and rows of K^T, before the
    # tasks (a pack per task read K through its permutation once per chunk: BERT's
    # attention 1.03x slower than the separate kernels); vectorized where K^T's columns
    # are contiguous in the source, the tile's queries likewise
    kp = b["attn_k_pack"]
    *k_outer, _ = sch.get_loops(kp)
    sch.parallel(sch.fuse(*k_outer) if len(k_outer) > 1 else k_outer[0])
    if _contiguous_read(sch, kp):
        _vectorize_last(sch, kp, lanes, unroll=False)
    if const_extent(sch, sch.get_loops(b["attn_q_pack"])[-1]) % lanes == 0:
        _vectorize_last(sch, b["attn_q_pack"], lanes, unroll=False)

    # scores: rows x (cols x lanes) accumulators, the reduction over D outside them
    si, sj, sd = sch.get_loops(b["attn_scores"])[-3:]
    _register_tile(sch, b["attn_scores"], si, sj, sd, cols, lanes)
    # row maximum and sum: partials in lanes, then the lanes combined
    _lane_partials(sch, b["attn_max_part"])
    _lane_partials(sch, b["attn_sum_part"])
    # probabilities (fast_exp inlined): vectorized along the columns
    _vectorize_last(sch, b["attn_exp"], lanes, unroll=False)
    # P V: rows x 2 vectors of E per accumulator tile, over the real columns
    vi, ve, vj = sch.get_loops(b["attn_pv"])[-3:]
    ecols = 2 if const_extent(sch, ve) % (2 * lanes) == 0 else 1
    _register_tile(sch, b["attn_pv"], vi, ve, vj, ecols, lanes)


def _register_tile(sch: s_tir.Schedule, block, rows, cols_loop, reduce_loop, cols: int,
                   lanes: int) -> None:
    """An FMA micro-kernel: the block's ``rows x (cols x lanes)`` results in registers
    (rows and column vectors unrolled, lanes vectorized) while ``reduce_loop`` runs
    outside them; the init before the reduction."""
    outer, col, vec = sch.split(cols_loop, [None, cols, lanes])
    sch.reorder(outer, reduce_loop, rows, col, vec)
    sch.vectorize(vec)
    sch.unroll(rows)
    sch.unroll(col)
    sch.decompose_reduction(block, reduce_loop)


def _lane_partials(sch: s_tir.Schedule, block) -> None:
    """A ``[rows, lanes]`` partial reduction: the reduction outside, the lanes a vector."""
    rows, lane, reduce_loop = sch.get_loops(block)[-3:]
    sch.reorder(rows, reduce_loop, lane)
    sch.vectorize(lane)
    sch.decompose_reduction(block, reduce_loop)

def _contiguous_read(sch: s_tir.Schedule, block) -> bool:
    """Whether the block reads its source along its innermost iteration (vector loads,
    not gathers)."""
    b = sch.get(block)
    last = b.iter_vars[-1].var
    index = b.reads[0].region[-1].min
    return isinstance(index, type(last)) and index.same_as(last)


class Attention(CpuRule):
    """The one-kernel attention of :mod:`tvm_cocopie.topi.cpu.attention`."""

    name = "attention"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The module doc's nest; ``None`` for kernels that are not the attention compute."""
        if not set(BLOCKS) <= {sch.get(block).name_hint for block in root_blocks(sch)}:
            return None
        # a failure is logged by CpuRule.apply, and the fallback rule takes the kernel
        schedule_attention(sch, info, *_tile_of(sch.mod["main"]))
        return [sch] if tunable else sch


def _tile_of(func) -> tuple[int, int]:
    """The register tile the compute was padded for (its PrimFunc attributes)."""
    attrs = func.attrs
    return int(attrs["attention_rows"]), int(attrs["attention_cols"])

"""Packed matmuls in a chain over the same rows, one kernel (DNNFusion's joined blocks).

A transformer's MLP (FFN1 + GELU, then FFN2 reading the activations row by row), or a
projection whose sum with the residual feeds a layer norm and the next matmul (the
residual stream, the sum kept as a further output): each matmul reads the previous
one's rows through element-wise ops and reductions along the row. DNNFusion joins
such blocks when the later matmul reads the earlier result row-locally
(:mod:`tvm_cocopie.relay_passes.fusion.locality`); :mod:`.matmul_packed` takes one
matmul per kernel, so these got only the generic schedule and stayed apart.

The nest runs in parallel over chain tiles of ``c * tm`` rows; each tile computes its
rows of every matmul in turn with the register tiles of :mod:`.matmul_packed`, and
between them the row reductions over the tile's rows (vector partials,
:mod:`.row_reduction`) and the element-wise ops, so no intermediate result leaves the
cache and none is allocated whole::

    parallel  chain tiles of c x tm rows       (each nest's tile loop, merged into one)
      first matmul    N1 / nb panels, c register tiles of tm rows, k, tm x nb FMAs;
                      its epilogue per register tile
      between         element-wise ops, row reductions over the tile's rows
      operand         the next matmul's left operand: the tile's rows, the op that
                      produces it (a normalization, GELU) computed there
      next matmul     as the first; the last one's epilogue per register tile

Each later matmul's left operand is ``reindex``ed to the matmul's own row iterator:
the padded compute reads row ``min(r, M - 1)``, which TVM's region analysis can neither
invert (``reverse_compute_at``) nor bound per tile (the operand was allocated whole in
every parallel iteration). The nests are built one after the other at the root and
their tile loops merged (``merge``): tile ``t`` of every nest reads only rows of tile
``t`` of the nests before it. A layer norm before the first matmul stays its row pass
ahead of the nest (:func:`.matmul_packed.schedule_row_prologue`).

``c`` (:func:`chain_factor`) makes the tiles as large as :data:`CHAIN_TILE_BYTES` of
the widest intermediate allows while every core gets a tile: each tile streams every
matmul's weights once, so fewer, larger tiles read them fewer times.
"""

from __future__ import annotations

import itertools

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.dense_packed import ANNOTATION
from ..base import (
    CpuRule,
    annotated_blocks,
    blocks_after,
    blocks_before,
    const_extent,
    inline_consumers,
    inline_prologue,
    is_spatial,
    parallel_spatial,
    root_blocks,
    try_apply,
    vectorizable,
    vectorize_inner,
    writes_output,
)
from .matmul_packed import row_prologue, schedule_row_prologue, split_columns, tile_rows_at
from .row_reduction import (
    init_reductions_first,
    inline_elementwise,
    is_row_reduction,
    lane_partials,
    row_has_tail,
    schedule_partials,
    vectorize_row,
)

#: the most bytes of one intermediate row block a chain tile holds (its widest result
#: over the tile's rows): the tile's intermediates stay in L2 beside the weights
CHAIN_TILE_BYTES = 96 * 1024


def chain_anchors(sch: s_tir.Schedule) -> list | None:
    """The names of the chained matmul blocks (module docstring), in order, or ``None``:
    two or more ``cocopie.matmul`` blocks with the same register rows ``tm`` over the
    same padded rows (no batch loops), each later one reading a left operand computed
    in the function, only element-wise blocks and row reductions between them and after
    the last, and before the first what :mod:`.matmul_packed` takes (element-wise
    blocks, or a row pass)."""
    anchors = annotated_blocks(sch, ANNOTATION)
    if len(anchors) < 2:
        return None
    annotations = [sch.get(a).annotations[ANNOTATION] for a in anchors]
    if len({int(a["tm"]) for a in annotations}) != 1:
        return None
    loops = [sch.get_loops(a) for a in anchors]
    if any(len(nest) != 3 for nest in loops):
        return None
    rows = {const_extent(sch, nest[0]) for nest in loops}
    if len(rows) != 1 or None in rows:
        return None
    names = [sch.get(a).name_hint for a in anchors]
    blocks = root_blocks(sch)
    order = [sch.get(b).name_hint for b in blocks]
    for earlier, later in itertools.pairwise(names):
        between = blocks[order.index(earlier) + 1:order.index(later)]
        if any(not is_spatial(sch, b) and not is_row_reduction(sch, b) for b in between):
            return None
        operand = sch.get(sch.get_sblock(later)).reads[0].source
        if not any(w.source.same_as(operand) for b in between for w in sch.get(b).writes):
            return None
    if any(not is_spatial(sch, b) and not is_row_reduction(sch, b)
           for b in blocks_after(sch, anchors[-1])):
        return None
    before = blocks_before(sch, anchors[0])
    if not all(is_spatial(sch, b) for b in before) and row_prologue(sch, anchors[0]) is None:
        return None
    return names


def chain_factor(register_tiles: int, tm: int, widest: int, cores: int) -> int:
    """Register tiles per chain tile: the largest divisor ``c`` of ``register_tiles``
    that leaves every core a tile and keeps ``c * tm`` rows of the widest intermediate
    (``widest`` floats a row) within :data:`CHAIN_TILE_BYTES`; tile counts that are a
    multiple of the cores first (no core idle in the last round)."""
    fits = [c for c in range(1, register_tiles + 1)
            if register_tiles % c == 0 and register_tiles // c >= cores
            and c * tm * widest * 4 <= CHAIN_TILE_BYTES]
    if not fits:
        return 1
    return max(fits, key=lambda c: ((register_tiles // c) % max(cores, 1) == 0, c))


def schedule_chain(sch: s_tir.Schedule, names: list, info: CpuInfo) -> s_tir.Schedule:
    """The module docstring's nest over the chained matmul blocks ``names``; ``sch``
    (raises where a primitive refuses: the rule then answers ``None``)."""
    lanes = info.f32_lanes
    a_tile = None
    plan = row_prologue(sch, sch.get_sblock(names[0]))
    if plan is not None:
        sch, tile = schedule_row_prologue(sch, sch.get_sblock(names[0]), plan, info)
        a_tile = sch.get(tile).name_hint
    else:
        for block in inline_prologue(sch, sch.get_sblock(names[0])):
            parallel_spatial(sch, block, info)
    inline_elementwise(sch)
    operands = []
    for name in names[1:]:
        operand = sch.reindex(sch.get_sblock(name), ("read", 0))
        producers = sch.get_producers(operand)
        if (len(producers) == 1 and is_spatial(sch, producers[0])
                and not writes_output(sch, producers[0])
                and len(sch.get_consumers(producers[0])) == 1):
            sch.compute_inline(producers[0])  # the normalization, GELU: per tile
        operands.append(sch.get(operand).name_hint)
    final = None
    if blocks_after(sch, sch.get_sblock(names[-1])) and all(
            is_spatial(sch, b) for b in blocks_after(sch, sch.get_sblock(names[-1]))):
        final = sch.get(inline_consumers(sch, sch.get_sblock(names[-1]))).name_hint
        sch.set_scope(sch.get_sblock(names[-1]), 0, "local")
    partials = set()
    for block in root_blocks(sch):
        if (sch.get(block).name_hint not in names and not is_spatial(sch, block)
                and not row_has_tail(sch, block, lanes)):
            rf = lane_partials(sch, block, lanes)
            if rf is not None:
                partials.add(sch.get(rf).name_hint)
    annotations = [sch.get(sch.get_sblock(n)).annotations[ANNOTATION] for n in names]
    tm = int(annotations[0]["tm"])
    padded_rows = const_extent(sch, sch.get_loops(sch.get_sblock(names[0]))[0])
    widest = max(const_extent(sch, sch.get_loops(sch.get_sblock(n))[1]) for n in names)
    c = chain_factor(padded_rows // tm, tm, widest, info.num_cores)
    rows, reductions, own = None, [], set(operands)
    for i, name in enumerate(names):
        anchor = sch.get_sblock(name)
        if i == len(names) - 1 and final is not None:
            back = sch.get_sblock(final)
        else:
            back = sch.cache_write(anchor, 0, "local")
        own |= {name, sch.get(back).name_hint}
        m, n, k = sch.get_loops(anchor)
        mo, mc, mi = sch.split(m, [None, c, tm])
        no, nr, nv = split_columns(sch, n, int(annotations[i]["nb"]), lanes)
        sch.reorder(mo, no, mc, k, mi, *nr, nv)
        if i == 0:
            rows = mo
            if a_tile is not None:
                tile_rows_at(sch, sch.get_sblock(a_tile), rows, lanes)
        else:  # merged first: the write-back may read earlier results (the residual)
            operand = sch.get_sblock(operands[i - 1])
            *_, op_rows, op_k = sch.get_loops(operand)
            op_tiles, _ = sch.split(op_rows, [None, c * tm])
            if vectorizable(sch, operand):
                vectorize_inner(sch, op_k, lanes)
            rows = sch.merge(rows, op_tiles, mo)
        if _reads_only(sch, back, anchor):
            sch.reverse_compute_at(back, mc)
            if vectorizable(sch, back):
                vectorize_inner(sch, sch.get_loops(back)[-1], lanes)
        else:  # the epilogue also reads an earlier result (the residual): per chain tile
            sch.reverse_compute_at(back, rows, preserve_unit_loops=False)
            own.discard(sch.get(back).name_hint)  # vectorized along its rows below
        for loop in [mi, *nr]:
            sch.unroll(loop)
        sch.vectorize(nv)
        reductions.append((name, k))
        # the blocks after this matmul up to the next operand: at the chain tile
        stop = operands[i] if i < len(operands) else None
        for block in blocks_after(sch, back):
            if stop is not None and sch.get(block).name_hint == stop:
                break
            if sch.get(block).name_hint not in own:
                sch.reverse_compute_at(block, rows, preserve_unit_loops=False)
    for block in sch.get_child_blocks(rows):
        block_name = sch.get(block).name_hint
        if block_name in partials:
            schedule_partials(sch, block, rows, lanes)
        elif block_name not in own and block_name != a_tile and is_spatial(sch, block):
            sch = try_apply(sch, lambda s, b=block: vectorize_row(s, b, rows, lanes)) or sch
    if info.num_cores > 1:
        sch.parallel(rows)
    for name, k in reductions:
        sch.decompose_reduction(sch.get_sblock(name), k)
    init_reductions_first(sch, rows)
    return sch


def _reads_only(sch: s_tir.Schedule, block, anchor) -> bool:
    """Whether the only block of the function whose result ``block`` reads is
    ``anchor`` (then it can be computed per register tile of ``anchor``)."""
    target = sch.get(anchor)
    return all(sch.get(p).same_as(target) for p in sch.get_producers(block))


class MatmulChain(CpuRule):
    """Schedules PrimFuncs holding chained ``cocopie.matmul`` blocks (module docstring)."""

    name = "matmul_chain"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The chain's nest (the same for tuning: no knobs yet), or ``None``."""
        names = chain_anchors(sch)
        if names is None:
            return None
        sch = schedule_chain(sch, names, info)
        return [sch] if tunable else sch

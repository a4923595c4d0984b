"""Schedule of the Winograd F(m, 3) convolution (:mod:`tvm_cocopie.topi.cpu.winograd`).

Lavin & Gray 2016, sec. 4, on a CPU: the tiles are cut into cache blocks of ``pb``
tiles (the annotation's ``pb``, sized so that a block's intermediates stay in L2),
and each block runs the three stages one after the other inside one parallel loop::

    parallel  cache blocks of pb tiles
      input transform  winograd_V       per tile: its padded alpha x alpha window
        tile, input chunk                 (computed here, in L1), then
          xi, nu  (unrolled)              the transformed values: non-zero B^T terms only
            ci    (vectorized)
      batched GEMM  winograd_M          (annotated ``cocopie.winograd``)
        xi, nu, K / wb, pb / tp           <- the accumulators are written back here
          C               (rolled)        one input channel: one broadcast per tile
            r, tp         (unrolled)      r x tp accumulators in vector registers
              ki          (vectorized)    FMA
      output transform  winograd_Yt     tile-major, m x m unrolled, lanes vectorized
    parallel  rows of the output        winograd_Y: the tiles gathered to NCHW[x]c with
                                        the conv's consumers (bias, batch-norm,
                                        ReLU/SiLU/clip, residual add) inlined

With fewer than ``FUSE_MIN_BLOCKS`` blocks per core (small images) each stage is a
parallel pass of its own instead (the GEMM parallel over ``xi, nu, K / wb``).

A max pool of non-overlapping windows after the conv (VGG's stages, DNNFusion:
:func:`.conv2d_nchwc.window_epilogue`) runs inside the gather's pass: the gather writes
a band of rows as deep as the pool's stride (the epilogue inlined), the pool reduces it
right after, in the same parallel iteration, so the conv's full-size result is never
written; the gather is then always its own pass over the tiles.
"""

from __future__ import annotations

from tvm import s_tir, tirx

from ...target import CpuInfo
from ...topi.cpu.conv2d_nchwc import ANNOTATION as CONV_ANNOTATION
from ...topi.cpu.winograd import ANNOTATION
from ..base import (
    MIN_PARALLEL_MACS,
    CpuRule,
    annotated_blocks,
    block_work,
    fuse_parallel,
    inline_consumers,
    inline_prologue,
    loops_above,
    parallel_spatial,
    try_apply,
    vectorizable,
    vectorize_inner,
)
from .conv2d_nchwc import WindowEpilogue, schedule_pool, window_epilogue


def _block(sch: s_tir.Schedule, name: str):
    return sch.get_sblock(name)


def _inline_if_possible(sch: s_tir.Schedule, block) -> bool:
    """``compute_inline(block)`` when it applies; whether it did."""
    name = sch.get(block).name_hint
    if try_apply(sch, lambda s: s.compute_inline(s.get_sblock(name))) is None:
        return False
    sch.compute_inline(block)
    return True


def schedule_input_transform(sch: s_tir.Schedule, block, info: CpuInfo, prologue: list,
                             parallel: bool) -> None:
    """Tiles x chunks (parallel unless inside a cache block), the alpha x alpha outputs
    unrolled, lanes vectorized.

    Per tile, its padded ``alpha x alpha`` window (``winograd_window``, the padding
    inlined, and any ``prologue`` block left) is gathered in L1 (neighbouring tiles redo
    their overlap: copies, cheap beside the transform) instead of a pass of its own over
    memory, and per channel chunk the first half of the transform (``winograd_dB``).
    """
    xi, nu, p, cb, ci = sch.get_loops(block)[-5:]
    sch.reorder(p, cb, xi, nu, ci)
    outer = fuse_parallel(sch, [p, cb], info, block_work(sch, block)) if parallel else p
    half = sch.get_sblock("winograd_dB")
    sch.compute_at(half, sch.get_loops(block)[-4], preserve_unit_loops=True)
    *_, i, nu2, ci2 = sch.get_loops(half)
    sch.unroll(i)
    sch.unroll(nu2)
    sch.vectorize(ci2)
    for pro in [sch.get_sblock("winograd_window"), *reversed(prologue)]:
        try:
            sch.compute_at(pro, outer, preserve_unit_loops=True)
            vectorize_inner(sch, sch.get_loops(pro)[-1], info.f32_lanes)
        except Exception:  # noqa: BLE001 - an opaque producer: a pass of its own
            parallel_spatial(sch, pro, info)
    sch.unroll(xi)
    sch.unroll(nu)
    sch.vectorize(ci)


def schedule_gemm(sch: s_tir.Schedule, anchor, info: CpuInfo, r: int, tp: int, ib: int,
                  parallel: bool) -> None:
    """The register-tiled batched GEMM of the module docstring."""
    work = block_work(sch, anchor)
    acc = sch.cache_write(anchor, 0, "local")
    xi, nu, kb, p, ki, rc = sch.get_loops(anchor)[-6:]
    kbo, kbr = sch.split(kb, [None, r])
    po, pi = sch.split(p, [None, tp])
    rco, rci = sch.split(rc, [None, ib])
    sch.reorder(xi, nu, kbo, po, rco, rci, kbr, pi, ki)
    if parallel:
        fuse_parallel(sch, [xi, nu, kbo], info, work, MIN_PARALLEL_MACS)
    sch.reverse_compute_at(acc, po)
    vectorize_inner(sch, sch.get_loops(acc)[-1], info.f32_lanes)
    sch.unroll(kbr)
    sch.unroll(pi)
    sch.vectorize(ki)
    sch.decompose_reduction(anchor, rco)


def schedule_output_tiles(sch: s_tir.Schedule, block, info: CpuInfo, pb: int, fused: bool):
    """Output transform, tile-major: ``(blocks, tiles, K chunks)`` outer, ``m x m``
    unrolled, lanes vectorized. Returns the block loop (the cache block)."""
    p, kb, yi, xi, ki = sch.get_loops(block)
    b, pin = sch.split(p, [None, pb])
    sch.unroll(yi)
    sch.unroll(xi)
    sch.vectorize(ki)
    if fused:
        if info.num_cores > 1:
            sch.parallel(b)
        return b
    fuse_parallel(sch, [b, pin, kb], info, block_work(sch, block))
    return None


def schedule_untile(sch: s_tir.Schedule, block, info: CpuInfo) -> None:
    """The gather to ``(N, K/ob, OH, OW, ob)`` with the epilogue: parallel rows, vector lanes."""
    loops = sch.get_loops(block)
    if vectorizable(sch, block):
        vectorize_inner(sch, loops[-1], info.f32_lanes)
    fuse_parallel(sch, loops[:-2], info, block_work(sch, block))


def untile_pooled(sch: s_tir.Schedule, block, pooled: WindowEpilogue, info: CpuInfo) -> None:
    """The gather (its epilogue inlined) in bands of ``pooled.stride`` output rows, parallel
    over images, output chunks and bands, and the pool of each band computed right after
    it (module docstring). Needs whole windows (the stride divides the output rows)."""
    loops = sch.get_loops(block)
    n, kb, y = loops[:3]
    rows = sch.get(y).extent
    if not isinstance(rows, tirx.IntImm) or int(rows) % pooled.stride:
        raise ValueError(f"{rows} output rows are not whole pooling windows of "
                         f"{pooled.stride}")
    yo, yi = sch.split(y, [None, pooled.stride])
    if vectorizable(sch, block):
        vectorize_inner(sch, sch.get_loops(block)[-1], info.f32_lanes)
    fuse_parallel(sch, [n, kb, yo], info, block_work(sch, block))
    schedule_pool(sch, pooled, loops_above(sch, block, yi)[-1], info)


def untile_in_block(sch: s_tir.Schedule, block, loop, m: int, info: CpuInfo,
                    per_image: int = 0) -> None:
    """Iterate the gather (and its epilogue) tile by tile, ``(p, kb, yi, xi, ki)``, and
    compute it under the cache-block ``loop``, right after the block's output transform:
    no pass of its own over memory. Needs whole tiles (``m`` divides the output)."""
    oh, ow = (int(iv.dom.extent) for iv in sch.get(block).iter_vars[2:4])
    if oh % m or ow % m:
        raise ValueError(f"{oh}x{ow} output is not made of whole {m}x{m} tiles")
    th, tw = oh // m, ow // m
    per_image = per_image or th * tw  # tiles from one image to the next
    sch.transform_block_layout(
        block, lambda b, kb, y, x, ki: (b * per_image + y // m * tw + x // m, kb, y % m, x % m,
                                        ki))
    sch.reverse_compute_at(block, loop, preserve_unit_loops=True)
    loops = sch.get_loops(block)
    if vectorizable(sch, block):
        sch.vectorize(loops[-1])


def schedule_winograd(sch: s_tir.Schedule, anchor, info: CpuInfo) -> s_tir.Schedule:
    """Schedule the whole Winograd PrimFunc around its GEMM block ``anchor``.

    With enough cache blocks for the cores (``FUSE_MIN_BLOCKS`` per core) the input
    transform, GEMM and output transform of a block of ``pb`` tiles run one after the
    other inside one parallel loop, their intermediates in L2; otherwise (few tiles:
    small images) each stage is a parallel pass of its own over all tiles.
    """
    ann = sch.get(anchor).annotations[ANNOTATION]
    m, r, tp, pb = int(ann["m"]), int(ann["r"]), int(ann["tp"]), int(ann["pb"])
    ppi = int(ann.get("ppi", 0))
    vblock = _block(sch, "winograd_V")
    prologue = [b for b in inline_prologue(sch, _block(sch, "winograd_window"))
                if not _inline_if_possible(sch, b)]  # the padding, into the window
    yblock = _block(sch, "winograd_Y")
    pooled = window_epilogue(sch, yblock)
    if pooled is not None:
        for name in pooled.chain:  # the epilogue before the pool, in the gather
            sch.reverse_compute_inline(sch.get_sblock(name))
        final = None
    else:
        final = inline_consumers(sch, yblock)
    if final is not None and try_apply(sch, lambda s: s.reverse_compute_inline(
            s.get_sblock(sch.get(final).name_hint))) is not None:
        sch.reverse_compute_inline(final)  # the epilogue in the gather
        final = None
    ib = int(sch.get(vblock).iter_vars[-1].dom.extent)
    ytiles = _block(sch, "winograd_Yt")
    tiles = sch.get(ytiles).iter_vars[0].dom.extent
    # a symbolic batch: the cache block was planned so that one image has enough blocks
    fused = (not isinstance(tiles, tirx.IntImm)
             or int(tiles) // pb >= FUSE_MIN_BLOCKS * max(1, info.num_cores))
    loop = schedule_output_tiles(sch, ytiles, info, pb, fused)
    if fused:
        sch.compute_at(anchor, loop, preserve_unit_loops=True)
        sch.compute_at(_block(sch, "winograd_V"), loop, preserve_unit_loops=True)
    schedule_gemm(sch, anchor, info, r, tp, ib, parallel=not fused)
    schedule_input_transform(sch, _block(sch, "winograd_V"), info, prologue, parallel=not fused)
    yname = "winograd_Y"
    if pooled is not None:
        untile_pooled(sch, _block(sch, yname), pooled, info)
    elif not fused or try_apply(sch, lambda s: untile_in_block(
            s, s.get_sblock(yname), s.get_loops(s.get_sblock("winograd_Yt"))[0], m, info,
        ppi)) is None:
        schedule_untile(sch, _block(sch, yname), info)
    else:
        untile_in_block(sch, _block(sch, yname), loop, m, info, ppi)
    if final is not None:
        parallel_spatial(sch, final, info)
    return sch


#: cache blocks per core from which the three stages run fused (load balance)
FUSE_MIN_BLOCKS = 2


class Winograd(CpuRule):
    """Schedules PrimFuncs holding one ``cocopie.winograd``-annotated GEMM block."""

    name = "winograd"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The Winograd schedule (the same one when ``tunable``: no sampled knobs yet), or
        ``None`` when ``sch`` holds no Winograd conv."""
        anchors = annotated_blocks(sch, ANNOTATION)
        if len(anchors) != 1 or annotated_blocks(sch, CONV_ANNOTATION):
            return None  # none, or another conv beside it (a DNNFusion candidate)
        sch = schedule_winograd(sch, anchors[0], info)
        return [sch] if tunable else sch

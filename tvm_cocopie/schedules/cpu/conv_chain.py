"""Two convolutions in one kernel: a conv and the 1x1 conv that reads it pixel by pixel.

DNNFusion joins a depthwise conv (or a 1x1 conv) with the 1x1 conv after it when the
second reads the first at its own pixel (row locality,
:mod:`tvm_cocopie.relay_passes.fusion.locality`): MobileNet's depthwise + projection,
two 1x1 convs in a row. The first conv's result (the expanded tensor of an inverted
residual block, the largest of the network) then never goes to memory. The nest::

    parallel  n, output rows of the second conv (th at a time)
      first conv's padded input rows, then the first conv and its epilogue for those
      rows, every channel (a few KiB: L1/L2), channels innermost, vectorized
      serial  pixel tiles of the row
        serial  output-channel tiles             <- the second conv's epilogue here
          the register-blocked 1x1 conv of :mod:`.conv2d_nchwc` (input-stationary)

Every element of the first conv is computed once: the second conv, a 1x1 with stride
1, reads exactly the rows its own output rows are.

A depthwise conv reads its producer channel by channel instead (the expansion 1x1 conv
of an inverted residual, then the depthwise conv): the pair runs chunk by chunk, with
no halo and nothing computed twice::

    parallel  n, channel chunks (one vector of channels)
      serial  the first conv for the chunk, every pixel: register tiles of one vector
              x 4-8 pixels, written back with the epilogue folded into the depthwise
              conv's padded input (the chunk's image: 25 KiB at 28x28)
      serial  the depthwise conv's tiles, its epilogue under each tile

The expanded tensor (1.8 MiB at 56x56 x 144) then never leaves the core's cache: timed
with flushed caches, 28x28 x 192: 231 vs 273 us for the two kernels, 14x14 x 384: 196 vs
267 us; at 56x56 the first conv re-reads its whole input for every chunk and the pair
loses (637 vs 614 us): the measured decision keeps those apart. Anything else (a window
in the second conv, a stride in a 1x1 second conv, more than two convs, a wide first
conv before a depthwise one, a GSPC conv on either side) is left to the next rule.
"""

from __future__ import annotations

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.conv2d_nchwc import ANNOTATION
from ..base import (
    MIN_PARALLEL_MACS,
    CpuRule,
    annotated_blocks,
    block_work,
    blocks_before,
    const_extent,
    is_spatial,
    parallel_spatial,
    vectorizable,
    vectorize_inner,
)
from .conv2d_nchwc import ConvKnobs, result_block


def _between(sch: s_tir.Schedule, first, second) -> list:
    """The root blocks after ``first`` and before ``second``."""
    return blocks_before(sch, second)[len(blocks_before(sch, first)) + 1:]


def _is_pointwise(sch: s_tir.Schedule, block) -> bool:
    """A 1x1 window (its ``ry``/``rx`` loops of extent 1)."""
    loops = sch.get_loops(block)
    window = loops[6:8] if len(loops) == 9 else loops[5:7]  # (y, x) or flattened pixels
    return len(loops) in (8, 9) and all(const_extent(sch, lp) == 1 for lp in window)


def _band_rows(sch: s_tir.Schedule, second, knobs: ConvKnobs) -> int | None:
    """Output rows per parallel iteration: the register tile's rows, or for a flattened
    compute the fewest whole rows that hold whole ``tw``-pixel tiles (``None``: none
    divides the height)."""
    if not knobs.flat:
        return knobs.th
    height = const_extent(sch, sch.get_loops(second)[2])
    if height is None or height % knobs.ow:
        return None
    oh = height // knobs.ow
    for band in range(1, oh + 1):
        if oh % band == 0 and (band * knobs.ow) % knobs.tw == 0:
            return band
    return None


def schedule_chain(sch: s_tir.Schedule, first, second, info: CpuInfo):
    """The module docstring's nest; ``sch``, or ``None`` if the pair does not fit it."""
    knobs = ConvKnobs.from_annotation(sch.get(second).annotations[ANNOTATION])
    first_knobs = ConvKnobs.from_annotation(sch.get(first).annotations[ANNOTATION])
    if knobs.kind != "conv" or first_knobs.flat or not _is_pointwise(sch, second):
        return None
    if knobs.split > 1 or first_knobs.split > 1:  # GSPC segments: a lane loop of their own
        return None
    band = _band_rows(sch, second, knobs)
    if band is None:
        return None
    if len(annotated_blocks(sch, ANNOTATION)) != 2:
        return None
    lanes = info.f32_lanes
    second_name, first_name = sch.get(second).name_hint, sch.get(first).name_hint
    work = block_work(sch, second)
    # the first conv's epilogue: one block computing it, fed by the conv
    middle = _between(sch, first, second)
    if not middle or not all(is_spatial(sch, b) for b in middle):
        return None
    for block in middle[:-1]:
        sch.compute_inline(block)
    epilogue = _between(sch, sch.get_sblock(first_name), sch.get_sblock(second_name))[0]
    # the first conv's input side (padding, packing) stays materialized per row band
    prologue = [b for b in blocks_before(sch, sch.get_sblock(first_name)) if is_spatial(sch, b)]
    second = sch.get_sblock(second_name)
    final = result_block(sch, second, knobs, info)
    if knobs.flat:  # pixels p = y * OW + x: bands of whole rows, tiles of tw pixels
        n, oc, p, oi, rco, ry, rx, rci = sch.get_loops(second)
        yo, xo, xi = sch.split(p, [None, band * knobs.ow // knobs.tw, knobs.tw])
        tile = [xi]
    else:
        n, oc, y, x, oi, rco, ry, rx, rci = sch.get_loops(second)
        yo, yi = sch.split(y, [None, knobs.th])
        xo, xi = sch.split(x, [None, knobs.tw])
        tile = [yi, xi]
    oc, ocr = sch.split(oc, [None, knobs.r]) if knobs.r > 1 else (oc, None)
    inner = [lp for lp in (ocr, *tile) if lp is not None]
    sch.reorder(n, yo, xo, oc, rco, ry, rx, rci, *inner, oi)
    rows = sch.fuse(n, yo)
    if info.num_cores > 1 and (work is None or work >= MIN_PARALLEL_MACS):
        sch.parallel(rows)
    sch.reverse_compute_at(final, oc, preserve_unit_loops=False)
    if vectorizable(sch, final):
        vectorize_inner(sch, sch.get_loops(final)[-1], lanes)
    # the first conv for the rows, every channel: epilogue, conv, then its input
    sch.compute_at(epilogue, rows, preserve_unit_loops=False)
    first = sch.get_sblock(first_name)
    sch.compute_at(first, rows, preserve_unit_loops=True)
    for block in reversed(prologue):
        sch.compute_at(block, rows, preserve_unit_loops=False)
        vectorize_inner(sch, sch.get_loops(block)[-1], lanes)
    vectorize_inner(sch, sch.get_loops(epilogue)[-1], lanes)
    _first_conv_inner(sch, sch.get_sblock(first_name), rows, first_knobs, lanes)
    second = sch.get_sblock(second_name)
    for loop in inner:
        sch.unroll(loop)
    if knobs.unroll_channel:
        sch.unroll(rci)
    sch.vectorize(oi)
    sch.decompose_reduction(second, rco)
    return sch


def _first_conv_inner(sch: s_tir.Schedule, block, rows, knobs: ConvKnobs, lanes: int) -> None:
    """The first conv under the row loop: window loops outside, output channels of a
    chunk innermost and vectorized (a depthwise conv: one FMA per tap and lane; a 1x1
    conv: input channels outside too)."""
    loops = sch.get_loops(block)
    at = [sch.get(lp).same_as(sch.get(rows)) for lp in loops]
    below = loops[at.index(True) + 1:]
    if knobs.kind == "depthwise":
        c, y, x, ci, ry, rx = below[-6:]
        width = const_extent(sch, x) or 0
        if knobs.tw > 1 and width % knobs.tw == 0:  # the register tile: tw pixels a tap
            xo, xi = sch.split(x, [None, knobs.tw])
            sch.reorder(c, y, xo, ry, rx, xi, ci)
            sch.unroll(xi)
        else:
            sch.reorder(c, y, x, ry, rx, ci)
        sch.unroll(ry)
        sch.unroll(rx)
        reduce_at = ry
    else:
        c, y, x, ci, rco, ry, rx, rci = below[-8:]
        sch.reorder(c, y, x, rco, ry, rx, rci, ci)
        sch.unroll(rci)
        reduce_at = rco
    sch.vectorize(ci)
    init = sch.decompose_reduction(block, reduce_at)
    vectorize_inner(sch, sch.get_loops(init)[-1], lanes)


def _pixel_tile(width: int) -> int:
    """Pixels of a row per register tile of a one-chunk conv: 6-8 accumulators (FMA
    latency x pipes) that divide the row."""
    return next((t for t in (8, 7, 6, 5, 4) if width % t == 0), 1)


def schedule_channel_chain(sch: s_tir.Schedule, first, second, info: CpuInfo):
    """A dense conv and the depthwise conv reading it, chunk by chunk (module docstring,
    second nest); ``sch``, or ``None`` if the pair does not fit it."""
    knobs = ConvKnobs.from_annotation(sch.get(second).annotations[ANNOTATION])
    first_knobs = ConvKnobs.from_annotation(sch.get(first).annotations[ANNOTATION])
    if knobs.kind != "depthwise" or first_knobs.kind != "conv":
        return None
    if first_knobs.group > 1 or first_knobs.split > 1:  # wide or GSPC lanes: other loops
        return None
    if len(annotated_blocks(sch, ANNOTATION)) != 2:
        return None
    lanes = info.f32_lanes
    second_name, first_name = sch.get(second).name_hint, sch.get(first).name_hint
    middle = _between(sch, first, second)
    if not middle or not all(is_spatial(sch, b) for b in middle):
        return None
    # everything between the convs (the first's slice and epilogue) inlined into the
    # block the depthwise conv reads (its padded input): one buffer per chunk
    stage_name = sch.get(middle[-1]).name_hint
    for block in middle[:-1]:
        sch.compute_inline(block)
    prologue = [b for b in blocks_before(sch, sch.get_sblock(first_name)) if is_spatial(sch, b)]
    for block in prologue:
        parallel_spatial(sch, block, info)

    second = sch.get_sblock(second_name)
    final = result_block(sch, second, knobs, info)
    if knobs.flat:
        n, c, p, ci, ry, rx = sch.get_loops(second)
        po, pi = sch.split(p, [None, knobs.tw])
        outer, tile = [po], [pi]
    else:
        n, c, y, x, ci, ry, rx = sch.get_loops(second)
        yo, yi = sch.split(y, [None, knobs.th])
        xo, xi = sch.split(x, [None, knobs.tw])
        outer, tile = [yo, xo], [yi, xi]
    sch.reorder(n, c, *outer, ry, rx, *tile, ci)
    chunk = sch.fuse(n, c)
    if info.num_cores > 1:
        sch.parallel(chunk)
    sch.reverse_compute_at(final, outer[-1], preserve_unit_loops=False)
    if vectorizable(sch, final):
        vectorize_inner(sch, sch.get_loops(final)[-1], lanes)
    stage = sch.get_sblock(stage_name)
    sch.compute_at(stage, chunk, preserve_unit_loops=False)
    vectorize_inner(sch, sch.get_loops(stage)[-1], lanes)

    # the first conv for the chunk, every pixel: register tiles of one vector
    first = sch.get_sblock(first_name)
    write_back = sch.cache_write(first, 0, "local")
    sch.compute_at(write_back, chunk, preserve_unit_loops=False)
    sch.compute_at(first, chunk, preserve_unit_loops=True)
    first = sch.get_sblock(first_name)
    loops = sch.get_loops(first)
    if first_knobs.flat:
        p, oi, rco, fy, fx, rci = loops[-6:]
        width = const_extent(sch, p) or 0
        po1, pi1 = sch.split(p, [None, _pixel_tile(width)])
        outer1, tile1 = [po1], [pi1]
    else:
        y1, x1, oi, rco, fy, fx, rci = loops[-7:]
        width = const_extent(sch, x1) or 0
        xo1, xi1 = sch.split(x1, [None, _pixel_tile(width)])
        outer1, tile1 = [y1, xo1], [xi1]
    sch.reorder(*outer1, rco, fy, fx, rci, *tile1, oi)
    sch.reverse_compute_at(write_back, outer1[-1], preserve_unit_loops=False)
    vectorize_inner(sch, sch.get_loops(write_back)[-1], lanes)
    for loop in tile1:
        sch.unroll(loop)
    sch.unroll(rci)
    sch.vectorize(oi)
    sch.decompose_reduction(first, rco)

    second = sch.get_sblock(second_name)
    if knobs.wide:  # pixels x channels: one vector
        ci = sch.fuse(tile.pop(), ci)
    for loop in (*tile, ry, rx):
        sch.unroll(loop)
    sch.vectorize(ci)
    sch.decompose_reduction(second, ry)
    return sch


class ConvChain(CpuRule):
    """Schedules PrimFuncs holding two annotated convs: a 1x1 reading the first pixel by
    pixel, or a depthwise conv reading the first chunk by chunk (DNNFusion's row-local
    conv pairs)."""

    name = "conv_chain"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The nests of the module docstring, or ``None``."""
        anchors = annotated_blocks(sch, ANNOTATION)
        if len(anchors) != 2:
            return None
        kind = str(sch.get(anchors[1]).annotations[ANNOTATION]["kind"])
        if kind == "depthwise":
            return schedule_channel_chain(sch, anchors[0], anchors[1], info)
        return schedule_chain(sch, anchors[0], anchors[1], info)

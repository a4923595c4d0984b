"""Two or three convolutions in one kernel: a conv and the 1x1 conv that reads it pixel
by pixel, a 1x1 conv and the depthwise conv after it, a whole inverted residual block.

DNNFusion joins a depthwise conv (or a 1x1 conv) with the 1x1 conv after it when the
second reads the first at its own pixel (row locality,
:mod:`tvm_cocopie.relay_passes.fusion.locality`): MobileNet's depthwise + projection,
two 1x1 convs in a row. The first conv's result (the expanded tensor of an inverted
residual block, the largest of the network) then never goes to memory. The nest::

    parallel  n, output rows of the second conv (th at a time)
      the first conv and its epilogue for those rows, every channel (a few KiB: L1/L2),
      register tiles of pixels x one vector of channels, the epilogue applied to the
      tile in registers; a depthwise first conv reads its input under the padding
      condition (no padded copy: 1.5 rows copied per output row at 112x112 made the
      pair 175 against 97 us for the two kernels; read inline and tiled, 102 vs 100)
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
loses (637 vs 614 us): the measured decision keeps those apart. A wide first conv (its
register tile several 8-channel chunks side by side: MobileNetV3's 72, 120, 200
channels) feeds as many depthwise chunks per parallel iteration; with few such tiles
the cores get uneven shares (3 for 2 cores at 56x56 x 72: 183 vs 126 us; 28x28 x 120:
66 vs 64), so most stay apart.

The whole block (expansion, depthwise, projection), and a depthwise conv before a 1x1
conv over flattened pixels (small maps, where bands of whole rows do not hold whole
pixel tiles), run chunk by chunk too, the projection's reduction over the chunks split
among the cores (``rfactor``)::

    parallel  the cores' parts of the depthwise conv's chunks (an even split)
      serial  chunk: the expansion for the chunk, every pixel; the depthwise conv for
              it; then the chunk's share of the projection, every pixel, accumulated
              into the part's partial sums (register tiles of the 1x1 conv)
    parallel  output chunks: the parts' sums, the projection's epilogue per pixel

Nothing is computed twice and no row band needs a halo; the partial sums are the
projection's result once per part (100 KiB at 28x28 x 32). MobileNetV2's blocks at
28x28 and 14x14 measure even with their two kernels (103 vs 106 us, 105 vs 100, 140 vs
144, flushed caches, 2 cores, znver4). Anything else (a window in the second conv, a
stride in a 1x1 second conv, other chains of three, a wide expansion in a chain of
three, a GSPC conv on either side, a prime number of chunks) is left to the next rule.
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
    fuse_parallel,
    inline_consumers,
    is_spatial,
    loops_above,
    parallel_spatial,
    spills_over,
    vectorizable,
    vectorize_inner,
)
from .conv2d_nchwc import ConvKnobs, flatten_final, fuse_lanes, inline_padding, result_block


def _between(sch: s_tir.Schedule, first, second) -> list:
    """The root blocks after ``first`` and before ``second``."""
    return blocks_before(sch, second)[len(blocks_before(sch, first)) + 1:]


def _is_pointwise(sch: s_tir.Schedule, block) -> bool:
    """A 1x1 window: the ``ry``/``rx`` loops (before the last, ``rci``) of extent 1."""
    loops = sch.get_loops(block)
    return len(loops) >= 8 and all(const_extent(sch, lp) == 1 for lp in loops[-3:-1])


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


def _is_padding(sch: s_tir.Schedule, block) -> bool:
    """A padded copy: a spatial block whose value is an ``if_then_else``."""
    return is_spatial(sch, block) and "if_then_else" in str(sch.get(block).body)


def schedule_chain(sch: s_tir.Schedule, first, second, info: CpuInfo):
    """The module docstring's first nest for a depthwise or 1x1 conv ``first`` and the 1x1
    conv ``second`` reading it; ``sch``, or ``None`` if the pair does not fit it."""
    knobs = ConvKnobs.from_annotation(sch.get(second).annotations[ANNOTATION])
    first_knobs = ConvKnobs.from_annotation(sch.get(first).annotations[ANNOTATION])
    if knobs.kind != "conv" or not _is_pointwise(sch, second):
        return None
    if first_knobs.flat or first_knobs.split > 1 or first_knobs.group > 1 or knobs.split > 1:
        return None  # flattened or wide first convs, GSPC segments: loops of their own
    band = _band_rows(sch, second, knobs)
    if band is None:
        return None
    lanes = info.f32_lanes
    names = [sch.get(first).name_hint, sch.get(second).name_hint]
    work = block_work(sch, second)
    epilogues = _chain_epilogues(sch, names, [first_knobs])
    if epilogues is None:
        return None
    (epilogue,) = epilogues
    # the first conv's input side (padding, packing) stays materialized per row band
    prologue = [b for b in blocks_before(sch, sch.get_sblock(names[0])) if is_spatial(sch, b)]
    second = sch.get_sblock(names[-1])
    final = result_block(sch, second, knobs, info)
    fuse_lanes(sch, second, knobs)  # a wide tile's chunks side by side: one vector
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
    # the first conv for the rows (with the halo a window needs), every channel: its
    # epilogue, the conv, then its input
    sch.compute_at(sch.get_sblock(epilogue), rows, preserve_unit_loops=False)
    sch.compute_at(sch.get_sblock(names[0]), rows, preserve_unit_loops=True)
    if first_knobs.pad_inline:  # a depthwise first conv reads under the padding condition
        inline_padding(sch, prologue, rows, info)
    else:
        for block in reversed(prologue):
            sch.compute_at(block, rows, preserve_unit_loops=False)
            vectorize_inner(sch, sch.get_loops(block)[-1], lanes)
    vectorize_inner(sch, sch.get_loops(sch.get_sblock(epilogue))[-1], lanes)
    _first_conv_inner(sch, sch.get_sblock(names[0]), rows, first_knobs, lanes,
                      sch.get_sblock(epilogue))
    second = sch.get_sblock(names[-1])
    for loop in inner:
        sch.unroll(loop)
    if knobs.unroll_channel:
        sch.unroll(rci)
    sch.vectorize(oi)
    sch.decompose_reduction(second, rco)
    return sch


def _first_conv_inner(sch: s_tir.Schedule, block, rows, knobs: ConvKnobs, lanes: int,
                      epilogue) -> None:
    """A conv before the last under the row loop: window loops outside, a register tile
    of pixels of a row x one chunk of output channels (vectorized), ``epilogue`` applied
    to the tile in registers (a depthwise conv: one FMA per tap and lane; a 1x1 conv:
    input channels outside too)."""
    loops = sch.get_loops(block)
    below = loops[len(loops_above(sch, block, rows)) + 1:]
    if knobs.kind == "depthwise":
        c, y, x, ci, *window = below[-6:]
    else:
        c, y, x, ci, *window = below[-8:]
    width = const_extent(sch, x) or 0
    tw = knobs.tw if knobs.kind == "depthwise" else _pixel_tile(width)
    tiled = tw > 1 and width % tw == 0
    if tiled:  # the register tile: tw pixels
        xo, xi = sch.split(x, [None, tw])
        sch.reorder(c, y, xo, *window, xi, ci)
        sch.unroll(xi)
        sch.set_scope(block, 0, "local")
        sch.reverse_compute_at(epilogue, xo, preserve_unit_loops=False)
        vectorize_inner(sch, sch.get_loops(epilogue)[-1], lanes)
    else:
        sch.reorder(c, y, x, *window, ci)
    if knobs.kind == "depthwise":
        for loop in window:
            sch.unroll(loop)
    else:
        sch.unroll(window[-1])  # rci
    sch.vectorize(ci)
    init = sch.decompose_reduction(block, window[0])
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
    if first_knobs.split > 1:  # GSPC lanes: other loops
        return None
    group = first_knobs.group  # a wide first conv: chunks side by side in its tile
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
    if group > 1:  # a wide tile of the first conv feeds `group` depthwise chunks
        c, cg = sch.split(c, [None, group])
        sch.reorder(n, c, cg, *outer, ry, rx, *tile, ci)
    else:
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
    if group > 1:  # the tile's chunks x lanes: one vector
        sch.fuse(*sch.get_loops(first)[-6:-4])
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


def schedule_split_chain(sch: s_tir.Schedule, anchors: list, info: CpuInfo):
    """The module docstring's third nest for ``anchors``: a depthwise conv and a 1x1 conv
    over flattened pixels, or an expansion 1x1, a depthwise conv and a 1x1 (an inverted
    residual block); ``sch``, or ``None`` if the convs do not fit it."""
    *firsts, second = anchors
    knobs = ConvKnobs.from_annotation(sch.get(second).annotations[ANNOTATION])
    first_knobs = [ConvKnobs.from_annotation(sch.get(b).annotations[ANNOTATION])
                   for b in firsts]
    kinds = [k.kind for k in first_knobs]
    if knobs.kind != "conv" or knobs.split > 1 or not _is_pointwise(sch, second):
        return None
    if kinds not in (["depthwise"], ["conv", "depthwise"]):
        return None
    dw_knobs = first_knobs[-1]
    if dw_knobs.flat or dw_knobs.wide or not dw_knobs.pad_inline:
        return None
    if len(firsts) == 2 and (first_knobs[0].flat or first_knobs[0].split > 1
                             or first_knobs[0].group > 1 or not _is_pointwise(sch, firsts[0])):
        return None
    lanes = info.f32_lanes
    names = [sch.get(b).name_hint for b in anchors]
    epilogues = _chain_epilogues(sch, names, first_knobs)
    if epilogues is None:
        return None
    prologue = [b for b in blocks_before(sch, sch.get_sblock(names[0])) if is_spatial(sch, b)]
    second = sch.get_sblock(names[-1])
    final = inline_consumers(sch, second)
    if final is None or spills_over(sch, final, second):
        return None
    fuse_lanes(sch, second, knobs)  # a wide tile's chunks side by side: one vector
    n, oc, *pixels, oi, rco, ry, rx, rci = sch.get_loops(second)
    chunks = const_extent(sch, rco)
    if chunks is None:
        return None
    cores = _reduction_split(chunks, info.num_cores)
    if cores is None:
        return None
    # the reduction over the depthwise conv's chunks, split among the cores: each sums
    # its chunks into a partial result of its own (rfactor); the partials then add up
    ro, ri = sch.split(rco, [cores, None])
    partial = sch.rfactor(ro, 0)
    n, oc, *pixels, oi, ro, ri, ry, rx, rci = sch.get_loops(partial)
    if knobs.flat:
        (p,) = pixels
        po, pi = sch.split(p, [None, knobs.tw])
        outer, tile = [po], [pi]
    else:
        y, x = pixels
        yo, yi = sch.split(y, [None, knobs.th])
        xo, xi = sch.split(x, [None, knobs.tw])
        outer, tile = [yo, xo], [yi, xi]
    oc, ocr = sch.split(oc, [None, knobs.r]) if knobs.r > 1 else (oc, None)
    inner = [lp for lp in (ocr, *tile) if lp is not None]
    sch.reorder(ro, ri, n, oc, *outer, ry, rx, rci, *inner, oi)
    if cores > 1:
        sch.parallel(ro)
    # a chunk of the convs before, every pixel, then its share of the 1x1 conv
    for i in reversed(range(len(firsts))):
        sch.compute_at(sch.get_sblock(epilogues[i]), ri, preserve_unit_loops=False)
        sch.compute_at(sch.get_sblock(names[i]), ri, preserve_unit_loops=True)
    if first_knobs[0].pad_inline:
        inline_padding(sch, prologue, ri, info)
    else:
        for block in prologue:
            parallel_spatial(sch, block, info)
    for name, epilogue, fknobs in zip(names, epilogues, first_knobs):
        vectorize_inner(sch, sch.get_loops(sch.get_sblock(epilogue))[-1], lanes)
        _first_conv_inner(sch, sch.get_sblock(name), ri, fknobs, lanes,
                          sch.get_sblock(epilogue))
    for loop in inner:
        sch.unroll(loop)
    sch.unroll(rci)
    sch.vectorize(oi)
    sch.decompose_reduction(partial, ri)
    # the partials' sum and the epilogue, one parallel pass over the result
    second = sch.get_sblock(names[-1])
    n, oc, *pixels, oi, ro = sch.get_loops(second)
    sch.reorder(n, oc, *pixels, ro, oi)
    fuse_parallel(sch, [n, oc], info, block_work(sch, second))
    sch.vectorize(oi)
    if knobs.flat:  # the epilogue iterates over the flattened pixels too
        flatten_final(sch, final, knobs.ow)
    sch.reverse_compute_at(final, pixels[-1], preserve_unit_loops=False)
    if vectorizable(sch, final):
        vectorize_inner(sch, sch.get_loops(final)[-1], lanes)
    return sch


def _reduction_split(chunks: int, cores: int) -> int | None:
    """Parts the chunks of a split reduction are cut into: the most that divide them
    evenly, at most ``cores`` (a part an iteration of the parallel loop), or, when none
    above one does, the fewest above ``cores`` up to twice as many; ``None`` if neither
    (a prime number of chunks: one core would do all the work)."""
    if cores <= 1:
        return 1
    even = max(d for d in range(1, cores + 1) if chunks % d == 0)
    if even > 1:
        return even
    return next((d for d in range(cores + 1, 2 * cores + 2) if chunks % d == 0), None)


def _chain_epilogues(sch: s_tir.Schedule, names: list, first_knobs: list) -> list | None:
    """Each conv's epilogue before the last conv inlined into one block fed by the conv
    (its name); before a depthwise conv that reads under the padding condition, the
    padded copy inlined into the depthwise conv. ``None``: something else in between."""
    epilogues = []
    for i in range(len(names) - 1):
        middle = _between(sch, sch.get_sblock(names[i]), sch.get_sblock(names[i + 1]))
        if not middle or not all(is_spatial(sch, b) for b in middle):
            return None
        if i + 1 < len(names) - 1:  # a conv before the depthwise one
            if not (first_knobs[i + 1].pad_inline and len(middle) > 1
                    and _is_padding(sch, middle[-1])):
                return None
            sch.compute_inline(middle.pop())
        for block in middle[:-1]:
            sch.compute_inline(block)
        epilogues.append(sch.get(middle[-1]).name_hint)
    return epilogues


class ConvChain(CpuRule):
    """Schedules PrimFuncs holding two annotated convs (a 1x1 reading the first pixel by
    pixel, or a depthwise conv reading the first chunk by chunk: DNNFusion's row-local
    conv pairs) or three (an inverted residual block)."""

    name = "conv_chain"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The nests of the module docstring, or ``None``."""
        anchors = annotated_blocks(sch, ANNOTATION)
        if len(anchors) not in (2, 3):
            return None
        kind = str(sch.get(anchors[-1]).annotations[ANNOTATION]["kind"])
        if kind == "depthwise" and len(anchors) == 2:
            return schedule_channel_chain(sch, anchors[0], anchors[1], info)
        last = ConvKnobs.from_annotation(sch.get(anchors[-1]).annotations[ANNOTATION])
        if last.flat or len(anchors) == 3:
            return schedule_split_chain(sch, anchors, info)
        return schedule_chain(sch, anchors[0], anchors[1], info)

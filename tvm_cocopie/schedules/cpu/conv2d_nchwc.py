"""Register-blocked schedule of the NCHW[x]c convolutions (dense, grouped, depthwise).

The compute (:mod:`tvm_cocopie.topi.cpu.conv2d_nchwc`) has already chosen the register
tile and written it in the block annotation, together with the padding that makes
every tile full. The loop nest this rule builds, for a dense conv::

    parallel  n, oc // r, tile rows        (fused; enough iterations for all cores)
      serial  tile columns                 <- the epilogue is computed here, per tile
        rco, ry, rx                        reduction over input chunks and the window
          rci        (unrolled)            one input channel of the chunk
            ocr      (unrolled, r)         r weight vectors of the tile
              yi, xi (unrolled, th x tw)   output pixels: one broadcast each
                oi   (vectorized)          SIMD lanes: FMA into an accumulator

The ``r x th x tw`` accumulators live in a ``local`` buffer that LLVM keeps in
vector registers. Consumers of the conv (bias, batch-norm scale/shift, ReLU/ReLU6,
clip, HardSwish, sigmoid, residual add, layout change back to NCHW...) are inlined
into the block that writes the function's result, and that block runs under the
tile loop, on the tile just computed, while it is in L1. For dense convs the padded
input and any layout packing stay separate, parallel, vectorized passes; depthwise
convs (memory-bound) compute their padded rows inside the parallel loop instead, in
L1 (``ConvKnobs.pad_per_tile`` says why).

Depthwise convs use the same nest without ``rco``/``rci``/``ocr``.

A conv whose result a pooling window reduces (conv + bias + ReLU + max pool, VGG's and
CRNN's stages: DNNFusion joins them, :func:`window_epilogue`) writes its epilogue per
tile into a buffer of a band of rows and the pool runs over the band under the same
parallel iteration, so the conv's full-size result never goes to memory (at 224x224 x
64 channels, 12.8 MB written and read back): the rows of a band are a multiple of the
pool's stride, so no window crosses two bands (non-overlapping windows only; not a
conv over flattened pixels, on small maps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm import s_tir, tirx

from ...target import CpuInfo
from ...topi.cpu.conv2d_nchwc import ANNOTATION
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
    lanes_inside_reduction,
    loops_above,
    parallel_spatial,
    spills_over,
    vectorizable,
    vectorize_inner,
)
from ..tunable import SPACE_ANNOTATION, sample_unroll_budget, split_tile


@dataclass(frozen=True)
class ConvKnobs:
    """The schedule's free choices (the tile itself is fixed by the compute)."""

    #: "conv", "depthwise" or "shift" (a grouped conv on lane-shifted input vectors,
    #: :mod:`tvm_cocopie.topi.cpu.gspc_shift`: a depthwise nest with the shifts as a
    #: third reduction; its padded rows are flat, so not read inline)
    kind: str
    r: int
    th: int
    tw: int
    flat: bool
    ow: int
    unroll_channel: bool = True  # unroll the rci loop (conv) / the window (depthwise)
    #: tuning: instead of ``unroll_channel``, sample LLVM's unroll budget for the
    #: reduction nest (``pragma_auto_unroll_max_step``), a MetaSchedule decision
    sample_unroll: bool = False
    #: tuning: sample the register tile (output chunks ``r``, rows ``th``, columns or
    #: pixels ``tw``) with ``SamplePerfectTile`` decisions, the annotation's tile as the
    #: design space's decision; any perfect tiling of the padded extents is valid
    sample_tiles: bool = False
    #: compute the padded input per parallel iteration, where it stays in L1 (one
    #: fork-join per conv), instead of as its own parallel pass over memory. Dense convs:
    #: 6-18% slower on one core (halo rows and every output-channel tile redo the
    #: padding). Depthwise convs are memory-bound and have no output-channel tiles: the
    #: separate pass tripled their DRAM traffic (1.4-2x slower, stride 2), so on for them
    pad_per_tile: bool = False
    #: read the input through the padding condition instead of a padded copy
    #: (:func:`inline_padding`): on for depthwise convs whose vector is one chunk, where
    #: a copy per row band cost as much as the 9 FMAs per pixel it feeds (znver1, 2
    #: threads, flushed caches: 32 channels at 112x112 stride 2 91 -> 55 us, 64 at 56x56
    #: 101 -> 90, 672 at 14x14 5x5 stride 2 45 -> 30); off for wide tiles, whose vector
    #: spans pixels the condition would split (58 channels at 28x28: 31 -> 137 us)
    pad_inline: bool = False
    #: loop over the output-channel tiles inside the pixel tiles (input-stationary)
    #: when all the weights fit in L2: measured with cold caches (as inside a network),
    #: 0-13% faster for 1x1 convs reading a large input (256 channels at 56x56), equal
    #: for 3x3; set by :func:`choose_knobs` from the packed weight's size
    oc_inner: bool = False
    #: pixel tiles per band of the banded order (0: off): the parallel loop runs over
    #: bands of pixel tiles whose input fits in L2, every output-channel tile meets the
    #: band there; for a dense conv whose weights are beyond ``L2_WEIGHT_BYTES`` (so not
    #: input-stationary) and whose input is beyond :data:`BANDED_INPUT_BYTES`, which the
    #: weight-stationary order read from memory once per output-channel tile (SegFormer's
    #: 1x1 fuse conv, 1024 -> 256 channels at 64x64: 16 MB read 4 times, 22.9 ms)
    pixel_band: int = 0
    #: wide tiles of narrow chunks (:attr:`tvm_cocopie.topi.cpu.conv2d_nchwc.ConvTile.wide`),
    #: fixed by the compute: a dense conv's work block holds ``group`` chunks side by side
    #: (two lane loops, fused into the vector); a depthwise conv's vector spans ``tw``
    #: pixels of its chunk (``wide``: the tile's last pixel loop fused with the lanes)
    group: int = 1
    wide: bool = False
    #: GSPC (:mod:`tvm_cocopie.topi.cpu.gspc`), fixed by the compute: the chunk's lanes are
    #: ``split`` segments of one group each, each its own vector; the segment loop is
    #: unrolled beside the pixels (``split x th x tw`` accumulators)
    split: int = 1

    @classmethod
    def from_annotation(cls, ann) -> ConvKnobs:
        """The knobs a compute's annotation fixes (its register tile) with the schedule's
        defaults."""
        kind = str(ann["kind"])
        wide = bool(int(ann.get("wide", 0)))
        return cls(kind, int(ann["r"]), int(ann["th"]), int(ann["tw"]), bool(int(ann["flat"])),
                   int(ann["ow"]), pad_per_tile=kind in ("depthwise", "shift"),
                   pad_inline=kind == "depthwise" and not wide,
                   group=int(ann.get("group", 1)), wide=wide,
                   split=int(ann.get("split", 1)))


def flatten_final(sch: s_tir.Schedule, final, ow: int) -> None:
    """Iterate the result block over ``p = y * OW + x`` like the flattened conv."""
    ndim = len(sch.get(final).iter_vars)
    if ndim == 5:
        sch.transform_block_layout(final, lambda n, c, y, x, i: (n, c, y * ow + x, i))
    elif ndim == 4:
        sch.transform_block_layout(final, lambda n, c, y, x: (n, c, y * ow + x))
    else:
        raise ValueError(f"result block of rank {ndim} after a flattened conv")


def result_block(sch: s_tir.Schedule, anchor, knobs: ConvKnobs, info: CpuInfo):
    """The block that writes the conv's result: its consumers inlined into the last
    (iterating over flattened pixels like the conv when ``knobs.flat``), or a write-back
    of the accumulators; the conv itself then accumulates in ``local`` scope. A last
    consumer with outputs of its own (a concat: :func:`~..base.spills_over`) runs as its
    own parallel pass after the conv (scheduled here, for ``info``)."""
    final = inline_consumers(sch, anchor)
    if final is not None and spills_over(sch, final, anchor):
        parallel_spatial(sch, final, info)
        final = None
    if final is None:
        return sch.cache_write(anchor, 0, "local")
    if knobs.flat:
        flatten_final(sch, final, knobs.ow)
    sch.set_scope(anchor, 0, "local")
    return final


def fuse_lanes(sch: s_tir.Schedule, anchor, knobs: ConvKnobs) -> None:
    """Fuse a wide tile's two lane loops (``knobs.group`` chunks x the chunk's lanes)
    into one: the vector."""
    if knobs.group == 1:
        return
    spatial = sum(1 for iv in sch.get(anchor).iter_vars if iv.iter_type == 0)
    loops = sch.get_loops(anchor)
    sch.fuse(loops[spatial - 2], loops[spatial - 1])


def attach_prologue(sch: s_tir.Schedule, blocks: list, loop, info: CpuInfo) -> None:
    """Compute the padded input (and any packing) per parallel iteration, under ``loop``.

    One parallel region per conv instead of two: a fork-join costs little on an idle
    machine but a whole time slice when a worker thread has been preempted. The rows
    an iteration needs are recomputed by its neighbours (a halo of ``KH - 1`` rows)
    and by each output-channel tile: copies that cost far less than the FMAs they feed.
    Blocks that cannot move get their own parallel loop.
    """
    for block in reversed(blocks):  # the direct producer of the anchor first
        try:
            sch.compute_at(block, loop, preserve_unit_loops=True)
        except Exception:  # noqa: BLE001 - an opaque producer: schedule it at the root
            parallel_spatial(sch, block, info)
            continue
        vectorize_inner(sch, sch.get_loops(block)[-1], info.f32_lanes)


def inline_padding(sch: s_tir.Schedule, blocks: list, loop, info: CpuInfo) -> None:
    """Inline the padded input (and any packing) into the conv, which then reads the
    data under the padding condition; a block that cannot be inlined is computed per
    parallel iteration (:func:`attach_prologue`)."""
    kept = []
    for block in reversed(blocks):  # the direct producer of the anchor first
        try:
            sch.compute_inline(block)
        except Exception:  # noqa: BLE001 - not inlinable (a reduction, say)
            kept.insert(0, block)
    if kept:
        attach_prologue(sch, kept, loop, info)


def tag_space(sch: s_tir.Schedule, anchor, knobs) -> None:
    """Name the design space of ``knobs`` on the anchor block (a string annotation)."""
    pad = 2 if knobs.pad_inline else int(knobs.pad_per_tile)  # inline / per tile / a pass
    sch.annotate(anchor, SPACE_ANNOTATION, f"kind={knobs.kind};pad={pad};"
                                           f"ocin={int(knobs.oc_inner)};flat={int(knobs.flat)};"
                                           f"split={knobs.split}")


@dataclass(frozen=True)
class WindowEpilogue:
    """A pooling window over a conv's result (:func:`window_epilogue`)."""

    chain: tuple  # names of the element-wise blocks between the conv and the pool
    pool: str  # the reduction over windows
    rest: tuple  # names of the blocks after it
    stride: int  # the window's stride (= its extent) along the rows


def window_epilogue(sch: s_tir.Schedule, anchor) -> WindowEpilogue | None:
    """The module docstring's pooled epilogue, when the conv's consumers are element-wise
    blocks, then one reduction whose every read of the chain's result takes rows
    ``s * y + r`` with ``r`` over a window of ``s`` (a pool whose windows do not
    overlap), then element-wise blocks; ``None`` otherwise."""
    after = blocks_after(sch, anchor)
    reductions = [i for i, b in enumerate(after) if not is_spatial(sch, b)]
    if len(reductions) != 1:
        return None
    at = reductions[0]
    pool = sch.get(after[at])
    source = sch.get(after[at - 1] if at else anchor).writes[0].source
    regions = [r for r in pool.reads if r.source.same_as(source)]
    if len(regions) != 1 or len(regions[0].region) < 4:
        return None
    stride = _window_stride(pool, regions[0].region[2].min)  # (n, c, y, x[, lanes])
    if stride is None:
        return None
    if at and block_work(sch, after[at - 1]) != block_work(sch, after[0]):
        return None  # the chain grows the map (a padding before the pool)
    if any(not is_spatial(sch, b) for b in after[at + 1:]):
        return None
    names = [sch.get(b).name_hint for b in after]
    return WindowEpilogue(tuple(names[:at]), pool.name_hint, tuple(names[at + 1:]), stride)


def _window_stride(pool, row):
    """The stride ``s`` of a pool's row index ``s * y + r`` whose window ``r`` spans
    ``s`` rows (``y`` alone: 1), else ``None`` (overlapping or other windows)."""
    doms = {iv.var: iv for iv in pool.iter_vars}
    if isinstance(row, tirx.Var):
        return 1 if row in doms and doms[row].iter_type == DATA_PAR else None
    if not isinstance(row, tirx.Add):
        return None
    for scaled, window in ((row.a, row.b), (row.b, row.a)):
        if (isinstance(scaled, tirx.Mul) and isinstance(scaled.b, tirx.IntImm)
                and isinstance(scaled.a, tirx.Var) and isinstance(window, tirx.Var)
                and window in doms and doms[window].iter_type != DATA_PAR):
            extent = doms[window].dom.extent
            if isinstance(extent, tirx.IntImm) and int(extent) == int(scaled.b.value):
                return int(extent)
    return None


def _pooled_result(sch: s_tir.Schedule, anchor, pooled: WindowEpilogue):
    """The block writing the pooled conv's per-tile result (the chain inlined into its
    last block, else a write-back of the accumulators); never a conv over flattened
    pixels (:func:`schedule_conv` refuses those)."""
    for name in pooled.chain[:-1]:
        sch.compute_inline(sch.get_sblock(name))
    if not pooled.chain:
        return sch.cache_write(anchor, 0, "local")
    sch.set_scope(anchor, 0, "local")
    return sch.get_sblock(pooled.chain[-1])


def _pool_band(tiles: int | None, th: int, stride: int) -> int:
    """Row tiles per band of a pooled conv: the fewest whose rows are whole windows."""
    band = stride // math.gcd(th, stride)
    if not tiles or tiles % band:
        raise ValueError(f"{tiles} row tiles of {th} rows do not split into windows of "
                         f"{stride}")
    return band


def schedule_pool(sch: s_tir.Schedule, pooled: WindowEpilogue, loop, info: CpuInfo) -> None:
    """The pool (and the blocks after it) computed under ``loop``, after the conv's tiles:
    the lanes innermost and vectorized, the window outside them."""
    pool = sch.get_sblock(pooled.pool)
    sch.reverse_compute_at(pool, loop, preserve_unit_loops=True)  # a loop per iterator
    sch.decompose_reduction(pool, lanes_inside_reduction(sch, pool))
    init = sch.get_sblock(pooled.pool + "_init")
    vectorize_inner(sch, sch.get_loops(init)[-1], info.f32_lanes)
    for name in pooled.rest:
        block = sch.get_sblock(name)
        try:
            sch.reverse_compute_at(block, loop, preserve_unit_loops=False)
        except Exception:  # noqa: BLE001 - a permuting consumer: its own pass
            parallel_spatial(sch, block, info)
            continue
        if vectorizable(sch, block):
            vectorize_inner(sch, sch.get_loops(block)[-1], info.f32_lanes)


def schedule_conv(sch: s_tir.Schedule, anchor, knobs: ConvKnobs, info: CpuInfo):
    """Apply the loop nest of the module docstring to ``anchor``; return ``sch``."""
    work = block_work(sch, anchor)
    pooled = window_epilogue(sch, anchor)
    if pooled is not None and knobs.flat:
        # TVM 0.27's reverse_compute_at bounds the window of a pool under a loop of
        # flattened pixels to one row (checked: wrong maxima); only row bands pool
        raise ValueError("a conv over flattened pixels cannot pool per tile")
    if pooled is not None:  # weight-stationary bands of rows, the pool under each
        knobs = _replace(knobs, oc_inner=False, pixel_band=0)
    prologue = inline_prologue(sch, anchor)
    if pooled is not None:
        final = _pooled_result(sch, anchor, pooled)
    else:
        final = result_block(sch, anchor, knobs, info)
    fuse_lanes(sch, anchor, knobs)

    loops = sch.get_loops(anchor)
    if knobs.kind == "conv":
        n, oc, *spatial, oi, rco, ry, rx, rci = loops
        reductions = [rco, ry, rx, rci]
    elif knobs.kind == "shift":
        n, oc, *spatial, oi, ry, rx, rs = loops
        reductions = [ry, rx, rs]
        rci = None
    else:
        n, oc, *spatial, oi, ry, rx = loops
        reductions = [ry, rx]
        rci = None
    inner = []
    if knobs.split > 1:  # GSPC: the segment loop sits before the lanes
        inner.append(spatial.pop())
    if knobs.sample_tiles:
        tag_space(sch, anchor, knobs)
    if knobs.kind == "conv" and (knobs.r > 1 or knobs.sample_tiles):
        oc, ocr = split_tile(sch, oc, knobs.r, 4, knobs.sample_tiles)
        inner.append(ocr)
    band = 1
    banded = False  # ConvKnobs.pixel_band: bands of pixel tiles, every weight tile per band
    if knobs.flat:
        (p,) = spatial
        po, pi = split_tile(sch, p, knobs.tw, 16, knobs.sample_tiles)
        outer, tile = [po], [pi]
        tiles = const_extent(sch, po) or 0
        if knobs.pixel_band and not knobs.oc_inner and tiles > knobs.pixel_band:
            outer, banded = list(sch.split(po, [None, knobs.pixel_band])), True
    else:
        y, x = spatial
        yo, yi = split_tile(sch, y, knobs.th, 4, knobs.sample_tiles)
        xo, xi = split_tile(sch, x, knobs.tw, 16, knobs.sample_tiles)
        outer, tile = [yo, xo], [yi, xi]
        if pooled is not None:
            band = _pool_band(const_extent(sch, yo), knobs.th, pooled.stride)
        elif (knobs.pad_per_tile and not knobs.pad_inline and not knobs.oc_inner
                and not knobs.sample_tiles):
            band = row_band(sch, n, oc, yo, prologue, knobs, info)
        if band > 1:  # the padded rows of a band of row tiles, computed once per band
            yb, yt = sch.split(yo, [None, band])
            outer = [yb, yt, xo]
    inner += tile
    if banded:  # a band of pixel tiles meets every weight tile
        sch.reorder(n, outer[0], oc, outer[1], *reductions, *inner, oi)
        par_loops, attach = [n, outer[0]], outer[1]
    elif knobs.oc_inner:  # input-stationary: a pixel tile meets every weight tile
        sch.reorder(n, *outer, oc, *reductions, *inner, oi)
        par_loops, attach = [n, *outer], oc
    elif band > 1:  # parallel over bands; their row tiles serial under the padded rows
        sch.reorder(n, oc, *outer, *reductions, *inner, oi)
        par_loops, attach = [n, oc, outer[0]], outer[-1]
    else:  # weight-stationary: a weight tile meets every pixel tile
        sch.reorder(n, oc, *outer, *reductions, *inner, oi)
        par_loops, attach = [n, oc, *outer[:-1]], outer[-1]
    # a depthwise MAC costs about 4 of a dense conv's (no reuse across output channels:
    # 10-15 against 30-36 GFLOP/s a core on znver1), so the same ~40 us of single-core
    # work takes 4x fewer of them
    min_macs = MIN_PARALLEL_MACS // 4 if knobs.kind == "depthwise" else MIN_PARALLEL_MACS
    par_iters = 1
    for loop in par_loops:
        par_iters *= const_extent(sch, loop) or 1
    if par_iters < 4 * max(1, info.num_cores) and band == 1 and pooled is None:
        par, attach = fuse_parallel_upto(sch, [*par_loops, attach], info, work, min_macs)
    else:
        par = fuse_parallel(sch, par_loops, info, work, min_macs)
    if knobs.pad_inline:
        inline_padding(sch, prologue, par, info)
    elif knobs.pad_per_tile:
        attach_prologue(sch, prologue, par, info)
    else:
        for block in prologue:
            parallel_spatial(sch, block, info)

    sch.reverse_compute_at(final, attach, preserve_unit_loops=knobs.sample_tiles)
    final_loops = sch.get_loops(final)
    if vectorizable(sch, final):
        vectorize_inner(sch, final_loops[-1], info.f32_lanes)
    if pooled is not None:  # after the pixel tiles of its band, under the loop around them
        above = loops_above(sch, anchor, outer[1] if band > 1 else outer[-1])
        if not above:
            raise ValueError("no loop around the pooled conv's pixel tiles")
        schedule_pool(sch, pooled, above[-1], info)

    if knobs.wide:  # a vector over the tile's pixels x the chunk's channels (contiguous)
        oi = sch.fuse(inner.pop(), oi)
    for loop in inner:
        sch.unroll(loop)
    if knobs.sample_unroll:
        sample_unroll_budget(sch, reductions[0])
    elif knobs.unroll_channel:
        if rci is not None:
            sch.unroll(rci)
        else:
            for loop in reductions:
                sch.unroll(loop)
    sch.vectorize(oi)
    sch.decompose_reduction(anchor, reductions[0])
    return sch


#: bytes of padded input rows one parallel iteration of a depthwise conv computes
#: (:func:`row_band`): L1-sized, so that the rows are still there when read
BAND_BYTES = 32 * 1024


def row_band(sch: s_tir.Schedule, n, oc, yo, prologue: list, knobs: ConvKnobs,
             info: CpuInfo) -> int:
    """Row tiles per parallel iteration of a conv whose padded input is computed per
    iteration (``knobs.pad_per_tile``): the input rows of a band of tiles overlap by
    the window's halo, which one row tile per iteration recomputes for every tile (3 rows
    copied per output row of a 3x3 conv: the copy cost as much as the FMAs; 64 channels
    at 56x56 ran at 22 GFLOP/s against 59 for 5x5). The largest band dividing the row
    tiles that leaves 8 parallel iterations per core and whose padded rows fit
    :data:`BAND_BYTES`; 1 when the padded input is not a separate block."""
    if not prologue:
        return 1
    pad = sch.get(prologue[-1])
    shape = list(pad.writes[0].source.shape) if pad.writes else []
    extents = [const_extent(sch, loop) for loop in (n, oc, yo)]
    if len(shape) not in (4, 5) or None in extents:  # a symbolic batch: one row tile per
        return 1  # iteration
    if not all(isinstance(d, int) or hasattr(d, "value") for d in shape[2:]):
        return 1
    rows_in = int(shape[2])
    row_bytes = 4 * int(shape[3]) * (int(shape[4]) if len(shape) == 5 else 1)
    tiles = extents[2]
    rows_out = tiles * knobs.th
    stride = max(1, rows_in // rows_out)  # input rows per output row, about
    halo = max(0, rows_in - rows_out * stride)
    best = 1
    for band in range(2, tiles + 1):
        if tiles % band:
            continue
        iters = extents[0] * extents[1] * (tiles // band)
        rows = band * knobs.th * stride + halo
        if iters >= 8 * max(1, info.num_cores) and rows * row_bytes <= BAND_BYTES:
            best = band
    return best


#: weights up to this size stay in a core's L2 (512 KiB on znver3) next to the tiles
L2_WEIGHT_BYTES = 256 * 1024


def weight_bytes(sch: s_tir.Schedule, anchor) -> int:
    """Size of the packed weight a dense conv block reads (its only 6-D input)."""
    sizes = [0]
    for region in sch.get(anchor).reads:
        shape = list(region.source.shape)
        if len(shape) == 6:  # the weight is static (only data may have a symbolic batch)
            total = 4
            for d in shape:
                total *= d
            sizes.append(total)
    return max(sizes)


def choose_knobs(sch: s_tir.Schedule, anchor) -> ConvKnobs:
    """The default knobs: the tile from the annotation, loop order from the sizes."""
    knobs = ConvKnobs.from_annotation(sch.get(anchor).annotations[ANNOTATION])
    if knobs.kind == "conv" and weight_bytes(sch, anchor) <= L2_WEIGHT_BYTES:
        knobs = _replace(knobs, oc_inner=True)
    elif knobs.kind == "conv" and knobs.flat and knobs.group == 1:
        shape = data_shape(sch, anchor)  # (n, c chunks, h, w, chunk), static
        tile_bytes = 4 * knobs.tw * shape[1] * shape[4] if shape else 0
        if shape and 4 * math.prod(shape) > BANDED_INPUT_BYTES:
            knobs = _replace(knobs, pixel_band=max(2, BAND_INPUT_BYTES // tile_bytes))
    return knobs


#: a dense conv's input beyond this (and weights beyond ``L2_WEIGHT_BYTES``) takes the
#: banded order (``ConvKnobs.pixel_band``); bands of pixel tiles read about
#: :data:`BAND_INPUT_BYTES` of input each
BANDED_INPUT_BYTES = 4 * 1024 * 1024
BAND_INPUT_BYTES = 256 * 1024


def data_shape(sch: s_tir.Schedule, anchor) -> list[int]:
    """The static shape of the NCHWc input a dense conv block reads (its 5-D input), or []
    when it is symbolic."""
    for region in sch.get(anchor).reads:
        shape = list(region.source.shape)
        if len(shape) == 5 and all(hasattr(d, "value") for d in shape):
            return [int(d.value) for d in shape]
    return []


class Conv2dNCHWc(CpuRule):
    """Schedules PrimFuncs holding one ``cocopie.conv2d_nchwc``-annotated block."""

    name = "conv2d_nchwc"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """Schedule the one annotated conv block of ``sch`` and its epilogue; the schedule (a list
        when ``tunable``), or ``None``."""
        anchors = annotated_blocks(sch, ANNOTATION)
        if len(anchors) != 1:
            return None
        anchor = anchors[0]
        # another reduction before the conv (a squeeze-and-excitation pool) or after it
        # other than a pool it can run per band (a Winograd conv, an overlapping pool)
        # has loops of its own: not this rule's (it failed there, logged, on every such
        # DNNFusion candidate)
        if any(not is_spatial(sch, b) for b in blocks_before(sch, anchor)):
            return None
        if (any(not is_spatial(sch, b) for b in blocks_after(sch, anchor))
                and window_epilogue(sch, anchor) is None):
            return None
        name = sch.get(anchor).name_hint
        knobs = choose_knobs(sch, anchor)
        if not tunable:
            return schedule_conv(sch, anchor, knobs, info)
        # design spaces: padding placement (a pass, per tile, and read inline where the
        # compute allows it) x loop order, each with sampled register tiles and unroll budget
        placements = [(False, False), (True, False)]
        if knobs.pad_inline:
            placements.append((True, True))
        spaces = []
        for pad_per_tile, pad_inline in placements:
            for oc_inner in (False, True) if knobs.kind == "conv" else (False,):
                trial = sch.copy()
                variant = _replace(knobs, sample_unroll=True, sample_tiles=True,
                                   pad_per_tile=pad_per_tile, pad_inline=pad_inline,
                                   oc_inner=oc_inner)
                spaces.append(schedule_conv(trial, trial.get_sblock(name), variant, info))
        return spaces


def _replace(knobs: ConvKnobs, **changes) -> ConvKnobs:
    from dataclasses import replace

    return replace(knobs, **changes)

"""Untuned blocking heuristics: layout blocks and register tiles from the target's SIMD.

Every choice here is a documented rule of thumb, so that a kernel is fast without
tuning:

* **Layout block** (:func:`channel_block`): a channel chunk is one SIMD vector of
  fp32 (8 lanes on AVX2, 16 on AVX-512, 4 on NEON) whenever the channel count allows;
  small odd channel counts (an RGB input) use the whole channel axis as the chunk,
  others the largest power-of-two divisor. All tensors of a network get the same
  canonical block for their channel count, so layout transforms cancel between
  consecutive convolutions.
* **Register tile** (:func:`conv_tile`): the accumulators of the inner loop must
  fit the vector register file with room for the weight vectors and one broadcast:
  ``r`` weight vectors times ``q`` output pixels accumulators, ``r * q <= regs - r - 1``
  (13 on AVX2 with ``r = 2``), and at least 8 accumulators so that two FMA pipes
  with a 4-cycle latency stay busy (latency x pipes). Among the tiles that qualify we
  pick the one that wastes least padding: with 128+ input channels a flattened run
  of 5 pixels (10 accumulators, measured fastest on znver3 there), with fewer a
  row-aligned ``1 x 4`` or ``2 x 2`` tile, and a flattened pixel axis whenever the
  rows do not divide (7x7 and other odd sizes).
* **Matmul tile** (:func:`matmul_tile`): the same budget with ``r`` vectors of
  packed B columns and ``tm`` rows of A.
* **Matmul cache blocking** (:func:`matmul_blocking`): when the packed B does not fit
  the per-core L2 budget and there is more than one row tile, the column panels go
  outside the row tiles (each panel of B is read from memory once and reused from
  cache by every row tile, the large-N strategy of a GEMV-like head); when one panel
  is larger than the L1 budget, the reduction is blocked too (a ``kb x nb`` slice of
  B stays in L1 while every row tile passes over it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import CompilationError
from ...target import CpuInfo
from .conv2d_nchwc import ConvGeometry, ConvTile, group_span, waste

#: Measured relative speed of the flattened micro-kernel by pixels per tile (r = 2,
#: AVX2, single core): a tie-break between tiles of equal padding waste.
_FLAT_EFFICIENCY = {4: 0.97, 5: 1.0, 6: 0.93, 3: 0.85, 2: 0.7, 7: 0.85, 8: 0.9}


def divisors(n: int, most: int | None = None) -> list[int]:
    """The divisors of ``n`` (at most ``most``), ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    every = sorted(set(small + [n // d for d in small]))
    return every if most is None else [d for d in every if d <= most]


def vector_registers(info: CpuInfo) -> int:
    """Architectural SIMD registers (x86 AVX2: 16, AVX-512: 32, NEON: 32)."""
    if info.arch == "x86":
        return 32 if info.vector_bits >= 512 else 16
    if info.arch == "aarch64":
        return 32
    return 16


def channel_block(channels: int, info: CpuInfo) -> int:
    """Canonical NCHW[x]c chunk for a tensor with ``channels`` channels.

    With 16-lane vectors (AVX-512), channels in whole 8-lane vectors take chunks of 8:
    24 channels ran as one 24-wide chunk (a 16- and an 8-lane vector per value, twice
    the accumulator registers), PP-OCR det's 96->24 3x3 convs at 80x80 at 84 GFLOP/s.
    Same-process A/B, 2 threads, 224 px (znver4, where an 8-lane FMA does half a
    16-lane one's work at twice the rate): PP-OCR det 0.91x the time, MobileNetV3-Large
    0.92x, MobileNetV2 0.97x, EfficientNet-B0 0.98x.
    """
    lanes = info.f32_lanes
    if channels % lanes == 0:
        return lanes
    half = lanes // 2
    if half >= 8 and channels % half == 0:
        return half
    if channels <= 2 * lanes:
        return channels
    return math.gcd(channels, lanes)


@dataclass(frozen=True)
class MatmulTile:
    """Register tile of a packed matmul: ``tm`` rows x ``nb`` columns (``nb = r * lanes``)."""

    tm: int
    nb: int


def _acc_budget(info: CpuInfo, r: int) -> int:
    """Accumulator registers left beside ``r`` weight vectors and one broadcast."""
    return vector_registers(info) - r - 1


def _weight_tile_ok(geo: ConvGeometry, ib: int, ob: int, r: int) -> bool:
    """``r`` output chunks per weight tile divide the outputs and respect the groups."""
    if (geo.o // ob) % r:
        return False
    if geo.groups == 1:
        return True
    try:
        cbg = group_span(geo, ConvTile(ib, ob, r, 1, 1))
    except CompilationError:
        return False
    return r == 1 or cbg * ib <= geo.cpg  # no extra block-diagonal waste from widening


def narrow_tile_chunks(geo: ConvGeometry, ob: int, info: CpuInfo) -> int:
    """Output chunks per weight tile when the chunk is narrower than a vector (ShuffleNet's
    58 channels in chunks of 2): enough chunks to fill one or two whole vectors, the
    count whose rounding up of the chunks wastes least (two vectors on a tie). 0 when
    the chunk fills a vector, or for grouped convs (their tiles follow the groups)."""
    lanes = info.f32_lanes
    if ob >= lanes or lanes % ob or geo.groups > 1:
        return 0
    chunks = geo.o // ob
    one, two = lanes // ob, 2 * lanes // ob
    # two vectors unless they pad the outputs by a tenth more than one does: 116
    # channels in chunks of 4 ran 76 GFLOP/s with two (32 chunks for 29) against 57 with
    # one (30 chunks), 1x4-pixel tiles, znver1
    return two if -(-chunks // two) * two <= 1.1 * (-(-chunks // one) * one) else one


#: From this many output chunks on, an odd count is padded by one zero-weight chunk for
#: a two-vector weight tile (1/11 extra work at most): one vector per tile takes a
#: broadcast per FMA. 512 -> 1000 channels at 13x13 (125 chunks), znver1, 2 threads:
#: 2727 us with one vector, 2027 us for 1024 channels with two
MIN_PADDED_CHUNKS = 11


def conv_tile(geo: ConvGeometry, ib: int, ob: int, info: CpuInfo) -> ConvTile:
    """Pick the register tile of a NCHWc convolution (see the module docstring)."""
    lanes = info.f32_lanes
    vec_per_chunk = max(1, ob // lanes) if ob % lanes == 0 else 1
    r = 1
    if ob % lanes == 0 and vec_per_chunk == 1:
        # two weight vectors per tile (measured best); three when the chunks are odd;
        # two on a zero-weight extra chunk when that pads the outputs little
        r = next((k for k in (2, 3) if _weight_tile_ok(geo, ib, ob, k)), 1)
        if r == 1 and geo.groups == 1 and geo.o // ob >= MIN_PADDED_CHUNKS:
            r = 2
    narrow = narrow_tile_chunks(geo, ob, info)
    if narrow:  # weight vectors span several chunks: the lanes are (chunk, channel)
        r = narrow
    vecs = r * ob // lanes if narrow else r * vec_per_chunk  # weight vectors per tile
    budget = _acc_budget(info, vecs)
    qmax = max(1, budget // vecs)
    qmin = min(qmax, max(1, -(-8 // vecs)))
    oh, ow = geo.oh, geo.ow
    if oh * ow < qmin:  # a few pixels (after global pooling): widen the weight tile instead
        # one row or one column: the whole image as a row-aligned tile (flattening a
        # single column makes p = y + x, which TVM's block layout check refuses)
        th, tw, flat = (oh, ow, False) if 1 in (oh, ow) else (1, oh * ow, True)
        if narrow:
            return ConvTile(ib, ob, r, oh, ow, False, wide=True)
        for wide in (4, 3, 2, 1):
            if ob % lanes == 0 and vec_per_chunk == 1 and _weight_tile_ok(geo, ib, ob, wide):
                return ConvTile(ib, ob, wide, th, tw, flat)
        return ConvTile(ib, ob, 1, th, tw, flat)
    if narrow:
        return _wide_tile(geo, ib, ob, r, qmin, qmax)
    flat = _best_flat(geo, ib, ob, r, qmin, qmax)
    if geo.cpg >= DEEP_CHANNELS and waste(geo, flat) < 1.05:
        return _deep_wide_tile(geo, ib, ob, r, info) or flat
    # row-aligned 2-D tiles first, when they need no padding
    for th, tw in _ROW_TILES:
        q = th * tw
        if qmin <= q <= qmax and oh % th == 0 and ow % tw == 0:
            return ConvTile(ib, ob, r, th, tw, False)
    if qmin > 4 and ow % qmin == 0:
        return ConvTile(ib, ob, r, 1, qmin, False)
    return flat


def gspc_tile(geo: ConvGeometry, ib: int, ob: int, split: int, info: CpuInfo) -> ConvTile:
    """The register tile of a GSPC conv (:mod:`.gspc`): ``split`` segment vectors per
    pixel, so ``split * q`` accumulators beside ``split`` weight vectors and a
    broadcast. As many pixels as the registers hold (each broadcast feeds one FMA, so
    the accumulators are what hides the FMA latency): a row-aligned tile when one of 4+
    pixels divides the rows, else the flattened run that pads least."""
    budget = min(_acc_budget(info, split), MAX_GSPC_ACCUMULATORS)
    qmax = max(1, budget // split)
    if geo.oh * geo.ow <= qmax:
        return ConvTile(ib, ob, 1, geo.oh, geo.ow, False, split=split)
    cands = [ConvTile(ib, ob, 1, th, tw, False, split=split) for th, tw in _ROW_TILES
             if th * tw <= qmax and geo.oh % th == 0 and geo.ow % tw == 0]
    cands += [ConvTile(ib, ob, 1, 1, q, True, split=split) for q in range(1, qmax + 1)]
    # a row-aligned tile of 4+ pixels when one divides the rows (2 threads, znver1: 128@56
    # G(32) 0.65-0.89 ms against 0.85-1.1 flattened in 6s, equal on one thread; 32@32 G(8)
    # 70 against 94 us), else the most useful pixels per tile (q over the padding waste)
    rows = [t for t in cands if not t.flat and t.th * t.tw >= 4]
    return max(rows or cands, key=lambda t: (t.th * t.tw / waste(geo, t), not t.flat))


#: accumulators of a GSPC tile at most: 12 (6 pixels x 2 segments) ran as fast as 10 on
#: ResNeXt's 128@56 G(32) (znver1); a full-chunk segment would otherwise take 14 of 16
#: registers beside its weight and broadcast
MAX_GSPC_ACCUMULATORS = 12


#: row-aligned register tiles ``(th, tw)`` in order of preference
_ROW_TILES = ((1, 4), (2, 2), (1, 6), (2, 3), (3, 2), (1, 5), (1, 3), (3, 1))


def _wide_tile(geo: ConvGeometry, ib: int, ob: int, r: int, qmin: int, qmax: int) -> ConvTile:
    """The row-aligned tile of a wide (narrow-chunk) conv that pads least.

    Never flat: a flattened tile's result block reads the accumulators at ``p`` through
    ``c // r`` and ``c % r``, which TVM leaves unsimplified when ``r`` does not divide
    the chunks, so the accumulators lost their per-tile buffer (half speed, measured).
    """
    tiles = [ConvTile(ib, ob, r, th, tw, False, True) for th, tw in _ROW_TILES
             if qmin <= th * tw <= qmax]
    if not tiles:
        tiles = [ConvTile(ib, ob, r, 1, qmax, False, True)]
    return min(tiles, key=lambda t: waste(geo, t))


#: From this many input channels per group on, the flattened 2x5 tile (10
#: accumulators) beat the row-aligned 1x4 / 2x2 ones (8) on every ResNet-50 layer
#: measured on znver3 (0.87-0.93 of peak vs 0.79-0.87 at 128-1024 channels; one
#: core); with fewer channels the shorter reduction favours the 2-D tiles.
DEEP_CHANNELS = 128


#: Weight vectors x flattened pixels of a deep conv's register tile on AVX-512 x86 (32
#: registers): 24 accumulators, 4 weight vectors and a broadcast. Each broadcast feeds 4
#: FMAs instead of 2 (loads per FMA 0.7 -> 0.42). ResNet-50, 224 px, 2 threads, Intel
#: Emerald Rapids, same process, blocks of 4 (2026-11-29), every flat tile: 2 x 5 55.7 ms,
#: 4 x 6 49.7, 4 x 5 50.7, 4 x 7 55.5 (spills), 3 x 6 54.7; deep convs only (this rule):
#: 0.945 and 0.948 of the time in two runs; ResNet-18, MobileNetV2, VGG-16 0.99-1.01 (also
#: for the shallow convs' flat tiles: no gain there, not taken); ONNX Runtime 41.7 ms.
DEEP_WIDE_TILE = (4, 6)


def _deep_wide_tile(geo: ConvGeometry, ib: int, ob: int, r: int, info: CpuInfo):
    """:data:`DEEP_WIDE_TILE` for a deep conv on AVX-512 x86 whose chunks are one vector
    and whose output chunks split into 4s, when it pads as little as the 2-vector tile
    (< 5%); else ``None``. Not measured on other hosts: NEON and AVX2 keep the 2-vector
    tiles (16 registers do not hold it)."""
    wr, q = DEEP_WIDE_TILE
    if (info.arch != "x86" or vector_registers(info) < 32 or r != 2 or ob != info.f32_lanes
            or wr * q + wr + 1 > vector_registers(info) or not _weight_tile_ok(geo, ib, ob, wr)):
        return None
    tile = ConvTile(ib, ob, wr, 1, q, True)
    return tile if waste(geo, tile) < 1.05 else None


def _best_flat(geo: ConvGeometry, ib: int, ob: int, r: int, qmin: int, qmax: int) -> ConvTile:
    """The flattened tile with the best measured speed per useful pixel."""
    best = None
    for q in range(qmin, qmax + 1):
        tile = ConvTile(ib, ob, r, 1, q, True)
        score = _FLAT_EFFICIENCY.get(q, 0.8) / waste(geo, tile)
        if best is None or score > best[0]:
            best = (score, tile)
    return best[1]


#: bytes of packed B a core may keep in L2 / L1 across row tiles (half the smallest
#: common cache: 512 KB L2 on Zen 2/3 and Skylake-X, 32 KB L1D nearly everywhere)
L2_BUDGET = 256 * 1024
L1_BUDGET = 16 * 1024


@dataclass(frozen=True)
class MatmulBlocking:
    """Loop order and reduction block of a packed matmul (see the module docstring)."""

    columns_outer: bool
    kb: int  # reduction block (``k`` itself: not blocked)


def matmul_blocking(rows: int, n: int, k: int, tile: MatmulTile) -> MatmulBlocking:
    """Cache blocking of a packed ``(rows x k) @ (k x n)`` with register tile ``tile``."""
    row_tiles = -(-rows // tile.tm)
    b_bytes = 4 * k * -(-n // tile.nb) * tile.nb
    columns_outer = row_tiles > 1 and b_bytes > L2_BUDGET
    kb = k
    if columns_outer and 4 * k * tile.nb > L2_BUDGET // 2:
        kb = max(64, L1_BUDGET // (4 * tile.nb))
        while k % kb:  # a divisor of k: no partial reduction block (stops at 1)
            kb //= 2
        if kb < 32:
            kb = k
    return MatmulBlocking(columns_outer, kb)


def depthwise_tile(oh: int, ow: int, info: CpuInfo) -> tuple[int, int]:
    """``(th, tw)`` output pixels per register tile of a depthwise conv (one vector each)."""
    budget = vector_registers(info) - 4
    for tw in (8, 7, 6, 4, 5, 3, 2):
        if tw <= budget and ow % tw == 0:
            return 1, tw
    return 1, min(budget, max(1, ow))


def depthwise_wide_tile(geo: ConvGeometry, cb: int, info: CpuInfo) -> tuple[int, int] | None:
    """``(th, tw)`` of a depthwise conv whose chunk ``cb`` is narrower than a vector: the
    vector spans ``tw`` neighbouring output pixels of the chunk (``tw * cb`` lanes, the
    input contiguous along them at stride 1), ``th`` rows of them for enough
    accumulators. ``None`` when the conv is strided or dilated along the row, or no
    ``tw`` divides the row (the pixels of a vector must be one row's), or the chunk is
    half a vector or more: 58 channels at 28x28 in chunks of 2 ran 65.6 -> 39.1 us
    wide, 116 at 14x14 in chunks of 4 15.8 -> 17.4 (znver1, whose 4-lane FMAs run at
    the full rate)."""
    lanes = info.f32_lanes
    if 4 * cb > lanes or lanes % cb or geo.stride[1] != 1 or geo.dilation[1] != 1:
        return None
    tw = lanes // cb
    if geo.ow % tw:
        return None
    th = next(t for t in (8, 7, 6, 5, 4, 3, 2, 1) if geo.oh % t == 0)
    return th, tw


def matmul_tile(m: int, n: int, info: CpuInfo, k: int | None = None) -> MatmulTile:
    """Register tile of a packed matmul ``(m x k) @ (k x n)``.

    Two vectors of B columns and as many rows of A as the accumulator budget allows
    (6 on AVX2: a 6 x 16 tile), or down to half as many where that pads ``m`` less
    (:data:`TILE_ROW_OVERHEAD`), at most :data:`L1_WAYS` rows when ``k`` (if given)
    makes the rows of A alias in L1; a short ``m`` (GEMV-like) takes all rows and more
    columns instead.
    """
    lanes = info.f32_lanes
    nvec = -(-n // lanes)
    if m < 4:
        r = max(1, min(nvec, 4))
        return MatmulTile(max(1, m), r * lanes)
    r = min(2, nvec)
    tm_max = max(1, _acc_budget(info, r) // r)
    if k is not None and (4 * k) % ALIASING_STRIDE == 0:
        tm_max = min(tm_max, L1_WAYS)
    if m <= tm_max:
        return MatmulTile(m, r * lanes)
    best = None
    for tm in range(max(1, tm_max // 2), tm_max + 1):
        padded = -(-m // tm) * tm
        score = (padded * (1 + TILE_ROW_OVERHEAD / tm), -tm)
        if best is None or score < best[0]:
            best = (score, tm)
    return MatmulTile(best[1], r * lanes)


#: Rows of A whose starts lie a multiple of this many bytes apart fall in one set of
#: the L1 data cache, which holds :data:`L1_WAYS` lines per set: a register tile of
#: more rows than that, over a ``K`` a multiple of 1024 floats, evicts its own rows of
#: A at every step of ``k`` (40 x 2048 @ 2048 x 8192 ran at 0.63 of the FMA peak in
#: 14-row tiles; 8-row tiles: see the bench's wide GEMMs)
ALIASING_STRIDE = 4096
L1_WAYS = 8

#: Cost of a register tile's row tile, in rows, beside its rows of FMAs (the B panel
#: re-read per row tile, the tile's set-up): the row count of :func:`matmul_tile`
#: minimizes padded rows x (1 + this / tm). 16 rows ran as 2 x 12 on AVX-512 (a third
#: of the FMAs on padding rows) before; now 2 x 8.
TILE_ROW_OVERHEAD = 2


def winograd_gemm_tile(o: int, ob: int, info: CpuInfo) -> tuple[int, int]:
    """``(r, tp)`` of the Winograd GEMM: ``r`` output chunks x ``tp`` tiles of accumulators.

    The matmul budget (:func:`matmul_tile`): two weight vectors when the output chunks
    pair up (a 6 x 16 tile on AVX2), else one and twice the tiles; and at most
    :data:`STACK_ACCUMULATOR_BYTES` of accumulators (7 x 32 on AVX-512, where the
    accumulator budget alone would allow 14 x 32).
    """
    vecs = max(1, -(-ob // info.f32_lanes))
    r = 2 if (o // ob) % 2 == 0 and vecs == 1 else 1
    by_registers = _acc_budget(info, r * vecs) // (r * vecs)
    by_stack = STACK_ACCUMULATOR_BYTES // (4 * r * vecs * info.f32_lanes)
    by_spills = MAX_WINOGRAD_ACCUMULATORS // (r * vecs)
    return r, max(1, min(by_registers, by_stack, by_spills))


#: Accumulator bytes of one Winograd GEMM register tile. Checked in the assembly on
#: AVX-512: a 14 x 32 tile (28 zmm accumulators, 1792 bytes) did a load and a store
#: around every FMA (with the channel loop unrolled, through a heap buffer; rolled,
#: spilled to the stack: 28 accumulators, 2 weight vectors and the broadcasts do not fit
#: 32 registers); 7 x 32 (14 accumulators) stays in registers, 3-4x faster.
STACK_ACCUMULATOR_BYTES = 1024 - 64
#: and at most this many accumulator registers on 32-register machines (NEON included:
#: not measured there, the same register file as AVX-512)
MAX_WINOGRAD_ACCUMULATORS = 16


def pixel_tile(opg: int, rows: int, vectors: int, registers: int) -> tuple[int, int, int]:
    """The register tile ``(To, Yk, Xk)`` of the pixel-vector conv: ``To`` output
    channels of one group (a divisor of its ``opg``) x ``Yk`` output rows (a divisor of
    ``rows``) x ``Xk`` pixel vectors of a row (a divisor of the row's ``vectors``).

    One step of the reduction holds ``To`` broadcast weights and loads each of the
    ``Yk * Xk`` input vectors once, for ``To * Yk * Xk`` FMAs: the tile maximizing FMAs
    per load whose accumulators, broadcasts and one input vector fit ``registers`` wins
    (ties: fewer accumulators, then wider along the row, whose vectors are contiguous).
    With two channels per group a 2 x 1 x 1 tile ran 2 FMAs per 3 loads."""
    best, best_key = (1, 1, 1), None
    for to in divisors(opg, registers):
        room = (registers - 1 - to) // to  # input vectors per tile
        for xk in divisors(vectors, room):
            for yk in divisors(rows, room // xk):
                x = yk * xk
                key = (to * x / (to + x), -to * x, xk)
                if best_key is None or key > best_key:
                    best, best_key = (to, yk, xk), key
    return best

"""Winograd minimal-filtering convolution F(m x m, 3 x 3) in the blocked NCHW[x]c layout.

Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016), section
4: an ``m x m`` output tile of a 3x3, stride-1 conv is ``Y = A^T [U . V] A`` with the
transformed filter ``U = G g G^T`` and the transformed input tile
``V = B^T d B`` (``alpha x alpha`` with ``alpha = m + 2``). Summed over input
channels, the element-wise products become ``alpha^2`` independent GEMMs
(section 4.1)::

    M[xi, nu][k, p] = sum_c U[xi, nu][k, c] V[xi, nu][c, p]

which do ``alpha^2 / (m^2 9)`` of the direct conv's multiplies: 0.44 for F(2,3)
(alpha 4), 0.25 for F(4,3) (alpha 6), plus the transforms.

The matrices come from Toom-Cook interpolation (:func:`winograd_matrices`): ``A^T``
evaluates at the points ``0, +-1, +-2, ...`` and infinity, ``G`` scales by the
Lagrange denominators, and ``B^T`` is solved in float64 from the bilinear identity
itself, then checked exact, so the code carries no hand-typed table.

Stages (each a TE block; :mod:`tvm_cocopie.schedules.cpu.winograd` schedules them):

* ``data_pad``: the input zero-padded to ``TH*m + 2`` rows and ``TW*m + 2`` columns
  (``TH x TW`` tiles cover the output; partial tiles read zeros);
* ``winograd_V``: ``V[xi, nu, p, cb, ci]``, one input tile per ``p`` (``P'`` tiles,
  padded to whole cache blocks by repeating the last tile), the channel chunk ``ci``
  innermost (vectorized): only the non-zero terms of ``B^T`` appear;
* ``winograd_M`` (annotated ``cocopie.winograd`` with the GEMM tile ``r x tp`` and
  the cache block ``pb``): the batched GEMM,
  ``M[xi, nu, kb, p, ki] = sum_c V[xi, nu, p, c] U[xi, nu, k // wb, c, k % wb]``,
  ``U`` packed at compile time as ``(alpha, alpha, K / wb, C, wb)``;
* ``winograd_Yt``: the output transform, tile-major ``(P', K/ob, m, m, ob)``;
* ``winograd_Y``: the tiles gathered into the exact ``(N, K/ob, OH, OW, ob)`` result,
  the block the epilogue (bias, activation, residual add) is fused into.

Only constant weights (transformed once, in numpy, in float64) take this path.

Where it wins (:func:`preferred_m`; measured on 2 znver4 cores, AVX-512, batch 1, conv
+ bias + ReLU in NCHW16c, ``interleaved_times(block=4)``, 10 rounds, medians, load
1.6-1.8; earlier runs at load 5-7 agreed within their noise), speed over the direct
conv of F(4,3) / F(2,3):

* ResNet 64@56 2.4 / 1.7, 128@28 2.7 / 2.0, 256@14 1.7 / 2.0, 512@7 0.94 / 1.00
  (a tie: kept direct; loaded runs 1.1-1.7 / 0.6-1.5);
* VGG-16 64@224 2.7 / 1.8, 128@112 3.2 / 2.0, 256@56 3.4 / 2.1, 512@28 2.3 / 2.0,
  512@14 1.3 / 1.1;
* YOLO-style 32@80 1.8 / 1.3, 32@52 1.5 / 1.3, 64@40 2.2 / 1.5, 64@26 1.4 / 1.2,
  128@13 0.82 / 1.24;
* few channels, kept direct: 16@104 1.14 / 1.06 (0.94-1.30 over five runs; 16@208
  0.94 / 0.61), 8@104 0.98 / 0.86 (8@208 0.89 / 0.76).

F(4,3)'s float32 error against float64 grows with the channel count: 5e-6 of the
output's range at 64 channels, 1.6e-5 at 512 (F(2,3) and the direct conv: 3e-7 to
3e-6).

Switch: ``PipelineOptions(winograd=...)`` (:data:`SETTINGS`: ``auto``, ``off``, ``2``, ``4``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numpy as np
from tvm import te, tirx

from ...errors import CompilationError
from .conv2d_nchwc import ConvGeometry, groups_on_chunks, pad_nchwc

#: block annotation of the batched GEMM: the tile sizes the schedule uses
ANNOTATION = "cocopie.winograd"


@cache
def winograd_matrices(m: int, r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^T, G, B^T)`` of F(m, r) in float64: ``(m, alpha)``, ``(alpha, r)``, ``(alpha, alpha)``.

    Points ``0, 1, -1, 2, -2, ...`` (the smallest magnitudes: the best conditioned
    integer choice) and infinity. Raises :class:`CompilationError` if the solved
    ``B^T`` does not reproduce the 1-D correlation exactly.
    """
    alpha = m + r - 1
    points = [Fraction(0)]
    k = 1
    while len(points) < alpha - 1:
        points += [Fraction(k), Fraction(-k)]
        k += 1
    points = points[: alpha - 1]
    at = np.zeros((m, alpha))
    g = np.zeros((alpha, r))
    for j, p in enumerate(points):
        denom = math.prod((p - q for q in points if q != p), start=Fraction(1))
        for i in range(m):
            at[i, j] = float(p**i)
        for c in range(r):
            g[j, c] = float(p**c / denom)
    at[m - 1, alpha - 1] = 1.0  # the point at infinity: the leading coefficients
    g[alpha - 1, r - 1] = 1.0
    # y_i = sum_c g_c d_{i+c}  <=>  sum_j AT[i,j] G[j,c] BT[j,l] = [l == i + c]
    rows, rhs = [], []
    for i in range(m):
        for c in range(r):
            for col in range(alpha):
                eq = np.zeros((alpha, alpha))
                eq[:, col] = at[i] * g[:, c]
                rows.append(eq.ravel())
                rhs.append(1.0 if col == i + c else 0.0)
    sol, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    bt = np.round(sol.reshape(alpha, alpha) * 24) / 24  # rationals of small denominators
    check = np.einsum("ij,jc,jl->icl", at, g, bt)
    want = np.zeros((m, r, alpha))
    for i in range(m):
        for c in range(r):
            want[i, c, i + c] = 1.0
    if not np.allclose(check, want, atol=1e-12):
        raise CompilationError(f"no exact Winograd F({m},{r}) transform from these points")
    # a row of B^T and of G may change sign together: make each B^T row start positive
    sign = np.array([np.sign(row[np.flatnonzero(row)[0]]) for row in bt])
    return at + 0.0, g * sign[:, None] + 0.0, bt * sign[:, None] + 0.0


@dataclass(frozen=True)
class WinogradTile:
    """Blocking of a Winograd conv: output tile ``m``, layout blocks, GEMM register tile."""

    m: int  # output tile (2: F(2,3), 4: F(4,3))
    ib: int  # input channel chunk (layout)
    ob: int  # output channel chunk (layout)
    r: int  # output chunks per GEMM register tile: wb = r * ob lanes
    tp: int  # tiles per GEMM register tile (broadcast rows)
    pb: int = 0  # tiles per cache block (a multiple of tp; 0: tp)

    @property
    def block(self) -> int:
        """Tiles per cache block: the unit the three stages run on, fused."""
        return self.pb or self.tp

    @property
    def alpha(self) -> int:
        """Transformed tile size ``m + 2``."""
        return self.m + 2

    @property
    def wb(self) -> int:
        """Output channels per GEMM register tile."""
        return self.r * self.ob


def supports(geo: ConvGeometry) -> bool:
    """Whether Winograd F(m, 3) computes this conv: 3x3, stride 1, dilation 1, not
    depthwise (a grouped conv is one GEMM per group: see :func:`aligned`)."""
    return (geo.kh == geo.kw == 3 and geo.stride == (1, 1) and geo.dilation == (1, 1)
            and not (geo.groups > 1 and geo.cpg == 1))


def aligned(geo: ConvGeometry, ib: int, wb: int) -> bool:
    """Whether the groups fall on whole input chunks and whole GEMM weight tiles (each
    tile's outputs in one group, each group's inputs whole chunks): G(2) of a ResNet
    layer, not ResNeXt's 4 channels per group."""
    return groups_on_chunks(geo, ib, wb)


def tiles(geo: ConvGeometry, m: int) -> tuple[int, int]:
    """Output tiles ``(TH, TW)`` of size ``m`` covering ``OH x OW``."""
    return -(-geo.oh // m), -(-geo.ow // m)


def image_tiles(geo: ConvGeometry, tile: WinogradTile) -> int:
    """Tiles per image on the tile axis when the batch is symbolic: one image's tiles
    rounded up to the cache block (each image starts a block, so the axis is ``N`` times
    a constant); 0 for a static batch, whose images share one rounded-up axis."""
    if isinstance(geo.n, int):
        return 0
    th, tw = tiles(geo, tile.m)
    return -(-(th * tw) // tile.block) * tile.block


def padded_tiles(geo: ConvGeometry, tile: WinogradTile):
    """``P'``: all tiles of the batch, rounded up to the cache block (per image for a
    symbolic batch: :func:`image_tiles`)."""
    th, tw = tiles(geo, tile.m)
    per_image = image_tiles(geo, tile)
    if per_image:
        return geo.n * per_image
    return -(-(geo.n * th * tw) // tile.block) * tile.block


def transform_weight_numpy(weight: np.ndarray, tile: WinogradTile) -> np.ndarray:
    """OIHW 3x3 weight -> ``U`` packed ``(alpha, alpha, K / wb, C, wb)`` (float64 math; a
    grouped conv's weight has its ``C / groups`` channels per group, and so has ``U``)."""
    o, c, kh, kw = weight.shape
    if (kh, kw) != (3, 3) or o % tile.wb:
        raise CompilationError(f"Winograd needs a 3x3 weight with outputs a multiple of "
                               f"{tile.wb}, got {weight.shape}")
    _, g, _ = winograd_matrices(tile.m)
    u = np.einsum("xa,ocab,yb->xyoc", g, weight.astype(np.float64), g)  # (a, a, O, C)
    a = tile.alpha
    u = u.reshape(a, a, o // tile.wb, tile.wb, c).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(u.astype(weight.dtype))


def _linear(coeffs, terms):
    """``sum_j coeffs[j] * terms(j)`` over the non-zero coefficients (no multiply by 1)."""
    out = None
    for j, cf in enumerate(coeffs):
        if cf == 0:
            continue
        t = terms(j)
        if cf == -1:
            out = -t if out is None else out - t
            continue
        if cf != 1:
            t = t * tirx.const(float(cf), "float32")
        out = t if out is None else out + t
    return out if out is not None else tirx.const(0.0, "float32")


def _select(index, values):
    """``values[index]`` for a loop variable ``index`` (a chain the unrolled loop folds)."""
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == i, values[i], out)
    return out


def _input_transform(dpad: te.Tensor, geo: ConvGeometry, tile: WinogradTile,
                     ptiles: int) -> te.Tensor:
    """``V[xi, nu, p, cb, ci] = (B^T d_p B)[xi, nu]`` per tile ``p``, channel ``(cb, ci)``."""
    _, _, bt = winograd_matrices(tile.m)
    a, m = tile.alpha, tile.m
    th, tw = tiles(geo, m)
    last = geo.n * th * tw - 1
    cb_count, ib = int(dpad.shape[1]), tile.ib
    per_image = image_tiles(geo, tile)

    def fwindow(p, cb, i, j, ci):
        if per_image:  # a symbolic batch: each image's tiles padded on their own
            n, rest = p // per_image, p % per_image
            if per_image > th * tw:
                rest = tirx.min(rest, th * tw - 1)
        else:
            pc = tirx.min(p, last) if ptiles > last + 1 else p
            n, rest = pc // (th * tw), pc % (th * tw)
        return dpad[n, cb, rest // tw * m + i, rest % tw * m + j, ci]

    # the tile's alpha x alpha window addressed plainly, then the transform in two
    # separable halves, d B and B^T (d B): 2 x 36 short select chains once unrolled
    # instead of 36 chains of 36 (F(4,3)) with the tile arithmetic in every address,
    # which took TIR's CSE and simplifier 2 s per conv
    window = te.compute((ptiles, cb_count, a, a, ib), fwindow, name="winograd_window")
    half = te.compute(
        (ptiles, cb_count, a, a, ib),
        lambda p, cb, i, nu, ci: _select(nu, [
            _linear(bt[v], lambda j: window[p, cb, i, j, ci]) for v in range(a)]),
        name="winograd_dB")

    def fcompute(xi, nu, p, cb, ci):
        return _select(xi, [_linear(bt[x], lambda i: half[p, cb, i, nu, ci]) for x in range(a)])

    return te.compute((a, a, ptiles, cb_count, ib), fcompute, name="winograd_V")


def _output_transform(mmat: te.Tensor, geo: ConvGeometry, tile: WinogradTile,
                      out_dtype: str) -> te.Tensor:
    """``Yt[p, kb, yi, xi, ki] = (A^T M_p A)[yi, xi]``: the output tiles, tile-major."""
    at, _, _ = winograd_matrices(tile.m)
    m = tile.m
    ptiles = mmat.shape[3]

    def fcompute(p, kb, yi, xi, ki):
        def inner(yy, xx):
            return _linear(at[yy], lambda a: _linear(at[xx], lambda b: mmat[a, b, kb, p, ki]))

        per_y = [_select(xi, [inner(yy, xx) for xx in range(m)]) for yy in range(m)]
        return _select(yi, per_y).astype(out_dtype)

    return te.compute((ptiles, geo.o // tile.ob, m, m, tile.ob), fcompute, name="winograd_Yt")


def _untile(ytiles: te.Tensor, geo: ConvGeometry, tile: WinogradTile) -> te.Tensor:
    """``Y[n, kb, y, x, ki]`` gathered from the tiles: the block the epilogue joins."""
    m = tile.m
    th, tw = tiles(geo, m)
    per_image = image_tiles(geo, tile)

    def first(n):  # the image's first tile
        return n * per_image if per_image else n * th * tw

    return te.compute(
        (geo.n, geo.o // tile.ob, geo.oh, geo.ow, tile.ob),
        lambda n, kb, y, x, ki: ytiles[first(n) + y // m * tw + x // m, kb, y % m, x % m, ki],
        name="winograd_Y")


def conv2d_winograd_nchwc(data: te.Tensor, packed: te.Tensor, geo: ConvGeometry,
                          tile: WinogradTile, out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/ib, H, W, ib) x U -> (N, K/ob, OH, OW, ob)`` by Winograd F(m, 3).

    ``packed`` is :func:`transform_weight_numpy`'s output (a constant).
    """
    if not supports(geo):
        raise CompilationError("Winograd F(m,3) needs a 3x3, stride-1, undilated conv that is "
                               "not depthwise")
    if geo.o % tile.wb or tile.wb % tile.ob or geo.c % tile.ib or not aligned(geo, tile.ib,
                                                                              tile.wb):
        raise CompilationError(f"channels {geo.c}->{geo.o} in {geo.groups} groups do not fit "
                               f"blocks {tile}")
    a, m = tile.alpha, tile.m
    th, tw = tiles(geo, m)
    dpad = pad_nchwc(data, geo, th * m + 2, tw * m + 2)
    ptiles = padded_tiles(geo, tile)
    v = _input_transform(dpad, geo, tile, ptiles)
    rc = te.reduce_axis((0, geo.cpg), "rc")  # the group's input channels
    ib, ob, wb = tile.ib, tile.ob, tile.wb
    group_chunks = geo.cpg // ib
    attrs = {"m": m, "r": tile.r, "tp": tile.tp, "pb": tile.block,
             "ppi": image_tiles(geo, tile)}

    def first_chunk(kb):  # first input chunk of output chunk kb's group
        return (kb * ob // geo.opg) * group_chunks if geo.groups > 1 else 0

    mmat = te.compute(
        (a, a, geo.o // ob, ptiles, ob),
        lambda xi, nu, kb, p, ki: te.sum(
            v[xi, nu, p, first_chunk(kb) + rc // ib, rc % ib].astype(out_dtype)
            * packed[xi, nu, kb * ob // wb, rc, (kb * ob) % wb + ki].astype(out_dtype),
            axis=[rc]),
        name="winograd_M", attrs={ANNOTATION: attrs})
    return _untile(_output_transform(mmat, geo, tile, out_dtype), geo, tile)


def winograd_flops(geo: ConvGeometry, m: int) -> int:
    """Multiply-adds x 2 of the GEMM stage (the transforms not counted)."""
    th, tw = tiles(geo, m)
    return 2 * (m + 2) ** 2 * geo.n * th * tw * geo.cpg * geo.o


__all__ = [
    "ANNOTATION",
    "WinogradTile",
    "aligned",
    "conv2d_winograd_nchwc",
    "image_tiles",
    "padded_tiles",
    "supports",
    "tiles",
    "transform_weight_numpy",
    "winograd_flops",
    "winograd_matrices",
]


# ------------------------------------------------------------------ the choice

#: the settings of ``PipelineOptions.winograd``: ``auto`` (the measured heuristic, the
#: default), ``off``, or ``2`` / ``4`` to force F(2,3) / F(4,3) on every eligible conv
#: (measurements, tests)
SETTINGS = ("auto", "off", "2", "4")


#: Below this many input or output channels the transforms cost as much as the GEMM
#: saves (16 channels: F(4,3) 0.94-1.30x the direct conv, 8 channels 0.81-0.98x).
MIN_CHANNELS = 32
#: The same bound for a grouped conv (a GEMM per group), on the channels per group: its
#: direct kernel runs a shorter reduction per output than a dense conv's, and Winograd
#: won from 16 per group on (2 threads, znver1, conv + bias + ReLU, one build each:
#: F(4,3) over direct 32@32 G(2) 1.5x, 64@56 G(4) 1.54x, 192@28 G(8) (24 per group)
#: 1.57x; F(2,3) 64@16 G(4) 1.17x, 384@14 G(16) 1.05x; at 8 per group 32@32 G(4) 1.07x,
#: left direct)
MIN_GROUP_CHANNELS = 16
#: From this output size on F(4,3) (36 products per 16 outputs) beats F(2,3) (16 per
#: 4); below it F(2,3) won: less tile padding (14 = 7 x 2 but 16 = 4 x 4) and a
#: transformed weight 1.8x (not 4x) the direct conv's, read from memory once per call.
#: Measured F(4,3) ahead at 26 and above, F(2,3) at 13-14 on 256@14 and 128@13 (not
#: on 512@14: 1.27x vs 1.12x, both wins); 20 splits the gap.
F43_MIN_SIZE = 20
#: Below this output size the direct conv is kept: 512@7 was a tie (F(2,3) 1.00x,
#: F(4,3) 0.94x on a quiet machine); smaller maps are a few tiles, not measured.
MIN_SIZE = 8
#: Grouped convs take F(2,3) down to 7x7 maps with 64+ channels per group: their direct
#: kernel ran 0.73-0.81 of ONNX Runtime's speed there (ResNet-34 G(2)-G(16) 512@7,
#: MobileNetV2 G(2)-G(8) 960@7, one thread). Measured (znver1, conv + bias + ReLU, two
#: builds each, ms, direct / F(2,3)): 512@7 G(2) 2.7-3.4 / 2.6 on one thread, 1.9-2.0 /
#: 1.2-1.4 on two; G(8) 0.70 / 0.70, 0.48-0.51 / 0.36-0.38; 960@7 G(4) 4.9-5.1 /
#: 4.7-6.0, 3.2-3.3 / 2.2-2.5; at 32 per group (1024@7 G(32)) 0.68-0.74 / 0.82-0.85 on
#: one thread: left direct
MIN_GROUP_SIZE = 7
MIN_GROUP_SMALL_MAP_CHANNELS = 64
#: With 16-lane vectors (AVX-512) the grouped direct kernel gains more than the GEMM
#: and these bounds rise: 32 per group below :data:`F43_MIN_SIZE`, 256 on 7x7 maps.
#: Measured (znver4, 2 cores, conv + bias + ReLU in the blocked layout, 10 blocked
#: rounds, direct over F(m,3) time on 1 / 2 threads): 16 per group 32@32 G(2) 1.30 /
#: 1.20, 128@28 G(8) 1.41 / 1.48, but 64@16 G(4) 0.97 / 1.00, 256@14 G(16) 0.86 / 1.15,
#: 512@14 G(32) 0.83 / 1.14, 128@8 G(8) 0.62 / 0.50; 32 per group 128@8 G(4) 1.14 /
#: 1.05, 256@14 G(8) 1.42 / 1.39; on 7x7 512 G(2) 1.27 / 1.08, 960 G(2) 1.21 / 1.00,
#: but 512 G(4) 0.96 / 1.15, 512 G(8) 0.87 / 0.84, 960 G(4) 0.63 / 0.58
WIDE_VECTOR_LANES = 16
WIDE_GROUP_SMALL_CHANNELS = 32
WIDE_GROUP_SMALL_MAP_CHANNELS = 256

#: ``(channels, output size)`` of the C -> C layers measured faster with the tile
#: :func:`preferred_m` picks (module docstring), and of those measured no faster
MEASURED_WINS = [(64, 56), (128, 28), (256, 14), (64, 224), (128, 112),
                 (256, 56), (512, 28), (512, 14), (32, 80), (32, 52), (32, 26), (64, 40),
                 (64, 26), (128, 13)]
MEASURED_LOSSES = [(512, 7), (16, 52), (16, 104), (16, 208), (8, 104), (8, 208)]


def preferred_m(geo: ConvGeometry, lanes: int = 8) -> int | None:
    """The measured heuristic: the output tile that beats the direct conv, or ``None``.

    Winograd with at least :data:`MIN_CHANNELS` input and output channels
    (:data:`MIN_GROUP_CHANNELS` per group for a grouped conv) and an output of at least
    :data:`MIN_SIZE` pixels a side; F(4,3) from
    :data:`F43_MIN_SIZE` on, F(2,3) below. ``lanes``: fp32 lanes of a vector (the
    grouped bounds are higher from :data:`WIDE_VECTOR_LANES` on).
    """
    size = min(geo.oh, geo.ow)
    wide = lanes >= WIDE_VECTOR_LANES
    least = MIN_CHANNELS if geo.groups == 1 else MIN_GROUP_CHANNELS
    if geo.groups > 1 and size < MIN_SIZE:
        least, smallest = MIN_GROUP_SMALL_MAP_CHANNELS, MIN_GROUP_SIZE
        if wide:
            least = WIDE_GROUP_SMALL_MAP_CHANNELS
    else:
        smallest = MIN_SIZE
        if geo.groups > 1 and wide and size < F43_MIN_SIZE:
            least = WIDE_GROUP_SMALL_CHANNELS
    if min(geo.cpg, geo.opg) < least or size < smallest:
        return None
    return 4 if size >= F43_MIN_SIZE else 2


def choose(geo: ConvGeometry, direct, info, constant_weight: bool,
           setting: str = "auto") -> WinogradTile | None:
    """The Winograd tile for a conv the direct kernel would run with tile ``direct``, or
    ``None`` to keep the direct conv (unsupported shape, non-constant weight, the switch
    off, or the heuristic says the direct conv is faster). ``setting``: one of
    :data:`SETTINGS` (``PipelineOptions.winograd``)."""
    from .tiling import winograd_gemm_tile

    if not constant_weight or not supports(geo) or info.arch == "hexagon":
        return None
    if geo.symbolic_spatial:  # tile counts per image would be symbolic: the direct conv
        return None
    setting = str(setting).lower()
    if setting == "off":
        return None
    if setting not in ("auto", "2", "4"):
        raise CompilationError(f"Winograd setting {setting!r}: PipelineOptions(winograd=...) "
                               "takes auto, off, 2 (F(2,3)) or 4 (F(4,3))")
    if setting == "auto" and (direct.ob < NARROW_CHUNK or direct.ib < NARROW_CHUNK):
        return None
    m = preferred_m(geo, info.f32_lanes) if setting == "auto" else int(setting)
    if m is None:
        return None
    r, tp = winograd_gemm_tile(geo.o, direct.ob, info)
    if geo.groups > 1 and geo.opg % (r * direct.ob):  # one group per weight tile
        r, tp = winograd_gemm_tile(geo.opg, direct.ob, info)
    if not aligned(geo, direct.ib, r * direct.ob):
        return None
    return WinogradTile(m, direct.ib, direct.ob, r, tp,
                        cache_block(geo, m, tp, max(1, info.num_cores)))


#: Channel chunks narrower than this keep the direct conv: the transformed tiles' GEMM
#: runs one chunk per vector (37 -> 53 channels at 56x56, chunks of 1: Winograd 6.0 ms,
#: F(4,3) forced 4.6, direct 0.76; 24 -> 40 in chunks of 8: F(4,3) 0.31, direct 0.52).
NARROW_CHUNK = 4


#: bytes of transformed input + GEMM result + output tiles one cache block may hold
#: (half of a 512 KiB L2, the smallest per-core L2 among the x86 CPUs we target)
BLOCK_BYTES = 256 * 1024


def cache_block(geo: ConvGeometry, m: int, tp: int, cores: int) -> int:
    """Tiles per cache block: a multiple of ``tp`` whose intermediates fit
    :data:`BLOCK_BYTES`, leaving at least 4 blocks per core."""
    a = m + 2
    per_tile = 4 * (a * a * (geo.c + geo.o) + m * m * geo.o)
    th, tw = tiles(geo, m)
    by_cache = BLOCK_BYTES // (per_tile * tp)
    by_cores = geo.images * th * tw // (tp * 4 * cores)
    return tp * max(1, min(by_cache, by_cores))

"""Grouped convs of small groups inside one chunk on lane-rotated input vectors.

Where each group has ``k`` inputs and ``k`` outputs (2, 4 or 8: the G(4)-G(16)
variants of WRN-40-2 and ResNet-34, ResNeXt's 4 channels per group) and the groups
tile the chunk, output lane ``l`` of a chunk (group ``l // k``, place ``r = l % k`` in it) is

    out[l] = sum_j w[l, j] * in[l - r + j] = sum_t W_t[l] * rot_t(in)[l],

over the ``k`` rotations ``t``: ``rot_t(in)[l] = in[l - r + (r + t) % k]`` turns every
group of the chunk by ``t`` lanes, ``W_t[l] = w[l, (r + t) % k]``. So the conv is a
depthwise conv with ``k`` times the taps, each FMA a whole chunk vector (one output
pixel's channels) times one rotation of the input chunk: every multiply-add useful, no
lane of one group meeting another's input. The conv reads the padded input at lane
``rot_t(l)``: a lane permutation of the pixel's own aligned chunk, which the TIR pass
:func:`tvm_cocopie.lane_shuffles.permuted_loads` turns into one load and a shuffle
(``vshufps`` / ``vpermilps``; TVM's LLVM code generation gathered it lane by lane),
shared by every tap that reads the pixel.

The kernel before read ``2k - 1`` lane-shifted vectors off the padded row instead
(``in[l + s]``, zero weights where a shift leaves the group): ``(2k - 1) / k`` times
the FMAs, all but one of them loads across a cache line. Measured on AVX-512 (znver4,
2 cores, interleaved with ONNX Runtime), rotated over shifted at 1 / 2 threads: 32@32
G(8) 2.4 / 2.0x, G(16) 1.5 / 1.5x, ResNeXt's 128@56 G(32) 2.3 / 2.1x, 64@56 G(16)
2.1 / 2.5x, 64@16 s2 G(16) 1.7 / 1.5x, 256@28 G(64) 2.6 / 2.4x (the product of two
runs: rotated copies of the rows over shifted, then in-loop rotations over the copies);
8 per group, over GSPC's 8-lane segments: 32@32 G(4) 1.22 / 1.62x, 128@28 G(16)
1.38 / 1.84x. GSPC's segments spend ``lanes / k`` times the FMAs' width; its pixel
vectors move the blocked input to NCHW and the result back inside the kernel, which
cost more than the FMAs on small maps (WRN's 32@32 G(16): 2 channels per group).
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ...errors import CompilationError
from .conv2d_nchwc import ConvGeometry, ConvTile, input_extent, tiled_output

#: block annotation kind of the rotated-vector kernel (scheduled by the conv rule like a
#: depthwise conv with the rotations as a third reduction)
KIND = "shift"
#: channels per group this kernel takes at most: 8 (a group of half a 16-lane chunk;
#: faster than GSPC's 8-lane segments there, module docstring)
MAX_GROUP = 8
#: vector lanes it was measured on and is chosen for: 16 (AVX-512)
LANES = 16


def applies(geo: ConvGeometry, ib: int, ob: int, lanes: int) -> bool:
    """Whether the conv runs on rotated vectors: as many inputs as outputs per group
    (``k``, 2 to :data:`MAX_GROUP`), two or more whole groups tiling a chunk of
    ``lanes`` channels on both sides (``k`` divides it: a group of 6 would cross the
    chunk, and its rotation read another pixel's lanes), on :data:`LANES`-lane vectors.

    Measured on AVX-512 (Emerald Rapids), interleaved with ONNX Runtime, shifted over
    the GSPC kernel before (pixel vectors for these) at 1 / 2 threads: 2 per group
    32@32 G(16) 32 / 32 us against 68 / 68, 4 per group 64@56 G(16) 472 / 213 against
    519 / 240, 64@16 s2 G(16) 19 / 17 against 30 / 28, ResNeXt's 128@56 G(32) 1231 /
    597 against 1219 / 689, 256@28 G(64) 526 / 255 against 704 / 309, 32@32 G(8) 80 / 48
    against 66 / 73 (the one loss); 8 per group 128@28 G(16) 595 / 295 against
    396 / 255 (segments). Those were the shifted vectors; the rotations (module
    docstring) are faster still and take 8 per group too (over the segments 1.38 /
    1.84x there). 8-lane vectors (AVX2) are not measured and keep the GSPC kernels."""
    k = geo.cpg
    return (geo.groups > 1 and 1 < k <= MAX_GROUP and geo.opg == k and lanes == LANES
            and ib == ob == lanes and ib >= 2 * k and ib % k == 0 and geo.c % ib == 0)


def _check(geo: ConvGeometry, cb: int) -> None:
    k = geo.cpg
    if not (geo.groups > 1 and 1 < k <= MAX_GROUP and geo.opg == k and cb >= 2 * k
            and cb % k == 0 and geo.c % cb == 0):
        raise CompilationError(
            f"rotated-vector grouped conv: needs groups of 2-{MAX_GROUP} inputs and as many "
            f"outputs inside chunks of {cb}; got {geo.groups} groups of {geo.cpg} -> "
            f"{geo.opg} channels")


def _rotated(lane, t, k):
    """Lane ``lane``'s source under rotation ``t`` of its group of ``k`` lanes (a select,
    not a modulo: TVM 0.27's region bound of ``(lane % k + t) % k`` divides by zero)."""
    return tirx.Select(lane % k + t < k, lane + t, lane + t - k)


def pack_weight_numpy(weight: np.ndarray, geo: ConvGeometry, cb: int) -> np.ndarray:
    """OIHW ``(O, k, KH, KW)`` -> ``(O / cb, KH, KW, k, cb)``: for output lane ``l`` of
    chunk ``c`` at rotation ``t``, the weight on input ``(l % k + t) % k`` of its group."""
    _check(geo, cb)
    o, k, kh, kw = weight.shape
    if (o, k) != (geo.o, geo.cpg):
        raise CompilationError(f"grouped conv weight {weight.shape} is not {geo.o} outputs x "
                               f"{geo.cpg} inputs per group")
    packed = np.empty((o // cb, kh, kw, k, cb), dtype=weight.dtype)
    lane = np.arange(o)
    for t in range(k):
        vals = weight[lane, (lane % k + t) % k]  # (O, KH, KW)
        packed[:, :, :, t, :] = vals.reshape(o // cb, cb, kh, kw).transpose(0, 2, 3, 1)
    return packed


def pack_weight(weight: te.Tensor, geo: ConvGeometry, cb: int) -> te.Tensor:
    """:func:`pack_weight_numpy` as a compute, for weights known only at run time."""
    _check(geo, cb)
    k = geo.cpg

    def fpack(c, y, x, t, lane):
        return weight[c * cb + lane, _rotated(lane % k, t, k), y, x]

    return te.compute((geo.o // cb, geo.kh, geo.kw, k, cb), fpack, name="shift_weight_pack")


def conv2d_gspc_shift(data: te.Tensor, packed: te.Tensor, geo: ConvGeometry, tile: ConvTile,
                      out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/cb, H, W, cb) x (C/cb, KH, KW, k, cb) -> (N, C/cb, OH, OW, cb)``."""
    cb = tile.ob
    _check(geo, cb)
    if tile.ib != cb:
        raise CompilationError(f"rotated-vector grouped conv: input chunk {tile.ib} is not "
                               f"the output chunk {cb}")
    k = geo.cpg
    sh, sw = geo.stride
    dh, dw = geo.dilation
    pt, pl = geo.padding[0], geo.padding[1]
    h, w = geo.h, geo.w
    rows, cols = input_extent(geo)

    def fpad(n, c, y, x, lane):
        inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl)
        return tirx.if_then_else(inside, data[n, c, y - pt, x - pl, lane],
                                 tirx.const(0, data.dtype))

    dpad = te.compute((geo.n, geo.c // cb, rows, cols, cb), fpad, name="data_pad")
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")
    rs = te.reduce_axis((0, k), "rs")

    def body(n, c, y, x, ci):
        # rs is unrolled: each rotation a constant permutation of the pixel's chunk
        return te.sum(dpad[n, c, y * sh + ry * dh, x * sw + rx * dw, _rotated(ci, rs, k)]
                      .astype(out_dtype) * packed[c, ry, rx, rs, ci].astype(out_dtype),
                      axis=[ry, rx, rs])

    attrs = {"kind": KIND, "r": 1, "shifts": k}
    return tiled_output(geo, tile, geo.o // cb, cb, body, "conv2d_gspc_shift", attrs,
                        out_dtype)

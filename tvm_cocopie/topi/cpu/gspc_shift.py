"""Grouped convs of small groups inside one chunk on lane-shifted input vectors.

Where each group has ``k`` inputs and ``k`` outputs (2 or 4: the G(8)/G(16) variants
of WRN-40-2 and ResNet-34, ResNeXt's 4 channels per group) and the groups tile the
chunk, output lane ``l`` of a chunk (group ``l // k``, place ``r = l % k`` in it) is

    out[l] = sum_j w[l, j] * in[l - r + j] = sum_s W_s[l] * in[l + s],  s = j - r

over the ``2k - 1`` shifts ``s`` in ``[-(k - 1), k - 1]``, ``W_s[l]`` the weight of
lane ``l`` on input ``r + s`` of its group, zero where that falls outside the group.
So the conv is a depthwise conv with ``2k - 1`` times the taps: each FMA a whole
chunk vector (one output pixel's channels) times a vector of the input loaded ``s``
lanes off the pixel's own (contiguous: a pixel's chunk follows the one before), the
blocked ``NCHW{c}c`` layout on both sides. GSPC's segments of ``k`` lanes spend
``lanes / k`` times the FMAs' width; its pixel vectors move the blocked input to NCHW
and the result back inside the kernel, which cost more than the FMAs on small maps
(WRN's 32@32 G(16): 2 channels per group). Here ``(2k - 1) / k`` of the FMAs' work
is useful: 2/3 for 2 channels per group, 4/7 for 4.

The input is padded into rows of ``(cols + 2) * c`` values (one zero pixel on each
side), so a shifted vector never leaves the row's buffer; the lanes it reads from
the neighbouring pixel meet zero weights. (As in the block-diagonal kernel, an
infinite input value then makes NaN in the neighbouring pixel's other groups.)
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ...errors import CompilationError
from .conv2d_nchwc import ConvGeometry, ConvTile, input_extent, tiled_output

#: block annotation kind of the shifted-vector kernel (scheduled by the conv rule like a
#: depthwise conv with the shifts as a third reduction)
KIND = "shift"
#: channels per group this kernel takes at most: 4 (7 shifts, 57% of the FMA useful);
#: 8 (15 shifts) lost to GSPC's 8-lane segments (:func:`applies`)
MAX_GROUP = 4
#: vector lanes it was measured on and is chosen for: 16 (AVX-512)
LANES = 16


def applies(geo: ConvGeometry, ib: int, ob: int, lanes: int) -> bool:
    """Whether the conv runs on shifted vectors: as many inputs as outputs per group
    (``k``, 2 to :data:`MAX_GROUP`), two or more whole groups in a chunk of ``lanes``
    channels on both sides, on :data:`LANES`-lane vectors.

    Measured on AVX-512 (Emerald Rapids), interleaved with ONNX Runtime, shifted over
    the GSPC kernel before (pixel vectors for these) at 1 / 2 threads: 2 per group
    32@32 G(16) 32 / 32 us against 68 / 68, 4 per group 64@56 G(16) 472 / 213 against
    519 / 240, 64@16 s2 G(16) 19 / 17 against 30 / 28, ResNeXt's 128@56 G(32) 1231 /
    597 against 1219 / 689, 256@28 G(64) 526 / 255 against 704 / 309, 32@32 G(8) 80 / 48
    against 66 / 73 (the one loss); 8 per group 128@28 G(16) 595 / 295 against
    396 / 255 (segments): not taken. 8-lane vectors (AVX2) are not measured and keep
    the GSPC kernels."""
    k = geo.cpg
    return (geo.groups > 1 and 1 < k <= MAX_GROUP and geo.opg == k and lanes == LANES
            and ib == ob == lanes and ib >= 2 * k and geo.c % ib == 0)


def shifts(geo: ConvGeometry) -> int:
    """``2k - 1``: the lane offsets a group of ``k`` channels reads."""
    return 2 * geo.cpg - 1


def _check(geo: ConvGeometry, cb: int) -> None:
    k = geo.cpg
    if not (geo.groups > 1 and 1 < k <= MAX_GROUP and geo.opg == k and cb >= 2 * k
            and geo.c % cb == 0):
        raise CompilationError(
            f"shifted-vector grouped conv: needs groups of 2-{MAX_GROUP} inputs and as many "
            f"outputs inside chunks of {cb}; got {geo.groups} groups of {geo.cpg} -> "
            f"{geo.opg} channels")


def pack_weight_numpy(weight: np.ndarray, geo: ConvGeometry, cb: int) -> np.ndarray:
    """OIHW ``(O, k, KH, KW)`` -> ``(O / cb, KH, KW, 2k - 1, cb)``: for output lane ``l``
    of chunk ``c`` at shift ``s`` (index ``s + k - 1``), the weight on input ``l % k + s``
    of its group, zero where that is not in the group."""
    _check(geo, cb)
    o, k, kh, kw = weight.shape
    if (o, k) != (geo.o, geo.cpg):
        raise CompilationError(f"grouped conv weight {weight.shape} is not {geo.o} outputs x "
                               f"{geo.cpg} inputs per group")
    packed = np.zeros((o // cb, kh, kw, 2 * k - 1, cb), dtype=weight.dtype)
    lane = np.arange(o)
    for si in range(2 * k - 1):
        j = lane % k + si - (k - 1)
        valid = (j >= 0) & (j < k)
        vals = np.zeros((o, kh, kw), dtype=weight.dtype)
        vals[valid] = weight[lane[valid], j[valid]]
        packed[:, :, :, si, :] = vals.reshape(o // cb, cb, kh, kw).transpose(0, 2, 3, 1)
    return packed


def pack_weight(weight: te.Tensor, geo: ConvGeometry, cb: int) -> te.Tensor:
    """:func:`pack_weight_numpy` as a compute, for weights known only at run time."""
    _check(geo, cb)
    k = geo.cpg

    def fpack(c, y, x, si, lane):
        j = lane % k + si - (k - 1)
        return tirx.if_then_else(tirx.all(j >= 0, j < k),
                                 weight[c * cb + lane, tirx.max(tirx.min(j, k - 1), 0), y, x],
                                 tirx.const(0, weight.dtype))

    return te.compute((geo.o // cb, geo.kh, geo.kw, 2 * k - 1, cb), fpack,
                      name="shift_weight_pack")


def conv2d_gspc_shift(data: te.Tensor, packed: te.Tensor, geo: ConvGeometry, tile: ConvTile,
                      out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/cb, H, W, cb) x (C/cb, KH, KW, 2k - 1, cb) -> (N, C/cb, OH, OW, cb)``."""
    cb = tile.ob
    _check(geo, cb)
    if tile.ib != cb:
        raise CompilationError(f"shifted-vector grouped conv: input chunk {tile.ib} is not "
                               f"the output chunk {cb}")
    k = geo.cpg
    sh, sw = geo.stride
    dh, dw = geo.dilation
    pt, pl = geo.padding[0], geo.padding[1]
    h, w = geo.h, geo.w
    rows, cols = input_extent(geo)

    def fpad(n, c, y, f):  # row value f: pixel f // cb - 1 (a zero pixel on each side)
        x = f // cb - 1
        inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl)
        return tirx.if_then_else(inside, data[n, c, y - pt, x - pl, f % cb],
                                 tirx.const(0, data.dtype))

    dpad = te.compute((geo.n, geo.c // cb, rows, (cols + 2) * cb), fpad, name="data_pad")
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")
    rs = te.reduce_axis((0, 2 * k - 1), "rs")

    def body(n, c, y, x, ci):
        col = (x * sw + rx * dw + 1) * cb + ci + rs - (k - 1)
        return te.sum(dpad[n, c, y * sh + ry * dh, col].astype(out_dtype)
                      * packed[c, ry, rx, rs, ci].astype(out_dtype), axis=[ry, rx, rs])

    attrs = {"kind": KIND, "r": 1, "shifts": 2 * k - 1}
    return tiled_output(geo, tile, geo.o // cb, cb, body, "conv2d_gspc_shift", attrs,
                        out_dtype)

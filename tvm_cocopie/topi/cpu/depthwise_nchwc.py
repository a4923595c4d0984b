"""Depthwise convolution in the blocked NCHW[x]c layout.

Each channel chunk is one SIMD vector: an output vector is the sum over the
``KH x KW`` window of input vectors times weight vectors (no broadcast, no
reduction across lanes). A chunk narrower than a vector (2 or 4 channels) takes
``tw`` neighbouring pixels into one vector instead (a *wide* tile, stride 1: the
pixels' channels are contiguous in the input and the output), against a weight
packed ``tw`` times side by side. The register tile is a run of output pixels sharing the
chunk's weights; the spatial tiling (row-aligned or flattened, with padding) is the
one of :mod:`.conv2d_nchwc`, and so is the schedule.
"""

from __future__ import annotations

import numpy as np
from tvm import te

from ...errors import CompilationError
from .conv2d_nchwc import ConvGeometry, ConvTile, input_extent, pad_nchwc, tiled_output


def is_depthwise(geo: ConvGeometry) -> bool:
    """One input and one output channel per group."""
    return geo.groups > 1 and geo.groups == geo.c == geo.o


def repeats(tile: ConvTile) -> int:
    """Copies of a chunk's weights side by side in the packed weight: a wide tile's
    vector covers ``tw`` pixels of a narrow chunk, each needing the chunk's weights."""
    return tile.tw if tile.wide else 1


def pack_weight(weight: te.Tensor, cb: int, rep: int = 1) -> te.Tensor:
    """``(C, 1, KH, KW)`` -> ``(C // cb, KH, KW, rep * cb)`` (the chunk's ``cb`` weights
    ``rep`` times)."""
    c, _, kh, kw = (int(s) for s in weight.shape)
    if c % cb:
        raise CompilationError(f"depthwise: {c} channels are not a multiple of the chunk {cb}")
    return te.compute((c // cb, kh, kw, rep * cb),
                      lambda g, y, x, i: weight[g * cb + i % cb, 0, y, x], name="dw_weight_pack")


def pack_weight_numpy(weight: np.ndarray, cb: int, rep: int = 1) -> np.ndarray:
    """:func:`pack_weight` on a constant, at compile time."""
    c, _, kh, kw = weight.shape
    packed = weight[:, 0].reshape(c // cb, cb, kh, kw).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(np.tile(packed, (1, 1, 1, rep)))


def depthwise_nchwc(data: te.Tensor, packed: te.Tensor, geo: ConvGeometry, tile: ConvTile,
                    out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/cb, H, W, cb) x (C/cb, KH, KW, cb) -> (N, C/cb, OH, OW, cb)``."""
    if not is_depthwise(geo):
        raise CompilationError("depthwise_nchwc needs groups == channels == outputs")
    cb = tile.ob
    sh, sw = geo.stride
    dh, dw = geo.dilation
    dpad = pad_nchwc(data, geo, *input_extent(geo))
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")

    def body(n, c, y, x, ci):
        lane = x % tile.tw * cb + ci if tile.wide else ci  # the pixel's copy of the weights
        return te.sum(
            dpad[n, c, y * sh + ry * dh, x * sw + rx * dw, ci].astype(out_dtype)
            * packed[c, ry, rx, lane].astype(out_dtype),
            axis=[ry, rx],
        )

    attrs = {"kind": "depthwise", "r": 1}
    if tile.wide:
        attrs["wide"] = 1
    return tiled_output(geo, tile, geo.c // cb, cb, body, "depthwise_nchwc", attrs, out_dtype)

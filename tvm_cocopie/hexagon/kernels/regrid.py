"""Regrid within one layout as row copies: the strided phase split without a gather.

A convolution reads its input on padded, phase-split grids (:mod:`.conv2d`); between
two layers the executor moves the producer's output grid into the consumer's input
grid (:func:`tvm_cocopie.topi.int8.hvx.regrid`). Written as a gather over every
destination byte, TVM's HVX code computes an index, a bounds test and a byte load per
byte (HVX has no gather; ~1-3 packets per byte measured), which made the regrids of a
network cost many times its convolutions.

When producer and consumer share the layout, a grid row is ``v`` adjacent channels in
``v`` contiguous bytes in both (seed 004, Fig. 4.2), and which rows are valid is
known at compile time per phase. So the regrid is: zero the destination with vector
stores, then for each phase ``(a, b)`` and valid output grid position copy one
``v``-byte row from ``x[g, (gi*s + a - p) * Wq + gj*s + b - p]`` -- a strided copy
with no per-byte test. :func:`regrid_copy_kernel` is that kernel; the Hexagon schedule
rule uses it for same-layout regrids whose channels fill the layout's groups, and for
the NHWC image into the first layer's grid (``c`` byte copies per pixel).
"""

from __future__ import annotations

from ...topi.int8.layouts import LAYOUT_OF, GridGeometry
from .tirgen import T, kernel, ramp


def _valid(n_src: int, n_grid: int, phase: int, stride: int, pad: int) -> tuple:
    """First grid index and count whose source ``g*stride + phase - pad`` is in range."""
    lo = max(0, -(-(pad - phase) // stride))
    hi = min(n_grid - 1, (n_src - 1 + pad - phase) // stride)
    return lo, max(0, hi - lo + 1)


def regrid_copy_kernel(variant: str, src_shape: tuple, h: int, w: int, wq: int,
                       geo: GridGeometry, channels: int, pad_value: int = 0):
    """PrimFunc ``(x, y)`` equal to :func:`tvm_cocopie.topi.int8.hvx.regrid` of an output
    grid ``x`` (``src_shape``, valid ``h x w`` on width ``wq``) in ``variant``'s layout
    into ``geo``'s input grid in the same layout (``channels`` a multiple of the
    layout's column multiple, so both have the same groups and no padded channel).

    An NHWC ``x`` (``[1, h, w, channels]``, the image) is copied byte by byte per
    valid position, any ``channels``; padded channels keep the fill. The destination is
    first filled with ``pad_value`` (the input's zero point)."""
    from tvm import tirx


    lay = LAYOUT_OF[variant]
    v = lay.cols
    dst_shape = geo.in_shape(variant, channels)
    phases, groups, rows = dst_shape[0], dst_shape[1], dst_shape[2]
    s, p, gw = geo.stride, geo.pad, geo.grid_w
    params = [("x", src_shape, "uint8"), ("y", dst_shape, "uint8")]
    nhwc = len(src_shape) == 4
    with kernel(f"regrid_copy{v}", params) as ((x, y), out):
        zero = tirx.Broadcast(tirx.const(pad_value, "uint8"), 128)
        with T.grid(phases, groups, rows * v // 128) as (ph, g, t):
            T.buffer_store(y, zero, [ph, g, t * (128 // v), ramp(0, 128)])
        for a in range(s):
            gi0, n_i = _valid(h, geo.grid_h, a, s, p)
            for b in range(s):
                gj0, n_j = _valid(w, gw, b, s, p)
                if not n_i or not n_j:
                    continue
                if nhwc and v == 4 and channels % 4 == 0:  # whole 4-byte words
                    with T.grid(n_i, n_j, channels // 4) as (ii, jj, q):
                        i, j = (ii + gi0) * s + a - p, (jj + gj0) * s + b - p
                        dst_row = (ii + gi0) * gw + jj + gj0
                        T.buffer_store(y, x[0, i, j, ramp(q * 4, 4)],
                                       [a * s + b, q, dst_row, ramp(0, 4)])
                    continue
                if nhwc:
                    with T.grid(n_i, n_j, channels) as (ii, jj, ch):
                        i, j = (ii + gi0) * s + a - p, (jj + gj0) * s + b - p
                        dst_row = (ii + gi0) * gw + jj + gj0
                        T.buffer_store(y, x[0, i, j, ch], [a * s + b, ch // v, dst_row, ch % v])
                    continue
                with T.grid(groups, n_i, n_j) as (g, ii, jj):
                    gi, gj = ii + gi0, jj + gj0
                    src_row = (gi * s + a - p) * wq + gj * s + b - p
                    dst_row = gi * gw + gj
                    if v == 1:
                        T.buffer_store(y, x[g, src_row, 0], [a * s + b, g, dst_row, 0])
                    else:
                        T.buffer_store(y, x[g, src_row, ramp(0, v)],
                                       [a * s + b, g, dst_row, ramp(0, v)])
    return out[0]


def unpack_words_kernel(src_shape: tuple, h: int, w: int, wq: int, channels: int):
    """PrimFunc ``(x, y)`` equal to :func:`tvm_cocopie.topi.int8.hvx.unpack` of a 4-column
    grid ``x`` (``channels`` a multiple of 4): ``y[0, i, j, 4q:4q+4]`` is the word
    ``x[q, i*wq + j, 0:4]`` (a word copy per pixel and group; the byte gather TVM makes of
    the compute took ~5 packets per byte)."""
    params = [("x", src_shape, "uint8"), ("y", (1, h, w, channels), "uint8")]
    with kernel("unpack_words", params) as ((x, y), out), T.grid(h, w, channels // 4) as (
            i, j, q):
        T.buffer_store(y, x[q, i * wq + j, ramp(0, 4)], [0, i, j, ramp(q * 4, 4)])
    return out[0]

"""Nearest upsampling of an int8 NHWC map on HVX by a whole factor (issue 21).

:func:`tvm_cocopie.topi.int8.compute.upsample_func` repeats every pixel ``f`` times along
both axes; TVM lowers it to scalar word copies (~0.16 packets per output byte). Here, an
output row is its input row widened once and stored ``f`` times:

- ``C`` a multiple of 128: every pixel is whole vectors, copied ``f`` times;
- ``f = 2`` and ``C`` a power of two up to 64, rows of whole vectors: each input vector
  interleaved with itself at ``C``-byte elements (one ``vshuff``: ``Vdd = vshuff(Vu, Vu,
  -C)`` gives every ``C``-byte pixel twice, in order, over the pair).

Other sizes keep TVM's lowering (:func:`supported`).
"""

from __future__ import annotations

from ...topi.int8.layouts import VBYTES
from . import hvx
from .tirgen import T, bind, kernel, ramp


def supported(shape: tuple, factor: int) -> bool:
    """Whether :func:`upsample_kernel` takes an NHWC ``shape`` and ``factor``."""
    _, _, w, c = shape
    if c % VBYTES == 0:
        return factor >= 1
    return factor == 2 and c in (1, 2, 4, 8, 16, 32, 64) and (w * c) % VBYTES == 0


def upsample_kernel(shape: tuple, factor: int):
    """PrimFunc ``(x, y)`` equal to :func:`tvm_cocopie.topi.int8.compute.upsample_func` on
    an NHWC ``shape`` (:func:`supported` sizes)."""
    n, h, w, c = shape
    f = factor
    row_in, row_out = w * c, w * c * f
    params = [("x", shape, "uint8"), ("y", (n, h * f, w * f, c), "uint8")]
    with kernel("upsample_hvx", params) as ((xb, yb), out):
        x = T.decl_buffer((n * h * row_in,), "uint8", data=xb.data)
        y = T.decl_buffer((n * h * f * row_out,), "uint8", data=yb.data)
        if c % VBYTES == 0:
            with T.grid(n * h, w, c // VBYTES) as (r, j, v):
                vec = bind(x[ramp(r * row_in + j * c + v * VBYTES, VBYTES)])
                for a in range(f):
                    for b in range(f):
                        start = (r * f + a) * row_out + (j * f + b) * c + v * VBYTES
                        T.buffer_store(y, vec, [ramp(start, VBYTES)])
        else:
            with T.grid(n * h, row_in // VBYTES) as (r, v):
                vec = bind(hvx.as_vec(x[ramp(r * row_in + v * VBYTES, VBYTES)]))
                pair = bind(hvx.vshuff(vec, vec, c))
                for a in range(2):
                    base = (r * 2 + a) * row_out + v * 2 * VBYTES
                    T.buffer_store(y, hvx.as_bytes(hvx.lo(pair)), [ramp(base, VBYTES)])
                    T.buffer_store(y, hvx.as_bytes(hvx.hi(pair)),
                                   [ramp(base + VBYTES, VBYTES)])
    return out[0]


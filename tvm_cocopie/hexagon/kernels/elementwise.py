"""Element-wise int8 kernels on HVX: requantized products and 256-entry lookups.

Whole models (seed 004, ch. 4: MobileNetV3's hard-swish and squeeze-excitation) need two
element-wise operators besides the residual add:

- :func:`mul_kernel`: ``rq((a - za) * (b - zb))`` per byte, ``b`` of the same grid or a
  1x1 map's grid broadcast over every row. Per 128 bytes: zero-extend both to halfwords
  (``vzxt``), subtract the zero points (``vsub``), multiply to 32 bits (``vmpy``: four
  vectors of products, bytes ``4i + t``), requantize each with one ``vmpye``
  (:meth:`~tvm_cocopie.topi.int8.compute.Requant.tir_int32`), saturate and interleave back
  to bytes (:func:`.hvx.saturate_interleave4`);
- :func:`lut_kernel`: ``table[x]`` per byte with ``vlut32``: the 256 entries as 8 segments
  of 32, one table vector each; byte ``i`` takes its value from the segment its top three
  bits select, the 8 lookups ORed together.

Both replace the TE computes of :func:`tvm_cocopie.topi.int8.hvx.qmul_grid` and
:func:`~tvm_cocopie.topi.int8.hvx.lut_grid` (same signature, bit-identical: tested under
``qemu-hexagon``), which TVM's own lowering runs at 1.6-5 packets per byte.
"""

from __future__ import annotations

from tvm import tirx

from ...topi.int8.layouts import VBYTES
from . import hvx
from .tirgen import T, bind, kernel, ramp

_WORD = {4: "int32", 2: "int16", 1: "uint8"}


def _splat(buf, g, v: int):
    """Row 0 of group ``g`` of a ``(G, rows, v)`` grid repeated over a 128-byte vector."""
    if v == 1:
        return hvx.as_vec(tirx.Broadcast(buf[g, 0, 0], VBYTES))
    word = tirx.reinterpret(_WORD[v], buf[g, 0, ramp(0, v)])
    return hvx.as_vec(tirx.reinterpret("uint8x128", tirx.Broadcast(word, VBYTES // v)))


def mul_kernel(shape: tuple, b_shape: tuple, mrq, broadcast: bool):
    """PrimFunc ``(a, b, y)`` equal to :func:`tvm_cocopie.topi.int8.hvx.qmul_grid`."""
    groups, rows, v = shape
    per_group = rows * v // VBYTES
    params = [("a", shape, "uint8"), ("b", b_shape, "uint8"), ("y", shape, "uint8")]
    za = tirx.Broadcast(tirx.const(mrq.za, "int16"), 64)
    zb = tirx.Broadcast(tirx.const(mrq.zb, "int16"), 64)

    def halves(vec, z):
        pair = bind(hvx.vzb(vec))
        z = hvx.as_vec(tirx.reinterpret("uint8x128", z))
        return hvx.vsubh(hvx.lo(pair), z), hvx.vsubh(hvx.hi(pair), z)

    with kernel("qmul_hvx", params) as ((a, b, y), out), T.serial(groups) as g:
        if broadcast:
            b_even, b_odd = (bind(h) for h in halves(_splat(b, g, v), zb))
        with T.serial(per_group) as t:
            r0 = t * (VBYTES // v)
            a_even, a_odd = (bind(h) for h in halves(hvx.as_vec(a[g, r0, ramp(0, VBYTES)]), za))
            if not broadcast:
                b_even, b_odd = (bind(h) for h in
                                 halves(hvx.as_vec(b[g, r0, ramp(0, VBYTES)]), zb))
            p02 = bind(hvx.vmpyhv(a_even, b_even))  # bytes 4i and 4i + 2
            p13 = bind(hvx.vmpyhv(a_odd, b_odd))  # bytes 4i + 1 and 4i + 3
            prods = [hvx.lo(p02), hvx.lo(p13), hvx.hi(p02), hvx.hi(p13)]
            ys = [mrq.rq.tir_int32(p, 32, hvx.mul_shr16) for p in prods]
            T.buffer_store(y, hvx.saturate_interleave4(*ys), [g, r0, ramp(0, VBYTES)])
    return out[0]


def pack_lut(table) -> "np.ndarray":  # noqa: F821 (numpy imported lazily)
    """A 256-entry uint8 table as the 8 x 128-byte ``vlut32`` segments the kernel reads:
    segment ``s`` holds entries ``32s .. 32s+31`` in both bytes of halfwords ``k`` and
    ``k + 32`` (which half and byte a lookup reads depends on the low bits of ``Rt``;
    measured under ``qemu-hexagon``: odd segments read halfwords 32..63)."""
    import numpy as np

    table = np.asarray(table, dtype=np.uint8).reshape(8, 1, 32)
    return np.ascontiguousarray(np.broadcast_to(table, (8, 4, 32)).transpose(0, 2, 1)
                                .reshape(8, 32, 2, 2).transpose(0, 2, 1, 3).reshape(8, VBYTES))


def lut_kernel(shape: tuple):
    """PrimFunc ``(x, table, y)`` equal to :func:`tvm_cocopie.topi.int8.hvx.lut_grid` on the
    packed table of :func:`pack_lut`."""
    groups, rows, v = shape
    per_group = rows * v // VBYTES
    params = [("x", shape, "uint8"), ("table", (8, VBYTES), "uint8"), ("y", shape, "uint8")]
    with kernel("lut_hvx", params) as ((x, tab, y), out):
        segs = [bind(hvx.as_vec(tab[s, ramp(0, VBYTES)])) for s in range(8)]
        with T.grid(groups, per_group) as (g, t):
            r0 = t * (VBYTES // v)
            vx = bind(hvx.as_vec(x[g, r0, ramp(0, VBYTES)]))
            acc = hvx.vlut32(vx, segs[0], tirx.const(0, "int32"))
            for s in range(1, 8):
                acc = hvx.vlut32_or(acc, vx, segs[s], tirx.const(s, "int32"))
            T.buffer_store(y, hvx.as_bytes(acc), [g, r0, ramp(0, VBYTES)])
    return out[0]

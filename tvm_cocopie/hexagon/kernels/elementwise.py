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


def _halfwords(vec):
    """A byte vector zero-extended to halfwords: ``(even bytes, odd bytes)``."""
    pair = bind(hvx.vzb(vec))
    return hvx.lo(pair), hvx.hi(pair)


def mul_kernel(shape: tuple, b_shape: tuple, mrq, broadcast: bool):
    """PrimFunc ``(a, b, y)`` equal to :func:`tvm_cocopie.topi.int8.hvx.qmul_grid`."""
    groups, rows, v = shape
    per_group = rows * v // VBYTES
    params = [("a", shape, "uint8"), ("b", b_shape, "uint8"), ("y", shape, "uint8")]
    za = tirx.Broadcast(tirx.const(mrq.za, "int16"), 64)
    zb = tirx.Broadcast(tirx.const(mrq.zb, "int16"), 64)

    def halves(vec, z):
        z = hvx.as_vec(tirx.reinterpret("uint8x128", z))
        return (hvx.vsubh(h, z) for h in _halfwords(vec))

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


def add_kernel(shape: tuple, b_shape: tuple, arq, broadcast: bool):
    """PrimFunc ``(a, b, y)`` equal to :func:`tvm_cocopie.topi.int8.hvx.qadd_grid`:
    ``clip((a * ma + b * mb + offset) >> shift)`` per byte. Per 128 bytes: zero-extend to
    halfwords, ``vmpy`` by ``ma`` and accumulate ``vmpy`` by ``mb`` into 32-bit words,
    add the offset, ``vasr``, saturate back to bytes. (TVM's own vectorization of the same
    compute rounded some sums up by one on HVX: caught by a bit-exact whole-model run.)"""
    groups, rows, v = shape
    per_group = rows * v // VBYTES
    params = [("a", shape, "uint8"), ("b", b_shape, "uint8"), ("y", shape, "uint8")]
    ma = hvx.as_vec(tirx.reinterpret("uint8x128", tirx.Broadcast(tirx.const(arq.ma, "int16"), 64)))
    mb = hvx.as_vec(tirx.reinterpret("uint8x128", tirx.Broadcast(tirx.const(arq.mb, "int16"), 64)))
    offset = tirx.Broadcast(tirx.const(arq.offset, "int32"), 32)

    halves = _halfwords
    with kernel("qadd_hvx", params) as ((a, b, y), out), T.serial(groups) as g:
        if broadcast:
            b_even, b_odd = (bind(h) for h in halves(_splat(b, g, v)))
        with T.serial(per_group) as t:
            r0 = t * (VBYTES // v)
            a_even, a_odd = (bind(h) for h in halves(hvx.as_vec(a[g, r0, ramp(0, VBYTES)])))
            if not broadcast:
                b_even, b_odd = (bind(h) for h in halves(hvx.as_vec(b[g, r0, ramp(0, VBYTES)])))
            p02 = bind(hvx.vmpyhv_acc(hvx.vmpyhv(a_even, ma), b_even, mb))
            p13 = bind(hvx.vmpyhv_acc(hvx.vmpyhv(a_odd, ma), b_odd, mb))
            sums = [hvx.lo(p02), hvx.lo(p13), hvx.hi(p02), hvx.hi(p13)]
            ys = [hvx.vasrw(hvx.vaddw(x, offset), arq.shift) for x in sums]
            T.buffer_store(y, hvx.saturate_interleave4(*ys), [g, r0, ramp(0, VBYTES)])
    return out[0]


def pack_lut(table) -> np.ndarray:  # noqa: F821 (numpy imported lazily)
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


def pack_dense_weights(w_kn) -> np.ndarray:  # noqa: F821 (numpy imported lazily)
    """int8 ``[K, N]`` weights as :func:`dense_kernel` reads them (see
    :func:`tvm_cocopie.topi.int8.hvx.dense_shapes`): byte ``4i + j`` of vector ``(b, q)``
    is ``w[4q + j, 32b + i]``, zero past the matrix."""
    import numpy as np

    k, n = w_kn.shape
    nb, kq = -(-n // 32), -(-k // 4)
    full = np.zeros((kq * 4, nb * 32), np.int8)
    full[:k, :n] = w_kn
    return np.ascontiguousarray(full.reshape(kq, 4, nb, 32).transpose(2, 0, 3, 1)
                                .reshape(nb, kq, VBYTES))


def dense_kernel(variant: str, src_variant: str, src_shape: tuple, k_dim: int, n_out: int, rq):
    """PrimFunc ``(x, w, bias, y)`` equal to :func:`tvm_cocopie.topi.int8.hvx.qdense_grid`:
    a fully connected layer of a vector (a 1x1 map) as a matrix-vector product.

    A convolution kernel would spend a whole panel of rows (32-128) on the one pixel; here
    the weights are the vector operand instead: the input's 4-byte words are splatted
    (``vsplat``) and ``vrmpy(Vu.ub, Vv.b)`` sums four products into each of 32 outputs,
    ``blk`` blocks of 32 outputs in registers across the reduction. One ``vmpye``
    requantization per 32 outputs, then the bytes are written to row 0 of the output grid.
    A per-channel ``rq`` adds ``rq`` after ``bias`` (its
    :meth:`~tvm_cocopie.topi.int8.compute.Requant.table` over ``b_shape``): the 32 lanes
    are 32 channels, so the multipliers and shifts are vector loads (``vmpye`` by a vector,
    ``vasr`` by a vector)."""
    from ...topi.int8.hvx import dense_shapes
    from ...topi.int8.layouts import LAYOUT_OF, GridGeometry
    from .gemm import block_size
    from .tirgen import vec_buffer, vload, vstore

    v, vi = LAYOUT_OF[variant].cols, LAYOUT_OF[src_variant].cols
    (nb, kq, _), b_shape = dense_shapes(k_dim, n_out)
    y_shape = GridGeometry(1, 1, 1).out_shape(variant, n_out)
    blk = block_size(nb, 4)
    params = [("x", tuple(src_shape), "uint8"), ("w", (nb, kq, VBYTES), "int8"),
              ("bias", b_shape, "int32"),
              *([("rq", (2, *b_shape), "int32")] if rq.per_channel else []),
              ("y", y_shape, "uint8")]

    def c32(value):
        return tirx.Broadcast(tirx.const(value, "int32"), 32)

    with kernel("dense_hvx", params) as (bufs, out):
        x, w, bias, *table, y = bufs
        words = T.alloc_buffer((kq,), "int32", scope="global")
        tmp = vec_buffer("tmp")
        zero = tirx.Broadcast(tirx.const(0, "uint8"), VBYTES)
        with T.serial(y_shape[0] * y_shape[1] * v // VBYTES) as t:
            T.buffer_store(y, zero, [0, t * (VBYTES // v), ramp(0, VBYTES)])
        with T.serial(kq) as q:
            word = tirx.const(0, "int32")
            for j in range(4):
                kk = q * 4 + j
                byte = tirx.if_then_else(kk < k_dim, x[kk // vi, 0, kk % vi],
                                         tirx.const(0, "uint8")).astype("int32")
                word = word | (byte << j * 8)
            T.buffer_store(words, word, [q])
        for ob in range(nb // blk):
            accs = [vec_buffer(f"acc{i}") for i in range(blk)]
            for i, acc in enumerate(accs):
                vstore(acc, bias[ramp((ob * blk + i) * 32, 32)])
            with T.serial(kq) as q:
                xs = bind(tirx.Broadcast(words[q], 32))
                for i, acc in enumerate(accs):
                    wv = hvx.as_vec(w[ob * blk + i, q, ramp(0, VBYTES)])
                    vstore(acc, hvx.vrmpybusv_acc(vload(acc), xs, wv))
            for i, acc in enumerate(accs):
                base = (ob * blk + i) * 32
                lanes = ([bind(table[0][k, ramp(base, 32)]) for k in range(2)] if table
                         else None)
                yq = rq.tir_int32(vload(acc), 32, hvx.mul_shr16, lanes)
                vstore(tmp, tirx.max(tirx.min(yq, c32(255)), c32(0)))
                with T.serial(min(32, n_out - base)) as lane:
                    n = base + lane
                    T.buffer_store(y, tmp[lane].astype("uint8"), [n // v, 0, n % v])
    return out[0]

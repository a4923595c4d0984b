"""The int8 layer norm on HVX: a row's sums in vectors, its square root and reciprocal
scalar, the normalization in 16- and 32-bit lanes (issue 21; seed 004, ch. 4: GCD²'s
transformer models).

:class:`tvm_cocopie.topi.int8.sequence.LayerNorm` is defined for this kernel; per row of
``D`` bytes (``D`` a multiple of 128):

1. ``s1 = sum(x)``, ``s2 = sum(x**2)``: per 128 bytes one ``vrmpy`` by the word
   ``0x01010101`` and one ``vrmpy`` of the vector by itself into word accumulators, then a
   rotate-and-add reduction of the 32 lanes;
2. scalar, once per row: ``v = D * s2 - s1**2 + eps`` (int64), its integer square root
   bit by bit, the 16-bit multiplier ``m`` (a 16-step long division) and the shifts;
3. per 128 bytes: zero-extend to halfwords, ``vmpy`` by ``D`` into four word vectors (bytes
   ``4i + t``), ``- s1``, ``<< left``, one ``vmpye`` by ``m``, rounding ``>> right``,
   saturate to halfwords (the normalized value ``n``), ``vmpy`` by the halfword gains
   (packed even/odd, :meth:`~tvm_cocopie.topi.int8.sequence.LayerNorm.packed_constants`),
   add the word biases, ``>> shift``, add ``zy`` and saturate to bytes.

:func:`layernorm_kernel` replaces :func:`tvm_cocopie.topi.int8.sequence.layernorm_func`
(same signature, bit-identical: tested under ``qemu-hexagon``), which TVM lowers to
scalar int64 code.
"""

from __future__ import annotations

from tvm import tirx

from ...topi.int8.layouts import VBYTES
from ...topi.int8.sequence import norm_bits
from . import hvx
from .tirgen import T, bind, kernel, ramp, vec_buffer, vload, vstore

_ONES = 0x01010101


def supported(d: int) -> bool:
    """Whether rows of ``d`` channels fit the kernel (whole vectors)."""
    return d % VBYTES == 0


def _splat(value, dtype: str = "int32"):
    return tirx.Broadcast(tirx.const(value, dtype) if isinstance(value, int) else value, 32)


def _lane_total(buf, vec):
    """The sum of the 32 words of ``vec`` (rotate and add: every lane ends with it), via
    ``buf``; a scalar int32."""
    for k in (16, 8, 4, 2, 1):
        vec = bind(vec + hvx.vror(vec, 4 * k))
    vstore(buf, vec)
    return buf[0]


def _root(buf, v, bits: int):
    """``isqrt(v)`` of an int64 scalar below ``2**(2 * bits)`` into ``buf[0]`` (int32), bit
    by bit. A loop over one stored value: a chain of bound selects would be inlined into
    an expression that doubles with every bit."""
    T.buffer_store(buf, tirx.const(0, "int32"), [0])
    with T.serial(bits) as i:
        cand = bind(buf[0] | (tirx.const(1, "int32") << (tirx.const(bits - 1, "int32") - i)))
        wide = cand.astype("int64")
        T.buffer_store(buf, tirx.Select(wide * wide <= v, cand, buf[0]), [0])


def _multiplier(buf, root, nbits):
    """``floor((2**(nbits + 15) - 1) / root)`` (16 bits, ``root`` of ``nbits`` bits) into
    ``buf[1]``: long division, one quotient bit per step (Hexagon has no divide
    instruction; the library routine took several times as many packets). ``buf[0]`` holds
    the remainder, from ``2**(nbits - 1) - 1`` (the numerator's bits above the quotient's)."""
    one = tirx.const(1, "int32")
    T.buffer_store(buf, (one << (nbits - one)) - one, [0])
    T.buffer_store(buf, tirx.const(0, "int32"), [1])
    with T.serial(16):
        rem = bind(buf[0] + buf[0] + one)
        ge = bind(rem >= root)
        T.buffer_store(buf, tirx.Select(ge, rem - root, rem), [0])
        T.buffer_store(buf, buf[1] + buf[1] + ge.astype("int32"), [1])


def layernorm_kernel(shape: tuple, eps: int, shift: int, zy: int, bits: int):
    """PrimFunc ``(x, gain, bias, y)`` equal to
    :func:`tvm_cocopie.topi.int8.sequence.layernorm_func` on an NHWC map ``shape``."""
    d = shape[-1]
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    n_vec = d // VBYTES
    q = norm_bits(d)
    params = [("x", shape, "uint8"), ("gain", (d,), "int16"), ("bias", (d,), "int32"),
              ("y", shape, "uint8")]
    dh = hvx.as_vec(tirx.reinterpret("uint8x128", tirx.Broadcast(tirx.const(d, "int16"), 64)))
    with kernel("layernorm_hvx", params) as ((xb, gain, bias, yb), out):
        x, y = (T.decl_buffer((rows * d,), "uint8", data=b.data) for b in (xb, yb))
        acc1, acc2 = vec_buffer("s1"), vec_buffer("s2")
        rbuf, dbuf = vec_buffer("root", 1), vec_buffer("division", 2)
        with T.serial(rows) as r:
            base = r * d
            vstore(acc1, _splat(0))
            vstore(acc2, _splat(0))
            with T.serial(n_vec) as k:
                xv = bind(hvx.as_vec(x[ramp(base + k * VBYTES, VBYTES)]))
                vstore(acc1, hvx.vrmpybus_acc(vload(acc1), xv, tirx.const(_ONES, "int32")))
                vstore(acc2, hvx.vrmpyubv_acc(vload(acc2), xv, xv))
            s1 = bind(_lane_total(acc1, vload(acc1)))
            s2 = bind(_lane_total(acc2, vload(acc2)))
            wide = s1.astype("int64")
            v = bind(tirx.const(d, "int64") * s2.astype("int64") - wide * wide
                     + tirx.const(eps, "int64"))
            _root(rbuf, v, bits)
            root = bind(tirx.max(rbuf[0], tirx.const(1, "int32")))
            nbits = bind(tirx.const(32, "int32") - tirx.clz(root).astype("int32"))
            _multiplier(dbuf, root, nbits)
            m = bind(dbuf[1])
            left = bind(tirx.max(tirx.const(1 + q, "int32") - nbits, tirx.const(0, "int32")))
            right = bind(tirx.max(nbits - tirx.const(1 + q, "int32"), tirx.const(0, "int32")))
            rnd = bind((tirx.const(1, "int32") << right) >> tirx.const(1, "int32"))
            with T.serial(n_vec) as k:
                c0 = k * VBYTES
                pair = bind(hvx.vzb(hvx.as_vec(x[ramp(base + c0, VBYTES)])))
                pe = bind(hvx.vmpyhv(hvx.lo(pair), dh))  # bytes 4i, 4i + 2 times D
                po = bind(hvx.vmpyhv(hvx.hi(pair), dh))  # bytes 4i + 1, 4i + 3
                ns = []
                for word in (hvx.lo(pe), hvx.lo(po), hvx.hi(pe), hvx.hi(po)):
                    t = (word - _splat(s1)) << _splat(left)
                    ns.append(bind((hvx.vmpyewuh(t, _splat(m)) + _splat(rnd)) >> _splat(right)))
                ge = tirx.reinterpret(hvx.VEC, gain[ramp(c0, 64)])
                go = tirx.reinterpret(hvx.VEC, gain[ramp(c0 + 64, 64)])
                qe = bind(hvx.vmpyhv(hvx.vsatwh(ns[2], ns[0]), ge))  # channels 4i, 4i + 2
                qo = bind(hvx.vmpyhv(hvx.vsatwh(ns[3], ns[1]), go))  # 4i + 1, 4i + 3
                ys = [((p + bias[ramp(c0 + 32 * t, 32)]) >> _splat(shift)) + _splat(zy)
                      for t, p in enumerate((hvx.lo(qe), hvx.lo(qo), hvx.hi(qe), hvx.hi(qo)))]
                T.buffer_store(y, hvx.saturate_interleave4(*ys), [ramp(base + c0, VBYTES)])
    return out[0]

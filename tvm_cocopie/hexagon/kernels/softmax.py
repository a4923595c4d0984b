"""The int8 softmax on HVX: segments of 4 to 128 bytes inside each vector, every step in
vector lanes (issue 21; seed 004, ch. 4: GCD²'s transformer models).

:class:`tvm_cocopie.topi.int8.sequence.Softmax` is defined for this kernel. The map is
read as flat 128-byte vectors, each holding ``128 / L`` whole segments of ``L`` bytes (an
attention map's rows of per-head scores are such segments). Per vector:

1. the segment maximum in every byte: ``log2(L)`` steps of ``vmax`` with the vector's
   bytes exchanged at distance ``k`` (one ``vdelta``, :func:`.hvx.xor_swap`), which never
   leaves an aligned segment;
2. ``d = max - x`` and the exponential's low and high bytes by ``vlut32`` lookups (the
   packed tables of :func:`.elementwise.pack_lut`; 32-entry segments of zeros skipped);
3. the segment sums: ``vrmpy`` of each byte table by ``0x01010101`` into words, combined
   to ``256 * hi + lo`` and summed across the segment's words by the same exchanges;
4. ``q = floor(2**30 / sum)`` by a 16-step long division in the word lanes (no division
   instruction on Hexagon), ``R = q * inv_m``;
5. per byte, ``floor(R * e / 2**16)`` (one ``vmpye`` with ``e`` in the word's low
   halfword), rounded ``>> out_shift``, ``+ zy``, saturated back to bytes.

:func:`softmax_kernel` replaces :func:`tvm_cocopie.topi.int8.sequence.softmax_func`
(same signature, bit-identical: tested under ``qemu-hexagon``).
"""

from __future__ import annotations

from tvm import tirx

from ...topi.int8.layouts import VBYTES
from ...topi.int8.sequence import RECIP_BITS
from . import hvx
from .tirgen import T, bind, kernel, ramp, vec_buffer, vload, vstore

_ONES = 0x01010101
#: ``floor(2**30 / s)`` for ``s >= 2**15`` starts from the remainder ``2**14`` (quotient 0).
_DIV_START, _DIV_STEPS = 14, RECIP_BITS - 14


def supported(size: int, length: int) -> bool:
    """Whether a map of ``size`` bytes in segments of ``length`` fits the kernel: whole
    vectors, segments of a power of two from 4 to 128 bytes (whole words in a vector)."""
    return size % VBYTES == 0 and 4 <= length <= VBYTES and length & (length - 1) == 0


def _splat(value):
    return tirx.Broadcast(tirx.const(value, "int32") if isinstance(value, int) else value, 32)


def _lookup(d, tables: list, segments: list):
    """``vlut32`` of the byte vector ``d`` over the given table segments (0 elsewhere)."""
    if not segments:
        return _splat(0)
    acc = hvx.vlut32(d, tables[segments[0]], tirx.const(segments[0], "int32"))
    for s in segments[1:]:
        acc = hvx.vlut32_or(acc, d, tables[s], tirx.const(s, "int32"))
    return acc


def _reciprocal(rem, quot, total):
    """``floor(2**30 / total)`` per word lane into ``quot`` (``total`` in ``[2**15,
    2**22]``): long division one quotient bit per step; the comparison is the sign of ``2 *
    rem - total`` (an all-ones mask when negative: plain word arithmetic, no predicates).
    The remainder and quotient live in vector buffers: bound values used twice per step
    would be inlined into an expression that doubles with every step."""
    vstore(rem, _splat(1 << _DIV_START))
    vstore(quot, _splat(0))
    with T.serial(_DIV_STEPS):
        diff = bind(vload(rem) + vload(rem) - total)
        neg = bind(diff >> _splat(31))
        vstore(rem, diff + (total & neg))
        vstore(quot, vload(quot) + vload(quot) + _splat(1) + neg)


def _segment_reduce(buf, value, first: int, length: int, combine):
    """``value`` combined over each aligned segment of ``length`` bytes by exchanges at
    distances ``first, 2 * first, ...`` (every lane ends with its segment's result)."""
    vstore(buf, value)
    k = first
    while k < length:
        vstore(buf, combine(vload(buf), hvx.xor_swap(vload(buf), k)))
        k *= 2
    return vload(buf)


def softmax_kernel(shape: tuple, length: int, inv_m: int, inv_k: int, zy: int, segments):
    """PrimFunc ``(x, table, y)`` equal to :func:`tvm_cocopie.topi.int8.sequence.softmax_func`
    on an NHWC map ``shape`` of segments of ``length`` (``segments``: per byte table, the
    32-entry segments that hold non-zero entries)."""
    size = 1
    for dim in shape:
        size *= dim
    sh = RECIP_BITS - 16 + inv_k
    params = [("x", shape, "uint8"), ("table", (2, 8, VBYTES), "uint8"), ("y", shape, "uint8")]
    with kernel("softmax_hvx", params) as ((xb, tab, yb), out):
        x, y = (T.decl_buffer((size,), "uint8", data=b.data) for b in (xb, yb))
        tables = [[bind(hvx.as_vec(tab[b, s, ramp(0, VBYTES)])) for s in range(8)]
                  for b in range(2)]
        scratch, rem, quot = (vec_buffer(n) for n in ("scratch", "rem", "quot"))
        with T.serial(size // VBYTES) as t:
            xv = bind(hvx.as_vec(x[ramp(t * VBYTES, VBYTES)]))
            mx = _segment_reduce(scratch, xv, 1, length, hvx.vmaxub)
            d = bind(hvx.as_vec(hvx.as_bytes(mx) - hvx.as_bytes(xv)))
            lo, hi = (bind(_lookup(d, tables[b], segments[b])) for b in range(2))
            ones = tirx.const(_ONES, "int32")
            total = (hvx.vrmpybus(hi, ones) << _splat(8)) + hvx.vrmpybus(lo, ones)
            total = bind(_segment_reduce(scratch, total, 4, length, lambda a, b: a + b))
            _reciprocal(rem, quot, total)
            mult = bind(vload(quot) * _splat(inv_m))
            lo_pair, hi_pair = bind(hvx.vzb(lo)), bind(hvx.vzb(hi))
            # e of bytes 2j (even) and 2j + 1 (odd) as halfwords: word i holds bytes 4i, 4i + 2
            # (even) or 4i + 1, 4i + 3 (odd) in its low and high halfwords
            e_even = bind((hvx.lo(hi_pair) << _splat(8)) | hvx.lo(lo_pair))
            e_odd = bind((hvx.hi(hi_pair) << _splat(8)) | hvx.hi(lo_pair))
            ys = [((hvx.vmpyewuh(mult, e) + _splat(1 << (sh - 1))) >> _splat(sh)) + _splat(zy)
                  for e in (e_even, e_odd, hvx.vlsrw(e_even, 16), hvx.vlsrw(e_odd, 16))]
            T.buffer_store(y, hvx.saturate_interleave4(*ys), [ramp(t * VBYTES, VBYTES)])
    return out[0]

"""Attention products on HVX: ``Q K^T`` and ``P V`` per head, in the 4-column layout.

A transformer's two activation x activation products (seed 004, ch. 4: GCD²'s
transformer models) are matrix products whose "weights" are activations: ``vrmpy`` with
``Vu`` = 32 rows x 4 reduction bytes of the left operand (the 4-column grid as it is)
and ``Rt`` = the 4 matching bytes of one output column of the right operand. Zero points
are handled around the integer product:

``sum (a - za)(b - zb) = sum a * (b - 128) + (128 - zb) * sum a - za * sum b + n za zb``

with ``b - 128`` the signed byte ``b ^ 0x80`` (``vrmpy`` multiplies unsigned by signed),
``sum a`` per row one more ``vrmpy`` with the word ``0x01010101``, and ``sum b`` per
output column a scalar. ``K``'s 4 reduction bytes of a key are one word of its grid;
``V``'s are 4 keys of one channel, gathered once into a word table. Results are
requantized (one ``vmpye``) and stored as the 4-column output grid.

:func:`attention_kernel` replaces :func:`tvm_cocopie.topi.int8.hvx.qattention_grid`
(same signature, bit-identical: tested under ``qemu-hexagon``).
"""

from __future__ import annotations

from tvm import tirx

from ...topi.int8.layouts import VBYTES
from . import hvx
from .gemm import requant4
from .tirgen import T, bind, kernel, ramp, vec_buffer, vload, vstore

_ONES = 0x01010101
_FLIP = -0x7F7F7F80  # 0x80808080 as int32


def _word(buf, g, row):
    """The 4 bytes ``buf[g, row, 0:4]`` as one int32."""
    return tirx.reinterpret("int32", buf[g, row, ramp(0, 4)])


def attention_kernel(kind: str, heads: int, s: int, a_shape: tuple, b_shape: tuple, za: int,
                     zb: int, rq):
    """PrimFunc ``(a, b, y)``: ``kind`` ``"qk"`` (``a`` = Q, ``b`` = K, ``S x H*S`` out)
    or ``"pv"`` (``a`` = P, ``b`` = V, ``S x D`` out), all 4-column grids of ``s`` valid
    rows; ``y`` has ``a``'s rows."""
    rows = a_shape[1]
    gb = b_shape[0]
    d = gb * 4
    dh = d // heads
    if kind == "qk":
        red_groups, out_groups = dh // 4, heads * s // 4  # reduction over a head's channels
    else:
        red_groups, out_groups = s // 4, d // 4  # reduction over the keys
    y_shape = (out_groups, rows, 4)
    n_red = red_groups * 4
    params = [("a", a_shape, "uint8"), ("b", b_shape, "uint8"), ("y", y_shape, "uint8")]
    const = za * zb * n_red
    with kernel(f"attention_{kind}_hvx", params) as ((a, b, y), out):
        # per output column: sum of b's bytes over the reduction, and (pv) b's words
        csum = T.alloc_buffer((out_groups * 4,), "int32", scope="global")
        if kind == "pv":
            vt = T.alloc_buffer((d, red_groups), "int32", scope="global")
            with T.grid(d, red_groups) as (c, q):
                word = tirx.const(0, "int32")
                for i in range(4):
                    byte = b[c // 4, q * 4 + i, c % 4].astype("int32")
                    word = word | (byte << i * 8)
                T.buffer_store(vt, word, [c, q])
            with T.serial(d) as c:
                T.buffer_store(csum, tirx.const(0, "int32"), [c])
                with T.serial(s) as t:
                    T.buffer_store(csum, csum[c] + b[c // 4, t, c % 4].astype("int32"), [c])
        else:
            with T.grid(heads, s) as (h, t):
                T.buffer_store(csum, tirx.const(0, "int32"), [h * s + t])
                with T.serial(dh) as e:
                    ch = h * dh + e
                    T.buffer_store(csum, csum[h * s + t] + b[ch // 4, t, ch % 4].astype("int32"),
                                   [h * s + t])
        rsum = vec_buffer("rsum")
        accs = [vec_buffer(f"acc{j}") for j in range(4)]
        flip = tirx.const(_FLIP, "int32")
        # (128 - zb) * sum(a) by vrmpy with its two halves as signed bytes (no 32-bit multiply)
        c1 = (128 - zb) // 2
        halves = [tirx.const(((c & 0xFF) * _ONES) - (1 << 32 if c < 0 else 0), "int32")
                  for c in (c1, 128 - zb - c1)]
        with T.grid(heads, rows // 32) as (h, p):
            r0 = p * 32
            base = h * (dh // 4) if kind == "qk" else h * (s // 4)  # a's groups of the head
            vstore(rsum, tirx.Broadcast(tirx.const(const, "int32"), 32))
            with T.serial(red_groups) as g:
                vec = bind(hvx.as_vec(a[base + g, r0, ramp(0, VBYTES)]))
                for half in halves:
                    vstore(rsum, hvx.vrmpybus_acc(vload(rsum), vec, half))
            row_term = bind(vload(rsum))
            per_head = s // 4 if kind == "qk" else dh // 4  # output groups of the head
            with T.serial(per_head) as og:
                col0 = (h * per_head + og) * 4  # first output column of this group
                for j in range(4):
                    vstore(accs[j], row_term - tirx.Broadcast(
                        tirx.const(za, "int32") * csum[col0 + j], 32))
                with T.serial(red_groups) as g:
                    vec = bind(hvx.as_vec(a[base + g, r0, ramp(0, VBYTES)]))
                    for j in range(4):
                        if kind == "qk":  # key col0 - h*s + j, channels of group g
                            word = _word(b, h * (dh // 4) + g, col0 - h * s + j)
                        else:  # channel col0 + j, keys 4g .. 4g+3
                            word = vt[col0 + j, g]
                        vstore(accs[j], hvx.vrmpybus_acc(vload(accs[j]), vec, word ^ flip))
                T.buffer_store(y, requant4(rq, [vload(acc) for acc in accs]),
                               [h * per_head + og, r0, ramp(0, VBYTES)])
    return out[0]

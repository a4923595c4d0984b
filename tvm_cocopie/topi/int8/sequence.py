"""Integer-only transformer operators on uint8 tensors: attention products, softmax and
layer norm in fixed point (seed 004, ch. 4: GCD²'s transformer models run 8-bit).

A sequence ``[S, D]`` is held as the NHWC map ``[1, 1, S, D]`` (one row of ``S``
pixels), so fully connected layers are the 1x1 convolutions of :mod:`.compute`. Heads are
channel segments: ``D = H * dh``; attention scores of head ``h`` are channels
``h*S .. h*S + S - 1`` of a ``[1, 1, S, H*S]`` map.

Each operator has a numpy reference (the executor's ground truth, exact integer
arithmetic in int64) and a TE compute on the NHWC maps that equals it bit for bit:

- :class:`AttentionProduct`: ``rq(sum (a - za) * (b - zb))`` for ``Q K^T`` per head
  (``kind="qk"``) and ``P V`` per head (``kind="pv"``);
- :class:`Softmax`: per row and segment, ``e = EXP[max - x]`` from a 256-entry table of
  ``round(2**15 * exp(-d * sx))``, one reciprocal ``floor(2**30 / sum(e))`` per segment
  and per element ``y = zy + round(e * R / 2**(30 + k))`` with ``R`` that reciprocal times
  ``1 / sy = m / 2**k`` (a 15-bit fixed-point multiplier);
- :class:`LayerNorm`: per row, int32 sums of ``x`` and ``x**2``, the integer square root
  of ``D * sum(x**2) - sum(x)**2 + eps`` (bit by bit) and a 16-bit multiplier of its
  reciprocal (one division per row), the normalized value in int16 and ``gamma / sy``,
  ``beta / sy`` as fixed-point per-channel constants.

Both are defined for HVX's lanes (issue 21): every per-element step is 16- or 32-bit,
the 64-bit work is per row or segment. Their PrimFuncs carry a descriptor
(:func:`tvm_cocopie.topi.int8.hvx.describe`), and on Hexagon the schedule rule replaces
them by HVX kernels of the same signature, bit-identical
(:mod:`tvm_cocopie.hexagon.kernels.softmax`, :mod:`~tvm_cocopie.hexagon.kernels.layernorm`).

They agree with ONNX Runtime's float kernels within a quantization step (stated and
measured per layer in :mod:`tvm_cocopie.hexagon.executor.model`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .compute import Requant
from .hvx import describe
from .layouts import VBYTES

#: Fraction bits of the softmax's exponential table: ``EXP[0] = 2**15`` is an unsigned
#: halfword, a segment's sum at least ``2**15``.
EXP_BITS = 15
#: Per-segment reciprocals ``floor(2**RECIP_BITS / sum(e))``: at most ``2**15`` (times the
#: 15-bit ``1 / sy`` multiplier: int32), no per-element division.
RECIP_BITS = 30
#: Largest layer norm row: ``sum(x**2)`` stays int32 and ``D`` an int16 for HVX's multiply.
MAX_LN_CHANNELS = 16384


def _fixed(value: float, bits: int = 15) -> tuple:
    """``(m, k)`` with ``m / 2**k ~= value``, ``m`` in ``[2**(bits-1), 2**bits)``."""
    k = bits - 1 - math.floor(math.log2(value))
    m = round(value * 2.0**k)
    if m >= 2**bits:
        m, k = m // 2, k - 1
    return m, k


@dataclass(frozen=True)
class AttentionProduct:
    """A per-head product of two uint8 sequences: ``qk``: ``a [S, H*dh]`` times ``b [S,
    H*dh]`` transposed per head -> ``[S, H*S]``; ``pv``: ``a [S, H*S]`` times ``b [S,
    H*dh]`` -> ``[S, H*dh]``; requantized by ``rq``."""

    kind: str
    heads: int
    za: int
    zb: int
    rq: Requant

    def numpy(self, a, b) -> np.ndarray:
        """Reference on NHWC maps ``[1, 1, S, C]``."""
        s = a.shape[2]
        h = self.heads
        av = a[0, 0].astype(np.int64) - self.za
        bv = b[0, 0].astype(np.int64) - self.zb
        bh = bv.reshape(s, h, -1)
        if self.kind == "qk":
            acc = np.einsum("shd,thd->sht", av.reshape(s, h, -1), bh)
        else:
            acc = np.einsum("sht,thd->shd", av.reshape(s, h, s), bh)
        return self.rq.numpy(acc.reshape(1, 1, s, -1))

    def out_channels(self, s: int, b_channels: int) -> int:
        """Channels of the output map."""
        return self.heads * s if self.kind == "qk" else b_channels

    def te(self, a, b):
        """TE compute of :meth:`numpy` on placeholders ``a``, ``b`` (NHWC)."""
        from tvm import te, tirx

        s = int(a.shape[2])
        h = self.heads
        dh = int(b.shape[3]) // h
        c = te.reduce_axis((0, dh if self.kind == "qk" else s), "r")
        za, zb = tirx.const(self.za, "int32"), tirx.const(self.zb, "int32")

        def qk(n, i, j, ch):
            head, t = ch // s, ch % s
            return te.sum((a[n, i, j, head * dh + c].astype("int32") - za)
                          * (b[n, i, t, head * dh + c].astype("int32") - zb), axis=c)

        def pv(n, i, j, ch):
            head = ch // dh
            return te.sum((a[n, i, j, head * s + c].astype("int32") - za)
                          * (b[n, i, c, ch].astype("int32") - zb), axis=c)

        shape = (1, 1, s, self.out_channels(s, int(b.shape[3])))
        acc = te.compute(shape, qk if self.kind == "qk" else pv, name="acc")
        return te.compute(shape, lambda *i: self.rq.te(acc[i]), name="y")


@dataclass(frozen=True)
class Softmax:
    """Softmax over segments of ``length`` channels, uint8 ``(sx, zx)`` -> ``(sy, zy)``.

    Per segment: ``e = EXP[max - x]`` (``round(2**15 * exp(-d * sx))``: at most ``2**15``,
    an unsigned halfword), ``q = floor(2**30 / sum(e))`` (``sum(e) >= 2**15``, so ``q``
    fits 15 bits: a 16-step long division, vectorized over segments on HVX), ``R = q *
    inv_m`` with ``1 / sy = inv_m / 2**inv_k``, and per element ``y = zy + round(floor(R *
    e / 2**16) / 2**out_shift)`` (one ``vmpye`` and a shift). Every step is exact in 32 bits.
    """

    length: int
    exp_table: tuple  # 256 entries: round(2**15 * exp(-d * sx))
    inv_m: int  # 1 / sy ~= inv_m / 2**inv_k, inv_m < 2**15
    inv_k: int
    zy: int

    @classmethod
    def from_scales(cls, length: int, sx: float, sy: float, zy: int) -> Softmax:
        """The fixed-point softmax of segments of ``length`` for these quantizations."""
        table = tuple(round(2.0**EXP_BITS * math.exp(-d * sx)) for d in range(256))
        m, k = _fixed(1.0 / sy)
        if RECIP_BITS - 16 + k < 1:
            raise ValueError(f"softmax output scale {sy} is too small for the fixed-point form")
        return cls(length, table, m, k, zy)

    @property
    def out_shift(self) -> int:
        """Right shift of ``floor(R * e / 2**16)`` to the output's units."""
        return RECIP_BITS - 16 + self.inv_k

    def table_bytes(self) -> np.ndarray:
        """The exponential table as two byte tables ``[2, 256]`` (low byte, high byte): HVX
        looks up bytes (``vlut32``); :meth:`te` reads them packed as
        :func:`tvm_cocopie.topi.int8.hvx.lut_grid` does."""
        e = np.asarray(self.exp_table, np.int64)
        return np.stack([e & 255, e >> 8]).astype(np.uint8)

    def table_segments(self) -> list:
        """Per byte table, the 32-entry segments holding a non-zero entry (lookups of the
        others can be skipped: a ``vlut32`` with no matching segment yields 0)."""
        return [[s for s in range(8) if t[32 * s: 32 * s + 32].any()] for t in self.table_bytes()]

    def numpy(self, x) -> np.ndarray:
        """Reference on an NHWC map whose channels are segments of ``length``."""
        shape = x.shape
        seg = x.reshape(-1, self.length).astype(np.int64)
        e = np.asarray(self.exp_table, np.int64)[seg.max(1, keepdims=True) - seg]
        r = ((1 << RECIP_BITS) // e.sum(1, keepdims=True)) * self.inv_m
        sh = self.out_shift
        y = ((((r * e) >> 16) + (1 << (sh - 1))) >> sh) + self.zy
        return np.clip(y, 0, 255).astype(np.uint8).reshape(shape)

    def te(self, x, table):
        """TE compute; ``table`` the packed byte tables ``[2, 8, 128]`` (uint8: entry ``e``
        of table ``b`` at ``[b, e // 32, 2 * (e % 32)]``, see :meth:`table_bytes`)."""
        from tvm import te, tirx

        shape = tuple(int(d) for d in x.shape)
        n_seg = shape[3] // self.length
        r = te.reduce_axis((0, self.length), "r")
        seg_shape = (1, 1, shape[2], n_seg)
        mx = te.compute(seg_shape, lambda n, i, j, g: te.max(
            x[n, i, j, g * self.length + r], axis=r), name="mx")
        r2 = te.reduce_axis((0, self.length), "r2")

        def e_of(n, i, j, ch, g):
            d = mx[n, i, j, g].astype("int32") - x[n, i, j, ch].astype("int32")
            lo, hi = (table[b, d // 32, (d % 32) * 2].astype("int32") for b in (0, 1))
            return hi * 256 + lo

        total = te.compute(seg_shape, lambda n, i, j, g: te.sum(
            e_of(n, i, j, g * self.length + r2, g), axis=r2), name="total")
        mult = te.compute(seg_shape, lambda *i: tirx.floordiv(
            tirx.const(1 << RECIP_BITS, "int32"), total[i]) * tirx.const(self.inv_m, "int32"),
            name="mult")
        sh = self.out_shift

        def body(n, i, j, ch):
            g = ch // self.length
            p = (mult[n, i, j, g].astype("int64") * e_of(n, i, j, ch, g).astype("int64")) >> \
                tirx.const(16, "int64")
            y = ((p.astype("int32") + tirx.const(1 << (sh - 1), "int32")) >>
                 tirx.const(sh, "int32")) + tirx.const(self.zy, "int32")
            return tirx.max(tirx.min(y, tirx.const(255, "int32")),
                            tirx.const(0, "int32")).astype("uint8")

        return te.compute(shape, body, name="y")


def norm_bits(d: int) -> int:
    """Fraction bits ``Q`` of the layer norm's normalized value: ``|n| < sqrt(d) * 2**Q``
    stays within an int16 (``15 - ceil(log2(d) / 2)``)."""
    return 15 - ((d - 1).bit_length() + 1) // 2


@dataclass(frozen=True)
class LayerNorm:
    """Layer norm over the channels of each pixel, uint8 ``(sx, zx)`` -> ``(sy, zy)``.

    Per row of ``D`` channels (the zero point cancels: ``D * xc - sum(xc) = D * x -
    sum(x)``): ``s1 = sum(x)``, ``s2 = sum(x**2)`` (int32), ``v = D * s2 - s1**2 + eps``
    (int64, per row), ``root = isqrt(v)`` bit by bit, a 16-bit multiplier ``m =
    floor((2**(r + 15) - 1) / root)`` (``r`` the bit length of ``root``: one division per
    row) and shifts so that per element ``n = (D * x - s1) * m / 2**(r + 15 - Q)`` is the
    normalized value in ``Q`` fraction bits (:func:`norm_bits`), saturated to int16.
    Then ``y = zy + round((n * g_c + b_c) / 2**shift)`` with ``g_c ~= gamma_c / sy *
    2**(shift - Q)`` (``|g_c| < 2**14``: ``n * g_c`` fits int32) and ``b_c ~= beta_c / sy *
    2**shift`` (clamped to ``2**30``, which saturates the output anyway: ``shift <= 20``).
    The per-element work is 16- and 32-bit lanes (HVX: ``vmpy`` halfwords, one ``vmpye``).
    """

    zx: int  # the input zero point (the normalization does not depend on it)
    zy: int
    gain: tuple = field(repr=False)
    offset: tuple = field(repr=False)
    shift: int = 0
    #: ``epsilon * D**2 / sx**2``: epsilon in the units of ``D * sum(xc**2) - sum(xc)**2``
    eps: int = 0

    @classmethod
    def from_params(cls, gamma, beta, zx: int, sy: float, zy: int, eps: float = 0.0,
                    sx: float = 1.0, d: int | None = None) -> LayerNorm:
        """Fixed-point per-channel constants of ``gamma``, ``beta`` for the output scale
        (``eps``, ``sx`` and ``d`` channels, default ``len(gamma)``: the epsilon in integer
        units)."""
        g = np.asarray(gamma, np.float64) / sy
        b = np.asarray(beta, np.float64) / sy
        channels = len(g)
        if channels > MAX_LN_CHANNELS:
            raise ValueError(f"layer norm over {channels} channels: at most {MAX_LN_CHANNELS} "
                             "(sums of x**2 in int32)")
        d = channels if d is None else d
        q = norm_bits(channels)
        top = max(float(np.abs(g).max()), 1e-9)
        p = max(1 - q, min(20 - q, 13 - math.floor(math.log2(top))))  # |g * 2**p| < 2**14
        shift = q + p
        lim = 2**14 - 1
        gain = tuple(int(v) for v in np.clip(np.rint(g * 2.0**p), -lim, lim))
        offset = tuple(int(v) for v in np.clip(np.rint(b * 2.0**shift), -(2**30), 2**30))
        return cls(zx, zy, gain, offset, shift, round(eps * d * d / (sx * sx)))

    def sqrt_bits(self, d: int) -> int:
        """Bits of ``isqrt(v)`` for rows of ``d`` bytes (``v <= d**2 * 127.5**2 + eps``)."""
        return max(1, math.isqrt(d * d * 65025 // 4 + self.eps).bit_length())

    def constants(self) -> tuple:
        """``(g, bb)`` per channel, int64: the gains and ``b_c + 2**(shift - 1)`` (the
        rounding folded in; fits int32). The output zero point stays in the compute."""
        g = np.asarray(self.gain, np.int64)
        return g, np.asarray(self.offset, np.int64) + (1 << (self.shift - 1))

    def packed_constants(self) -> tuple:
        """``(gain int16 [D], bias int32 [D])`` as :meth:`te` and the HVX kernel read them:
        for ``D`` a multiple of 128, each 128 channels' gains as even then odd channels
        (the halfword lanes of HVX's products) and biases as channels ``4i + t`` for ``t = 0..3``
        (its word lanes); otherwise in channel order."""
        g, bb = self.constants()
        d = len(g)
        if d % VBYTES:
            return g.astype(np.int16), bb.astype(np.int32)
        k = d // VBYTES
        gp = g.reshape(k, 64, 2).transpose(0, 2, 1).reshape(d)
        bp = bb.reshape(k, 32, 4).transpose(0, 2, 1).reshape(d)
        return gp.astype(np.int16), bp.astype(np.int32)

    def numpy(self, x) -> np.ndarray:
        """Reference on an NHWC map (normalized over the last axis)."""
        xs = x.astype(np.int64)
        d = xs.shape[-1]
        s1 = xs.sum(-1, keepdims=True)
        v = d * (xs * xs).sum(-1, keepdims=True) - s1 * s1 + self.eps
        root = np.maximum(_isqrt_np(v, self.sqrt_bits(d)), 1)
        r = np.frexp(root.astype(np.float64))[1].astype(np.int64)  # bit length (exact)
        m = ((np.int64(1) << (r + 15)) - 1) // root
        s = r + 15 - norm_bits(d)
        left, right = np.maximum(16 - s, 0), np.maximum(s - 16, 0)
        p = (((d * xs - s1) << left) * m) >> 16
        n = np.clip((p + ((np.int64(1) << right) >> 1)) >> right, -(2**15), 2**15 - 1)
        g, bb = self.constants()
        return np.clip(((n * g + bb) >> self.shift) + self.zy, 0, 255).astype(np.uint8)

    def te(self, x, gain, bias):
        """TE compute; ``gain`` (int16) / ``bias`` (int32) placeholders of
        :meth:`packed_constants`."""
        from tvm import te, tirx

        def c64(value):
            return tirx.const(value, "int64")

        shape = tuple(int(dim) for dim in x.shape)
        d = shape[3]
        row = shape[:3] + (1,)
        r = te.reduce_axis((0, d), "r")
        r2 = te.reduce_axis((0, d), "r2")

        def xi(n, i, j, ch):
            return x[n, i, j, ch].astype("int32")

        s1 = te.compute(row, lambda n, i, j, _: te.sum(xi(n, i, j, r), axis=r), name="s1")
        s2 = te.compute(row, lambda n, i, j, _: te.sum(xi(n, i, j, r2) * xi(n, i, j, r2),
                                                       axis=r2), name="s2")
        v = te.compute(row, lambda *i: c64(d) * s2[i].astype("int64")
                       - s1[i].astype("int64") * s1[i].astype("int64") + c64(self.eps), name="v")

        def sqrt_step(prev, bit):
            def step(*i):
                cand = prev[i] | c64(1 << bit)
                return tirx.if_then_else(cand * cand <= v[i], cand, prev[i])

            return te.compute(row, step, name=f"root{bit}")

        root = te.compute(row, lambda *i: c64(0), name="root")
        for bit in range(self.sqrt_bits(d) - 1, -1, -1):  # the largest r with r*r <= v
            root = sqrt_step(root, bit)
        root = te.compute(row, lambda *i: tirx.max(root[i], c64(1)), name="root_pos")
        bits = te.compute(row, lambda *i: c64(64) - tirx.clz(root[i]).astype("int64"),
                          name="bits")
        mult = te.compute(row, lambda *i: tirx.floordiv((c64(1) << (bits[i] + c64(15))) - c64(1),
                                                        root[i]), name="mult")
        q = norm_bits(d)
        left = te.compute(row, lambda *i: tirx.max(c64(1 + q) - bits[i], c64(0)), name="left")
        right = te.compute(row, lambda *i: tirx.max(bits[i] - c64(1 + q), c64(0)), name="right")
        full = d % VBYTES == 0

        def gpos(ch):
            return (ch // VBYTES) * VBYTES + (ch % 2) * 64 + (ch % VBYTES) // 2 if full else ch

        def bpos(ch):
            return (ch // VBYTES) * VBYTES + (ch % 4) * 32 + (ch % VBYTES) // 4 if full else ch

        def body(n, i, j, ch):
            t = (c64(d) * x[n, i, j, ch].astype("int64") - s1[n, i, j, 0].astype("int64"))
            p = ((t << left[n, i, j, 0]) * mult[n, i, j, 0]) >> c64(16)
            rt = right[n, i, j, 0]
            nv = (p + ((c64(1) << rt) >> c64(1))) >> rt
            nv = tirx.max(tirx.min(nv, c64(2**15 - 1)), c64(-(2**15)))
            y = ((nv * gain[gpos(ch)].astype("int64") + bias[bpos(ch)].astype("int64")) >>
                 c64(self.shift)) + c64(self.zy)
            return tirx.max(tirx.min(y, c64(255)), c64(0)).astype("uint8")

        return te.compute(shape, body, name="y")


def _isqrt_np(v: np.ndarray, bits: int) -> np.ndarray:
    """Floor integer square root of a non-negative int64 array below ``2**(2 * bits)``, bit
    by bit (as the TE)."""
    root = np.zeros_like(v)
    for bit in range(bits - 1, -1, -1):
        cand = root | (1 << bit)
        root = np.where(cand * cand <= v, cand, root)
    return root


# ------------------------------------------------------------------ PrimFuncs (NHWC)


def attention_func(op: AttentionProduct, a_shape: tuple, b_shape: tuple):
    """PrimFunc ``(a, b, y)`` of an :class:`AttentionProduct` on NHWC maps."""
    from tvm import te

    a = te.placeholder(a_shape, "uint8", name="a")
    b = te.placeholder(b_shape, "uint8", name="b")
    return te.create_prim_func([a, b, op.te(a, b)])


def softmax_func(op: Softmax, shape: tuple):
    """PrimFunc ``(x, table, y)`` of a :class:`Softmax` (``table``: the packed byte tables
    ``[2, 8, 128]`` of :meth:`Softmax.table_bytes`), with a descriptor for the HVX kernel
    (:mod:`tvm_cocopie.hexagon.kernels.softmax`)."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    t = te.placeholder((2, 8, VBYTES), "uint8", name="table")
    func = te.create_prim_func([x, t, op.te(x, t)])
    return describe(func, op="softmax", size=math.prod(shape), length=op.length,
                    rq=[op.inv_m, op.inv_k, op.zy], segments=op.table_segments())


def layernorm_func(op: LayerNorm, shape: tuple):
    """PrimFunc ``(x, gain, bias, y)`` of a :class:`LayerNorm` (int16 / int32 constants of
    :meth:`LayerNorm.packed_constants`), with a descriptor for the HVX kernel
    (:mod:`tvm_cocopie.hexagon.kernels.layernorm`)."""
    from tvm import te

    d = shape[3]
    x = te.placeholder(shape, "uint8", name="x")
    g = te.placeholder((d,), "int16", name="gain")
    b = te.placeholder((d,), "int32", name="bias")
    func = te.create_prim_func([x, g, b, op.te(x, g, b)])
    return describe(func, op="layernorm", rows=math.prod(shape[:3]), d=d, eps=op.eps,
                    shift=op.shift, zy=op.zy, bits=op.sqrt_bits(d))

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
  ``round(2**16 * exp(-d * sx))``, ``y = zy + round(e * m * floor(2**40 / sum(e)) /
  2**(40 + k))`` with ``1 / sy = m / 2**k`` a 15-bit fixed-point multiplier: one integer
  division per row;
- :class:`LayerNorm`: per row, integer sums of ``xc = x - zx`` and ``xc**2``, the integer
  square root of ``D * sum(xc**2) - sum(xc)**2`` (bit by bit) and its reciprocal (one
  division per row), the normalized value in Q15 and ``gamma / sy``, ``beta / sy`` as
  fixed-point per-channel constants.

They agree with ONNX Runtime's float kernels within a quantization step (stated and
measured per layer in :mod:`tvm_cocopie.hexagon.executor.model`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .compute import Requant

#: Fraction bits of the softmax's exponential table and the layer norm's normalized value.
EXP_BITS = 16
NORM_BITS = 15
#: Bits of the integer square root (``D * sum(xc**2)`` stays under ``2**62``).
SQRT_BITS = 31
#: Per-row reciprocals ``floor(2**RECIP_BITS / d)``: one division per row, then
#: multiplications (a per-element 64-bit division is a library call on Hexagon).
RECIP_BITS = 40


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
    """Softmax over segments of ``length`` channels, uint8 ``(sx, zx)`` -> ``(sy, zy)``."""

    length: int
    exp_table: tuple  # 256 entries: round(2**16 * exp(-d * sx))
    inv_m: int  # 1 / sy ~= inv_m / 2**inv_k
    inv_k: int
    zy: int

    @classmethod
    def from_scales(cls, length: int, sx: float, sy: float, zy: int) -> Softmax:
        """The fixed-point softmax of segments of ``length`` for these quantizations."""
        table = tuple(round(2.0**EXP_BITS * math.exp(-d * sx)) for d in range(256))
        m, k = _fixed(1.0 / sy)
        return cls(length, table, m, k, zy)

    def numpy(self, x) -> np.ndarray:
        """Reference on an NHWC map whose channels are segments of ``length``."""
        shape = x.shape
        seg = x.reshape(-1, self.length).astype(np.int64)
        e = np.asarray(self.exp_table, np.int64)[seg.max(1, keepdims=True) - seg]
        recip = (1 << RECIP_BITS) // e.sum(1, keepdims=True)
        sh = RECIP_BITS + self.inv_k
        y = ((e * self.inv_m * recip + (1 << (sh - 1))) >> sh) + self.zy
        return np.clip(y, 0, 255).astype(np.uint8).reshape(shape)

    def te(self, x, table):
        """TE compute; ``table`` the exp table placeholder (int32 [256])."""
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
            return table[d].astype("int64")

        total = te.compute(seg_shape, lambda n, i, j, g: te.sum(
            e_of(n, i, j, g * self.length + r2, g), axis=r2), name="total")
        recip = te.compute(seg_shape, lambda *i: tirx.floordiv(
            tirx.const(1 << RECIP_BITS, "int64"), total[i]), name="recip")
        sh = RECIP_BITS + self.inv_k

        def body(n, i, j, ch):
            g = ch // self.length
            num = e_of(n, i, j, ch, g) * tirx.const(self.inv_m, "int64") * recip[n, i, j, g]
            y = ((num + tirx.const(1 << (sh - 1), "int64")) >> tirx.const(sh, "int64")) + \
                tirx.const(self.zy, "int64")
            return tirx.max(tirx.min(y, tirx.const(255, "int64")),
                            tirx.const(0, "int64")).astype("uint8")

        return te.compute(shape, body, name="y")


@dataclass(frozen=True)
class LayerNorm:
    """Layer norm over the channels of each pixel, uint8 ``(sx, zx)`` -> ``(sy, zy)``:
    ``y = zy + round((n * g_c + b_c) / 2**shift)`` with ``n`` the Q15 normalized value,
    ``g_c ~= gamma_c / sy * 2**(shift - 15)`` and ``b_c ~= beta_c / sy * 2**shift``."""

    zx: int
    zy: int
    gain: tuple = field(repr=False)
    offset: tuple = field(repr=False)
    shift: int = 0
    #: ``epsilon * D**2 / sx**2``: epsilon in the units of ``D * sum(xc**2) - sum(xc)**2``
    eps: int = 0

    @classmethod
    def from_params(cls, gamma, beta, zx: int, sy: float, zy: int, eps: float = 0.0,
                    sx: float = 1.0, d: int = 1) -> LayerNorm:
        """Fixed-point per-channel constants of ``gamma``, ``beta`` for the output scale
        (``eps``, ``sx`` and ``d`` channels: the epsilon in integer units)."""
        g = np.asarray(gamma, np.float64) / sy
        b = np.asarray(beta, np.float64) / sy
        top = max(float(np.abs(g).max()), 1e-9)
        p = min(30, 14 - math.floor(math.log2(top)))  # |g * 2**p| < 2**15
        shift = NORM_BITS + p
        gain = tuple(int(v) for v in np.rint(g * 2.0**p))
        offset = tuple(int(v) for v in np.rint(b * 2.0**shift))
        return cls(zx, zy, gain, offset, shift, round(eps * d * d / (sx * sx)))

    def numpy(self, x) -> np.ndarray:
        """Reference on an NHWC map (normalized over the last axis)."""
        xc = x.astype(np.int64) - self.zx
        d = xc.shape[-1]
        s1 = xc.sum(-1, keepdims=True)
        v = d * (xc * xc).sum(-1, keepdims=True) - s1 * s1 + self.eps
        recip = (1 << RECIP_BITS) // np.maximum(_isqrt_np(v), 1)
        n = ((d * xc - s1) * recip) >> (RECIP_BITS - NORM_BITS)  # Q15
        g, b = np.asarray(self.gain, np.int64), np.asarray(self.offset, np.int64)
        y = ((n * g + b + (1 << (self.shift - 1))) >> self.shift) + self.zy
        return np.clip(y, 0, 255).astype(np.uint8)

    def te(self, x, gain, offset):
        """TE compute; ``gain``/``offset`` int64 placeholders of the channel constants."""
        from tvm import te, tirx

        shape = tuple(int(dim) for dim in x.shape)
        d = shape[3]
        row = shape[:3] + (1,)
        r = te.reduce_axis((0, d), "r")
        r2 = te.reduce_axis((0, d), "r2")

        def xc(n, i, j, ch):
            return x[n, i, j, ch].astype("int64") - tirx.const(self.zx, "int64")

        s1 = te.compute(row, lambda n, i, j, _: te.sum(xc(n, i, j, r), axis=r), name="s1")
        s2 = te.compute(row, lambda n, i, j, _: te.sum(xc(n, i, j, r2) * xc(n, i, j, r2),
                                                       axis=r2), name="s2")
        v = te.compute(row, lambda n, i, j, z: tirx.const(d, "int64") * s2[n, i, j, z]
                       - s1[n, i, j, z] * s1[n, i, j, z] + tirx.const(self.eps, "int64"),
                       name="v")
        def sqrt_step(prev, bit):
            def step(n, i, j, z):
                cand = prev[n, i, j, z] | tirx.const(1 << bit, "int64")
                return tirx.if_then_else(cand * cand <= v[n, i, j, z], cand, prev[n, i, j, z])

            return te.compute(row, step, name=f"root{bit}")

        root = te.compute(row, lambda *i: tirx.const(0, "int64"), name="root")
        for bit in range(SQRT_BITS - 1, -1, -1):  # bit by bit: the largest r with r*r <= v
            root = sqrt_step(root, bit)

        recip = te.compute(row, lambda *i: tirx.floordiv(
            tirx.const(1 << RECIP_BITS, "int64"), tirx.max(root[i], tirx.const(1, "int64"))),
            name="recip")

        def body(n, i, j, ch):
            num = (tirx.const(d, "int64") * xc(n, i, j, ch) - s1[n, i, j, 0]) * recip[n, i, j, 0]
            q = num >> tirx.const(RECIP_BITS - NORM_BITS, "int64")
            y = (q * gain[ch] + offset[ch] + tirx.const(1 << (self.shift - 1), "int64")) >> \
                tirx.const(self.shift, "int64")
            y = y + tirx.const(self.zy, "int64")
            return tirx.max(tirx.min(y, tirx.const(255, "int64")),
                            tirx.const(0, "int64")).astype("uint8")

        return te.compute(shape, body, name="y")


def _isqrt_np(v: np.ndarray) -> np.ndarray:
    """Floor integer square root of a non-negative int64 array, bit by bit (as the TE)."""
    root = np.zeros_like(v)
    for bit in range(SQRT_BITS - 1, -1, -1):
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
    """PrimFunc ``(x, table, y)`` of a :class:`Softmax` (``table``: int32 [256])."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    t = te.placeholder((256,), "int32", name="table")
    return te.create_prim_func([x, t, op.te(x, t)])


def layernorm_func(op: LayerNorm, shape: tuple):
    """PrimFunc ``(x, gain, offset, y)`` of a :class:`LayerNorm` (int64 constants)."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    g = te.placeholder((shape[3],), "int64", name="gain")
    b = te.placeholder((shape[3],), "int64", name="offset")
    return te.create_prim_func([x, g, b, op.te(x, g, b)])

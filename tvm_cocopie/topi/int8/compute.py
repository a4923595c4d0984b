"""Quantized int8 operators as TE computes: what every target's kernel must equal.

GCD² (seed 004, §4.3) works on 8-bit DNNs: "the product between two 8-bit values
should be stored in 16-bits ..., accumulating several such products requires 32-bits
... a requantization phase is required to generate the 8-bit final output". This
module fixes that arithmetic once, for every target:

- activations ``uint8``, weights ``int8``, accumulation ``int32`` plus an ``int32``
  bias per output channel (activation zero points fold into the bias);
- requantization :class:`Requant`: ``clip(((acc * m + 2**(s-1)) >> s) + zp, 0, 255)``
  with a 15-bit multiplier ``m`` and a shift ``s`` in [17, 40].

The computes here are written with plain TE so any TVM target can lower them; the
Hexagon kernels in :mod:`tvm_cocopie.hexagon.kernels.matmul` and :mod:`~tvm_cocopie.hexagon.kernels.conv2d`
are checked against them, and stock TVM's lowering of them is the baseline of
``scripts/bench_hexagon.py``. :mod:`.hvx` holds the same operators on GCD²'s
HVX layouts (what the Hexagon schedule rules replace by HVX kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Bounds of the requantization parameters (see :class:`Requant`).
MULTIPLIER_BITS = 15
SHIFT_RANGE = (17, 40)


@dataclass(frozen=True)
class Requant:
    """Per-tensor requantization ``int32 -> uint8``: ``clip(round(acc * m / 2**s) + zp)``.

    Rounding is half up (``+ 2**(s-1)`` then an arithmetic shift), as TFLite's
    ``MultiplyByQuantizedMultiplier`` up to its 31-bit multiplier. The 15-bit
    multiplier keeps every intermediate of :meth:`tir_int32` inside int32, so HVX
    evaluates it exactly without 64-bit lanes; its precision (2**-15 relative) is far
    below half an output step.
    """

    multiplier: int
    shift: int
    zero_point: int = 0

    def __post_init__(self):
        if not 1 <= self.multiplier < 2**MULTIPLIER_BITS:
            raise ValueError(f"multiplier {self.multiplier} is outside [1, 2**15)")
        if not SHIFT_RANGE[0] <= self.shift <= SHIFT_RANGE[1]:
            raise ValueError(f"shift {self.shift} is outside {list(SHIFT_RANGE)}")
        if not 0 <= self.zero_point <= 255:
            raise ValueError(f"zero point {self.zero_point} is outside [0, 255]")

    @classmethod
    def from_scale(cls, scale: float, zero_point: int = 0) -> Requant:
        """The closest ``m / 2**s`` to ``scale`` with ``m`` in [2**14, 2**15)."""
        if not scale > 0:
            raise ValueError(f"requantization scale must be positive, got {scale}")
        exponent = math.floor(math.log2(scale))
        shift = MULTIPLIER_BITS - 1 - exponent
        multiplier = round(scale * 2.0**shift)
        if multiplier >= 2**MULTIPLIER_BITS:
            multiplier //= 2
            shift -= 1
        shift = min(max(shift, SHIFT_RANGE[0]), SHIFT_RANGE[1])
        multiplier = min(max(round(scale * 2.0**shift), 1), 2**MULTIPLIER_BITS - 1)
        return cls(multiplier, shift, zero_point)

    @property
    def scale(self) -> float:
        """The real scale the fixed-point multiplier and shift stand for."""
        return self.multiplier / 2.0**self.shift

    def numpy(self, acc) -> np.ndarray:
        """Reference requantization of an int32 array, in int64 arithmetic."""
        acc = np.asarray(acc, dtype=np.int64)
        y = ((acc * self.multiplier + (1 << (self.shift - 1))) >> self.shift) + self.zero_point
        return np.clip(y, 0, 255).astype(np.uint8)

    def te(self, acc):
        """The TE/TIR expression of :meth:`numpy` for one int32 value (int64 arithmetic)."""
        from tvm import tirx

        wide = acc.astype("int64") * tirx.const(self.multiplier, "int64")
        y = (wide + tirx.const(1 << (self.shift - 1), "int64")) >> tirx.const(self.shift, "int64")
        y = y + tirx.const(self.zero_point, "int64")
        y = tirx.max(tirx.min(y, tirx.const(255, "int64")), tirx.const(0, "int64"))
        return y.astype("uint8")

    def tir_int32(self, acc, lanes: int = 1, mul_shr16=None):
        """``round(acc * m / 2**s) + zp`` in int32 only, before the clip; exact.

        Since ``s >= 17``, ``floor((acc*m + 2**(s-1)) / 2**s)
        = floor((floor(acc*m / 2**16) + 2**(s-17)) / 2**(s-16))``. The inner
        ``floor(acc*m / 2**16)`` is ``mul_shr16(acc, m)``; by default it is computed as
        ``hi*m + ((lo*m) >> 16)`` with ``acc = hi*2**16 + lo``, all inside int32
        (``|hi*m| < 2**30``, ``lo*m < 2**31``). A target may pass one instruction
        instead (HVX: ``vmpye``). ``acc`` is an int32 value of ``lanes`` lanes.
        """
        from tvm import tirx

        def c(v):
            k = tirx.const(v, "int32")
            return k if lanes == 1 else tirx.Broadcast(k, lanes)

        if mul_shr16 is None:

            def mul_shr16(v, m):
                hi, lo = v >> c(16), v & c(0xFFFF)
                return hi * c(m) + ((lo * c(m)) >> c(16))

        t = mul_shr16(acc, self.multiplier) + c(1 << (self.shift - 17))
        return (t >> c(self.shift - 16)) + c(self.zero_point)

    def numpy_int32(self, acc) -> np.ndarray:
        """:meth:`tir_int32` in numpy int32 arithmetic (to prove the identity)."""
        acc = np.asarray(acc, dtype=np.int32)
        hi, lo = acc >> 16, acc & 0xFFFF
        m = np.int32(self.multiplier)
        t = hi * m + np.int32(1 << (self.shift - 17)) + ((lo * m) >> 16)
        return (t >> np.int32(self.shift - 16)) + np.int32(self.zero_point)


@dataclass(frozen=True)
class AddRequant:
    """Requantized sum of two uint8 tensors of different scales and zero points (a
    residual add): ``clip((a * ma + b * mb + offset) >> s, 0, 255)``.

    ``ma / 2**s`` and ``mb / 2**s`` are the input-to-output scale ratios; ``offset``
    folds the rounding ``2**(s-1)``, the input zero points and the output zero point:
    ``y = zy + round((a - za) * ra + (b - zb) * rb)`` is
    ``(a*ma + b*mb + 2**(s-1) - za*ma - zb*mb + zy * 2**s) >> s`` (the ``zy * 2**s``
    term is a whole multiple of ``2**s``, so it passes the floor unchanged). With 15-bit
    multipliers and the shift kept where ``|offset| + 255 * (ma + mb) < 2**31``, every
    intermediate fits int32 and any target evaluates it exactly in 32-bit lanes.
    """

    ma: int
    mb: int
    shift: int
    offset: int | None = None  # None: 2**(shift-1) (zero points 0)

    def __post_init__(self):
        for m in (self.ma, self.mb):
            if not 0 <= m < 2**MULTIPLIER_BITS:
                raise ValueError(f"add multiplier {m} is outside [0, 2**15)")
        if not 1 <= self.shift <= 30:
            raise ValueError(f"add shift {self.shift} is outside [1, 30]")
        if self.offset is None:
            object.__setattr__(self, "offset", 1 << (self.shift - 1))
        if abs(self.offset) + 255 * (self.ma + self.mb) >= 2**31:
            raise ValueError(f"add offset {self.offset} overflows int32 with these multipliers")

    @classmethod
    def from_scales(cls, ratio_a: float, ratio_b: float, za: int = 0, zb: int = 0,
                    zy: int = 0) -> AddRequant:
        """The largest shift keeping both ``round(ratio * 2**s)`` under 2**15 and the
        offset of zero points ``za``, ``zb`` (inputs) and ``zy`` (output) inside int32."""
        top = max(ratio_a, ratio_b)
        if not top > 0:
            raise ValueError(f"add scale ratios must be positive, got {ratio_a}, {ratio_b}")
        shift = min(30, MULTIPLIER_BITS - 1 - math.floor(math.log2(top)))
        while True:
            ma, mb = round(ratio_a * 2.0**shift), round(ratio_b * 2.0**shift)
            offset = (1 << (shift - 1)) - za * ma - zb * mb + (zy << shift)
            if max(ma, mb) < 2**MULTIPLIER_BITS and abs(offset) + 255 * (ma + mb) < 2**31:
                return cls(ma, mb, shift, offset)
            shift -= 1

    def numpy(self, a, b) -> np.ndarray:
        """The requantized sum of uint8 arrays ``a`` and ``b`` in numpy (the reference)."""
        y = a.astype(np.int64) * self.ma + b.astype(np.int64) * self.mb
        return np.clip((y + self.offset) >> self.shift, 0, 255).astype(np.uint8)

    def te(self, a, b):
        """The TIR expression of :meth:`numpy` for two uint8 values (int32 arithmetic)."""
        from tvm import tirx

        def c(v):
            return tirx.const(v, "int32")

        y = a.astype("int32") * c(self.ma) + b.astype("int32") * c(self.mb)
        y = (y + c(self.offset)) >> c(self.shift)
        return tirx.max(tirx.min(y, c(255)), c(0)).astype("uint8")


@dataclass(frozen=True)
class MulRequant:
    """Requantized product of two uint8 tensors (hard-swish's ``x * hardsigmoid(x)``, a
    squeeze-excitation scale): ``rq((a - za) * (b - zb))``.

    The product of two centred 8-bit values fits 17 bits, so :meth:`Requant.tir_int32`
    evaluates the requantization exactly in int32 lanes."""

    za: int
    zb: int
    rq: Requant

    @classmethod
    def from_scales(cls, sa: float, za: int, sb: float, zb: int, sy: float, zy: int):
        """The product of ``(a - za) * sa`` and ``(b - zb) * sb`` quantized as ``(sy, zy)``."""
        return cls(za, zb, Requant.from_scale(sa * sb / sy, zy))

    def numpy(self, a, b) -> np.ndarray:
        """The reference on uint8 arrays (broadcasting as numpy does)."""
        p = (a.astype(np.int64) - self.za) * (b.astype(np.int64) - self.zb)
        return self.rq.numpy(p)

    def te(self, a, b):
        """The TIR expression of :meth:`numpy` for two uint8 values (int32 only)."""
        from tvm import tirx

        p = (a.astype("int32") - tirx.const(self.za, "int32")) * (
            b.astype("int32") - tirx.const(self.zb, "int32"))
        y = self.rq.tir_int32(p)
        return tirx.max(tirx.min(y, tirx.const(255, "int32")), tirx.const(0, "int32")).astype(
            "uint8")


# ------------------------------------------------------------------------- TE computes


def qmatmul(x, w, bias, rq: Requant, name: str = "qmatmul"):
    """``y[m, n] = rq(sum_k x[m, k] * w[k, n] + bias[n])``; x uint8 [M, K], w int8 [K, N]."""
    from tvm import te

    _, k_dim = x.shape
    k = te.reduce_axis((0, k_dim), name="k")
    acc = te.compute(
        (x.shape[0], w.shape[1]),
        lambda i, j: te.sum(x[i, k].astype("int32") * w[k, j].astype("int32"), axis=k),
        name=f"{name}_acc",
    )
    return te.compute(acc.shape, lambda i, j: rq.te(acc[i, j] + bias[j]), name=name)


def conv2d_output_size(size: int, kernel: int, stride: int, pad: int) -> int:
    """Output size of a convolution along one axis."""
    return (size + 2 * pad - kernel) // stride + 1


def _zero_pad_nhwc(x, pad: int, name: str, value: int = 0):
    """uint8 NHWC ``x`` with ``pad`` elements of ``value`` (the input's zero point: a real
    zero) on each side of H and W (shared by the convs)."""
    from tvm import te, tirx

    _, h, wd, c = (int(d) for d in x.shape)
    return te.compute(
        (1, h + 2 * pad, wd + 2 * pad, c),
        lambda n, i, j, ci: tirx.if_then_else(
            tirx.all(i >= pad, i < h + pad, j >= pad, j < wd + pad),
            x[n, i - pad, j - pad, ci],
            tirx.const(value, "uint8"),
        ),
        name=f"{name}_pad",
    )


def qconv2d_nhwc(x, w, bias, rq: Requant, stride: int = 1, pad: int = 0, name: str = "qconv2d",
                 pad_value: int = 0):
    """NHWC int8 convolution: x uint8 [1, H, W, C], w int8 [KH, KW, C, O] (HWIO), padded
    with ``pad_value`` (the input's zero point, folded into ``bias``)."""
    from tvm import te

    _, h, wd, c = (int(d) for d in x.shape)
    kh, kw, _, o = (int(d) for d in w.shape)
    oh, ow = conv2d_output_size(h, kh, stride, pad), conv2d_output_size(wd, kw, stride, pad)
    padded = _zero_pad_nhwc(x, pad, name, pad_value)
    ry, rx, rc = (
        te.reduce_axis((0, kh), "ry"),
        te.reduce_axis((0, kw), "rx"),
        te.reduce_axis((0, c), "rc"),
    )
    acc = te.compute(
        (1, oh, ow, o),
        lambda n, i, j, co: te.sum(
            padded[n, i * stride + ry, j * stride + rx, rc].astype("int32")
            * w[ry, rx, rc, co].astype("int32"),
            axis=[ry, rx, rc],
        ),
        name=f"{name}_acc",
    )
    return te.compute(acc.shape, lambda *i: rq.te(acc[i] + bias[i[3]]), name=name)


def qdepthwise_conv2d_nhwc(x, w, bias, rq: Requant, stride=1, pad=0, name="qdwconv2d",
                           pad_value: int = 0):
    """Depthwise NHWC int8 convolution: x uint8 [1, H, W, C], w int8 [KH, KW, C], padded
    with ``pad_value``."""
    from tvm import te

    _, h, wd, c = (int(d) for d in x.shape)
    kh, kw, _ = (int(d) for d in w.shape)
    oh, ow = conv2d_output_size(h, kh, stride, pad), conv2d_output_size(wd, kw, stride, pad)
    padded = _zero_pad_nhwc(x, pad, name, pad_value)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    acc = te.compute(
        (1, oh, ow, c),
        lambda n, i, j, ci: te.sum(
            padded[n, i * stride + ry, j * stride + rx, ci].astype("int32")
            * w[ry, rx, ci].astype("int32"),
            axis=[ry, rx],
        ),
        name=f"{name}_acc",
    )
    return te.compute(acc.shape, lambda *i: rq.te(acc[i] + bias[i[3]]), name=name)


# --------------------------------------------------------------- whole PrimFuncs


def qmatmul_func(m: int, k: int, n: int, rq: Requant):
    """A PrimFunc ``(x, w, bias, y)`` of :func:`qmatmul`, unscheduled (stock TVM's view)."""
    from tvm import te

    x = te.placeholder((m, k), "uint8", name="x")
    w = te.placeholder((k, n), "int8", name="w")
    b = te.placeholder((n,), "int32", name="bias")
    return te.create_prim_func([x, w, b, qmatmul(x, w, b, rq)])


def qconv2d_func(h, w_, c, o, kernel, stride, pad, rq: Requant, depthwise=False, pad_value=0):
    """A PrimFunc ``(x, w, bias, y)`` of the NHWC (depthwise) convolution, unscheduled."""
    from tvm import te

    x = te.placeholder((1, h, w_, c), "uint8", name="x")
    b = te.placeholder((o,), "int32", name="bias")
    if depthwise:
        wt = te.placeholder((kernel, kernel, c), "int8", name="w")
        y = qdepthwise_conv2d_nhwc(x, wt, b, rq, stride, pad, pad_value=pad_value)
    else:
        wt = te.placeholder((kernel, kernel, c, o), "int8", name="w")
        y = qconv2d_nhwc(x, wt, b, rq, stride, pad, pad_value=pad_value)
    return te.create_prim_func([x, wt, b, y])


def qadd_func(shape: tuple, arq: AddRequant, b_shape: tuple | None = None):
    """A PrimFunc ``(a, b, y)`` of :class:`AddRequant` on uint8 NHWC tensors, ``b`` of
    ``shape`` or ``(1, 1, 1, C)`` (a per-channel vector broadcast over the pixels)."""
    from tvm import te

    a = te.placeholder(shape, "uint8", name="a")
    b = te.placeholder(b_shape or shape, "uint8", name="b")
    full = tuple(b_shape or shape) == tuple(shape)
    y = te.compute(shape, lambda n, i, j, c: arq.te(a[n, i, j, c],
                                                    b[n, i, j, c] if full else b[0, 0, 0, c]),
                   name="y")
    return te.create_prim_func([a, b, y])


def mul_func(shape: tuple, b_shape: tuple, mrq: MulRequant):
    """A PrimFunc ``(a, b, y)``: :class:`MulRequant` of uint8 NHWC ``a`` and ``b``, ``b``
    of ``shape`` or ``(1, 1, 1, C)`` (broadcast over the pixels)."""
    from tvm import te

    a = te.placeholder(shape, "uint8", name="a")
    b = te.placeholder(b_shape, "uint8", name="b")
    full = tuple(b_shape) == tuple(shape)  # equal NHWC shapes: no broadcast (1x1 maps too)
    y = te.compute(shape, lambda n, i, j, c: mrq.te(a[n, i, j, c],
                                                    b[n, i, j, c] if full else b[0, 0, 0, c]),
                   name="y")
    return te.create_prim_func([a, b, y])


def lut_func(shape: tuple):
    """A PrimFunc ``(x, table, y)``: ``y = table[x]`` on uint8 (a 256-entry lookup)."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    t = te.placeholder((256,), "uint8", name="table")
    return te.create_prim_func([x, t, te.compute(shape, lambda *i: t[x[i]], name="y")])


def concat_func(shapes: list, n_out: int):
    """A PrimFunc ``(x_0, .., x_{n-1}, tables, y)``: NHWC uint8 maps concatenated along
    channels, input ``k`` through its 256-entry requantization table ``tables[k]``."""
    from tvm import te, tirx

    xs = [te.placeholder(s, "uint8", name=f"x{k}") for k, s in enumerate(shapes)]
    tables = te.placeholder((len(shapes), 256), "uint8", name="tables")
    offsets = [0]
    for s in shapes:
        offsets.append(offsets[-1] + s[3])

    def body(n, i, j, c):
        out = None
        for k in range(len(xs) - 1, -1, -1):
            local = tirx.max(tirx.min(c - offsets[k], shapes[k][3] - 1), 0)
            v = tables[k, xs[k][n, i, j, local]]
            out = v if out is None else tirx.if_then_else(c < offsets[k + 1], v, out)
        return out

    y = te.compute((*shapes[0][:3], n_out), body, name="y")
    return te.create_prim_func([*xs, tables, y])


def upsample_func(shape: tuple, factor: int):
    """A PrimFunc ``(x, y)``: nearest upsampling of an NHWC uint8 map by ``factor``."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    n, h, w, c = shape
    y = te.compute((n, h * factor, w * factor, c),
                   lambda a, i, j, ch: x[a, i // factor, j // factor, ch], name="y")
    return te.create_prim_func([x, y])


def qgroup_conv2d_func(h, w_, c, o, kernel, stride, pad, groups, rq: Requant, pad_value=0):
    """A PrimFunc ``(x, w, bias, y)``: a grouped NHWC int8 convolution, weights
    ``[K, K, C/g, O]`` (output channel ``oc`` reads input group ``oc // (O/g)``)."""
    from tvm import te

    cg, og = c // groups, o // groups
    x = te.placeholder((1, h, w_, c), "uint8", name="x")
    wt = te.placeholder((kernel, kernel, cg, o), "int8", name="w")
    b = te.placeholder((o,), "int32", name="bias")
    oh, ow = conv2d_output_size(h, kernel, stride, pad), conv2d_output_size(w_, kernel, stride, pad)
    padded = _zero_pad_nhwc(x, pad, "gconv", pad_value)
    ry, rx, rc = (te.reduce_axis((0, kernel), "ry"), te.reduce_axis((0, kernel), "rx"),
                  te.reduce_axis((0, cg), "rc"))
    acc = te.compute(
        (1, oh, ow, o),
        lambda n, i, j, co: te.sum(
            padded[n, i * stride + ry, j * stride + rx, (co // og) * cg + rc].astype("int32")
            * wt[ry, rx, rc, co].astype("int32"), axis=[ry, rx, rc]),
        name="acc")
    y = te.compute(acc.shape, lambda *i: rq.te(acc[i] + b[i[3]]), name="y")
    return te.create_prim_func([x, wt, b, y])


def slice_func(shape: tuple, offset: int, n: int):
    """A PrimFunc ``(x, y)``: channels ``offset .. offset + n`` of an NHWC uint8 map."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    y = te.compute((*shape[:3], n), lambda a, i, j, c: x[a, i, j, c + offset], name="y")
    return te.create_prim_func([x, y])


def shuffle_func(shape: tuple, groups: int):
    """A PrimFunc ``(x, y)``: ShuffleNet's channel shuffle of an NHWC uint8 map
    (``y[j * g + i] = x[i * (C / g) + j]``)."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    per = shape[3] // groups
    y = te.compute(shape, lambda a, i, j, c: x[a, i, j, (c % groups) * per + c // groups],
                   name="y")
    return te.create_prim_func([x, y])


def maxpool_func(h: int, w_: int, c: int, kernel: int, stride: int, pad: int):
    """A PrimFunc ``(x, y)``: NHWC uint8 max pool, zero padding (uint8's minimum)."""
    from tvm import te, tirx

    x = te.placeholder((1, h, w_, c), "uint8", name="x")
    padded = _zero_pad_nhwc(x, pad, "maxpool")
    oh, ow = conv2d_output_size(h, kernel, stride, pad), conv2d_output_size(w_, kernel, stride, pad)

    def body(n, i, j, ch):
        out = None
        for dy in range(kernel):
            for dx in range(kernel):
                v = padded[n, i * stride + dy, j * stride + dx, ch]
                out = v if out is None else tirx.max(out, v)
        return out

    return te.create_prim_func([x, te.compute((1, oh, ow, c), body, name="y")])

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


def _scale_to_fixed(scale: float) -> tuple:
    """``(m, s)``: the closest ``m / 2**s`` to ``scale`` with ``m`` in [2**14, 2**15),
    ``s`` clamped to :data:`SHIFT_RANGE`."""
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
    return multiplier, shift


@dataclass(frozen=True)
class Requant:
    """Requantization ``int32 -> uint8``: ``clip(round(acc * m / 2**s) + zp)``, per
    tensor or per output channel.

    Rounding is half up (``+ 2**(s-1)`` then an arithmetic shift), as TFLite's
    ``MultiplyByQuantizedMultiplier`` up to its 31-bit multiplier. The 15-bit
    multiplier keeps every intermediate of :meth:`tir_int32` inside int32, so HVX
    evaluates it exactly without 64-bit lanes; its precision (2**-15 relative) is far
    below half an output step.

    Per channel (weights quantized per output channel): ``multiplier`` and ``shift``
    are tuples, entry ``c`` for output channel ``c``; a scalar is the one-channel case,
    broadcast. :meth:`numpy` takes the channel as the accumulator's last axis; TIR
    expressions (:meth:`te`, :meth:`tir_int32`) take the channel's ``(m, s)`` as
    values (``params``, loaded by the kernel from :meth:`table`), since the channel is
    a loop variable there. The zero point is the output tensor's: one per tensor.
    """

    multiplier: int | tuple
    shift: int | tuple
    zero_point: int = 0

    def __post_init__(self):
        vec = [isinstance(v, (list, tuple, np.ndarray)) for v in (self.multiplier, self.shift)]
        if any(vec):
            ms = tuple(int(v) for v in np.ravel(self.multiplier))
            ss = tuple(int(v) for v in np.ravel(self.shift))
            if not all(vec) or len(ms) != len(ss) or not ms:
                raise ValueError(f"per-channel requantization needs as many multipliers as "
                                 f"shifts, got {len(ms)} and {len(ss)}")
            object.__setattr__(self, "multiplier", ms)
            object.__setattr__(self, "shift", ss)
        else:
            object.__setattr__(self, "multiplier", int(self.multiplier))
            object.__setattr__(self, "shift", int(self.shift))
        for m in np.ravel(self.multiplier):
            if not 1 <= m < 2**MULTIPLIER_BITS:
                raise ValueError(f"multiplier {m} is outside [1, 2**15)")
        for s in np.ravel(self.shift):
            if not SHIFT_RANGE[0] <= s <= SHIFT_RANGE[1]:
                raise ValueError(f"shift {s} is outside {list(SHIFT_RANGE)}")
        if not 0 <= self.zero_point <= 255:
            raise ValueError(f"zero point {self.zero_point} is outside [0, 255]")

    @classmethod
    def from_scale(cls, scale, zero_point: int = 0) -> Requant:
        """The closest ``m / 2**s`` to ``scale`` with ``m`` in [2**14, 2**15); a 1-D array
        of scales gives a per-channel requantization (one ``(m, s)`` per entry)."""
        if np.ndim(scale) == 0:
            return cls(*_scale_to_fixed(float(scale)), zero_point)
        pairs = [_scale_to_fixed(float(v)) for v in np.ravel(scale)]
        return cls(tuple(m for m, _ in pairs), tuple(s for _, s in pairs), zero_point)

    @property
    def per_channel(self) -> bool:
        """Whether the multiplier and shift are vectors over output channels."""
        return isinstance(self.multiplier, tuple)

    @property
    def scale(self):
        """The real scale the fixed-point multiplier and shift stand for (an array per
        channel)."""
        if self.per_channel:
            return np.asarray(self.multiplier, np.float64) / 2.0 ** np.asarray(self.shift)
        return self.multiplier / 2.0**self.shift

    def channels(self, start: int, stop: int) -> Requant:
        """The requantization of output channels ``start .. stop`` (a per-tensor one is
        its own)."""
        if not self.per_channel:
            return self
        return Requant(self.multiplier[start:stop], self.shift[start:stop], self.zero_point)

    def table(self, channels: int) -> np.ndarray:
        """int32 ``[2, channels]``: row 0 the multipliers, row 1 the shifts of channels
        ``0 .. channels - 1`` (what a per-channel kernel reads; a scalar broadcast;
        channels past the vector, a layout's padding, get ``m = 0``: output ``zp``)."""
        m = np.broadcast_to(np.asarray(self.multiplier, np.int32), (1,) if not
                            self.per_channel else (len(self.multiplier),))
        s = np.broadcast_to(np.asarray(self.shift, np.int32), m.shape)
        out = np.zeros((2, channels), np.int32)
        out[1] = SHIFT_RANGE[0]
        n = min(channels, len(m)) if self.per_channel else channels
        out[0, :n] = m[:n] if self.per_channel else m[0]
        out[1, :n] = s[:n] if self.per_channel else s[0]
        return out

    def numpy(self, acc) -> np.ndarray:
        """Reference requantization of an int32 array, in int64 arithmetic (per channel:
        along the last axis)."""
        acc = np.asarray(acc, dtype=np.int64)
        m = np.asarray(self.multiplier, np.int64)
        s = np.asarray(self.shift, np.int64)
        y = ((acc * m + np.left_shift(np.int64(1), s - 1)) >> s) + self.zero_point
        return np.clip(y, 0, 255).astype(np.uint8)

    def _params(self, params):
        if params is not None:
            return params
        if self.per_channel:
            raise ValueError("a per-channel Requant needs its channel's (multiplier, shift) "
                             "as params (the kernel loads them from Requant.table)")
        return self.multiplier, self.shift

    def te(self, acc, params=None):
        """The TE/TIR expression of :meth:`numpy` for one int32 value (int64 arithmetic);
        ``params``: the value's channel's ``(m, s)`` as int32 TIR values (per channel)."""
        from tvm import tirx

        m, s = self._params(params)
        if isinstance(s, int):
            rounding, s = tirx.const(1 << (s - 1), "int64"), tirx.const(s, "int64")
        else:
            s = s.astype("int64")
            rounding = tirx.const(1, "int64") << (s - tirx.const(1, "int64"))
        m = tirx.const(m, "int64") if isinstance(m, int) else m.astype("int64")
        y = (acc.astype("int64") * m + rounding) >> s
        y = y + tirx.const(self.zero_point, "int64")
        y = tirx.max(tirx.min(y, tirx.const(255, "int64")), tirx.const(0, "int64"))
        return y.astype("uint8")

    def tir_int32(self, acc, lanes: int = 1, mul_shr16=None, params=None):
        """``round(acc * m / 2**s) + zp`` in int32 only, before the clip; exact.

        Since ``s >= 17``, ``floor((acc*m + 2**(s-1)) / 2**s)
        = floor((floor(acc*m / 2**16) + 2**(s-17)) / 2**(s-16))``. The inner
        ``floor(acc*m / 2**16)`` is ``mul_shr16(acc, m)``; by default it is computed as
        ``hi*m + ((lo*m) >> 16)`` with ``acc = hi*2**16 + lo``, all inside int32
        (``|hi*m| < 2**30``, ``lo*m < 2**31``). A target may pass one instruction
        instead (HVX: ``vmpye``). ``acc`` is an int32 value of ``lanes`` lanes.
        ``params``: ``(m, s)`` as int32 TIR values (one for all lanes, or ``lanes``
        lanes: a channel per lane), required per channel; else the constants.
        """
        from tvm import tirx

        def c(v):
            if not isinstance(v, int):  # a value: splat a scalar, keep a vector of lanes
                return v if lanes == 1 or v.ty.dtype.lanes == lanes else tirx.Broadcast(v, lanes)
            k = tirx.const(v, "int32")
            return k if lanes == 1 else tirx.Broadcast(k, lanes)

        m, s = self._params(params)
        if mul_shr16 is None:

            def mul_shr16(v, m):
                hi, lo = v >> c(16), v & c(0xFFFF)
                return hi * c(m) + ((lo * c(m)) >> c(16))

        if isinstance(s, int):
            rounding, down = c(1 << (s - 17)), c(s - 16)
        else:
            rounding, down = c(1) << (c(s) - c(17)), c(s) - c(16)
        t = mul_shr16(acc, m) + rounding
        return (t >> down) + c(self.zero_point)

    def numpy_int32(self, acc) -> np.ndarray:
        """:meth:`tir_int32` in numpy int32 arithmetic (to prove the identity; per
        channel along the last axis)."""
        acc = np.asarray(acc, dtype=np.int32)
        hi, lo = acc >> 16, acc & 0xFFFF
        m = np.asarray(self.multiplier, np.int32)
        s = np.asarray(self.shift, np.int32)
        t = hi * m + np.left_shift(np.int32(1), s - 17) + ((lo * m) >> 16)
        return (t >> (s - 16)) + np.int32(self.zero_point)


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


def qmatmul(x, w, bias, rq: Requant, name: str = "qmatmul", rq_table=None):
    """``y[m, n] = rq(sum_k x[m, k] * w[k, n] + bias[n])``; x uint8 [M, K], w int8 [K, N]
    (``rq_table``: :func:`requant_table` of a per-channel ``rq``)."""
    from tvm import te

    _, k_dim = x.shape
    k = te.reduce_axis((0, k_dim), name="k")
    acc = te.compute(
        (x.shape[0], w.shape[1]),
        lambda i, j: te.sum(x[i, k].astype("int32") * w[k, j].astype("int32"), axis=k),
        name=f"{name}_acc",
    )
    return te.compute(acc.shape, lambda i, j: requant_at(rq, rq_table, acc[i, j] + bias[j], j),
                      name=name)


def conv2d_output_size(size: int, kernel: int, stride: int, pad: int) -> int:
    """Output size of a convolution along one axis."""
    return (size + 2 * pad - kernel) // stride + 1


def requant_table(rq: Requant, channels: int, name: str = "rq"):
    """The int32 ``[2, channels]`` placeholder a per-channel ``rq`` is read from (row 0
    multipliers, row 1 shifts: :meth:`Requant.table`), or ``None`` per tensor. Kernels and
    computes that take it have it as the parameter after the bias."""
    from tvm import te

    return te.placeholder((2, channels), "int32", name=name) if rq.per_channel else None


def requant_at(rq: Requant, table, acc, channel):
    """``rq`` of the int32 value ``acc`` of output channel ``channel`` (a TIR index):
    the table's ``(m, s)`` per channel, the constants per tensor."""
    return rq.te(acc, None if table is None else (table[0, channel], table[1, channel]))


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
                 pad_value: int = 0, rq_table=None):
    """NHWC int8 convolution: x uint8 [1, H, W, C], w int8 [KH, KW, C, O] (HWIO), padded
    with ``pad_value`` (the input's zero point, folded into ``bias``); ``rq_table``:
    :func:`requant_table` of a per-channel ``rq``."""
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
    return te.compute(acc.shape, lambda *i: requant_at(rq, rq_table, acc[i] + bias[i[3]], i[3]),
                      name=name)


def qdepthwise_conv2d_nhwc(x, w, bias, rq: Requant, stride=1, pad=0, name="qdwconv2d",
                           pad_value: int = 0, rq_table=None):
    """Depthwise NHWC int8 convolution: x uint8 [1, H, W, C], w int8 [KH, KW, C], padded
    with ``pad_value`` (``rq_table`` as :func:`qconv2d_nhwc`)."""
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
    return te.compute(acc.shape, lambda *i: requant_at(rq, rq_table, acc[i] + bias[i[3]], i[3]),
                      name=name)


# --------------------------------------------------------------- whole PrimFuncs


def _with_table(table) -> list:
    return [] if table is None else [table]


def qmatmul_func(m: int, k: int, n: int, rq: Requant):
    """A PrimFunc ``(x, w, bias, y)`` of :func:`qmatmul`, unscheduled (stock TVM's view);
    ``(x, w, bias, rq, y)`` for a per-channel ``rq`` (:func:`requant_table`)."""
    from tvm import te

    x = te.placeholder((m, k), "uint8", name="x")
    w = te.placeholder((k, n), "int8", name="w")
    b = te.placeholder((n,), "int32", name="bias")
    table = requant_table(rq, n)
    return te.create_prim_func([x, w, b, *_with_table(table),
                                qmatmul(x, w, b, rq, rq_table=table)])


def qconv2d_func(h, w_, c, o, kernel, stride, pad, rq: Requant, depthwise=False, pad_value=0):
    """A PrimFunc ``(x, w, bias, y)`` of the NHWC (depthwise) convolution, unscheduled
    (``(x, w, bias, rq, y)`` for a per-channel ``rq``)."""
    from tvm import te

    x = te.placeholder((1, h, w_, c), "uint8", name="x")
    b = te.placeholder((o,), "int32", name="bias")
    table = requant_table(rq, o)
    if depthwise:
        wt = te.placeholder((kernel, kernel, c), "int8", name="w")
        y = qdepthwise_conv2d_nhwc(x, wt, b, rq, stride, pad, pad_value=pad_value,
                                   rq_table=table)
    else:
        wt = te.placeholder((kernel, kernel, c, o), "int8", name="w")
        y = qconv2d_nhwc(x, wt, b, rq, stride, pad, pad_value=pad_value, rq_table=table)
    return te.create_prim_func([x, wt, b, *_with_table(table), y])


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
    ``[K, K, C/g, O]`` (output channel ``oc`` reads input group ``oc // (O/g)``);
    ``(x, w, bias, rq, y)`` for a per-channel ``rq``."""
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
    table = requant_table(rq, o)
    y = te.compute(acc.shape, lambda *i: requant_at(rq, table, acc[i] + b[i[3]], i[3]), name="y")
    return te.create_prim_func([x, wt, b, *_with_table(table), y])


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

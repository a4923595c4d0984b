"""Element-wise operators missing from or wrong in the stock importer.

Specs under https://onnx.ai/onnx/operators/: ``Celu``, ``Swish`` (24), ``Mish``,
``Softplus``, ``IsInf``, ``Mod``, ``BitShift``, ``Pow``, ``CumProd`` (26),
``BitCast`` (26).

* ``Softplus``/``Mish``: ``log(1 + e^x)`` is computed as ``max(x, 0) +
  log1p(e^-|x|)`` with an exact ``log1p``, so small results keep their precision.
* ``IsInf`` honours ``detect_negative``/``detect_positive``.
* ``Mod`` follows the spec's floating-point cases (signed zeros, infinities, NaN).
* ``BitShift`` gives 0 (or -1 for a negative signed value shifted right) when the
  shift is negative or at least the bit width, as the spec's reference does.
* ``Pow`` accepts an integer base or exponent of another type than the base.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te
from tvm.relax.frontend.onnx import onnx_frontend as stock

from ...errors import ModelError
from .common import const_value, converter, dtype_of, is_float, rank_of, scalar
from .registry import register


def log1p(bb, y, dtype):
    """``log(1 + y)`` accurate for small ``y`` (Goldberg's trick)."""
    op = relax.op
    u = bb.emit(op.add(y, scalar(1.0, dtype)))
    denom = bb.emit(op.subtract(u, scalar(1.0, dtype)))
    exact = op.equal(denom, scalar(0.0, dtype))
    safe = op.where(exact, scalar(1.0, dtype), denom)
    return op.where(exact, y, op.divide(op.multiply(op.log(u), y), safe))


def softplus(bb, x, dtype):
    """``log(1 + exp(x))`` computed stably: ``max(x, 0) + log1p(exp(-|x|))``; a Relax expression."""
    op = relax.op
    tail = bb.emit(log1p(bb, op.exp(op.negative(op.abs(x))), dtype))
    return op.add(op.maximum(x, scalar(0.0, dtype)), tail)


def unary(op_type: str, opset: int, build):
    """Register the converter of a one-input element-wise op from opset ``opset`` on.

    ``build(bb, x, dtype, attr)`` returns the Relax expression; its docstring is the
    converter's. The converters below differ only in that expression.
    """

    def impl(bb, inputs, attr, params):
        x = inputs[0]
        return build(bb, x, dtype_of(x), attr)

    impl.__doc__ = build.__doc__
    return converter(op_type, opset, impl)


def _softplus(bb, x, dtype, attr):
    """``log(exp(x) + 1)``."""
    return softplus(bb, x, dtype)


def _mish(bb, x, dtype, attr):
    """``x * tanh(softplus(x))``."""
    return relax.op.multiply(x, relax.op.tanh(bb.emit(softplus(bb, x, dtype))))


def _elu(bb, x, dtype, attr):
    """``x`` if ``x >= 0`` else ``alpha * (exp(x) - 1)``, in the input's type."""
    op = relax.op
    alpha = scalar(float(attr.get("alpha", 1.0)), dtype)
    neg = op.multiply(alpha, op.subtract(op.exp(x), scalar(1.0, dtype)))
    return op.where(op.less(x, scalar(0.0, dtype)), neg, x)


def _celu(bb, x, dtype, attr):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    op = relax.op
    alpha = scalar(float(attr.get("alpha", 1.0)), dtype)
    zero = scalar(0.0, dtype)
    neg = op.multiply(alpha, op.subtract(op.exp(op.divide(x, alpha)), scalar(1.0, dtype)))
    return op.add(op.maximum(x, zero), op.minimum(neg, zero))


def _swish(bb, x, dtype, attr):
    """``x * sigmoid(alpha * x)``."""
    alpha = float(attr.get("alpha", 1.0))
    scaled = x if alpha == 1.0 else relax.op.multiply(x, scalar(alpha, dtype))
    return relax.op.multiply(x, relax.op.sigmoid(scaled))


def _isinf(bb, x, dtype, attr):
    """``+inf`` and/or ``-inf`` as chosen by ``detect_positive``/``detect_negative``."""
    op = relax.op
    pos, neg = int(attr.get("detect_positive", 1)), int(attr.get("detect_negative", 1))
    if pos and neg:
        return op.isinf(x)
    if not pos and not neg:
        return op.zeros_like(x, "bool") if hasattr(op, "zeros_like") else op.less(x, x)
    return op.equal(x, scalar(np.inf if pos else -np.inf, dtype))


Softplus = unary("Softplus", 1, _softplus)
Mish = unary("Mish", 18, _mish)
Elu = unary("Elu", 1, _elu)
Celu = unary("Celu", 12, _celu)
Swish = unary("Swish", 24, _swish)
IsInf = unary("IsInf", 10, _isinf)


@register("Mod")
class Mod(stock.Mod):
    """Floored (``fmod=0``) or truncated (``fmod=1``) remainder."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        a, b = inputs[0], inputs[1]
        dtype = dtype_of(a)
        if not is_float(dtype):
            return stock.Mod._impl_v10(bb, inputs, attr, params)
        op = relax.op
        quotient = op.trunc(op.divide(a, b))
        trunc_rem = bb.emit(op.where(op.isinf(b), op.add(a, op.multiply(b, scalar(0, dtype))),
                                     op.subtract(a, op.multiply(quotient, b))))
        if int(attr.get("fmod", 0)):
            return trunc_rem
        zero = scalar(0.0, dtype)
        flip = op.less(op.multiply(trunc_rem, b), zero)  # nonzero, sign unlike b's
        floored = bb.emit(op.where(flip, op.add(trunc_rem, b), trunc_rem))
        signed_zero = op.where(op.less(b, zero), scalar(-0.0, dtype), zero)
        return op.where(op.equal(floored, zero), signed_zero, floored)


def _bitshift(bb, inputs, attr, params):
    """``x << s`` / ``x >> s``; out-of-range shifts saturate as in the spec's reference."""
    op = relax.op
    x, s = inputs[0], inputs[1]
    dtype = dtype_of(x)
    bits = np.iinfo(np.dtype(dtype)).bits
    direction = attr.get("direction", b"LEFT")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    bad = bb.emit(op.logical_or(op.less(s, scalar(0, dtype)),
                                op.greater_equal(s, scalar(bits, dtype))))
    safe = bb.emit(op.where(bad, scalar(0, dtype), s))
    if direction == "LEFT":
        return op.where(bad, scalar(0, dtype), op.left_shift(x, safe))
    shifted = op.right_shift(x, safe)
    if np.issubdtype(np.dtype(dtype), np.signedinteger):
        fill = op.where(op.less(x, scalar(0, dtype)), scalar(-1, dtype), scalar(0, dtype))
    else:
        fill = scalar(0, dtype)
    return op.where(bad, fill, shifted)


def _pow(bb, inputs, attr, params):
    """``x ** y`` for any numeric pair of types; the result has the type of ``x``."""
    op = relax.op
    x, y = inputs[0], inputs[1]
    xt, yt = dtype_of(x), dtype_of(y)
    if is_float(xt):
        return op.power(x, y if yt == xt else op.astype(y, xt))
    work = "float64"
    result = op.power(op.astype(x, work), op.astype(y, work))
    return op.astype(op.round(result), xt)


def _cumprod(bb, inputs, attr, params):
    """Cumulative product along ``axis``, optionally ``exclusive`` and ``reverse``."""
    op = relax.op
    x = inputs[0]
    axis_value = const_value(inputs[1], params)
    if axis_value is None:
        raise ModelError("CumProd needs a constant axis")
    axis = int(axis_value.reshape(-1)[0]) % rank_of(x)
    if int(attr.get("reverse", 0)):
        x = bb.emit(op.flip(x, axis))
    y = bb.emit(op.cumprod(x, axis=axis, exclusive=bool(attr.get("exclusive", 0))))
    if int(attr.get("reverse", 0)):
        y = bb.emit(op.flip(y, axis))
    return y


BitShift = converter("BitShift", 11, _bitshift, base=stock.BitShift)
Pow = converter("Pow", 7, _pow, base=stock.Pow)
CumProd = converter("CumProd", 26, _cumprod)


@register("BitCast")
class BitCast(stock.OnnxOpConverter):
    """Reinterpret the bits as the same-width type ``to``."""

    @classmethod
    def _impl_v26(cls, bb, inputs, attr, params):
        x = inputs[0]
        target = stock.get_type(int(attr["to"]))
        if "bool" in (dtype_of(x), target):  # one byte each way: a value-preserving cast
            return relax.op.astype(x, target)
        src_bits = tvm.runtime.DataType(dtype_of(x)).bits
        if tvm.runtime.DataType(target).bits != src_bits:
            raise ModelError(f"BitCast from {dtype_of(x)} to {target} changes the bit width")

        def compute(data):
            return te.compute(data.shape, lambda *i: tvm.tirx.reinterpret(target, data(*i)),
                              name="bitcast")

        return bb.emit_te(compute, x)


@register("SwiGLU")
class SwiGLU(stock.OnnxOpConverter):
    """``Swish_alpha(A) * B`` (opset 28)."""

    @classmethod
    def _impl_v28(cls, bb, inputs, attr, params):
        a, b = inputs[0], inputs[1]
        gate = bb.emit(_swish(bb, a, dtype_of(a), attr))
        return relax.op.multiply(gate, b)

"""Quantized operators: ``QuantizeLinear``, ``DequantizeLinear`` (per-tensor,
per-axis and blocked), ``QLinearMatMul``, ``QLinearConv``, ``ConvInteger``,
``MatMulInteger``.

Specs: https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html and siblings.
Integer products are accumulated in int32 (zero points subtracted first), the
requantization ``acc * (scale_a * scale_b / scale_y) + zero_point_y`` is computed in
float32, rounded half to even and saturated to the output type, as the spec says.
Sub-byte (int4/uint4/int2/uint2/float4) and float8 tensors have no TVM storage type
here; those stay with the stock converters, which report them.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from .common import dtype_of, is_empty, rank_of, scalar, shape_of
from .registry import register

_INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32")


def round_half_even(bb, v, dtype: str):
    """Round to the nearest integer, ties to even (IEEE ``rint``)."""
    op = relax.op
    up = bb.emit(op.floor(op.add(v, scalar(0.5, dtype))))
    tie = op.equal(op.subtract(up, v), scalar(0.5, dtype))
    odd = op.not_equal(op.floor_mod(up, scalar(2.0, dtype)), scalar(0.0, dtype))
    return op.where(op.logical_and(tie, odd), op.subtract(up, scalar(1.0, dtype)), up)


def saturate(bb, v, out_dtype: str):
    """Clip a float tensor of integer values to ``out_dtype``'s range and cast."""
    info = np.iinfo(np.dtype(out_dtype))
    return relax.op.astype(relax.op.clip(v, float(info.min), float(info.max)), out_dtype)


def _along(bb, param, axis: int, rank: int, block: int = 0, length=None):
    """Broadcastable view of a per-axis (1-D) or blocked scale/zero point."""
    op = relax.op
    param = bb.normalize(param)
    prank = rank_of(param)
    if prank == 0 or (prank == 1 and shape_of(param)[0] == 1 and rank != 1):
        return param
    if block:
        param = bb.emit(op.repeat(param, block, axis=axis))
        if length is not None and shape_of(param)[axis] != length:
            param = bb.emit(op.strided_slice(param, [axis], [0], [length]))
        return param
    if prank == 1:
        view = [1] * rank
        view[axis] = -1
        return bb.emit(op.reshape(param, view))
    return param


def _broadcaster(bb, attr, x):
    """``along(param)``: a scale or zero point viewed against ``x`` per tensor, per
    ``axis`` or in blocks of ``block_size`` (see :func:`_along`)."""
    rank = rank_of(x)
    axis = int(attr.get("axis", 1)) % max(rank, 1)
    block = int(attr.get("block_size", 0))
    length = shape_of(x)[axis] if rank else None
    return lambda param: _along(bb, param, axis, rank, block, length)


def _zero_point_or_none(expr):
    return None if is_empty(expr) else expr


def _linear_converter(op_type: str, convert, versions=(10, 13, 19, 21, 23)) -> type:
    """Register the converter of ``QuantizeLinear``/``DequantizeLinear`` for ``versions``.

    ``convert(bb, x, scale, zero_point, attr, fallback)`` (an omitted zero point is
    ``None``) handles the integer types itself and returns ``fallback()``, the stock
    ``_impl_vN`` of the same opset, for the others (float8, sub-byte).
    """
    stock_cls = getattr(stock, op_type)

    def delegate(stock_impl):
        def impl(cls, bb, inputs, attr, params):
            return convert(bb, inputs[0], inputs[1], _zero_point_or_none(inputs[2]), attr,
                           lambda: stock_impl(bb, inputs, attr, params))

        return classmethod(impl)

    members = {"__doc__": convert.__doc__, "__module__": __name__}
    for version in versions:
        members[f"_impl_v{version}"] = delegate(getattr(stock_cls, f"_impl_v{version}"))
    return register(op_type)(type(op_type, (stock_cls,), members))


def _dequantize(bb, x, scale, zp, attr, fallback):
    """``y = (x - zero_point) * scale``."""
    op = relax.op
    if dtype_of(x) not in _INT_TYPES:
        return fallback()
    out_dtype = (stock.get_type(int(attr["output_dtype"])) if attr.get("output_dtype")
                 else dtype_of(scale))
    along = _broadcaster(bb, attr, x)
    v = bb.emit(op.astype(x, "int32"))
    if zp is not None:
        v = bb.emit(op.subtract(v, along(op.astype(zp, "int32"))))
    s = along(scale)
    return op.multiply(op.astype(v, out_dtype), op.astype(s, out_dtype))


def _quantize(bb, x, scale, zp, attr, fallback):
    """``y = saturate(round_half_even(x / scale) + zero_point)``."""
    op = relax.op
    if attr.get("output_dtype"):
        out_dtype = stock.get_type(int(attr["output_dtype"]))
    else:
        out_dtype = dtype_of(zp) if zp is not None else "uint8"
    if out_dtype not in _INT_TYPES:
        return fallback()
    work = (stock.get_type(int(attr["precision"])) if attr.get("precision")
            else dtype_of(scale))
    work = "float32" if work in ("float16", "bfloat16") else work
    along = _broadcaster(bb, attr, x)
    s = along(op.astype(scale, work))
    v = bb.emit(round_half_even(bb, op.divide(op.astype(x, work), s), work))
    if zp is not None:
        v = bb.emit(op.add(v, along(op.astype(zp, work))))
    return saturate(bb, v, out_dtype)


DequantizeLinear = _linear_converter("DequantizeLinear", _dequantize)
QuantizeLinear = _linear_converter("QuantizeLinear", _quantize)


def _centered(bb, x, zp, channel_axis=None):
    """``x - zero_point`` in int32; a 1-D zero point runs along ``channel_axis``."""
    op = relax.op
    v = bb.emit(op.astype(x, "int32"))
    if zp is None:
        return v
    z = op.astype(zp, "int32")
    if channel_axis is not None and rank_of(zp) == 1 and shape_of(zp)[0] != 1:
        view = [1] * rank_of(x)
        view[channel_axis] = -1
        z = bb.emit(op.reshape(bb.emit(z), view))
    return bb.emit(op.subtract(v, z))


def requantize(bb, acc, scale, y_scale, y_zp, out_dtype):
    """``saturate(rint(acc * scale / y_scale) + y_zp)`` computed in float32."""
    op = relax.op
    real = op.multiply(op.astype(acc, "float32"),
                       op.divide(op.astype(scale, "float32"), op.astype(y_scale, "float32")))
    v = bb.emit(round_half_even(bb, bb.emit(real), "float32"))
    if y_zp is not None:
        v = bb.emit(op.add(v, op.astype(y_zp, "float32")))
    return saturate(bb, v, out_dtype)


def _matmul_scales(bb, a_scale, b_scale, a_rank):
    """Per-row ``a`` scales and per-column ``b`` scales as factors of the product."""
    op = relax.op
    if rank_of(a_scale) == 1 and shape_of(a_scale)[0] != 1:
        a_scale = bb.emit(op.reshape(a_scale, [-1, 1]))
    if rank_of(b_scale) == 1 and shape_of(b_scale)[0] != 1:
        b_scale = bb.emit(op.reshape(b_scale, [1, -1]))
    return bb.emit(op.multiply(op.astype(a_scale, "float32"), op.astype(b_scale, "float32")))


@register("QLinearMatMul")
class QLinearMatMul(stock.OnnxOpConverter):
    """Quantized ``matmul``: integer accumulation, then requantization."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (inputs[i] for i in range(8))
        a_zp, b_zp, y_zp = (_zero_point_or_none(z) for z in (a_zp, b_zp, y_zp))
        out_dtype = dtype_of(y_zp) if y_zp is not None else dtype_of(a)
        acc = bb.emit(relax.op.matmul(_centered(bb, a, a_zp), _centered(bb, b, b_zp),
                                      out_dtype="int32"))
        scale = _matmul_scales(bb, a_scale, b_scale, rank_of(a))
        return requantize(bb, acc, scale, y_scale, y_zp, out_dtype)


@register("MatMulInteger")
class MatMulInteger(stock.MatMulInteger):
    """``(a - a_zero_point) @ (b - b_zero_point)`` in int32."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        a, b = inputs[0], inputs[1]
        a_zp = _zero_point_or_none(inputs[2])
        b_zp = _zero_point_or_none(inputs[3])
        # a's zero point is per row (axis -2), b's per column (axis -1)
        a_c = _centered(bb, a, a_zp, channel_axis=rank_of(a) - 2 if rank_of(a) > 1 else None)
        b_c = _centered(bb, b, b_zp, channel_axis=rank_of(b) - 1)
        return relax.op.matmul(a_c, b_c, out_dtype="int32")


def _int_conv(bb, x, w, attr, params):
    """The stock ``Conv`` converter on int32 operands (int32 accumulation)."""
    args = stock.onnx_input([x, w, None])
    return bb.emit(stock.Conv._impl_v11(bb, args, dict(attr), params))


@register("ConvInteger")
class ConvInteger(stock.OnnxOpConverter):
    """``conv(x - x_zero_point, w - w_zero_point)`` in int32."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        x_c = _centered(bb, inputs[0], _zero_point_or_none(inputs[2]))
        w_c = _centered(bb, inputs[1], _zero_point_or_none(inputs[3]), channel_axis=0)
        return _int_conv(bb, x_c, w_c, attr, params)


@register("QLinearConv")
class QLinearConv(stock.OnnxOpConverter):
    """Quantized ``Conv``: int32 accumulation plus the int32 bias, then requantization
    with a per-tensor or per-output-channel weight scale."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        op = relax.op
        x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = (inputs[i] for i in range(8))
        bias = None if is_empty(inputs[8]) else inputs[8]
        x_zp, w_zp, y_zp = (_zero_point_or_none(z) for z in (x_zp, w_zp, y_zp))
        out_dtype = dtype_of(y_zp) if y_zp is not None else dtype_of(x)
        acc = _int_conv(bb, _centered(bb, x, x_zp), _centered(bb, w, w_zp, channel_axis=0),
                        attr, params)
        rank = rank_of(acc)
        if bias is not None:
            acc = bb.emit(op.add(acc, op.reshape(op.astype(bias, "int32"),
                                                 [1, -1] + [1] * (rank - 2))))
        scale = op.astype(w_scale, "float32")
        if rank_of(w_scale) == 1 and shape_of(w_scale)[0] != 1:
            scale = bb.emit(op.reshape(bb.emit(scale), [1, -1] + [1] * (rank - 2)))
        scale = bb.emit(op.multiply(scale, op.astype(x_scale, "float32")))
        return requantize(bb, acc, scale, y_scale, y_zp, out_dtype)


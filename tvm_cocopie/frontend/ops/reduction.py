"""Reductions: ``ReduceSum``, ``ReduceMean``, ``ReduceMax``, ``ReduceMin``,
``ReduceProd``, ``ReduceL1``, ``ReduceL2``, ``ReduceSumSquare``, ``ReduceLogSum``,
``ReduceLogSumExp`` (opsets 1-18).

Spec: https://onnx.ai/onnx/operators/onnx__ReduceSum.html and siblings. One
converter covers every opset: ``axes`` is an attribute before opset 18 (13 for
ReduceSum) and an optional input after, with ``noop_with_empty_axes``. Fixes over
the stock converters:

* reducing over an empty axis gives the reduction's identity (0 for sums, 1 for
  the product, ``-inf`` for max/log-sum(-exp), ``+inf`` for min), as the spec
  says, instead of reading uninitialized memory;
* ``ReduceMax``/``ReduceMin`` of a row that is all ``-inf``/``+inf`` return the
  infinity (TVM's reducers start at the lowest/highest *finite* value);
* boolean ``ReduceMax``/``ReduceMin`` (``any``/``all``);
* ``ReduceLogSumExp`` subtracts the row maximum before ``exp`` (no overflow).
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ...errors import ModelError
from .common import (
    const_value,
    dtype_of,
    filled,
    is_float,
    normalize_axes,
    rank_of,
    scalar,
    shape_of,
)
from .registry import register

#: Value of each reduction over an empty set, for float data.
_EMPTY = {
    "ReduceSum": 0.0, "ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0,
    "ReduceProd": 1.0, "ReduceMax": -np.inf, "ReduceMin": np.inf,
    "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf, "ReduceMean": np.nan,
}
#: Opset from which ``axes`` is an input.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _empty_value(op_type: str, dtype: str):
    value = _EMPTY[op_type]
    if is_float(dtype) or not np.isinf(value) and not np.isnan(value):
        return value
    info = np.iinfo(np.dtype(dtype)) if dtype != "bool" else None
    if dtype == "bool":
        return op_type == "ReduceMin"
    return info.min if value < 0 else info.max


class _Reduce(OnnxOpConverter):
    op_type = ""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, params, axes_from_input=False)

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        since = _AXES_INPUT_SINCE.get(cls.op_type, 18)
        return cls._convert(bb, inputs, attr, params, axes_from_input=since <= 13)

    @classmethod
    def _impl_v18(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr, params, axes_from_input=True)

    @classmethod
    def _convert(cls, bb, inputs, attr, params, axes_from_input):
        data = inputs[0]
        rank = rank_of(data)
        keepdims = bool(attr.get("keepdims", 1))
        if axes_from_input:
            axes_expr = inputs[1]
            axes = None
            if axes_expr is not None:
                value = const_value(axes_expr, params)
                if value is None:
                    raise ModelError(f"{cls.op_type} needs constant axes (got a runtime "
                                     "tensor); make the axes an initializer")
                axes = value.reshape(-1).tolist()
            if not axes:
                if attr.get("noop_with_empty_axes", 0):
                    return data
                axes = None
        else:
            axes = list(attr.get("axes", ())) or None
        axes = list(range(rank)) if axes is None else normalize_axes(axes, rank)
        dtype = dtype_of(data)
        shape = shape_of(data)
        if shape is not None and any(isinstance(shape[a], int) and shape[a] == 0 for a in axes):
            out_shape = [1 if i in axes else d for i, d in enumerate(shape)
                         if keepdims or i not in axes]
            return filled(out_shape, _empty_value(cls.op_type, dtype), dtype)
        return cls._reduce(bb, data, axes, keepdims, dtype)

    @classmethod
    def _reduce(cls, bb, data, axes, keepdims, dtype):
        raise NotImplementedError


def _simple(name: str, fn):
    @register(name)
    class Reduce(_Reduce):
        op_type = name

        @classmethod
        def _reduce(cls, bb, data, axes, keepdims, dtype):
            return fn(bb, data, axes, keepdims, dtype)

    Reduce.__name__ = Reduce.__qualname__ = name
    Reduce.__doc__ = f"ONNX ``{name}`` (https://onnx.ai/onnx/operators/onnx__{name}.html)."
    return Reduce


def _sum(bb, x, axes, keepdims, dtype):
    return relax.op.sum(x, axes, keepdims)


def _extreme(largest: bool):
    def reduce(bb, x, axes, keepdims, dtype):
        op = relax.op
        fn = op.max if largest else op.min
        if dtype == "bool":
            return op.astype(fn(op.astype(x, "int8"), axes, keepdims), "bool")
        out = bb.emit(fn(x, axes, keepdims))
        if not is_float(dtype):
            return out
        # all-infinite rows: TVM's reducer starts from the extreme finite value
        inf = scalar(-np.inf if largest else np.inf, dtype)
        finite_seen = op.max(op.astype(op.not_equal(x, inf), "int8"), axes, keepdims)
        return op.where(op.astype(finite_seen, "bool"), out, inf)

    return reduce


def _log_sum_exp(bb, x, axes, keepdims, dtype):
    op = relax.op
    peak = bb.emit(_extreme(True)(bb, x, axes, True, dtype))
    peak = bb.emit(op.where(op.isfinite(peak), peak, scalar(0, dtype)))
    total = op.sum(op.exp(op.subtract(x, peak)), axes, True)
    out = op.add(op.log(total), peak)
    return out if keepdims else op.squeeze(out, axes)


ReduceSum = _simple("ReduceSum", _sum)
ReduceMean = _simple("ReduceMean", lambda bb, x, a, k, d: relax.op.mean(x, a, k))
ReduceMax = _simple("ReduceMax", _extreme(True))
ReduceMin = _simple("ReduceMin", _extreme(False))
ReduceProd = _simple("ReduceProd", lambda bb, x, a, k, d: relax.op.prod(x, a, k))
ReduceL1 = _simple("ReduceL1", lambda bb, x, a, k, d: relax.op.sum(relax.op.abs(x), a, k))
ReduceSumSquare = _simple(
    "ReduceSumSquare", lambda bb, x, a, k, d: relax.op.sum(relax.op.multiply(x, x), a, k))
ReduceL2 = _simple(
    "ReduceL2",
    lambda bb, x, a, k, d: relax.op.sqrt(relax.op.sum(relax.op.multiply(x, x), a, k)))
ReduceLogSum = _simple(
    "ReduceLogSum", lambda bb, x, a, k, d: relax.op.log(relax.op.sum(x, a, k)))
ReduceLogSumExp = _simple("ReduceLogSumExp", _log_sum_exp)

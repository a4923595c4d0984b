"""Small helpers shared by the converters: attributes, constants, shapes, dtypes, and
:func:`converter`, which makes a registered converter class of one function."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from .registry import register


def attr_str(attr: dict, name: str, default: str | None = None) -> str | None:
    """A string attribute (ONNX stores them as bytes)."""
    value = attr.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def attr_strs(attr: dict, name: str) -> list[str]:
    """The string-list attribute ``name`` of a node (bytes decoded), empty when absent."""
    return [v.decode() if isinstance(v, bytes) else v for v in attr.get(name, ())]


def const_value(expr, params=None) -> np.ndarray | None:
    """The numpy value of ``expr`` if it is a compile-time constant, else ``None``."""
    if expr is None:
        return None
    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy()
    if params is not None and isinstance(expr, relax.Var):
        _, table = params
        if expr.name in table:
            return table[expr.name][1].numpy()
    if isinstance(expr, relax.ShapeExpr) and all(isinstance(v, tvm.tirx.IntImm)
                                                 for v in expr.values):
        return np.array([int(v) for v in expr.values], dtype=np.int64)
    return None


def is_empty(expr) -> bool:
    """An omitted optional input (``""`` in the node) or an empty constant."""
    if expr is None:
        return True
    value = const_value(expr)
    return value is not None and value.size == 0 and value.ndim == 1


def dtype_of(expr) -> str:
    """The dtype of a Relax tensor expression."""
    return str(expr.ty.dtype)


def shape_of(expr) -> list | None:
    """The shape of a tensor expr: ints where static, PrimExprs where symbolic."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    return [int(v) if isinstance(v, tvm.tirx.IntImm) else v for v in shape.values]


def rank_of(expr) -> int:
    """The rank of a Relax tensor expression."""
    return int(expr.ty.ndim)


def scalar(value, dtype: str) -> relax.Constant:
    """A Relax scalar constant of ``value`` in ``dtype``."""
    return relax.const(np.array(value).astype(dtype), dtype)


def normalize_axes(axes: Sequence[int], rank: int) -> list[int]:
    """``axes`` with negative entries counted from the end of a ``rank``-dimensional tensor."""
    return [int(a) + rank if int(a) < 0 else int(a) for a in axes]


def is_float(dtype: str) -> bool:
    """Whether ``dtype`` is a floating-point type (``bfloat`` included)."""
    return str(dtype).startswith(("float", "bfloat"))


def filled(shape: Sequence, value, dtype: str) -> relax.Expr:
    """A tensor of ``shape`` holding ``value`` (``relax.op.full`` fails to legalize
    infinities and NaN in TVM 0.27: its TOPI checks ``"float" in dtype`` on a type)."""
    return relax.op.broadcast_to(scalar(value, dtype), list(shape))


def const(value, dtype: str | None = None) -> relax.Expr:
    """A Relax constant that keeps the numpy dtype (``relax.const`` alone turns int64
    into int32 and float64 into float32)."""
    arr = np.asarray(value)
    dtype = str(dtype or arr.dtype)
    return relax.const(arr.astype(dtype), dtype)


def converter(op_type: str, opset: int, build, base: type = stock.OnnxOpConverter) -> type:
    """Register a converter class for ``op_type`` whose ``_impl_v{opset}`` is ``build``.

    ``build(bb, inputs, attr, params)`` converts a node; its docstring becomes the
    class's. The class subclasses ``base``: a stock converter given there keeps its
    other opsets (``get_converter`` picks the highest ``_impl_vN`` <= the model's).
    """
    members = {"__doc__": build.__doc__, "__module__": build.__module__,
               f"_impl_v{opset}": staticmethod(build)}
    return register(op_type)(type(op_type, (base,), members))

"""Evaluating operators on constants, and value-domain facts used as preconditions.

Folding a subgraph over constants (weights) at compile time is one of the rewrites;
numpy evaluates the operators below. ``nonnegative`` proves ``x >= 0`` for the
guards of rules such as ``sqrt(B) * sqrt(B) -> B`` (only true for ``B >= 0``).
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ...exprs import const_np, ints, is_constant, op_name
from .terms import make_const


def _attr(call, name, default=None):
    value = getattr(call.attrs, name, default) if call.attrs is not None else default
    return value


def _shape_of(expr):
    values = getattr(expr, "values", None)
    if values is None:
        return None
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError):
        return None


def _squeeze(a, call):
    axes = ints(_attr(call, "axis"))
    return np.squeeze(a, axis=tuple(axes)) if axes else np.squeeze(a)


def _expand(a, call):
    out = a
    for ax in sorted(int(v) % (a.ndim + len(_attr(call, "axis")) ) for v in _attr(call, "axis")):
        out = np.expand_dims(out, ax)
    return out


#: 2-D transposes at least this large are copied in cache-sized tiles
_TILED_TRANSPOSE_ELEMENTS = 1 << 20
_TILE = 256


def _transpose(a, call):
    axes = ints(_attr(call, "axes"))
    view = np.transpose(a, axes)
    if a.ndim != 2 or a.size < _TILED_TRANSPOSE_ELEMENTS:
        return view
    # numpy's strided copy of a large transpose misses the cache on every element
    # (a 25088x4096 FC weight: seconds); tile by tile it is a few times faster
    out = np.empty(view.shape, a.dtype)
    rows, cols = view.shape
    for i in range(0, rows, _TILE):
        for j in range(0, cols, _TILE):
            out[i:i + _TILE, j:j + _TILE] = view[i:i + _TILE, j:j + _TILE]
    return out


def _safe_divide(a, b):
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        raise _NoFold
    with np.errstate(all="ignore"):
        return np.divide(a, b)


class _NoFold(Exception):
    pass


_UNARY = {
    "negative": np.negative, "abs": np.abs, "sqrt": np.sqrt, "exp": np.exp, "log": np.log,
    "square": np.square, "nn.relu": lambda a: np.maximum(a, 0),
    "rsqrt": lambda a: 1.0 / np.sqrt(a), "sigmoid": lambda a: 1.0 / (1.0 + np.exp(-a)),
    "tanh": np.tanh, "isnan": np.isnan,
}
_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _safe_divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "matmul": np.matmul,
}


def evaluate(call: relax.Call):
    """numpy value of ``call`` if every argument is a constant, else None."""
    name = op_name(call)
    args = list(call.args)
    try:
        if name in _UNARY and len(args) == 1 and is_constant(args[0]):
            a = const_np(args[0])
            with np.errstate(all="ignore"):
                out = _UNARY[name](a)
                return out if out.dtype == np.bool_ else out.astype(a.dtype)
        if name in _BINARY and len(args) == 2 and all(is_constant(a) for a in args):
            a, b = const_np(args[0]), const_np(args[1])
            with np.errstate(all="ignore"):
                return np.asarray(_BINARY[name](a, b)).astype(np.result_type(a, b))
        if name == "where" and len(args) == 3 and all(is_constant(a) for a in args):
            return np.where(*(const_np(a) for a in args))
        if not args or not is_constant(args[0]):
            return None
        a = const_np(args[0])
        if name == "reshape":
            shape = _shape_of(args[1])
            return None if shape is None else a.reshape(shape)
        if name == "permute_dims":
            return _transpose(a, call)
        if name == "squeeze":
            return _squeeze(a, call)
        if name == "expand_dims":
            return _expand(a, call)
        if name == "astype":
            return a.astype(str(_attr(call, "dtype")))
    except _NoFold:
        return None
    return None


def fold(call: relax.Call):
    """A Relax constant for ``call`` over constants, or None."""
    value = evaluate(call)
    if value is None:
        return None
    return make_const(value)


#: operators whose result is never negative (for a real input where defined)
_NONNEG_OPS = frozenset({"abs", "square", "exp", "nn.relu", "sigmoid", "sqrt", "rsqrt",
                         "nn.softmax"})


def nonnegative(expr, graph, depth: int = 4) -> bool:
    """True if every element of ``expr`` is provably >= 0 (NaN aside)."""
    if is_constant(expr):
        arr = const_np(expr)
        return arr.size > 0 and bool(np.all(arr >= 0))
    if depth == 0 or not isinstance(expr, relax.Var) or graph is None:
        return False
    value = graph.defs.get(expr)
    name = op_name(value)
    if name in _NONNEG_OPS:
        return True
    if name in ("add", "multiply", "maximum", "divide") and value is not None:
        a, b = value.args
        if name == "multiply" and a.same_as(b):
            return True
        return nonnegative(a, graph, depth - 1) and nonnegative(b, graph, depth - 1)
    return False

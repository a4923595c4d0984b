"""Chains of data-movement operators collapsed (transpose, reshape, squeeze, slices).

DNNFusion treats Transpose/Reshape/Slice as index remapping (§3.4.4); before fusion
the cheapest remapping is none: two transposes compose into one (or none), also with
elementwise operators between them (they commute with any permutation; constant
operands are permuted with them), a reshape of a reshape is one reshape, ``squeeze(expand_dims(X))`` is X, and the concatenation
of adjacent slices of one tensor is that tensor (or one wider slice).
"""

from __future__ import annotations

import itertools

import numpy as np
from tvm import relax

from ...exprs import const_np, is_constant, op_name
from .rule import Example, Rule
from .terms import Match, V, make_const, op

X = V("X")


def _axes(call, ndim: int) -> list[int]:
    axes = call.attrs.axes
    return list(range(ndim))[::-1] if axes is None else [int(a) for a in axes]


def compose_transposes(m: Match) -> relax.Expr:
    """Two transposes of ``X`` as one, their permutations composed."""
    ndim = m["X"].ty.ndim
    inner = _axes(m.call("t1"), ndim)
    outer = _axes(m.call("t2"), ndim)
    axes = [inner[a] for a in outer]
    if axes == list(range(ndim)):
        return m["X"]
    return relax.op.permute_dims(m["X"], axes)


def identity_transpose(m: Match) -> relax.Expr | None:
    """``X`` itself when the transpose's permutation is the identity, else ``None``."""
    ndim = m["X"].ty.ndim
    return m["X"] if _axes(m.call("t"), ndim) == list(range(ndim)) else None


def _unit_strides(call) -> bool:
    strides = call.args[4] if len(call.args) > 4 else None
    vals = getattr(strides, "fields", None)
    if strides is None or vals is None:
        return strides is None
    return all(int(getattr(v, "value", 0)) == 1 for v in vals)


def _slice_info(graph, expr):
    """(source, axis, begin, end) of a unit-stride one-axis strided_slice, else None."""
    value = graph.defs.get(expr) if isinstance(expr, relax.Var) else None
    if op_name(value) != "strided_slice" or not _unit_strides(value):
        return None
    try:
        axes, begin, end = ([int(v.value) for v in value.args[i].fields] for i in (1, 2, 3))
    except (AttributeError, TypeError, ValueError):
        return None
    if len(axes) != 1:
        return None
    return value.args[0], axes[0], begin[0], end[0]


def _concat_slices(graph, var):
    value = graph.defs.get(var)
    if op_name(value) != "concat" or not isinstance(value.args[0], relax.Tuple):
        return
    parts = [_slice_info(graph, f) for f in value.args[0].fields]
    if len(parts) < 2 or any(p is None for p in parts):
        return
    src = parts[0][0]
    ndim = src.ty.ndim
    axis = int(value.attrs.axis) % ndim
    for (s, ax, _b, e), (s2, ax2, b2, _e2) in itertools.pairwise(parts):
        if not s.same_as(s2) or ax % ndim != axis or ax2 % ndim != axis or e != b2:
            return
    m = Match(var, env={"X": src}, graph=graph, ops=["concat"],
              edges=[(var, f) for f in value.args[0].fields])
    m.env["begin"], m.env["end"], m.env["axis"] = parts[0][2], parts[-1][3], axis
    yield m


def merge_slices(m: Match) -> relax.Expr:
    """Two strided slices of ``X`` on the same axis as one (``X`` itself when it spans the axis)."""
    full = m["X"].ty.shape.values[m["axis"]]
    if m["begin"] == 0 and hasattr(full, "value") and m["end"] >= int(full.value):
        return m["X"]
    return relax.op.strided_slice(m["X"], [m["axis"]], [m["begin"]], [m["end"]])


def _any_slice(graph, var):
    value = graph.defs.get(var)
    if op_name(value) == "strided_slice":
        yield Match(var, env={"X": value.args[0]}, calls={"s": value}, graph=graph,
                    ops=["strided_slice"])


def _full_slice(m: Match) -> bool:
    return _unit_strides(m.call("s"))


# ------------------------------------------------- transposes through elementwise ops
#: unary elementwise operators (extra operands, as clip's bounds, are scalars)
_UNARY_EW = frozenset({"negative", "abs", "sqrt", "rsqrt", "exp", "log", "square",
                       "nn.relu", "sigmoid", "tanh", "erf", "clip", "nn.gelu", "nn.silu",
                       "nn.leakyrelu", "astype", "floor", "ceil", "round", "sign"})
#: binary elementwise operators; the other operand must be a broadcast constant
_BINARY_EW = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum",
                        "power"})


def _through_step(graph, var):
    """``(call, index of the tensor operand)`` if ``var`` is bound to an elementwise op
    that commutes with a permutation of its tensor operand, else None."""
    value = graph.defs.get(var)
    name = op_name(value)
    if name in _UNARY_EW:
        return value, 0
    if name in _BINARY_EW and len(value.args) == 2:
        a, b = value.args
        if is_constant(b) and not is_constant(a):
            return value, 0
        if is_constant(a) and not is_constant(b):
            return value, 1
    return None


def _transpose_sandwich(graph, var):
    """``permute_dims(f_k(...f_1(permute_dims(X, p))...), q)`` with every ``f_i``
    elementwise (unary, or binary with a constant) and used once."""
    outer = graph.defs.get(var)
    if op_name(outer) != "permute_dims" or not isinstance(outer.args[0], relax.Var):
        return
    chain, cur = [], outer.args[0]
    while True:
        value = graph.defs.get(cur)
        if op_name(value) == "permute_dims":
            break
        step = _through_step(graph, cur)
        if step is None or graph.uses[cur] != 1 or not isinstance(step[0].args[step[1]],
                                                                   relax.Var):
            return
        chain.append((cur, *step))
        cur = step[0].args[step[1]]
    if not chain:  # a plain transpose pair is layout/transpose-transpose
        return
    inner = value
    parents = [var] + [c[0] for c in chain]
    m = Match(var, env={"X": inner.args[0]}, calls={"t1": inner, "t2": outer},
              edges=list(zip(parents, parents[1:] + [cur])), graph=graph,
              ops=["permute_dims"] + [op_name(c[1]) for c in chain] + ["permute_dims"])
    m.env["chain"] = chain
    yield m


def _permute_const(c, axes: list[int]):
    """The broadcast constant ``c`` seen through ``permute_dims(., axes)``."""
    arr = const_np(c)
    if arr.size == 1 and arr.ndim == 0:
        return c
    if arr.ndim > len(axes):
        return None
    arr = arr.reshape((1,) * (len(axes) - arr.ndim) + arr.shape)
    return make_const(np.ascontiguousarray(np.transpose(arr, axes)), str(arr.dtype))


def transpose_through_elementwise(m: Match) -> relax.Expr | None:
    """permute(f(permute(X, p)), q) = f'(permute(X, p∘q)), constants permuted by q."""
    ndim = m["X"].ty.ndim
    outer = _axes(m.call("t2"), ndim)
    expr = compose_transposes(m)
    for _var, call, idx in reversed(m["chain"]):
        args = list(call.args)
        args[idx] = expr
        if op_name(call) in _BINARY_EW:
            other = _permute_const(args[1 - idx], outer)
            if other is None:
                return None
            args[1 - idx] = other
        expr = relax.Call(call.op, args, call.attrs)
    return expr


def _tte_lhs(other_kind="c"):
    def lhs(e):
        t = relax.op.permute_dims(e["X"], [0, 2, 3, 1])
        y = relax.op.nn.relu(relax.op.add(t, e["C"]))
        return relax.op.permute_dims(relax.op.sigmoid(y), [0, 3, 1, 2])
    return Example(leaves={"X": ("in", (1, 4, 3, 5)), "C": (other_kind, (3, 5, 4))},
                   lhs=lhs, flops=(3 * 60, 3 * 60))


_T = Example(leaves={"X": ("in", (2, 3, 4))},
             ops={"t1": lambda x: relax.op.permute_dims(x, [1, 0, 2]),
                  "t2": lambda x: relax.op.permute_dims(x, [1, 0, 2])})
_R = Example(leaves={"X": ("in", (2, 3, 4))},
             ops={"r1": lambda x: relax.op.reshape(x, (6, 4)),
                  "reshape": lambda x: relax.op.reshape(x, (24,))})


def _reshape_of(inner: str) -> Rule:
    return Rule(f"layout/reshape-of-{inner}", "layout",
                op("reshape", op(inner, X), V("shape")),
                op("reshape", X, V("shape")), (),
                f"reshape({inner}(X)) = reshape(X)",
                Example(leaves={"X": ("in", (2, 1, 4))},
                        ops={"reshape": lambda x: relax.op.reshape(x, (8,)),
                             "expand_dims": lambda x: relax.op.expand_dims(x, 0),
                             "squeeze": lambda x: relax.op.squeeze(x, [1]),
                             "flatten": relax.op.flatten}))


RULES = [
    Rule("layout/transpose-transpose", "layout",
         op("permute_dims", op("permute_dims", X, bind="t1"), bind="t2"), compose_transposes,
         (), "permute(permute(X, p), q) = permute(X, p∘q), or X if that is the identity", _T),
    Rule("layout/transpose-identity", "layout", op("permute_dims", X, bind="t"),
         identity_transpose, (), "permute(X, identity) = X",
         Example(ops={"t": lambda x: relax.op.permute_dims(x, [0, 1])}),
         Example(ops={"t": lambda x: relax.op.permute_dims(x, [1, 0])})),
    Rule("layout/reshape-reshape", "layout",
         op("reshape", op("reshape", X, V("_"), bind="r1"), V("shape")),
         op("reshape", X, V("shape")), (), "reshape(reshape(X)) = reshape(X)", _R),
    Rule("layout/reshape-noop", "layout", op("reshape", X, V("_")), X, (),
         "reshape of X to its own shape is X",
         Example(ops={"reshape": lambda x: relax.op.reshape(x, (4, 8))}),
         Example(ops={"reshape": lambda x: relax.op.reshape(x, (8, 4))})),
    Rule("layout/squeeze-expand", "layout", op("squeeze", op("expand_dims", X)), X, (),
         "squeeze(expand_dims(X, a), a) = X (the engine checks the shape)",
         Example(ops={"expand_dims": lambda x: relax.op.expand_dims(x, 1),
                      "squeeze": lambda x: relax.op.squeeze(x, [1])})),
    Rule("layout/expand-squeeze", "layout", op("expand_dims", op("squeeze", X)), X, (),
         "expand_dims(squeeze(X, a), a) = X when the squeezed axis had size 1",
         Example(leaves={"X": ("in", (4, 1, 8))},
                 ops={"expand_dims": lambda x: relax.op.expand_dims(x, 1),
                      "squeeze": lambda x: relax.op.squeeze(x, [1])}),
         Example(leaves={"X": ("in", (4, 1, 8))},
                 ops={"expand_dims": lambda x: relax.op.expand_dims(x, 0),
                      "squeeze": lambda x: relax.op.squeeze(x, [1])})),
    _reshape_of("expand_dims"),
    _reshape_of("squeeze"),
    _reshape_of("flatten"),
    Rule("layout/slice-full", "layout", None, X, (_full_slice,),
         "a unit-stride slice with the input's shape is the input",
         Example(ops={"s": lambda x: relax.op.strided_slice(x, [1], [0], [8])}),
         Example(ops={"s": lambda x: relax.op.strided_slice(x, [1], [7], [-9], [-1])}),
         match_fn=_any_slice, roots=("strided_slice",)),
    Rule("layout/concat-adjacent-slices", "layout", None, merge_slices, (),
         "concat(X[a:b], X[b:c]) = X[a:c], or X when that is all of it",
         Example(leaves={"X": ("in", (4, 8))}, lhs=lambda e: relax.op.concat(
             [relax.op.strided_slice(e["X"], [1], [0], [3]),
              relax.op.strided_slice(e["X"], [1], [3], [8])], axis=1)),
         Example(leaves={"X": ("in", (4, 8))}, lhs=lambda e: relax.op.concat(
             [relax.op.strided_slice(e["X"], [1], [0], [3]),
              relax.op.strided_slice(e["X"], [1], [4], [8])], axis=1)),
         match_fn=_concat_slices, roots=("concat",)),
    Rule("layout/transpose-through-elementwise", "layout", None,
         transpose_through_elementwise, (),
         "permute(f(permute(X, p)), q) = f(permute(X, p∘q)) for elementwise f (unary, or "
         "binary with a constant, which is permuted by q); every f used once",
         _tte_lhs("c"), _tte_lhs("in"),
         match_fn=_transpose_sandwich, roots=("permute_dims",)),
]

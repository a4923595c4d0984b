"""RDP's own transfer functions (SOD², seed 004 §5.4.1, Fig. 5.3), where Relax's type
inference stops short.

Relax already infers most shapes forward (RDP re-asks it with refined input shapes,
:mod:`.rdp`). What it does not do, and RDP does here:

* **values** (the thesis' V map): the elements of small integer tensors, ``Shape``
  values and scalars, carried through shape arithmetic -- ``shape_of``,
  ``shape_to_tensor``, ``take``, ``strided_slice``, ``concat``, integer (and exactly
  integral float) arithmetic, comparisons decided by the analyzer, ``where``,
  ``tensor_to_shape`` -- so that a shape computed from input shapes becomes a known
  symbolic expression (:func:`forward_value`);
* **broadcasting** a symbolic dim against a constant: Relax gives up on ``N`` against
  ``4``, but a valid program has ``N`` in ``{1, 4}`` and an output dim of 4
  (:func:`broadcast_dims`);
* **backward** constraints (Fig. 5.3 (b)): equalities a valid execution needs between
  an operator's input and output dims -- elementwise and broadcast dims, matmul's inner
  dims, concat's other dims and its axis sum, reshape's element count, a permutation,
  conv's input channels (:func:`backward`).
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax, tirx

from ...exprs import const_np
from .classes import TransferKind
from .lattice import NAC, Abs, Dim, known, tensor
from .symbols import Symbols, as_index

#: most elements of a tensor whose values RDP tracks
VALUE_LIMIT = 64


# --------------------------------------------------------------------- constants
def _element(x, sym: Symbols) -> Dim:
    if isinstance(x, (bool, np.bool_)):
        return known(int(x))
    if isinstance(x, (float, np.floating)):
        return known(int(x)) if math.isfinite(x) and float(x).is_integer() else NAC
    return sym.dim(int(x))


def constant(expr, sym: Symbols) -> Abs:
    """A Relax constant: its shape, and its elements when few and integral."""
    arr = const_np(expr)
    value = None
    if arr.ndim <= 1 and arr.size <= VALUE_LIMIT and arr.dtype.kind in "biuf":
        value = [_element(x, sym) for x in arr.reshape(-1).tolist()]
    return tensor([known(d) for d in arr.shape], str(arr.dtype), value)


def trackable(out: Abs) -> bool:
    """Whether RDP keeps the values of ``out``: a scalar, or a short vector."""
    if out.what in ("shape", "prim"):
        return True
    if out.what != "tensor" or out.rank is None or out.rank > 1:
        return False
    dtype = out.dtype or ""
    if not (dtype.startswith(("int", "uint", "float", "bool"))):
        return False
    return all(d.value is not None for d in out.dims) and math.prod(
        d.value for d in out.dims) <= VALUE_LIMIT


# ------------------------------------------------------------------- arithmetic
def _arith(fn, sym: Symbols):
    def apply(a: Dim, b: Dim) -> Dim:
        if a.expr is None or b.expr is None:
            return NAC
        return sym.dim(fn(as_index(a.expr), as_index(b.expr)))
    return apply


def _exact_div(sym: Symbols):
    """Real division of integral floats: kept only when exact."""
    def apply(a: Dim, b: Dim) -> Dim:
        if a.expr is None or b.expr is None or sym.prove(b.expr != 0) is not True:
            return NAC
        if sym.prove(tirx.floormod(as_index(a.expr), as_index(b.expr)) == 0) is not True:
            return NAC
        return sym.dim(tirx.floordiv(as_index(a.expr), as_index(b.expr)))
    return apply


def _compare(fn, sym: Symbols):
    def apply(a: Dim, b: Dim) -> Dim:
        if a.expr is None or b.expr is None:
            return NAC
        decided = sym.prove(fn(as_index(a.expr), as_index(b.expr)))
        return NAC if decided is None else known(int(decided))
    return apply


def _logical(fn):
    def apply(a: Dim, b: Dim) -> Dim:
        if a.value is None or b.value is None:
            return NAC
        return known(int(fn(bool(a.value), bool(b.value))))
    return apply


_BINARY = {
    "relax.add": lambda s: _arith(lambda a, b: a + b, s),
    "relax.subtract": lambda s: _arith(lambda a, b: a - b, s),
    "relax.multiply": lambda s: _arith(lambda a, b: a * b, s),
    "relax.floor_divide": lambda s: _arith(tirx.floordiv, s),
    "relax.floor_mod": lambda s: _arith(tirx.floormod, s),
    "relax.mod": lambda s: _arith(tirx.truncmod, s),
    "relax.maximum": lambda s: _arith(tirx.max, s),
    "relax.minimum": lambda s: _arith(tirx.min, s),
    "relax.equal": lambda s: _compare(lambda a, b: a == b, s),
    "relax.not_equal": lambda s: _compare(lambda a, b: a != b, s),
    "relax.less": lambda s: _compare(lambda a, b: a < b, s),
    "relax.less_equal": lambda s: _compare(lambda a, b: a <= b, s),
    "relax.greater": lambda s: _compare(lambda a, b: a > b, s),
    "relax.greater_equal": lambda s: _compare(lambda a, b: a >= b, s),
    "relax.logical_and": lambda s: _logical(lambda a, b: a and b),
    "relax.logical_or": lambda s: _logical(lambda a, b: a or b),
    "relax.logical_xor": lambda s: _logical(lambda a, b: a != b),
}


def _zip(values: list, fn):
    """Element-wise ``fn`` over flat values with scalar broadcasting."""
    size = max(len(v) for v in values)
    if any(len(v) not in (1, size) for v in values):
        return None
    return [fn(*(v[0] if len(v) == 1 else v[i] for v in values)) for i in range(size)]


def _binary_value(name, call, args, out, sym):
    if any(a.value is None for a in args[:2]):
        return None
    if name == "relax.divide":
        floats = (out.dtype or "").startswith("float")
        fn = _exact_div(sym) if floats else _arith(tirx.truncdiv, sym)
    else:
        fn = _BINARY[name](sym)
    return _zip([args[0].value, args[1].value], fn)


def _unary_value(name, call, args, out, sym):
    value = args[0].value
    if value is None:
        return None
    if name == "relax.negative":
        return [NAC if v.expr is None else sym.dim(0 - as_index(v.expr)) for v in value]
    if name == "relax.logical_not":
        return [NAC if v.value is None else known(int(not v.value)) for v in value]
    if name == "relax.astype" and str(call.attrs.dtype) == "bool":
        return [NAC if v.expr is None else _compare(lambda a, b: a != b, sym)(v, known(0))
                for v in value]
    return list(value)  # casts and roundings of integral values change nothing


def _where_value(name, call, args, out, sym):
    if any(a.value is None for a in args[:3]):
        return None

    def pick(c: Dim, x: Dim, y: Dim) -> Dim:
        return NAC if c.value is None else (x if c.value else y)
    return _zip([a.value for a in args[:3]], pick)


def _layout_value(name, call, args, out, sym):
    """Reshapes, squeezes, casts: the same elements in the same order."""
    return None if args[0].value is None else list(args[0].value)


def _ints(tup) -> list[int] | None:
    fields = tup.fields if isinstance(tup, relax.Tuple) else tup
    if fields is None or not all(isinstance(f, tirx.IntImm) for f in fields):
        return None
    return [int(f.value) for f in fields]


def _take_value(name, call, args, out, sym):
    data, idx = args[0], args[1]
    if data.value is None or idx.value is None or data.rank != 1:
        return None
    n = len(data.value)
    picked = []
    for i in idx.value:
        if i.value is None or not -n <= i.value < n:
            return None
        picked.append(data.value[i.value % n])
    return picked


def _slice_value(name, call, args, out, sym):
    data = args[0]
    if data.value is None or data.rank != 1 or len(call.args) < 4:
        return None
    axes, begin, end = (_ints(a) for a in call.args[1:4])
    strides = _ints(call.args[4]) if len(call.args) > 4 else [1]
    if not (axes == [0] and begin and end and strides) or len(begin) != 1:
        return None
    return list(data.value[slice(begin[0], end[0], strides[0])])


def _scatter_value(name, call, args, out, sym):
    """``scatter_elements`` with ``update`` on a vector: the importer's way of writing
    one slice bound into a list of them."""
    data, idx, upd = args[:3]
    if data.value is None or idx.value is None or upd.value is None or data.rank != 1:
        return None
    if str(getattr(call.attrs, "reduction", "update")) != "update":
        return None
    value, n = list(data.value), len(data.value)
    for i, u in zip(idx.value, upd.value):
        if i.value is None or not -n <= i.value < n:
            return None
        value[i.value % n] = u
    return value


def _concat_value(name, call, args, out, sym):
    fields = args[0].fields
    if not fields or any(f.value is None or f.rank != 1 for f in fields):
        return None
    return [v for f in fields for v in f.value]


def _reduce_value(name, call, args, out, sym):
    value = args[0].value
    if value is None or not value:
        return None
    fn = {"relax.sum": lambda a, b: a + b, "relax.prod": lambda a, b: a * b,
          "relax.max": tirx.max, "relax.min": tirx.min}[name]
    acc = value[0]
    for v in value[1:]:
        acc = _arith(fn, sym)(acc, v)
    return [acc]


def _arange_value(name, call, args, out, sym):
    bounds = [a.value[0] if a.value else NAC for a in args[:3]]
    if any(b.value is None for b in bounds) or bounds[2].value == 0:
        return None
    values = range(bounds[0].value, bounds[1].value, bounds[2].value)
    return [known(v) for v in values] if len(values) <= VALUE_LIMIT else None


def _fill_value(name, call, args, out, sym):
    fill = {"relax.zeros": known(0), "relax.ones": known(1)}.get(name)
    if fill is None:
        fill_arg = args[1]
        fill = fill_arg.value[0] if fill_arg.value and len(fill_arg.value) == 1 else NAC
    if out.dims is None or any(d.value is None for d in out.dims):
        return None
    return [fill] * math.prod(d.value for d in out.dims)


def _shape_of_value(name, call, args, out, sym):
    return None if args[0].dims is None else list(args[0].dims)


_VALUE_RULES = {
    **dict.fromkeys([*_BINARY, "relax.divide"], _binary_value),
    **dict.fromkeys(["relax.negative", "relax.logical_not", "relax.astype", "relax.floor",
                     "relax.ceil", "relax.round", "relax.trunc"], _unary_value),
    **dict.fromkeys(["relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten",
                     "relax.shape_to_tensor", "relax.tensor_to_shape",
                     "relax.broadcast_to"], _layout_value),
    **dict.fromkeys(["relax.sum", "relax.prod", "relax.max", "relax.min"], _reduce_value),
    **dict.fromkeys(["relax.zeros", "relax.ones", "relax.full"], _fill_value),
    "relax.where": _where_value,
    "relax.take": _take_value,
    "relax.strided_slice": _slice_value,
    "relax.concat": _concat_value,
    "relax.scatter_elements": _scatter_value,
    "relax.arange": _arange_value,
    "relax.shape_of": _shape_of_value,
}


def forward_value(name: str, call, args: list[Abs], out: Abs, sym: Symbols):
    """The elements of ``call``'s output, as far as the inputs' values decide them
    (``None``: not tracked). ``out`` is the output's abstract shape."""
    rule = _VALUE_RULES.get(name)
    if rule is None or not trackable(out):
        return None
    value = rule(name, call, args, out, sym)
    if value is None:
        return None
    if out.what == "tensor" and len(value) != math.prod(d.value for d in out.dims):
        if name != "relax.broadcast_to" or len(value) != 1:
            return None
        value = value * math.prod(d.value for d in out.dims)
    return [sym.refresh(v) for v in value]


def _canonical(index, extent, stride: int):
    low, high = (-1, extent - 1) if stride < 0 else (0, extent)
    index = tirx.Select(index < 0, index + extent, index)
    return tirx.min(tirx.max(index, low), high)


def sliced_dims(data: Abs, begin, end, strides, sym: Symbols) -> list[Dim] | None:
    """``dynamic_strided_slice``'s output dims from its bound values (the length Relax's
    legalization computes at run time: indices wrapped, clamped, ``ceildiv``)."""
    if data.dims is None or begin is None or end is None or strides is None:
        return None
    if not (len(begin) == len(end) == len(strides) <= data.rank):
        return None
    dims = list(data.dims)
    for i, (b, e, st) in enumerate(zip(begin, end, strides)):
        if b.expr is None or e.expr is None or st.value in (None, 0) or dims[i].expr is None:
            return None
        ext = as_index(dims[i].expr)
        lo = _canonical(as_index(b.expr), ext, st.value)
        hi = _canonical(as_index(e.expr), ext, st.value)
        length = tirx.ceildiv(lo - hi, -st.value) if st.value < 0 else tirx.ceildiv(
            hi - lo, st.value)
        dims[i] = sym.dim(length)
    return dims


# ------------------------------------------------------------------- broadcasting
def _broadcast_pair(a: Dim, b: Dim, sym: Symbols) -> Dim | None:
    """The broadcast of two dims in a valid program: equal, or one of them is 1; so a
    dim that cannot be 1 wins, and two dims of at least 1 give their maximum."""
    if sym.equal(a, b):
        return a
    if a.value == 1:
        return b
    if b.value == 1:
        return a
    if a.expr is None or b.expr is None:
        return None
    x, y = as_index(a.expr), as_index(b.expr)
    if sym.prove(x != 1) is True:
        return a
    if sym.prove(y != 1) is True:
        return b
    if sym.prove(x >= 1) is True and sym.prove(y >= 1) is True:
        return sym.dim(tirx.max(x, y))
    return None


def _aligned(args: list[Abs], rank: int):
    """Each argument's dims right-aligned to ``rank`` (missing leading dims: 1)."""
    return [[known(1)] * (rank - a.rank) + list(a.dims) for a in args]


def broadcast_dims(args: list[Abs], sym: Symbols) -> list[Dim | None] | None:
    """Numpy broadcasting of ``args``' shapes; ``None`` at a position Relax's rules and
    the analyzer cannot decide (``N`` against ``M``), ``None`` overall if a rank is
    unknown."""
    if not args or any(a.dims is None for a in args):
        return None
    rank = max(a.rank for a in args)
    out: list[Dim | None] = []
    for column in zip(*_aligned(args, rank)):
        acc: Dim | None = column[0]
        for d in column[1:]:
            acc = None if acc is None else _broadcast_pair(acc, d, sym)
        out.append(acc)
    return out


# ----------------------------------------------------------------------- backward
def _pairs(xs, ys):
    return [(x, y) for x, y in zip(xs, ys)]


def _backward_broadcast(call, out: Abs, args: list[Abs], sym: Symbols):
    if out.dims is None or any(a.dims is None for a in args):
        return []
    pairs = []
    columns = list(zip(*_aligned(args, out.rank)))
    for pos, column in enumerate(columns):
        o = out.dims[pos]
        for j, arg in enumerate(args):
            if pos < out.rank - arg.rank:
                continue
            d = column[j]
            others_one = all(c.value == 1 for k, c in enumerate(column) if k != j)
            not_one = d.expr is not None and sym.prove(as_index(d.expr) != 1) is True
            if others_one or not_one:
                pairs.append((d, o))
    return pairs


def _backward_matmul(call, out: Abs, args: list[Abs], sym: Symbols):
    a, b = args[:2]
    if a.dims is None or b.dims is None or not a.dims or not b.dims:
        return []
    pairs = [(a.dims[-1], b.dims[-2] if b.rank >= 2 else b.dims[0])]
    if out.dims:
        if a.rank >= 2 and b.rank >= 2:
            pairs += [(out.dims[-2], a.dims[-2]), (out.dims[-1], b.dims[-1])]
        elif b.rank >= 2:
            pairs.append((out.dims[-1], b.dims[-1]))
        elif a.rank >= 2:
            pairs.append((out.dims[-1], a.dims[-2]))
    return pairs


def _backward_concat(call, out: Abs, args: list[Abs], sym: Symbols):
    fields = args[0].fields
    if out.dims is None or not fields or any(f.dims is None or f.rank != out.rank
                                             for f in fields):
        return []
    axis = int(call.attrs.axis) % out.rank
    pairs = [(f.dims[i], out.dims[i]) for f in fields for i in range(out.rank) if i != axis]
    along = [f.dims[axis] for f in fields]
    open_ = [d for d in along if not d.determined]
    if len(open_) == 1 and out.dims[axis].determined:
        rest = sum((as_index(d.expr) for d in along if d is not open_[0]),
                   tirx.IntImm("int64", 0))
        pairs.append((open_[0], sym.dim(as_index(out.dims[axis].expr) - rest)))
    return pairs


def _product(dims):
    acc = tirx.IntImm("int64", 1)
    for d in dims:
        acc = acc * as_index(d.expr)
    return acc


def _solve_count(unknown_side, known_side, sym: Symbols):
    """The one undetermined dim of ``unknown_side`` from the element count of
    ``known_side``, when the division is exact and the divisor provably non-zero."""
    open_ = [d for d in unknown_side if not d.determined]
    if len(open_) != 1 or open_[0].expr is None or any(
            not d.determined for d in known_side):
        return []
    rest = _product([d for d in unknown_side if d is not open_[0]])
    total = _product(known_side)
    if sym.prove(rest >= 1) is not True:
        return []
    quotient = sym.resolve(tirx.floordiv(total, rest))
    if not sym.analyzer.can_prove_equal(quotient * rest, total):
        return []
    return [(open_[0], sym.dim(quotient))]


def _backward_reshape(call, out: Abs, args: list[Abs], sym: Symbols):
    x = args[0]
    if x.dims is None or out.dims is None:
        return []
    return _solve_count(out.dims, x.dims, sym) + _solve_count(x.dims, out.dims, sym)


def _backward_permute(call, out: Abs, args: list[Abs], sym: Symbols):
    x = args[0]
    if x.dims is None or out.dims is None or x.rank != out.rank:
        return []
    axes = call.attrs.axes
    axes = list(range(x.rank))[::-1] if axes is None else [int(a) % x.rank for a in axes]
    return [(out.dims[i], x.dims[a]) for i, a in enumerate(axes)]


def _backward_conv(call, out: Abs, args: list[Abs], sym: Symbols):
    data, weight = args[:2]
    attrs = call.attrs
    if data.dims is None or weight.dims is None or len(data.dims) < 2 or len(weight.dims) < 2:
        return []
    if not (str(attrs.data_layout).startswith("NC") and str(attrs.kernel_layout).startswith("OI")):
        return []
    if weight.dims[1].expr is None:
        return []
    channels = sym.dim(as_index(weight.dims[1].expr) * int(attrs.groups))
    return [(data.dims[1], channels)]


def _backward_same(call, out: Abs, args: list[Abs], sym: Symbols):
    x = args[0]
    if x.dims is None or out.dims is None or x.rank != out.rank:
        return []
    return _pairs(out.dims, x.dims)


_BACKWARD = {
    TransferKind.SHAPE_PRESERVING: _backward_same,
    TransferKind.BROADCAST: _backward_broadcast,
    TransferKind.MATMUL: _backward_matmul,
    TransferKind.CONCAT: _backward_concat,
    TransferKind.RESHAPE: _backward_reshape,
    TransferKind.PERMUTE: _backward_permute,
    TransferKind.CONV: _backward_conv,
}


def backward(kind: TransferKind, call, out: Abs, args: list[Abs], sym: Symbols) -> list:
    """Equalities ``(dim, dim)`` that ``call``'s inputs and output must satisfy for the
    program to run (the thesis' backward transfer, :class:`TransferKind` by kind)."""
    rule = _BACKWARD.get(kind)
    if rule is None or out.what != "tensor":
        return []
    try:
        return rule(call, out, args, sym)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return []  # an operator variant the rule does not cover (attrs absent)

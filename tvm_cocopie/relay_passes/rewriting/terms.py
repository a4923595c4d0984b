"""Pattern terms: the small language rewrite rules are written in (DNNFusion §3.3).

A rule's left side is a tree of :class:`Term` s: ``op`` nodes (a Relax operator and
its argument terms), ``var`` leaves (any expression; a name used twice must bind the
same expression), ``const`` leaves (a Relax constant) and ``value`` leaves (a constant
whose every element equals a number). The right side is a term over the same names, or
a Python function of the :class:`Match` for rules that compute new weights.

Matching is modulo commutativity of ``add``/``multiply``/``maximum``/``minimum``
(the thesis' "commutative" swaps with no FLOP gain, Table 3.4 note ‡, are what make
the other rules find their operands in either order).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ...exprs import const_np, is_constant, op_name

#: binary operators whose two operands may be swapped while matching
COMMUTATIVE = frozenset({"add", "multiply", "maximum", "minimum"})


@dataclass(frozen=True)
class Term:
    """A pattern term: a variable, constant, value, operator call or tuple item, with the name it
    binds."""
    kind: str  # "var" | "const" | "value" | "op" | "tgi"
    name: str | None = None  # binding name (leaves) or bind name (op nodes)
    op: str | None = None  # Relax operator without the "relax." prefix
    args: tuple = ()
    value: float | None = None
    index: int = 0
    attrs_from: str | None = None  # rhs only: copy attrs of this matched call

    def leaves(self) -> Iterator[Term]:
        """The term's leaves (variables, constants, values), left to right."""
        if self.kind in ("var", "const", "value"):
            yield self
        for a in self.args:
            yield from a.leaves()

    def nodes(self) -> Iterator[Term]:
        """The term's operator and tuple-item nodes, outermost first."""
        if self.kind in ("op", "tgi"):
            yield self
        for a in self.args:
            yield from a.nodes()


def V(name: str) -> Term:
    """Any expression, bound to ``name``."""
    return Term("var", name)


def C(name: str) -> Term:
    """A constant (model weight), bound to ``name``."""
    return Term("const", name)


def K(value: float) -> Term:
    """A constant whose every element equals ``value`` (in the rhs: a scalar)."""
    return Term("value", value=float(value))


def op(name: str, *args: Term, bind: str | None = None, attrs_from: str | None = None) -> Term:
    """A term calling Relax operator ``name`` on ``args`` (``bind``: the name its call is matched
    as)."""
    return Term("op", bind, name, tuple(args), attrs_from=attrs_from)


def tgi(arg: Term, index: int, bind: str | None = None) -> Term:
    """A term taking item ``index`` of the tuple ``arg``."""
    return Term("tgi", bind, None, (arg,), index=index)


def _binary(name):
    return lambda a, b, bind=None: op(name, a, b, bind=bind)


def _unary(name):
    return lambda a, bind=None: op(name, a, bind=bind)


add, sub, mul, div = _binary("add"), _binary("subtract"), _binary("multiply"), _binary("divide")
maximum, minimum = _binary("maximum"), _binary("minimum")
neg, abs_, sqrt, rsqrt = _unary("negative"), _unary("abs"), _unary("sqrt"), _unary("rsqrt")
exp, log, square = _unary("exp"), _unary("log"), _unary("square")
relu, sigmoid, tanh = _unary("nn.relu"), _unary("sigmoid"), _unary("tanh")


def recip(a: Term, bind: str | None = None) -> Term:
    """``Recip(A)``: the ONNX importer writes Reciprocal as ``divide(1, A)``."""
    return op("divide", K(1.0), a, bind=bind)


_OPS: dict[str, tvm.ir.Op] = {}


def get_op(name: str) -> tvm.ir.Op:
    """The Relax operator ``relax.<name>`` (looked up once)."""
    if name not in _OPS:
        _OPS[name] = tvm.ir.Op.get("relax." + name)
    return _OPS[name]


# --------------------------------------------------------------------------- constants


def make_const(array, dtype: str | None = None) -> relax.Expr:
    """A Relax constant of ``array`` (cast to ``dtype``), copied into TVM once."""
    array = np.asarray(array)
    if dtype is not None:
        array = array.astype(dtype, copy=False)
    return relax.const(tvm.runtime.tensor(array))


def all_equal(expr, value: float) -> bool:
    """Whether ``expr`` is a constant whose every element equals ``value``."""
    if not is_constant(expr):
        return False
    arr = const_np(expr)
    return arr.size > 0 and arr.size <= 1 << 20 and bool(np.all(arr == value))


def same_expr(a, b) -> bool:
    """Whether ``a`` and ``b`` are the same expression (the same object, or equal constants)."""
    if a.same_as(b):
        return True
    if is_constant(a) and is_constant(b):
        x, y = const_np(a), const_np(b)
        return x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y))
    return False


# --------------------------------------------------------------------------- matching

@dataclass
class Match:
    """One way a rule's left side fits the graph at ``root``."""

    root: relax.Var
    env: dict = field(default_factory=dict)  # leaf name -> expr
    calls: dict = field(default_factory=dict)  # bind name -> matched Call
    edges: list = field(default_factory=list)  # (parent var, child var) looked through
    ops: list = field(default_factory=list)  # op names of every matched node
    graph: object = None

    def __getitem__(self, name: str):
        return self.env[name]

    def call(self, name: str) -> relax.Call:
        """The call matched as ``name``."""
        return self.calls[name]

    def np(self, name: str) -> np.ndarray:
        """The value of the constant bound to ``name``, as a read-only numpy array."""
        return const_np(self.env[name])

    def dtype(self, name: str | None = None) -> str:
        """The dtype of the binding ``name`` (the root by default)."""
        expr = self.root if name is None else self.env[name]
        return str(expr.ty.dtype)

    def copy(self) -> Match:
        """A copy whose bindings can be extended without changing this match."""
        return Match(self.root, dict(self.env), dict(self.calls), list(self.edges),
                     list(self.ops), self.graph)


class Matcher:
    """Match terms against the ANF bindings of one function (``graph.defs``)."""

    def __init__(self, graph):
        self.graph = graph

    def match_root(self, term: Term, var: relax.Var) -> Iterator[Match]:
        """Every way ``term`` matches the value bound to ``var`` (each a :class:`Match`)."""
        value = self.graph.defs.get(var)
        if value is None:
            return
        yield from self._node(term, value, var, None, Match(var, graph=self.graph))

    def _leaf(self, t: Term, e, m: Match) -> Iterator[Match]:
        if t.kind == "value":
            if all_equal(e, t.value):
                yield m
            return
        if t.kind == "const" and not is_constant(e):
            return
        if t.name == "_":
            yield m
            return
        prev = m.env.get(t.name)
        if prev is None:
            m = m.copy()
            m.env[t.name] = e
            yield m
        elif same_expr(prev, e):
            yield m

    def _arg(self, t: Term, e, parent, m: Match) -> Iterator[Match]:
        if t.kind not in ("op", "tgi"):
            yield from self._leaf(t, e, m)
            return
        if isinstance(e, relax.Var):
            value = self.graph.defs.get(e)
            if value is None:
                return
            yield from self._node(t, value, e, parent, m)

    def _node(self, t: Term, value, var, parent, m: Match) -> Iterator[Match]:
        if t.kind == "tgi":
            if not isinstance(value, relax.TupleGetItem) or value.index != t.index:
                return
            m = m.copy()
            if parent is not None:
                m.edges.append((parent, var))
            yield from self._arg(t.args[0], value.tuple_value, var, m)
            return
        if op_name(value) != t.op:
            return
        args = list(value.args)
        if len(args) != len(t.args):
            return
        m = m.copy()
        if parent is not None:
            m.edges.append((parent, var))
        m.ops.append(t.op)
        if t.name:
            m.calls[t.name] = value
        orders = [args]
        if t.op in COMMUTATIVE and len(args) == 2:
            orders.append(args[::-1])
        for order in orders:
            yield from self._args(t.args, order, var, m)

    def _args(self, terms, exprs, parent, m: Match) -> Iterator[Match]:
        if not terms:
            yield m
            return
        for m1 in self._arg(terms[0], exprs[0], parent, m):
            yield from self._args(terms[1:], exprs[1:], parent, m1)


# --------------------------------------------------------------------------- building

def build(term: Term, m: Match, dtype: str) -> relax.Expr:
    """The right side ``term`` instantiated with the bindings of ``m``."""
    if term.kind == "var" or term.kind == "const":
        return m.env[term.name]
    if term.kind == "value":
        return relax.const(np.asarray(term.value, dtype=dtype), dtype)
    args = [build(a, m, dtype) for a in term.args]
    attrs = m.calls[term.attrs_from].attrs if term.attrs_from else None
    return relax.Call(get_op(term.op), args, attrs)

"""A rewrite rule as data: pattern, replacement, preconditions, test example.

Each rule carries what it takes to check it, so that tests and the benchmark iterate
over the rule table: an :class:`Example` (shapes and value kinds of its leaves) from
which a small graph is generated where the rule must apply, and optionally a
``counter`` example where a precondition fails and the rule must not apply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tvm import relax

from ...exprs import const_np, is_constant, op_name
from .consts import nonnegative
from .terms import Match, Matcher, Term, build

#: the three DNNFusion categories (thesis §3.3, Table 3.4); rules in them only match
#: inside partitions of operators that have these properties
MATH_CATEGORIES = ("associative", "distributive", "commutative")
#: the simplifications of an inference graph optimizer; they match anywhere
OTHER_CATEGORIES = ("identity", "folding", "layout")
CATEGORIES = MATH_CATEGORIES + OTHER_CATEGORIES


@dataclass(frozen=True)
class Example:
    """How to build a graph the rule applies to.

    ``leaves`` maps a leaf name to a kind: ``"in"`` (an input, standard normal),
    ``"in_pos"`` (an input in [0.5, 2]), ``"nonneg"`` (``abs`` of an input, provably
    >= 0), ``"c"`` / ``"c_pos"`` / ``"c_neg"`` (a constant of the default shape),
    ``"s"`` / ``"s_pos"`` / ``"s_neg"`` (a scalar constant), or a tuple
    ``(kind, shape)`` / ``(kind, shape, dtype)``. ``ops`` maps an op term's bind name
    (or op name) to a function building that call from its arguments (for attributes).
    ``flops``: the expected ``(before, after)`` FLOPs of the generated graph.
    """

    leaves: dict = field(default_factory=dict)
    shape: tuple = (4, 8)
    dtype: str = "float32"
    ops: dict = field(default_factory=dict)
    flops: tuple | None = None
    #: a different graph than the rule's pattern: a Term, or a function of the leaves
    lhs: object = None


@dataclass(frozen=True)
class Rule:
    """One rewrite rule as data: its name and category, a left-hand term (or match function), a
    replacement, guards and examples."""
    name: str
    category: str
    lhs: Term | None
    rhs: Term | Callable[[Match], relax.Expr | None]
    where: tuple = ()
    doc: str = ""
    example: Example = field(default_factory=Example)
    counter: Example | None = None
    #: custom matcher ``(graph, var) -> Iterator[Match]`` for rules a term cannot say
    match_fn: Callable | None = None
    #: root operator names this rule can match (derived from lhs if omitted)
    roots: tuple = ()

    def root_ops(self) -> tuple:
        """The operator names the rule's match can start at."""
        if self.roots:
            return self.roots
        if self.lhs is None:
            return ("*",)
        return (self.lhs.op if self.lhs.kind == "op" else "$tgi",)

    def matches(self, graph, var) -> Iterator[Match]:
        """Every match of the rule rooted at binding ``var`` of ``graph`` that passes its guards."""
        candidates = (self.match_fn(graph, var) if self.match_fn is not None
                      else Matcher(graph).match_root(self.lhs, var))
        for m in candidates:
            if all(pred(m) for pred in self.where):
                yield m

    def replacement(self, m: Match) -> relax.Expr | None:
        """The expression that replaces the match ``m`` (``None``: the rule declines)."""
        if callable(self.rhs):
            return self.rhs(m)
        return build(self.rhs, m, m.dtype())

    @property
    def is_math(self) -> bool:
        """Whether the rule applies a math property (not folding or data movement)."""
        return self.category in MATH_CATEGORIES


# --------------------------------------------------------------------------- guards
# Preconditions are small named functions of a Match, so the tests can name them.

def is_float(*names: str) -> Callable[[Match], bool]:
    """A guard: the named bindings (the root by default) are floating point."""
    def pred(m: Match) -> bool:
        keys = names or (None,)
        return all(m.dtype(n).startswith(("float", "bfloat")) for n in keys)
    pred.__name__ = f"is_float{names}"
    return pred


def is_int(*names: str) -> Callable[[Match], bool]:
    """A guard: the named bindings (the root by default) are integers."""
    def pred(m: Match) -> bool:
        keys = names or (None,)
        return all(m.dtype(n).startswith(("int", "uint")) for n in keys)
    pred.__name__ = f"is_int{names}"
    return pred


def nonneg(*names: str) -> Callable[[Match], bool]:
    """Value-domain guard: every named leaf is provably >= 0."""

    def pred(m: Match) -> bool:
        return all(nonnegative(m[n], m.graph) for n in names)
    pred.__name__ = f"nonneg{names}"
    return pred


def scalar(*names: str) -> Callable[[Match], bool]:
    """The named leaves are constants with one element."""

    def pred(m: Match) -> bool:
        return all(is_constant(m[n]) and const_np(m[n]).size == 1 for n in names)
    pred.__name__ = f"scalar{names}"
    return pred


#: operators a fusing compiler runs their elementwise consumers in (fused epilogues)
EPILOGUE_ANCHORS = frozenset({"nn.conv1d", "nn.conv2d", "nn.conv3d", "nn.conv2d_transpose",
                              "matmul"})


def not_in_epilogue(name: str, depth: int = 4) -> Callable[[Match], bool]:
    """Fusion guard for swaps that move an elementwise op past a pooling: the leaf
    ``name`` must not be computed from a conv/matmul output by elementwise arithmetic
    (bias adds, scales, residual adds, inference BatchNorm). There the op runs for free in the producer's
    fused epilogue (DNNFusion counts FLOPs, §3.3, but rewriting runs before fusion,
    §3.4); moving it behind the pooling saves no time and costs a kernel (VGG-16: 20
    -> 23 kernels)."""

    def from_anchor(expr, graph, left: int) -> bool:
        value = graph.defs.get(expr) if isinstance(expr, relax.Var) else None
        if isinstance(value, relax.TupleGetItem):  # inference BatchNorm's output
            return left > 0 and from_anchor(value.tuple_value, graph, left - 1)
        kind = op_name(value)
        if kind in EPILOGUE_ANCHORS:
            return True
        if left == 0 or kind not in ("add", "subtract", "multiply", "divide",
                                     "nn.batch_norm"):
            return False
        args = value.args[:1] if kind == "nn.batch_norm" else value.args
        return any(from_anchor(a, graph, left - 1) for a in args)

    def pred(m: Match) -> bool:
        return not from_anchor(m[name], m.graph, depth)
    pred.__name__ = f"not_in_epilogue({name})"
    return pred

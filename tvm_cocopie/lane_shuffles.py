"""Lane-permuted vector loads as one contiguous load and a shuffle: the TIR pass
:func:`permuted_loads`.

A vector load whose index is not a ramp, ``src[idx]`` with ``idx`` a vector of
offsets, is a gather to TVM 0.27's LLVM code generation: it extracts each lane's
index and loads the lane alone (checked: ``vpextrd`` / ``vinsertps`` per lane for a
rotation inside groups of 4 lanes, the offsets built at run time). Where the lanes of
``idx`` are a permutation of ``L`` consecutive elements, ``base + d_i`` with the
``d_i`` constants covering ``m .. m + L - 1``, the same values are one vector load of
those elements and a shuffle with constant indices ``d_i - m`` (``vshufps`` /
``vpermilps`` / ``vpermps`` on x86): the same elements read, no more. The
rotated-vector grouped conv (:mod:`tvm_cocopie.topi.cpu.gspc_shift`) reads each
pixel's channel chunk rotated inside its groups this way.

The pass runs on host functions after TVM's host finalization (the loads are
vectorized, unrolled and their index parts bound to common-subexpression variables
by then: those bindings are followed), on the values of buffer stores. Statements of
kinds :func:`tvm_cocopie.tir_stmt.with_bodies` does not rebuild, and expressions of
kinds :meth:`_Rewriter.expr` does not, are kept as they are.
"""

from __future__ import annotations

import logging

import tvm
from tvm import tirx
from tvm.sym import Analyzer

from .tir_stmt import prim_func_pass, with_bodies

log = logging.getLogger(__name__)

_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
           tirx.Min, tirx.Max, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE, tirx.And,
           tirx.Or)


def _lanes(expr) -> int:
    """Lanes of a primitive expression's type (1 for a scalar)."""
    return int(tvm.DataType(str(expr.ty)).lanes)


def lane(expr, i: int, bound: dict):
    """The scalar expression of lane ``i`` of the integer vector ``expr`` (``None`` where
    a node is not one of ramp, broadcast, variable, constant, arithmetic, comparison,
    select); ``bound`` maps variables to the values they were bound to (followed, so
    that a bound ``x * 16`` is known to be a multiple of 4)."""
    if isinstance(expr, tirx.Ramp):
        return expr.base + expr.stride * i
    if isinstance(expr, tirx.Broadcast):
        return expr.value
    if isinstance(expr, tirx.IntImm):
        return expr
    if isinstance(expr, tirx.Var):
        value = bound.get(expr)
        if value is None:
            return expr if _lanes(expr) == 1 else None
        return lane(value, i, bound)
    if isinstance(expr, tirx.Select):
        parts = [lane(e, i, bound) for e in (expr.condition, expr.true_value, expr.false_value)]
        return None if any(p is None for p in parts) else tirx.Select(*parts)
    if isinstance(expr, _BINARY):
        a, b = lane(expr.a, i, bound), lane(expr.b, i, bound)
        if a is None or b is None:
            return None
        return type(expr)(a, b)
    return None


def as_shuffle(load, bound: dict, analyzer: Analyzer | None = None):
    """``load`` (a vector load of one index) as a contiguous load and a constant shuffle
    when its lanes read a permutation of consecutive elements; else ``None``."""
    if len(load.indices) != 1:
        return None
    (index,) = load.indices
    if isinstance(index, tirx.Ramp) or _lanes(index) == 1:
        return None
    lanes = _lanes(index)
    analyzer = analyzer or Analyzer()
    first = lane(index, 0, bound)
    if first is None:
        return None
    offsets = []
    for i in range(lanes):
        value = lane(index, i, bound)
        if value is None:
            return None
        diff = analyzer.simplify(value - first)
        if not isinstance(diff, tirx.IntImm):
            return None
        offsets.append(int(diff.value))
    low = min(offsets)
    if sorted(offsets) != list(range(low, low + lanes)):
        return None  # not a permutation of one window: loads elsewhere would be new reads
    start = analyzer.simplify(first + low)
    whole = tirx.BufferLoad(load.source, [tirx.Ramp(start, 1, lanes)])
    return tirx.Shuffle([whole], [tirx.IntImm("int32", d - low) for d in offsets])


class _Rewriter:
    """The statement tree with every permuted vector load in a stored value as a
    contiguous load and a shuffle (module docstring)."""

    def __init__(self):
        self.bound: dict = {}
        self.rewritten = 0
        self.analyzer = Analyzer()

    def expr(self, node):
        """``node`` with its permuted vector loads shuffled (nodes of other kinds than
        arithmetic, select, cast, broadcast and calls kept as they are)."""
        if isinstance(node, tvm.ir.TensorLoad):
            if _lanes(node) > 1:
                shuffled = as_shuffle(node, self.bound, self.analyzer)
                if shuffled is not None:
                    self.rewritten += 1
                    return shuffled
            return node
        if isinstance(node, _BINARY):
            a, b = self.expr(node.a), self.expr(node.b)
            return node if a.same_as(node.a) and b.same_as(node.b) else type(node)(a, b)
        if isinstance(node, tirx.Select):
            parts = [self.expr(e) for e in (node.condition, node.true_value, node.false_value)]
            same = all(p.same_as(e) for p, e in zip(
                parts, (node.condition, node.true_value, node.false_value)))
            return node if same else tirx.Select(*parts)
        if isinstance(node, tirx.Cast):
            value = self.expr(node.value)
            return node if value.same_as(node.value) else tirx.Cast(node.ty, value)
        if isinstance(node, tirx.Broadcast):
            value = self.expr(node.value)
            return node if value.same_as(node.value) else tirx.Broadcast(value, node.lanes)
        if isinstance(node, tvm.ir.Call):
            args = [self.expr(a) for a in node.args]
            if all(a.same_as(b) for a, b in zip(args, node.args)):
                return node
            return tvm.ir.Call(node.op, args, node.attrs, node.ty_args, node.span,
                               ret_ty=node.ty)
        return node

    def stmt(self, node):
        if isinstance(node, tirx.SeqStmt):
            return tirx.SeqStmt([self.stmt(s) for s in node.seq])
        if isinstance(node, tirx.Bind):
            self.bound[node.var] = node.value
            return node
        if isinstance(node, tirx.BufferStore):
            value = self.expr(node.value)
            if value.same_as(node.value):
                return node
            return tirx.BufferStore(node.buffer, value, node.indices)
        rebuilt = with_bodies(node, self.stmt)
        return node if rebuilt is None else rebuilt


def permuted_loads() -> tvm.transform.Pass:
    """The pass: permuted vector loads as a load and a shuffle (module docstring)."""

    def rewrite(name: str, func):
        rewriter = _Rewriter()
        body = rewriter.stmt(func.body)
        if not rewriter.rewritten:
            return None
        log.debug("%s: %d permuted loads shuffled", name, rewriter.rewritten)
        return func.with_body(body)

    return prim_func_pass("PermutedLoads", rewrite)

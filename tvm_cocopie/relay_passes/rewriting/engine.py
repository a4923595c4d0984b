"""The greedy rewriter of DNNFusion §3.3.

"DNNFusion first partitions the entire Extended Computational Graph into many
sub-graphs by considering operators with neither of associative, communicative, or
distributive properties as partitioning points [...] all matching rules within a
partition are considered and the rule leading to the largest reduction in #FLOPS is
applied. This process is repeated till there are no additional matching rules."

Here: a round collects, at every binding, the first match of every rule whose root
operator fits, keeps those whose saving (:mod:`.cost`) is positive, and applies them
in order of decreasing saving, skipping any that overlaps one already taken. Math
rules (the three property categories) match only operators that have a property, so
they never cross a partition boundary; simplification rules (BN folding, identities,
layout chains) match anywhere. Each round strictly lowers the graph's cost tuple of
non-negative integers, so rewriting terminates; a round that does not (a cost model
bug) is undone with a warning, and ``max_rounds`` bounds the loop besides.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax

from ...exprs import is_constant, op_name
from .consts import fold
from .cost import Cost, call_cost, function_cost

log = logging.getLogger(__name__)

#: what building or type-checking a replacement may raise (TVM errors are RuntimeErrors)
_BUILD_ERRORS = (RuntimeError, ValueError, TypeError, AttributeError, KeyError, IndexError)

#: operators with at least one of the three properties (partition members)
PROPERTY_OPS = frozenset({
    "add", "subtract", "multiply", "divide", "negative", "abs", "sqrt", "rsqrt", "exp",
    "log", "square", "maximum", "minimum", "nn.relu", "sigmoid", "sum", "prod", "mean",
    "max", "min", "left_shift", "right_shift", "matmul", "nn.conv2d", "nn.max_pool2d",
    "nn.avg_pool2d", "tanh", "power",
})


class Graph:
    """Def-use view of one Relax function in ANF."""

    def __init__(self, func: relax.Function):
        self.func = func
        self.defs: dict = {}
        self.order: list = []
        self.uses: Counter = Counter()
        for block in func.body.blocks:
            for b in block.bindings:
                if isinstance(b, relax.VarBinding):
                    self.defs[b.var] = b.value
                    self.order.append(b.var)
                for v in _vars_in(b.value):
                    self.uses[v] += 1
        for v in _vars_in(func.body.body):
            self.uses[v] += 1

    def partitions(self) -> list[list]:
        """Maximal connected sets of property operators (DNNFusion's sub-graphs)."""
        parent = {}

        def find(v):
            while parent[v] is not v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        members = [v for v in self.order if op_name(self.defs[v]) in PROPERTY_OPS]
        for v in members:
            parent[v] = v
        for v in members:
            for a in _vars_in(self.defs[v]):
                if a in parent:
                    ra, rv = find(a), find(v)
                    if ra is not rv:
                        parent[ra] = rv
        groups: dict = {}
        for v in members:
            groups.setdefault(find(v), []).append(v)
        return list(groups.values())


def _vars_in(expr) -> list:
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Call):
        out = []
        for a in expr.args:
            out.extend(_vars_in(a))
        return out
    if isinstance(expr, relax.Tuple):
        out = []
        for f in expr.fields:
            out.extend(_vars_in(f))
        return out
    if isinstance(expr, relax.TupleGetItem):
        return _vars_in(expr.tuple_value)
    if isinstance(expr, relax.SeqExpr):
        return []
    return []


@dataclass
class Candidate:
    """A rewrite the engine may apply: the rule, the binding it matched at, the replacement and its
    cost gain."""
    rule: object
    root: relax.Var
    expr: relax.Expr
    dead: set
    saving: Cost


@dataclass
class RewriteStats:
    """What a rewriting run did: rounds, rewrites per rule, partitions, and the cost before and
    after."""
    rounds: int = 0
    applied: Counter = field(default_factory=Counter)
    partitions: int = 0
    before: Cost = field(default_factory=Cost)
    after: Cost = field(default_factory=Cost)


def fold_constants(expr):
    """Fold constant sub-expressions of a freshly built replacement."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        args = [fold_constants(a) for a in expr.args]
        if any(not a.same_as(b) for a, b in zip(args, expr.args)):
            expr = relax.Call(expr.op, args, expr.attrs, expr.ty_args)
        if args and all(is_constant(a) for a in args):
            folded = fold(expr)
            if folded is not None:
                return folded
    return expr


def dead_set(m, graph: Graph) -> set:
    """Matched bindings that become unused once the root is replaced."""
    dead = {m.root}
    changed = True
    while changed:
        changed = False
        for _p, child in m.edges:
            if child in dead:
                continue
            n = sum(1 for p, c in m.edges if c.same_as(child) and p in dead)
            if n >= graph.uses[child]:
                dead.add(child)
                changed = True
    return dead


class _Typer:
    """Infers types of replacement expressions in a scratch BlockBuilder scope."""

    def __init__(self):
        self.bb = relax.BlockBuilder()
        self.bb._begin_dataflow_block()

    def close(self):
        self.bb._end_block()

    def normalize(self, expr):
        return self.bb.normalize(expr)

    def cost(self, expr) -> Cost:
        total = call_cost(expr) if isinstance(expr, relax.Call) else Cost()
        args = list(expr.args) if isinstance(expr, relax.Call) else \
            list(expr.fields) if isinstance(expr, relax.Tuple) else []
        for a in args:
            if isinstance(a, relax.Tuple):
                total = total + self.cost(a)
                continue
            if isinstance(a, relax.Var):
                bound = self.bb.lookup_binding(a)
                if bound is not None:
                    total = total + self.cost(bound)
        return total


def _types_equal(a, b) -> bool:
    return tvm_ffi.structural_equal(a, b, map_free_vars=False)


def _evaluate(rule, m, graph: Graph, typer: _Typer) -> Candidate | None:
    if rule.is_math and any(o not in PROPERTY_OPS for o in m.ops):
        return None
    try:
        expr = rule.replacement(m)
    except _BUILD_ERRORS as err:  # a replacement that cannot be built is not applied
        log.debug("rule %s: replacement failed: %s", rule.name, err)
        return None
    if expr is None:
        return None
    expr = fold_constants(expr)
    try:
        typed = typer.normalize(expr)
    except _BUILD_ERRORS as err:
        log.debug("rule %s: replacement ill-typed: %s", rule.name, err)
        return None
    if not _types_equal(typed.ty, m.root.ty):
        log.debug("rule %s: type %s != %s", rule.name, typed.ty, m.root.ty)
        return None
    dead = dead_set(m, graph)
    removed = Cost()
    for v in dead:
        removed = removed + call_cost(graph.defs[v])
    saving = removed - typer.cost(typed)
    if not saving.positive():
        return None
    return Candidate(rule, m.root, expr, dead, saving)


def _index(rules) -> dict:
    by_root: dict = {}
    for r in rules:
        for name in r.root_ops():
            by_root.setdefault(name, []).append(r)
    return by_root


def _root_key(value) -> str | None:
    if isinstance(value, relax.TupleGetItem):
        return "$tgi"
    return op_name(value)


def candidates(func: relax.Function, rules, graph: Graph | None = None) -> list[Candidate]:
    """Every rule's first profitable match at every binding, best first."""
    graph = graph or Graph(func)
    by_root = _index(rules)
    typer = _Typer()
    found = []
    try:
        for var in graph.order:
            value = graph.defs[var]
            key = _root_key(value)
            for rule in by_root.get(key, []) + by_root.get("*", []):
                for m in rule.matches(graph, var):
                    cand = _evaluate(rule, m, graph, typer)
                    if cand is not None:
                        found.append(cand)
                        break
    finally:
        typer.close()
    found.sort(key=lambda c: tuple(c.saving), reverse=True)
    return found


def _replace(func: relax.Function, repl: dict) -> relax.Function:
    blocks = []
    for block in func.body.blocks:
        bindings = [relax.VarBinding(b.var, repl[b.var])
                    if isinstance(b, relax.VarBinding) and b.var in repl else b
                    for b in block.bindings]
        blocks.append(type(block)(bindings))
    body = relax.SeqExpr(blocks, func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)


def _normalize(func: relax.Function) -> relax.Function:
    mod = tvm.IRModule({"f": func})
    mod = relax.transform.Normalize()(mod)
    mod = relax.transform.CanonicalizeBindings()(mod)
    return relax.analysis.remove_all_unused(mod["f"])


def rewrite_function(func: relax.Function, rules, max_rounds: int = 200
                     ) -> tuple[relax.Function, RewriteStats]:
    """Apply ``rules`` to ``func`` greedily until none saves anything."""
    func = _normalize(func)
    stats = RewriteStats(before=function_cost(func))
    stats.partitions = len(Graph(func).partitions())
    cost = stats.before
    for _ in range(max_rounds):
        graph = Graph(func)
        found = candidates(func, rules, graph)
        if not found:
            break
        chosen, touched = [], set()
        for c in found:
            if c.dead & touched:
                continue
            chosen.append(c)
            touched |= c.dead
        new_func = _normalize(_replace(func, {c.root: c.expr for c in chosen}))
        new_cost = function_cost(new_func)
        if not (cost - new_cost).positive():
            log.warning("rewriting round did not lower the cost (%s -> %s) with %s; undone",
                        cost, new_cost, sorted({c.rule.name for c in chosen}))
            break
        func, cost = new_func, new_cost
        stats.rounds += 1
        stats.applied.update(c.rule.name for c in chosen)
    else:
        log.warning("rewriting stopped after max_rounds=%d rounds", max_rounds)
    stats.after = cost
    return func, stats


def rewrite_module(mod: tvm.IRModule, rules, max_rounds: int = 200
                   ) -> tuple[tvm.IRModule, RewriteStats]:
    """Rewrite every Relax function of ``mod``; the module is not modified."""
    total = RewriteStats()
    new_mod = mod.clone() if hasattr(mod, "clone") else tvm.IRModule(mod.functions)
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or func.attrs.get("Primitive", False):
            continue
        new_func, stats = rewrite_function(func, rules, max_rounds)
        total.rounds += stats.rounds
        total.applied.update(stats.applied)
        total.partitions += stats.partitions
        total.before = total.before + stats.before
        total.after = total.after + stats.after
        if stats.applied:
            new_mod.update_func(gv, new_func)
    for name, n in sorted(total.applied.items()):
        log.debug("rule %s applied %d times", name, n)
    return new_mod, total

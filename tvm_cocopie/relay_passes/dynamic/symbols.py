"""The symbolic constants of one function and what RDP has learned about them.

RDP's symbolic constants (SOD², seed 004 §5.4.1) are the dimensions of the model's
inputs: the TIR variables in a Relax function's parameter types. Every other TIR
variable in the function stands for a run-time quantity: one that ``R.match_cast``
binds (the ONNX importer's ``nonzero_numbers``, ``range_len_0``), a ``PrimExpr``
binding, or one of RDP's own placeholders for a dimension nothing names yet.

:class:`Symbols` keeps those variables and the equalities the analysis proved: a
run-time variable that constant propagation resolves (``range_len_0 = S``), a
placeholder a consumer's constraint determines, an input dimension the graph forces
(``K = 64`` when ``x[N, K]`` meets a ``[64, 32]`` weight). It classifies any
expression on the lattice of :mod:`.lattice`, simplified with ``tvm.sym.Analyzer``.

Input dimensions are assumed to be at least ``min_dim`` (1 by default): with an empty
batch, an element-count equation says nothing about the other dims. Run-time
quantities are only assumed non-negative (a ``NonZero`` may find nothing).
"""

from __future__ import annotations

import logging

import tvm
from tvm import tirx
from tvm.sym import Analyzer, ConstIntBound, detect_linear_equation

from .lattice import NAC, Dim, DimKind, expr_text

log = logging.getLogger(__name__)

def free_vars(expr) -> list:
    """The TIR variables ``expr`` reads."""
    return list(tirx.analysis.undefined_vars(expr))


def as_index(expr):
    """``expr`` as an ``int64`` TIR expression (Python ints and other int types cast)."""
    if isinstance(expr, int):
        return tirx.IntImm("int64", expr)
    if str(expr.ty.dtype) == "int64":
        return expr
    if isinstance(expr, tirx.IntImm):
        return tirx.IntImm("int64", int(expr.value))
    return tirx.Cast("int64", expr)


def is_var(expr) -> bool:
    """Whether ``expr`` is a bare TIR variable."""
    return isinstance(expr, tirx.Var) and tvm.ir.expr.is_prim_expr(expr)


class Symbols:
    """Symbolic constants, run-time variables, and the substitutions RDP proved.

    ``inputs``: the function's symbolic constants, in parameter order (an equality
    between two of them binds the later one to the earlier). ``dims``: the variables
    that are tensor dimensions (non-negative; inputs at least ``min_dim``).
    """

    def __init__(self, inputs, dims=(), min_dim: int = 1):
        self.inputs: list = []
        for v in inputs:
            if not any(v.same_as(u) for u in self.inputs):
                self.inputs.append(v)
        self.min_dim = min_dim
        self.dim_vars = list(dims)
        self.subst: dict = {}  # var -> int64 expression free of substituted vars
        self.residual: list[tuple] = []  # proved equalities no substitution expresses
        self.conflicts: list[tuple] = []  # equalities provably false: an invalid program
        self.changes = 0  # grows with every new fact: the fixed-point test
        self._placeholders: dict = {}
        self._analyzer: Analyzer | None = None

    # ----------------------------------------------------------------- variables
    def is_input(self, var) -> bool:
        """Whether ``var`` is one of the function's symbolic constants."""
        return any(var.same_as(u) for u in self.inputs)

    def add_dim_var(self, var) -> None:
        """Note that ``var`` is a tensor dimension (so non-negative)."""
        if not any(var.same_as(u) for u in self.dim_vars):
            self.dim_vars.append(var)
            self._analyzer = None

    def placeholder(self, key) -> tirx.Var:
        """The placeholder variable for the dimension ``key`` names (created once)."""
        var = self._placeholders.get(key)
        if var is None:
            *path, index = key
            var = tirx.Var("_".join(str(k) for k in path) + f"_d{index}", "int64")
            self._placeholders[key] = var
            self.add_dim_var(var)
        return var

    def is_placeholder(self, var) -> bool:
        """Whether ``var`` is one of RDP's placeholders."""
        return any(var.same_as(v) for v in self._placeholders.values())

    @property
    def analyzer(self) -> Analyzer:
        """An analyzer with every substitution bound and every dimension's bound set
        (rebuilt after each new substitution)."""
        if self._analyzer is None:
            ana = Analyzer()
            for var in self.dim_vars:
                if not any(var.same_as(v) for v in self.subst):
                    low = self.min_dim if self.is_input(var) else 0
                    ana.update(var, ConstIntBound(low, ConstIntBound.POS_INF), True)
            for var, value in self.subst.items():
                ana.bind(var, value)
            self._analyzer = ana
        return self._analyzer

    # --------------------------------------------------------------- evaluation
    def resolve(self, expr):
        """``expr`` with every substitution applied, simplified, as ``int64``."""
        return self.analyzer.simplify(as_index(expr))

    def dim(self, expr) -> Dim:
        """Where ``expr`` (a dimension or shape value) sits on the lattice."""
        if expr is None:
            return NAC
        expr = self._rewrite(self.resolve(expr))
        if isinstance(expr, tirx.IntImm):
            return Dim(DimKind.KNOWN, expr)
        variables = free_vars(expr)
        if not all(self.is_input(v) for v in variables):
            return Dim(DimKind.UNKNOWN, expr)
        return Dim(DimKind.SYMBOLIC if is_var(expr) else DimKind.EXPR, expr)

    def _rewrite(self, expr):
        """``expr`` replaced by the simpler side of a proved equality it matches
        (``max(D, E)`` by ``16`` once a consumer proved them equal)."""
        if isinstance(expr, tirx.IntImm):
            return expr
        for complex_, simple in self.residual:
            if self.analyzer.can_prove_equal(self.resolve(complex_), expr):
                return self.resolve(simple)
        return expr

    def refresh(self, d: Dim) -> Dim:
        """``d`` re-classified under the substitutions learned since it was made."""
        return d if d.expr is None or d.kind == DimKind.KNOWN else self.dim(d.expr)

    def prove(self, cond) -> bool | None:
        """``True``/``False`` when the analyzer can decide ``cond``, else ``None``."""
        ana = self.analyzer
        if ana.can_prove(cond):
            return True
        if ana.can_prove(tirx.Not(cond)):
            return False
        return None

    def equal(self, a: Dim, b: Dim) -> bool:
        """Whether ``a`` and ``b`` are provably the same quantity."""
        if a.expr is None or b.expr is None:
            return False
        return bool(self.analyzer.can_prove_equal(as_index(a.expr), as_index(b.expr)))

    # ------------------------------------------------------------------ learning
    def bind(self, var, value) -> bool:
        """Record ``var = value``; ``False`` if ``var`` is already bound or ``value``
        reads it."""
        value = self.resolve(value)
        if any(var.same_as(v) for v in self.subst) or any(
                var.same_as(v) for v in free_vars(value)):
            return False
        for other, expr in list(self.subst.items()):
            if any(var.same_as(v) for v in free_vars(expr)):
                ana = Analyzer()
                ana.bind(var, value)
                self.subst[other] = ana.simplify(expr)
        self.subst[var] = value
        self._analyzer = None
        self.changes += 1
        log.debug("RDP: %s = %s", var, value)
        return True

    def equate(self, a: Dim, b: Dim) -> bool:
        """Learn that ``a`` and ``b`` are the same quantity (a constraint the program
        only runs under); ``True`` if that taught anything new."""
        if a.expr is None or b.expr is None or self.equal(a, b):
            return False
        x, y = self.resolve(a.expr), self.resolve(b.expr)
        if self.analyzer.can_prove(x != y):
            if not any({str(u), str(v)} == {str(x), str(y)} for u, v in self.conflicts):
                self.conflicts.append((x, y))
                log.warning("RDP: the program needs %s == %s, which cannot hold; it fails "
                            "at run time for every input shape", expr_text(x), expr_text(y))
            return False
        for lhs, rhs in self._orientations(x, y):
            if self.bind(lhs, rhs):
                return True
        solved = self._solve_linear(x, y)
        if solved is not None:
            return self.bind(*solved)
        return self._add_residual(x, y)

    def _rank(self, var) -> int:
        """Binding preference: placeholders first, then other run-time variables, then
        inputs, later inputs before earlier ones."""
        if self.is_placeholder(var):
            return 0
        for i, u in enumerate(self.inputs):
            if var.same_as(u):
                return 2 + len(self.inputs) - i
        return 1

    def _orientations(self, x, y):
        """``(var, expr)`` pairs that would express ``x == y`` as a substitution, most
        preferred first."""
        pairs = [(x, y), (y, x)]
        # an input dimension is never rewritten in terms of run-time quantities
        pairs = [(v, e) for v, e in pairs if is_var(v) and not (
            self.is_input(v) and not all(self.is_input(u) for u in free_vars(e)))]
        pairs.sort(key=lambda p: self._rank(p[0]))
        return pairs

    def _solve_linear(self, x, y):
        """``(var, value)`` when ``x - y`` is linear in one variable with an integral
        root (``2 * K == 128`` gives ``K = 64``)."""
        diff = self.analyzer.simplify(x - y)
        variables = free_vars(diff)
        if len(variables) != 1:
            return None
        var = variables[0]
        coeffs = detect_linear_equation(diff, [var])
        if len(coeffs) != 2:
            return None
        a, c = (self.analyzer.simplify(v) for v in coeffs)
        if not (isinstance(a, tirx.IntImm) and isinstance(c, tirx.IntImm)) or a.value == 0:
            return None
        if c.value % a.value:
            return None
        return var, tirx.IntImm("int64", -c.value // a.value)

    def _add_residual(self, x, y) -> bool:
        """Keep ``x == y`` as a rewrite from the more complex side to the simpler."""
        def weight(e):
            return (0 if isinstance(e, tirx.IntImm) else 1, len(free_vars(e)), len(str(e)))
        if weight(x) < weight(y):
            x, y = y, x
        for u, v in self.residual:
            if self.analyzer.can_prove_equal(u, x) and self.analyzer.can_prove_equal(v, y):
                return False
        self.residual.append((x, y))
        self.changes += 1
        log.debug("RDP: %s == %s (kept as a constraint)", x, y)
        return True

    def substitutions(self) -> dict:
        """``{name: expression}`` of every named variable RDP resolved (placeholders
        left out)."""
        return {str(v.name): expr_text(e) for v, e in self.subst.items()
                if not self.is_placeholder(v)}

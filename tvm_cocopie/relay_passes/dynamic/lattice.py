"""The RDP domain (SOD², seed 004 §5.4.1, Fig. 5.2): what is known about one dimension.

Fig. 5.2 orders a dimension's value as a lattice: ``undef`` on top (not analysed
yet), then the constants RDP can carry -- *known* constants (``64``), *symbolic*
constants (a dimension of a model input, ``N``) and *operation-inferred* constants
(an expression over those, ``S * 4``) -- and ``nac`` at the bottom: a dimension that
only the values of tensors or the execution itself decide. Here:

* :class:`DimKind` names those levels; :class:`Dim` is one dimension (or one element of
  a shape-carrying value), its TIR expression kept for every level but ``undef``. An
  ``UNKNOWN`` dimension keeps an expression too when it has one: a placeholder variable
  that names the run-time quantity (``nonzero_numbers``, ``?lv3.1``), so that two
  tensors known to share an unknown dimension still say so (what fusion needs), and a
  later constraint that determines it determines every dimension built from it.
* :class:`Abs` is the abstract value of one Relax expression: a tensor (rank and
  dims), a ``Shape`` or ``Prim`` value, a tuple, or an opaque object; for small integer
  tensors, shapes and prims also the *value* (the thesis' V map beside the S map),
  which is what constant propagation through shape arithmetic runs on.

:func:`meet` is the thesis' ``Merge`` (the lattice's meet, for control-flow joins).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.sym import Analyzer


class DimKind(enum.IntEnum):
    """Fig. 5.2's levels, top to bottom."""

    UNDEF = 0
    KNOWN = 1
    SYMBOLIC = 2
    EXPR = 3
    UNKNOWN = 4

    @property
    def label(self) -> str:
        """Lower-case name used in reports: ``known``, ``symbolic``, ``expr``, ``unknown``."""
        return self.name.lower()


@dataclass(frozen=True, eq=False)
class Dim:
    """One dimension: its level and, except for ``UNDEF``, a TIR ``int64`` expression
    (``None`` only for an unknown value that nothing names)."""

    kind: DimKind
    expr: tvm.ir.expr.Expr | None = None

    @property
    def determined(self) -> bool:
        """Known, symbolic or an expression over symbolic constants: fixed by the
        input shapes alone."""
        return self.kind in (DimKind.KNOWN, DimKind.SYMBOLIC, DimKind.EXPR)

    @property
    def value(self) -> int | None:
        """The integer of a known dimension, else ``None``."""
        return int(self.expr.value) if self.kind == DimKind.KNOWN else None

    def at(self, sizes: dict) -> int | None:
        """The dimension's integer when the symbolic constants take ``sizes``
        (``{"N": 4}``, by variable name); ``None`` unless determined and every
        variable it reads is given."""
        if not self.determined:
            return None
        if self.kind == DimKind.KNOWN:
            return self.value
        ana = Analyzer()
        for var in tirx.analysis.undefined_vars(self.expr):
            if str(var.name) not in sizes:
                return None
            ana.bind(var, tirx.IntImm(str(var.ty.dtype), int(sizes[str(var.name)])))
        value = ana.simplify(self.expr)
        return int(value.value) if isinstance(value, tirx.IntImm) else None

    def same(self, other: Dim) -> bool:
        """Same level and a structurally equal expression."""
        if self.kind != other.kind:
            return False
        if self.expr is None or other.expr is None:
            return self.expr is None and other.expr is None
        return _same_expr(self.expr, other.expr)

    def __str__(self) -> str:
        if self.kind == DimKind.UNDEF:
            return "undef"
        if self.kind == DimKind.UNKNOWN:
            return "?" if self.expr is None else f"?({expr_text(self.expr)})"
        return expr_text(self.expr)

    __repr__ = __str__


UNDEF = Dim(DimKind.UNDEF)
NAC = Dim(DimKind.UNKNOWN)


def known(value: int) -> Dim:
    """A known constant dimension."""
    return Dim(DimKind.KNOWN, tirx.IntImm("int64", int(value)))


def expr_text(expr) -> str:
    """``expr`` as short text: ``S * 4``, not ``S * T.int64(4)``."""
    if isinstance(expr, tirx.IntImm):
        return str(int(expr.value))
    return _INT64.sub(r"\1", str(expr))


_INT64 = re.compile(r"T\.int64\((-?\d+)\)")


def _same_expr(a, b) -> bool:
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def meet(a: Dim, b: Dim) -> Dim:
    """The lattice meet: ``undef`` is the identity, equal values stay, anything else is
    ``nac`` (the thesis' ``Merge`` of two control-flow paths)."""
    if a.kind == DimKind.UNDEF:
        return b
    if b.kind == DimKind.UNDEF or a.same(b):
        return a
    return NAC


@dataclass(frozen=True, eq=False)
class Abs:
    """The abstract value of a Relax expression.

    ``what`` is ``"tensor"``, ``"shape"`` (a ``R.Shape``: rank 1, its ``value`` the
    dimensions it holds), ``"prim"`` (a scalar ``PrimExpr``: rank 0, ``value`` its one
    element), ``"tuple"`` (``fields``) or ``"object"`` (nothing known). ``rank`` is
    ``None`` when unknown, and then ``dims`` is ``None`` too. ``value`` holds the
    elements of small integer tensors, row-major, when RDP tracks them.
    """

    what: str
    rank: int | None = None
    dims: tuple[Dim, ...] | None = None
    value: tuple[Dim, ...] | None = None
    fields: tuple[Abs, ...] = ()
    dtype: str | None = None

    @property
    def value_known(self) -> bool:
        """Whether every element of the value is fixed by the input shapes."""
        return self.value is not None and all(v.determined for v in self.value)

    @property
    def shape_known(self) -> bool:
        """Whether the rank and every dimension are fixed by the input shapes."""
        if self.what == "tuple":
            return all(f.shape_known for f in self.fields)
        return self.dims is not None and all(d.determined for d in self.dims)

    def with_value(self, value) -> Abs:
        """A copy holding ``value`` (a sequence of :class:`Dim`, or ``None``)."""
        return Abs(self.what, self.rank, self.dims, None if value is None else tuple(value),
                   self.fields, self.dtype)

    def with_dims(self, dims) -> Abs:
        """A copy with ``dims`` (and the rank they give)."""
        dims = None if dims is None else tuple(dims)
        return Abs(self.what, None if dims is None else len(dims), dims, self.value,
                   self.fields, self.dtype)

    def __str__(self) -> str:
        if self.what == "tuple":
            return "(" + ", ".join(str(f) for f in self.fields) + ")"
        if self.what == "object":
            return "object"
        text = "[rank ?]" if self.dims is None else "[" + ", ".join(map(str, self.dims)) + "]"
        if self.what != "tensor":
            text = self.what + text
        if self.value is not None:
            text += " = {" + ", ".join(map(str, self.value)) + "}"
        return text


OBJECT = Abs("object")


def tensor(dims, dtype: str | None = None, value=None) -> Abs:
    """A tensor of known rank."""
    dims = tuple(dims)
    return Abs("tensor", len(dims), dims, None if value is None else tuple(value), dtype=dtype)


def tensor_of_rank(rank: int | None, dtype: str | None = None) -> Abs:
    """A tensor whose dims are all unknown (rank ``None``: not even the rank)."""
    if rank is None:
        return Abs("tensor", dtype=dtype)
    return tensor([NAC] * rank, dtype)


def shape_value(values) -> Abs:
    """A ``R.Shape`` holding ``values`` (``None``: length unknown)."""
    if values is None:
        return Abs("shape", dtype="int64")
    values = tuple(values)
    return Abs("shape", 1, (known(len(values)),), values, dtype="int64")


def prim(value: Dim, dtype: str = "int64") -> Abs:
    """A scalar ``PrimExpr`` value."""
    return Abs("prim", 0, (), (value,), dtype=dtype)


def tuple_of(fields) -> Abs:
    """A tuple of abstract values."""
    return Abs("tuple", fields=tuple(fields))

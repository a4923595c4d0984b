"""Rank and Dimension Propagation over a Relax function (SOD², seed 004 §5.4.1, Alg. 2).

RDP is a data-flow analysis on the lattice of :mod:`.lattice`: for every binding it
keeps the rank and dims of the value (the S map) and, for shape-carrying values, the
elements (the V map). Like Alg. 2 it sweeps the dataflow forward and backward until
nothing changes:

* **forward** (Fig. 5.3 (a)): each binding's value is the meet of what Relax's own
  type inference says (``var.ty``, the first source) and RDP's transfer: Relax's
  inference asked again with the refined input shapes (:func:`.classes.infer_type`),
  broadcasting and shape arithmetic where Relax stops (:mod:`.transfer`), and
  ``R.match_cast`` binding its pattern's variables to what the matched value is
  known to be. Where the two views disagree on a dim, both are facts about one
  run-time value, so RDP learns their equality (:meth:`.Symbols.equate`);
* **backward** (Fig. 5.3 (b)): the equalities a valid execution needs between a call's
  inputs and output (:func:`.transfer.backward`); they resolve placeholders and
  run-time variables, and force input dimensions (``K = 64``);
* the iteration stops when a forward and a backward sweep teach nothing new. Facts only
  accumulate (each variable is bound once), so it terminates.

Then every call is classified twice (:func:`.classes.classify`): by what the IR states,
and by what constant propagation proved (:class:`RDPKnowledge`); a call whose output
*values* RDP computed is ISDO (Alg. 2's ``get_symbolic_value`` for Shape-like nodes).
The result is a :class:`~.result.RDPResult`.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import relax

from ...errors import CompilationError
from ...exprs import is_constant
from .classes import BROADCAST, Knowledge, OpClass, classify, infer_type, op_label, op_name
from .lattice import (
    NAC,
    OBJECT,
    Abs,
    Dim,
    expr_text,
    known,
    prim,
    shape_value,
    tensor,
    tensor_of_rank,
    tuple_of,
)
from .result import BindingInfo, RDPResult
from .symbols import Symbols, as_index, free_vars, is_var
from .transfer import backward, broadcast_dims, constant, forward_value, sliced_dims

log = logging.getLogger(__name__)

#: forward + backward sweeps before RDP gives up on a fixed point (never reached in
#: practice: each sweep that changes something binds a variable)
MAX_SWEEPS = 50


def _is_var_node(expr) -> bool:
    return isinstance(expr, relax.Var)


def _collect_params(ty, inputs: list, dims: list) -> None:
    """The symbolic constants a parameter's type defines (``dims``: those that are
    tensor dimensions)."""
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        values = ty.shape.values
    elif isinstance(ty, relax.ShapeType) and ty.values is not None:
        values = ty.values
    elif isinstance(ty, relax.TupleType):
        for field in ty.fields:
            _collect_params(field, inputs, dims)
        return
    else:
        return
    for value in values:
        inputs.extend(free_vars(value))
        if is_var(value):
            dims.append(value)


class RDPKnowledge(Knowledge):
    """What RDP proved: a dim is known when it sits above ``nac``, a value when RDP
    computed all its elements."""

    def __init__(self, solver: Solver):
        super().__init__(solver.sym.inputs)
        self.solver = solver

    def dim_known(self, expr) -> bool:
        return self.solver.sym.dim(expr).determined

    def value_known(self, expr) -> bool:
        if isinstance(expr, tvm.ir.expr.Constant):
            return True
        return _value_known(self.solver.eval(expr))


def _value_known(a: Abs) -> bool:
    if a.what == "tuple":
        return all(_value_known(f) for f in a.fields)
    return a.value_known


class _Record:
    """One binding as the solver sees it."""

    def __init__(self, name: str, binding):
        self.name = name
        self.binding = binding
        value = binding.value
        self.call = value if isinstance(value, relax.Call) else None
        self.abs: Abs = OBJECT
        self.classification = None


class Solver:
    """RDP on one Relax function: :meth:`run` gives its :class:`~.result.RDPResult`."""

    def __init__(self, func: relax.Function, name: str = "main", min_dim: int = 1):
        if not isinstance(func, relax.Function):
            raise CompilationError(
                f"RDP analyses Relax functions; got {type(func).__name__} for {name!r}")
        self.func = func
        self.name = name
        inputs, dims = [], []
        for p in func.params:
            if tvm.ir.expr.is_prim_expr(p):
                inputs.append(p)
            _collect_params(p.ty, inputs, dims)
        self.sym = Symbols(inputs, dims, min_dim)
        self.env: dict = {}
        self.records: dict = {}
        self.names: set[str] = set()
        self.output: Abs = OBJECT
        self.sweeps = 0

    # ------------------------------------------------------------------ naming
    def _record(self, binding) -> _Record:
        rec = self.records.get(binding.var)
        if rec is None:
            base = str(binding.var.name) or "v"
            name, n = base, 1
            while name in self.names:
                n += 1
                name = f"{base}#{n}"
            self.names.add(name)
            rec = _Record(name, binding)
            self.records[binding.var] = rec
        return rec

    # ----------------------------------------------------------- relax's view
    def from_type(self, ty, key) -> Abs:
        """What Relax's type ``ty`` says, with placeholders (named by ``key``) for the
        dims it leaves open."""
        if isinstance(ty, relax.TensorType):
            return self._tensor_type(ty, key)
        if isinstance(ty, relax.ShapeType):
            if ty.values is not None:
                return shape_value([self._dim(v) for v in ty.values])
            if ty.ndim < 0:
                return shape_value(None)
            return shape_value([self._open(key, i) for i in range(ty.ndim)])
        if isinstance(ty, tvm.ir.PrimType):
            return prim(NAC, str(ty.dtype))
        if isinstance(ty, relax.TupleType):
            return tuple_of(self.from_type(f, (*key, i) if key else None)
                            for i, f in enumerate(ty.fields))
        return OBJECT

    def _dim(self, expr) -> Dim:
        if is_var(expr):
            self.sym.add_dim_var(expr)
        return self.sym.dim(expr)

    def _open(self, key, i) -> Dim:
        if key is None:
            return NAC
        return self.sym.dim(self.sym.placeholder((*key, i)))

    def _tensor_type(self, ty, key) -> Abs:
        dtype = str(ty.dtype)
        shape = ty.shape
        if isinstance(shape, relax.ShapeExpr):
            return tensor([self._dim(v) for v in shape.values], dtype)
        if _is_var_node(shape) and shape in self.env:
            values = self.env[shape].value
            if values is not None:
                return tensor([v if v.expr is not None else self._open(key, i)
                               for i, v in enumerate(values)], dtype)
        if ty.ndim < 0:
            return tensor_of_rank(None, dtype)
        return tensor([self._open(key, i) for i in range(ty.ndim)], dtype)

    # ---------------------------------------------------------------- meeting
    def _join(self, a: Dim, b: Dim) -> Dim:
        """One run-time value seen two ways: learn their equality, keep the sharper."""
        if a.expr is not None and b.expr is not None:
            self.sym.equate(a, b)
        a, b = self.sym.refresh(a), self.sym.refresh(b)
        if a.determined or b.expr is None:
            return a
        if b.determined or a.expr is None:
            return b
        return a

    def refine(self, a: Abs, b: Abs | None) -> Abs:
        """``a`` and ``b`` describe the same value: their combination."""
        if b is None or b.what == "object":
            return a
        if a.what == "object":
            return b
        if a.what == "tuple" or b.what == "tuple":
            if a.what != b.what or len(a.fields) != len(b.fields):
                return a
            return tuple_of(self.refine(x, y) for x, y in zip(a.fields, b.fields))
        dims = a.dims
        if dims is None:
            dims = b.dims
        elif b.dims is not None and len(b.dims) == len(dims):
            dims = [self._join(x, y) for x, y in zip(dims, b.dims)]
        value = a.value if b.value is None else b.value
        if a.value is not None and b.value is not None and len(a.value) == len(b.value):
            value = [self._join(x, y) for x, y in zip(a.value, b.value)]
        out = Abs(a.what, a.rank if dims is None else len(dims),
                  None if dims is None else tuple(dims), value, dtype=a.dtype or b.dtype)
        return out

    def _merge(self, a: Abs, b: Abs, fallback: Abs) -> Abs:
        """The thesis' ``Merge`` of two control-flow paths: what both agree on."""
        if a.what == "tuple" and b.what == "tuple" and fallback.what == "tuple":
            return tuple_of(self._merge(x, y, z) for x, y, z in zip(a.fields, b.fields,
                                                                    fallback.fields))
        if a.dims is None or b.dims is None or len(a.dims) != len(b.dims):
            return fallback
        fb = fallback.dims if fallback.dims is not None and len(fallback.dims) == len(
            a.dims) else [NAC] * len(a.dims)
        dims = [x if self.sym.equal(x, y) else f for x, y, f in zip(a.dims, b.dims, fb)]
        return fallback.with_dims(dims)

    # -------------------------------------------------------------- evaluation
    def eval(self, expr, key=None) -> Abs:
        """The abstract value of ``expr`` (a leaf, a call, a tuple, an ``If``...)."""
        if _is_var_node(expr) and expr in self.env:
            return self.env[expr]
        if is_constant(expr):
            return constant(expr, self.sym)
        if isinstance(expr, tvm.ir.expr.Constant):
            value = expr.value
            if isinstance(value, int) and not isinstance(value, bool):
                return prim(self.sym.dim(value))
            return self.from_type(getattr(expr, "ty", None), key)
        if isinstance(expr, relax.ShapeExpr):
            return shape_value([self._dim(v) for v in expr.values])
        if isinstance(expr, relax.Tuple):
            return tuple_of(self.eval(f) for f in expr.fields)
        if isinstance(expr, relax.TupleGetItem):
            tup = self.eval(expr.tuple_value)
            if tup.what == "tuple" and expr.index < len(tup.fields):
                return tup.fields[expr.index]
            return self.from_type(expr.ty, key)
        if isinstance(expr, relax.Call):
            return self._eval_call(expr, key)
        if isinstance(expr, relax.If):
            return self._eval_if(expr, key)
        if isinstance(expr, relax.SeqExpr):
            return self._walk(expr)
        if tvm.ir.expr.is_prim_expr(expr):
            return prim(self.sym.dim(expr), str(expr.ty.dtype))
        return self.from_type(getattr(expr, "ty", None), key)

    def _eval_if(self, expr, key) -> Abs:
        self.eval(expr.cond)
        then, other = self._walk(expr.true_branch), self._walk(expr.false_branch)
        return self._merge(then, other, self.from_type(expr.ty, key))

    def _reinfer(self, call, args: list[Abs], key) -> Abs | None:
        """Relax's inference asked again with RDP's sharper input shapes."""
        changed = False

        def stand_in(arg, a: Abs):
            nonlocal changed
            ty = arg.ty
            if isinstance(arg, relax.Tuple) and a.what == "tuple":
                return relax.Tuple([stand_in(f, x) for f, x in zip(arg.fields, a.fields)])
            if not (isinstance(ty, relax.TensorType) and a.what == "tensor" and a.dims
                    and all(d.expr is not None for d in a.dims)):
                return arg
            dims = [d.expr for d in a.dims]
            old = ty.shape.values if isinstance(ty.shape, relax.ShapeExpr) else None
            if old is not None and len(old) == len(dims) and all(
                    tvm_ffi.structural_equal(as_index(o), d) for o, d in zip(old, dims)):
                return arg
            changed = True
            return relax.Var("rdp_arg", relax.TensorType(dims, ty.dtype))

        new_args = [stand_in(arg, a) for arg, a in zip(call.args, args)]
        if not changed:
            return None
        ty = infer_type(call, new_args)
        return None if ty is None else self.from_type(ty, key)

    def _eval_call(self, call, key) -> Abs:
        name = op_name(call)
        args = [self.eval(a) for a in call.args]
        out = self.from_type(call.ty, key)
        if name is None or name.startswith(("relax.call_", "relax.invoke")):
            return out
        out = self.refine(out, self._reinfer(call, args, key))
        if name == "relax.shape_of" and args[0].dims is not None:
            out = self.refine(out, shape_value(args[0].dims))
        elif name == "relax.tensor_to_shape" and args[0].value is not None:
            out = self.refine(out, shape_value(args[0].value))
        elif name in BROADCAST:
            out = self._broadcast(out, args)
        elif name == "relax.dynamic_strided_slice":
            dims = sliced_dims(args[0], *(a.value for a in args[1:4]), self.sym)
            if dims is not None:
                out = self.refine(out, out.with_dims(dims))
        elif name == "relax.nonzero" and args[0].rank is not None and out.dims:
            out = self.refine(out, out.with_dims([known(args[0].rank), *out.dims[1:]]))
        value = forward_value(name, call, args, out, self.sym)
        if value is not None:
            out = self.refine(out, out.with_value(value))
        return out

    def _broadcast(self, out: Abs, args: list[Abs]) -> Abs:
        dims = broadcast_dims(args, self.sym)
        if dims is None or out.dims is None or len(dims) != len(out.dims):
            return out
        own = [d if d is not None else o for d, o in zip(dims, out.dims)]
        return self.refine(out, out.with_dims(own))

    # ------------------------------------------------------------------ sweeps
    def _walk(self, seq: relax.SeqExpr) -> Abs:
        for block in seq.blocks:
            for binding in block.bindings:
                self._forward(binding)
        return self.eval(seq.body)

    def _forward(self, binding) -> None:
        rec = self._record(binding)
        key = (rec.name,)
        var = binding.var
        declared = self.from_type(var.ty, key)
        if isinstance(binding, relax.MatchCast):
            matched = self.eval(binding.value, (rec.name, "m"))
            result = self.refine(declared, matched)
        else:
            result = self.refine(declared, self.eval(binding.value, key))
        if tvm.ir.expr.is_prim_expr(var) and result.value and result.value[0].expr is not None:
            self.sym.bind(var, result.value[0].expr)
        self.env[var] = result
        rec.abs = result

    def _backward(self) -> None:
        for rec in reversed(list(self.records.values())):
            call = rec.call
            if call is None or op_name(call) is None:
                continue
            if rec.classification is None:
                rec.classification = classify(call, Knowledge(self.sym.inputs))
            out = self.env.get(rec.binding.var, OBJECT)
            args = [self.eval(a) for a in call.args]
            for a, b in backward(rec.classification.kind, call, out, args, self.sym):
                self.sym.equate(a, b)

    def _refresh(self, a: Abs) -> Abs:
        if a.what == "tuple":
            return tuple_of(self._refresh(f) for f in a.fields)
        dims = None if a.dims is None else [self.sym.refresh(d) for d in a.dims]
        value = None if a.value is None else [self.sym.refresh(v) for v in a.value]
        return Abs(a.what, a.rank, None if dims is None else tuple(dims),
                   None if value is None else tuple(value), dtype=a.dtype)

    def run(self) -> RDPResult:
        """Sweep to the fixed point, classify, and report."""
        while True:
            self.sweeps += 1
            before = self.sym.changes
            for p in self.func.params:
                self.env[p] = self.from_type(p.ty, (str(p.name),))
            self.output = self._walk(self.func.body)
            self._backward()
            if self.sym.changes == before:
                break
            if self.sweeps >= MAX_SWEEPS:
                log.warning("RDP on %s: no fixed point after %d sweeps; results are sound "
                            "but may miss dims", self.name, self.sweeps)
                break
        for var, rec in self.records.items():
            rec.abs = self.env[var] = self._refresh(self.env[var])
        self.output = self._refresh(self.output)
        return self._result()

    # ------------------------------------------------------------------ classes
    def _classes(self, rec: _Record):
        value = rec.binding.value
        if isinstance(value, relax.If):
            return OpClass.EDO, OpClass.EDO, "if"
        call = rec.call
        if call is None:
            return None, None, None
        before = rec.classification or classify(call, Knowledge(self.sym.inputs))
        after = classify(call, RDPKnowledge(self)).op_class
        if after != OpClass.EDO and _value_known(rec.abs) and rec.abs.what != "tuple":
            after = OpClass.ISDO
        return before.op_class, min(after, before.op_class), op_label(call)

    def _result(self) -> RDPResult:
        bindings = []
        for rec in self.records.values():
            before, after, label = self._classes(rec)
            if isinstance(rec.binding, relax.MatchCast):
                label = f"match_cast({label})" if label else "match_cast"
            kind = rec.classification.kind.value if rec.classification else None
            bindings.append(BindingInfo(rec.name, label, before, after, kind, rec.abs))
        params = {str(p.name): self.env[p] for p in self.func.params}
        return RDPResult(self.name, bindings, params, self.output,
                         self.sym.substitutions(),
                         _texts(self.sym.residual), self.sweeps, _texts(self.sym.conflicts))


def _texts(pairs) -> list[str]:
    return [f"{expr_text(a)} == {expr_text(b)}" for a, b in pairs]


def analyze_function(func: relax.Function, name: str = "main", min_dim: int = 1) -> RDPResult:
    """RDP on one Relax function (see the module docstring). ``min_dim``: the least
    value assumed for an input dimension."""
    return Solver(func, name, min_dim).run()

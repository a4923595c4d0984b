"""Static memory allocated once per VM, not once per inference.

``StaticPlanBlockMemory`` plans a function's intermediates into a few storages of
constant size (``R.memory.alloc_storage``) with tensors placed in them
(``R.memory.alloc_tensor``), but the VM still runs those allocations on every call:
two calls per storage and per tensor, and a ``kill`` call after each. ONNX Runtime
plans its memory once. These two passes, run in the ``lower`` stage, make the plan a
one-time allocation, in the spirit of TVM's ``RewriteCUDAGraph`` (which lifts static
storages out of a function for CUDA graphs and caches them per VM):

* ``CacheStaticAllocations`` (:func:`cache_static_allocations`, right after
  ``StaticPlanBlockMemory``): in each function that no Relax function calls or refers
  to, the constant-size storages whose tensors all have constant shapes are replaced
  by one call at the function's start, ``R.call_packed(CACHED_SCRATCH, <the function>,
  <plan>)``, which allocates the plan once per VM and then returns the kept tuple of
  tensors (:mod:`tvm_cocopie.vm_scratch`); each tensor binding reads its item of the
  tuple. Tensors with the same storage, shape and dtype become one item.
* ``KeepScratchRegisters`` (:func:`keep_scratch_registers`, after
  ``KillAfterLastUse``): no kill calls on the tuple or its items (the kept tuple holds
  them anyway).

Per inference a function's intermediates then cost 1 + (distinct tensors) VM calls
(the lookup, a ``tuple_getitem`` each) instead of 2 x (storages + tensors) calls of
allocation and about as many kills. Outputs are never in the plan, so they stay fresh
tensors every call; storages of symbolic size and storages holding a tensor not at
offset 0 stay allocated per call. A tensor of symbolic shape in a constant-size storage
(its size bounded: :func:`bound_symbolic_dims`) becomes a view of that storage, made by
the lookup once per set of dim values (every view's dims, computed by the VM, are its
third argument; the views are appended to the tuple and kept while the dims stay): one
``tuple_getitem`` per tensor and call, where a view made per call cost four VM calls
(the shape, a null value, the view, the item; BERT's encoder at 32 tokens: ~280 calls).
Only a view whose shape uses a dim defined inside the function is made per call. Who
shares the scratch (one set per VM, one
call at a time) is described in :mod:`tvm_cocopie.vm_scratch`.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from ..errors import CompilationError
from ..vm_scratch import CACHED_SCRATCH, plan_text

log = logging.getLogger(__name__)

_ALLOC_STORAGE = "relax.memory.alloc_storage"
_ALLOC_TENSOR = "relax.memory.alloc_tensor"
_KILLS = ("relax.memory.kill_tensor", "relax.memory.kill_storage", "relax.vm.kill_object")


def _op(expr) -> str | None:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return str(expr.op.name)
    return None


def _constant_shape(expr) -> tuple[int, ...] | None:
    if not isinstance(expr, relax.ShapeExpr):
        return None
    values = list(expr.values)
    if not all(isinstance(v, tvm.tirx.IntImm) for v in values):
        return None
    return tuple(int(v) for v in values)


def _var_bindings(expr):
    """Every ``VarBinding`` in ``expr``'s binding blocks, those in ``If`` branches too."""
    if isinstance(expr, relax.SeqExpr):
        for block in expr.blocks:
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding):
                    yield binding
                    yield from _var_bindings(binding.value)
    elif isinstance(expr, relax.If):
        yield from _var_bindings(expr.true_branch)
        yield from _var_bindings(expr.false_branch)


def _referenced_functions(mod: tvm.IRModule) -> set[str]:
    """Names of the Relax functions of ``mod`` that some Relax function calls or refers to."""
    found: set[str] = set()

    def visit(expr):
        if isinstance(expr, tvm.ir.GlobalVar) and isinstance(mod[expr], relax.Function):
            found.add(expr.name_hint)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return found


def _param_dims(func: relax.Function) -> set:
    """The symbolic vars the function's parameters define (known at its start)."""
    found = set()
    for param in func.params:
        shape = getattr(getattr(param, "ty", None), "shape", None)
        for dim in getattr(shape, "values", None) or ():
            if isinstance(dim, tvm.tirx.Var):
                found.add(dim)
    return found


def _uses_only(expr, known: set) -> bool:
    """Whether every symbolic var in the shape ``expr`` is one of ``known``."""
    if not isinstance(expr, relax.ShapeExpr):
        return False
    return all(not tvm.tirx.analysis.undefined_vars(dim, list(known)) for dim in expr.values)


class _Plan:
    """The part of one function's memory plan that moves into its scratch tuple."""

    def __init__(self, func: relax.Function):
        sizes = {}  # storage var -> bytes, for constant-size host storages
        for b in _var_bindings(func.body):
            if _op(b.value) == _ALLOC_STORAGE:
                shape, _device, scope = b.value.args[:3]
                dims = _constant_shape(shape)
                if dims is not None and len(dims) == 1 and str(scope.value) == "global":
                    sizes[b.var] = dims[0]
        tensors = {}  # tensor var -> (storage var, shape or None, dtype, shape expr)
        for b in _var_bindings(func.body):
            if _op(b.value) != _ALLOC_TENSOR or b.value.args[0] not in sizes:
                continue
            storage, offset, shape, dtype = b.value.args[:4]
            if not isinstance(offset, tvm.tirx.IntImm) or int(offset.value):
                sizes.pop(storage)  # not at the start: the storage stays per call
                continue
            tensors[b.var] = (storage, _constant_shape(shape),
                              str(getattr(dtype, "value", dtype)), shape)
        self.storages = list(sizes)
        index = {var: i for i, var in enumerate(self.storages)}
        self.tensors: list = []  # (storage index, shape, dtype), the tuple's items
        #: views of symbolic shape made by the lookup, after the tensors in its tuple:
        #: (the item of their whole storage, shape expr, dtype)
        self.views: list = []
        #: var -> tuple item, ``("view", k)`` for the lookup's k-th view, ``(item, shape
        #: expr, dtype)`` for a view made per call, None: dropped
        self.replace: dict = dict.fromkeys(self.storages)
        known = _param_dims(func)
        pending = {}
        for var, (storage, dims, dtype, shape) in tensors.items():
            if storage not in index:
                continue
            if dims is None:  # a symbolic shape in a bounded storage: a view
                whole = self._item((index[storage], (sizes[storage],), "uint8"))
                if _uses_only(shape, known):  # made by the lookup, once per size
                    pending[var] = (whole, shape, dtype)
                else:  # a dim defined inside the function: made per call
                    self.replace[var] = (whole, shape, dtype)
            else:
                self.replace[var] = self._item((index[storage], dims, dtype))
        for var, view in pending.items():
            if view not in self.views:
                self.views.append(view)
            self.replace[var] = ("view", self.views.index(view))
        self.sizes = [sizes[var] for var in self.storages]

    def _item(self, item) -> int:
        if item not in self.tensors:
            self.tensors.append(item)
        return self.tensors.index(item)

    def text(self) -> str:
        return plan_text(self.sizes, self.tensors,
                         [(item, len(shape.values), dtype) for item, shape, dtype in self.views])

    def dims(self) -> relax.ShapeExpr | None:
        """Every view's dims in a row (the lookup's third argument), or ``None``."""
        if not self.views:
            return None
        return relax.ShapeExpr([d for _, shape, _ in self.views for d in shape.values])

    def ty(self) -> relax.TupleType:
        return relax.TupleType(
            [relax.TensorType(list(dims), dtype) for _, dims, dtype in self.tensors]
            + [relax.TensorType(list(shape.values), dtype) for _, shape, dtype in self.views])


@relax.expr_functor.mutator
class _ReadScratch(relax.PyExprMutator):
    """Each planned binding rebound to its item of the scratch tuple, or dropped."""

    def __init__(self, mod, scratch: relax.Var, replace: dict, first_view: int):
        super().__init__(mod)
        self.scratch = scratch
        self.replace = replace
        self.first_view = first_view  # the tuple item of the lookup's first view

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.replace:
            index = self.replace[binding.var]
            if isinstance(index, tuple) and index[0] == "view":  # made by the lookup
                self.builder_.emit_normalized(relax.VarBinding(
                    binding.var, relax.TupleGetItem(self.scratch, self.first_view + index[1])))
            elif isinstance(index, tuple):  # a view of a symbolic shape into its storage
                item, shape, dtype = index
                value = self.builder_.normalize(relax.op.memory.view(
                    relax.TupleGetItem(self.scratch, item), shape=shape, dtype=dtype))
                self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
            elif index is not None:
                self.builder_.emit_normalized(
                    relax.VarBinding(binding.var, relax.TupleGetItem(self.scratch, index)))
            return
        super().visit_var_binding_(binding)


def _with_scratch(mod: tvm.IRModule, gv: tvm.ir.GlobalVar, func: relax.Function,
                  plan: _Plan) -> relax.Function:
    scratch = relax.Var("scratch", plan.ty())
    args = [gv, tvm.ir.expr.StringImm(plan.text())]
    if plan.dims() is not None:
        args.append(plan.dims())
    lookup = relax.Call(relax.ExternFunc(CACHED_SCRATCH), args, ty_args=[plan.ty()])
    body = _ReadScratch(mod, scratch, plan.replace, len(plan.tensors)).visit_expr(func.body)
    first = relax.BindingBlock([relax.VarBinding(scratch, lookup)])
    seq = relax.SeqExpr([first, *body.blocks], body.body)
    return relax.Function(func.params, seq, func.ret_ty, func.is_pure, func.attrs, func.span)


@tvm.transform.module_pass(opt_level=0, name="CacheStaticAllocations")
def cache_static_allocations(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The first pass: each function's constant-size plan allocated once per VM, through
    one lookup call at its start (see the module docstring)."""
    referenced = _referenced_functions(mod)
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, relax.Function) or gv.name_hint in referenced:
            continue
        plan = _Plan(func)
        if not plan.tensors:
            continue
        mod[gv] = _with_scratch(mod, gv, func, plan)
        log.debug("%s: %d storages (%d bytes), %d tensors allocated once per VM",
                  gv.name_hint, len(plan.sizes), sum(plan.sizes), len(plan.tensors))
    return mod


def bound_symbolic_dims(bounds: dict[str, int]) -> tvm.transform.Pass:
    """A pass giving every Relax function the upper bounds of its symbolic dims (by var
    name: ``{"W": 2048}``) as the ``tir_var_upper_bound`` attribute, which
    ``StaticPlanBlockMemory`` reads: storages of symbolic size are then planned for the
    bound, a constant size that :func:`cache_static_allocations` allocates once per VM,
    and the tensors of a call's actual sizes become views into them (SOD²: one memory
    plan for every input size up to the bounds). A call with a dim above its bound stops
    with an error from the view's size check, never writes past the storage."""
    bounds = {str(k): int(v) for k, v in dict(bounds).items()}
    for name, value in bounds.items():
        if value < 1:
            raise CompilationError(f"dim_bounds[{name!r}] = {value}: a bound is a positive "
                                   "size")

    @tvm.transform.module_pass(opt_level=0, name="BoundSymbolicDims")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            names = {v.name for v in relax.analysis.defined_symbolic_vars(func)}
            known = {k: v for k, v in bounds.items() if k in names}
            if known:
                current = dict(func.attrs["tir_var_upper_bound"]) if (
                    func.attrs and "tir_var_upper_bound" in func.attrs) else {}
                mod[gv] = func.with_attr("tir_var_upper_bound", {**current, **known})
        return mod

    return _pass


def _is_lookup(value) -> bool:
    return (isinstance(value, relax.Call) and isinstance(value.op, relax.ExternFunc)
            and str(value.op.global_symbol) == CACHED_SCRATCH)


def _scratch_vars(func: relax.Function) -> set:
    """The scratch tuple of ``func`` and the variables bound to its items."""
    out = set()
    for b in _var_bindings(func.body):
        if _is_lookup(b.value) or (isinstance(b.value, relax.TupleGetItem)
                                   and b.value.tuple_value in out):
            out.add(b.var)
    return out


@relax.expr_functor.mutator
class _DropKills(relax.PyExprMutator):
    def __init__(self, mod, keep: set):
        super().__init__(mod)
        self.keep = keep

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if _op(value) in _KILLS and value.args[0] in self.keep:
            return
        super().visit_var_binding_(binding)


@tvm.transform.module_pass(opt_level=0, name="KeepScratchRegisters")
def keep_scratch_registers(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The second pass: no kill call on the scratch tuple or its items (the kept tuple
    holds them; a kill is one more VM call each)."""
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, relax.Function):
            continue
        keep = _scratch_vars(func)
        if keep:
            body = _DropKills(mod, keep).visit_expr(func.body)
            mod[gv] = relax.Function(func.params, body, func.ret_ty, func.is_pure,
                                     func.attrs, func.span)
    return mod

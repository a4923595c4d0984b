"""Symbolic dims a model takes only in multiples, made multiples by construction (SOD² RDP).

A detector's feature pyramid adds a map at 1/16 scale, ``(H - 1) // 16 + 1`` rows, to
the 1/32 one upsampled, ``((H - 1) // 32 + 1) * 2``: equal only when the height is a
multiple of 32. The import keeps such operands apart with checking ``match_cast``s
(``frontend.importer.unify_symbolic_dims``), which cost twice: TVM's ``ConvertLayout``
cannot move a blocked (NCHW[x]c) tensor through a ``match_cast``, so every conv after
one stayed NCHW between two ``layout_transform`` kernels; and every shape stays an
expression of ``H`` with floor divisions the kernels' tail handling pays for.

:func:`divisors` finds, for each input dim ``v`` of a function, the checks that involve
``v`` alone and the sizes that pass all of them (evaluated for ``v`` = 1 ... ``limit``);
when they repeat with a period ``m`` > 1 and include every multiple of ``m``, ``v`` is
taken at the multiples of ``m`` only (PP-OCR det's checks pass for heights 29 to 32
modulo 32; from then on a height of 30 is refused with an error that asks to pad to a
multiple of 32, as the model's own preprocessing does). :func:`divisible_dims` then
writes ``v`` as ``m * v_q``: the function keeps its parameter, and its first bindings
compute ``v_q`` by a call (:data:`tvm_cocopie.vm_dims.DIM_QUOTIENTS`, which stops a
size that is no multiple with an error naming it) and cast the parameter to the shape
in ``v_q``. Every shape after it
is an expression of ``v_q`` (``(32 * H_q - 1) // 16 + 1`` = ``2 * H_q``), the checks
become provable and are dropped, and nothing stops ``ConvertLayout``. The function's
``tvm_cocopie.dim_divisors`` attribute records ``{v_q: "v/m"}``, from which
:func:`restore_quotient_dims` writes ``v_q`` back as ``v // m`` at the start of the
lower stage, so that the memory plan's bounds (named by ``v``) apply. The passes run
when asked: ``PipelineOptions(divisible_dims=True)``.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.sym import Analyzer

from ...exprs import param_dim_names, with_functions
from ...vm_dims import DIM_QUOTIENTS

log = logging.getLogger(__name__)

#: function attribute: ``{quotient dim name: "dim/divisor"}``
ATTR = "tvm_cocopie.dim_divisors"
#: sizes each dim is tried at
LIMIT = 512


def _shape(ty):
    shape = getattr(ty, "shape", None)
    return list(shape.values) if isinstance(shape, relax.ShapeExpr) else None


def checks(func: relax.Function) -> list[tuple]:
    """``(binding, [(value dim, cast dim), ...])`` of each ``match_cast`` of ``func`` that
    checks a tensor's dims against others (it defines no new dim)."""
    known = param_dim_names(func)
    found = []
    for block in func.body.blocks:
        for binding in block.bindings:
            if not isinstance(binding, relax.MatchCast):
                continue
            pattern, actual = _shape(binding.ty), _shape(binding.value.ty)
            if pattern is None or actual is None or len(pattern) != len(actual):
                continue
            new = [v for d in pattern for v in tirx.analysis.undefined_vars(d)
                   if v.name not in known]
            if new:
                known.update(v.name for v in new)
                continue  # it binds dims: not only a check
            pairs = [(a, b) for a, b in zip(actual, pattern)
                     if not tvm_ffi.structural_equal(a, b)]
            if pairs:
                found.append((binding, pairs))
    return found


#: the integer operations :func:`evaluate` knows, by TIR node type name
_INT_OPS = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
            "FloorDiv": lambda a, b: a // b if b else None,
            "FloorMod": lambda a, b: a % b if b else None, "Max": max, "Min": min}


def evaluate(expr, env: dict) -> int | None:
    """The integer value of an index expression with its variables from ``env`` (by
    name); ``None`` for anything but constants, variables and integer arithmetic."""
    kind = type(expr).__name__
    if kind == "IntImm":
        return int(expr.value)
    if kind == "Var":
        return env.get(expr.name)
    if kind == "Cast":
        return evaluate(expr.value, env)
    op = _INT_OPS.get(kind)
    if op is None:
        return None
    a, b = evaluate(expr.a, env), evaluate(expr.b, env)
    return None if a is None or b is None else op(a, b)


def divisors(func: relax.Function, limit: int = LIMIT) -> dict:
    """``{dim: m}``: the input dims of ``func`` whose checks pass with period ``m`` > 1,
    at every multiple of ``m`` (every size up to ``limit`` tried). The dim is then taken
    at the multiples only: sizes that pass off the multiples (a pyramid's 1/32 maps line
    up for heights 29-32 modulo 32) are refused with an error that asks for padding."""
    params = {}
    for param in func.params:
        for dim in _shape(param.ty) or []:
            if isinstance(dim, tirx.Var):
                params.setdefault(dim.name, dim)
    by_dim: dict = {}
    for _, pairs in checks(func):
        for a, b in pairs:
            names = {v.name for v in tirx.analysis.undefined_vars(a)} | \
                    {v.name for v in tirx.analysis.undefined_vars(b)}
            if len(names) == 1 and next(iter(names)) in params:
                by_dim.setdefault(next(iter(names)), []).append((a, b))
    out = {}
    for name, pairs in by_dim.items():
        valid = []
        for k in range(1, limit + 1):
            values = [(evaluate(a, {name: k}), evaluate(b, {name: k})) for a, b in pairs]
            if any(x is None or y is None for x, y in values):
                valid = None
                break
            valid.append(all(x == y for x, y in values))
        m = period(valid) if valid else None
        if m is not None:
            out[params[name]] = m
    return out


def period(valid: list) -> int | None:
    """The smallest ``m`` > 1 (at most a quarter of the sizes tried) such that size ``k``
    passes exactly when ``k + m`` does and every multiple of ``m`` passes; ``None`` if
    every size passes or there is no such ``m``. ``valid[k - 1]``: size ``k`` passes."""
    if all(valid) or not any(valid):
        return None
    n = len(valid)
    for m in range(2, n // 4 + 1):
        if valid[m - 1] and all(valid[k] == valid[k + m] for k in range(n - m)):
            return m
    return None


def _reparametrized(func: relax.Function, divs: dict) -> relax.Function:
    """``func`` with each dim ``v`` of ``divs`` written as ``m * v_q`` (module doc)."""
    quotient = {v: tirx.Var(f"{v.name}_{m}", "int64") for v, m in divs.items()}
    dims = list(divs)
    # substituted inside a function whose first parameter defines the quotients (TVM
    # refuses a function with undefined symbolic variables), then taken apart again
    holder = relax.Var("dims", relax.ShapeType([quotient[v] for v in dims]))
    inner = relax.Function([holder, *func.params], func.body, func.ret_ty, func.is_pure,
                           func.attrs, func.span)
    inner = inner.bind_symbolic_vars({v: quotient[v] * m for v, m in divs.items()})
    inner = relax.Function(list(inner.params)[1:], inner.body, inner.ret_ty, inner.is_pure,
                           inner.attrs, inner.span)
    call = relax.Call(relax.ExternFunc(DIM_QUOTIENTS),
                      [relax.ShapeExpr(dims), relax.ShapeExpr([divs[v] for v in dims]),
                       tvm.ir.expr.StringImm(",".join(v.name for v in dims))],
                      ty_args=[relax.ShapeType(ndim=len(dims))])
    computed = relax.Var("dim_quotients", relax.ShapeType(ndim=len(dims)))
    typed = relax.Var("dims", holder.ty)
    bindings = [relax.VarBinding(computed, call), relax.MatchCast(typed, computed, holder.ty)]
    params = []
    for old, new in zip(func.params, inner.params):
        param = relax.Var(old.name, old.ty)
        params.append(param)
        if tvm_ffi.structural_equal(old.ty, new.ty):
            bindings.append(relax.VarBinding(new, param))
        else:
            bindings.append(relax.MatchCast(new, param, new.ty))
    body = _drop_proved_checks(inner.body)
    seq = relax.SeqExpr([relax.BindingBlock(bindings), *body.blocks], body.body)
    attrs = {q.name: f"{v.name}/{divs[v]}" for v, q in quotient.items()}
    new_func = relax.Function(params, seq, func.ret_ty, func.is_pure, func.attrs, func.span)
    return simplified_shapes(new_func.with_attr(ATTR, attrs))


def _simplified_type(ty, analyzer: Analyzer):
    if isinstance(ty, relax.TensorType):
        shape = _shape(ty)
        if shape is None:
            return ty
        return relax.TensorType([analyzer.simplify(d) for d in shape], ty.dtype)
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([_simplified_type(t, analyzer) for t in ty.fields])
    return ty


def _call_tir_vars(func: relax.Function) -> set:
    """Variables a ``call_tir`` binds or reads: their types are its PrimFunc's buffers,
    which ``FuseTIR`` requires to be structurally the same."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    out = set()
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                out.add(binding.var)
                relax.analysis.post_order_visit(
                    value.args[1], lambda e: out.add(e) if isinstance(e, relax.Var) else None)
    return out


def simplified_shapes(func: relax.Function) -> relax.Function:
    """``func`` with every tensor variable's shape simplified (``(32 * H_32 + 1 + 1 - 2
    - 1) // 2 + 1`` becomes ``H_32 * 16``): Relax's shape inference composes each op's
    formula on its inputs' and never simplifies, so forty layers on made expressions
    hundreds of terms long, in every kernel's index arithmetic and in the proofs the
    schedules need (a wide-tile conv's inlining failed on them). Variables a ``call_tir``
    binds or reads keep their types (its PrimFunc was written with them)."""
    analyzer = Analyzer()
    pinned = _call_tir_vars(func)

    @relax.expr_functor.mutator
    class _Simplify(relax.PyExprMutator):
        def visit_var_binding_(self, binding):
            value = self.visit_expr(binding.value)
            ty = _simplified_type(binding.var.ty, analyzer)
            if binding.var in pinned or (tvm_ffi.structural_equal(ty, binding.var.ty)
                                         and value.same_as(binding.value)):
                super().visit_var_binding_(binding)
                return
            kind = relax.DataflowVar if isinstance(binding.var, relax.DataflowVar) else relax.Var
            var = kind(binding.var.name, ty)
            self.builder_.emit_normalized(relax.VarBinding(var, value))
            self.set_var_remap(binding.var, var)

    return _Simplify().visit_expr(func)


def _drop_proved_checks(body: relax.SeqExpr) -> relax.SeqExpr:
    """The body with every tensor ``match_cast`` whose dims now provably agree made a
    plain binding of the same variable."""
    analyzer = Analyzer()
    blocks = []
    for block in body.blocks:
        bindings = []
        for binding in block.bindings:
            pattern = _shape(binding.ty) if isinstance(binding, relax.MatchCast) else None
            actual = _shape(binding.value.ty) if pattern is not None else None
            if (actual is not None and len(actual) == len(pattern)
                    and all(analyzer.can_prove_equal(a, b) for a, b in zip(actual, pattern))):
                binding = relax.VarBinding(binding.var, binding.value)
            bindings.append(binding)
        blocks.append(type(block)(bindings))
    return relax.SeqExpr(blocks, body.body)


@tvm.transform.module_pass(opt_level=0, name="DivisibleDims")
def divisible_dims(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: each Relax function's dims that it takes only in multiples of ``m``
    written as ``m`` times a quotient dim (module doc)."""
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or (func.attrs and ATTR in func.attrs):
            continue
        divs = divisors(func)
        if divs:
            log.info("%s: %s", gv.name_hint, ", ".join(
                f"{v.name} taken in multiples of {m}" for v, m in divs.items()))
            updates[gv] = _reparametrized(func, divs)
    return relax.transform.Normalize()(with_functions(mod, updates)) if updates else mod


def restored_dims(func: relax.Function) -> relax.Function:
    """``func`` with each quotient dim of its :data:`ATTR` written back as its dim divided
    (``H_32`` -> ``H // 32``: the run-time check made them equal), shapes simplified.

    Once the layout is chosen nothing needs the quotient as a variable, and TVM's static
    memory planner bounds only the dims of the function's signature
    (``tir_var_upper_bound``): a storage sized by ``H_32`` was allocated per call."""
    if not (func.attrs and ATTR in func.attrs):
        return simplified_shapes(func)
    defined = {v.name: v for v in relax.analysis.defined_symbolic_vars(func)}
    back = {}
    for name, ratio in dict(func.attrs[ATTR]).items():
        base, divisor = str(ratio).split("/")
        if str(name) in defined and base in defined:
            back[defined[str(name)]] = tirx.floordiv(defined[base], int(divisor))
    func = func.bind_symbolic_vars(back) if back else func
    return simplified_shapes(func.without_attr(ATTR))


def _with_symbolic_functions(mod: tvm.IRModule, rewrite) -> tvm.IRModule:
    """``mod`` with ``rewrite`` applied to each Relax function that has a symbolic dim."""
    return with_functions(mod, {gv: rewrite(func) for gv, func in mod.functions_items()
                                if isinstance(func, relax.Function)
                                and relax.analysis.defined_symbolic_vars(func)})


@tvm.transform.module_pass(opt_level=0, name="RestoreQuotientDims")
def restore_quotient_dims(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: :func:`restored_dims` on every Relax function with a symbolic dim (at
    the start of the lower stage: the kernels are fused and keep the quotient as their
    own parameter, passed ``H // 32`` from then on)."""
    return _with_symbolic_functions(mod, restored_dims)


@tvm.transform.module_pass(opt_level=0, name="SimplifyShapes")
def simplify_shapes(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: :func:`simplified_shapes` on every Relax function with a symbolic dim
    (at the end of the layout stage: ``ConvertLayout`` composes Relax's formulas again)."""
    return _with_symbolic_functions(mod, simplified_shapes)

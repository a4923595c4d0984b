"""Lift element-wise ``call_tir`` back to Relax operators, so layouts propagate through them.

TVM's ONNX importer lowers some operators to TIR on the spot: ``Clip`` becomes
``call_tir(maximum, (x, lo))`` then ``call_tir(minimum, (., hi))``. ``ConvertLayout``
cannot see through a ``call_tir``, so every ReLU6 of a MobileNet would sit between
two ``layout_transform``s (blocked -> NCHW -> blocked): more time than the
convolutions around them. This pass recognizes the PrimFuncs that are a single
element-wise ``max``/``min``/``+``/``-``/``*``/``/`` of a tensor and a same-shape
tensor or a 0-d scalar, with identity indexing (and, with symbolic shapes, the dims
as scalar arguments), and replaces the call by the equivalent Relax operator, which
``ConvertLayout`` handles. Anything else is left untouched.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax, s_tir, tirx

from ...exprs import is_load
from .call_rewrite import rewrite_calls

log = logging.getLogger(__name__)

_OPS = {
    "Max": relax.op.maximum,
    "Min": relax.op.minimum,
    "Add": relax.op.add,
    "Sub": relax.op.subtract,
    "Mul": relax.op.multiply,
    "Div": relax.op.divide,
}


def _load_operand(expr, iter_vars, params):
    """Index of the param read by ``expr`` if it is an identity or 0-d load, else None."""
    if not is_load(expr):
        return None
    indices = list(expr.indices)
    if indices and (len(indices) != len(iter_vars)
                    or not all(i.same_as(v) for i, v in zip(indices, iter_vars))):
        return None
    for pos, p in enumerate(params):
        if expr.source.same_as(p):
            return pos
    return None


def elementwise_op(func: tirx.PrimFunc):
    """``(relax op, (param a, param b))`` if ``func`` is one binary element-wise block."""
    try:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # noqa: BLE001 - not a schedulable PrimFunc: not ours to lift
        return None
    if len(blocks) != 1:
        return None
    block = sch.get(blocks[0])
    store = block.body
    if type(store).__name__ not in ("BufferStore", "TensorStore") or block.init is not None:
        return None
    op = _OPS.get(type(store.value).__name__)
    if op is None:
        return None
    params = list(func.params)
    iter_vars = [iv.var for iv in block.iter_vars]
    if any(int(iv.iter_type) != int(tirx.IterVar.DataPar) for iv in block.iter_vars):
        return None
    a = _load_operand(store.value.a, iter_vars, params)
    b = _load_operand(store.value.b, iter_vars, params)
    out = len(params) - 1
    if len(store.indices) != len(iter_vars) or not all(
            i.same_as(v) for i, v in zip(store.indices, iter_vars)):
        return None
    if a is None or b is None or out in (a, b) or not _store_target_is(store, params[out]):
        return None
    return op, (a, b)


def _store_target_is(store, param) -> bool:
    target = getattr(store, "source", None) or getattr(store, "buffer", None)
    return target is not None and target.same_as(param)


def _lift(mod: tvm.IRModule, call):
    """The Relax op equivalent to an element-wise ``call_tir`` of ``mod``, or None."""
    gvar, args = call.args[0], call.args[1]
    func = mod[gvar] if gvar in mod.get_global_vars() else None
    if not isinstance(func, tirx.PrimFunc) or not isinstance(args, relax.Tuple):
        return None
    found = elementwise_op(func)
    if found is None:
        return None
    op, (ia, ib) = found
    # with symbolic shapes the importer's PrimFunc also takes the dims (``H``, ``W``)
    if any(isinstance(getattr(f, "ty", None), relax.TensorType)
           for i, f in enumerate(args.fields) if i not in (ia, ib)):
        return None
    lifted = op(args.fields[ia], args.fields[ib])
    out_ty = call.ty
    if getattr(out_ty, "dtype", None) is None or str(out_ty.dtype) != str(args.fields[0].ty.dtype):
        return None
    return lifted


@tvm.transform.module_pass(opt_level=0, name="LiftElementwiseTIR")
def lift_elementwise_tir(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: lift element-wise ``call_tir`` to Relax ops, drop PrimFuncs left unused."""
    new, lifted = rewrite_calls(mod, "relax.call_tir",
                                lambda _builder, call: _lift(mod, call))
    if lifted:
        log.debug("lifted %d element-wise call_tir to Relax", lifted)
    return relax.transform.DeadCodeElimination()(new)

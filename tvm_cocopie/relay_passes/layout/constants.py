"""Fold, with numpy, the constant subexpressions that a layout change creates.

Moving a network to NCHW[x]c makes ``ConvertLayout`` wrap every per-channel constant
(biases, decomposed batch-norm statistics) in ``expand_dims`` / ``layout_transform``
chains. TVM's ``FoldConstant`` would fold them after legalization, but it builds an
LLVM kernel for every distinct shape first: a minute of compile time on ResNet-50.
This pass evaluates such chains directly with numpy before legalization (a few
milliseconds), for a small set of shape-manipulating and element-wise operators,
and substitutes constants for the variables bound to them, so that later passes
(and the weight packing of the legalization) see plain constants.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax

from ...exprs import ints

log = logging.getLogger(__name__)

_BINARY = {
    "relax.add": np.add,
    "relax.subtract": np.subtract,
    "relax.multiply": np.multiply,
    "relax.divide": np.divide,
    "relax.maximum": np.maximum,
    "relax.minimum": np.minimum,
    "relax.power": np.power,
}
_UNARY = {
    "relax.sqrt": np.sqrt,
    "relax.rsqrt": lambda x: 1.0 / np.sqrt(x),
    "relax.negative": np.negative,
    "relax.exp": np.exp,
    "relax.abs": np.abs,
}
#: constants larger than this are left to FoldConstant (weights are packed elsewhere)
MAX_ELEMENTS = 1 << 22


def evaluate(call, args: list[np.ndarray]) -> np.ndarray | None:
    """numpy value of ``call`` on constant ``args``; ``None`` if not supported."""
    name = call.op.name
    if name in _BINARY:
        if not all(np.issubdtype(a.dtype, np.floating) for a in args):
            return None
        return _BINARY[name](args[0], args[1])
    if name in _UNARY:
        if not np.issubdtype(args[0].dtype, np.floating):
            return None
        return _UNARY[name](args[0])
    if name == "relax.isnan":
        return np.isnan(args[0])
    if name == "relax.where":
        return np.where(args[0], args[1], args[2])
    if name == "relax.expand_dims":
        return np.expand_dims(args[0], tuple(ints(call.attrs.axis)))
    if name == "relax.permute_dims":
        axes = call.attrs.axes
        return np.transpose(args[0], None if axes is None else ints(axes))
    if name == "relax.layout_transform":
        if call.attrs.pad_value is not None:
            return None
        mapped = call.attrs.index_map.map_tensor(tvm.runtime.tensor(args[0]))
        return mapped.numpy()
    if name == "relax.astype":
        return args[0].astype(str(call.attrs.dtype))
    return None


def _shape_arg_ok(call) -> bool:
    return all(isinstance(a, tvm.ir.GenericConst) for a in call.args)


@relax.expr_functor.mutator
class _ConstantChainFolder(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.folded = 0

    def _as_const(self, expr):
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if isinstance(bound, tvm.ir.GenericConst):
                return bound
            return None
        return expr if isinstance(expr, tvm.ir.GenericConst) else None

    def visit_call_(self, call):
        new = super().visit_call_(call)
        if not isinstance(new, relax.Call) or not isinstance(new.op, tvm.ir.Op):
            return new
        consts = [self._as_const(a) for a in new.args]
        if new.op.name == "relax.reshape" and consts and consts[0] is not None:
            value = self._try_reshape(new, consts[0])
            if value is not None:
                self.folded += 1
                return value
        if consts and all(c is not None for c in consts):
            value = self._try_fold(new, consts)
            if value is not None:
                self.folded += 1
                return value
        if any(c is not None and isinstance(a, relax.Var) for a, c in zip(new.args, consts)):
            args = [c if c is not None else a for a, c in zip(new.args, consts)]
            return relax.Call(new.op, args, new.attrs, new.ty_args)
        return new

    def _try_reshape(self, call, const):
        shape = getattr(call.ty, "shape", None)
        try:
            dims = [int(d) for d in shape.values] if hasattr(shape, "values") else None
        except (TypeError, ValueError):  # a symbolic dim
            dims = None
        if dims is None or not isinstance(const.value, tvm.runtime.Tensor):
            return None
        array = const.value.numpy()
        if array.size != int(np.prod(dims)) or array.size > MAX_ELEMENTS:
            return None
        return relax.const(np.ascontiguousarray(array.reshape(dims)), str(array.dtype))

    def _try_fold(self, call, consts):
        if not all(isinstance(c.value, tvm.runtime.Tensor) for c in consts):
            return None
        arrays = [c.value.numpy() for c in consts]
        if any(a.size > MAX_ELEMENTS for a in arrays):
            return None
        try:
            value = evaluate(call, arrays)
        except Exception as err:  # noqa: BLE001 - leave it to FoldConstant
            log.debug("not folded %s: %s", call.op.name, err)
            return None
        if value is None:
            return None
        dtype = str(call.ty.dtype) if getattr(call.ty, "dtype", None) is not None else None
        value = np.ascontiguousarray(value.astype(dtype) if dtype else value)
        return relax.const(value, dtype)


@tvm.transform.module_pass(opt_level=0, name="FoldLayoutConstants")
def fold_layout_constants(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: fold constant chains of Relax functions with numpy, then drop dead code."""
    folder = _ConstantChainFolder(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            new = folder.visit_expr(func)
            folder.builder_.update_func(gvar, new)
    mod = folder.builder_.get()
    log.debug("folded %d constant expressions", folder.folded)
    return relax.transform.DeadCodeElimination()(mod)

"""Move ``where`` into the blocked layout, where ``ConvertLayout`` left it outside.

TVM 0.27 has no layout-inference rule for ``where``, so ``ConvertLayout`` returns
every operand of a ``where`` to NCHW and the result back to NCHW[x]c: two or three
feature-map ``layout_transform`` kernels per ``where`` (the exact ``log1p`` of
Softplus/Mish, ELU). ``where`` is element-wise, so the transforms commute with it::

    w = where(T(c), T(a), s)          wb = where(c, a, s)
    y = U(w)              ==>         y  = wb            (U the inverse of T)

when every non-scalar operand is the same transform ``T`` of a blocked tensor; a
remaining use of ``w`` in the original layout gets ``U(wb)`` instead. Runs after
``ConvertLayout``; dead-code elimination then drops the transforms no one reads.
Not covered: a ``where`` whose consumers ``ConvertLayout`` already placed in NCHW
(ELU before a global pool keeps one transform out of the blocked layout there).
"""

from __future__ import annotations

import tvm
from tvm import relax

_WHERE = "relax.where"
_TRANSFORM = "relax.layout_transform"


def _is_op(expr, name: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
        expr.op.name == name


def _scalar(expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and ty.ndim == 0


def _shape(expr):
    ty = getattr(expr, "ty", None)
    shape = getattr(ty, "shape", None)
    if shape is None or not isinstance(shape, relax.ShapeExpr):
        return None
    try:
        return [int(d) for d in shape.values]
    except TypeError:
        return None


@relax.expr_functor.mutator
class _Sink(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.unblocks = {}  # var bound to U(blocked) -> (blocked, U, blocked shape)
        self.sunk = {}  # var of a sunk where -> (its blocked result, T)
        self.count = 0

    def visit_var_binding_(self, binding):
        value = binding.value
        if _is_op(value, _TRANSFORM) and value.attrs.pad_value is None:
            hit = self.sunk.get(value.args[0])
            if hit is not None and value.attrs.index_map.is_equivalent_to(hit[1]):
                self.set_var_remap(binding.var, hit[0])  # T(U(wb)) is wb
                return
            self._note_unblock(binding.var, value)
        if _is_op(value, _WHERE) and isinstance(binding.var, relax.DataflowVar):
            sunk = self._sink_where(value)
            if sunk is not None:
                blocked, unblock, shape = sunk
                self.set_var_remap(binding.var, self.builder_.emit(
                    relax.op.layout_transform(blocked, unblock)))
                self.sunk[binding.var] = (blocked, unblock.inverse(shape))
                self.count += 1
                return
        super().visit_var_binding_(binding)

    def _note_unblock(self, var, value):
        blocked = value.args[0]
        shape = _shape(blocked)
        if isinstance(blocked, relax.Var) and shape is not None and len(shape) > len(
                _shape(value) or shape):
            self.unblocks[var] = (blocked, value.attrs.index_map, shape)

    def _sink_where(self, call):
        """``(where over the blocked operands, U, blocked shape)``, or ``None``."""
        sources = []
        for arg in call.args:
            if _scalar(arg):
                sources.append(None)
            elif isinstance(arg, relax.Var) and arg in self.unblocks:
                sources.append(self.unblocks[arg])
            else:
                return None
        found = [src for src in sources if src is not None]
        if not found:
            return None
        _, unblock, shape = found[0]
        if any(other_shape != shape or not other.is_equivalent_to(unblock)
               for _, other, other_shape in found[1:]):
            return None
        args = [self.visit_expr(arg) if src is None else self.visit_expr(src[0])
                for arg, src in zip(call.args, sources)]
        return self.builder_.emit(relax.op.where(*args)), unblock, shape


@tvm.transform.module_pass(opt_level=0, name="SinkLayoutTransforms")
def sink_layout_transforms(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Apply the rewrite of the module docstring to every Relax function of ``mod``."""
    sink = _Sink(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            sink.builder_.update_func(gvar, sink.visit_expr(func))
    return sink.builder_.get()

"""``match_cast`` of feature maps through TVM's ``ConvertLayout``.

A model with symbolic dims keeps a ``match_cast`` where two shapes are equal only at run
time (PP-OCR det's neck: a level upsampled by ``take`` added to the next one, the sum's
height ``(H - 1) // 8 * 2 + 2`` cast to ``(H - 1) // 32 * 8 + 8`` for the concat).
``ConvertLayout`` (TVM 0.27) fails on such a cast when its value arrives blocked
(``Check failed: shape->values.size() == to.LeafValue()->layout.ndim() (4 vs. 5)``):
the blocked-layout pass then kept every conv whose conversion reached it in NCHW (4 of
PP-OCR det's, its two 80x80 head convs among them: 2.5x their static time).

:func:`guard_match_casts`, before the blocked layout, reads each cast of a 4-D tensor
through ``builtin.stop_lift_params`` (an identity without a layout rule, so
``ConvertLayout`` hands it the tensor in its original layout, converting it back
itself); :func:`release_match_casts`, right after, removes those identities again. The
cast and its run-time check stay as they were.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ...exprs import op_name

#: the identity the casts read through (``relax.`` dropped, as :func:`op_name` gives it)
_BARRIER = "builtin.stop_lift_params"


def _is_barrier(expr) -> bool:
    return op_name(expr) == _BARRIER


def _feature_map(expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and ty.ndim == 4


@relax.expr_functor.mutator
class _Guard(relax.PyExprMutator):
    def visit_match_cast_(self, binding: relax.MatchCast) -> None:
        value = self.visit_expr(binding.value)
        if _feature_map(value) and not _is_barrier(value):
            value = self.builder_.emit(relax.op.builtin.stop_lift_params(value))
        var = self.builder_.match_cast(value, binding.ty)
        self.set_var_remap(binding.var, var)


@relax.expr_functor.mutator
class _Release(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        return call.args[0] if _is_barrier(call) else call


def _each_function(mutator_type, mod: tvm.IRModule) -> tvm.IRModule:
    mutator = mutator_type(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


@tvm.transform.module_pass(opt_level=0, name="GuardMatchCasts")
def guard_match_casts(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Each ``match_cast`` of a 4-D tensor reads it through an identity without a layout
    rule (module docstring)."""
    return _each_function(_Guard, mod)


@tvm.transform.module_pass(opt_level=0, name="ReleaseMatchCasts")
def release_match_casts(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The identities :func:`guard_match_casts` put in, removed."""
    return _each_function(_Release, mod)


__all__ = ["guard_match_casts", "release_match_casts"]

"""Replace the calls of one Relax operator across a module: the walk that the layout
passes (:mod:`.subpixel`, :mod:`.lift`) share."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax


@relax.expr_functor.mutator
class _CallRewriter(relax.PyExprMutator):
    def __init__(self, mod, op_name, rewrite):
        super().__init__(mod)
        self.op_name = op_name
        self.rewrite = rewrite
        self.count = 0

    def visit_call_(self, call):
        new = super().visit_call_(call)
        if not (isinstance(new, relax.Call) and isinstance(new.op, tvm.ir.Op)
                and new.op.name == self.op_name):
            return new
        replacement = self.rewrite(self.builder_, new)
        if replacement is None:
            return new
        self.count += 1
        return replacement


def rewrite_calls(mod: tvm.IRModule, op_name: str,
                  rewrite: Callable[[relax.BlockBuilder, relax.Call], relax.Expr | None]
                  ) -> tuple[tvm.IRModule, int]:
    """Replace the calls of operator ``op_name`` in the Relax functions of ``mod``.

    ``rewrite(builder, call)`` gets each call, its arguments already visited, and
    returns its replacement (emitting any bindings it needs with ``builder``) or
    ``None`` to keep it. Returns the new module and the number of calls replaced.
    """
    rewriter = _CallRewriter(mod, op_name, rewrite)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    return rewriter.builder_.get(), rewriter.count


def rewrite_table(mod: tvm.IRModule, table: dict) -> tvm.IRModule:
    """``mod`` with :func:`rewrite_calls` applied for every ``{op name: rewrite}`` of
    ``table``, in order."""
    for op_name, rewrite in table.items():
        mod, _ = rewrite_calls(mod, op_name, rewrite)
    return mod

"""Rebuilding lowered TIR statements: the one walker, and the module pass over a
module's PrimFuncs, that the TIR passes of the cocopie TIR pipeline share
(:mod:`tvm_cocopie.tir_pipeline`, :mod:`tvm_cocopie.lane_shuffles`,
:mod:`tvm_cocopie.kernel_knobs`)."""

from __future__ import annotations

import tvm
from tvm import tirx


def with_bodies(node, visit):
    """``node`` (a loop, branch, attribute or while statement) with ``visit`` applied to
    each statement it holds; ``None`` for other kinds (a list, a leaf: the caller's)."""
    if isinstance(node, tirx.For):
        return tirx.For(node.loop_var, node.min, node.extent, node.kind, visit(node.body),
                        node.thread_binding, node.annotations, node.step)
    if isinstance(node, tirx.IfThenElse):
        other = None if node.else_case is None else visit(node.else_case)
        return tirx.IfThenElse(node.condition, visit(node.then_case), other)
    if isinstance(node, tirx.AttrStmt):
        return tirx.AttrStmt(node.node, node.attr_key, node.value, visit(node.body))
    if isinstance(node, tirx.While):
        return tirx.While(node.condition, visit(node.body))
    return None


def prim_func_pass(name: str, rewrite):
    """A module pass named ``name`` replacing each PrimFunc ``func`` by
    ``rewrite(func name, func)`` where that is not ``None`` (a rewrite that changed nothing
    returns ``None``)."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                new = rewrite(gvar.name_hint, func)
                if new is not None:
                    updates[gvar] = new
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod

    return _pass

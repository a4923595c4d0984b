"""Horizontal fusion: matmuls that read one input with constant weights become one.

An encoder layer projects its input three times (queries, keys, values), each a matmul
with a constant weight and a bias add: three kernels reading the same rows of ``x``,
each a third as wide as the product the register tile could sweep. Joined, one matmul
with the weights side by side (``x @ [Wq | Wk | Wv] + [bq | bk | bv]``) computes all
three, and a ``split`` hands each branch its columns; the attention kernel reads its
operands through that split (:mod:`..attention`), so no copy is made.

DNNFusion (seed 004 §3.4) fuses along producer-consumer edges only; this is the other
direction, sibling operators of one producer. It runs as part of the DNNFusion choice
(``PipelineOptions(fusion="dnnfusion")``, switch: ``horizontal``) at the start of the
``legalize`` stage, because it needs the operators (the fusion stage sees legalized
kernels, whose packed weights it could not join), before the attention rewrite that
reads the split.

A branch joins when its matmul reads the shared input and a constant 2-D weight of the
group's reduction size and dtype. When the product's only reader adds a constant bias
over the last axis, the add joins too (a branch without one adds zeros in the joined
bias); otherwise every reader of the product reads its part of the split. The joined
weight and bias are constants made at compile time, so nothing is concatenated per
call. A branch whose result is a function output keeps its own matmul.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax

from ...exprs import is_constant, op_name

log = logging.getLogger(__name__)


def _constant(expr) -> np.ndarray | None:
    return expr.value.numpy() if is_constant(expr) else None


def _branches(block: relax.DataflowBlock) -> list:
    """The groups of joinable branches of ``block`` (two or more per group), each
    branch ``(matmul binding, bias add binding or None, weight, bias)``."""
    users: dict = {}
    for binding in block.bindings:
        for var in relax.analysis.free_vars(binding.value):
            users.setdefault(var, []).append(binding.var)
    by_var = {b.var: b for b in block.bindings}
    outputs = {b.var for b in block.bindings if not isinstance(b.var, relax.DataflowVar)}
    groups: dict = {}
    for binding in block.bindings:
        call = binding.value
        if not isinstance(call, relax.Call) or op_name(call) != "matmul":
            continue
        x, weight = call.args[0], _constant(call.args[1])
        if not isinstance(x, relax.Var) or weight is None or weight.ndim != 2:
            continue
        if str(getattr(binding.var.ty, "dtype", "")) != str(weight.dtype):
            continue  # a mixed-precision product
        readers = users.get(binding.var, [])
        add, bias = None, None
        if len(readers) == 1 and readers[0] in by_var:
            candidate = by_var[readers[0]]
            value = candidate.value
            if isinstance(value, relax.Call) and op_name(value) == "add":
                other = [a for a in value.args if not a.same_as(binding.var)]
                data = _constant(other[0]) if len(other) == 1 else None
                rank = getattr(binding.var.ty, "ndim", -1)
                if data is not None and data.size == weight.shape[1] and data.ndim <= rank and (
                        data.ndim == 1 or all(d == 1 for d in data.shape[:-1])):
                    add, bias = candidate, data.reshape(-1).astype(weight.dtype)
        result = add.var if add is not None else binding.var
        if not readers or result in outputs:
            continue  # a function output keeps its binding
        key = (x, weight.shape[0], str(weight.dtype))
        groups.setdefault(key, []).append((binding, add, weight, bias))
    return [g for g in groups.values() if len(g) >= 2]


@relax.expr_functor.mutator
class _Joiner(relax.PyExprMutator):
    """Emits each group's joined matmul at its first branch and maps every branch's
    result to its part of the split."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.joined = 0
        self._plan: dict = {}  # first matmul var -> group
        self._dropped: set = set()  # branch bindings no longer emitted

    def visit_dataflow_block_(self, block):
        for group in _branches(block):
            self._plan[group[0][0].var] = group
            for matmul, add, _, _ in group:
                self._dropped.add(matmul.var)
                if add is not None:
                    self._dropped.add(add.var)
        return super().visit_dataflow_block_(block)

    def visit_var_binding_(self, binding):
        group = self._plan.get(binding.var)
        if group is not None:
            self._emit_joined(group)
            return
        if binding.var in self._dropped:
            return
        super().visit_var_binding_(binding)

    def _emit_joined(self, group: list) -> None:
        x = self.visit_expr(group[0][0].value.args[0])
        weights = [w for _, _, w, _ in group]
        dtype = weights[0].dtype
        widths = [w.shape[1] for w in weights]
        joined = self.builder_.emit(relax.op.matmul(
            x, relax.const(np.concatenate(weights, axis=1))))
        if any(b is not None for _, _, _, b in group):
            bias = np.concatenate([b if b is not None else np.zeros(w.shape[1], dtype)
                                   for _, _, w, b in group])
            joined = self.builder_.emit(relax.op.add(joined, relax.const(bias)))
        parts = self.builder_.emit(relax.op.split(
            joined, [int(i) for i in np.cumsum(widths)[:-1]], axis=-1))
        for i, (matmul, add, _, _) in enumerate(group):
            result = add.var if add is not None else matmul.var
            self.set_var_remap(result, self.builder_.emit(relax.TupleGetItem(parts, i)))
        self.joined += 1


@tvm.transform.module_pass(opt_level=0, name="HorizontalMatmuls")
class HorizontalMatmuls:
    """Parallel matmuls of one input with constant weights joined into one (module
    docstring); ``joined`` counts the groups of the last run."""

    def __init__(self):
        self.joined = 0

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        self.joined = 0
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            joiner = _Joiner(mod)
            new = joiner.visit_expr(func)
            if joiner.joined:
                self.joined += joiner.joined
                mod[gv] = relax.analysis.remove_all_unused(new)
        if self.joined:
            log.info("horizontal fusion: %d groups of parallel matmuls joined", self.joined)
        return mod


def horizontal_matmuls() -> HorizontalMatmuls:
    """The pass (:class:`HorizontalMatmuls`)."""
    return HorizontalMatmuls()

"""``Einsum`` (12) of two operands that is a (batched) matrix product, as one.

Spec: https://onnx.ai/onnx/operators/onnx__Einsum.html.

TVM's importer lowers every ``Einsum`` to TOPI's generic einsum compute, a loop nest
no schedule rule of ours recognizes: attention written as ``bhqd,bhkd->bhqk`` (T5,
Performer, exports that keep ``torch.einsum``) ran 2x ONNX Runtime's time. An equation
of two operands without ellipsis or repeated letters whose every letter is in both
inputs (batch, or contracted when the output lacks it) or in one input and the output
(that operand's free dims) is a matmul::

    A -> permute (batch, free A, contracted) -> reshape (*batch, M, K)
    B -> permute (batch, contracted, free B) -> reshape (*batch, K, N)
    matmul -> reshape (batch, free A, free B) -> permute to the output's order

(a reshape only where a group has several letters, a permute only where the order
changes)

which the packed matmul kernels take (a constant second operand: the packed dense
layer). Any other equation keeps TVM's lowering.
"""

from __future__ import annotations

import math

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from ...exprs import static_shape
from .common import converter


def matmul_plan(equation: str) -> tuple | None:
    """``(a, b, out, batch, free_a, contracted, free_b)`` letter strings of an equation
    that is a matrix product, else ``None``."""
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return None
    lhs, out = eq.split("->")
    operands = lhs.split(",")
    if len(operands) != 2:
        return None
    a, b = operands
    if any(len(set(s)) != len(s) for s in (a, b, out)) or not set(out) <= set(a) | set(b):
        return None
    if any(c not in b and c not in out for c in a) or any(c not in a and c not in out
                                                          for c in b):
        return None  # a letter summed within one operand
    batch = "".join(c for c in out if c in a and c in b)
    free_a = "".join(c for c in a if c in out and c not in b)
    free_b = "".join(c for c in b if c in out and c not in a)
    contracted = "".join(c for c in a if c in b and c not in out)
    return a, b, out, batch, free_a, contracted, free_b


def _arranged(bb, x, letters: str, order: str, groups: list[str], dims: dict):
    """``x`` (indexed by ``letters``) permuted to ``order`` and reshaped to one dim per
    group of letters (a dim of 1 for an empty group)."""
    if letters != order:
        x = bb.emit(relax.op.permute_dims(x, [letters.index(c) for c in order]))
    shape = [math.prod(dims[c] for c in g) for g in groups]
    if shape != [dims[c] for c in order]:
        x = bb.emit(relax.op.reshape(x, shape))
    return x


def _einsum(bb, inputs, attr, params):
    """An ``Einsum`` that is a matrix product as permutes, reshapes and one ``matmul``
    (module docstring); any other through TVM's lowering."""
    equation = attr["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    plan = matmul_plan(equation) if len(inputs) == 2 else None
    shapes = [static_shape(x) for x in inputs]
    if plan is None or None in shapes:
        return stock.Einsum._impl_v12(bb, inputs, attr, params)
    a, b, out, batch, free_a, contracted, free_b = plan
    dims: dict[str, int] = {}
    for letters, shape in ((a, shapes[0]), (b, shapes[1])):
        if len(letters) != len(shape):
            return stock.Einsum._impl_v12(bb, inputs, attr, params)
        for c, d in zip(letters, shape):
            if dims.setdefault(c, d) != d:  # broadcast of a 1 against n: TVM's einsum
                return stock.Einsum._impl_v12(bb, inputs, attr, params)
    lead = list(batch)  # batch dims stay dims of their own (a batched matmul takes them)
    x = _arranged(bb, inputs[0], a, batch + free_a + contracted, [*lead, free_a, contracted], dims)
    y = _arranged(bb, inputs[1], b, batch + contracted + free_b, [*lead, contracted, free_b], dims)
    product = bb.emit(relax.op.matmul(x, y))
    natural = batch + free_a + free_b
    full = [dims[c] for c in natural]
    if static_shape(product) != full:
        product = bb.emit(relax.op.reshape(product, full))
    if natural == out:
        return product
    return relax.op.permute_dims(product, [natural.index(c) for c in out])


Einsum = converter("Einsum", 12, _einsum, stock.Einsum)

"""Cost of a Relax graph for rewriting: FLOPs, bytes moved, op count (DNNFusion §3.3).

DNNFusion drives rewriting by #FLOPs. We compare graphs by the tuple
``(flops, bytes, ops, heavy)``, lexicographically: FLOPs first (the thesis' metric),
then bytes moved (Table 3.4 note §: "A is loaded once instead of twice"), then the
number of operators, then the element count of expensive operators (division,
transcendental functions) so that ``x / c -> x * (1/c)`` counts as a gain. Every
component is a non-negative integer, so a sequence of strictly decreasing costs is
finite: this is the termination argument of the greedy rewriter.

Shapes come from Relax types; a symbolic dimension counts as 1.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from tvm import relax

from ...exprs import op_name


class Cost(NamedTuple):
    """FLOPs and bytes moved by an expression, function or module (additive)."""
    flops: int = 0
    bytes: int = 0
    ops: int = 0
    heavy: int = 0

    def __add__(self, other):  # type: ignore[override]
        return Cost(*(a + b for a, b in zip(self, other)))

    def __sub__(self, other):
        return Cost(*(a - b for a, b in zip(self, other)))

    def positive(self) -> bool:
        """True if this difference is a gain: first non-zero component > 0."""
        for v in self:
            if v:
                return v > 0
        return False


ZERO = Cost()

ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "negative", "abs", "sqrt", "rsqrt", "exp",
    "log", "square", "power", "maximum", "minimum", "nn.relu", "sigmoid", "tanh", "erf",
    "clip", "floor", "ceil", "round", "sign", "left_shift", "right_shift", "astype",
    "nn.gelu", "nn.silu", "nn.leakyrelu", "nn.prelu", "where", "floor_divide", "mod",
    "bitwise_and", "bitwise_or", "equal", "less", "greater", "sin", "cos",
})
HEAVY = frozenset({"divide", "sqrt", "rsqrt", "exp", "log", "power", "sigmoid", "tanh",
                   "erf", "nn.gelu", "nn.silu", "sin", "cos", "floor_divide", "mod"})
REDUCTIONS = frozenset({"sum", "prod", "mean", "max", "min", "variance", "std", "argmax",
                        "argmin"})
#: operators that are views or metadata only (no data moved once lowered)
VIEWS = frozenset({"reshape", "expand_dims", "squeeze", "flatten"})
MOVES = frozenset({"permute_dims", "concat", "strided_slice", "split", "nn.pad", "take",
                   "broadcast_to", "tile", "repeat", "layout_transform", "flip"})


def numel(ty) -> int:
    """Element count of a tensor type (symbolic dims count as 1)."""
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return 1
    shape = getattr(ty.shape, "values", None)
    if shape is None:
        return 1
    n = 1
    for d in shape:
        n *= int(d) if hasattr(d, "value") or isinstance(d, int) else 1
    return n


def nbytes(ty) -> int:
    """Bytes of a value of Relax type ``ty`` (tuples summed; symbolic dims count 1)."""
    if isinstance(ty, relax.TupleType):
        return sum(nbytes(f) for f in ty.fields)
    if not isinstance(ty, relax.TensorType) or ty.dtype is None:
        return 0
    bits = {"bool": 8}.get(str(ty.dtype))
    if bits is None:
        digits = "".join(ch for ch in str(ty.dtype) if ch.isdigit())
        bits = int(digits) if digits else 32
    return numel(ty) * max(bits // 8, 1)


def dims(ty) -> list[int]:
    """The dims of a Relax tensor type as ints (symbolic dims count 1)."""
    vals = getattr(getattr(ty, "shape", None), "values", None) or []
    return [int(d) if hasattr(d, "value") or isinstance(d, int) else 1 for d in vals]


def _arg_types(call):
    out = []
    for a in call.args:
        if isinstance(a, relax.Tuple):
            out.extend(f.ty for f in a.fields)
        else:
            out.append(a.ty)
    return out


def call_cost(call: relax.Expr) -> Cost:
    """Cost of one bound value (a Call; tuple accesses and leaves are free)."""
    name = op_name(call)
    if name is None:
        if isinstance(call, relax.Call):  # call_tir and friends: bytes only
            ins = sum(nbytes(t) for t in _arg_types(call) if isinstance(t, relax.TensorType))
            return Cost(0, ins + nbytes(call.ty), 1, 0)
        return ZERO
    out = call.ty
    n = numel(out) if isinstance(out, relax.TensorType) else numel(out.fields[0]) \
        if isinstance(out, relax.TupleType) and out.fields else 1
    ins = [t for t in _arg_types(call) if isinstance(t, relax.TensorType)]
    moved = sum(nbytes(t) for t in ins) + nbytes(out)
    heavy = n if name in HEAVY else 0
    if name in ELEMENTWISE:
        flops = 0 if name == "astype" else n
    elif name in REDUCTIONS:
        flops = numel(ins[0]) if ins else n
    elif name in ("nn.conv2d", "nn.conv1d", "nn.conv3d"):
        w = dims(ins[1])
        flops = 2 * n * math.prod(w[1:])
    elif name in ("nn.conv2d_transpose",):
        w = dims(ins[1])
        flops = 2 * numel(ins[0]) * math.prod(w[1:])
    elif name == "matmul":
        flops = 2 * n * (dims(ins[0])[-1] if dims(ins[0]) else 1)
    elif name == "nn.batch_norm":
        flops = 4 * n  # (x - mean) * rsqrt(var + eps) * gamma + beta per element
        heavy = n
    elif name in ("nn.layer_norm", "nn.group_norm", "nn.instance_norm", "nn.rms_norm"):
        flops, heavy = 8 * n, n
    elif name in ("nn.softmax", "nn.log_softmax"):
        flops, heavy = 5 * n, n
    elif name in ("nn.max_pool2d", "nn.avg_pool2d"):
        ps = list(call.attrs.pool_size)
        flops = n * math.prod(int(p) for p in ps)
    elif name in ("nn.adaptive_avg_pool2d",):
        flops = numel(ins[0]) if ins else n
    elif name in VIEWS:
        flops, moved = 0, 0
    elif name in MOVES:
        flops = 0
    else:
        flops = n
    return Cost(int(flops), int(moved), 1, int(heavy))


def expr_cost(expr: relax.Expr) -> Cost:
    """Cost of a nested (not yet normalized to ANF) expression: every Call in it."""
    total = ZERO
    if isinstance(expr, relax.Call):
        total = total + call_cost(expr)
        for a in expr.args:
            total = total + expr_cost(a)
    elif isinstance(expr, relax.Tuple):
        for f in expr.fields:
            total = total + expr_cost(f)
    elif isinstance(expr, relax.TupleGetItem):
        total = total + expr_cost(expr.tuple_value)
    return total


def function_cost(func: relax.Function) -> Cost:
    """The :class:`Cost` of every binding of a Relax function."""
    total = ZERO
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b, relax.VarBinding):
                total = total + call_cost(b.value)
    return total


def module_cost(mod) -> Cost:
    """The :class:`Cost` of every Relax function of ``mod``."""
    total = ZERO
    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            total = total + function_cost(func)
    return total

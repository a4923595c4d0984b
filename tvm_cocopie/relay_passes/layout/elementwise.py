"""Element-wise operators TVM's layout inference cannot carry, in ops it can.

``ConvertLayout`` moves a blocked (NCHW[x]c) tensor through an operator only if the
operator has a layout-inference rule; TVM 0.27 has none for ``clip``,
``nn.leakyrelu`` or ``nn.softplus``. The ONNX importer writes HardSwish and
HardSigmoid with ``clip``, LeakyReLU as ``nn.leakyrelu`` and Mish with
``nn.softplus``, so every such activation in a CNN left the blocked layout: a
``layout_transform`` of the whole feature map out and another one back, around a
kernel fusion could not join to its conv (squeeze-excite blocks and hard-swish
broke the chain that way). Written in the unary and binary element-wise ops that
do carry a layout, they fuse into the conv's epilogue like ReLU:

* ``clip(x, lo, hi)`` = ``minimum(maximum(x, lo), hi)``;
* ``leakyrelu(x, a)`` = ``maximum(x, a * x)`` for ``0 <= a <= 1``;
* ``softplus(x, beta, t)`` = ``max(x, 0) + log(1 + exp(-|beta x|)) / beta``: the
  stable form, no overflow for large ``x`` (past the threshold ``t`` ONNX's form
  returns ``x``; the two differ by less than ``exp(-t)``, under float32's rounding
  at the default ``t = 20``).

Binary element-wise ops between a feature map and a constant of lower rank (the
``(1,)``-shaped scale and offset of a Paddle export's hard-swish, a ``(C, 1, 1)``
scale) get the constant as a scalar (one element) or reshaped to rank 4: TVM's
broadcast layout rule gives up on mixed ranks and returns the feature map to NCHW.

The rewrite runs only on tensors of rank 4 (feature maps); the numbers are the
same up to rounding (tested against numpy).
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as R

from ...exprs import const_np, is_constant
from .call_rewrite import rewrite_table


def _feature_map(call) -> bool:
    ty = getattr(call.args[0], "ty", None)
    return (isinstance(ty, relax.TensorType) and ty.ndim == 4
            and str(ty.dtype) in ("float32", "float16"))


def _scalar(value: float, call) -> relax.Constant:
    return relax.const(value, str(call.args[0].ty.dtype))


def _attr_float(value) -> float:
    return float(value.value) if hasattr(value, "value") else float(value)


def _clip(bb: relax.BlockBuilder, call):
    if not _feature_map(call):
        return None
    lo, hi = call.args[1], call.args[2]
    try:
        lo, hi = _attr_float(lo), _attr_float(hi)
    except (TypeError, ValueError):  # symbolic bounds: keep the clip
        return None
    x = call.args[0]
    if math.isfinite(lo) and math.isfinite(hi):
        return R.minimum(bb.emit(R.maximum(x, _scalar(lo, call))), _scalar(hi, call))
    if math.isfinite(lo):
        return R.maximum(x, _scalar(lo, call))
    if math.isfinite(hi):
        return R.minimum(x, _scalar(hi, call))
    return None  # no bound: let TVM's own simplification keep it


def _leakyrelu(bb: relax.BlockBuilder, call):
    alpha = float(call.attrs.alpha)
    if not _feature_map(call) or not 0.0 <= alpha <= 1.0:
        return None
    x = call.args[0]
    return R.maximum(x, bb.emit(R.multiply(x, _scalar(alpha, call))))


def _softplus(bb: relax.BlockBuilder, call):
    if not _feature_map(call):
        return None
    beta = float(call.attrs.beta)
    if beta <= 0.0:
        return None
    x = call.args[0]
    bx = x if beta == 1.0 else bb.emit(R.multiply(x, _scalar(beta, call)))
    tail = bb.emit(R.log(R.add(R.exp(R.negative(R.abs(bx))), _scalar(1.0, call))))
    if beta != 1.0:
        tail = bb.emit(R.multiply(tail, _scalar(1.0 / beta, call)))
    return R.add(bb.emit(R.maximum(x, _scalar(0.0, call))), tail)


def _full_rank_constant(expr, rank: int):
    """``expr`` as a scalar or rank-``rank`` constant if it is a lower-rank one, else None."""
    if not is_constant(expr):
        return None
    value = const_np(expr)
    if value.ndim == 0 or value.ndim >= rank:
        return None
    if value.size == 1:
        return relax.const(value.reshape(()).copy(), str(value.dtype))
    return relax.const(np.ascontiguousarray(value.reshape((1,) * (rank - value.ndim)
                                                          + value.shape)))


def _binary(bb: relax.BlockBuilder, call):
    ranks = [getattr(getattr(a, "ty", None), "ndim", -1) for a in call.args]
    if 4 not in ranks:
        return None
    args = [(_full_rank_constant(a, 4) if r != 4 else None) or a
            for a, r in zip(call.args, ranks)]
    if all(new.same_as(old) for new, old in zip(args, call.args)):
        return None
    return relax.Call(call.op, args, call.attrs)


#: binary element-wise operators whose constant operand is brought to full rank
BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide",
          "relax.maximum", "relax.minimum", "relax.power")

#: operator -> its rewrite in layout-carrying ops (``None``: keep the call)
REWRITES = {
    "relax.clip": _clip,
    "relax.nn.leakyrelu": _leakyrelu,
    "relax.nn.softplus": _softplus,
    **dict.fromkeys(BINARY, _binary),
}


@tvm.transform.module_pass(opt_level=0, name="LayoutCarryingElementwise")
def layout_carrying_elementwise(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Rewrite the operators of :data:`REWRITES` on feature maps (module docstring)."""
    return rewrite_table(mod, REWRITES)

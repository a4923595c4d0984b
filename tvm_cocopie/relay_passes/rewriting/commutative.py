"""Commutative rules (DNNFusion §3.3, Table 3.4 "Commutative").

Swapping two operators so that the expensive one runs on fewer elements: a reduction
or a pooling before an element-wise map that commutes with it. Each swap is exact:

- ``Σ(A << s) = (ΣA) << s`` for integers (both are multiplication by 2^s modulo 2^n);
  a *right* shift rounds each term, so ``Σ(A >> s) != (ΣA) >> s`` (1>>1 + 1>>1 = 0,
  (1+1)>>1 = 1): that rule is excluded, see :data:`EXCLUDED`;
- ``Π exp(A) = exp(ΣA)``;
- a monotone non-decreasing map ``f`` commutes with max/min and max-pooling:
  ``max f(A) = f(max A)`` (relu, exp, sigmoid, tanh, +c, ⊙c for c >= 0);
- averaging commutes with an affine map per channel.

The pooling swaps are guarded (:func:`~.rule.not_in_epilogue`): an elementwise op on a
conv output already runs free in the conv's fused epilogue.
"""

from __future__ import annotations

import numpy as np

from .rule import Example, Rule, is_float, is_int, not_in_epilogue, scalar
from .terms import C, V, add, exp, mul, neg, op, relu, sigmoid, tanh

X, S = V("X"), C("S")


def scalar_nonneg(name: str):
    """Value-domain guard: a scalar constant >= 0 (max(X⊙c) = max(X)⊙c needs c >= 0)."""
    def pred(m) -> bool:
        arr = m.np(name)
        return arr.size == 1 and bool(np.all(arr >= 0))
    pred.__name__ = f"scalar_nonneg({name})"
    return pred


def per_channel(name: str, axis: int = 1):
    """The constant broadcasts along ``axis`` only (or is a scalar): pooling over the
    other axes leaves it unchanged."""
    def pred(m) -> bool:
        arr = m.np(name)
        out_ndim = m.root.ty.ndim
        if arr.ndim == 0 or arr.size == 1:
            return True
        if arr.ndim != out_ndim:
            return False
        return all(d == 1 for i, d in enumerate(arr.shape) if i != axis)
    pred.__name__ = f"per_channel({name})"
    return pred


_POOL = {"X": ("in", (1, 4, 8, 8)), "S": ("c", (1, 4, 1, 1))}
_NEG_POOL = {"X": ("in", (1, 4, 8, 8)), "S": ("c", (1, 4, 8, 8))}


def _monotone_reduce(red: str, fname: str, f) -> Rule:
    return Rule(f"comm/{red}-{fname.replace('nn.', '')}", "commutative",
                op(red, f(X), bind="r"), f(op(red, X, attrs_from="r")), (is_float(),),
                f"{red}({fname}(X)) = {fname}({red}(X)): {fname} is monotone non-decreasing",
                Example())


RULES = [
    Rule("comm/sum-leftshift", "commutative",
         op("sum", op("left_shift", X, S), bind="r"),
         op("left_shift", op("sum", X, attrs_from="r"), S),
         (is_int(), scalar("S")),
         "ReduceSum(BitShift_left(A)) = BitShift_left(ReduceSum(A)) (Table 3.4 row 9; exact "
         "modulo 2^n); right shifts are excluded", Example(leaves={"X": ("int", (4, 8), "int32"),
                                                                  "S": ("s_shift", (), "int32")})),
    Rule("comm/prod-exp", "commutative",
         op("prod", exp(X), bind="r"), exp(op("sum", X, attrs_from="r")), (is_float(),),
         "ReduceProd(Exp(A)) = Exp(ReduceSum(A)) (Table 3.4 row 10)",
         Example(flops=(64, 36))),
    Rule("comm/sum-neg", "commutative",
         op("sum", neg(X), bind="r"), neg(op("sum", X, attrs_from="r")), (is_float(),),
         "Σ(-X) = -ΣX", Example()),
    Rule("comm/mean-neg", "commutative",
         op("mean", neg(X), bind="r"), neg(op("mean", X, attrs_from="r")), (is_float(),),
         "mean(-X) = -mean(X)", Example()),
    _monotone_reduce("max", "nn.relu", relu),
    _monotone_reduce("max", "exp", exp),
    _monotone_reduce("max", "sigmoid", sigmoid),
    _monotone_reduce("max", "tanh", tanh),
    _monotone_reduce("min", "nn.relu", relu),
    _monotone_reduce("min", "exp", exp),
    Rule("comm/max-add-scalar", "commutative",
         op("max", add(X, S), bind="r"), add(op("max", X, attrs_from="r"), S),
         (is_float(), scalar("S")), "max(X + c) = max(X) + c", Example(leaves={"S": "s"})),
    Rule("comm/max-mul-nonneg-scalar", "commutative",
         op("max", mul(X, S), bind="r"), mul(op("max", X, attrs_from="r"), S),
         (is_float(), scalar_nonneg("S")),
         "max(X⊙c) = max(X)⊙c for c >= 0 (guard: for c < 0 it is min(X)⊙c)",
         Example(leaves={"S": "s_pos"}), Example(leaves={"S": "s_neg"})),
    Rule("comm/mean-add-scalar", "commutative",
         op("mean", add(X, S), bind="r"), add(op("mean", X, attrs_from="r"), S),
         (is_float(), scalar("S")), "mean(X + c) = mean(X) + c", Example(leaves={"S": "s"})),
    Rule("comm/maxpool-relu", "commutative",
         op("nn.max_pool2d", relu(X), bind="p"), relu(op("nn.max_pool2d", X, attrs_from="p")),
         (is_float(), not_in_epilogue("X")),
         "maxpool(relu(X)) = relu(maxpool(X)): relu is monotone (not out of a conv epilogue)",
         Example(leaves={"X": ("in", (1, 4, 8, 8))})),
    Rule("comm/maxpool-add-channel", "commutative",
         op("nn.max_pool2d", add(X, S), bind="p"),
         add(op("nn.max_pool2d", X, attrs_from="p"), S),
         (is_float(), per_channel("S"), not_in_epilogue("X")),
         "maxpool(X + c) = maxpool(X) + c for c constant over each pooling window",
         Example(leaves=_POOL), Example(leaves=_NEG_POOL)),
    Rule("comm/avgpool-mul-channel", "commutative",
         op("nn.avg_pool2d", mul(X, S), bind="p"),
         mul(op("nn.avg_pool2d", X, attrs_from="p"), S),
         (is_float(), per_channel("S"), not_in_epilogue("X")),
         "avgpool(X⊙c) = avgpool(X)⊙c for c constant over each pooling window",
         Example(leaves=_POOL), Example(leaves=_NEG_POOL)),
]

#: Rules that look like they hold and do not; kept as data so that a test shows the
#: engine never applies them.
EXCLUDED = {
    "comm/sum-rightshift": "Σ(A >> s) != (ΣA) >> s: each shift rounds (1>>1 + 1>>1 = 0 but "
                           "(1+1)>>1 = 1)",
    "assoc/log-exp": "log(exp(X)) = X fails for X > 88 in float32 (exp overflows to inf)",
    "ident/mul-zero": "X⊙0 = 0 fails for X = inf or NaN",
    "ident/sub-self": "X - X = 0 fails for X = inf or NaN",
}

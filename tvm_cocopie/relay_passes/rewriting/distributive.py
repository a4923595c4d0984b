"""Distributive rules (DNNFusion §3.3, Table 3.4 "Distributive").

Factoring a common operand out of a sum: ``A⊙C + A⊙B -> A⊙(B+C)`` (the thesis prints
``(A+B)⊙C``, a typo), and the same for the linear operators of a DNN: a matmul or a
convolution distributes over addition of its weights or of its inputs, and a
reduction over a scalar factor. Float distributivity changes rounding by a few ulps;
the numeric tests bound it.
"""

from __future__ import annotations

import tvm_ffi

from .rule import Example, Rule, is_float, scalar
from .terms import C, K, V, add, div, mul, neg, op, square, sub

A, B, X, Y = V("A"), V("B"), V("X"), V("Y")
W1, W2, S = C("W1"), C("W2"), C("S")


def same_attrs(a: str, b: str):
    """A guard: calls ``a`` and ``b`` of the match have equal attributes."""
    def pred(m) -> bool:
        return tvm_ffi.structural_equal(m.call(a).attrs, m.call(b).attrs)
    pred.__name__ = f"same_attrs({a},{b})"
    return pred


def same_type(a: str, b: str):
    """A guard: bindings ``a`` and ``b`` of the match have equal types."""
    def pred(m) -> bool:
        return tvm_ffi.structural_equal(m[a].ty, m[b].ty)
    pred.__name__ = f"same_type({a},{b})"
    return pred


_W = {"X": ("in", (2, 8, 16)), "X1": ("in", (2, 8, 16)), "X2": ("in", (2, 8, 16)),
      "W1": ("c", (16, 12)), "W2": ("c", (16, 12)), "W": ("c", (16, 12))}
_CONV = {"X": ("in", (1, 3, 8, 8)), "X1": ("in", (1, 3, 8, 8)), "X2": ("in", (1, 3, 8, 8)),
         "W1": ("c", (4, 3, 3, 3)), "W2": ("c", (4, 3, 3, 3)), "W": ("c", (4, 3, 3, 3))}

RULES = [
    Rule("dist/common-factor-add", "distributive",
         add(mul(A, V("C")), mul(A, B)), mul(A, add(B, V("C"))), (is_float(),),
         "A⊙C + A⊙B = A⊙(B+C) (Table 3.4 row 5, typo fixed)", Example(flops=(96, 64))),
    Rule("dist/common-factor-sub", "distributive",
         sub(mul(A, B), mul(A, V("C"))), mul(A, sub(B, V("C"))), (is_float(),),
         "A⊙B - A⊙C = A⊙(B-C)", Example()),
    Rule("dist/self-plus-product", "distributive",
         add(A, mul(A, C("B"))), mul(A, add(C("B"), K(1.0))), (is_float(),),
         "A + A⊙B = A⊙(B+1) (Table 3.4 row 6); profitable when B is a constant, so that "
         "B+1 folds", Example(leaves={"B": "c"})),
    Rule("dist/self-minus-product", "distributive",
         sub(A, mul(A, C("B"))), mul(A, sub(K(1.0), C("B"))), (is_float(),),
         "A - A⊙B = A⊙(1-B), B constant", Example(leaves={"B": "c"})),
    Rule("dist/square-minus-product", "distributive",
         sub(square(V("S")), mul(V("S"), V("C"))), mul(V("S"), sub(V("S"), V("C"))),
         (is_float(),),
         "Square(S) - S⊙C = S⊙(S-C); with S = A+B, Table 3.4 row 7",
         Example(flops=(4 * 32, 3 * 32), leaves={"A": "in", "B": "in", "C": "in"},
                 lhs=sub(square(add(A, B)), mul(add(A, B), V("C"))))),
    Rule("dist/common-divisor-add", "distributive",
         add(div(A, V("C")), div(B, V("C"))), div(add(A, B), V("C")), (is_float(),),
         "A/C + B/C = (A+B)/C", Example(leaves={"C": "in_pos"})),
    Rule("dist/common-divisor-sub", "distributive",
         sub(div(A, V("C")), div(B, V("C"))), div(sub(A, B), V("C")), (is_float(),),
         "A/C - B/C = (A-B)/C", Example(leaves={"C": "in_pos"})),
    Rule("dist/neg-sum", "distributive",
         add(neg(A), neg(B)), neg(add(A, B)), (is_float(),),
         "(-A) + (-B) = -(A+B)", Example()),
    Rule("dist/matmul-shared-input", "distributive",
         add(op("matmul", X, W1, bind="m1"), op("matmul", X, W2, bind="m2")),
         op("matmul", X, add(W1, W2), attrs_from="m1"),
         (is_float(), same_attrs("m1", "m2"), same_type("W1", "W2")),
         "X·W1 + X·W2 = X·(W1+W2), weights folded", Example(leaves=_W)),
    Rule("dist/matmul-shared-weight", "distributive",
         add(op("matmul", V("X1"), V("W"), bind="m1"), op("matmul", V("X2"), V("W"), bind="m2")),
         op("matmul", add(V("X1"), V("X2")), V("W"), attrs_from="m1"),
         (is_float(), same_attrs("m1", "m2"), same_type("X1", "X2")),
         "X1·W + X2·W = (X1+X2)·W", Example(leaves=_W)),
    Rule("dist/conv-shared-input", "distributive",
         add(op("nn.conv2d", X, W1, bind="c1"), op("nn.conv2d", X, W2, bind="c2")),
         op("nn.conv2d", X, add(W1, W2), attrs_from="c1"),
         (is_float(), same_attrs("c1", "c2"), same_type("W1", "W2")),
         "conv(X,W1) + conv(X,W2) = conv(X, W1+W2) (same strides, padding, groups)",
         Example(leaves=_CONV)),
    Rule("dist/conv-shared-weight", "distributive",
         add(op("nn.conv2d", V("X1"), V("W"), bind="c1"),
             op("nn.conv2d", V("X2"), V("W"), bind="c2")),
         op("nn.conv2d", add(V("X1"), V("X2")), V("W"), attrs_from="c1"),
         (is_float(), same_attrs("c1", "c2"), same_type("X1", "X2")),
         "conv(X1,W) + conv(X2,W) = conv(X1+X2, W)", Example(leaves=_CONV)),
    Rule("dist/sum-of-scaled", "distributive",
         op("sum", mul(X, S), bind="r"), mul(op("sum", X, attrs_from="r"), S),
         (is_float(), scalar("S")),
         "Σ(X⊙s) = (ΣX)⊙s for a scalar s", Example(leaves={"S": "s"})),
    Rule("dist/mean-of-scaled", "distributive",
         op("mean", mul(X, S), bind="r"), mul(op("mean", X, attrs_from="r"), S),
         (is_float(), scalar("S")),
         "mean(X⊙s) = mean(X)⊙s for a scalar s", Example(leaves={"S": "s"})),
    Rule("dist/sum-plus-sum", "distributive",
         add(op("sum", A, bind="r1"), op("sum", B, bind="r2")),
         op("sum", add(A, B), attrs_from="r1"),
         (is_float(), same_attrs("r1", "r2"), same_type("A", "B")),
         "ΣA + ΣB = Σ(A+B) (same axes, same shapes)", Example()),
    Rule("dist/mean-plus-mean", "distributive",
         add(op("mean", A, bind="r1"), op("mean", B, bind="r2")),
         op("mean", add(A, B), attrs_from="r1"),
         (is_float(), same_attrs("r1", "r2"), same_type("A", "B")),
         "mean(A) + mean(B) = mean(A+B)", Example()),
]

"""Associative rules (DNNFusion §3.3, Table 3.4 "Associative").

Regrouping a chain of operators so that fewer, or cheaper, operators remain. Each
rule is proven in its docstring-like ``doc``; the thesis' first printed example,
``Recip(A)⊙Recip(A⊙B) -> Square(Recip(A))⊙B``, is wrong (it drops ``Recip`` of B)
and its corrected form ``Square(Recip(A))⊙Recip(B)`` saves nothing; we use
``Recip(Square(A)⊙B)`` (4mn -> 3mn), which is what the thesis' FLOP count describes.

Floating-point reassociation changes rounding. Rules that fold two constants into
one are guarded: the folded constant must be finite, and for sums no cancellation
may happen (``|c1 + c2| >= |c1|/16`` wherever ``c1`` is not tiny), since
``(x + 1e8) - 1e8`` and ``x + 0`` differ by far more than a rounding error.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .rule import Example, Rule, is_float, nonneg
from .terms import C, K, V, abs_, add, div, exp, mul, op, recip, rsqrt, sqrt, square, sub


def finite_product(a: str, b: str, invert_b: bool = False):
    """Guard: the folded constant ``a*b`` (or ``a/b``) is finite and non-zero where
    both factors are (no overflow or underflow)."""
    def pred(m) -> bool:
        x, y = m.np(a).astype(np.float64), m.np(b).astype(np.float64)
        with np.errstate(all="ignore"):
            z = (x / y) if invert_b else (x * y)
            z32 = z.astype(m.dtype(a))
        finite = np.all(np.isfinite(z32))
        keeps = np.all((z32 != 0) | (x == 0) | (y == 0 if not invert_b else False))
        return bool(finite and keeps)
    pred.__name__ = f"finite_product({a},{b})"
    return pred


def no_cancellation(a: str, b: str, sign: float = 1.0, limit: float = 16.0):
    """Guard: folding ``a + sign*b`` loses no more than log2(limit) bits."""
    def pred(m) -> bool:
        x, y = m.np(a).astype(np.float64), sign * m.np(b).astype(np.float64)
        s = np.abs(x + y)
        big = np.maximum(np.abs(x), np.abs(y))
        return bool(np.all((big <= limit * s) | (big < 1e-30)))
    pred.__name__ = f"no_cancellation({a},{b})"
    return pred


A, B, X, Y = V("A"), V("B"), V("X"), V("Y")
C1, C2 = C("C1"), C("C2")
_EX = Example()
_POS = Example(leaves={"A": "in_pos", "B": "in_pos"})

RULES = [
    Rule("assoc/recip-recip-product", "associative",
         mul(recip(A), recip(mul(A, B))), recip(mul(square(A), B)), (is_float(),),
         "Recip(A)⊙Recip(A⊙B) = 1/(A·A·B) = Recip(Square(A)⊙B) (Table 3.4 row 1, corrected)",
         Example(leaves={"A": "in_pos", "B": "in_pos"}, flops=(128, 96))),
    Rule("assoc/sqrt-pair", "associative",
         mul(mul(A, sqrt(B)), mul(sqrt(B), V("C"))), mul(mul(A, B), V("C")),
         (is_float(), nonneg("B")),
         "(A⊙√B)⊙(√B⊙C) = A⊙B⊙C for B >= 0 (Table 3.4 row 2; guard: B >= 0)",
         Example(leaves={"B": "nonneg"}, flops=(5 * 32, 3 * 32)),
         Example(leaves={"B": "in"})),
    Rule("assoc/abs-pair", "associative",
         mul(mul(abs_(A), B), abs_(V("C"))), mul(abs_(mul(A, V("C"))), B), (is_float(),),
         "Abs(A)⊙B⊙Abs(C) = Abs(A⊙C)⊙B since |a|·|c| = |a·c| (Table 3.4 row 3)",
         Example(flops=(128, 96))),
    Rule("assoc/reducesum-pair", "associative",
         mul(mul(A, op("sum", B, bind="s")), mul(op("sum", B, bind="s"), V("C"))),
         mul(mul(A, square(op("sum", B, attrs_from="s"))), V("C")), (is_float(),),
         "(A⊙ΣB)⊙(ΣB⊙C) = A⊙Square(ΣB)⊙C (Table 3.4 row 4)",
         Example(leaves={"B": ("in", (4, 8))},
                 ops={"sum": lambda b: relax.op.sum(b, axis=[1], keepdims=True)})),
    Rule("assoc/mul-const-const", "associative",
         mul(mul(X, C1), C2), mul(X, mul(C1, C2)),
         (is_float(), finite_product("C1", "C2")),
         "(X⊙c1)⊙c2 = X⊙(c1·c2); guard: c1·c2 neither overflows nor underflows",
         Example(leaves={"C1": "c", "C2": "c"}),
         Example(leaves={"C1": ("s_huge", ()), "C2": ("s_huge", ())})),
    Rule("assoc/add-const-const", "associative",
         add(add(X, C1), C2), add(X, add(C1, C2)),
         (is_float(), no_cancellation("C1", "C2")),
         "(X+c1)+c2 = X+(c1+c2); guard: no cancellation between c1 and c2",
         Example(leaves={"C1": "c_pos", "C2": "c_pos"}),
         Example(leaves={"C1": ("s_huge", ()), "C2": ("s_neghuge", ())})),
    Rule("assoc/sub-add-const", "associative",
         add(sub(X, C1), C2), add(X, sub(C2, C1)),
         (is_float(), no_cancellation("C2", "C1", -1.0)),
         "(X-c1)+c2 = X+(c2-c1); guard: no cancellation",
         Example(leaves={"C1": "c_pos", "C2": "c_neg"}),
         Example(leaves={"C1": ("s_huge", ()), "C2": ("s_huge", ())})),
    Rule("assoc/add-sub-const", "associative",
         sub(add(X, C1), C2), add(X, sub(C1, C2)),
         (is_float(), no_cancellation("C1", "C2", -1.0)),
         "(X+c1)-c2 = X+(c1-c2); guard: no cancellation",
         Example(leaves={"C1": "c_pos", "C2": "c_neg"}),
         Example(leaves={"C1": ("s_huge", ()), "C2": ("s_huge", ())})),
    Rule("assoc/sub-sub-const", "associative",
         sub(sub(X, C1), C2), sub(X, add(C1, C2)),
         (is_float(), no_cancellation("C1", "C2")),
         "(X-c1)-c2 = X-(c1+c2); guard: no cancellation",
         Example(leaves={"C1": "c_pos", "C2": "c_pos"}),
         Example(leaves={"C1": ("s_huge", ()), "C2": ("s_neghuge", ())})),
    Rule("assoc/div-const-const", "associative",
         div(div(X, C1), C2), mul(X, div(K(1.0), mul(C1, C2))),
         (is_float(), finite_product("C1", "C2")),
         "(X/c1)/c2 = X⊙(1/(c1·c2)); guard: c1·c2 finite, non-zero",
         Example(leaves={"C1": "c_pos", "C2": "c_pos"}),
         Example(leaves={"C1": ("s_huge", ()), "C2": ("s_huge", ())})),
    Rule("assoc/mul-div-const", "associative",
         div(mul(X, C1), C2), mul(X, div(C1, C2)),
         (is_float(), finite_product("C1", "C2", invert_b=True)),
         "(X⊙c1)/c2 = X⊙(c1/c2); guard: c1/c2 finite, non-zero",
         Example(leaves={"C1": "c", "C2": "c_pos"}),
         Example(leaves={"C1": ("s_tiny", ()), "C2": ("s_huge", ())})),
    Rule("assoc/exp-product", "associative",
         mul(exp(A), exp(B)), exp(add(A, B)), (is_float(),),
         "exp(A)⊙exp(B) = exp(A+B)", _EX),
    Rule("assoc/exp-quotient", "associative",
         div(exp(A), exp(B)), exp(sub(A, B)), (is_float(),),
         "exp(A)/exp(B) = exp(A-B)", _EX),
    Rule("assoc/sqrt-product", "associative",
         mul(sqrt(A), sqrt(B)), sqrt(mul(A, B)), (is_float(), nonneg("A", "B")),
         "√A⊙√B = √(A⊙B) for A, B >= 0 (guard; √-1·√-1 is NaN, √1 is not)",
         Example(leaves={"A": "nonneg", "B": "nonneg"}), Example(leaves={"A": "in"})),
    Rule("assoc/sqrt-quotient", "associative",
         div(sqrt(A), sqrt(B)), sqrt(div(A, B)), (is_float(), nonneg("A", "B")),
         "√A/√B = √(A/B) for A, B >= 0",
         Example(leaves={"A": "nonneg", "B": "nonneg"}), Example(leaves={"B": "in"})),
    Rule("assoc/rsqrt-product", "associative",
         mul(rsqrt(A), rsqrt(B)), rsqrt(mul(A, B)), (is_float(), nonneg("A", "B")),
         "rsqrt(A)⊙rsqrt(B) = rsqrt(A⊙B) for A, B >= 0",
         Example(leaves={"A": "nonneg", "B": "nonneg"}), Example(leaves={"A": "in"})),
    Rule("assoc/recip-product", "associative",
         mul(recip(A), recip(B)), recip(mul(A, B)), (is_float(),),
         "Recip(A)⊙Recip(B) = Recip(A⊙B)", _POS),
    Rule("assoc/abs-product", "associative",
         mul(abs_(A), abs_(B)), abs_(mul(A, B)), (is_float(),),
         "|A|⊙|B| = |A⊙B|", _EX),
    Rule("assoc/square-product", "associative",
         mul(square(A), square(B)), square(mul(A, B)), (is_float(),),
         "A²⊙B² = (A⊙B)²", _EX),
    Rule("assoc/div-div", "associative",
         div(div(A, B), V("C")), div(A, mul(B, V("C"))), (is_float(),),
         "(A/B)/C = A/(B⊙C)", Example(leaves={"B": "in_pos", "C": "in_pos"})),
    Rule("assoc/mul-recip", "associative",
         mul(A, recip(B)), div(A, B), (is_float(),),
         "A⊙Recip(B) = A/B", _POS),
    Rule("assoc/neg-neg-product", "associative",
         mul(op("negative", A), op("negative", B)), mul(A, B), (is_float(),),
         "(-A)⊙(-B) = A⊙B", _EX),
    Rule("assoc/neg-mul-const", "associative",
         mul(op("negative", X), C1), mul(X, op("negative", C1)), (is_float(),),
         "(-X)⊙c = X⊙(-c)", _EX),
    Rule("assoc/square-mul-self", "associative",
         mul(A, A), square(A), (is_float(),),
         "A⊙A = Square(A) (one operand read once)", _EX),
]

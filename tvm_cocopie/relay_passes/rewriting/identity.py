"""Identities an inference-graph optimizer removes (complementing DNNFusion §3.3).

Multiplication by one, addition of zero, double negation, a cast to the same type,
inference-time dropout; division by a constant becomes multiplication by its
reciprocal. The engine rejects any replacement whose type (shape, dtype) differs from
the original, so ``X * ones(bigger shape)`` is never rewritten to ``X``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from tvm import relax

from .rule import Example, Rule, is_float, nonneg
from .terms import (
    C,
    K,
    V,
    abs_,
    add,
    div,
    exp,
    log,
    mul,
    neg,
    op,
    recip,
    relu,
    sqrt,
    square,
    sub,
    tgi,
)

X, Y = V("X"), V("Y")


def invertible(name: str):
    """Guard: 1/c is finite and normal, so x/c and x*(1/c) differ by one rounding."""
    def pred(m) -> bool:
        c = m.np(name).astype(np.float64)
        with np.errstate(all="ignore"):
            r = (1.0 / c).astype(m.dtype(name))
        tiny = ml_dtypes.finfo(m.dtype(name)).tiny  # numpy's finfo refuses bfloat16
        return bool(np.all(np.isfinite(r)) and np.all(np.abs(r) >= tiny))
    pred.__name__ = f"invertible({name})"
    return pred


RULES = [
    Rule("ident/mul-one", "identity", mul(X, K(1.0)), X, (),
         "X⊙1 = X", Example(leaves={"X": "in"}),
         Example(leaves={"X": ("in", (4, 1))}, lhs=mul(X, C("ONES")))),
    Rule("ident/div-one", "identity", div(X, K(1.0)), X, (), "X/1 = X"),
    Rule("ident/add-zero", "identity", add(X, K(0.0)), X, (), "X+0 = X"),
    Rule("ident/sub-zero", "identity", sub(X, K(0.0)), X, (), "X-0 = X"),
    Rule("ident/div-const-to-mul", "identity", div(X, C("C")), mul(X, div(K(1.0), C("C"))),
         (is_float(), invertible("C")),
         "X/c = X⊙(1/c): a multiply is cheaper than a divide; guard: 1/c finite and normal",
         Example(leaves={"C": "c_pos"}), Example(leaves={"C": ("s_tiny", ())})),
    Rule("ident/neg-neg", "identity", neg(neg(X)), X, (), "-(-X) = X"),
    Rule("ident/add-neg", "identity", add(X, neg(Y)), sub(X, Y), (), "X + (-Y) = X - Y"),
    Rule("ident/sub-neg", "identity", sub(X, neg(Y)), add(X, Y), (), "X - (-Y) = X + Y"),
    Rule("ident/recip-recip", "identity", recip(recip(X)), X, (is_float(),),
         "1/(1/X) = X", Example(leaves={"X": "in_pos"})),
    Rule("ident/sqrt-square", "identity", sqrt(square(X)), abs_(X), (is_float(),),
         "√(X²) = |X|"),
    Rule("ident/square-sqrt", "identity", square(sqrt(X)), X, (is_float(), nonneg("X")),
         "(√X)² = X for X >= 0 (guard)", Example(leaves={"X": "nonneg"}),
         Example(leaves={"X": "in"})),
    Rule("ident/exp-log", "identity", exp(log(X)), X, (is_float(), nonneg("X")),
         "exp(log X) = X for X >= 0 (guard; log of a negative is NaN)",
         Example(leaves={"X": "nonneg"}), Example(leaves={"X": "in"})),
    Rule("ident/abs-abs", "identity", abs_(abs_(X)), abs_(X), (), "||X|| = |X|"),
    Rule("ident/abs-of-nonneg", "identity", abs_(X), X, (nonneg("X"),),
         "|X| = X for X >= 0 (guard)", Example(leaves={"X": "nonneg"}),
         Example(leaves={"X": "in"})),
    Rule("ident/relu-relu", "identity", relu(relu(X)), relu(X), (), "relu(relu X) = relu X"),
    Rule("ident/relu-of-nonneg", "identity", relu(X), X, (nonneg("X"),),
         "relu(X) = X for X >= 0 (guard)", Example(leaves={"X": "nonneg"}),
         Example(leaves={"X": "in"})),
    Rule("ident/astype-same", "identity", op("astype", X), X, (),
         "a cast to the dtype X already has is X",
         Example(ops={"astype": lambda x: relax.op.astype(x, "float32")}),
         Example(ops={"astype": lambda x: relax.op.astype(x, "float16")})),
    Rule("ident/dropout", "identity", tgi(op("nn.dropout", X), 0), X, (),
         "Dropout is the identity at inference",
         Example(ops={"nn.dropout": lambda x: relax.op.nn.dropout(x, 0.5)})),
]

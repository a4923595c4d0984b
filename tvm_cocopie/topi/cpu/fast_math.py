"""Vectorizable exp / erf / tanh (and what uses them) for fp32.

LLVM turns ``exp``, ``erf`` and ``tanh`` of a vectorized loop into one libm call per
lane: a GELU epilogue then costs more than the matmul it follows (measured: 3.1 ms
instead of 1.2 ms for a 128x1536 BERT FFN). TVM's ``topi.fast_exp`` / ``fast_erf`` /
``fast_tanh`` are polynomial/range-reduction forms of plain arithmetic that
vectorize and stay within a few ulp of float32 (the kernel tests compare against
numpy in float64). This module legalizes the Relax operators that use them; other
dtypes keep TVM's legalization.
"""

from __future__ import annotations

import math

from tvm import relax, te, tirx, topi

_SQRT_HALF = math.sqrt(0.5)


def _is_f32(call) -> bool:
    return all(str(getattr(a.ty, "dtype", "")) == "float32" for a in call.args)


def _sigmoid(x: te.Tensor) -> te.Tensor:
    one = tirx.const(1.0, x.dtype)
    e = topi.fast_exp(topi.negative(x))
    return te.compute(x.shape, lambda *i: one / (one + e(*i)), name="fast_sigmoid")


def _gelu(x: te.Tensor) -> te.Tensor:
    half = tirx.const(0.5, x.dtype)
    scaled = te.compute(x.shape, lambda *i: x(*i) * tirx.const(_SQRT_HALF, x.dtype),
                        name="gelu_scale")
    erf = topi.fast_erf(scaled)
    return te.compute(x.shape, lambda *i: x(*i) * (half + erf(*i) * half), name="fast_gelu")


def _unary(te_func, name):
    def legalize(bb: relax.BlockBuilder, call, fallback):
        if not _is_f32(call):
            return fallback(bb, call)
        return bb.call_te(te_func, call.args[0], primfunc_name_hint=name)

    return legalize


def _softmax(bb: relax.BlockBuilder, call, fallback):
    if not _is_f32(call):
        return fallback(bb, call)
    return bb.call_te(topi.nn.fast_softmax, call.args[0], int(call.attrs.axis),
                      primfunc_name_hint="fast_softmax")


LEGALIZE = {
    "relax.exp": _unary(topi.fast_exp, "fast_exp"),
    "relax.erf": _unary(topi.fast_erf, "fast_erf"),
    "relax.tanh": _unary(topi.fast_tanh, "fast_tanh"),
    "relax.sigmoid": _unary(_sigmoid, "fast_sigmoid"),
    "relax.nn.gelu": _unary(_gelu, "fast_gelu"),
    "relax.nn.softmax": _softmax,
}

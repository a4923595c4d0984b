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

from ...exprs import static_shape

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


def row_softmax(x: te.Tensor, lanes: int) -> te.Tensor:
    """``fast_softmax`` over the last axis with each of its two reductions split in the
    whole vectors of the row and the tail after them, combined per row.

    The row-reduction schedule (:mod:`tvm_cocopie.schedules.cpu.row_reduction`) splits a
    reduction into vector lanes only over whole vectors (a split with a remainder puts a
    predicate on the partial results, which ``compute_at`` lost): ViT's 197-long rows
    kept one scalar chain each. Here the first ``n - n % lanes`` elements reduce in
    vector lanes and the few left over in a scalar loop (a masked or clamped read in
    the vector loop would gather, or read past the tensor).

    ``n`` and the leading dims may be symbolic (attention over a sequence known at run
    time): the body then runs over ``n // lanes * lanes``, provably whole vectors, where
    TOPI's softmax kept one scalar chain per row (the encoder's attention at 128 tokens:
    270 -> 172 us, its static kernel 140).
    """
    *lead, n = (int(d) if isinstance(d, tirx.IntImm) else d for d in x.shape)
    whole = n - n % lanes if isinstance(n, int) else tirx.floordiv(n, lanes) * lanes

    def reduce_row(tensor, combine, name):
        body = te.compute(lead, lambda *i: combine(
            tensor[(*i, k := te.reduce_axis((0, whole), "k"))], axis=k), name=name + "_body")
        # a reduce axis from 0 (one from ``whole`` came out of Relax as extent 5 - 192)
        tail = te.compute(lead, lambda *i: combine(
            tensor[(*i, (t := te.reduce_axis((0, n - whole), "t")) + whole)], axis=t),
            name=name + "_tail")
        return body, tail

    max_body, max_tail = reduce_row(x, te.max, "softmax_maxelem")
    delta = te.compute(x.shape, lambda *i: x(*i) - tirx.max(max_body(*i[:-1]),
                                                             max_tail(*i[:-1])),
                       name="softmax_delta")
    exp = topi.fast_exp(delta)
    sum_body, sum_tail = reduce_row(exp, te.sum, "softmax_expsum")
    return te.compute(x.shape, lambda *i: exp(*i) / (sum_body(*i[:-1]) + sum_tail(*i[:-1])),
                      name="softmax_norm")


def _symbolic_last(x, axis: int) -> bool:
    """Whether a softmax runs over the last axis of ``x`` and that axis is symbolic (the
    key axis of attention over a run-time sequence length)."""
    values = getattr(getattr(x.ty, "shape", None), "values", None)
    if values is None or axis not in (-1, len(values) - 1):
        return False
    return not isinstance(values[-1], tirx.IntImm)


def _softmax(lanes: int):
    def legalize(bb: relax.BlockBuilder, call, fallback):
        if not _is_f32(call):
            return fallback(bb, call)
        x = call.args[0]
        axis = int(call.attrs.axis)
        shape = static_shape(x)
        if shape and axis in (-1, len(shape) - 1) and shape[-1] % lanes and \
                shape[-1] >= 2 * lanes:
            return bb.call_te(lambda t: row_softmax(t, lanes), x,
                              primfunc_name_hint="fast_softmax")
        if shape is None and _symbolic_last(x, axis):
            return bb.call_te(lambda t: row_softmax(t, lanes), x,
                              primfunc_name_hint="fast_softmax")
        return bb.call_te(topi.nn.fast_softmax, x, axis, primfunc_name_hint="fast_softmax")

    return legalize


def legalize_table(lanes: int) -> dict:
    """Relax op name -> ``legalize(bb, call, fallback)`` of this module, for a CPU with
    ``lanes`` float32 lanes per vector."""
    return {
        "relax.exp": _unary(topi.fast_exp, "fast_exp"),
        "relax.erf": _unary(topi.fast_erf, "fast_erf"),
        "relax.tanh": _unary(topi.fast_tanh, "fast_tanh"),
        "relax.sigmoid": _unary(_sigmoid, "fast_sigmoid"),
        "relax.nn.gelu": _unary(_gelu, "fast_gelu"),
        "relax.nn.softmax": _softmax(lanes),
    }

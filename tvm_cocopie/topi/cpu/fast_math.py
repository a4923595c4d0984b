"""Vectorizable exp / erf / tanh (and what uses them) for fp32.

LLVM turns ``exp``, ``erf`` and ``tanh`` of a vectorized loop into one libm call per
lane: a GELU epilogue then costs more than the matmul it follows (measured: 3.1 ms
instead of 1.2 ms for a 128x1536 BERT FFN). TVM's ``topi.fast_exp`` / ``fast_erf`` /
``fast_tanh`` are polynomial/range-reduction forms of plain arithmetic that
vectorize and stay within a few ulp of float32 (the kernel tests compare against
numpy in float64). This module legalizes the Relax operators that use them, and the
row kernels (softmax, layer norm) with their reductions split into whole vectors and a
tail; other dtypes keep TVM's legalization.
"""

from __future__ import annotations

import math
import operator

from tvm import relax, te, tirx, topi

from ...exprs import batched_shape, static_shape

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


def _row_dims(x: te.Tensor, lanes: int):
    """``(lead dims, row length n, whole)``: ``whole`` the row's elements in whole vectors
    (symbolic ``n``: ``n // lanes * lanes``)."""
    *lead, n = (int(d) if isinstance(d, tirx.IntImm) else d for d in x.shape)
    whole = n - n % lanes if isinstance(n, int) else tirx.floordiv(n, lanes) * lanes
    return lead, n, whole


def combine_row(body, tail, index, pair=operator.add):
    """A row's reduction from :func:`reduce_row`'s two parts at ``index``: the body's alone
    when there is no tail, else ``pair(body, tail)``."""
    return body(*index) if tail is None else pair(body(*index), tail(*index))


def reduce_row(x: te.Tensor, combine, name: str, lanes: int, value=None):
    """A reduction of ``x`` along its last axis as two computes, the whole vectors of the
    row (``name_body``) and the elements after them (``name_tail``), for the row schedule
    to split the first into vector lanes; ``value(index)`` maps an element (default: the
    element itself). Combine the two per row. Without a tail (a static row of whole
    vectors) the second is ``None``: a reduction over nothing never runs its init, so its
    result would be whatever memory held."""
    lead, n, whole = _row_dims(x, lanes)
    value = value or (lambda idx: x[idx])
    body = te.compute(lead, lambda *i: combine(
        value((*i, k := te.reduce_axis((0, whole), "k"))), axis=k), name=name + "_body")
    if isinstance(n, int) and n == whole:
        return body, None
    # a reduce axis from 0 (one from ``whole`` came out of Relax as extent 5 - 192)
    tail = te.compute(lead, lambda *i: combine(
        value((*i, (t := te.reduce_axis((0, n - whole), "t")) + whole)), axis=t),
        name=name + "_tail")
    return body, tail


def row_layer_norm(x: te.Tensor, gamma: te.Tensor, beta: te.Tensor | None, eps: float,
                   lanes: int) -> te.Tensor:
    """Layer normalization over the last axis as one kernel: the mean, then the variance
    of the centred row (two passes, as the ONNX decomposition computes it, not TOPI's
    one-pass ``E[x^2] - E[x]^2``), each reduction in whole vectors and a tail
    (:func:`reduce_row`), then ``(x - mean) * rsqrt(var + eps) * gamma + beta``. Stock
    fusion made three kernels of the decomposed form (a reduction cannot follow a
    reduction in one of TVM's groups); the row schedule runs this one per row."""
    _, n, _ = _row_dims(x, lanes)
    inv_n = tirx.const(1.0, x.dtype) / tirx.Cast(x.dtype, n)
    sum_body, sum_tail = reduce_row(x, te.sum, "ln_sum", lanes)
    mean = te.compute(sum_body.shape, lambda *i: combine_row(sum_body, sum_tail, i) * inv_n,
                      name="ln_mean")

    def centred_square(idx):
        d = x[idx] - mean(*idx[:-1])
        return d * d

    sq_body, sq_tail = reduce_row(x, te.sum, "ln_sqsum", lanes, centred_square)
    eps_c = tirx.const(eps, x.dtype)
    inv_std = te.compute(sum_body.shape, lambda *i: tirx.rsqrt(
        combine_row(sq_body, sq_tail, i) * inv_n + eps_c), name="ln_inv_std")

    def out(*i):
        y = (x(*i) - mean(*i[:-1])) * inv_std(*i[:-1]) * gamma[i[-1]]
        return y if beta is None else y + beta[i[-1]]

    return te.compute(x.shape, out, name="ln_out")


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
    max_body, max_tail = reduce_row(x, te.max, "softmax_maxelem", lanes)
    delta = te.compute(x.shape, lambda *i: x(*i) - tirx.max(max_body(*i[:-1]),
                                                             max_tail(*i[:-1])),
                       name="softmax_delta")
    exp = topi.fast_exp(delta)
    sum_body, sum_tail = reduce_row(exp, te.sum, "softmax_expsum", lanes)
    return te.compute(x.shape, lambda *i: exp(*i) / (sum_body(*i[:-1]) + sum_tail(*i[:-1])),
                      name="softmax_norm")


def row_log_softmax(x: te.Tensor, lanes: int) -> te.Tensor:
    """``log_softmax`` over the last axis: ``x - max - log(sum(exp(x - max)))``, its two
    reductions split as :func:`row_softmax`'s and its exponentials TOPI's ``fast_exp``.
    TOPI's ``log_softmax`` takes ``exp``, which LLVM calls per lane (a CTC or language-model
    head, 64 x 32000: 9.4 ms against ONNX Runtime's 1.6)."""
    max_body, max_tail = reduce_row(x, te.max, "log_softmax_maxelem", lanes)
    delta = te.compute(x.shape, lambda *i: x(*i) - combine_row(max_body, max_tail, i[:-1],
                                                               tirx.max), name="log_softmax_delta")
    exp = topi.fast_exp(delta)
    sum_body, sum_tail = reduce_row(exp, te.sum, "log_softmax_expsum", lanes)
    log_sum = te.compute(sum_body.shape, lambda *i: tirx.log(
        combine_row(sum_body, sum_tail, i)), name="log_softmax_logsum")
    return te.compute(x.shape, lambda *i: delta(*i) - log_sum(*i[:-1]),
                      name="log_softmax_out")


def row_statistic(x: te.Tensor, kind: str, keepdims: bool, lanes: int) -> te.Tensor:
    """``sum``, ``mean``, ``max``, ``min`` or ``variance`` over the last axis of ``x``,
    its reductions split in the row's whole vectors and the tail after them (as
    :func:`row_softmax`'s), so the row schedule reduces in vector lanes also where the
    row is not whole vectors: TOPI's reduction kept one scalar chain per row there (a
    speech encoder's group norm over 3199 samples of 256 channels: 1.56 ms)."""
    combine = {"sum": te.sum, "mean": te.sum, "variance": te.sum, "max": te.max,
               "min": te.min}[kind]
    pair = {"max": tirx.max, "min": tirx.min}.get(kind, operator.add)
    n = int(x.shape[-1])
    inv_n = tirx.const(1.0 / n, x.dtype)

    body, tail = reduce_row(x, combine, f"row_{kind}", lanes)
    if kind == "variance":
        mean = te.compute(body.shape, lambda *i: combine_row(body, tail, i, pair) * inv_n,
                          name="row_variance_mean")

        def centred_square(idx):
            d = x[idx] - mean(*idx[:-1])
            return d * d

        body, tail = reduce_row(x, te.sum, "row_variance_sq", lanes, centred_square)
    scale = inv_n if kind in ("mean", "variance") else None

    def out(*i):
        lead = i[:-1] if keepdims else i
        v = combine_row(body, tail, lead, pair)
        return v * scale if scale is not None else v

    shape = [*x.shape[:-1], 1] if keepdims else list(x.shape[:-1])
    return te.compute(shape, out, name=f"row_{kind}_out")


def _statistic(kind: str, lanes: int):
    """Legalization of a reduction over the last axis whose static length is not whole
    vectors (at least two): :func:`row_statistic`; any other through TOPI."""
    def legalize(bb: relax.BlockBuilder, call, fallback):
        x = call.args[0]
        shape = _rows_shape(x)
        axes = call.attrs.axis
        if (not _is_f32(call) or shape is None or axes is None or len(axes) != 1
                or int(axes[0]) % len(shape) != len(shape) - 1):
            return fallback(bb, call)
        n = shape[-1]
        if n % lanes == 0 or n < 2 * lanes:
            return fallback(bb, call)
        keepdims = bool(call.attrs.keepdims)
        return bb.call_te(lambda t: row_statistic(t, kind, keepdims, lanes), x,
                          primfunc_name_hint=kind)

    return legalize


def _rows_shape(x) -> list | None:
    """The shape of ``x`` whose last dim is static and the others perhaps symbolic (rows
    of a run-time count), or ``None``."""
    ndim = getattr(getattr(x, "ty", None), "ndim", -1)
    return batched_shape(x, tuple(range(ndim - 1))) if ndim > 0 else None


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
        # the leading dims may be symbolic (a recognizer's classifier over W/8 rows of
        # 6625 classes ran TOPI's scalar row maximum: 755 us against 219 at W=320)
        shape = _rows_shape(x)
        row = shape[-1] if shape and axis in (-1, len(shape) - 1) else None
        if (row is not None and row % lanes and row >= 2 * lanes) or \
                _symbolic_last(x, axis):
            return bb.call_te(lambda t: row_softmax(t, lanes), x,
                              primfunc_name_hint="fast_softmax")
        return bb.call_te(topi.nn.fast_softmax, x, axis, primfunc_name_hint="fast_softmax")

    return legalize


def _log_softmax(lanes: int):
    def legalize(bb: relax.BlockBuilder, call, fallback):
        x = call.args[0]
        shape = _rows_shape(x)
        axis = int(call.attrs.axis)
        if not _is_f32(call) or shape is None or axis not in (-1, len(shape) - 1) \
                or shape[-1] < lanes:
            return fallback(bb, call)
        return bb.call_te(lambda t: row_log_softmax(t, lanes), x,
                          primfunc_name_hint="log_softmax")

    return legalize


def _layer_norm(lanes: int):
    def legalize(bb: relax.BlockBuilder, call, fallback):
        x, gamma, beta = call.args
        # rows may be symbolic (an encoder over a run-time sequence), the normalized axis not
        shape = _rows_shape(x)
        axes = [int(a) for a in call.attrs.axes]
        if (not _is_f32(call) or shape is None or len(shape) < 2
                or axes not in ([-1], [len(shape) - 1]) or shape[-1] < lanes
                or static_shape(gamma) != [shape[-1]] or static_shape(beta) != [shape[-1]]):
            return fallback(bb, call)
        eps = float(call.attrs.epsilon)
        return bb.call_te(lambda t, g, b: row_layer_norm(t, g, b, eps, lanes), x, gamma, beta,
                          primfunc_name_hint="layer_norm")

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
        "relax.nn.log_softmax": _log_softmax(lanes),
        "relax.nn.layer_norm": _layer_norm(lanes),
        **{f"relax.{kind}": _statistic(kind, lanes)
           for kind in ("sum", "mean", "max", "min", "variance")},
    }

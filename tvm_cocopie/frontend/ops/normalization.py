"""Normalizations: ``LayerNormalization`` (17), ``RMSNormalization`` (23),
``LpNormalization`` (1, 22) and ``BatchNormalization`` in training mode (14, 15).

Specs: https://onnx.ai/onnx/operators/onnx__LayerNormalization.html,
``onnx__RMSNormalization``, ``onnx__LpNormalization``, ``onnx__BatchNormalization``.

``LayerNormalization`` also returns its optional ``Mean`` and ``InvStdDev`` outputs,
and both layer and RMS normalization compute the statistics in ``stash_type``
precision (float32 by default) before casting back, as the spec describes.
``BatchNormalization`` with ``training_mode=1`` normalizes with the batch statistics
and returns the updated running mean and variance.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from ...exprs import batched_shape, static_shape
from .common import converter, dtype_of, rank_of, scalar
from .registry import register


def _stash_dtype(attr, dtype: str) -> str:
    stash = int(attr.get("stash_type", 1))
    return stock.get_type(stash) if stash else dtype


@register("LayerNormalization")
class LayerNormalization(stock.OnnxOpConverter):
    """``Y = (X - mean) * InvStdDev * Scale + B`` over the axes from ``axis`` on."""

    @classmethod
    def _impl_v17(cls, bb, inputs, attr, params):
        op = relax.op
        x, scale, bias = inputs[0], inputs[1], inputs[2]
        rank = rank_of(x)
        axis = int(attr.get("axis", -1))
        axes = list(range(axis % rank, rank))
        eps = float(attr.get("epsilon", 1e-5))
        dtype = dtype_of(x)
        stash = _stash_dtype(attr, dtype)
        xs = x if stash == dtype else bb.emit(op.astype(x, stash))
        mean = bb.emit(op.mean(xs, axes, keepdims=True))
        centered = bb.emit(op.subtract(xs, mean))
        var = bb.emit(op.mean(op.multiply(centered, centered), axes, keepdims=True))
        inv_std = bb.emit(op.rsqrt(op.add(var, scalar(eps, stash))))
        fused = _one_op(x, scale, bias, axes, eps, stash == dtype)
        if fused is not None:
            # Y as one op (one kernel); the statistics above stay for the optional
            # outputs and are dropped as dead code when nothing reads them
            return relax.Tuple([bb.emit(fused), mean, inv_std])
        y = bb.emit(op.multiply(centered, inv_std))
        if stash != dtype:
            y = bb.emit(op.astype(y, dtype))
        y = bb.emit(op.multiply(y, scale))
        if bias is not None:
            y = bb.emit(op.add(y, bias))
        return relax.Tuple([y, mean, inv_std])


def _one_op(x, scale, bias, axes, eps: float, same_dtype: bool):
    """``relax.nn.layer_norm`` for a normalization over the last axis with per-element
    scale and bias of that length, else ``None`` (the decomposed form). The leading dims
    may be symbolic (an encoder's run-time sequence: decomposed, its LN was 3 kernels)."""
    shape = batched_shape(x, tuple(range(rank_of(x) - 1)))
    if not same_dtype or shape is None or axes != [len(shape) - 1]:
        return None
    n = shape[-1]
    if static_shape(scale) != [n] or (bias is not None and static_shape(bias) != [n]):
        return None
    if bias is None:
        bias = relax.const(np.zeros(n, dtype_of(x)))
    return relax.op.nn.layer_norm(x, scale, bias, axes=[-1], epsilon=eps)


def _rms_normalization(bb, inputs, attr, params):
    """``Y = X / sqrt(mean(X^2) + epsilon) * scale`` over the axes from ``axis`` on."""
    op = relax.op
    x, scale = inputs[0], inputs[1]
    rank = rank_of(x)
    axes = list(range(int(attr.get("axis", -1)) % rank, rank))
    eps = float(attr.get("epsilon", 1e-5))
    dtype = dtype_of(x)
    stash = _stash_dtype(attr, dtype)
    xs = x if stash == dtype else bb.emit(op.astype(x, stash))
    mean_sq = bb.emit(op.mean(op.multiply(xs, xs), axes, keepdims=True))
    y = bb.emit(op.multiply(xs, op.rsqrt(op.add(mean_sq, scalar(eps, stash)))))
    if stash != dtype:
        y = bb.emit(op.astype(y, dtype))
    return op.multiply(y, scale)


def _lp_normalization(bb, inputs, attr, params):
    """``X / ||X||_p`` along ``axis`` (p = 1 or 2); a zero norm gives 0, not NaN."""
    op = relax.op
    x = inputs[0]
    dtype = dtype_of(x)
    axis = int(attr.get("axis", -1))
    p = int(attr.get("p", 2))
    if p == 1:
        norm = bb.emit(op.sum(op.abs(x), [axis], keepdims=True))
    else:
        norm = bb.emit(op.sqrt(op.sum(op.multiply(x, x), [axis], keepdims=True)))
    zero = bb.emit(op.equal(norm, scalar(0, dtype)))
    safe = bb.emit(op.where(zero, scalar(1, dtype), norm))
    return op.where(zero, scalar(0, dtype), op.divide(x, safe))


RMSNormalization = converter("RMSNormalization", 23, _rms_normalization)
LpNormalization = converter("LpNormalization", 1, _lp_normalization)


@register("BatchNormalization")
class BatchNormalization(stock.BatchNormalization):
    """Stock inference mode; ``training_mode=1`` uses and updates batch statistics."""

    @classmethod
    def _impl_v15(cls, bb, inputs, attr, params):
        if not int(attr.get("training_mode", 0)):
            return stock.BatchNormalization._impl_v15(bb, inputs, attr, params)
        op = relax.op
        x, scale, bias, mean, var = (inputs[i] for i in range(5))
        dtype = dtype_of(x)
        rank = rank_of(x)
        axes = [0] + list(range(2, rank))
        eps = float(attr.get("epsilon", 1e-5))
        momentum = float(attr.get("momentum", 0.9))
        batch_mean = bb.emit(op.mean(x, axes))
        batch_var = bb.emit(op.variance(x, axes))

        def per_channel(v):
            return bb.emit(op.reshape(v, [-1] + [1] * (rank - 2)))

        inv = op.rsqrt(op.add(per_channel(batch_var), scalar(eps, dtype)))
        y = op.add(op.multiply(op.multiply(op.subtract(x, per_channel(batch_mean)), inv),
                               per_channel(scale)), per_channel(bias))
        keep = scalar(momentum, dtype)
        take = scalar(1 - momentum, dtype)
        running_mean = op.add(op.multiply(mean, keep), op.multiply(batch_mean, take))
        running_var = op.add(op.multiply(var, keep), op.multiply(batch_var, take))
        return relax.Tuple([bb.emit(y), bb.emit(running_mean), bb.emit(running_var)])

    _impl_v14 = _impl_v15

"""Loss operators: ``NegativeLogLikelihoodLoss`` (opset 12/13/22) and
``SoftmaxCrossEntropyLoss`` (12/13).

Specs: https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html and
``onnx__SoftmaxCrossEntropyLoss``. Plain functions of their inputs (models export
them for evaluation), so they import like any other op: the class of each sample is
picked along axis 1 with ``gather_elements``; ``weight[target]`` scales it; samples
whose target is ``ignore_index`` weigh 0; ``mean`` divides by the total weight.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ...errors import ModelError
from .common import attr_str, dtype_of, is_empty, scalar
from .registry import register


def nll_loss(bb, log_prob, target, weight, attr):
    """The weighted, reduced negative log-likelihood of ``target`` under ``log_prob``."""
    op = relax.op
    dtype = dtype_of(log_prob)
    reduction = attr_str(attr, "reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ModelError(f"unknown loss reduction {reduction!r}")
    ignore = attr.get("ignore_index")
    tdtype = dtype_of(target)
    keep = None
    if ignore is not None:
        keep = bb.emit(op.not_equal(target, scalar(int(ignore), tdtype)))
        target = bb.emit(op.where(keep, target, scalar(0, tdtype)))
    picked = bb.emit(op.gather_elements(log_prob, op.expand_dims(target, 1), axis=1))
    loss = bb.emit(op.negative(op.squeeze(picked, [1])))
    w = None
    if weight is not None:
        w = bb.emit(op.take(weight, target, axis=0))
    if keep is not None:
        mask = bb.emit(op.astype(keep, dtype))
        w = mask if w is None else bb.emit(op.multiply(w, mask))
    if w is not None:
        loss = bb.emit(op.multiply(loss, w))
    if reduction == "none":
        return loss
    total = bb.emit(op.sum(loss))
    if reduction == "sum":
        return total
    if w is None:
        return op.mean(loss)
    return op.divide(total, op.sum(w))


@register("NegativeLogLikelihoodLoss")
class NegativeLogLikelihoodLoss(OnnxOpConverter):
    """``loss[n, d...] = -input[n, target[n, d...], d...] * weight[target]``."""

    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        weight = None if is_empty(inputs[2]) else inputs[2]
        return nll_loss(bb, inputs[0], inputs[1], weight, attr)


@register("SoftmaxCrossEntropyLoss")
class SoftmaxCrossEntropyLoss(OnnxOpConverter):
    """NLL of ``log_softmax(scores, axis=1)``; the second output is that log-probability."""

    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        weight = None if is_empty(inputs[2]) else inputs[2]
        log_prob = bb.emit(relax.op.nn.log_softmax(inputs[0], axis=1))
        loss = bb.emit(nll_loss(bb, log_prob, inputs[1], weight, attr))
        return relax.Tuple([loss, log_prob])

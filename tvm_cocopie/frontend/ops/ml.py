"""Numeric operators of the ``ai.onnx.ml`` domain: ``Binarizer``, ``ArrayFeatureExtractor``.

Specs: https://onnx.ai/onnx/operators/onnx_aionnxml_Binarizer.html and
``onnx_aionnxml_ArrayFeatureExtractor.html`` (ai.onnx.ml opset 1). The ml domain's
string-keyed operators (``LabelEncoder`` on strings, ``CategoryMapper``) need string
tensors, which TVM does not have; see :mod:`tvm_cocopie.bench.known_failures`.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from .common import dtype_of, rank_of, scalar
from .registry import register


@register("Binarizer")
class Binarizer(OnnxOpConverter):
    """``1`` where ``X > threshold``, else ``0``, in ``X``'s type."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x = inputs[0]
        dtype = dtype_of(x)
        above = relax.op.greater(x, scalar(float(attr.get("threshold", 0.0)), dtype))
        return relax.op.astype(above, dtype)


@register("ArrayFeatureExtractor")
class ArrayFeatureExtractor(OnnxOpConverter):
    """``X[..., Y]``: the columns of the last axis that the indices ``Y`` select.

    The output is ``X.shape[:-1] + [len(Y)]`` (``[1, len(Y)]`` for a 1-D ``X``), as
    ONNX's reference gives it.
    """

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        x, indices = inputs[0], inputs[1]
        flat = relax.op.reshape(indices, [-1])
        out = relax.op.take(x, relax.op.astype(flat, "int64"), axis=rank_of(x) - 1)
        if rank_of(x) == 1:
            out = relax.op.expand_dims(out, 0)
        return out

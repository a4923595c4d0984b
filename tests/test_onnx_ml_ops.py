"""TfIdfVectorizer modes and ai.onnx.ml ops beyond ONNX's own cases, against ONNX Runtime.

ONNX's backend suite has TfIdfVectorizer only in ``TF`` mode; ``IDF`` and ``TFIDF``
with weights, a 1-D input and unigrams-with-skips are checked here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ort_run
from onnx import TensorProto, helper

from tvm_cocopie.frontend.backend import TvmCocopieBackend

POOL = [2, 3, 5, 4,  # unigrams
        5, 6, 7, 8, 6, 7, 4, 4]  # bigrams (5,6) (7,8) (6,7) (4,4)


def tfidf_model(shape, mode, weights=None, lo=1, hi=2, skip=2):
    attrs = {"mode": mode, "min_gram_length": lo, "max_gram_length": hi,
             "max_skip_count": skip, "ngram_counts": [0, 4],
             "ngram_indexes": [7, 0, 1, 2, 3, 4, 5, 6], "pool_int64s": POOL}
    if weights is not None:
        attrs["weights"] = weights
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], **attrs)
    out_shape = [8] if len(shape) == 1 else [shape[0], 8]
    graph = helper.make_graph(
        [node], "tfidf", [helper.make_tensor_value_info("X", TensorProto.INT64, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=8)


@pytest.mark.parametrize("mode,weights,shape", [
    ("TF", None, [3, 12]),
    ("IDF", None, [3, 12]),
    ("IDF", [0.5, 1.5, 2.0, 3.0, 0.25, 4.0, 1.0, 2.5], [3, 12]),
    ("TFIDF", [0.5, 1.5, 2.0, 3.0, 0.25, 4.0, 1.0, 2.5], [12]),
])
def test_tfidf_matches_onnxruntime(mode, weights, shape):
    rng = np.random.default_rng(3)
    x = rng.integers(2, 9, shape).astype(np.int64)
    model = tfidf_model(shape, mode, weights)
    (ours,) = TvmCocopieBackend.prepare(model).run([x])
    (ref,) = ort_run(model, {"X": x})
    assert ref.any()
    np.testing.assert_allclose(ours, ref, rtol=1e-6)


def _ml_model(node, inputs, outputs):
    graph = helper.make_graph([node], "ml", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 3)],
                             ir_version=8)


def test_binarizer_and_feature_extractor_match_onnxruntime():
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    binarizer = _ml_model(
        helper.make_node("Binarizer", ["X"], ["Y"], domain="ai.onnx.ml", threshold=0.3),
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 6])])
    (ours,) = TvmCocopieBackend.prepare(binarizer).run([x])
    np.testing.assert_array_equal(ours, ort_run(binarizer, {"X": x})[0])

    idx = np.array([5, 0, 5], dtype=np.int64)
    extractor = _ml_model(
        helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain="ai.onnx.ml"),
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 6]),
         helper.make_tensor_value_info("I", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 3])])
    (ours,) = TvmCocopieBackend.prepare(extractor).run([x, idx])
    np.testing.assert_array_equal(ours, ort_run(extractor, {"X": x, "I": idx})[0])

"""MaxPool's ``Indices`` output and ConvTranspose's ``output_shape``, against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ort_run
from onnx import TensorProto, helper

from tvm_cocopie.frontend.backend import TvmCocopieBackend


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [1, 2], "storage_order": 1},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
])
def test_maxpool_indices_match_onnxruntime(attrs):
    x = np.random.default_rng(1).standard_normal((2, 3, 7, 8)).astype(np.float32)
    x[0, 0, :2, :2] = 1.5  # a tie: the first tap in window order wins
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"]),
         helper.make_tensor_value_info("i", TensorProto.INT64, ["n", "c", "h", "w"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)
    values, indices = TvmCocopieBackend.prepare(model).run([x])
    ref_values, ref_indices = ort_run(model, {"x": x})
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(indices, ref_indices)


@pytest.mark.parametrize("output_shape,auto_pad", [
    ([10, 8], "NOTSET"),  # larger than the kernel reaches: output padding at the end
    ([7, 6], "NOTSET"),  # smaller: padding, the odd unit at the start
    ([7, 6], "SAME_UPPER"),  # the odd unit at the end
])
def test_conv_transpose_output_shape_matches_onnxruntime(output_shape, auto_pad):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[3, 2],
                            output_shape=output_shape, auto_pad=auto_pad)
    graph = helper.make_graph(
        [node], "deconv",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
         for n, v in (("x", x), ("w", w), ("b", b))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, *output_shape])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (ours,) = TvmCocopieBackend.prepare(model).run([x, w, b])
    (ref,) = ort_run(model, {"x": x, "w": w, "b": b})
    assert ours.shape == ref.shape == (1, 3, *output_shape)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)

"""3-D convolutions run as 2-D ones over their output frames
(``relay_passes/layout/conv3d.py``): the blocked conv kernels take them, and every
variant matches ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, make_model, ort_run
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie

rng = np.random.default_rng(5)


def _conv3d_model(c=8, o=16, k=(3, 3, 3), s=(1, 1, 1), pads=(1, 1, 1, 1, 1, 1),
                  d=(1, 1, 1), g=1, shape=(7, 12, 11), weight_input=False, batch=1):
    """Conv3d (+ bias) -> Relu -> Conv3d (1,3,3) pad (0,1,1): two convs in a chain."""
    w = (rng.standard_normal((o, c // g, *k)) / np.sqrt(c * np.prod(k))).astype("f4")
    w2 = numpy_helper.from_array((rng.standard_normal((o, o, 1, 3, 3)) / o).astype("f4"), "w2")
    b = numpy_helper.from_array(rng.standard_normal((o,)).astype("f4"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(k),
                              strides=list(s), pads=list(pads), dilations=list(d), group=g),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[1, 3, 3],
                              pads=[0, 1, 1, 0, 1, 1])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, *shape])]
    inits = [b, w2]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    model = make_model(nodes, inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, ["N", "C", "D", "H", "W"])], inits)
    feeds = {"x": rng.standard_normal((batch, c, *shape)).astype("f4")}
    if weight_input:
        feeds["w"] = w
    return model, feeds


CASES = {
    "same padding": {},
    "strided in depth and space, asymmetric pads": {"s": (2, 2, 1),
                                                    "pads": (0, 1, 1, 1, 0, 1)},
    "a (1,7,7) stem of three channels": {"c": 3, "k": (1, 7, 7), "s": (1, 2, 2),
                                         "pads": (0, 3, 3, 0, 3, 3)},
    "temporal (3,1,1)": {"k": (3, 1, 1), "pads": (1, 0, 0, 1, 0, 0)},
    "grouped": {"g": 4},
    "depthwise": {"c": 16, "o": 16, "g": 16},
    "dilated in depth": {"d": (2, 1, 1), "pads": (2, 1, 1, 2, 1, 1)},
    "batch of two": {"batch": 2, "s": (2, 1, 1)},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv3d_matches_onnxruntime_on_the_blocked_kernels(case):
    model, feeds = _conv3d_model(**CASES[case])
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(**feeds), ort_run(model, feeds))
    stats = compiled.executable.stats()
    assert "conv2d_nchwc" in stats and "conv3d" not in stats  # not TVM's generic conv3d


def test_conv3d_with_a_weight_given_at_run_time():
    model, feeds = _conv3d_model(weight_input=True)
    assert_close(tvm_cocopie.compile(model)(**feeds), ort_run(model, feeds))

"""1-D convolutions run as 2-D ones of height 1 (``relay_passes/layout/conv1d.py``): the
blocked conv kernels take them, and every variant matches ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, make_model, ort_run
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie

rng = np.random.default_rng(3)


def _conv1d_model(c=16, o=32, k=5, s=2, pads=(2, 3), d=1, g=1, length=101,
                  weight_input=False):
    """Conv1d (+ bias) -> Relu -> Conv1d k=3 pad 1: two convs in a chain."""
    w = (rng.standard_normal((o, c // g, k)) / np.sqrt(c * k)).astype("f4")
    w2 = numpy_helper.from_array((rng.standard_normal((o, o, 3)) / o).astype("f4"), "w2")
    b = numpy_helper.from_array(rng.standard_normal((o,)).astype("f4"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k], strides=[s],
                              pads=list(pads), dilations=[d], group=g),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[3], pads=[1, 1])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, length])]
    inits = [b, w2]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    model = make_model(nodes, inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, ["N", "C", "L"])], inits)
    feeds = {"x": rng.standard_normal((1, c, length)).astype("f4")}
    if weight_input:
        feeds["w"] = w
    return model, feeds


CASES = {
    "strided, asymmetric pads": {},
    "grouped": {"g": 4},
    "dilated": {"d": 2, "s": 1, "pads": (4, 4)},
    "three channels in": {"c": 3, "o": 8},
    "depthwise": {"c": 16, "o": 16, "g": 16, "k": 3, "s": 1, "pads": (1, 1)},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv1d_matches_onnxruntime_on_the_blocked_kernels(case):
    model, feeds = _conv1d_model(**CASES[case])
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(**feeds), ort_run(model, feeds))
    assert "conv2d_nchwc" in compiled.executable.stats()  # not TVM's generic conv1d


def test_conv1d_with_a_weight_given_at_run_time():
    model, feeds = _conv1d_model(weight_input=True)
    assert_close(tvm_cocopie.compile(model)(**feeds), ort_run(model, feeds))

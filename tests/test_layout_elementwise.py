"""Activations TVM's layout inference cannot carry (HardSwish/HardSigmoid's ``clip``,
LeakyReLU, softplus, the ``where`` of Mish's exact log1p) keep a CNN in the blocked layout: a squeeze-excite block
and its neighbours get no ``layout_transform`` but at the graph's input and output,
and the numbers match ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_model
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie
from tvm_cocopie.bench.timing import ort_session
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.pipeline import run_until
from tvm_cocopie.relay_passes.layout import layout_transforms
from tvm_cocopie.target import host_target

C, H = 32, 12


def _se_block(activation: list) -> object:
    """conv3x3 -> activation -> squeeze-excite (GAP, 1x1 conv, ReLU, 1x1 conv,
    HardSigmoid, Mul) -> conv1x1 -> residual Add. ``activation``: nodes from "c1" to "h1"."""
    rng = np.random.default_rng(0)
    inits = []

    def w(name, shape, scale=0.2):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale)
                                             .astype(np.float32), name))
        return name

    nodes = [
        helper.make_node("Conv", ["x", w("w1", [C, C, 3, 3], 0.1), w("b1", [C])], ["c1"],
                         pads=[1, 1, 1, 1]),
        *activation,
        helper.make_node("GlobalAveragePool", ["h1"], ["g"]),
        helper.make_node("Conv", ["g", w("w2", [8, C, 1, 1]), w("b2", [8])], ["f1"]),
        helper.make_node("Relu", ["f1"], ["r"]),
        helper.make_node("Conv", ["r", w("w3", [C, 8, 1, 1]), w("b3", [C])], ["f2"]),
        helper.make_node("HardSigmoid", ["f2"], ["s"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["h1", "s"], ["m"]),
        helper.make_node("Conv", ["m", w("w4", [C, C, 1, 1]), w("b4", [C])], ["c2"]),
        helper.make_node("Add", ["c2", "x"], ["y"]),
    ]
    value = helper.make_tensor_value_info
    return make_model(nodes, [value("x", TensorProto.FLOAT, [1, C, H, H])],
                      [value("y", TensorProto.FLOAT, [1, C, H, H])], inits)


ACTIVATIONS = {
    "hardswish": [helper.make_node("HardSwish", ["c1"], ["h1"])],
    "leakyrelu": [helper.make_node("LeakyRelu", ["c1"], ["h1"], alpha=0.1)],
    "mish": [helper.make_node("Softplus", ["c1"], ["sp"]),
             helper.make_node("Tanh", ["sp"], ["t"]),
             helper.make_node("Mul", ["c1", "t"], ["h1"])],
    "clip_one_bound": [helper.make_node("Clip", ["c1", "lo"], ["h1"])],
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_and_squeeze_excite_stay_blocked(name):
    nodes = list(ACTIVATIONS[name])
    if name == "clip_one_bound":
        nodes.insert(0, helper.make_node("Constant", [], ["lo"], value=numpy_helper.from_array(
            np.array(-0.5, np.float32))))
    model = _se_block(nodes)
    target = host_target(2)
    mod = run_until(from_onnx(model), target, "layout")
    assert layout_transforms(mod) == 2, mod["main"]  # in at the input, out at the output
    x = np.random.default_rng(1).standard_normal((1, C, H, H)).astype(np.float32) * 3
    expected = ort_session(model, 1).run(None, {"x": x})[0]
    got = tvm_cocopie.compile(model, target)(x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_layout_transforms_counts_the_stock_clip_break():
    """Without the rewrite, the HardSwish clip leaves the blocked layout: the count sees it."""
    from tvm_cocopie.relay_passes.layout import elementwise

    model = _se_block(list(ACTIVATIONS["hardswish"]))
    saved = dict(elementwise.REWRITES)
    elementwise.REWRITES.clear()
    try:
        mod = run_until(from_onnx(model), host_target(2), "layout")
    finally:
        elementwise.REWRITES.update(saved)
    assert layout_transforms(mod) > 2


def test_softplus_rewrite_is_stable_for_large_inputs():
    value = helper.make_tensor_value_info
    x = np.array([-100, -30, -5, -1e-3, 0, 1e-3, 5, 19, 21, 30, 100] * 4,
                 np.float32).reshape(1, 4, 1, 11)
    model = make_model([helper.make_node("Softplus", ["x"], ["y"])],
                       [value("x", TensorProto.FLOAT, list(x.shape))],
                       [value("y", TensorProto.FLOAT, list(x.shape))])
    got = tvm_cocopie.compile(model, host_target(2))(x)
    ref = np.logaddexp(0, x.astype(np.float64))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)

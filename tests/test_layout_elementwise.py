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


def test_clip_with_symbolic_height_and_width_stays_blocked():
    """With symbolic dims TVM's importer lowers a two-bound ``Clip`` after a stride-2
    conv to ``call_tir``s that also take the dims (``H``, ``W``: the tensor's shape is
    an expression of them); they are lifted back all the same (PP-OCR det with symbolic
    H and W had two ``layout_transform`` kernels around every hard-swish)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(v, k) for k, v in (
        ("w1", (rng.standard_normal((C, C, 3, 3)) * 0.1).astype(np.float32)),
        ("w2", (rng.standard_normal((C, C, 1, 1)) * 0.2).astype(np.float32)),
        ("three", np.array(3.0, np.float32)), ("lo", np.array(0.0, np.float32)),
        ("hi", np.array(6.0, np.float32)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Add", ["c1", "three"], ["a"]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["r6"]),
             helper.make_node("Mul", ["c1", "r6"], ["h1"]),
             helper.make_node("Conv", ["h1", "w2"], ["y"])]
    value = helper.make_tensor_value_info
    model = make_model(nodes, [value("x", TensorProto.FLOAT, [1, C, "H", "W"])],
                       [value("y", TensorProto.FLOAT, [1, C, "OH", "OW"])], inits)
    target = host_target(2)
    mod = run_until(from_onnx(model), target, "layout")
    assert layout_transforms(mod) == 2, mod["main"]
    compiled = tvm_cocopie.compile(model, target, specialize=False)
    for h, w in [(12, 12), (7, 20)]:
        x = np.random.default_rng(h).standard_normal((1, C, h, w)).astype(np.float32) * 3
        expected = ort_session(model, 1).run(None, {"x": x})[0]
        np.testing.assert_allclose(compiled(x), expected, rtol=1e-4,
                                   atol=1e-4 * np.abs(expected).max())


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

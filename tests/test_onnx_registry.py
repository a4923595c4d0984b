"""The extended converter map: what it adds, and unsupported-operator reporting with it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import make_model
from onnx import TensorProto, helper

from tvm_cocopie.errors import ModelError, UnsupportedOperatorError
from tvm_cocopie.frontend.importer import from_onnx, unsupported_operators
from tvm_cocopie.frontend.ops import converter_map, our_converters
from tvm_cocopie.frontend.ops.registry import stock_converters


def test_ours_extend_the_stock_map():
    ours, stock, merged = our_converters(), stock_converters(), converter_map()
    assert {"LSTM", "GRU", "RNN"} <= set(ours)
    assert set(merged) == set(stock) | set(ours)
    assert all(merged[op] is cls for op, cls in ours.items())


def test_lstm_the_stock_importer_lacks_now_imports():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])
    w = onnx.numpy_helper.from_array(np.zeros((1, 32, 3), np.float32), "W")
    r = onnx.numpy_helper.from_array(np.zeros((1, 32, 8), np.float32), "R")
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y_full"], hidden_size=8, name="lstm")
    squeeze = helper.make_node("Squeeze", ["y_full", "axes"], ["y"], name="sq")
    axes = onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")
    model = make_model([node, squeeze], [x], [y], [w, r, axes])
    assert "LSTM" not in stock_converters()
    assert unsupported_operators(model) == {}
    mod = from_onnx(model)
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]


def test_unsupported_are_reported_once_whole_with_opsets_and_nodes():
    """Every op no converter handles, in the main graph and in subgraphs, at once."""
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [4])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    then = helper.make_graph(
        [helper.make_node("StringNormalizer", ["x"], ["t"], name="inner_norm")], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [4])])
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"], name="inner_id")], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.STRING, [4])])
    nodes = [
        helper.make_node("StringNormalizer", ["x"], ["a"], name="norm0"),
        helper.make_node("If", ["c"], ["b"], then_branch=then, else_branch=other, name="if0"),
        helper.make_node("Foo", ["b"], ["y"], name="foo0", domain="com.example"),
    ]
    graph = helper.make_graph(nodes, "g", [x, c], [y])
    model = helper.make_model(
        graph, ir_version=10,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.example", 2)])
    missing = unsupported_operators(model)
    assert missing == {("StringNormalizer", "ai.onnx", 21): ["norm0", "inner_norm"],
                       ("Foo", "com.example", 2): ["foo0"]}
    with pytest.raises(UnsupportedOperatorError) as info:
        from_onnx(model)
    text = str(info.value)
    assert "StringNormalizer (domain ai.onnx, opset 21): 2 node(s)" in text
    assert "Foo (domain com.example, opset 2)" in text
    assert info.value.ops == missing


def test_conversion_errors_name_the_op_and_node():
    """A converter that fails says which node; an RNN with ``clip`` (which the loop
    kernel lacks) needs a static sequence length to be unrolled."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 1, 2, 4])
    w = onnx.numpy_helper.from_array(np.zeros((1, 4, 3), np.float32), "W")
    r = onnx.numpy_helper.from_array(np.zeros((1, 4, 4), np.float32), "R")
    node = helper.make_node("RNN", ["x", "W", "R"], ["y"], hidden_size=4, clip=1.0,
                            name="my_rnn")
    model = make_model([node], [x], [y], [w, r])
    with pytest.raises(ModelError, match="RNN node 'my_rnn'.*needs a static length"):
        from_onnx(model)
    from_onnx(model, shapes={"x": [5, 2, 3]})  # fixing the length makes it import

"""Shape arithmetic folding: what PP-OCR-style exports need to import into TVM."""

import numpy as np
import onnx
from conftest import assert_close, make_model, ort_run
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie
from tvm_cocopie.frontend.folding import fold_constants


def shape_arith_model():
    """x[N,C,H,W] -> Reshape(x, concat(shape(x)[0:1], [-1])) -> Relu  (flatten, exporter style)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "starts", "ends"], ["n"], name="slice"),
        helper.make_node("Concat", ["n", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([1], np.int64), "ends"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "H", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "F"])],
        inits,
    )


def test_shape_chain_folds_to_a_constant_shape():
    folded, count = fold_constants(shape_arith_model(), {"x": [2, 4, 3, 5]})
    ops = [n.op_type for n in folded.graph.node]
    assert ops == ["Reshape", "Relu"] and count == 3
    newshape = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}["newshape"]
    np.testing.assert_array_equal(newshape, [2, -1])


def test_dynamic_shapes_are_left_alone():
    _, count = fold_constants(shape_arith_model())
    assert count == 0


def test_folded_model_compiles_and_matches():
    model = shape_arith_model()
    x = np.random.default_rng(0).standard_normal((2, 4, 3, 5)).astype(np.float32)
    compiled = tvm_cocopie.compile(model, shapes={"x": list(x.shape)})
    assert_close(compiled(x), ort_run(model, {"x": x}))


def test_random_ops_are_never_folded():
    nodes = [
        helper.make_node("RandomUniform", [], ["r"], shape=[2, 2], seed=1.0, name="rand"),
        helper.make_node("Add", ["x", "r"], ["y"], name="add"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    folded, count = fold_constants(model)
    assert count == 0 and [n.op_type for n in folded.graph.node] == ["RandomUniform", "Add"]


def test_constant_nodes_become_initializers_and_the_model_stays_valid():
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
            np.arange(4, dtype=np.float32).reshape(2, 2), "c"), name="const"),
        helper.make_node("Mul", ["c", "c"], ["c2"], name="square"),
        helper.make_node("Add", ["x", "c2"], ["y"], name="add"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    folded, count = fold_constants(model)
    onnx.checker.check_model(folded)
    assert count == 2 and [n.op_type for n in folded.graph.node] == ["Add"]
    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(ort_run(folded, {"x": x})[0], ort_run(model, {"x": x})[0])

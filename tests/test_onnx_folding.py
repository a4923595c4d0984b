"""Shape arithmetic folding: what PP-OCR-style exports need to import into TVM."""

import numpy as np
import onnx
import pytest
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


def test_dynamic_shapes_keep_their_symbolic_dims():
    """With N and H symbolic nothing folds to numbers, but the reshape's computed target
    becomes the constant [0, -1] (SOD²'s constant propagation: copy N, infer the rest)."""
    folded, count = fold_constants(shape_arith_model())
    assert count == 1
    reshape = next(n for n in folded.graph.node if n.op_type == "Reshape")
    target = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}[reshape.input[1]]
    np.testing.assert_array_equal(target, [0, -1])
    assert [n.op_type for n in folded.graph.node] == ["Reshape", "Relu"]


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


# --- an If on a run-time input whose branches compute their Pad's pads from constants
# (Silero VAD's pattern: the STFT's reflect padding inside an If on the sample rate)


def _torch_pads(tag: str, left: int, right: int) -> list[onnx.NodeProto]:
    """``{tag}_pads`` = ONNX pads [0, left, 0, right] the way torch.onnx writes
    ``F.pad(x, (left, right))``: ConstantOfShape, Concat, Reshape, Slice, Transpose."""
    def const(name, values):
        return helper.make_node("Constant", [], [f"{tag}_{name}"], value=numpy_helper.from_array(
            np.array(values, np.int64), f"{tag}_{name}"))

    return [
        const("lr", [left, right]), const("two", [2]), const("rows", [-1, 2]),
        const("start", [-1]), const("end", [-(2**63) + 1]), const("axis", [0]),
        const("step", [-1]), const("flat", [-1]),
        helper.make_node("ConstantOfShape", [f"{tag}_two"], [f"{tag}_zeros"],
                         value=numpy_helper.from_array(np.zeros(1, np.int64))),
        helper.make_node("Concat", [f"{tag}_lr", f"{tag}_zeros"], [f"{tag}_cat"], axis=0),
        helper.make_node("Reshape", [f"{tag}_cat", f"{tag}_rows"], [f"{tag}_2d"]),
        helper.make_node("Slice", [f"{tag}_2d", f"{tag}_start", f"{tag}_end", f"{tag}_axis",
                                   f"{tag}_step"], [f"{tag}_rev"]),
        helper.make_node("Transpose", [f"{tag}_rev"], [f"{tag}_t"], perm=[1, 0]),
        helper.make_node("Reshape", [f"{tag}_t", f"{tag}_flat"], [f"{tag}_1d"]),
        helper.make_node("Cast", [f"{tag}_1d"], [f"{tag}_pads"], to=TensorProto.INT64),
    ]


def runtime_if_pad_model(else_pads=(2, 2)) -> onnx.ModelProto:
    """``y = If(sr == 16000, reflect-pad x by (0, 4), reflect-pad x by else_pads) @ w``:
    x [1, T] float, sr a 0-d int64 input, w [20, 3]; each branch computes its pads."""
    def branch(tag, left, right):
        nodes = _torch_pads(tag, left, right) + [
            helper.make_node("Pad", ["x", f"{tag}_pads"], [f"{tag}_p"], mode="reflect"),
            helper.make_node("MatMul", [f"{tag}_p", "w"], [f"{tag}_y"])]
        return helper.make_graph(
            nodes, tag, [], [helper.make_tensor_value_info(f"{tag}_y", TensorProto.FLOAT, [1, 3])])

    w = np.random.default_rng(1).standard_normal((20, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["wide"]),
        helper.make_node("If", ["wide"], ["y"], name="rate_if", then_branch=branch("wb", 0, 4),
                         else_branch=branch("nb", *else_pads)),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T"]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(np.array(16000, np.int64), "rate"),
         numpy_helper.from_array(w, "w")],
    )


def _feeds(rate, length=16):
    x = np.random.default_rng(2).standard_normal((1, length)).astype(np.float32)
    return {"x": x, "sr": np.array(rate, np.int64)}


def test_pads_computed_inside_a_runtime_if_fold_in_each_branch():
    """The If stays (sr is an input) and each branch's Pad gets constant pads; TVM's
    Pad converter refuses the computed ones ('Dynamic pads are not supported yet')."""
    model = runtime_if_pad_model()
    compiled = tvm_cocopie.compile(model, shapes={"x": [1, 16], "sr": []})
    for rate in (16000, 8000):
        feeds = _feeds(rate)
        assert_close(compiled(**feeds), ort_run(model, feeds))
    reference = [ort_run(model, _feeds(rate))[0] for rate in (16000, 8000)]
    assert not np.allclose(*reference)  # the two branches differ


def test_a_branch_that_cannot_run_at_the_shapes_becomes_a_runtime_check():
    """Padded by (0, 2), the else branch's MatMul needs T = 18: at T = 16 only the then
    branch can run (ONNX Runtime fails on the else branch too), so the model computes
    that branch and raises if sr selects the other; at T = 18 it is the other way."""
    model = runtime_if_pad_model(else_pads=(0, 2))
    compiled = tvm_cocopie.compile(model, shapes={"x": [1, 16], "sr": []})
    assert_close(compiled(**_feeds(16000)), ort_run(model, _feeds(16000)))
    with pytest.raises(Exception):  # noqa: B017 - ONNX Runtime's own error type
        ort_run(model, _feeds(8000))
    with pytest.raises(ValueError, match="'rate_if' selected its else_branch, which cannot run"):
        compiled(**_feeds(8000))
    compiled = tvm_cocopie.compile(model, shapes={"x": [1, 18], "sr": []})
    assert_close(compiled(**_feeds(8000, 18)), ort_run(model, _feeds(8000, 18)))
    with pytest.raises(ValueError, match="selected its then_branch"):
        compiled(**_feeds(16000, 18))

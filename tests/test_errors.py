"""Bad input gets a tvm_cocopie error that names the problem and the fix."""

import numpy as np
import pytest
from conftest import conv_relu_model, make_model
from onnx import TensorProto, helper

import tvm_cocopie
from tvm_cocopie.errors import (
    CocopieError,
    InputShapeError,
    ModelError,
    TargetError,
    UnsupportedOperatorError,
)
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.target import parse_target


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="no ONNX file"):
        tvm_cocopie.compile(tmp_path / "nope.onnx")


def test_garbage_file(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf at all" * 10)
    with pytest.raises(ModelError, match="not a valid ONNX file|no graph nodes"):
        tvm_cocopie.compile(path)


def test_truncated_file(tmp_path):
    data = conv_relu_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError):
        tvm_cocopie.compile(path)


def test_wrong_type():
    with pytest.raises(ModelError, match="expected an ONNX path"):
        tvm_cocopie.compile(12345)


def test_malformed_graph_is_reported_with_the_checker_reason():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("Add", ["x", "undefined_tensor"], ["y"], name="add")
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(ModelError, match="malformed.*undefined_tensor"):
        from_onnx(model)


def test_all_unsupported_operators_are_listed_at_once():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("FancyOp", ["a"], ["b"], name="fancy1", domain="com.example"),
        helper.make_node("FancyOp", ["b"], ["c"], name="fancy2", domain="com.example"),
        helper.make_node("OtherOp", ["c"], ["y"], name="other", domain="com.example"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 3)],
        ir_version=10,
    )
    with pytest.raises(UnsupportedOperatorError) as info:
        from_onnx(model)
    err = info.value
    assert set(err.ops) == {("FancyOp", "com.example", 3), ("OtherOp", "com.example", 3)}
    assert err.ops[("FancyOp", "com.example", 3)] == ["fancy1", "fancy2"]
    assert "OtherOp" in str(err) and "FancyOp" in str(err) and "opset 3" in str(err)


def test_input_shape_that_does_not_fit():
    model = conv_relu_model(batch=1)
    with pytest.raises(InputShapeError, match="dim 1 is fixed at 3"):
        from_onnx(model, shapes={"x": [1, 4, 16, 16]})
    with pytest.raises(InputShapeError, match="no input named 'image'"):
        from_onnx(model, shapes={"image": [1, 3, 16, 16]})
    with pytest.raises(InputShapeError, match="rank"):
        from_onnx(model, shapes={"x": [1, 3, 16]})


def test_call_with_wrong_inputs():
    compiled = tvm_cocopie.compile(conv_relu_model(batch=1))
    x = np.zeros((1, 3, 16, 16), np.float32)
    with pytest.raises(InputShapeError, match="dtype float64"):
        compiled(x.astype(np.float64))
    with pytest.raises(InputShapeError, match="compiled for"):
        compiled(np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(InputShapeError, match="takes 1 input"):
        compiled(x, x)
    with pytest.raises(InputShapeError, match="unknown input"):
        compiled(image=x)


@pytest.mark.parametrize(
    "target, message",
    [
        ("llvm -mcpu=znver3", "no longer accepted"),
        ('{"kind": "llvm", "mcpu": ', "not valid JSON"),
        ({"kind": "nosuchkind"}, "TVM refused the target"),
        ({"kind": "llvm", "mcpu": "pentium9000"}, "LLVM does not know the CPU"),
        ({"kind": "cuda"}, "For GPUs use TVM's own pipeline"),
        ({"mcpu": "znver3"}, "has no 'kind'"),
        ("[1, 2]", "must be an object"),
        (3.5, "must be None, a dict"),
    ],
)
def test_bad_targets(target, message):
    with pytest.raises(TargetError, match=message):
        parse_target(target)


def test_errors_share_one_base():
    for cls in (ModelError, InputShapeError, TargetError, UnsupportedOperatorError):
        assert issubclass(cls, CocopieError)


def test_ops_no_importer_converts_are_caught_before_import():
    """An ai.onnx op that neither TVM 0.27's frontend nor tvm_cocopie.frontend.ops converts
    (string tensors have no TVM dtype). LSTM, the op used here before, now imports."""
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [4])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [4])
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER",
                            name="norm")
    model = make_model([node], [x], [y])
    with pytest.raises(UnsupportedOperatorError, match="StringNormalizer.*norm"):
        from_onnx(model)

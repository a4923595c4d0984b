"""Large constants on the compile path: read in place, transposed tile by tile, left out
of shape inference, with the same results as the plain way."""

import numpy as np
import onnx
import pytest
import tvm
from conftest import make_model
from onnx import TensorProto, helper, numpy_helper, shape_inference
from tvm import relax

from tvm_cocopie.exprs import const_np
from tvm_cocopie.frontend.folding import SHAPE_INFERENCE_MAX_ELEMENTS, _light_copy, _static_shapes
from tvm_cocopie.relay_passes.rewriting.consts import evaluate, fold


@pytest.mark.parametrize("shape", [(1030, 1100), (300, 4000)])
def test_large_transpose_folds_to_numpys_transpose(shape):
    """Sizes that are not multiples of the tile, above the tiling threshold."""
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    weight = relax.const(w)
    call = relax.op.permute_dims(weight, [1, 0])
    value = evaluate(call)
    assert value.flags.c_contiguous
    np.testing.assert_array_equal(value, w.T)
    folded = fold(call)
    np.testing.assert_array_equal(folded.value.numpy(), w.T)
    np.testing.assert_array_equal(weight.value.numpy(), w)  # the weight is untouched


def test_constants_are_read_in_place_and_read_only():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    const = relax.const(w)
    view = const_np(const)
    np.testing.assert_array_equal(view, w)
    with pytest.raises(ValueError):
        view[0, 0] = 1.0
    assert const_np(relax.const(np.array([True, False]))).tolist() == [True, False]
    half = relax.const(tvm.runtime.tensor(w.astype(np.float16)))
    np.testing.assert_array_equal(const_np(half), w.astype(np.float16))


def conv_reshape_model(ir_version=None):
    """x -> Conv(W large) -> Reshape(shape(conv)[0:1] ++ [-1]); W is a large initializer."""
    w = np.ones((64, 3, 3, 3), np.float32)  # 1728 elements: above the light-copy threshold
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["c"], ["s"]),
        helper.make_node("Slice", ["s", "starts", "ends"], ["n"]),
        helper.make_node("Concat", ["n", "minus1"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["c", "newshape"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(w, "W"),
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([1], np.int64), "ends"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])]
    if ir_version is not None:  # IR < 4: every initializer is also a graph input
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in inits]
    model = make_model(nodes, inputs,
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "F"])], inits)
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _full_shapes(model):
    inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    out = {}
    for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        dims = v.type.tensor_type.shape.dim
        if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[v.name] = [d.dim_value for d in dims]
    return out


@pytest.mark.parametrize("ir_version", [None, 3])
def test_shape_inference_without_weights_finds_the_same_shapes(ir_version):
    model = conv_reshape_model(ir_version)
    light, _ = _light_copy(model)
    kept = {t.name for t in light.graph.initializer}
    assert "W" not in kept and {"starts", "ends", "minus1"} <= kept
    assert all(int(np.prod(t.dims)) <= SHAPE_INFERENCE_MAX_ELEMENTS
               for t in light.graph.initializer)
    if ir_version is None:
        onnx.checker.check_model(light)
    static = _static_shapes(model)
    assert static == _full_shapes(model)
    assert static["y"] == [2, 64 * 8 * 8]


def test_a_malformed_file_is_checked_from_its_path(tmp_path):
    """Files are checked by path (no re-serialized copy); the checker's reason still shows."""
    from tvm_cocopie.errors import ModelError
    from tvm_cocopie.frontend.model import load_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("Add", ["x", "undefined_tensor"], ["y"], name="add")
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(ModelError, match="malformed.*undefined_tensor"):
        load_model(path)
    with pytest.raises(ModelError, match="malformed.*undefined_tensor"):
        load_model(str(path))
    assert load_model(path, check=False).graph.node[0].op_type == "Add"

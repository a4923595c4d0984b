"""``rewrite_calls``, the walk under the layout passes, and the element-wise lift on it."""

from __future__ import annotations

import numpy as np
import onnx
from conftest import make_model
from onnx import TensorProto, helper
from tvm import relax
from tvm.script import relax as R

from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.relay_passes.layout.call_rewrite import rewrite_calls
from tvm_cocopie.relay_passes.layout.lift import lift_elementwise_tir


def _relu_sigmoid_relu():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(R.nn.relu(R.sigmoid(R.nn.relu(x))))
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    return bb.get()


def test_rewrite_calls_replaces_only_the_calls_it_is_given_and_counts_them():
    seen = []

    def rewrite(builder, call):
        seen.append(call)
        if len(seen) == 1:  # the inner relu: keep it
            return None
        return R.abs(builder.emit(R.negative(call.args[0])))

    mod, count = rewrite_calls(_relu_sigmoid_relu(), "relax.nn.relu", rewrite)
    text = mod.script()
    assert len(seen) == 2 and count == 1
    assert text.count("R.nn.relu(") == 1 and "R.abs(" in text and "R.negative(" in text


def test_clip_call_tir_is_lifted_to_relax_ops():
    lo = onnx.numpy_helper.from_array(np.array(0.0, np.float32), "lo")
    hi = onnx.numpy_helper.from_array(np.array(6.0, np.float32), "hi")
    model = make_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])],
                       [lo, hi])
    mod = from_onnx(model)
    assert mod.script().count("call_tir") == 2
    text = lift_elementwise_tir(mod).script()
    assert "call_tir" not in text and "R.maximum(" in text and "R.minimum(" in text

"""The ONNX backend runs ``onnx.checker`` once per model, specializing or not."""

from __future__ import annotations

import numpy as np
import onnx
from conftest import make_model
from onnx import TensorProto, helper

from tvm_cocopie.frontend.backend import SpecializingRep, TvmCocopieBackend


def _counting_checker(monkeypatch) -> list:
    calls = []
    real = onnx.checker.check_model

    def check_model(model, *args, **kwargs):
        calls.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.checker, "check_model", check_model)
    return calls


def test_a_model_is_checked_once(monkeypatch):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    calls = _counting_checker(monkeypatch)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (y,) = TvmCocopieBackend.prepare(model).run([x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert len(calls) == 1


def test_a_specialized_model_is_checked_once_for_all_its_builds(monkeypatch):
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                        helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    calls = _counting_checker(monkeypatch)
    rep = TvmCocopieBackend.prepare(model)
    assert isinstance(rep, SpecializingRep)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for shape in ([3, 2], [6, 1]):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(calls) == 1

"""``Einsum`` as a (batched) matmul where the equation is one (``frontend/ops/einsum.py``);
every equation against ONNX Runtime, the others through TVM's einsum."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, make_model, ort_run
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie
from tvm_cocopie.frontend.ops.einsum import matmul_plan

rng = np.random.default_rng(7)


def _model(equation, shapes, const_second=False):
    names = ["a", "b"][:len(shapes)]
    arrays = [rng.standard_normal(s).astype("f4") for s in shapes]
    inputs, inits, feeds = [], [], {}
    for i, (name, arr) in enumerate(zip(names, arrays)):
        if const_second and i == 1:
            inits.append(numpy_helper.from_array(arr, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(arr.shape)))
            feeds[name] = arr
    expected = np.einsum(equation, *arrays)
    model = make_model([helper.make_node("Einsum", names, ["y"], equation=equation)], inputs,
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                      list(np.shape(expected)))], inits,
                       opset=12)
    return model, feeds


CASES = [
    ("bhqd,bhkd->bhqk", [(1, 4, 24, 16), (1, 4, 20, 16)], False),
    ("bhqk,bhkd->bhqd", [(2, 3, 24, 20), (2, 3, 20, 16)], False),
    ("bqhd,bkhd->bhqk", [(1, 24, 4, 16), (1, 20, 4, 16)], False),
    ("ij,jk->ik", [(33, 40), (40, 24)], False),
    ("bij,jk->bik", [(2, 33, 40), (40, 48)], True),
    ("ik,jk->ij", [(33, 40), (24, 40)], True),
    ("abc,cd->abd", [(3, 7, 40), (40, 24)], True),
    ("i,j->ij", [(17,), (19,)], False),
    ("ij,ij->i", [(17, 32), (17, 32)], False),
    ("nct,ncs->nts", [(2, 16, 30), (2, 16, 20)], False),
]


@pytest.mark.parametrize("equation,shapes,const_second", CASES)
def test_einsum_as_matmul_matches_onnxruntime(equation, shapes, const_second):
    assert matmul_plan(equation) is not None
    model, feeds = _model(equation, shapes, const_second)
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(**feeds), ort_run(model, feeds))
    assert "einsum" not in compiled.executable.stats()


@pytest.mark.parametrize("equation,shapes", [("ij->ji", [(5, 7)]), ("ii->i", [(6, 6)]),
                                             ("ij,jk", [(5, 7), (7, 3)]),
                                             ("...ij,...jk->...ik", [(2, 5, 7), (2, 7, 3)]),
                                             ("ij,jk->i", [(5, 7), (7, 3)])])
def test_other_equations_keep_tvms_einsum(equation, shapes):
    assert matmul_plan(equation) is None or "->" not in equation
    model, feeds = _model(equation, shapes)
    assert_close(tvm_cocopie.compile(model)(**feeds), ort_run(model, feeds))

"""Layer norms written out op by op (ONNX exports before opset 17) recognized as one
``nn.layer_norm`` in the rewrite stage (relay_passes/layer_norm.py), against ONNX
Runtime; chains that are not a layer norm over the last axis are left alone."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from conftest import make_model, ort_run
from onnx import TensorProto, helper

import tvm_cocopie
from tvm_cocopie.exprs import op_name
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.pipeline import run_until
from tvm_cocopie.target import host_target


def _decomposed(rows=24, width=48, square="Pow", affine="both", gamma_shape=None,
                axis=-1, eps_input=False):
    """``MatMul`` then a layer norm as nine ONNX ops (``square``: ``Pow`` or ``Mul``;
    ``affine``: ``both``, ``scale`` or ``none``), reducing over ``axis``; the epsilon an
    input of the graph with ``eps_input``."""
    rng = np.random.default_rng(7)
    n = width

    def const(name, shape, values):
        return helper.make_tensor(name, TensorProto.FLOAT, shape,
                                  np.asarray(values, np.float32).ravel())

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("ReduceMean", ["h"], ["m"], axes=[axis], keepdims=1),
             helper.make_node("Sub", ["h", "m"], ["d"])]
    if square == "Pow":
        nodes.append(helper.make_node("Pow", ["d", "two"], ["sq"]))
    else:
        nodes.append(helper.make_node("Mul", ["d", "d"], ["sq"]))
    nodes += [helper.make_node("ReduceMean", ["sq"], ["v"], axes=[axis], keepdims=1),
              helper.make_node("Add", ["v", "eps"], ["ve"]),
              helper.make_node("Sqrt", ["ve"], ["s"]),
              helper.make_node("Div", ["d", "s"], ["y0" if affine != "none" else "y"])]
    inits = [const("w", [width, width], rng.standard_normal([width, width]) * 0.2),
             const("two", [], [2.0])]
    shape = gamma_shape or [n]
    if affine in ("both", "scale"):
        nodes.append(helper.make_node("Mul", ["y0", "g"], ["y1" if affine == "both" else "y"]))
        inits.append(const("g", shape, 1.0 + rng.standard_normal(shape) * 0.1))
    if affine == "both":
        nodes.append(helper.make_node("Add", ["y1", "b"], ["y"]))
        inits.append(const("b", shape, rng.standard_normal(shape) * 0.1))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, width])]
    if eps_input:
        inputs.append(helper.make_tensor_value_info("eps", TensorProto.FLOAT, []))
    else:
        inits.append(const("eps", [], [1e-5]))
    return make_model(nodes, inputs,
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, width])],
                      initializers=inits, opset=13)


def _ops(model) -> dict:
    mod = run_until(from_onnx(model), tvm.target.Target(host_target()), "rewrite")
    counts: dict = {}

    def visit(expr):
        name = op_name(expr)
        if name:
            counts[name] = counts.get(name, 0) + 1

    tvm.relax.analysis.post_order_visit(mod["main"].body, visit)
    return counts


@pytest.mark.parametrize("square, affine, gamma_shape", [
    ("Pow", "both", None), ("Mul", "both", None), ("Pow", "scale", None),
    ("Pow", "none", None), ("Pow", "both", [1, 1, 48])])
def test_a_layer_norm_written_out_becomes_one_op_and_matches_onnx_runtime(
        square, affine, gamma_shape):
    model = _decomposed(square=square, affine=affine, gamma_shape=gamma_shape)
    ops = _ops(model)
    assert ops.get("nn.layer_norm") == 1, ops
    assert "mean" not in ops and "sqrt" not in ops and "divide" not in ops, ops
    x = np.random.default_rng(0).standard_normal([1, 24, 48]).astype(np.float32)
    got = tvm_cocopie.compile(model)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_other_chains_stay_as_they_are():
    """A mean over another axis than the last, or an epsilon that is not a constant, is
    not a layer norm this rewrite may take: the ops stay (and still compute ONNX
    Runtime's numbers)."""
    over_rows = _decomposed(axis=1)
    assert "nn.layer_norm" not in _ops(over_rows)
    x = np.random.default_rng(1).standard_normal([1, 24, 48]).astype(np.float32)
    np.testing.assert_allclose(tvm_cocopie.compile(over_rows)(x=x),
                               ort_run(over_rows, {"x": x})[0], rtol=1e-4, atol=1e-4)
    ops = _ops(_decomposed(eps_input=True))
    assert "nn.layer_norm" not in ops and ops.get("mean") == 2, ops

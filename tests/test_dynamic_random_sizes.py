"""Symbolic builds at random valid sizes (issue 17's hypothesis test): the BERT-style
encoder with a symbolic sequence length and the CRNN recognizer with a symbolic line
width, each compiled once (its memory planned for a bound, the views of each size made
once), then run at sizes hypothesis draws, in the order it draws them (sizes alternate,
so the kept views are re-made), every output against ONNX Runtime on the same dynamic
model; a size above the bound is refused with an ``InputShapeError``, never run."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie
from tvm_cocopie.bench.dynamic import encoder_symbolic_sequence
from tvm_cocopie.bench.runtime_stats import vm_call_counts
from tvm_cocopie.errors import InputShapeError
from tvm_cocopie.models.crnn import crnn
from tvm_cocopie.relay_passes.fusion.database import ProfileDB

#: the dims' bounds the builds plan their memory for
MAX_TOKENS, MAX_WIDTH = 96, 200
REL_TOL = 1e-4


@pytest.fixture(scope="module")
def encoder():
    model = encoder_symbolic_sequence(num_layers=2, hidden=64, heads=4, ffn=128, vocab=100)
    compiled = tvm_cocopie.compile(model, None, specialize=False,
                                   options={"dim_bounds": {"S": MAX_TOKENS}})
    return model, compiled


@pytest.fixture(scope="module")
def recognizer():
    model = crnn(image_size=32, hidden=16, dynamic_width=True)
    compiled = tvm_cocopie.compile(model, None, specialize=False,
                                   options={"dim_bounds": {"W": MAX_WIDTH}})
    return model, compiled


_SETTINGS = settings(max_examples=8, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(tokens=st.integers(1, MAX_TOKENS), seed=st.integers(0, 2**16))
def test_encoder_at_random_lengths(encoder, tokens, seed):
    model, compiled = encoder
    (spec,) = compiled.inputs
    ids = np.random.default_rng(seed).integers(0, 100, (1, tokens)).astype(np.int64)
    feeds = {spec.name: ids}
    assert_close(tvm_cocopie_outputs(compiled, feeds), ort_run(model, feeds), REL_TOL)


@_SETTINGS
@given(width=st.integers(4, MAX_WIDTH), seed=st.integers(0, 2**16))
def test_recognizer_at_random_widths(recognizer, width, seed):
    model, compiled = recognizer
    (spec,) = compiled.inputs
    x = np.random.default_rng(seed).standard_normal((1, 1, 32, width)).astype(np.float32)
    feeds = {spec.name: x}
    assert_close(tvm_cocopie_outputs(compiled, feeds), ort_run(model, feeds), REL_TOL)


def test_sizes_above_the_bounds_are_refused(encoder, recognizer):
    (_, enc), (_, rec) = encoder, recognizer
    with pytest.raises(InputShapeError, match="bound"):
        enc(**{enc.inputs[0].name: np.zeros((1, MAX_TOKENS + 1), np.int64)})
    with pytest.raises(InputShapeError, match="bound"):
        rec(**{rec.inputs[0].name: np.zeros((1, 1, 32, MAX_WIDTH + 4), np.float32)})


def tvm_cocopie_outputs(compiled, feeds) -> list:
    out = compiled(**feeds)
    return [np.asarray(o) for o in (out if isinstance(out, list | tuple) else [out])]


def test_dnnfusion_decides_symbolic_candidates_at_a_planned_size(tmp_path):
    """DNNFusion on the encoder with a symbolic sequence: its yellow candidates are
    measured at the planned length (``dim_bounds``) instead of staying apart, the plan
    holds for every length (fewer kernels than stock fusion), numbers = ORT. (Before,
    every symbolic candidate stayed apart, and the plan left here did not build.)"""
    model = encoder_symbolic_sequence(num_layers=1, hidden=64, heads=4, ffn=128, vocab=100)
    kernels = {}
    for fusion in ("stock", "dnnfusion"):
        compiled = tvm_cocopie.compile(model, None, specialize=False, options={
            "fusion": fusion, "fusion_db": str(tmp_path / "fusion.sqlite"),
            "dim_bounds": {"S": 64}})
        for tokens in (3, 40):
            ids = np.random.default_rng(tokens).integers(0, 100, (1, tokens)).astype(np.int64)
            feeds = {compiled.inputs[0].name: ids}
            assert_close(tvm_cocopie_outputs(compiled, feeds), ort_run(model, feeds), REL_TOL)
        counts = vm_call_counts(compiled.executable, [ids])
        kernels[fusion] = sum(n for name, n in counts.items()
                              if not name.startswith(("vm.builtin.", "tvm_cocopie.vm.")))
    assert kernels["dnnfusion"] < kernels["stock"], kernels
    db = ProfileDB(str(tmp_path / "fusion.sqlite"))
    assert len(db) > 0  # candidates were measured (at S=64) and remembered


def _conv_pool_conv() -> onnx.ModelProto:
    """conv -> relu -> 2x2 max pool -> conv -> relu over a line of symbolic width: the
    second conv's shapes are ``W // 2``, an expression, so its kernels take ``W`` as a
    scalar argument."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (16, 1, 3, 3)), ("w2", (32, 16, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["y"])]
    graph = helper.make_graph(
        nodes, "line", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 32, "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, "OW"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_dnnfusion_builds_kernels_that_take_symbolic_dims_as_scalars(tmp_path):
    """A fused block whose kernels take ``W`` as a scalar (shapes ``W // 2``) gets ``W``
    as a shape parameter, the scalar kept in its body (made a parameter of its own, the
    fused function lost its result's shape, or FuseTIR defined ``W`` twice: PP-OCR rec
    and the CRNN did not build with DNNFusion); = ORT at three widths."""
    model = _conv_pool_conv()
    compiled = tvm_cocopie.compile(model, None, specialize=False, options={
        "fusion": "dnnfusion", "fusion_db": str(tmp_path / "fusion.sqlite")})
    for width in (8, 30, 64):
        x = np.random.default_rng(width).standard_normal((1, 1, 32, width)).astype(np.float32)
        assert_close(tvm_cocopie_outputs(compiled, {"x": x}), ort_run(model, {"x": x}), REL_TOL)


def test_dnnfusion_builds_the_recognizer_with_a_symbolic_width(tmp_path):
    """The CRNN (64-wide LSTMs) with a symbolic width through DNNFusion: its fused
    layout transform + reshape + transpose + LSTM input projection over ``W // 4`` rows
    builds (its serial version, taken only below 4 pixels, where every tensor is empty,
    made TIR's simplifier divide by ``W // 4 = 0``: the build failed); = ORT at three
    widths, fewer kernels than stock fusion."""
    model = crnn(image_size=32, hidden=64, dynamic_width=True)
    kernels = {}
    for fusion in ("stock", "dnnfusion"):
        compiled = tvm_cocopie.compile(model, None, specialize=False, options={
            "fusion": fusion, "fusion_db": str(tmp_path / "fusion.sqlite"),
            "dim_bounds": {"W": MAX_WIDTH}})
        for width in (8, 52, 124):
            x = np.random.default_rng(width).standard_normal((1, 1, 32, width))
            feeds = {"input": x.astype(np.float32)}
            assert_close(tvm_cocopie_outputs(compiled, feeds), ort_run(model, feeds), REL_TOL)
        counts = vm_call_counts(compiled.executable, [feeds["input"]])
        kernels[fusion] = sum(n for name, n in counts.items()
                              if not name.startswith(("vm.builtin.", "tvm_cocopie.vm.")))
    assert kernels["dnnfusion"] < kernels["stock"], kernels

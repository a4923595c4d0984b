"""Shared fixtures: tiny hand-built ONNX models and the ONNX Runtime reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie
from tvm_cocopie.emulation import toolchain

#: Max error relative to the reference output's largest magnitude. FP32 dot products
#: of length K carry rounding of about sqrt(K)*eps (eps = 1.2e-7), ~1e-5 for the
#: K <= 4608 of our convs; summation order differs between TVM and ONNX Runtime, and
#: the error compounds over up to ~50 layers, which keeps it below 1e-4 in practice.
#: 1e-3 leaves a 10x margin while still catching any wrong index or epilogue
#: (those give errors of order 1).
REL_TOL = 1e-3


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def conv_relu_model(batch="N", channels=8, size=16, seed=0) -> onnx.ModelProto:
    """x[N,3,H,W] -> Conv3x3(pad 1) + bias -> Relu; and a second output: global avg pool."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((channels,)).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
        helper.make_node("GlobalAveragePool", ["y"], ["p"], name="gap"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, channels, size, size]),
         helper.make_tensor_value_info("p", TensorProto.FLOAT, [batch, channels, 1, 1])],
        [w, b],
    )


def allocated_elements(mod) -> dict[str, int]:
    """``{buffer: elements}`` of the buffers ``mod``'s main allocates once its
    allocations are placed and compacted as the build does."""
    import re

    import tvm.s_tir.transform as stt
    for p in (stt.LowerInitBlock(), stt.PlanAndUpdateBufferAllocationLocation(),
              stt.ConvertBlocksToOpaque(), stt.CompactBufferAllocation()):
        mod = p(mod)
    found = re.findall(r"(\w+) = T\.sblock_alloc_buffer\(\(((?:T\.int64\(\d+\),?\s*)+)\)",
                       mod.script())
    return {name: int(np.prod([int(d) for d in re.findall(r"T\.int64\((\d+)\)", shape)]))
            for name, shape in found}


def ort_run(model: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def assert_close(actual, reference, rel_tol=REL_TOL):
    actual = actual if isinstance(actual, list) else [actual]
    assert len(actual) == len(reference)
    for a, r in zip(actual, reference):
        assert a.shape == r.shape, (a.shape, r.shape)
        scale = float(np.max(np.abs(r))) or 1.0
        err = float(np.max(np.abs(a.astype(np.float64) - r)))
        assert err <= rel_tol * scale, f"max abs err {err:.3e} > {rel_tol:g} x {scale:.3e}"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "needs_toolchain: runs Hexagon code under qemu-hexagon (skips, naming the "
        "missing tools, where `make apt` has not installed them)")


def pytest_collection_modifyitems(config, items):
    missing = toolchain.missing_tools()
    if not missing:
        return
    skip = pytest.mark.skip(
        reason=f"Hexagon emulation toolchain not installed ({', '.join(missing)}); "
        "`make apt` installs qemu-user-static, clang-14 and lld-14")
    for item in items:
        if "needs_toolchain" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _registered():
    tvm_cocopie.register()


@pytest.fixture
def tiny_model():
    return conv_relu_model()


@pytest.fixture
def tiny_input():
    return np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)

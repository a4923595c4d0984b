"""Arm NEON: the cocopie kernels built for aarch64 and run under qemu-aarch64-static.

One Relax graph holds the kernel families (blocked 3x3 conv with a prime input
channel count, stride 2 and odd sizes; 1x1 conv; grouped conv; GSPC grouped conv with
2 channels per group in 4-lane chunks; depthwise stride 2 with ReLU6; dense matmul
with bias; batched matmul of activations); it goes through
the cocopie pipeline for an aarch64 NEON target with 4 cores, the scheduled kernels
are linked into one freestanding program (:mod:`tvm_cocopie.emulation.aarch64`) and emulated.
Every output is checked against numpy in float64. Skips only when the emulator or
the cross toolchain is not installed (``make apt``).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_kernels_common import assert_allclose, build_graph, conv2d_reference, tensor_var
from tvm import relax
from tvm.relax import op as R

from tvm_cocopie.emulation import aarch64
from tvm_cocopie.errors import CompilationError, ToolchainError
from tvm_cocopie.pipeline import run_until
from tvm_cocopie.target import cpu_info, parse_target

needs_tools = pytest.mark.skipif(
    bool(aarch64.missing_tools()),
    reason=f"aarch64 emulation tools missing: {', '.join(aarch64.missing_tools())} (make apt)",
)

rng = np.random.default_rng(11)


def _w(*shape):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype("float32")


W3 = _w(32, 7, 3, 3)  # 1.1 M multiply-adds: big enough to run in parallel
B3 = _w(32)
W1 = _w(24, 32, 1, 1)
WG = _w(24, 6, 3, 3)  # 4 groups of 6 channels
WS = _w(24, 2, 3, 3)  # 12 groups of 2 channels: GSPC, two groups per 4-lane chunk
WD = _w(24, 1, 3, 3)
WM = _w(48, 40)
BM = _w(40)


def _graph():
    x = tensor_var("x", (1, 7, 48, 45))
    a = tensor_var("a", (2, 5, 48))
    b = tensor_var("b", (2, 48, 12))

    def body(bb, x, a, b):
        y = bb.emit(R.nn.conv2d(x, relax.const(W3), strides=[2, 2], padding=[1, 1, 1, 1]))
        y = bb.emit(R.nn.relu(R.add(y, relax.const(B3.reshape(1, 32, 1, 1)))))
        y = bb.emit(R.nn.conv2d(y, relax.const(W1)))
        g = bb.emit(R.nn.conv2d(y, relax.const(WG), padding=[1, 1, 1, 1], groups=4))
        d = bb.emit(R.clip(R.nn.conv2d(g, relax.const(WD), strides=[2, 2], padding=[1, 1, 1, 1],
                                       groups=24), 0.0, 6.0))
        s = bb.emit(R.nn.relu(R.nn.conv2d(y, relax.const(WS), strides=[2, 2],
                                          padding=[1, 1, 1, 1], groups=12)))
        m = bb.emit(R.add(R.matmul(a, relax.const(WM)), relax.const(BM)))
        bm = bb.emit(R.matmul(a, b))
        return bb.emit(relax.Tuple([d, s, m, bm]))

    return build_graph([x, a, b], body)


def _reference(x, a, b):
    y = np.maximum(conv2d_reference(x, W3, stride=(2, 2), padding=(1, 1, 1, 1))
                   + B3.reshape(1, 32, 1, 1), 0)
    y = conv2d_reference(y, W1)
    g = conv2d_reference(y, WG, padding=(1, 1, 1, 1), groups=4)
    d = np.clip(conv2d_reference(g, WD, stride=(2, 2), padding=(1, 1, 1, 1), groups=24), 0, 6)
    s = np.maximum(conv2d_reference(y, WS, stride=(2, 2), padding=(1, 1, 1, 1), groups=12), 0)
    a64 = a.astype(np.float64)
    return [d, s, a64 @ WM + BM, a64 @ b]


@pytest.fixture(scope="module")
def program():
    return aarch64.program_from_main(run_until(_graph(), aarch64.AARCH64_NEON, "schedule"))


@needs_tools
def test_neon_target_uses_4_lane_kernels(program):
    info = cpu_info(parse_target(aarch64.AARCH64_NEON))
    assert (info.arch, info.f32_lanes) == ("aarch64", 4)
    names = [call[0] for call in program.calls]
    assert any("conv2d_nchwc" in n for n in names), names
    assert any("depthwise_nchwc" in n for n in names), names
    assert any("conv2d_gspc" in n for n in names), names
    assert any("matmul_packed" in n for n in names), names
    asm = aarch64.compile_kernels(program).inspect_source("asm")
    assert re.search(r"\bfmla\s+v\d+\.4s", asm), "no 4-lane NEON FMA in the aarch64 kernels"
    assert "__TVMBackendParallelLaunch" in asm, "the 4-core target built no parallel loop"


@needs_tools
def test_neon_kernels_match_numpy_under_qemu(program, tmp_path):
    x = rng.standard_normal((1, 7, 48, 45)).astype("float32")
    a = rng.standard_normal((2, 5, 48)).astype("float32")
    b = rng.standard_normal((2, 48, 12)).astype("float32")
    outs = aarch64.build_and_run(program, [x, a, b], workdir=tmp_path)
    for got, want in zip(outs, _reference(x, a, b)):
        assert_allclose(got, want)


def test_missing_tools_raise_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert aarch64.missing_tools() == list(aarch64.TOOLS)
    empty = aarch64.Program(None, (), (), (), {})
    with pytest.raises(ToolchainError, match="qemu-aarch64-static.*make apt"):
        aarch64.build_and_run(empty, [])


def test_unsupported_binding_is_named():
    x = tensor_var("x", (2, 3))
    mod = build_graph([x], lambda bb, x: bb.emit(R.shape_of(x)))
    with pytest.raises(CompilationError, match="call_tir bindings only"):
        aarch64.program_from_main(mod)

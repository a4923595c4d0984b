"""Scalar (0-d) inputs and outputs through every entry point (project issue 20, A).

A voice-activity model takes its sample rate as a 0-d int64 input and branches on it
with ``If``; its outputs can be 0-d too. The model here is that in small: ``sr`` (0-d
int64) picks a branch (``sr > 8000``), scales ``x`` by ``sr`` through a ``Mul`` and returns
a 0-d float. Each entry point (``tvm_cocopie.compile``, the CLI, the ONNX backend) must
take ``sr`` as a 0-d value and give back 0-d outputs that match ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from conftest import ort_run
from onnx import TensorProto
from onnx import helper as oh
from tvm import relax

import tvm_cocopie
from tvm_cocopie.cli import main
from tvm_cocopie.errors import InputShapeError
from tvm_cocopie.frontend.backend import TvmCocopieBackend

X = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)
RATES = (16000, 8000)


def scalar_model() -> onnx.ModelProto:
    """``y = If(sr > 8000, sum(x) * 2, sum(x) * 3)`` (0-d float) and
    ``z = x * float(sr) / 1000`` (shape [4]), ``sr`` a 0-d int64 input."""
    def branch(name: str, factor: float) -> onnx.GraphProto:
        const = oh.make_tensor(f"{name}_k", TensorProto.FLOAT, [], [factor])
        return oh.make_graph(
            [oh.make_node("ReduceSum", ["x"], [f"{name}_s"], keepdims=0),
             oh.make_node("Mul", [f"{name}_s", f"{name}_k"], [f"{name}_y"])],
            name, [], [oh.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [])], [const])

    nodes = [
        oh.make_node("Greater", ["sr", "threshold"], ["wide"]),
        oh.make_node("If", ["wide"], ["y"], then_branch=branch("then", 2.0),
                     else_branch=branch("else", 3.0)),
        oh.make_node("Cast", ["sr"], ["sr_f"], to=TensorProto.FLOAT),
        oh.make_node("Mul", ["sr_f", "milli"], ["k"]),
        oh.make_node("Mul", ["x", "k"], ["z"]),
    ]
    graph = oh.make_graph(
        nodes, "scalar_io",
        [oh.make_tensor_value_info("sr", TensorProto.INT64, []),
         oh.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, []),
         oh.make_tensor_value_info("z", TensorProto.FLOAT, [4])],
        [oh.make_tensor("threshold", TensorProto.INT64, [], [8000]),
         oh.make_tensor("milli", TensorProto.FLOAT, [], [1e-3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def reference(rate: int) -> list[np.ndarray]:
    return ort_run(scalar_model(), {"sr": np.array(rate, dtype=np.int64), "x": X})


def assert_matches(outputs, rate: int) -> None:
    expected = reference(rate)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_reference_takes_both_branches():
    assert float(reference(16000)[0]) != float(reference(8000)[0])
    assert reference(16000)[0].shape == ()


@pytest.mark.parametrize("pipeline", ["cocopie", "default"])
def test_compile_takes_and_returns_scalars(pipeline):
    compiled = tvm_cocopie.compile(scalar_model(), pipeline=pipeline)
    assert compiled.inputs[0].shape == ()
    for rate in RATES:
        assert_matches(compiled(np.array(rate, dtype=np.int64), X), rate)
        assert_matches(compiled(sr=np.int64(rate), x=X), rate)  # a numpy scalar
        assert_matches(compiled(rate, X), rate)  # a Python int for an int64 scalar


def test_compile_rejects_what_a_scalar_input_cannot_hold():
    compiled = tvm_cocopie.compile(scalar_model())
    with pytest.raises(InputShapeError, match="shape"):
        compiled(np.array([16000], dtype=np.int64), X)  # 1-d, not 0-d
    with pytest.raises(InputShapeError, match="does not fit"):
        compiled(16000.5, X)


def test_cli_run_takes_a_scalar_input(tmp_path, capsys):
    path = tmp_path / "vad.onnx"
    onnx.save(scalar_model(), str(path))
    np.save(tmp_path / "x.npy", X)
    for rate in RATES:
        out = tmp_path / f"out_{rate}.npz"
        code = main(["run", str(path), "--input", f"sr={rate}", "--input",
                     f"x={tmp_path / 'x.npy'}", "--save", str(out)])
        assert code == 0
        printed = capsys.readouterr().out
        assert "y: shape [] float32" in printed
        saved = np.load(out)
        assert_matches([saved["y"], saved["z"]], rate)


def test_cli_run_inputs_from_npz_and_numbers(tmp_path, capsys):
    path = tmp_path / "vad.onnx"
    onnx.save(scalar_model(), str(path))
    np.savez(tmp_path / "in.npz", sr=np.array(8000, dtype=np.int64))
    out = tmp_path / "out.npz"
    numbers = ",".join(str(v) for v in X)
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--input",
                 f"x={numbers}", "--save", str(out)]) == 0
    saved = np.load(out)
    assert_matches([saved["y"], saved["z"]], 8000)
    # two numbers do not make a scalar: one readable line, exit code 2
    assert main(["run", str(path), "--input", "sr=1,2", "--input", f"x={numbers}"]) == 2
    assert "tvm-cocopie: error:" in capsys.readouterr().err


def test_cli_compiled_library_takes_a_0d_tensor(tmp_path):
    path = tmp_path / "vad.onnx"
    onnx.save(scalar_model(), str(path))
    lib = tmp_path / "vad.so"
    assert main(["compile", str(path), "-o", str(lib)]) == 0
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib)), tvm.cpu())
    for rate in RATES:
        res = vm["main"](tvm.runtime.tensor(np.array(rate, dtype=np.int64)),
                         tvm.runtime.tensor(X))
        assert_matches([res[0].numpy(), res[1].numpy()], rate)


@pytest.mark.parametrize("pipeline", ["cocopie", "default"])
def test_onnx_backend_takes_and_returns_scalars(pipeline):
    rep = TvmCocopieBackend.prepare(scalar_model(), "CPU", pipeline=pipeline)
    for rate in RATES:
        assert_matches(rep.run([np.array(rate, dtype=np.int64), X]), rate)
        assert_matches(rep.run({"sr": np.array(rate, dtype=np.int64), "x": X}), rate)

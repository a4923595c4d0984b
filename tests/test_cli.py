"""The tvm-cocopie command line."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import tvm
from conftest import assert_close, conv_relu_model, ort_run
from tvm import relax

from tvm_cocopie.cli import main

VENV_BIN = Path(sys.executable).parent


def test_compile_writes_a_loadable_library(tmp_path, capsys):
    model_path = tmp_path / "m.onnx"
    onnx.save(conv_relu_model(), str(model_path))
    out = tmp_path / "m.so"
    code = main(["compile", str(model_path), "--target", '{"kind": "llvm", "num-cores": 2}',
                 "--shape", "x=1,3,16,16", "-o", str(out)])
    assert code == 0 and out.is_file()
    assert "wrote" in capsys.readouterr().out
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out)), tvm.cpu())
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    res = vm["main"](tvm.runtime.tensor(x))
    assert_close([res[0].numpy(), res[1].numpy()], ort_run(conv_relu_model(), {"x": x}))


def test_bad_target_is_one_readable_line(tmp_path, capsys):
    model_path = tmp_path / "m.onnx"
    onnx.save(conv_relu_model(), str(model_path))
    code = main(["compile", str(model_path), "--target", "llvm -mcpu=znver3", "-o",
                 str(tmp_path / "x.so")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("tvm-cocopie: error:") and "JSON dict" in err
    assert "Traceback" not in err


def test_malformed_model_exit_code(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage" * 100)
    assert main(["compile", str(bad), "-o", str(tmp_path / "x.so")]) == 2
    assert "tvm-cocopie: error:" in capsys.readouterr().err


def test_unknown_bench(capsys):
    assert main(["bench", "nosuchbench"]) == 2
    assert "known:" in capsys.readouterr().err


def test_console_script_info():
    exe = VENV_BIN / "tvm-cocopie"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "tvm_cocopie.cli"]
    res = subprocess.run([*cmd, "info"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert "relax pipeline 'cocopie'" in res.stdout

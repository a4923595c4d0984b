"""``tvm-cocopie predict``: a model's latency per kernel and in total from a saved latency
model, beside measured times with ``--measure``; a missing or foreign model file is one
clear error line."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from transfer_helpers import tiny_cnn

from tvm_cocopie.bench.latency import scheduled_kernels
from tvm_cocopie.cli import main
from tvm_cocopie.latency import FEATURE_NAMES, LatencyModel, Row, kernel_features
from tvm_cocopie.target import host_target

TARGET = host_target(2)
TARGET_JSON = json.dumps({"kind": "llvm", "mcpu": str(TARGET.attrs["mcpu"]), "num-cores": 2})
#: one thread: xgboost's threads spin against whatever else keeps the cores busy
PARAMS = {"nthread": 1}


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("predict") / "tiny.onnx"
    onnx.save(tiny_cnn(), path)
    return path


def _train(target, kernels=None) -> LatencyModel:
    """A small model on synthetic rows: ``kernels``' features (in the model and alone)
    with made-up times, or random features."""
    rng = np.random.default_rng(0)
    if kernels is not None:
        features = [kernel_features(f, target, standalone=alone)
                    for _, f, _ in kernels for alone in (False, True)]
    else:
        features = list(rng.random((8, len(FEATURE_NAMES)), np.float32))
    rows = [Row("tiny", "model", str(i), "k", f, 20.0 * (i + 1)) for i, f in enumerate(features)]
    model = LatencyModel(target, params=PARAMS)
    model.train(rows, rounds=30, validation=0)
    return model


def test_predict_prints_kernels_and_totals_beside_measured_times(onnx_path, tmp_path, capsys):
    kernels = scheduled_kernels(str(onnx_path), TARGET_JSON)
    model_file = _train(TARGET_JSON, kernels).save(tmp_path / "latency.json")
    out_json = tmp_path / "out" / "predict.json"
    rc = main(["predict", str(onnx_path), "--target", TARGET_JSON, "--model-file",
               str(model_file), "--measure", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0
    names = [name for name, _, _ in kernels]
    assert names and all(name in out for name in names), out
    assert "predicted total" in out and "measured total" in out

    report = json.loads(out_json.read_text())
    assert {k["name"] for k in report["kernels"]} == set(names)
    assert report["predicted_ms"] > 0 and report["measured_ms"] > 0
    assert sum(k["share_pct"] for k in report["kernels"]) == pytest.approx(100.0)
    for k in report["kernels"]:
        assert k["predicted_us"] > 0 and k["calls"] >= 1
        if k["measured_us"] is not None:  # a kernel lowered away is not seen running
            assert k["measured_us"] > 0
            assert k["err_pct"] == pytest.approx(
                100 * (k["predicted_us"] - k["measured_us"]) / k["measured_us"])
    assert any(k["measured_us"] for k in report["kernels"])
    assert report["err_pct"] == pytest.approx(
        100 * (report["predicted_ms"] - report["measured_ms"]) / report["measured_ms"])


def test_a_missing_or_foreign_model_file_is_one_clear_error(onnx_path, tmp_path, capsys):
    missing = tmp_path / "none.json"
    rc = main(["predict", str(onnx_path), "--target", TARGET_JSON, "--model-file", str(missing)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"no latency model at {missing}" in err and "Traceback" not in err
    assert "bench_latency_model.py" in err  # what to do

    other = {"kind": "llvm", "mcpu": str(TARGET.attrs["mcpu"]), "num-cores": 3}
    foreign = _train(other).save(tmp_path / "other.json")
    rc = main(["predict", str(onnx_path), "--target", TARGET_JSON, "--model-file", str(foreign)])
    err = capsys.readouterr().err
    assert rc == 2 and "another target" in err and "Traceback" not in err

"""The dynamic-model benchmark's machinery (scripts/bench_dynamic.py): one build with a
symbolic batch run at two sizes against static builds and ONNX Runtime, the record and
summary keys, the memory measure, failures recorded (on a tiny conv net; the timings and
memory figures are not checked, only that they are there)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REL_TOL, conv_relu_model

from tvm_cocopie.api import InputSpec
from tvm_cocopie.bench import dynamic
from tvm_cocopie.bench import timing as bm
from tvm_cocopie.bench.memory import peak_run_memory
from tvm_cocopie.errors import CocopieError, CompilationError, InputShapeError
from tvm_cocopie.models import crnn
from tvm_cocopie.target import host_target

SIZES = ({"N": 1}, {"N": 2})


@pytest.fixture(scope="module")
def case():
    """Conv + bias -> ReLU and a global average pool over a symbolic batch ``N``."""
    model = conv_relu_model(batch="N", channels=16, size=32)
    return dynamic.DynamicCase("conv_relu", lambda: model, SIZES, SIZES[:1],
                               dynamic.zoo_inputs, note="batch N")


@pytest.fixture(scope="module")
def result(case):
    saved = []
    model, records = dynamic.bench_model(case, host_target(2), 2, SIZES, repeat=1,
                                         max_seconds=1.0, on_record=saved.append)
    assert saved == records
    return model, records


def test_every_size_is_timed_and_matches(result):
    _, records = result
    assert [r["size"] for r in records] == ["N=1", "N=2"]
    for rec, n in zip(records, (1, 2)):
        assert rec["input_shapes"] == {"x": [n, 3, 32, 32]}
        for key in ("static_ms", "dynamic_ms", "ort_ms", "dynamic_over_static",
                    "dynamic_over_ort", "dynamic_intermediate_allocations_per_run"):
            assert rec[key] is not None, key
        assert rec["dynamic_over_ort"] == pytest.approx(rec["dynamic_ms"] / rec["ort_ms"])
        assert rec["matches_ort"] and rec["max_rel_err"] < REL_TOL
        assert rec["static_max_abs_err"] < REL_TOL
        assert "error" not in rec and "static_error" not in rec


def test_model_record_has_compile_time_and_memory(result):
    model, _ = result
    assert model["model"] == "conv_relu" and model["sizes"] == 2
    assert model["dynamic_shapes"] == {"x": ["N", 3, 32, 32]}
    assert model["compile_s"] >= model["build_s"] > 0
    assert model["memory_size"] == "N=2" and "memory_error" not in model
    for runtime in ("dynamic", "ort"):
        assert model[f"{runtime}_memory_mib"] >= 0
        details = model["memory"][runtime]
        assert details["runs"] == 3 and details["baseline_mib"] > 0
        assert details["peak_rss_mib"] >= details["peak_mib"]


def test_summary_keys(result):
    model, records = result
    summary = dynamic.summarize(records, [model, {"model": "gone", "error": "no such op"}])
    assert summary["dynamic_over_static"] == pytest.approx(
        bm.geomean(r["dynamic_over_static"] for r in records))
    assert summary["dynamic_over_ort"] == pytest.approx(
        bm.geomean(r["dynamic_over_ort"] for r in records))
    assert summary["memory_over_ort"] == model["memory_over_ort"]
    assert summary["max_abs_err"] == max(r["max_abs_err"] for r in records)
    assert summary["models"] == 1 and summary["sizes"] == 2
    assert summary["failed"] == {"gone": "no such op"} and summary["all_match_ort"]
    assert "dyn/static" in dynamic.tables(records, [model])


def test_a_model_that_does_not_compile_is_recorded(case, monkeypatch):
    def broken(*_args, **_kwargs):
        raise CompilationError("TVM failed to build the model: Resize with symbolic sizes")

    monkeypatch.setattr(dynamic, "compile_model", broken)
    model, records = dynamic.bench_model(case, host_target(2), 2, SIZES, repeat=1)
    assert records == []
    assert model == {"model": "conv_relu", "error": "TVM failed to build the model: Resize "
                     "with symbolic sizes", "error_type": "CompilationError"}


def test_a_size_must_bind_every_symbolic_dim():
    fake = SimpleNamespace(inputs=[InputSpec("x", ("N", 3, "H", "W"), "float32")])
    assert dynamic.concrete_shapes(fake, {"N": 2, "H": 8, "W": 4}) == {"x": [2, 3, 8, 4]}
    with pytest.raises(InputShapeError, match=r"\['W'\] unbound"):
        dynamic.concrete_shapes(fake, {"N": 1, "H": 8})
    with pytest.raises(InputShapeError, match=r"\['S'\] not symbolic"):
        dynamic.concrete_shapes(fake, {"N": 1, "H": 8, "W": 8, "S": 3})
    assert dynamic.largest([{"H": 320, "W": 320}, {"H": 480, "W": 640}]) == {"H": 480, "W": 640}


def test_unknown_runtime_is_refused():
    with pytest.raises(CocopieError, match="unknown runtime 'tflite'"):
        peak_run_memory("tflite", None, {}, 1)


def test_symbolic_models_run_at_any_size_on_onnx_runtime():
    """The benchmark's symbolic-width CRNN has the static model's weights; the encoder
    runs at any sequence length."""
    dyn = bm.ort_session(crnn(image_size=32, hidden=16, dynamic_width=True), 1)
    static = bm.ort_session(crnn(image_size=32, hidden=16), 1)
    x = np.random.default_rng(0).standard_normal((1, 1, 32, 32)).astype(np.float32)
    assert np.array_equal(dyn.run(None, {"input": x})[0], static.run(None, {"input": x})[0])
    assert dyn.run(None, {"input": np.ones((1, 1, 32, 100), np.float32)})[0].shape == (1, 25, 37)
    encoder = dynamic.encoder_symbolic_sequence(num_layers=1, hidden=32, heads=4, ffn=64,
                                                vocab=50, max_positions=64)
    session = bm.ort_session(encoder, 1)
    for length in (1, 17):
        feeds = dynamic.zoo_inputs(encoder, {"input_ids": [1, length]}, 0)
        assert session.run(None, feeds)[0].shape == (1, length, 32)

"""The e2e benchmark's machinery: VM call counts, the OpenVINO contender, the record and
summary keys of scripts/bench_e2e.py (on tiny models; the timings are not checked)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REL_TOL, conv_relu_model

from tvm_cocopie.api import compile_model
from tvm_cocopie.bench import timing as bm
from tvm_cocopie.bench.e2e import compare_workload, summarize, table
from tvm_cocopie.bench.runtime_stats import (
    ALLOCATIONS,
    call_stats,
    compiled_model_stats,
    layout_transform_count,
    vm_call_counts,
)
from tvm_cocopie.models.workloads import Workload
from tvm_cocopie.target import host_target


@pytest.fixture(scope="module")
def tiny():
    """Conv + bias -> ReLU (an intermediate tensor) -> and a global average pool: two outputs."""
    model = conv_relu_model(size=16)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    return Workload("conv_relu", model, {"x": x})


@pytest.fixture(scope="module")
def compiled(tiny):
    return compile_model(tiny.model, host_target(2), shapes=tiny.shapes)


def test_vm_call_counts_see_allocations_and_kernels(tiny, compiled):
    first = vm_call_counts(compiled.executable, [tiny.inputs["x"]], runs=1)
    assert sum(first[name] for name in ALLOCATIONS) > 0, first
    later = vm_call_counts(compiled.executable, [tiny.inputs["x"]])
    stats = call_stats(later)
    # the two outputs are new tensors every run (a storage and a tensor each); the
    # intermediates are allocated once per VM (relay_passes/static_memory.py)
    assert stats["allocations_per_run"] == 4, later
    assert stats["kernel_calls_per_run"] >= 1, later
    assert stats["vm_calls_per_run"] >= stats["allocations_per_run"] + stats["kernel_calls_per_run"]
    full = compiled_model_stats(compiled, tiny.inputs)
    assert {k: full[k] for k in stats} == stats
    assert full["output_allocations_per_run"] == 4
    assert full["intermediate_allocations_per_run"] == 0
    # the model's own VM carries no instrument: it still runs, and gives the same numbers
    ref = bm.ort_session(tiny.model, 1).run(None, tiny.inputs)
    assert bm.max_rel_error(compiled(**tiny.inputs), ref) < REL_TOL


def test_call_stats_split_builtins_from_kernels():
    counts = {"vm.builtin.alloc_tensor": 3, "vm.builtin.alloc_storage": 1,
              "vm.builtin.null_value": 5, "fused_conv2d_relu": 2, "mean": 1}
    assert call_stats(counts) == {"allocations_per_run": 4, "vm_calls_per_run": 12,
                                  "kernel_calls_per_run": 3}


def test_layout_transform_count_is_a_count(tiny):
    n = layout_transform_count(tiny.model, host_target(2), tiny.shapes)
    assert isinstance(n, int) and n >= 0


def test_openvino_matches_onnx_runtime(tiny):
    pytest.importorskip("openvino")
    run = bm.openvino_runner(bm.openvino_model(tiny.model, 2, tiny.shapes), tiny.inputs)
    ref = bm.ort_session(tiny.model, 1).run(None, tiny.inputs)
    out = run()
    assert len(out) == len(ref)
    assert [o.shape for o in out] == [r.shape for r in ref]
    assert bm.max_rel_error(out, ref) < REL_TOL


def test_openvino_pins_float32_and_threads(tiny):
    pytest.importorskip("openvino")
    config = bm.openvino_config(bm.openvino_model(tiny.model, 1, tiny.shapes))
    assert config["INFERENCE_NUM_THREADS"] == "1"
    assert config["PERFORMANCE_HINT"] == "LATENCY"
    assert config["INFERENCE_PRECISION_HINT"] == "float32"
    assert config["ENABLE_CPU_PINNING"] == "False"


def test_compare_workload_record_and_summary(tiny):
    pytest.importorskip("openvino")
    rec = compare_workload(tiny, host_target(2), 2, repeat=1, max_seconds=1.0)
    for key in ("ort_ms", "openvino_ms", "tvm_ms", "cocopie_ms", "cocopie_over_ort",
                "cocopie_over_openvino", "cocopie_over_tvm", "allocations_per_run",
                "vm_calls_per_run", "kernel_calls_per_run", "layout_transforms"):
        assert rec[key] is not None, key
    assert "openvino_error" not in rec
    assert rec["openvino_config"]["INFERENCE_NUM_THREADS"] == "2"
    assert rec["max_rel_err"] < REL_TOL and rec["openvino_max_rel_err"] < REL_TOL
    assert rec["allocations_per_run"] > 0
    summary = summarize([rec, {"model": "gone", "skipped": "no network"}])
    assert summary["geomean_cocopie_over_ort"] == pytest.approx(rec["cocopie_over_ort"])
    assert summary["worst_cocopie_over_ort"] == pytest.approx(rec["cocopie_over_ort"])
    assert summary["geomean_cocopie_over_openvino"] == pytest.approx(rec["cocopie_over_openvino"])
    assert summary["skipped"] == ["gone"] and summary["openvino_failed"] == {}
    assert "OV ms" in table([rec])


def test_openvino_failure_is_recorded(tiny, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("Exception from src/inference: cannot read this model")

    monkeypatch.setattr(bm, "openvino_model", broken)
    rec = compare_workload(tiny, host_target(2), 2, repeat=1, max_seconds=1.0, stock=False)
    assert rec["openvino_ms"] is None and rec["cocopie_over_openvino"] is None
    assert rec["openvino_config"] is None and rec["tvm_ms"] is None
    assert "cannot read this model" in rec["openvino_error"]
    summary = summarize([rec])
    assert summary["openvino_failed"] == {"conv_relu": rec["openvino_error"]}
    assert summary["geomean_cocopie_over_openvino"] is None


def test_summary_worst_is_the_largest_ratio():
    recs = [{"model": m, "cocopie_over_ort": r, "cocopie_over_openvino": o,
             "cocopie_over_tvm": 0.1, "max_abs_err": 0.0, "max_rel_err": 0.0,
             "cocopie_compile_s": 1.0, "allocations_per_run": 3, "layout_transforms": 2}
            for m, r, o in (("a", 0.5, 1.0), ("b", 2.0, 4.0))]
    summary = summarize(recs)
    assert summary["worst_cocopie_over_ort"] == 2.0
    assert summary["worst_cocopie_over_ort_model"] == "b"
    assert summary["geomean_cocopie_over_ort"] == pytest.approx(1.0)
    assert summary["geomean_cocopie_over_openvino"] == pytest.approx(2.0)
    assert summary["total_layout_transforms"] == 4

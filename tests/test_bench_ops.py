"""The operator sweep's machinery (scripts/bench_ops.py): a case is compiled, checked
against ONNX Runtime and timed, whole calls and kernels alone; a failure is recorded;
the summary names the cases over twice ONNX Runtime's kernel time (timings not checked,
only that they are there)."""

from __future__ import annotations

import pytest

from tvm_cocopie.bench import ops
from tvm_cocopie.errors import CocopieError
from tvm_cocopie.target import host_target


def test_a_case_is_checked_and_timed():
    rec = ops.measure_case("conv_transpose_2x2_s2", host_target(2), 2, repeat=1,
                           max_seconds=1.0)
    assert "error" not in rec, rec
    assert rec["max_rel_err"] < 1e-4
    for key in ("ort_ms", "cocopie_ms", "kernels_ms", "kernels_over_ort", "cocopie_over_ort"):
        assert rec[key] > 0, key
    assert rec["slowest_kernels"]


def test_every_case_builds_its_model():
    for name, build in ops.CASES.items():
        model, feeds = build(ops.CaseInputs(0))
        assert set(feeds) <= {i.name for i in model.graph.input}, name
    assert set(ops.QUICK) <= set(ops.CASES)


def test_summary_and_unknown_case():
    records = [{"case": "a", "kernels_over_ort": 3.0, "cocopie_over_ort": 3.5,
                "max_rel_err": 1e-6},
               {"case": "b", "kernels_over_ort": 0.5, "cocopie_over_ort": 0.9,
                "max_rel_err": 2e-6},
               {"case": "c", "error": "boom"}]
    summary = ops.summarize(records)
    assert summary["over_2x_ort"] == ["a"] and summary["failed"] == ["c"]
    assert summary["worst_case"] == "a" and summary["geomean_kernels_over_ort"] == pytest.approx(
        (3.0 * 0.5) ** 0.5)
    with pytest.raises(CocopieError, match="unknown operator case"):
        ops.measure_case("nope", host_target(2), 2)

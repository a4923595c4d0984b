"""Measuring for the latency model: kernels inside a model, design-space samples."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_ffi
from transfer_helpers import tiny_cnn

from tvm_cocopie.bench.latency import measure_model, model_prediction, scheduled_kernels
from tvm_cocopie.latency import FEATURE_NAMES, Dataset, LatencyModel, Row
from tvm_cocopie.metaschedule import Measurer
from tvm_cocopie.target import parse_target
from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels
from tvm_cocopie.transfer_tuning.sampler import collect_samples, sample_schedules
from tvm_cocopie.transfer_tuning.transfer import check_numerics

TARGET = parse_target(None)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    model = tiny_cnn(channels=(8, 16), size=24)
    ds = Dataset(TARGET, tmp_path_factory.mktemp("lat") / "d.sqlite")
    row = measure_model("tiny", model, ds, TARGET, runs=10)
    return model, ds, row


def test_model_rows_cover_the_kernels_it_runs(measured):
    model, ds, row = measured
    kernels = scheduled_kernels(model, TARGET)
    rows = ds.rows(kinds=("model",))
    assert rows and {r.name for r in rows} <= {name for name, _, _ in kernels}
    assert all(r.features[FEATURE_NAMES.index("standalone")] == 0 for r in rows)
    assert sum(row.kernels.values()) == row.vm_calls == sum(r.calls for r in rows)
    # the kernels' times inside the model make up most of the inference, not more
    kernel_ms = sum(r.latency_us * r.calls for r in rows) / 1e3
    assert 0.5 * row.latency_ms < kernel_ms < 1.25 * row.latency_ms, (kernel_ms, row.latency_ms)



def test_measurements_outlive_a_change_of_features(measured, tmp_path):
    """Rows stored under an older feature schema are featurized again from the
    scheduled kernels kept beside them."""
    model, ds, row = measured
    kernels = {name: func for name, func, _ in scheduled_kernels(model, TARGET)}
    old = Dataset(TARGET, tmp_path / "d.sqlite")
    old.schema = "an-older-schema"
    old.put([Row(r.source, r.kind, r.kernel, r.name, r.features, r.latency_us, r.calls,
                 kernels[r.name]) for r in ds.rows()])
    old.put_model(row)
    new = Dataset(TARGET, tmp_path / "d.sqlite")
    assert len(new) == 0
    seen = []

    def featurize(func, kind):
        seen.append((func.script(), kind))
        return np.full(len(FEATURE_NAMES), 7.0, np.float32)

    assert new.refeaturize(featurize) == len(ds.rows())
    assert {script for script, _ in seen} == {kernels[r.name].script() for r in ds.rows()}
    assert all(np.all(r.features == 7.0) for r in new.rows())
    assert [m.source for m in new.models()] == ["tiny"]
    assert new.refeaturize(featurize) == 0  # once


def test_prediction_names_every_kernel(measured):
    model, ds, _ = measured
    lm = LatencyModel(TARGET)
    rows = ds.rows()
    lm.train(rows * 3, validation=0, rounds=50)
    lm.calibrate(ds.models(), {r.kernel: r.latency_us for r in rows})
    pred = model_prediction(lm, model, TARGET)
    assert {name for name, _, _ in pred.kernels} == {name for name, _, _ in
                                                       scheduled_kernels(model, TARGET)}
    assert pred.total_ms > 0 and all(us > 0 for _, _, us in pred.kernels)


def test_design_space_samples_are_distinct_and_compute_the_kernel():
    model = tiny_cnn(channels=(8, 16), size=12)
    kernel = next(k for k in extract_kernels(model, TARGET) if "conv2d_nchwc" in k.name)
    samples = sample_schedules(kernel.mod, TARGET, 4, seed=3)
    assert len(samples) >= 2
    assert len({tvm_ffi.structural_hash(s.mod) for s in samples}) == len(samples)
    for sch in samples:
        check_numerics(sch.mod, kernel.mod, TARGET)  # raises if a sample computes otherwise
    again = sample_schedules(kernel.mod, TARGET, 4, seed=3)
    assert [tvm_ffi.structural_hash(s.mod) for s in again] == [
        tvm_ffi.structural_hash(s.mod) for s in samples]  # seeded


def test_collect_samples_stores_standalone_rows(tmp_path):
    model = tiny_cnn(channels=(8, 16), size=12)
    ds = Dataset(TARGET, tmp_path / "d.sqlite")
    stored = collect_samples("tiny", model, ds, TARGET, Measurer(TARGET, min_repeat_ms=2),
                             per_model=1, per_kernel=3)
    rows = ds.rows(kinds=("sample",))
    assert stored == len(rows) >= 2
    assert all(r.features[FEATURE_NAMES.index("standalone")] == 1 for r in rows)
    assert len({r.kernel.split(":")[0] for r in rows}) == 1
    assert all(r.latency_us > 0 for r in rows)


def test_metaschedule_database_records_become_rows(tmp_path):
    """A MetaSchedule database (here: every kernel of a small CNN on its default
    schedule, 1 ms each) read into tuning rows for the latency model."""
    from transfer_helpers import seed_database

    from tvm_cocopie.transfer_tuning.readers import read_database_dir
    from tvm_cocopie.transfer_tuning.sampler import rows_from_records

    model = tiny_cnn(channels=(8, 16), size=12)
    records, _ = read_database_dir(seed_database(model, TARGET, tmp_path / "db"), TARGET)
    rows = rows_from_records(records, TARGET, "tiny-tuned")
    assert rows and len(rows) == len(records)
    assert all(r.kind == "tuning" and r.latency_us == pytest.approx(1000.0) for r in rows)
    assert all(r.features[FEATURE_NAMES.index("standalone")] == 1 for r in rows)
    ds = Dataset(TARGET, tmp_path / "d.sqlite")
    ds.put(rows)
    assert len(ds.rows(kinds=("tuning",))) == len(rows)

"""DNNFusion's yellow pairs and the latency model: measured candidates train it, and a
pair the profiling database does not hold is decided by its prediction, not measured."""

from __future__ import annotations

import dataclasses

import numpy as np
from conftest import make_model, ort_run
from onnx import TensorProto, helper

import tvm_cocopie
from tvm_cocopie.bench.fusion import kernel_calls
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.latency import Dataset, LatencyModel
from tvm_cocopie.pipeline import PipelineOptions, run_until
from tvm_cocopie.relay_passes.fusion.apply import DNNFusion
from tvm_cocopie.relay_passes.fusion.database import ProfileDB
from tvm_cocopie.relay_passes.fusion.profiler import MeasuredDecision
from tvm_cocopie.schedules import default_rules
from tvm_cocopie.target import host_target

SHAPE = [8, 64, 64]
#: deterministic trees from a handful of rows; one thread (xgboost's threads spin
#: against whatever else keeps the cores busy: 100x slower on a loaded 2-core machine)
TRAIN_PARAMS = {"subsample": 1.0, "colsample_bytree": 1.0, "min_child_weight": 1, "nthread": 1}


def _yellow_model():
    """A row maximum broadcast back (Many-to-Many then One-to-Many: a yellow pair)."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], axes=[2], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["y"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)])


def test_measured_candidates_train_a_model_that_then_decides_alone(tmp_path):
    """Measured once (into a scratch profiling database), the candidates become ``fusion``
    rows of the latency dataset: the fused kernel and each part. A model trained on
    them (the fused kernel made 10x faster than measured, so that fusing is what it
    predicts) decides the pair on a fresh profiling database without measuring it or
    writing to it, and the model compiled so fuses and computes what ONNX Runtime
    does."""
    target = host_target()
    rules = default_rules(target)
    model = _yellow_model()
    mod = run_until(from_onnx(model), target, "legalize")
    dataset = Dataset(target, tmp_path / "latency.sqlite")
    measuring = MeasuredDecision(target, rules, ProfileDB(tmp_path / "scratch.sqlite"),
                                 dataset=dataset)
    DNNFusion(measuring)(mod)
    rows = dataset.rows(kinds=["fusion"])
    assert measuring.measured >= 1 and rows
    fused_rows = [r for r in rows if "+" in r.name]
    assert fused_rows and len(rows) > len(fused_rows)  # the fused kernels and their parts
    assert all(r.features[-1] == 1.0 and r.latency_us > 0 for r in rows)  # standalone

    faster = [dataclasses.replace(r, latency_us=r.latency_us / 10) if "+" in r.name else r
              for r in rows]
    latency = LatencyModel(target, params=TRAIN_PARAMS)
    latency.train(faster * 4, rounds=100, validation=0)
    path = latency.save(tmp_path / "latency.json")

    db_path = tmp_path / "fusion.sqlite"
    predicting = MeasuredDecision(target, rules, ProfileDB(db_path),
                                  predictor=LatencyModel.load(target, path),
                                  measure_missing=False)
    fused = DNNFusion(predicting)(mod)
    assert predicting.predicted >= 1 and predicting.measured == 0
    assert len(ProfileDB(db_path)) == 0
    apart = DNNFusion(None)(mod)  # yellow pairs kept apart
    assert len(kernel_calls(fused)) < len(kernel_calls(apart))

    options = PipelineOptions(fusion="dnnfusion", fusion_db=str(db_path),
                              latency_model=str(path))
    planned = run_until(from_onnx(model), target, "fusion", options)  # the option's way in
    assert len(kernel_calls(planned)) == len(kernel_calls(fused))
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    got = tvm_cocopie.compile(model, target=target, options=options)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert len(ProfileDB(db_path)) == 0


def test_without_a_predictor_unmeasured_pairs_stay_apart(tmp_path):
    """``measure_missing=False`` and no latency model: nothing is measured or predicted,
    the pair stays apart."""
    target = host_target()
    mod = run_until(from_onnx(_yellow_model()), target, "legalize")
    decide = MeasuredDecision(target, default_rules(target), ProfileDB(tmp_path / "f.sqlite"),
                              measure_missing=False)
    DNNFusion(decide)(mod)
    assert decide.measured == decide.predicted == decide.reused == 0

"""Transfer-tuning with the latency model: the pre-screen measures only the candidates it
predicts fastest, and every measured candidate trains the model (kind ``tuning``)."""

from __future__ import annotations

import math

import numpy as np
from transfer_helpers import matmul_relu, tile_matmul

from tvm_cocopie.latency import Dataset, LatencyModel, Row, kernel_features
from tvm_cocopie.target import parse_target
from tvm_cocopie.transfer_tuning import kernel_class, search
from tvm_cocopie.transfer_tuning.readers import SourceRecord
from tvm_cocopie.transfer_tuning.transfer import transfer

TARGET = parse_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
#: inner tiles (i, j, k) of the source schedules: four different transfers
TILES = [((1, 4, 8), (1, 4, 8), (1, 8)), ((1, 2, 4), (1, 2, 8), (1, 4)),
         ((1, 8, 2), (1, 1, 8), (1, 16)), ((1, 1, 16), (1, 2, 16), (1, 2))]


def _records(src):
    return [SourceRecord(src, tile_matmul(src, tiles=i_j, k_tiles=k).trace, [1e-3], TARGET,
                         f"src#{n}", "src")
            for n, (*i_j, k) in enumerate(TILES)]


def _latency_model(records, kernel) -> LatencyModel:
    """A real model trained on synthetic rows: the features of the records' schedules
    transferred to ``kernel``, made-up microseconds (the first record's the fastest)."""
    rows = []
    for n, rec in enumerate(records):
        result = transfer(rec, kernel.mod, TARGET, validate=False)
        assert result.ok, result.reason
        features = kernel_features(result.schedule.mod["main"], TARGET, standalone=True)
        rows += [Row("synthetic", "sample", f"{n}:{r}", "matmul", features, 10.0 * (n + 1))
                 for r in range(2)]
    model = LatencyModel(TARGET, params={"nthread": 1, "subsample": 1.0,
                                         "colsample_bytree": 1.0})
    model.train(rows, rounds=50, validation=0)
    return model


def test_prescreen_measures_only_the_fastest_predicted_and_rows_are_kept(tmp_path):
    src = matmul_relu(64, 64, 64)
    kernel = kernel_class.Kernel("k", matmul_relu(48, 96, 32), 1)
    measurer = search.Measurer(TARGET, number=1, repeat=1, min_repeat_ms=1)
    dataset = Dataset(TARGET, tmp_path / "latency.sqlite")
    records = _records(src)
    rep = search.transfer_tune(None, records, TARGET, tmp_path / "out", mode="pool",
                               measurer=measurer, kernels=[kernel], check=False,
                               prescreen=_latency_model(records, kernel), prescreen_keep=1,
                               dataset=dataset)
    (k,) = rep.kernels
    transferred = k.candidates - 2  # untuned and default are always candidates
    screened = {cid: why for cid, why in k.rejected.items() if why.startswith("pre-screened")}
    assert transferred >= 3, k.rejected
    assert len(screened) == rep.prescreened == transferred - 1
    assert all("kept the 1 fastest ranked" in why for why in screened.values())
    assert rep.as_dict()["prescreened"] == transferred - 1

    cache = search.MeasurementCache(tmp_path / "out" / search.CACHE_FILE)
    origins = {r.origin for r in records}
    # the standalone measurements (a winner's side-by-side confirmations are keyed
    # "confirm1:<origin>", "confirm2:<origin>" and left out)
    timed = [key.split(":", 1)[1] for key, value in cache.data.items()
             if key.split(":", 1)[-1] in origins
             and not str(value[1]).startswith("rejected")]
    assert timed == [records[0].origin]  # the one predicted fastest
    confirms = sum(":confirm" in key for key in cache.data)
    assert measurer.measured == 2 + 1 + confirms  # baselines, one candidate, confirmation

    rows = dataset.rows(kinds=["tuning"])
    assert {r.kernel.split(":", 1)[1] for r in rows} == {search.UNTUNED, search.DEFAULT, *timed}
    assert all(r.source == "transfer" and r.name == "k" and r.features[-1] == 1.0
               and math.isfinite(r.latency_us) and r.latency_us > 0 for r in rows)
    assert np.isclose(next(r for r in rows if r.kernel.endswith(timed[0])).latency_us,
                      1e6 * cache.get(kernel.mod, timed[0])[0])

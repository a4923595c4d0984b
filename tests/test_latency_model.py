"""The latency model (issue 18): features, dataset, training, files, leave-one-out."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_cocopie.latency import (
    FEATURE_NAMES,
    Dataset,
    FeatureError,
    LatencyModel,
    LatencyModelError,
    Row,
    kernel_features,
)
from tvm_cocopie.latency.dataset import ModelRow, target_key
from tvm_cocopie.latency.evaluate import leave_one_model_out, spearman
from tvm_cocopie.latency.features import feature_schema, loop_features

TARGET = {"kind": "llvm", "mcpu": "x86-64", "num-cores": 2}
NAMES = list(FEATURE_NAMES)


def _matmul(m: int, n: int, k: int) -> tvm.tirx.PrimFunc:
    a = te.placeholder((m, k), name="a")
    b = te.placeholder((k, n), name="b")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="matmul")
    return te.create_prim_func([a, b, c])


def _add(n: int) -> tvm.tirx.PrimFunc:
    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    c = te.compute((n,), lambda i: a[i] + b[i] * 2.0, name="add")
    return te.create_prim_func([a, b, c])


def _feature(vector, name: str) -> float:
    return float(vector[NAMES.index(name)])


def _synthetic_rows(source: str = "synthetic"):
    """Kernels of many sizes whose latency is known by construction: a roofline,
    ``max(flops / 40 GFLOP/s, bytes / 8 GB/s) + 2 us``, from their own counts."""
    rows = []
    sizes = [(m, n, k) for m in (8, 16, 32, 64, 96) for n in (16, 48, 128) for k in (8, 32, 128)]
    funcs = [(f"mm{m}x{n}x{k}", _matmul(m, n, k)) for m, n, k in sizes]
    funcs += [(f"add{n}", _add(n)) for n in (256, 1024, 4096, 16384, 65536, 262144, 1 << 20)]
    for i, (name, func) in enumerate(funcs):
        f = kernel_features(func, TARGET)
        flops = 2 ** _feature(f, "flops_log2") - 1
        io = 2 ** _feature(f, "io_bytes_log2") - 1
        us = max(flops / 40e3, io / 8e3) + 2.0
        rows.append(Row(source, "model", f"k{i}", name, f, us, 1))
    return rows


def test_features_count_the_work():
    small, big = kernel_features(_matmul(16, 16, 16), TARGET), kernel_features(
        _matmul(64, 64, 64), TARGET)
    assert len(small) == len(FEATURE_NAMES)
    # 2 ops (mul, add) per iteration, 16^3 and 64^3 iterations
    assert _feature(small, "flops_log2") == pytest.approx(np.log2(1 + 2 * 16**3), abs=0.01)
    assert _feature(big, "flops_log2") == pytest.approx(np.log2(1 + 2 * 64**3), abs=0.01)
    assert _feature(big, "io_bytes_log2") == pytest.approx(np.log2(1 + 3 * 64 * 64 * 4), abs=0.01)
    assert _feature(small, "class_matmul") == 1
    assert _feature(small, "standalone") == 0
    assert _feature(kernel_features(_add(64), TARGET, standalone=True), "standalone") == 1


def _executed(func) -> float:
    return 2 ** _feature(kernel_features(func, TARGET), "exec_flops_log2") - 1


def test_executed_operations_hoist_fold_and_merge():
    """``exec_flops`` counts what runs once compiled: a reduction all of it; a value
    of an outer loop once per outer iteration (a squeeze-excite's sigmoid per channel,
    not per pixel); a repeated subexpression once; a selection among constants by an
    unrolled loop not at all. ``flops`` counts every operation at every iteration."""
    assert _executed(_matmul(16, 16, 16)) == pytest.approx(2 * 16**3, rel=1e-6)
    c, h, w = 8, 16, 32
    x = te.placeholder((c, h, w), name="x")
    s = te.placeholder((c,), name="s")
    se = te.create_prim_func([x, s, te.compute(
        (c, h, w), lambda i, j, k: x[i, j, k] * te.sigmoid(s[i] + 1.0), name="excite")])
    assert 2 ** _feature(kernel_features(se, TARGET), "flops_log2") - 1 == pytest.approx(
        3 * c * h * w, rel=1e-6)
    assert _executed(se) == pytest.approx(c * h * w + 2 * c, rel=1e-6)
    a = te.placeholder((256,), name="a")
    square = te.create_prim_func([a, te.compute(
        (256,), lambda i: (a[i] + 1.0) * (a[i] + 1.0), name="square")])
    assert _executed(square) == pytest.approx(2 * 256, rel=1e-6)  # the sum once, the product
    b = te.placeholder((64, 4), name="b")
    picked = te.create_prim_func([b, te.compute(
        (64, 4), lambda i, j: b[i, j] * tvm.tirx.Select(j == 0, tvm.tirx.const(1.0),
                                                         tvm.tirx.const(-0.5)), name="pick")])
    sch = tvm.s_tir.Schedule(picked)
    sch.unroll(sch.get_loops(sch.get_sblock("pick"))[1])
    assert _executed(sch.mod["main"]) == pytest.approx(64 * 4, rel=1e-6)  # the products


def test_symbolic_kernel_needs_dims():
    n = tvm.tirx.Var("n", "int64")
    a = te.placeholder((n,), name="a")
    c = te.compute((n,), lambda i: a[i] * 3.0, name="scale")
    func = te.create_prim_func([a, c])
    with pytest.raises(FeatureError, match="symbolic"):
        loop_features(func)
    values, _ = loop_features(func, {"n": 1000})
    assert values[0] == pytest.approx(np.log2(1 + 1000), abs=0.01)  # flops_log2
    with pytest.raises(FeatureError, match="concrete"):
        kernel_features(func, TARGET)


def test_recovers_known_latency():
    rows = _synthetic_rows()
    rng = np.random.default_rng(3)
    held = set(rng.choice(len(rows), size=len(rows) // 5, replace=False).tolist())
    train = [r for i, r in enumerate(rows) if i not in held]
    test = [r for i, r in enumerate(rows) if i in held]
    model = LatencyModel(TARGET)
    model.train(train, validation=0)
    pred = model.predict([r.features for r in test])
    errors = np.abs(pred - [r.latency_us for r in test]) / [r.latency_us for r in test]
    assert np.median(errors) < 0.15, errors
    # and the ranking of held-out kernels by predicted time is the true one, nearly
    assert spearman(pred, [r.latency_us for r in test]) > 0.9


def _sample_groups():
    """Design-space-like groups: per kernel, schedules (here: variants of one shape)
    whose latency is known by construction (the roofline of ``_synthetic_rows``)."""
    rows = []
    for g, (m, n) in enumerate((m, n) for m in (16, 32, 64, 96) for n in (16, 48, 128)):
        for i, k in enumerate((8, 16, 32, 64, 128)):
            f = kernel_features(_matmul(m, n, k), TARGET, standalone=True)
            flops = 2 ** _feature(f, "flops_log2") - 1
            io = 2 ** _feature(f, "io_bytes_log2") - 1
            us = max(flops / 40e3, io / 8e3) + 2.0
            rows.append(Row(f"src{g % 3}", "sample", f"g{g}:{i}", f"mm{m}x{n}", f, us, 1))
    return rows


def test_ranking_head_orders_schedules_of_unseen_kernels(tmp_path):
    rows = _sample_groups()
    train = [r for r in rows if r.source != "src0"]
    test = [r for r in rows if r.source == "src0"]
    model = LatencyModel(TARGET)
    model.train(train + _synthetic_rows(), validation=0)
    assert model.rank_booster is not None
    by_group: dict = {}
    for r in test:
        by_group.setdefault(r.kernel.split(":")[0], []).append(r)
    for group in by_group.values():
        scores = model.rank([r.features for r in group])
        assert spearman(scores, [r.latency_us for r in group]) > 0.8
    # saved and loaded with the model; a model without sample groups ranks by time
    path = model.save(tmp_path / "ranked.json")
    features = np.stack([r.features for r in test])
    assert np.array_equal(LatencyModel.load(TARGET, path).rank(features), model.rank(features))
    plain = LatencyModel(TARGET)
    plain.train(_synthetic_rows(), validation=0)
    assert plain.rank_booster is None
    assert np.allclose(plain.rank(features), np.log(plain.predict(features)))


def test_update_adds_trees_for_new_rows():
    rows = _synthetic_rows()
    model = LatencyModel(TARGET)
    model.train([r for r in rows if not r.name.startswith("add")], validation=0)
    new = [Row(r.source, r.kind, r.kernel, r.name, r.features, r.latency_us * 3, 1)
           for r in rows if r.name.startswith("add")]
    result = model.update(new)
    assert result["after_median_err_pct"] < result["before_median_err_pct"]
    assert model.rows == len(rows)


def test_model_file_round_trip_and_refusals(tmp_path):
    rows = _synthetic_rows()
    model = LatencyModel(TARGET)
    model.train(rows)
    model.scale, model.call_slope = 0.9, 0.03
    path = model.save(tmp_path / "m.json")
    features = np.stack([r.features for r in rows[:7]])
    first = LatencyModel.load(TARGET, path).predict(features)
    second = LatencyModel.load(TARGET, path).predict(features)
    assert np.array_equal(first, second)  # deterministic for a fixed file
    assert np.allclose(first, model.predict(features), rtol=1e-6)
    loaded = LatencyModel.load(TARGET, path)
    assert (loaded.scale, loaded.call_slope) == (0.9, 0.03)

    with pytest.raises(LatencyModelError, match="no latency model"):
        LatencyModel.load(TARGET, tmp_path / "missing.json")
    with pytest.raises(LatencyModelError, match="another target"):
        LatencyModel.load({"kind": "llvm", "mcpu": "cortex-a72",
                           "mtriple": "aarch64-linux-gnu", "num-cores": 4}, path)

    head = json.loads(path.read_text())

    def variant(name, **changes):
        p = tmp_path / name
        p.write_text(json.dumps({**head, **changes}))
        return p

    with pytest.raises(LatencyModelError, match="stale"):
        LatencyModel.load(TARGET, variant("stale.json", features_schema="0123456789abcdef"))
    with pytest.raises(LatencyModelError, match="not a tvm_cocopie latency model"):
        LatencyModel.load(TARGET, variant("foreign.json", format="something-else"))
    raw = bytearray(base64.b64decode(head["booster"]))
    raw[len(raw) // 2] ^= 0xFF
    with pytest.raises(LatencyModelError, match="corrupt"):
        LatencyModel.load(TARGET, variant("flipped.json",
                                          booster=base64.b64encode(bytes(raw)).decode()))
    rank = bytearray(base64.b64decode(head["rank_booster"]))
    if rank:
        rank[len(rank) // 2] ^= 0xFF
    with pytest.raises(LatencyModelError, match="corrupt"):
        LatencyModel.load(TARGET, variant("rank_flipped.json",
                                          rank_booster=base64.b64encode(bytes(rank) or b"x")
                                          .decode()))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(LatencyModelError, match="unreadable or corrupt"):
        LatencyModel.load(TARGET, garbage)


def test_untrained_and_mismatched_use_is_refused():
    with pytest.raises(LatencyModelError, match="not trained"):
        LatencyModel(TARGET).predict(np.zeros((1, len(FEATURE_NAMES))))
    with pytest.raises(LatencyModelError, match="too few"):
        LatencyModel(TARGET).train(_synthetic_rows()[:2])


def test_dataset_round_trip_and_corrupt_file(tmp_path):
    path = tmp_path / "latency.sqlite"
    ds = Dataset(TARGET, path)
    rows = _synthetic_rows("a")[:5] + _synthetic_rows("b")[:3]
    ds.put(rows)
    ds.put_model(ModelRow("a", 1.5, 5, {r.kernel: 1 for r in rows[:5]}))
    again = Dataset(TARGET, path)
    assert len(again) == 8
    assert [r.source for r in again.rows(exclude_sources=("a",))] == ["b"] * 3
    assert np.array_equal(again.rows(sources=("a",))[0].features, rows[0].features)
    assert again.has("a", "model") and not again.has("a", "sample")
    assert again.models()[0].kernels == {r.kernel: 1 for r in rows[:5]}
    # another target sees none of these rows
    assert len(Dataset({"kind": "llvm", "mcpu": "znver1", "num-cores": 2}, path)) == 0
    with pytest.raises(ValueError, match="kind"):
        ds.put([Row("a", "guess", "k", "n", rows[0].features, 1.0)])
    path.write_bytes(b"this is not sqlite" * 100)
    fresh = Dataset(TARGET, path)
    assert len(fresh) == 0
    assert list(tmp_path.glob("latency.sqlite.broken-*"))


def test_leave_one_model_out_holds_the_model_out(tmp_path):
    ds = Dataset(TARGET, tmp_path / "d.sqlite")
    rows = _synthetic_rows()
    groups = {f"m{i}": rows[i::4] for i in range(4)}
    for source, group in groups.items():
        ds.put([Row(source, r.kind, r.kernel, r.name, r.features, r.latency_us, 2)
                for r in group])
        total = 2 * sum(r.latency_us for r in group) / 1000.0
        # models of 25 to 200 VM calls, their time the kernels' sum times a factor
        # known by construction: 1.1 at 100 calls, growing as calls ** 0.05
        calls = 25 * 2 ** int(source[1:])
        ds.put_model(ModelRow(source, total * 1.1 * (calls / 100) ** 0.05, calls,
                              {r.kernel: 2 for r in group}))
    result = leave_one_model_out(ds, rounds=200)
    assert [f["model"] for f in result["folds"]] == ["m0", "m1", "m2", "m3"]
    summary = result["summary"]
    assert summary["kernels"] == len(rows)
    assert summary["kernel_median_err_pct"] < 25
    # the factor is recovered from the other three models alone
    for fold in result["folds"]:
        assert fold["scale"] == pytest.approx(1.1, rel=1e-6)
        assert fold["call_slope"] == pytest.approx(0.05, abs=1e-6)
    assert summary["model_median_err_pct"] < 10
    # a model whose calls are all alike gets the scale alone
    one = LatencyModel(TARGET)
    one.calibrate([ModelRow("a", 2.4, 50, {"k0": 1}), ModelRow("b", 4.8, 50, {"k0": 2})],
                  {"k0": 2000.0})
    assert (one.scale, one.call_slope) == (pytest.approx(1.2), 0.0)
    # folds trained in two worker processes: the same folds, in the same order
    parallel = leave_one_model_out(ds, rounds=200, jobs=2)
    assert [f["model"] for f in parallel["folds"]] == ["m0", "m1", "m2", "m3"]
    for a, b in zip(result["folds"], parallel["folds"]):
        assert a["predicted_ms"] == pytest.approx(b["predicted_ms"], rel=1e-9)
        assert [k["predicted_us"] for k in a["kernels"]] == pytest.approx(
            [k["predicted_us"] for k in b["kernels"]], rel=1e-9)
    # a stored source excluded trains and tests nothing: as if it had never been put
    without = leave_one_model_out(ds, rounds=200, exclude_sources={"m3"})
    never = Dataset(TARGET, tmp_path / "never.sqlite")
    never.put([r for r in ds.rows() if r.source != "m3"])
    for m in ds.models():
        if m.source != "m3":
            never.put_model(m)
    alone = leave_one_model_out(never, rounds=200)
    assert [f["model"] for f in without["folds"]] == ["m0", "m1", "m2"]
    assert without["summary"]["rows"] == len(rows) - len(groups["m3"])
    for a, b in zip(without["folds"], alone["folds"]):
        assert a["predicted_ms"] == pytest.approx(b["predicted_ms"], rel=1e-9)
    assert without["folds"][0]["predicted_ms"] != pytest.approx(
        result["folds"][0]["predicted_ms"], rel=1e-9)


def test_target_key_is_canonical():
    assert target_key(TARGET) == target_key(json.dumps(TARGET))
    assert target_key(target_key(TARGET)) == target_key(TARGET)
    assert target_key(TARGET) == target_key(dict(reversed(list(TARGET.items()))))
    assert len(feature_schema()) == 16


def test_model_context_carries_what_the_whole_model_reads():
    """The same kernels run 1.6x slower in models that read more than 64 MiB per
    inference (weights no longer cached between inferences: ResNet-34 against
    ResNet-18 on the Xeon host): trained on such models, the trees take the slowdown
    from the model context, which predict_model computes from the model's kernels."""
    from tvm_cocopie.latency.model import model_context, row_context

    base = _synthetic_rows()[:30]
    big = kernel_features(_add(1 << 20), TARGET)  # 8 MiB read per call
    rows = []
    for i in range(12):
        heavy = i % 2 == 1
        calls = 4 + i  # 32-120 MiB of padding reads in the heavy models
        source = f"m{i}"
        for r in base[i % 3::3]:
            slow = 1.6 if heavy else 1.0
            rows.append(Row(source, "model", r.kernel, r.name, r.features, r.latency_us * slow))
        if heavy:
            rows.append(Row(source, "model", "pad", "pad", big, 900.0, calls))
    context = row_context(rows)
    assert np.all(np.isfinite(context))
    m1 = [r for r in rows if r.source == "m1"]
    assert context[[r.source for r in rows].index("m1")] == pytest.approx(
        model_context([r.features for r in m1], [r.calls for r in m1]))
    assert model_context([big], [8]) == pytest.approx(np.log2(1 + 8 * 2 * 4 * (1 << 20)),
                                                      rel=1e-4)
    model = LatencyModel(TARGET)
    model.train(rows, validation=0)
    kernels = [r.features for r in base[::3]]
    light = model.predict(kernels, model_context(kernels, [1] * len(kernels)))
    heavy = model.predict(kernels, model_context([*kernels, big], [1] * len(kernels) + [10]))
    assert 1.35 < float(np.median(heavy / light)) < 1.85
    # predict_model reads the context off the model's own kernels
    items = [(f"k{i}", 1, f) for i, f in enumerate(kernels)] + [("pad", 10, big)]
    whole = model.predict_model(items, len(items))
    assert np.allclose([u for _, _, u in whole.kernels[:-1]], heavy, rtol=1e-5)
    # samples timed alone have no context
    assert np.isnan(row_context([Row("s", "sample", "k:0", "k", big, 1.0)])).all()

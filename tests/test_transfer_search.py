"""Transfer (thesis §6.2.1) and model selection (§6.2.4): tiles, numerics, classes, score(T).

Real measurements (crashes, resume, RPC) are in ``test_transfer_measure.py``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transfer_helpers import matmul_relu, tile_matmul

from tvm_cocopie.transfer_tuning import kernel_class, search, tiles, transfer
from tvm_cocopie.transfer_tuning.readers import SourceRecord

LLVM = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 64), min_size=1, max_size=5), st.integers(1, 4096))
def test_adapt_tile_is_a_perfect_tiling(decision, extent):
    new = tiles.adapt_tile(decision, extent)
    assert len(new) == len(decision) and math.prod(new) == extent


def test_adapt_tile_keeps_dividing_inner_factors():
    assert tiles.adapt_tile([8, 4, 2], 64) == [8, 4, 2]
    assert tiles.adapt_tile([8, 4, 2], 96) == [12, 4, 2]
    assert tiles.adapt_tile([1, 16], 24)[1] in (12, 24, 8)


def _record(mod, name="A"):
    from tvm_cocopie.target import parse_target

    return SourceRecord(mod, tile_matmul(mod).trace, [1e-3], parse_target(LLVM), f"{name}#1", name)


@pytest.mark.parametrize("shape", [(48, 96, 32), (64, 32, 128), (30, 20, 10)])
def test_transferred_schedule_matches_unscheduled_build(shape):
    src, dst = matmul_relu(64, 64, 64), matmul_relu(*shape)
    assert kernel_class.class_key(src) == kernel_class.class_key(dst)
    result = transfer.transfer(_record(src), dst, LLVM)
    assert result.ok, result.reason
    assert transfer.check_numerics(result.mod, dst, LLVM) < 1e-3


def test_kernel_classes_ignore_shapes_not_ops():
    from tvm import te

    a = te.placeholder((8, 8), name="A")
    b = te.compute((8, 8), lambda i, j: a[i, j] + 1.0, name="B")
    other = te.create_prim_func([a, b])
    assert kernel_class.class_key(matmul_relu(8, 8, 8)) == kernel_class.class_key(matmul_relu(3, 5, 7))
    assert kernel_class.class_key(other) != kernel_class.class_key(matmul_relu(8, 8, 8))


def _kernels():
    return [kernel_class.Kernel("k1", matmul_relu(48, 96, 32), 2),
            kernel_class.Kernel("k2", matmul_relu(32, 32, 64), 1)]


def test_model_scores_prefer_models_with_the_costly_class():
    ks = _kernels()
    for k in ks:
        k.untuned_secs = 1e-3
    same = _record(matmul_relu(16, 16, 16), "same")
    from tvm import te

    a = te.placeholder((8, 8), name="A")
    other = te.compute((8, 8), lambda i, j: a[i, j] + 1.0, name="B")
    import tvm

    mod = tvm.IRModule({"main": te.create_prim_func([a, other])})
    diff = SourceRecord(mod, None, [1e-3], None, "other#1", "other")
    scores = search.model_scores(ks, [same, diff])
    assert scores["same"] > scores["other"] == 0.0


def test_kernel_sums_time_every_database_in_one_run(tmp_path):
    """A database of default-rule traces sums like the default schedules; one storing
    every kernel untuned (no-op traces) sums far slower: each database's schedules are
    the ones timed, all in one measurement run."""
    from transfer_helpers import seed_database, tiny_cnn

    from tvm_cocopie.target import parse_target
    from tvm_cocopie.transfer_tuning.database import write_database

    model = tiny_cnn(channels=(8, 16), size=24)
    kernels = kernel_class.extract_kernels(model, LLVM)
    seeded = seed_database(model, LLVM, tmp_path / "seeded")
    (tmp_path / "untuned").mkdir()
    untuned = write_database([(k, search.UNTUNED, None, 1.0) for k in kernels],
                             parse_target(LLVM), tmp_path / "untuned")
    sums = search.kernel_sums(model, LLVM, {"default": None, "seeded": seeded,
                                            "untuned": untuned}, kernels=kernels)
    assert all(math.isfinite(v) and v > 0 for v in sums.values()), sums
    assert 0.5 < sums["seeded"] / sums["default"] < 2.0, sums
    assert sums["untuned"] > 2.0 * sums["default"], sums

"""cocopie's design space for MetaSchedule, decision transfer, and the second pass."""

from __future__ import annotations

import math

import numpy as np
import pytest
from transfer_helpers import tiny_cnn
from tvm.s_tir import Schedule

from tvm_cocopie.schedules.base import annotated_blocks
from tvm_cocopie.target import cpu_info, parse_target
from tvm_cocopie.topi.cpu.conv2d_nchwc import ANNOTATION
from tvm_cocopie.transfer_tuning import readers, search
from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels
from tvm_cocopie.transfer_tuning.space import (
    RegisterBudget,
    design_spaces,
    fits_registers,
    replay_decisions,
    sampled,
    space_tag,
    tile_decisions,
)
from tvm_cocopie.transfer_tuning.transfer import check_numerics

TARGET = parse_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})


def conv_kernel(model):
    return next(k for k in extract_kernels(model, TARGET) if "conv2d_nchwc" in k.name)


def test_conv_design_spaces_start_at_the_default_tile_and_compute_the_conv():
    kernel = conv_kernel(tiny_cnn(channels=(8, 16), size=12))
    spaces = design_spaces(kernel.mod, TARGET)
    tags = [space_tag(s.trace) for s in spaces]
    assert len(spaces) == 4 and len(set(tags)) == 4, tags  # padding placement x loop order
    plain = Schedule(kernel.mod)
    (anchor,) = annotated_blocks(plain, ANNOTATION)
    ann = plain.get(anchor).annotations[ANNOTATION]
    default = [int(ann["r"])] + ([int(ann["tw"])] if int(ann["flat"]) else [int(ann["th"]), int(ann["tw"])])
    for sch in spaces:
        tiles = tile_decisions(sch.trace)
        assert [t[-1] for t in tiles] == default  # the design space's decisions: the default tile
        kinds = [k for k, _ in sampled(sch.trace)]
        assert kinds == ["SamplePerfectTile"] * len(default) + ["SampleCategorical"]
        assert fits_registers(space_tag(sch.trace), tiles, 16)
        check_numerics(sch.mod, kernel.mod, TARGET)


def test_pixel_vector_gspc_has_a_design_space():
    """The pixel-vector grouped conv (2 outputs per group in chunks of 4: 2-lane segments)
    is tunable: one space at the default tile (To, Yk, Xk), numerically the conv."""
    from tvm_cocopie.topi.cpu.gspc import PIXELS_KIND
    from tvm_cocopie.topi.cpu.tiling import pixel_tile

    kernels = extract_kernels(tiny_cnn(channels=(8, 36), size=16, groups=18), TARGET)
    (kernel,) = [k for k in kernels if "gspc_pixels" in k.name]
    (sch,) = design_spaces(kernel.mod, TARGET)
    assert space_tag(sch.trace).startswith(f"kind={PIXELS_KIND}")
    tiles = tile_decisions(sch.trace)
    assert [t[-1] for t in tiles] == list(pixel_tile(2, 16, 2, 16))
    assert fits_registers(space_tag(sch.trace), tiles, 16)
    check_numerics(sch.mod, kernel.mod, TARGET)


def test_shifted_vector_grouped_conv_has_design_spaces():
    """The shifted-vector grouped conv (2 channels per group inside chunks of 16) is tunable
    like a depthwise conv: padding placements with sampled tiles, each numerically the
    conv, and its register budget is the depthwise one."""
    from tvm_cocopie.topi.cpu.gspc_shift import KIND

    avx512 = parse_target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2})
    kernels = extract_kernels(tiny_cnn(channels=(16, 64), size=16, groups=32), avx512)
    (kernel,) = [k for k in kernels if "gspc_shift" in k.name]
    spaces = design_spaces(kernel.mod, avx512)
    assert len(spaces) == 2
    for sch in spaces:
        assert space_tag(sch.trace).startswith(f"kind={KIND}")
        assert fits_registers(space_tag(sch.trace), tile_decisions(sch.trace), 32)
        if cpu_info(parse_target(None)).f32_lanes == 16:  # runs here
            check_numerics(sch.mod, kernel.mod, avx512)
    assert not fits_registers(f"kind={KIND}", [[1, 2], [1, 8]], 16)


def test_register_budget_rejects_spilling_tiles():
    assert fits_registers("kind=conv", [[4, 2], [1, 1], [2, 5]], 16)  # 10 acc + 2 + 1
    assert not fits_registers("kind=conv", [[2, 4], [1, 2], [2, 4]], 16)  # 32 accumulators
    assert not fits_registers("kind=depthwise", [[1, 2], [1, 8]], 16)
    assert fits_registers("kind=gspc_pixels", [[1, 2], [2, 3], [1, 2]], 16)  # 12 + 2 + 1
    assert not fits_registers("kind=gspc_pixels", [[1, 2], [1, 4], [1, 2]], 16)  # 16 acc
    assert fits_registers("kind=matmul;nvec=2", [[1, 6]], 16)
    assert not fits_registers("kind=matmul;nvec=2", [[1, 7]], 16)
    assert fits_registers("kind=matmul;nvec=2", [[1, 7]], 32)  # AVX-512 has 32 registers

    kernel = conv_kernel(tiny_cnn(channels=(8, 16), size=12))
    trace = design_spaces(kernel.mod, TARGET)[0].trace
    tile_insts = [i for i in trace.insts if i.kind.name == "SamplePerfectTile"]
    big = trace
    for inst in tile_insts:  # the whole extent in registers
        extent = math.prod(int(d) for d in trace.decisions[inst])
        big = big.with_decision(inst, [1, extent], remove_postproc=True)
    sch = Schedule(kernel.mod)
    big.apply_to_schedule(sch, remove_postproc=True)
    assert not RegisterBudget(16).apply(sch)
    sch = Schedule(kernel.mod)
    trace.apply_to_schedule(sch, remove_postproc=True)
    assert RegisterBudget(16).apply(sch)


@pytest.mark.parametrize("seed", [1, 2])
def test_decisions_transfer_to_another_shape_and_stay_correct(seed):
    src = conv_kernel(tiny_cnn(channels=(8, 16), size=12))
    dst = conv_kernel(tiny_cnn(channels=(16, 32), size=20, seed=3))
    assert src.key == dst.key
    # a random point of the source's space (what a tuner would have measured)
    space = design_spaces(src.mod, TARGET)[seed % 4]
    sch = Schedule(src.mod, seed=seed)
    space.trace.apply_to_schedule(sch, remove_postproc=True,
                                  decision_provider=lambda inst, inputs, attrs, d: None)
    moved, reason = replay_decisions(sch.trace, dst.mod, TARGET)
    assert moved is not None, reason
    assert space_tag(moved.trace) == space_tag(sch.trace)
    # every tile decision is a perfect tiling of the target's own loop
    own = next(s for s in design_spaces(dst.mod, TARGET) if space_tag(s.trace) == space_tag(sch.trace))
    extents = [math.prod(t) for t in tile_decisions(own.trace)]
    assert [math.prod(t) for t in tile_decisions(moved.trace)] == extents
    # the categorical decision (unroll budget) is carried over as it is
    theirs = [d for k, d in sampled(sch.trace) if k == "SampleCategorical"]
    ours = [d for k, d in sampled(moved.trace) if k == "SampleCategorical"]
    assert [int(x) for x in ours] == [int(x) for x in theirs]
    check_numerics(moved.mod, dst.mod, TARGET)


def test_a_kernel_without_the_variant_rejects_the_transfer():
    src = conv_kernel(tiny_cnn(channels=(8, 16), size=12))
    other = next(k for k in extract_kernels(tiny_cnn(), TARGET) if "layout" in k.name)
    sch, reason = replay_decisions(design_spaces(src.mod, TARGET)[0].trace, other.mod, TARGET)
    assert sch is None and "design space" in reason


def test_tune_in_cocopie_space_transfer_and_second_pass(tmp_path):
    """MetaSchedule tunes model A in cocopie's space; its log transfers to model B with
    the second pass on; the database applies and B computes what it computed untuned."""
    import onnx

    from tvm_cocopie.api import compile_model
    from tvm_cocopie.pipeline import PipelineOptions
    from tvm_cocopie.transfer_tuning.profile import kernel_times, random_inputs
    from tvm_cocopie.transfer_tuning.tune import tune_model

    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(tiny_cnn(channels=(8, 16), size=16), a)
    onnx.save(tiny_cnn(channels=(16, 16), size=24, seed=5), b)
    kernels = [k for k in extract_kernels(str(a), TARGET) if "conv" in k.name]
    tune_model(str(a), TARGET, tmp_path / "log", trials=3 * len(kernels), kernels=kernels,
               population=8)
    records, _ = readers.read_logs(tmp_path / "log", TARGET)
    assert records and all(space_tag(r.trace) for r in records)
    report = search.transfer_tune(str(b), readers.best_per_workload(records), TARGET,
                                  tmp_path / "out", mode="pool", max_candidates=2,
                                  second_pass=True, second_pass_tolerance=0.0)
    convs = [k for k in report.kernels if "conv" in k.name]
    assert convs and all(k.candidates >= 2 for k in convs)  # untuned, default (+ transfers)
    # tolerance 0 flags every transferred kernel: each was retried and accounted for
    transferred = [k for k in convs if k.best not in (search.UNTUNED, search.DEFAULT)]
    for k in transferred:
        assert k.name in report.second_pass or k.best == search.DEFAULT
    for name, row in report.second_pass.items():
        assert row["in_model"] > 0 and row["in_model_default"] > 0, (name, row)

    untuned = compile_model(str(b), target=TARGET, options=PipelineOptions(schedule=False))
    tuned = compile_model(str(b), target=TARGET, options=PipelineOptions(database=report.database))
    x = random_inputs(tuned)
    np.testing.assert_allclose(tuned(**x), untuned(**x), rtol=1e-4, atol=1e-4)
    times = kernel_times(tuned, x, rounds=2)
    assert {k.name for k in convs} <= set(times)


def test_runner_workers_get_the_models_thread_pool(monkeypatch):
    """Standalone timings use the threads the model will use (TVM's own default on x86
    is half the logical cores: kernels timed 2x slower before any model was compiled)."""
    import os

    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    monkeypatch.delenv("TVM_BIND_THREADS", raising=False)
    search.Measurer(parse_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 3})).runner()
    assert os.environ["TVM_NUM_THREADS"] == "3" and os.environ["TVM_BIND_THREADS"] == "0"

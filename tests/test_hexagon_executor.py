"""A whole int8 CNN as one Hexagon program: static plan, memory plan, bit-exact output."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_cocopie.hexagon import executor
from tvm_cocopie.hexagon.executor import memplan, program


def test_quantized_chain_tracks_the_float_model():
    net = executor.quantize(executor.mobilenetv2_head(16), seed=1)
    ref = executor.reference_forward(net)
    flt = executor.float_forward(net)
    assert ref.dtype == np.uint8 and ref.shape == flt.shape
    assert np.abs(ref * net.output_scale - flt).max() <= 0.1 * flt.max()


def test_memory_plan_shares_dead_buffers_and_never_overlaps_live_ones():
    calls = [("a", ["x", "t1"]), ("b", ["t1", "t2"]), ("c", ["t2", "t3"]), ("d", ["t3", "y"])]
    sizes = {"x": 1000, "t1": 5000, "t2": 5000, "t3": 5000, "y": 100}
    mp = memplan.plan(calls, ["x"], ["y"], sizes)
    memplan.check(mp, sizes)
    assert mp.offsets["t1"] == mp.offsets["t3"]
    assert mp.arena_bytes < mp.naive_bytes


@pytest.mark.needs_toolchain
@pytest.mark.parametrize(
    "plan",
    [None, {"stem": "vmpy", "b0_0_dw": "vmpa", "b0_0_project": "vrmpy"}],
    ids=["selected", "mixed-layouts"],
)
def test_mobilenetv2_head_runs_bit_exact_as_one_program(plan):
    layers = executor.mobilenetv2_head(16)
    if plan is not None:
        layers = layers[:4]  # stem, dw, project
    net = executor.quantize(layers, seed=0)
    res = executor.run_network(net, plan)
    assert res.exact
    assert res.total_packets == sum(res.packets) > 0
    assert res.arena_bytes < res.naive_bytes


@pytest.mark.needs_toolchain
def test_vmpa_is_refused_for_full_range_weights():
    from tvm_cocopie.errors import CocopieError

    net = executor.quantize(executor.resnet50_stem_chain(16)[:2], seed=0)
    with pytest.raises(CocopieError, match="vmpa"):
        executor.compile_network(net, {"stem": "vmpa"})


def test_residual_add_and_max_pool_reference_tracks_the_float_model():
    from tvm_cocopie.topi.int8.compute import AddRequant

    net = executor.quantize(executor.resnet50_head(16, 2), seed=2)
    ops = [q.layer.op for q in net.layers]
    assert ops.count("add") == 2 and ops.count("pool") == 1
    assert all(isinstance(q.rq, AddRequant) for q in net.layers if q.layer.op == "add")
    ref, flt = executor.reference_forward(net), executor.float_forward(net)
    assert np.abs(ref * net.output_scale - flt).max() <= 0.1 * flt.max()


@pytest.mark.needs_toolchain
@pytest.mark.parametrize(
    "layers, plan",
    [
        (lambda: executor.resnet50_head(16, 2), None),
        # the add's inputs arrive in two layouts: one is regridded into the other's
        (lambda: executor.mobilenetv2_blocks(16), {"b1_1_project": "vmpy", "b1_1_add": "vrmpy"}),
    ],
    ids=["resnet50-blocks", "mobilenetv2-add-across-layouts"],
)
def test_residual_blocks_run_bit_exact(layers, plan):
    net = executor.quantize(layers(), seed=4)
    if plan is not None:
        plan = {**executor.choose_plans(net), **plan}
    res = executor.run_network(net, plan)
    assert res.exact
    if plan is not None:
        assert ("b1_1_add", "regrid") in res.roles


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("variant", ["vmpy", "vmpa"])  # vrmpy: in every network test
def test_same_layout_regrid_copy_equals_the_gather(variant):
    """The row-copy regrid (stride-2 phase split of a grid, and of the NHWC image) writes
    exactly what the TE gather it replaces writes, in far fewer packets."""
    from tvm_cocopie.emulation import hexagon as runner
    from tvm_cocopie.hexagon.kernels.dispatch import vectorize_inner
    from tvm_cocopie.hexagon.kernels.regrid import regrid_copy_kernel
    from tvm_cocopie.topi.int8 import hvx as int8_hvx
    from tvm_cocopie.topi.int8.layouts import GridGeometry

    rng = np.random.default_rng(5)
    h, w, c, wq = 10, 10, 16, 12
    shape = GridGeometry(h, wq, 1).out_shape(variant, c)
    for src, x in (
        (executor.Tensor("x", h, w, c, variant, wq, shape), rng.integers(0, 256, shape)),
        (executor.Tensor("x", h, w, 3, None, 0, (1, h, w, 3)), rng.integers(0, 256, (1, h, w, 3))),
    ):
        geo = GridGeometry(h, w, 3, 2, 1)
        x = x.astype(np.uint8)
        y0 = np.zeros(geo.in_shape(variant, src.c), np.uint8)
        gather = vectorize_inner(int8_hvx.regrid(src, geo, variant))
        copy = regrid_copy_kernel(variant, src.shape, h, w, src.wq or w, geo, src.c)
        (ref,), slow = runner.run_func(gather.with_attr("global_symbol", "gather"), [x, y0],
                                       count_packets=True)
        (out,), fast = runner.run_func(copy.with_attr("global_symbol", "copy"), [x, y0],
                                       count_packets=True)
        assert np.array_equal(out, ref)
        assert fast.packets[0] < slow.packets[0]


@pytest.mark.needs_toolchain
def test_shift_copy_equals_the_gather():
    """The stride-1 same-layout regrid as a masked shifted vector copy (large grids)."""
    from tvm_cocopie.emulation import hexagon as runner
    from tvm_cocopie.hexagon.kernels.dispatch import hvx_kernel, vectorize_inner
    from tvm_cocopie.topi.int8 import hvx as int8_hvx
    from tvm_cocopie.topi.int8.layouts import GridGeometry

    variant, h, w, c = "vrmpy", 24, 24, 8
    geo = GridGeometry(h, w, 3, 1, 1, min_grid_w=w + 2)
    shape = GridGeometry(h, geo.grid_w, 1).out_shape(variant, c)
    src = executor.Tensor("x", h, w, c, variant, geo.grid_w, shape)
    assert program.shift_copy_pays(src, geo, variant)
    x = np.random.default_rng(6).integers(0, 256, shape).astype(np.uint8)
    y0 = np.zeros(geo.in_shape(variant, c), np.uint8)
    (ref,), _ = runner.run_func(
        vectorize_inner(int8_hvx.regrid(src, geo, variant)).with_attr("global_symbol", "g"),
        [x, y0],
    )
    shift = hvx_kernel(program.shift_copy_compute(src, geo, variant))
    mask = executor.shift_mask(geo, variant, h, w)
    (out,), _ = runner.run_func(shift.with_attr("global_symbol", "s"),
                                [x.reshape(-1), mask, y0.reshape(-1)])
    assert np.array_equal(out.reshape(ref.shape), ref)

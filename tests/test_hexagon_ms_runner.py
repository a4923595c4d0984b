"""MetaSchedule measuring Hexagon candidates under QEMU (:mod:`tvm_cocopie.hexagon.tools.ms_runner`)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.needs_toolchain

SHAPE = (4, 4, 8, 32, 1, 1, 0)  # H, W, C, O, kernel, stride, pad


def _conv_case():
    from tvm_cocopie.hexagon.tools import measure, tvm_vrmpy
    from tvm_cocopie.topi.int8 import reference

    h, w, c, o, k, s, p = SHAPE
    x, wt, b = measure._data((1, h, w, c), (k, k, c, o), o, 3)
    rq = measure._requant(k * k * c)
    ref = reference.qconv2d_nhwc(x, wt, b, rq, s, p)
    return rq, (tvm_vrmpy.pad_input(x, p), tvm_vrmpy.pack_weights(wt), b, ref)


def test_search_best_is_exact_and_its_packets_are_the_runners():
    from tvm_cocopie.emulation import hexagon as runner
    from tvm_cocopie.hexagon.tools import ms_runner

    rq, data = _conv_case()
    found = ms_runner.tune_vrmpy_conv(*SHAPE, rq, data, trials=3, per_iter=3)
    assert found.trials == 3 and found.valid >= 1 and found.packets > 0
    x, wt, b, ref = data
    (y,), res = runner.run_func(found.func, [x, wt, b, np.zeros_like(ref)], count_packets=True)
    assert np.array_equal(y, ref)
    assert res.packets[0] == found.packets
    assert "cocopie_stock_dot_32x4_u8i8i32_vrmpy" in found.trace  # the stock intrinsic


def _measure_one(func, data, timeout=300.0):
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from tvm_cocopie.hexagon.tools import ms_runner

    x, wt, b, ref = data
    io = ms_runner.KernelIO(("x", "w", "bias", "y"), {"x": x, "w": wt, "bias": b}, {"y": ref})
    builder, qemu = ms_runner.qemu_builder_runner(io, timeout=timeout)
    import tvm

    (built,) = builder.build([_builder_input(tvm.IRModule({"main": func}))])
    assert built.error_msg is None
    (future,) = qemu.run([RunnerInput(built.artifact_path, "hexagon", [])])
    return future.result()


def _builder_input(mod):
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from tvm_cocopie.emulation import hexagon as runner

    return BuilderInput(mod, runner.hexagon_target())


def test_wrong_output_is_an_error_result_not_a_cost():
    from tvm_cocopie.hexagon.tools import ms_runner, tvm_vrmpy
    from tvm_cocopie.topi.int8.compute import Requant

    rq, data = _conv_case()
    good = _measure_one(tvm_vrmpy.conv_func(*SHAPE, rq), data)
    assert good.error_msg is None and ms_runner.packets_of(good.run_secs[0]) > 0
    wrong_rq = Requant(rq.multiplier, rq.shift, rq.zero_point + 1)  # off by one everywhere
    bad = _measure_one(tvm_vrmpy.conv_func(*SHAPE, wrong_rq), data)
    assert bad.run_secs is None
    assert "wrong output 'y'" in bad.error_msg


def test_a_kernel_running_past_the_timeout_is_an_error_result():
    from tvm.script import tirx as T

    _, data = _conv_case()
    x, wt, b, ref = data

    @T.prim_func
    def spin(
        xb: T.Buffer(x.shape, "uint8"),
        wb: T.Buffer(wt.shape, "int8"),
        bb: T.Buffer(b.shape, "int32"),
        yb: T.Buffer(ref.shape, "uint8"),
    ):
        acc = T.alloc_buffer((1,), "int32")
        acc[0] = 0
        for i in range(1 << 30):  # a linear congruence: ~10^9 dependent steps
            acc[0] = acc[0] * 1103515245 + T.Cast("int32", xb[0, 0, 0, i % 8])
        yb[0, 0, 0, 0] = T.Cast("uint8", acc[0])

    res = _measure_one(spin.with_attr("global_symbol", "main"), data, timeout=5.0)
    assert res.run_secs is None
    assert "was stopped" in res.error_msg

"""The fallback rule: every other PrimFunc gets parallel + vectorized loops, stays
correct (numpy references), handles symbolic dims, and a failing rule never breaks
the build."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import tvm
from test_kernels_common import (
    TARGET,
    assert_allclose,
    build_graph,
    prim_funcs,
    run,
    scheduled,
    tensor_var,
)
from tvm import relax, tirx
from tvm.relax import op as R

from tvm_cocopie.api import compile_model
from tvm_cocopie.schedules import Fallback, default_rules
from tvm_cocopie.schedules.base import CpuRule


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _pool(x, k, s, p, op):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf if op == "max" else 0)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s:i * s + k, j * s:j * s + k]
            out[:, :, i, j] = win.max(axis=(2, 3)) if op == "max" else win.mean(axis=(2, 3))
    return out


def _layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


rng = np.random.default_rng(0)
GAMMA = rng.standard_normal(48).astype("float32")
BETA = rng.standard_normal(48).astype("float32")

# name: (input shape, graph body, numpy reference)
OPS = {
    "softmax": ((3, 37), lambda bb, x: bb.emit(R.nn.softmax(x)), _softmax),
    "layer-norm": ((2, 5, 48),
                   lambda bb, x: bb.emit(R.nn.layer_norm(x, relax.const(GAMMA), relax.const(BETA),
                                                         axes=[-1])),
                   lambda x: _layer_norm(x, GAMMA, BETA)),
    "max-pool": ((1, 5, 13, 13),
                 lambda bb, x: bb.emit(R.nn.max_pool2d(x, [3, 3], [2, 2], [1, 1, 1, 1])),
                 lambda x: _pool(x, 3, 2, 1, "max")),
    "avg-pool": ((2, 8, 12, 12), lambda bb, x: bb.emit(R.nn.avg_pool2d(x, [2, 2], [2, 2])),
                 lambda x: _pool(x, 2, 2, 0, "avg")),
    "global-mean": ((1, 24, 9, 9), lambda bb, x: bb.emit(R.mean(x, axis=[2, 3], keepdims=True)),
                    lambda x: x.mean(axis=(2, 3), keepdims=True)),
    "sum-axis0": ((31, 17), lambda bb, x: bb.emit(R.sum(x, axis=[0])), lambda x: x.sum(0)),
    "transpose": ((4, 33, 10), lambda bb, x: bb.emit(R.permute_dims(x, [2, 0, 1])),
                  lambda x: x.transpose(2, 0, 1)),
    "concat": ((3, 10, 7), lambda bb, x: bb.emit(R.concat([x, R.exp(x)], axis=1)),
               lambda x: np.concatenate([x, np.exp(x)], axis=1)),
    "elementwise-chain": ((64, 129),
                          lambda bb, x: bb.emit(R.tanh(R.multiply(R.add(x, x), x))),
                          lambda x: np.tanh((x + x) * x)),
    "scalar": ((), lambda bb, x: bb.emit(R.add(x, x)), lambda x: x + x),
    "cosh-sinh-not-vectorizable": ((4, 40), lambda bb, x: bb.emit(R.add(R.cosh(x), R.sinh(x))),
                                   lambda x: np.cosh(x) + np.sinh(x)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_fallback_ops_match_numpy(name):
    shape, body, ref = OPS[name]
    x = tensor_var("x", shape)
    data = np.asarray(rng.standard_normal(shape)).astype("float32")
    assert_allclose(run(build_graph([x], body), [data]), ref(data.astype(np.float64)))


def _loop_kinds(func) -> set:
    kinds = set()
    sch = tvm.s_tir.Schedule(func)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        for loop in sch.get_loops(block):
            kinds.add(int(sch.get(loop).kind))
    return kinds


def test_big_kernels_are_parallel_and_vectorized():
    x = tensor_var("x", (8, 64, 56, 56))

    def body(bb, x):
        y = bb.emit(R.nn.max_pool2d(x, [3, 3], [2, 2], [1, 1, 1, 1]))
        return bb.emit(R.nn.softmax(R.sigmoid(y), axis=1))

    for name, func in prim_funcs(scheduled(build_graph([x], body), layout=False)).items():
        kinds = _loop_kinds(func)
        assert int(tirx.ForKind.PARALLEL) in kinds, name


def test_pooling_reads_through_its_padding():
    """The pad of a padded pooling is inlined into the window (no padded copy)."""
    x = tensor_var("x", (1, 16, 32, 32))

    def body(bb, x):
        return bb.emit(R.nn.max_pool2d(x, [3, 3], [2, 2], [1, 1, 1, 1]))

    funcs = prim_funcs(scheduled(build_graph([x], body), layout=False))
    pools = [f for f in funcs.values() if "pool_max" in f.script()]
    assert pools
    for func in pools:
        sch = tvm.s_tir.Schedule(func)
        names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
        assert not any("pad" in n for n in names), names


def test_symbolic_batch_compiles_and_runs():
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 16, 8, 8], "float32"))
    w = rng.standard_normal((8, 16, 3, 3)).astype("float32")

    def body(bb, x):
        y = bb.emit(R.nn.relu(R.nn.conv2d(x, relax.const(w), padding=[1, 1, 1, 1])))
        return bb.emit(R.nn.softmax(R.mean(y, axis=[2, 3]), axis=-1))

    mod = build_graph([x], body)
    from test_kernels_common import conv2d_reference

    for batch in (1, 3):
        data = rng.standard_normal((batch, 16, 8, 8)).astype("float32")
        y = np.maximum(conv2d_reference(data, w, padding=(1, 1, 1, 1)), 0)
        assert_allclose(run(mod, [data]), _softmax(y.mean(axis=(2, 3))))


class _Exploding(CpuRule):
    name = "exploding"

    def schedule(self, sch, info, tunable):
        sch.vectorize(sch.get_sblock("root"))  # not a loop: TVM refuses
        return sch


def test_a_failing_rule_warns_and_falls_through(caplog):
    func = tvm.te.create_prim_func([
        a := tvm.te.placeholder((16, 16), name="a"),
        tvm.te.compute((16, 16), lambda i, j: a[i, j] * 2, name="b"),
    ])
    with caplog.at_level(logging.WARNING):
        assert _Exploding().apply(func, TARGET, False) is None
    assert "exploding could not schedule" in caplog.text
    assert Fallback().apply(func, TARGET, False) is not None


def test_rules_per_target():
    hexagon = tvm.target.Target({"kind": "llvm", "mtriple": "hexagon", "mcpu": "hexagonv66"})
    assert [type(r).__name__ for r in default_rules(hexagon)] == ["HexagonInt8"]
    assert [type(r).__name__ for r in default_rules(TARGET)] == [
        "PatternTiles", "Winograd", "Matvec", "ConvChain", "GspcPixels", "Conv2dNCHWc",
        "MatmulPacked", "Attention", "MatmulChain", "RowReduction", "Fallback"]


def test_tunable_rules_return_a_space_that_builds():
    """tunable=True: a list of schedules with sampled decisions, each one buildable."""
    from test_kernels_common import build_graph as graph

    from tvm_cocopie.schedules import Conv2dNCHWc, MatmulPacked

    w = rng.standard_normal((16, 8, 3, 3)).astype("float32")
    b = rng.standard_normal((32, 24)).astype("float32")
    x, y = tensor_var("x", (1, 8, 10, 10)), tensor_var("y", (20, 32))
    conv = graph([x], lambda bb, x: bb.emit(R.nn.relu(R.nn.conv2d(x, relax.const(w),
                                                                   padding=[1, 1, 1, 1]))))
    mm = graph([y], lambda bb, y: bb.emit(R.matmul(y, relax.const(b))))
    for mod, rule, size in ((conv, Conv2dNCHWc(), 4), (mm, MatmulPacked(), 2)):
        funcs = prim_funcs(scheduled(mod, schedule=False))
        anchor = next(f for n, f in funcs.items() if "nchwc" in n or "matmul" in n)
        space = rule.apply(anchor, TARGET, True)
        assert isinstance(space, list) and len(space) == size
        for sch in space:
            assert "sample_categorical" in str(sch.trace)
            func = sch.mod["main"].with_attr("global_symbol", "main")
            tvm.compile(tvm.IRModule({"main": func}), target=TARGET)


def _dynamic_model():
    """x[1, 8, H, W] -> Conv3x3 + Relu -> GAP; t[1, S, 32] -> MatMul + Add -> Softmax."""
    from conftest import make_model
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype("float32") / 8, "w")
    m = numpy_helper.from_array(rng.standard_normal((32, 48)).astype("float32") / 6, "m")
    b = numpy_helper.from_array(rng.standard_normal(48).astype("float32"), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("GlobalAveragePool", ["y"], ["p"]),
        helper.make_node("MatMul", ["t", "m"], ["u"]),
        helper.make_node("Add", ["u", "b"], ["v"]),
        helper.make_node("Softmax", ["v"], ["s"], axis=-1),
    ]
    f32 = TensorProto.FLOAT
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", f32, [1, 8, "H", "W"]),
         helper.make_tensor_value_info("t", f32, [1, "S", 32])],
        [helper.make_tensor_value_info("y", f32, [1, 16, "H", "W"]),
         helper.make_tensor_value_info("p", f32, [1, 16, 1, 1]),
         helper.make_tensor_value_info("s", f32, [1, "S", 48])],
        [w, m, b],
    )


def test_model_with_dynamic_spatial_and_sequence_dims_compiles_and_runs(caplog):
    """Symbolic H, W and sequence length: the conv takes the blocked kernel (SOD²: its
    tiles planned at a size, padded and clamped to the real extents; no "left to TVM"
    in the debug log), the fallback rule schedules the other symbolic loops, every size
    matches ONNX Runtime."""
    from conftest import assert_close, ort_run

    import tvm_cocopie

    model = _dynamic_model()
    with caplog.at_level(logging.DEBUG, logger="tvm_cocopie.topi.cpu.legalize"):
        compiled = tvm_cocopie.compile(model, target=TARGET)
    assert "conv2d left to TVM" not in caplog.text
    assert [spec.shape for spec in compiled.inputs] == [(1, 8, "H", "W"), (1, "S", 32)]
    for h, w, s in ((9, 13, 5), (16, 7, 11)):
        x = rng.standard_normal((1, 8, h, w)).astype("float32")
        t = rng.standard_normal((1, s, 32)).astype("float32")
        assert_close(compiled(x=x, t=t), ort_run(model, {"x": x, "t": t}))


def test_fuse_parallel_never_divides_by_a_second_symbolic_extent():
    """Loops (n=1, rows, columns) of a map of run-time size: the rows join the parallel
    loop, the columns do not (fused, every iteration divided by the symbolic width and
    the accumulators were left in memory); a symbolic batch still lets loops after it
    join."""
    from tvm.script import tirx as T

    from tvm_cocopie.schedules.base import fuse_parallel
    from tvm_cocopie.target import cpu_info, host_target

    @T.prim_func(private=True, s_tir=True)
    def copy(a: T.handle, b: T.handle):
        n, h, w = T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (n, 4, h, w), "float32")
        B = T.match_buffer(b, (n, 4, h, w), "float32")
        for i0, i1, i2, i3 in T.grid(T.int64(1), T.int64(4), h, w):
            with T.sblock("B"):
                v0, v1, v2, v3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                B[v0, v1, v2, v3] = A[v0, v1, v2, v3]

    info = cpu_info(host_target())
    sch = tvm.s_tir.Schedule(copy)
    loops = sch.get_loops(sch.get_sblock("B"))
    fused = fuse_parallel(sch, loops, info)
    assert len(sch.get_loops(sch.get_sblock("B"))) == 2  # (n, c, rows) fused, columns apart
    assert "w" not in str(sch.get(fused).extent)


def test_a_conv_epilogue_stays_at_its_register_tile_with_symbolic_rows_and_columns():
    """A 1x1 conv + epilogue over a map of run-time height and width: when the parallel
    loops above the tile stop at the symbolic rows, the epilogue still attaches at the
    tile (``fuse_parallel_upto``), its loops all of constant extent; attached at the
    fused rows, it ran over whole rows and the accumulators became a row buffer in
    memory (PP-OCR det's 1x1 convs at H/16: 2x their static time)."""
    from tvm_cocopie.pipeline import run_until
    from tvm_cocopie.schedules.base import root_blocks
    from tvm_cocopie.target import host_target

    bb = relax.BlockBuilder()
    h, w = tvm.tirx.Var("H", "int64"), tvm.tirx.Var("W", "int64")
    x = relax.Var("x", relax.TensorType((1, 192, h, w), "float32"))
    weight = np.random.default_rng(0).standard_normal((192, 192, 1, 1)).astype(np.float32)
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(weight)))
            out = bb.emit_output(relax.op.nn.relu(relax.op.add(c, c)))
        bb.emit_func_output(out)
    mod = run_until(bb.get(), host_target(2), "schedule")
    (conv,) = [f for gv, f in mod.functions_items() if "conv2d" in gv.name_hint]
    sch = tvm.s_tir.Schedule(conv)
    loops = sch.get_loops(root_blocks(sch)[-1])
    extents = [sch.get(loop).extent for loop in loops]
    assert any(not isinstance(e, tvm.tirx.IntImm) for e in extents[:2])  # symbolic tiles
    assert all(isinstance(e, tvm.tirx.IntImm) for e in extents[-3:]), extents
    # a register tile: at most the register file (AVX-512's deep-conv tile is 24 vectors)
    assert math.prod(int(e) for e in extents[-3:]) <= 32 * 16
    compiled = compile_model(bb.get(), specialize=False)
    data = np.random.default_rng(1).standard_normal((1, 192, 6, 13)).astype(np.float32)
    want = np.maximum(2 * np.einsum("oc,nchw->nohw", weight[:, :, 0, 0], data), 0)
    np.testing.assert_allclose(np.asarray(compiled(data)), want, rtol=1e-4, atol=1e-3)

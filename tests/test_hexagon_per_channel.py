"""Weights quantized per output channel on Hexagon (issue 21): one multiplier and shift
per channel in the requantization, read from QDQ and QOperator files, carried through the
HVX conv (three layouts), depthwise and matrix-vector kernels and the numpy reference."""

from __future__ import annotations

import dataclasses
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
from tvm_cocopie.topi.int8 import layouts, reference
from tvm_cocopie.topi.int8.compute import Requant

#: Per-output-channel weight ranges spanning three decades: one scale per tensor leaves
#: the small channels a few int8 steps.
RANGES = np.geomspace(0.01, 10.0, 16)


def _spread(rng, shape, ranges=RANGES):
    """N(0, 1) weights of ``shape`` (output channels first), channel ``o`` scaled by
    ``ranges[o]``, as a float32 initializer."""
    w = rng.standard_normal(shape) * ranges[: shape[0]].reshape(-1, *[1] * (len(shape) - 1))
    return w.astype(np.float32)


def _pc_cnn(size: int = 12, seed: int = 5) -> onnx.ModelProto:
    """conv + relu, depthwise/2 + relu, grouped 1x1 + relu, global pool, flatten, Gemm;
    every weight's output channels spread over :data:`RANGES` (shuffled per layer)."""
    rng = np.random.default_rng(seed)

    def ranges():
        return rng.permutation(RANGES)

    def init(name, arr):
        return numpy_helper.from_array(arr, name)

    inits = [
        init("w1", _spread(rng, (16, 3, 3, 3), ranges() / 3)),
        init("b1", (rng.standard_normal(16) * 0.1).astype(np.float32)),
        init("wd", _spread(rng, (16, 1, 3, 3), ranges() / 3)),
        init("bd", (rng.standard_normal(16) * 0.1).astype(np.float32)),
        init("wg", _spread(rng, (16, 4, 1, 1), ranges() / 2)),
        init("fc", _spread(rng, (10, 16), ranges()[:10] / 4)),
        init("fcb", (rng.standard_normal(10) * 0.1).astype(np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "wd", "bd"], ["d"], pads=[1] * 4, strides=[2, 2], group=16, name="dw"),
        n("Relu", ["d"], ["rd"], name="relu_dw"),
        n("Conv", ["rd", "wg"], ["g"], group=4, name="grouped"),
        n("Relu", ["g"], ["rg"], name="relu_g"),
        n("GlobalAveragePool", ["rg"], ["p"], name="gap"),
        n("Flatten", ["p"], ["f"], name="flatten"),
        n("Gemm", ["f", "fc", "fcb"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "per_channel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def per_channel(tmp_path_factory):
    """The CNN quantized per channel as QDQ and as QOperator from one calibration."""
    tmp = tmp_path_factory.mktemp("pc")
    float_model = _pc_cnn()
    samples = ptq.calibration_inputs(float_model, 4, seed=1)
    paths = {fmt: ptq.quantize_onnx(float_model, tmp / f"{fmt}.onnx", samples, fmt=fmt,
                                    per_channel=True)
             for fmt in ("qdq", "qoperator")}
    return float_model, paths


def _read(path, seed: int = 99):
    net = qonnx.read_quantized(onnx.load(str(path)))
    net.image = ptq.image_nhwc(ptq.calibration_inputs(_pc_cnn(), 1, seed=seed)[0])
    return net


def test_requant_vector_is_the_scalar_per_channel():
    """A per-channel Requant is, channel by channel, the per-tensor one of that scale:
    numpy, the int32-only identity the kernels evaluate, and the kernels' table."""
    scales = np.geomspace(3e-6, 0.9, 7)
    rq = Requant.from_scale(scales, 11)
    assert rq.per_channel and not Requant.from_scale(0.01).per_channel
    acc = np.random.default_rng(0).integers(-2**24, 2**24, (5, 3, 7))
    for c, s in enumerate(scales):
        one = Requant.from_scale(float(s), 11)
        assert (rq.multiplier[c], rq.shift[c]) == (one.multiplier, one.shift)
        assert np.array_equal(rq.numpy(acc)[..., c], one.numpy(acc[..., c]))
    y = np.clip(rq.numpy_int32(acc), 0, 255)
    assert np.array_equal(y, rq.numpy(acc))
    table = rq.table(8)
    assert table[:, :7].tolist() == [list(rq.multiplier), list(rq.shift)]
    assert table[0, 7] == 0  # a padded channel: output the zero point
    assert rq.channels(2, 4) == Requant(rq.multiplier[2:4], rq.shift[2:4], 11)


def test_per_channel_files_read_into_vector_requantizations(per_channel):
    """QDQ and QOperator files of one calibration give the same integer network, with a
    multiplier and shift per output channel in every conv, depthwise, grouped and FC
    layer; ONNX Runtime agrees layer by layer."""
    _, paths = per_channel
    nets = {fmt: _read(p) for fmt, p in paths.items()}
    qdq = nets["qdq"]
    assert [q.op_class for q in qdq.layers] == ["conv", "dwconv", "gconv", "global_pool", "fc"]
    for a, b in zip(qdq.layers, nets["qoperator"].layers):
        assert a.rq == b.rq and np.array_equal(a.bias, b.bias)
        if a.op_class != "global_pool":
            assert a.rq.per_channel and len(a.rq.multiplier) == a.layer.o
            assert len(set(a.rq.shift)) > 3  # three decades of scales
    for fmt, path in paths.items():
        agree = hexmodel.layer_agreement(path, nets[fmt])
        assert ort_agrees(agree, max_differ=0.01), (fmt, agree)


def test_ignoring_the_per_channel_scales_would_be_caught(per_channel):
    """The same network with each layer requantized by one scale (the channels' median,
    what a per-tensor reader would have to pick) misses ONNX Runtime by many steps and
    changes the reference's output: the vectors are what make both agree."""
    _, paths = per_channel
    net = _read(paths["qdq"])
    flat = dataclasses.replace(net, layers=[
        dataclasses.replace(q, rq=Requant.from_scale(float(np.median(q.rq.scale)),
                                                     q.rq.zero_point))
        if getattr(q.rq, "per_channel", False) else q for q in net.layers])
    assert hexmodel.layer_agreement(paths["qdq"], flat)["max_steps"] > 10
    assert not np.array_equal(reference_forward(flat), reference_forward(net))


def _zero_points(model, name: str, values) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for k, t in enumerate(model.graph.initializer):
        if t.name == name:
            arr = numpy_helper.to_array(t)
            model.graph.initializer[k].CopyFrom(numpy_helper.from_array(
                np.asarray(values, arr.dtype).reshape(arr.shape), name))
    return model


def test_non_zero_per_channel_weight_zero_points_are_refused(per_channel):
    _, paths = per_channel
    for fmt, zp_name, node in (("qdq", "w1_zero_point", "conv1"),
                               ("qoperator", "wd_zero_point", "dw_quant")):
        model = onnx.load(str(paths[fmt]))
        assert zp_name in {t.name for t in model.graph.initializer}
        bad = _zero_points(model, zp_name, [0] * 15 + [3])
        with pytest.raises(UnsupportedOperatorError,
                           match=rf"{node}.*non-zero weight zero points \(\[3\]\).*QInt8"):
            qonnx.read_quantized(bad)


def test_per_channel_scales_along_the_input_axis_are_refused(per_channel):
    """A MatMul weight ``[K, N]`` quantized along K cannot be requantized per output."""
    _, paths = per_channel
    model = onnx.load(str(paths["qdq"]))
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0].startswith("fc_"):
            for a in node.attribute:
                if a.name == "axis":
                    a.i = 1  # the weights are [N, K] (transB): axis 1 is the input
    with pytest.raises(UnsupportedOperatorError, match=r"fc.*along axis 1.*output channels"):
        qonnx.read_quantized(model)


def test_the_selection_prices_the_per_channel_requantization():
    """A vrmpy vector holds four channels, a vmpy one one: per channel, a 28x28x64 3x3/2
    depthwise measured 3840 / 4054 packets per tensor (vrmpy / vmpy), 4567 / 4364 per
    channel; the cost model's plan follows, and the executor's selection asks it."""
    from tvm_cocopie.hexagon.executor import QLayer, QNetwork, choose_plans
    from tvm_cocopie.hexagon.selection.costmodel import CostModel
    from tvm_cocopie.hexagon.selection.networks import Layer, plan_costs

    lay = Layer("dw", "dwconv", ("input",), 28, 28, 64, 64, 3, 2, 1)
    model = CostModel.default()
    flat, pc = plan_costs(lay, model, False), plan_costs(lay, model, False, per_channel=True)
    assert min(flat, key=flat.get) == "vrmpy" and min(pc, key=pc.get) == "vmpy"
    assert all(pc[v] > flat[v] for v in flat)
    wd = np.random.default_rng(0).integers(-127, 128, (3, 3, 64)).astype(np.int8)
    rq = Requant.from_scale(np.geomspace(1e-4, 1e-2, 64), 0)
    nets = [QNetwork([QLayer(lay, wd, np.zeros(64, np.int32), r)], None, 1.0, 1.0)
            for r in (Requant.from_scale(1e-3), rq)]
    assert [choose_plans(n, local=True)["dw"] for n in nets] == ["vrmpy", "vmpy"]


@pytest.mark.needs_toolchain
def test_per_channel_weights_run_through_the_relax_form_bit_exact(per_channel):
    """Per-channel convs in the int8 Relax form (``call_tir`` of their compute with the
    multiplier/shift table), selected and scheduled by ``tvm.compile``'s pipeline."""
    import tvm_cocopie
    from tvm_cocopie.hexagon import relax_graph
    from tvm_cocopie.hexagon.tools import measure

    _, paths = per_channel
    mod = tvm_cocopie.from_onnx(paths["qdq"], int8=True)
    assert any(q.rq.per_channel for q in relax_graph.read_network(mod).layers)
    assert measure.pipeline_network(paths["qdq"])["exact"]


@pytest.mark.needs_toolchain
def test_per_channel_kernels_equal_their_computes_and_numpy():
    """Conv in the three layouts, depthwise in the three, the matrix-vector FC and a
    matmul, each with channel scales over four decades: the HVX kernels in one program
    under qemu-hexagon against numpy; the conv's and FC's TE computes (what TVM lowers
    when the HVX rule is off) against the kernels."""
    from tvm_cocopie.emulation import hexagon as runner
    from tvm_cocopie.hexagon.executor.program import Tensor
    from tvm_cocopie.hexagon.kernels import conv2d, depthwise, matmul, transforms
    from tvm_cocopie.hexagon.kernels.dispatch import hvx_kernel
    from tvm_cocopie.hexagon.kernels.elementwise import pack_dense_weights
    from tvm_cocopie.topi.int8 import hvx as H
    from tvm_cocopie.topi.int8.layouts import GridGeometry

    rng = np.random.default_rng(3)
    h, w, c, o = 7, 6, 6, 10
    x = rng.integers(0, 256, (1, h, w, c)).astype(np.uint8)
    wc = rng.integers(-64, 65, (3, 3, c, o)).astype(np.int8)
    wd = rng.integers(-128, 128, (3, 3, c)).astype(np.int8)
    bc, bd = rng.integers(-4000, 4000, o), rng.integers(-4000, 4000, c)
    rqc = Requant.from_scale(rng.permutation(np.geomspace(2e-5, 2e-1, o)), 7)
    rqd = Requant.from_scale(rng.permutation(np.geomspace(2e-5, 2e-1, c)), 120)
    geo = GridGeometry(h, w, 3, 1, 1)
    funcs, calls, inputs, outs = {}, [], {}, []

    def add(name, func, args):
        funcs[name] = func.with_attr("global_symbol", name)
        for k, a in enumerate(args[:-1]):
            inputs[f"{name}_{k}"] = a
        calls.append((name, [f"{name}_{k}" for k in range(len(args) - 1)] + [f"{name}_y"]))
        outs.append(f"{name}_y")

    for v in layouts.VARIANTS:
        pb = transforms.pad_bias(bc, v)
        conv = H.qconv2d_grid(v, geo, c, o, rqc)
        args = [conv2d.pack_input(x, geo, v), conv2d.pack_conv_weights(wc, v), pb,
                rqc.table(len(pb)), None]
        add(f"conv_{v}", hvx_kernel(conv), args)
        if v == "vrmpy":
            add("conv_te", conv, args)
        pb = transforms.pad_bias(bd, v)
        add(f"dw_{v}", hvx_kernel(H.qdepthwise_grid(v, geo, c, rqd)),
            [conv2d.pack_input(x, geo, v), depthwise.pack_dw_weights(wd, v), pb,
             rqd.table(len(pb)), None])
    src = Tensor("x", 1, 1, 37, "vmpa", 3,
                 GridGeometry(1, 1, 1, min_grid_w=3).out_shape("vmpa", 37))
    xv = rng.integers(0, 256, src.shape).astype(np.uint8)
    wf = rng.integers(-128, 128, (37, 45)).astype(np.int8)
    bf = np.zeros(H.dense_shapes(37, 45)[1], np.int32)
    bf[:45] = rng.integers(-3000, 3000, 45)
    rqf = Requant.from_scale(rng.permutation(np.geomspace(2e-5, 2e-2, 45)), 9)
    dense = H.qdense_grid("vrmpy", src, 45, rqf)
    args = [xv, pack_dense_weights(wf), bf, rqf.table(len(bf)), None]
    add("fc", hvx_kernel(dense), args)
    add("fc_te", dense, args)
    xm = rng.integers(0, 256, (40, 12)).astype(np.uint8)
    wm = rng.integers(-64, 65, (12, 10)).astype(np.int8)
    mm_layout = layouts.LAYOUT_OF["vmpa"]
    pb = transforms.pad_bias(bf[:10], "vmpa")
    add("mm", matmul.matmul("vmpa", 40, 12, 10, rqc),
        [mm_layout.pack(xm), transforms.pack_weights(wm, "vmpa"), pb, rqc.table(len(pb)), None])
    res = runner.run(funcs, calls, inputs, outs)
    y = res.outputs
    for v in layouts.VARIANTS:
        got = conv2d.unpack_output(y[f"conv_{v}_y"], geo, o)
        assert np.array_equal(got, reference.qconv2d_nhwc(x, wc, bc, rqc, 1, 1)), v
        got = conv2d.unpack_output(y[f"dw_{v}_y"], geo, c)
        assert np.array_equal(got, reference.qdepthwise_conv2d_nhwc(x, wd, bd, rqd, 1, 1)), v
    assert np.array_equal(y["conv_te_y"], y["conv_vrmpy_y"])
    assert np.array_equal(y["fc_te_y"], y["fc_y"])
    y_shape = GridGeometry(1, 1, 1).out_shape("vrmpy", 45)
    got = Tensor("y", 1, 1, 45, "vrmpy", 1, y_shape).to_nhwc(y["fc_y"]).reshape(-1)
    want = rqf.numpy(src.to_nhwc(xv).reshape(-1).astype(np.int64) @ wf + bf[:45])
    assert np.array_equal(got, want) and len(set(want.tolist())) > 10
    got = mm_layout.unpack(y["mm_y"], 40, 10)
    assert np.array_equal(got, reference.qmatmul(xm, wm, bf[:10], rqc))


@pytest.mark.needs_toolchain
def test_hexagon_run_per_channel_runs_bit_exact_and_agrees_with_onnx_runtime(tmp_path):
    """``tvm-cocopie hexagon run FLOAT.onnx --per-channel``: quantized per channel, run
    whole under qemu-hexagon, bit-exact against numpy, ONNX Runtime within a step per layer."""
    import argparse

    from tvm_cocopie.hexagon import cli

    src = tmp_path / "float.onnx"
    onnx.save(_pc_cnn(), src)
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "r.json"
    args = parser.parse_args(["hexagon", "run", str(src), "--per-channel", "--calibration", "4",
                              "--json", str(out), "--save-quantized", str(tmp_path / "q")])
    assert args.func(args) == 0
    result = json.loads(out.read_text())
    assert result["exact"] and result["quantized_from_float"]
    assert result["per_channel_layers"] == 4  # conv, depthwise, grouped, FC
    assert {"conv", "dwconv", "gconv", "fc"} <= set(result["packets_by_class"])
    assert ort_agrees(result["ort_agreement"]["per_layer"])

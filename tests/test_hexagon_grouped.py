"""Grouped int8 convolutions on HVX (``vrmpy`` over each output's own groups) under
qemu-hexagon, bit for bit against the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_cocopie.hexagon.kernels import conv2d, grouped, transforms
from tvm_cocopie.hexagon.selection.costmodel import STATED_ERROR, CostModel
from tvm_cocopie.topi.int8 import reference
from tvm_cocopie.topi.int8.compute import Requant
from tvm_cocopie.topi.int8.hvx import GroupWindow
from tvm_cocopie.topi.int8.layouts import GridGeometry

GROUPED = [
    # (H, W, C, O, groups, kernel, stride, pad)
    (8, 8, 128, 128, 32, 3, 1, 1),  # ResNeXt: 32 groups of 4
    (7, 9, 128, 128, 8, 3, 2, 1),  # 8 groups of 16, stride 2
    (6, 6, 64, 96, 2, 3, 1, 1),  # 2 groups of 32 -> 48
    (5, 7, 12, 12, 6, 3, 1, 1),  # 2 channels per group: half the products are zeros
    (9, 5, 24, 12, 4, 1, 1, 0),  # 1x1, 6 in / 3 out per group: unaligned windows
]


def _data(h, w, c, o, groups, k, seed, per_channel=False):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, h, w, c)).astype("uint8")
    wt = rng.integers(-127, 128, (k, k, c // groups, o)).astype("int8")
    b = rng.integers(-4000, 4000, o).astype("int32")
    scale = 1.0 / (40 * k * k * c // groups)
    if per_channel:
        scale = scale * rng.uniform(0.5, 2.0, o)
    return x, wt, b, Requant.from_scale(scale, zero_point=7)


def test_group_window_reads_only_the_outputs_groups():
    win = GroupWindow(128, 128, 32)
    assert (win.span, win.base(5)) == (1, 5)
    win = GroupWindow(128, 128, 8)  # 16 per group: 4 input groups per output vector
    assert (win.span, win.base(0), win.base(4), win.base(31)) == (4, 0, 4, 28)
    win = GroupWindow(12, 12, 6)  # an output vector spans 2 groups of 2: 4 channels
    assert win.span == 1 and [win.base(ov) for ov in range(3)] == [0, 1, 2]


def test_packed_words_multiply_back_to_the_dense_block_diagonal():
    c, o, g = 24, 12, 4
    rng = np.random.default_rng(3)
    wt = rng.integers(-127, 128, (1, 1, c // g, o)).astype("int8")
    words = grouped.pack_grouped_weights(wt, g)
    win = GroupWindow(c, o, g)
    dense = np.zeros((c, o), np.int64)
    raw = words.view(np.int8).reshape(*words.shape, 4)  # t, ov, k, j, q
    for ov in range(win.out_groups):
        for k in range(win.span):
            for j in range(4):
                for q in range(4):
                    dense[4 * (win.base(ov) + k) + q, 4 * ov + j] += raw[0, ov, k, j, q]
    want = np.zeros((c, o), np.int64)
    for n in range(o):
        grp = n // (o // g)
        want[grp * (c // g):(grp + 1) * (c // g), n] = wt[0, 0, :, n]
    np.testing.assert_array_equal(dense, want)


def _run(shape, per_channel=False, pad_value=0, seed=0):
    from tvm_cocopie.emulation import hexagon as runner

    h, w, c, o, g, k, s, p = shape
    x, wt, b, rq = _data(h, w, c, o, g, k, seed + sum(shape), per_channel)
    geo = GridGeometry(h, w, k, s, p)
    inputs = {"x": conv2d.pack_input(x, geo, "vrmpy"),
              "w": grouped.pack_grouped_weights(wt, g),
              "bias": transforms.pad_bias(b, "vrmpy")}
    if pad_value:  # the padding holds the input's zero point
        img = np.full((1, h + 2 * p, w + 2 * p, c), pad_value, np.uint8)
        img[:, p:p + h, p:p + w] = x
        inputs["x"] = conv2d.pack_input(img, GridGeometry(h + 2 * p, w + 2 * p, k, s, 0,
                                                          geo.grid_w), "vrmpy")
    args = ["x", "w", "bias"]
    if rq.per_channel:
        inputs["rq"] = rq.table(len(inputs["bias"]))
        args.append("rq")
    res = runner.run({"gconv": grouped.grouped_conv2d(geo, c, o, g, rq)},
                     [("gconv", [*args, "y"])], inputs, ["y"], count_packets=True)
    y = conv2d.unpack_output(res.outputs["y"], geo, o)
    want = reference.qgroup_conv2d_nhwc(x, wt, b, rq, g, s, p, pad_value)
    np.testing.assert_array_equal(y, want)
    return res.packets[0]


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("shape", GROUPED, ids=lambda s: "h{}w{}c{}o{}g{}k{}s{}p{}".format(*s))
def test_grouped_conv_bit_exact_and_priced_by_the_cost_model(shape):
    packets = _run(shape)
    h, w, c, o, g, k, s, p = shape
    predicted = CostModel.default().gconv(GridGeometry(h, w, k, s, p), c, o, g)
    assert abs(predicted / packets - 1) <= STATED_ERROR["conv"], (predicted, packets)


def test_live_taps_leave_out_the_padding_only_ones():
    assert GridGeometry(1, 1, 3, 1, 1).live_taps() == [(1, 1)]
    assert GridGeometry(2, 2, 3, 2, 1).live_taps() == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert len(GridGeometry(2, 2, 3, 1, 1).live_taps()) == 9


@pytest.mark.needs_toolchain
def test_grouped_conv_of_live_taps_only_bit_exact():
    """A 3x3 conv of a 1x1 map computes its centre tap alone, the others' constant
    products (the zero point times the weights) folded into the bias."""
    from tvm_cocopie.emulation import hexagon as runner

    h = w = 1
    c, o, g, zx = 64, 64, 8, 93
    x, wt, b, rq = _data(h, w, c, o, g, 3, seed=11)
    geo = GridGeometry(h, w, 3, 1, 1)
    taps = geo.live_taps()
    folded = b.astype(np.int64)
    for dy in range(3):
        for dx in range(3):
            if (dy, dx) not in taps:
                folded += zx * wt[dy, dx].astype(np.int64).sum(0)
    res = runner.run({"gconv": grouped.grouped_conv2d(geo, c, o, g, rq, taps)},
                     [("gconv", ["x", "w", "bias", "y"])],
                     {"x": conv2d.pack_input(x, geo, "vrmpy"),
                      "w": grouped.pack_grouped_weights(wt, g, taps),
                      "bias": transforms.pad_bias(folded.astype(np.int32), "vrmpy")},
                     ["y"], count_packets=True)
    y = conv2d.unpack_output(res.outputs["y"], geo, o)
    np.testing.assert_array_equal(y, reference.qgroup_conv2d_nhwc(x, wt, b, rq, g, 1, 1, zx))


@pytest.mark.needs_toolchain
def test_grouped_conv_per_channel_and_zero_point_padding_bit_exact():
    _run((6, 7, 64, 64, 16, 3, 1, 1), per_channel=True, pad_value=131)
    _run((8, 8, 128, 128, 32, 3, 2, 1), per_channel=True, pad_value=77, seed=1)


def _grouped_cnn(size: int = 12, seed: int = 5):
    """A linear 3x3 conv (its output's zero point is not 0: the next layer's padding
    holds it), a ResNeXt 3x3/2 conv of 32 groups of 4 + ReLU, a 1x1 of 8 groups of 16
    and one of 2 groups (64 inputs and 48 outputs each)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    n = helper.make_node
    inits = [init("w0", (128, 3, 3, 3)), init("b0", (128,), 0.1), init("w1", (128, 4, 3, 3)),
             init("b1", (128,), 0.1), init("w2", (128, 16, 1, 1)), init("w3", (96, 64, 3, 3))]
    nodes = [
        n("Conv", ["x", "w0", "b0"], ["c0"], pads=[1] * 4, name="conv0"),
        n("Conv", ["c0", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2], group=32,
          name="g32x4"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w2"], ["c2"], group=8, name="g8x16"),
        n("Conv", ["c2", "w3"], ["y"], pads=[1] * 4, group=2, name="g2x64"),
    ]
    half = size // 2
    graph = helper.make_graph(
        nodes, "grouped", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 96, half, half])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_grouped_convs_run_bit_exact_in_a_network(tmp_path, per_channel):
    import onnx

    from tvm_cocopie import ptq
    from tvm_cocopie.hexagon.executor import model as hexmodel
    from tvm_cocopie.hexagon.executor import qonnx

    path = ptq.quantize_onnx(_grouped_cnn(), tmp_path / "grouped.onnx", count=4,
                             per_channel=per_channel)
    net = qonnx.read_quantized(onnx.load(str(path)))
    grouped_layers = [q for q in net.layers if q.op_class == "gconv"]
    assert [q.params["groups"] for q in grouped_layers] == [32, 8, 2]
    assert grouped_layers[0].pad_value != 0  # padding with the input's zero point
    assert all(q.rq.per_channel == per_channel for q in grouped_layers)
    res = hexmodel.run_model(path, compare_ort=False)
    assert res["exact"], res
    assert all(res["plan"][q.layer.name] == "vrmpy" for q in grouped_layers)
    assert grouped_layers[0].layer.macs == 6 * 6 * 9 * 4 * 128  # only the groups' products
    assert res["packets_by_class"]["gconv"] > 0

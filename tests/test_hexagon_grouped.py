"""Grouped int8 convolutions on HVX (``vrmpy`` over each output's own groups) under
qemu-hexagon, bit for bit against the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_cocopie.hexagon.kernels import conv2d, grouped, transforms
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
def test_grouped_conv_bit_exact(shape):
    assert _run(shape) > 0


@pytest.mark.needs_toolchain
def test_grouped_conv_per_channel_and_zero_point_padding_bit_exact():
    _run((6, 7, 64, 64, 16, 3, 1, 1), per_channel=True, pad_value=131)
    _run((8, 8, 128, 128, 32, 3, 2, 1), per_channel=True, pad_value=77, seed=1)

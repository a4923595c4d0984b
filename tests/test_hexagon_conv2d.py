"""GCD²'s int8 convolutions (1x1, 3x3, 7x7/2, depthwise) on HVX under qemu-hexagon."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_cocopie.hexagon.kernels import conv2d, depthwise, transforms
from tvm_cocopie.topi.int8 import layouts, reference
from tvm_cocopie.topi.int8.compute import Requant


def _data(h, w, c, o, k, seed, wmax, depthwise_=False):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, h, w, c)).astype("uint8")
    wshape = (k, k, c) if depthwise_ else (k, k, c, o)
    wt = rng.integers(-wmax, wmax + 1, wshape).astype("int8")
    b = rng.integers(-4000, 4000, c if depthwise_ else o).astype("int32")
    taps = k * k * (1 if depthwise_ else c)
    return x, wt, b, Requant.from_scale(1.0 / (50 * taps), zero_point=5)


def _run(func, variant, x, w_words, bias):
    from tvm_cocopie.emulation import hexagon as runner

    return runner.run(
        {"conv": func},
        [("conv", ["x", "w", "bias", "y"])],
        {"x": x, "w": w_words, "bias": transforms.pad_bias(bias, variant)},
        ["y"],
        count_packets=True,
    )


CONVS = [
    # (H, W, C, O, kernel, stride, pad)
    (9, 7, 16, 5, 1, 1, 0),  # 1x1, awkward sizes
    (13, 11, 6, 10, 3, 1, 1),  # 3x3 same padding
    (15, 17, 3, 8, 7, 2, 3),  # 7x7 stride 2 stem
    (10, 10, 8, 8, 3, 2, 1),  # 3x3 stride 2
]


def test_geometry_of_a_resnet_stem():
    geo = conv2d.GridGeometry(224, 224, 7, 2, 3)
    assert (geo.out_h, geo.out_w, geo.phases, geo.grid_w) == (112, 112, 4, 115)
    assert geo.tap(3, 4) == (1 * 2 + 0, 1 * 115 + 2)


def test_pack_and_unpack_are_inverse_on_the_grid():
    geo = conv2d.GridGeometry(5, 6, 3, 1, 1)
    x = np.arange(5 * 6 * 3, dtype=np.uint8).reshape(1, 5, 6, 3)
    packed = conv2d.pack_input(x, geo, "vrmpy")
    # a 1x1 identity "conv" on the same grid reads row (i+1)*Wq + j+1 for pixel (i, j)
    rows = packed[0].transpose(1, 0, 2).reshape(packed.shape[2], -1)
    assert rows[(2 + 1) * geo.grid_w + (4 + 1), :3].tolist() == x[0, 2, 4].tolist()


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("variant", layouts.VARIANTS)
@pytest.mark.parametrize("shape", CONVS, ids=lambda s: "h{}w{}c{}o{}k{}s{}p{}".format(*s))
def test_conv2d_bit_exact(variant, shape):
    h, w, c, o, k, s, p = shape
    x, wt, b, rq = _data(h, w, c, o, k, seed=sum(shape), wmax=64)
    geo = conv2d.GridGeometry(h, w, k, s, p)
    res = _run(
        conv2d.conv2d(variant, geo, c, o, rq),
        variant,
        conv2d.pack_input(x, geo, variant),
        conv2d.pack_conv_weights(wt, variant),
        b,
    )
    y = conv2d.unpack_output(res.outputs["y"], geo, o)
    np.testing.assert_array_equal(y, reference.qconv2d_nhwc(x, wt, b, rq, s, p))
    assert res.packets[0] > 0


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("variant", layouts.VARIANTS)
@pytest.mark.parametrize("shape", [(10, 9, 6, 3, 1, 1), (11, 12, 16, 3, 2, 1), (6, 5, 4, 5, 1, 2)])
def test_depthwise_bit_exact(variant, shape):
    h, w, c, k, s, p = shape
    x, wt, b, rq = _data(h, w, c, c, k, seed=sum(shape), wmax=127, depthwise_=True)
    geo = conv2d.GridGeometry(h, w, k, s, p)
    res = _run(
        depthwise.depthwise_conv2d(variant, geo, c, rq),
        variant,
        conv2d.pack_input(x, geo, variant),
        depthwise.pack_dw_weights(wt, variant),
        b,
    )
    y = conv2d.unpack_output(res.outputs["y"], geo, c)
    np.testing.assert_array_equal(y, reference.qdepthwise_conv2d_nhwc(x, wt, b, rq, s, p))


def test_a_tap_fold_places_every_reduction_entry_once():
    for k, c in ((7, 3), (3, 3), (3, 1), (5, 2), (2, 3)):
        fold = layouts.TapFold(k, c)
        seen = []
        for g in range(fold.groups):
            pieces = fold.pieces(g)
            for tap, first, last, offset in pieces:
                assert 0 <= first <= last < c and 0 <= first + offset and last + offset <= 3
                seen += [tap * c + ch for ch in range(first, last + 1)]
        assert seen == list(range(k * k * c))
    assert layouts.TapFold(7, 3).groups == 37 and layouts.TapFold(3, 3).groups == 7
    assert layouts.TapFold.applies("vrmpy", 7, 3) and not layouts.TapFold.applies("vrmpy", 7, 4)
    assert not layouts.TapFold.applies("vrmpy", 1, 3) and not layouts.TapFold.applies("vmpy", 7, 3)


FOLDED = [
    # (H, W, C, O, kernel, stride, pad): convs of fewer than 4 channels, taps folded
    (15, 17, 3, 8, 7, 2, 3),  # ResNet's RGB stem
    (12, 12, 3, 16, 3, 2, 1),  # MobileNet's
    (9, 10, 1, 12, 3, 1, 1),  # a gray image
    (11, 9, 2, 4, 5, 2, 2),
    (8, 8, 3, 8, 2, 1, 0),  # even kernel, no padding
]


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("shape", FOLDED, ids=lambda s: "h{}w{}c{}o{}k{}s{}p{}".format(*s))
def test_folded_taps_kernel_equals_its_compute_and_numpy(shape, per_channel):
    """The folded kernel against the TE compute it replaces, byte for byte (junk grid rows
    included), and against numpy, with the layout's padding bytes of every pixel set to a
    non-zero fill (the executor writes the input's zero point there): the mask drops them."""
    from tvm_cocopie.emulation.hexagon import run_func
    from tvm_cocopie.hexagon.kernels.dispatch import hvx_kernel
    from tvm_cocopie.topi.int8 import hvx as H

    h, w, c, o, k, s, p = shape
    x, wt, b, rq = _data(h, w, c, o, k, seed=sum(shape), wmax=127)
    if per_channel:
        rq = Requant.from_scale(np.linspace(0.5, 2.0, o) / (50 * k * k * c), zero_point=7)
    geo = conv2d.GridGeometry(h, w, k, s, p)
    xg = conv2d.pack_input(x, geo, "vrmpy")
    xg[..., c:] = 0xA5
    words = conv2d.pack_conv_weights(wt, "vrmpy")
    assert words.shape[:2] == (1, layouts.TapFold(k, c).groups)
    bias = transforms.pad_bias(b, "vrmpy")
    func = H.qconv2d_grid("vrmpy", geo, c, o, rq)
    table = [] if not rq.per_channel else [rq.table(len(bias))]
    y0 = np.zeros(geo.out_shape("vrmpy", o), np.uint8)
    outs = []
    for f in (hvx_kernel(func), func):
        (y,), _ = run_func(f.with_attr("global_symbol", "k"), [xg, words, bias, *table, y0])
        outs.append(y)
    assert np.array_equal(outs[0], outs[1])
    got = conv2d.unpack_output(outs[0], geo, o)
    np.testing.assert_array_equal(got, reference.qconv2d_nhwc(x, wt, b, rq, s, p))


@pytest.mark.needs_toolchain
def test_folding_a_stems_taps_saves_packets():
    """A 7x7/2 RGB stem folded into 37 groups runs in fewer packets than 49 taps of a
    4-byte group whose fourth byte is padding (measured: 0.58 -> 0.73 of the HVX peak at
    56x56, 0.64 -> 0.79 at 224x224)."""
    from tvm_cocopie.hexagon.tools import measure

    folded = measure.gcd2_conv("vrmpy", 56, 56, 3, 64, 7, 2, 3)
    padded = measure.gcd2_conv("vrmpy", 56, 56, 4, 64, 7, 2, 3)  # 49 taps of 4 channels
    assert folded["exact"] and padded["exact"]
    assert folded["packets"] < 0.85 * padded["packets"]


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("scale", [3e-3, 2e-6, 1.5e-7])  # shifts d = s - 16 below and past 15
def test_narrowing_requantization_is_exact_at_every_shift(scale):
    """Per-tensor requantization rounds and narrows in ``vasr(...):rnd:sat``, which shifts by
    at most 15: larger shifts go through a plain shift first. Accumulators across the whole
    int32 range the 15-bit multiplier allows, clipped at both ends."""
    h, w, c, o = 6, 7, 64, 16
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, h, w, c)).astype("uint8")
    wt = rng.integers(-128, 128, (1, 1, c, o)).astype("int8")
    span = min(int(160 / scale), 2**30)  # outputs spread over [0, 255] and past both ends
    b = rng.integers(-span, span, o).astype("int32")
    rq = Requant.from_scale(scale, zero_point=128)
    assert (rq.shift - 16 > 15) == (scale < 1e-5)
    geo = conv2d.GridGeometry(h, w, 1, 1, 0)
    res = _run(conv2d.conv2d("vrmpy", geo, c, o, rq), "vrmpy", conv2d.pack_input(x, geo, "vrmpy"),
               conv2d.pack_conv_weights(wt, "vrmpy"), b)
    y = conv2d.unpack_output(res.outputs["y"], geo, o)
    want = reference.qconv2d_nhwc(x, wt, b, rq, 1, 0)
    np.testing.assert_array_equal(y, want)
    assert 0 < np.count_nonzero((want > 0) & (want < 255))  # not all clipped

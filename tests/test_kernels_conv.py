"""Convolutions through the cocopie pipeline (blocked layout, our computes and
schedules) against a float64 numpy reference, on awkward shapes: prime channel
counts, strides, asymmetric padding, dilation, batch > 1, odd sizes, groups,
depthwise, and fused epilogues."""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_common import (
    TARGET,
    assert_allclose,
    build_graph,
    conv2d_reference,
    run,
    tensor_var,
)
from tvm import relax
from tvm.relax import op as R

# (N, C, H, W, O, K, stride, padding (t, l, b, r), dilation, groups)
CASES = {
    "resnet-3x3": (1, 16, 14, 14, 32, 3, 1, (1, 1, 1, 1), 1, 1),
    "1x1": (1, 24, 9, 9, 40, 1, 1, (0, 0, 0, 0), 1, 1),
    "rgb-stem-7x7-s2": (1, 3, 23, 23, 16, 7, 2, (3, 3, 3, 3), 1, 1),
    "prime-channels": (1, 7, 11, 9, 13, 3, 1, (1, 1, 1, 1), 1, 1),
    "prime-out-blocked-in": (1, 16, 8, 8, 11, 3, 1, (1, 1, 1, 1), 1, 1),
    "stride2-odd": (1, 16, 15, 13, 16, 3, 2, (1, 1, 1, 1), 1, 1),
    "1x1-stride2": (1, 32, 14, 14, 64, 1, 2, (0, 0, 0, 0), 1, 1),
    "asym-pad": (1, 8, 10, 10, 16, 3, 1, (0, 1, 2, 1), 1, 1),
    "dilation2": (1, 16, 12, 12, 16, 3, 1, (2, 2, 2, 2), 2, 1),
    "batch3": (3, 16, 7, 7, 16, 3, 1, (1, 1, 1, 1), 1, 1),
    "7x7-flat": (1, 64, 7, 7, 64, 3, 1, (1, 1, 1, 1), 1, 1),
    "1-pixel": (1, 64, 1, 1, 48, 1, 1, (0, 0, 0, 0), 1, 1),
    "groups2": (1, 32, 9, 9, 32, 3, 1, (1, 1, 1, 1), 1, 2),
    "groups-cpg4": (1, 32, 8, 8, 32, 3, 1, (1, 1, 1, 1), 1, 8),
    "groups-cpg16": (2, 64, 6, 6, 32, 3, 2, (1, 1, 1, 1), 1, 4),
    "groups-unaligned": (1, 15, 8, 8, 15, 3, 1, (1, 1, 1, 1), 1, 5),
    # chunks narrower than a vector (58 = 29 x 2, 116 = 29 x 4): wide register tiles
    # over several chunks, the outputs padded to whole tiles
    "narrow-58-1x1": (1, 58, 10, 10, 58, 1, 1, (0, 0, 0, 0), 1, 1),
    "narrow-116-3x3": (1, 116, 7, 7, 116, 3, 1, (1, 1, 1, 1), 1, 1),
    "narrow-20-s2": (1, 24, 9, 11, 20, 3, 2, (1, 1, 1, 1), 1, 1),
    "depthwise-narrow-58": (1, 58, 12, 12, 58, 3, 1, (1, 1, 1, 1), 1, 58),
    "depthwise-narrow-58-s2": (1, 58, 12, 12, 58, 3, 2, (1, 1, 1, 1), 1, 58),
    # odd chunk counts (13, 11): two-vector weight tiles over one zero-weight extra chunk
    "odd-chunks-1x1": (1, 32, 9, 9, 104, 1, 1, (0, 0, 0, 0), 1, 1),
    "odd-chunks-3x3-s2": (1, 16, 11, 11, 88, 3, 2, (1, 1, 1, 1), 1, 1),
    "odd-chunks-1-pixel": (1, 64, 1, 1, 120, 1, 1, (0, 0, 0, 0), 1, 1),
    "depthwise": (1, 32, 13, 13, 32, 3, 1, (1, 1, 1, 1), 1, 32),
    # row tiles that do not divide the rows / columns, inline padding on every border
    "depthwise-7x7-odd": (1, 16, 17, 19, 16, 7, 1, (3, 3, 3, 3), 1, 16),
    "depthwise-s2-asym": (1, 24, 15, 16, 24, 3, 2, (0, 0, 1, 1), 1, 24),
    "depthwise-s2": (2, 16, 14, 14, 16, 3, 2, (1, 1, 1, 1), 1, 16),
    "depthwise-5x5-dil": (1, 24, 11, 11, 24, 5, 1, (4, 4, 4, 4), 2, 24),
    "depthwise-multiplier": (1, 8, 8, 8, 16, 3, 1, (1, 1, 1, 1), 1, 8),
}


def _conv_model(case, epilogue=None):
    n, c, h, w, o, k, s, pad, d, g = case
    rng = np.random.default_rng(sum(case[:6]))
    weight = rng.standard_normal((o, c // g, k, k)).astype("float32")
    bias = rng.standard_normal((1, o, 1, 1)).astype("float32")
    x = tensor_var("x", (n, c, h, w))

    def body(bb, x):
        y = bb.emit(R.nn.conv2d(x, relax.const(weight), strides=[s, s], padding=list(pad),
                                dilation=[d, d], groups=g))
        if epilogue:
            y = epilogue(bb, y, relax.const(bias))
        return y

    data = rng.standard_normal((n, c, h, w)).astype("float32")
    ref = conv2d_reference(data, weight, (s, s), pad, (d, d), g)
    return build_graph([x], body), data, ref, bias


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv2d_blocked_layout(name):
    mod, data, ref, _ = _conv_model(CASES[name])
    assert_allclose(run(mod, [data]), ref)


@pytest.mark.parametrize("name", ["resnet-3x3", "prime-channels", "groups-cpg4", "depthwise",
                                  "7x7-flat", "stride2-odd"])
def test_conv2d_nchw_graph_without_layout_pass(name):
    """Layout stage off: the conv packs/unpacks NCHW inside its own kernel."""
    mod, data, ref, _ = _conv_model(CASES[name])
    assert_allclose(run(mod, [data], layout=False), ref)


def _relu6(x):
    return np.clip(x, 0, 6)


EPILOGUES = {
    "bias-relu": (lambda bb, y, b: bb.emit(R.nn.relu(R.add(y, b))),
                  lambda y, b: np.maximum(y + b, 0)),
    "bias-relu6": (lambda bb, y, b: bb.emit(R.clip(R.add(y, b), 0, 6)),
                   lambda y, b: _relu6(y + b)),
    "bn-scale-shift": (lambda bb, y, b: bb.emit(R.add(R.multiply(y, b), R.sqrt(R.abs(b)))),
                       lambda y, b: y * b + np.sqrt(np.abs(b))),
    "hardswish": (lambda bb, y, b: bb.emit(R.multiply(y, R.divide(R.clip(R.add(y, relax.const(
        3.0)), 0, 6), relax.const(6.0)))), lambda y, b: y * _relu6(y + 3) / 6),
    "hardsigmoid": (lambda bb, y, b: bb.emit(R.clip(R.add(R.multiply(y, relax.const(0.2)),
                                                          relax.const(0.5)), 0, 1)),
                    lambda y, b: np.clip(y * 0.2 + 0.5, 0, 1)),
    "sigmoid": (lambda bb, y, b: bb.emit(R.sigmoid(R.add(y, b))),
                lambda y, b: 1 / (1 + np.exp(-(y + b)))),
    "gelu": (lambda bb, y, b: bb.emit(R.nn.gelu(y)),
             lambda y, b: 0.5 * y * (1 + np.vectorize(__import__("math").erf)(y / np.sqrt(2)))),
}


@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
@pytest.mark.parametrize("name", ["resnet-3x3", "7x7-flat", "depthwise", "prime-channels",
                                  "narrow-58-1x1", "odd-chunks-1x1"])
def test_fused_epilogues(name, epilogue):
    build_epi, ref_epi = EPILOGUES[epilogue]
    mod, data, ref, bias = _conv_model(CASES[name], build_epi)
    assert_allclose(run(mod, [data]), ref_epi(ref, bias.astype(np.float64)))


def test_residual_block_keeps_the_blocked_layout():
    """conv -> relu -> conv + x: one layout transform in, one out, numerically right."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((16, 16, 3, 3)).astype("float32") * 0.2
    w2 = rng.standard_normal((16, 16, 3, 3)).astype("float32") * 0.2
    x = tensor_var("x", (1, 16, 10, 10))

    def body(bb, x):
        y = bb.emit(R.nn.relu(R.nn.conv2d(x, relax.const(w1), padding=[1, 1, 1, 1])))
        z = bb.emit(R.nn.conv2d(y, relax.const(w2), padding=[1, 1, 1, 1]))
        return bb.emit(R.nn.relu(R.add(z, x)))

    data = rng.standard_normal((1, 16, 10, 10)).astype("float32")
    y = np.maximum(conv2d_reference(data, w1, padding=(1, 1, 1, 1)), 0)
    ref = np.maximum(conv2d_reference(y, w2, padding=(1, 1, 1, 1)) + data, 0)
    mod = build_graph([x], body)
    assert_allclose(run(mod, [data]), ref)
    from tvm_cocopie.relay_passes.layout import layout_passes_for
    from tvm_cocopie.target import host_target

    laid = mod
    for p in layout_passes_for(host_target()):
        laid = p(laid)
    text = laid["main"].script()
    assert text.count("R.layout_transform(") == 2  # x in (shared by conv and add) + out
    assert text.count('data_layout="NCHW8c"') == 2 or text.count("NCHW16c") >= 2


@pytest.mark.parametrize("c,o,s,hw", [(24, 16, 2, 7), (8, 5, 3, 4)])
def test_conv_transpose_kernel_equals_stride_as_subpixel_conv(c, o, s, hw):
    rng = np.random.default_rng(c + o)
    w = rng.standard_normal((c, o, s, s)).astype("float32")
    x = tensor_var("x", (1, c, hw, hw))
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.relu(R.nn.conv2d_transpose(
        x, relax.const(w), strides=[s, s]))))
    data = rng.standard_normal((1, c, hw, hw)).astype("float32")
    ref = np.einsum("ncij,coab->noiajb", data.astype(np.float64), w).reshape(1, o, hw * s, hw * s)
    assert_allclose(run(mod, [data]), np.maximum(ref, 0))
    from test_kernels_common import scheduled

    text = scheduled(mod).script()
    assert "conv2d_transpose" not in text and "cocopie.conv2d_nchwc" in text


def test_conv_left_to_tvm_keeps_the_blocked_layout_around_it(caplog):
    """A grouped conv the kernels cannot tile (6 channels per group, 8-lane chunks)
    between blocked convs: it stays NCHW with transforms around it, instead of TVM's
    layout inference failing and every conv of the graph losing the blocked layout."""
    import logging

    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((24, 16, 1, 1)).astype("float32") / 4
    wg = rng.standard_normal((24, 6, 3, 3)).astype("float32") / 7
    w2 = rng.standard_normal((16, 24, 1, 1)).astype("float32") / 5
    x = tensor_var("x", (1, 16, 9, 7))

    def body(bb, x):
        y = bb.emit(R.nn.conv2d(x, relax.const(w1)))
        y = bb.emit(R.nn.conv2d(y, relax.const(wg), padding=[1, 1, 1, 1], groups=4))
        return bb.emit(R.nn.conv2d(R.nn.relu(y), relax.const(w2)))

    data = rng.standard_normal((1, 16, 9, 7)).astype("float32")
    with caplog.at_level(logging.WARNING, logger="tvm_cocopie.relay_passes.layout"):
        got = run(build_graph([x], body), [data])
    assert "blocked layout skipped" not in caplog.text
    y = conv2d_reference(conv2d_reference(data, w1), wg, padding=(1, 1, 1, 1), groups=4)
    assert_allclose(got, conv2d_reference(np.maximum(y, 0), w2))


def test_squeeze_excite_convs_on_one_pixel_take_the_conv_rule():
    """The 1x1 convs of a squeeze-excite block run on a 1x1 map with add/multiply epilogues;
    a flattened 1-pixel tile made the result layout ``y + x``, which TVM refused, and every
    such kernel fell back to the generic schedule (MobileNetV3-Small: 7, EfficientNet: 10)."""
    from tvm_cocopie.bench.fusion import fusion_stats
    from tvm_cocopie.frontend.importer import from_onnx
    from tvm_cocopie.models.workloads import get_workload

    wl = get_workload("mobilenetv3_small", image_size=64)
    stats = fusion_stats(from_onnx(wl.model, shapes=wl.shapes), TARGET)
    assert stats["fallbacks"] == 0, stats


def test_conv_whose_epilogue_concats_another_tensor_writes_every_output():
    """conv + bias + concat with a tensor from elsewhere (one fused kernel): the concat
    has outputs that do not come from the conv, so it cannot run under the conv's tiles
    (TVM computed only the conv's half there, the other half was never written)."""
    import tvm
    from tvm import te, tirx

    from tvm_cocopie.relay_passes.fusion.profiler import ApplyDefaultSchedule
    from tvm_cocopie.schedules import default_rules
    from tvm_cocopie.target import cpu_info
    from tvm_cocopie.topi.cpu import conv2d_nchwc as cn
    from tvm_cocopie.topi.cpu.tiling import conv_tile

    geo = cn.ConvGeometry(1, 120, 1, 40, 480, 1, 1, (1, 1), (0,) * 4, (1, 1), 1)
    tile = conv_tile(geo, 8, 8, cpu_info(TARGET))
    data = te.placeholder((1, 15, 1, 40, 8), name="data")
    weight = te.placeholder((cn.weight_tiles(geo, tile), 15, 1, 1, 8, tile.wb), name="weight")
    bias = te.placeholder((1, 60, 1, 1, 8), name="bias")
    other = te.placeholder((1, 60, 1, 40, 8), name="other")
    conv = cn.conv2d_nchwc(data, weight, geo, tile)
    biased = te.compute(conv.shape, lambda n, c, y, x, i: conv[n, c, y, x, i] + bias[n, c, 0, 0, i],
                        name="add")
    out = te.compute((1, 120, 1, 40, 8), lambda n, c, y, x, i: tirx.if_then_else(
        c >= 60, biased[n, c - 60, y, x, i], other[n, c, y, x, i]), name="concat")
    func = te.create_prim_func([data, weight, bias, other, out]).with_attr("global_symbol", "main")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in p.shape]).astype("float32")
            for p in func.params[:-1]]
    outs = []
    for scheduled in (False, True):
        mod = tvm.IRModule({"main": func})
        if scheduled:
            with TARGET:
                mod = ApplyDefaultSchedule(*default_rules(TARGET))(mod)
        lib = tvm.compile(mod, target=TARGET)
        result = tvm.runtime.tensor(np.full([1, 120, 1, 40, 8], np.nan, "float32"))
        lib["main"](*[tvm.runtime.tensor(x) for x in args], result)
        outs.append(result.numpy())
    assert not np.isnan(outs[1]).any()
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-4)


def test_conv_with_large_input_and_weights_runs_in_pixel_bands():
    """A 1x1 conv whose input (4.7 MB) and weights (512 KiB) both exceed the caches: the
    parallel loop runs over bands of pixel tiles and every output-channel tile meets a
    band while it is in L2 (weight-stationary, the input came from memory once per
    output-channel tile: SegFormer's fuse conv 22.9 -> 13.3 ms); matches numpy."""
    from test_kernels_common import prim_funcs, scheduled

    from tvm_cocopie.schedules.cpu import conv2d_nchwc as sched

    rng = np.random.default_rng(9)
    w = (rng.standard_normal((256, 512, 1, 1)) / np.sqrt(512)).astype("float32")
    x = tensor_var("x", (1, 512, 48, 48))
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.relu(R.nn.conv2d(x, relax.const(w)))))
    (text,) = [f.script() for n, f in prim_funcs(scheduled(mod)).items() if "conv2d" in n]
    first = next(line for line in text.splitlines() if "T.parallel" in line)
    extent = int(first.split("T.parallel(T.int64(")[1].split(")")[0])
    # weight-stationary: (output-channel tiles >= 2) x (pixel tiles >= 2304 / 8) iterations;
    # banded: a band's input is BAND_INPUT_BYTES, 16+ tiles of at most 8 pixels
    assert 4 * 8 * 512 * 16 <= sched.BAND_INPUT_BYTES and extent < 2304 // 8, first
    data = rng.standard_normal((1, 512, 48, 48)).astype("float32")
    ref = np.maximum(np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), data), 0)
    assert_allclose(run(mod, [data]), ref)

"""GSPC grouped convolution (tvm_cocopie.topi.cpu.gspc; its pixel-vector variant for
segments of a quarter vector or less) and grouped Winograd through the
cocopie pipeline against a float64 numpy reference: groups of 2, 3, 4, 8 and C channels,
channel counts that are not a multiple of the SIMD width, stride 2, padding, dilation,
batch > 1, a symbolic batch, fused epilogues; which kernel each grouped conv takes, the
packed weight (no zero padding), and the ``grouped`` switch back to the block-diagonal
kernel the CPU layer used before."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_kernels_common import (
    AVX2,
    AVX512,
    TARGET,
    assert_allclose,
    build_graph,
    conv2d_reference,
    prim_funcs,
    run,
    scheduled,
    tensor_var,
)
from tvm import relax
from tvm.relax import op as R

from tvm_cocopie.errors import CompilationError
from tvm_cocopie.target import cpu_info
from tvm_cocopie.topi.cpu import gspc, gspc_shift, tiling
from tvm_cocopie.topi.cpu.conv2d_nchwc import ConvGeometry

# (N, C, H, W, O, K, stride, padding (t, l, b, r), dilation, groups)
CASES = {
    "g2-wide-groups": (1, 32, 9, 9, 32, 3, 1, (1, 1, 1, 1), 1, 2),
    "g3-cpg8": (1, 24, 10, 10, 24, 3, 1, (1, 1, 1, 1), 1, 3),
    "g4-cpg4": (1, 16, 9, 11, 16, 3, 1, (1, 1, 1, 1), 1, 4),
    "g8-cpg4": (1, 32, 8, 8, 32, 3, 1, (1, 1, 1, 1), 1, 8),
    "g16-cpg2": (1, 32, 10, 10, 32, 3, 1, (1, 1, 1, 1), 1, 16),
    "cpg4-stride2": (1, 64, 15, 13, 64, 3, 2, (1, 1, 1, 1), 1, 16),
    "cpg4-asym-pad": (1, 32, 10, 10, 32, 3, 1, (0, 1, 2, 1), 1, 8),
    "cpg4-dilation2": (1, 32, 12, 12, 32, 3, 1, (2, 2, 2, 2), 2, 8),
    "cpg4-batch3": (3, 32, 7, 7, 32, 3, 1, (1, 1, 1, 1), 1, 8),
    "cpg2-expand": (1, 16, 8, 8, 32, 3, 1, (1, 1, 1, 1), 1, 8),  # 2 in, 4 out per group
    "cpg4-shrink": (1, 32, 8, 8, 16, 3, 1, (1, 1, 1, 1), 1, 8),  # 4 in, 2 out per group
    "cpg4-1x1": (1, 64, 7, 7, 64, 1, 1, (0, 0, 0, 0), 1, 16),
    "resnext-cpg4": (1, 128, 14, 14, 128, 3, 1, (1, 1, 1, 1), 1, 32),
    "depthwise-C": (1, 24, 9, 9, 24, 3, 1, (1, 1, 1, 1), 1, 24),
    "not-simd-36-g9": (1, 36, 8, 8, 36, 3, 1, (1, 1, 1, 1), 1, 9),  # chunks of 4
    "not-simd-20-g5": (1, 20, 9, 9, 20, 3, 2, (1, 1, 1, 1), 1, 5),  # chunks of 4
    "not-simd-36-g18": (1, 36, 9, 9, 36, 3, 1, (1, 1, 1, 1), 1, 18),  # 2 per group, chunks of 4
    "g2-winograd": (1, 64, 16, 16, 64, 3, 1, (1, 1, 1, 1), 1, 2),
    # groups across chunk boundaries (MobileNetV2 G(4): 36 per group in chunks of 8)
    "misaligned-36": (1, 144, 10, 10, 144, 3, 1, (1, 1, 1, 1), 1, 4),
    "misaligned-18-s2": (1, 144, 11, 11, 144, 3, 2, (1, 1, 1, 1), 1, 8),
    "misaligned-9": (1, 72, 8, 8, 72, 3, 1, (1, 1, 1, 1), 1, 8),  # 1-lane segments
    "cpg2-opg8": (1, 16, 9, 9, 64, 3, 1, (1, 1, 1, 1), 1, 8),  # one group per chunk
    # small maps: pixel vectors over the flattened output grid (16 lanes), its rows'
    # tails dropped; stride phases, dilation and uneven padding move the grid's reach
    # half-vector segments on 16 lanes: groups across the chunks (24 per group) run on
    # pixel vectors, groups inside a chunk (8 per group) on segments
    "across-24-g2": (1, 48, 10, 12, 48, 3, 1, (1, 1, 1, 1), 1, 2),
    "inside-8-g16": (1, 128, 10, 10, 128, 3, 1, (1, 1, 1, 1), 1, 16),
    "flat-7x7": (1, 72, 7, 7, 72, 3, 1, (1, 1, 1, 1), 1, 8),  # 9 per group: 1-lane segments
    "flat-s2-asym": (2, 72, 13, 11, 72, 3, 2, (1, 0, 2, 1), 1, 8),
    "flat-dilation2": (1, 36, 5, 5, 36, 3, 1, (2, 2, 2, 2), 2, 4),
    # small groups inside a chunk on lane-shifted input vectors (gspc_shift): stride 2 over
    # an odd width, dilation with uneven padding at batch 2
    "shift-cpg2-s2": (1, 32, 11, 9, 32, 3, 2, (1, 1, 1, 1), 1, 16),
    "shift-cpg4-dil-asym": (2, 64, 9, 10, 64, 3, 1, (2, 1, 0, 2), 2, 16),
}


def _model(case, epilogue=False):
    n, c, h, w, o, k, s, pad, d, g = case
    rng = np.random.default_rng(sum(case[:6]) + g)
    weight = rng.standard_normal((o, c // g, k, k)).astype("float32")
    bias = rng.standard_normal((1, o, 1, 1)).astype("float32")
    x = tensor_var("x", (n, c, h, w))

    def body(bb, x):
        y = bb.emit(R.nn.conv2d(x, relax.const(weight), strides=[s, s], padding=list(pad),
                                dilation=[d, d], groups=g))
        if epilogue:
            y = bb.emit(R.nn.relu(R.add(y, relax.const(bias))))
        return y

    data = rng.standard_normal((n, c, h, w)).astype("float32")
    ref = conv2d_reference(data, weight, (s, s), pad, (d, d), g)
    if epilogue:
        ref = np.maximum(ref + bias, 0)
    return build_graph([x], body), data, ref


def _geo(case) -> ConvGeometry:
    n, c, h, w, o, k, s, pad, d, g = case
    return ConvGeometry(n, c, h, w, o, k, k, (s, s), pad, (d, d), g)


@pytest.mark.parametrize("grouped", gspc.GROUPED)
@pytest.mark.parametrize("name", sorted(CASES))
def test_grouped_conv_matches_numpy(name, grouped):
    mod, data, ref = _model(CASES[name])
    got = run(mod, [data], grouped=grouped)
    if name == "g2-winograd":  # F(4,3) float32 (see test_kernels_winograd)
        assert_allclose(got, ref, rtol=1e-3)
    else:
        assert_allclose(got, ref)


@pytest.mark.parametrize("name", ["g8-cpg4", "g16-cpg2", "cpg4-stride2", "misaligned-36"])
def test_fused_epilogue(name):
    mod, data, ref = _model(CASES[name], epilogue=True)
    assert_allclose(run(mod, [data]), ref)
    convs = {n: f for n, f in prim_funcs(scheduled(mod)).items() if "conv2d" in n}
    assert len(convs) == 1 and all("relu" in n for n in convs)  # the epilogue fused in
    text = next(iter(convs.values())).script()
    # GSPC's segments, fused: chunk lanes / segment lanes (8-lane AVX2: 2 or 4; 16 lanes
    # on AVX-512: up to 8), or for segments of a quarter vector or less the pixel vectors,
    # or for 2-4 channels per group inside a chunk the shifted vectors
    splits = [int(v) for v in re.findall(r'"split": (\d+)', text)]
    assert ((splits and all(v >= 2 for v in splits)) or gspc.PIXELS_KIND in text
            or f'"kind": "{gspc_shift.KIND}"' in text), splits


def test_small_maps_run_pixel_vectors_over_the_flattened_grid():
    """7x7 outputs fill 7 of 16 lanes row by row, 49 of 64 over the flattened grid of
    9-point rows (the window's reach): that grid is chosen; 56x56 keeps rows, and so
    does a symbolic shape and 8-lane vectors (7 of 8 lanes). Numbers: the cases above."""
    assert gspc.flat_grid(_geo(CASES["flat-7x7"]), 16) == 9
    assert gspc.flat_grid(_geo(CASES["flat-s2-asym"]), 16) == 5 + 1  # 5 columns out, the window 1 phase column past
    assert gspc.flat_grid(_geo(CASES["flat-dilation2"]), 16) == 5 + 4
    assert gspc.flat_grid(_geo((1, 144, 56, 56, 144, 3, 1, (1, 1, 1, 1), 1, 16)), 16) is None
    assert gspc.flat_grid(_geo(CASES["flat-7x7"]), 8) is None
    if cpu_info(TARGET).f32_lanes == 16:
        (text,) = [f.script() for n, f in prim_funcs(scheduled(_model(
            CASES["flat-7x7"])[0])).items() if "conv2d" in n]
        assert gspc.PIXELS_KIND in text and '"flat": 1' in text


def _kernels(mod, **options) -> set[str]:
    names = set()
    for func in prim_funcs(scheduled(mod, **options)).values():
        text = func.script()
        for tag in ('"split"', "winograd_M", "depthwise", "cocopie.conv2d_nchwc",
                    gspc.PIXELS_KIND, '"shift"'):
            if tag in text:
                names.add(tag.strip('"'))
    return names


def test_each_grouped_conv_takes_the_kernel_for_its_groups():
    """Narrow groups: GSPC segments; wide aligned groups (3x3 stride 1, 32+ channels per
    group): a Winograd GEMM per group; C groups: the depthwise kernel; and with
    ``grouped="blocked"`` the narrow groups go back to the block-diagonal kernel."""
    lanes = cpu_info(TARGET).f32_lanes
    # 2-8 inputs and as many outputs per group inside a chunk: rotated vectors on 16 lanes;
    # 8 lanes: segments (4 lanes, half a vector) and pixel vectors (quarter vector)
    for name in ("resnext-cpg4", "g8-cpg4", "g16-cpg2", "cpg4-stride2"):
        kernels = _kernels(_model(CASES[name])[0])
        expected = "shift" if lanes == 16 else "gspc_pixels" if "cpg2" in name else "split"
        assert expected in kernels, (name, kernels)
    # 4 output lanes per segment off the shifted kernel (4 in, 2 out per group: 2 lanes;
    # 2 in, 4 out: 4 lanes): pixel vectors on 16 lanes, segments on 8 unless 2 lanes
    assert "gspc_pixels" in _kernels(_model(CASES["cpg4-shrink"])[0])
    assert ("gspc_pixels" if lanes == 16 else "split") in _kernels(_model(CASES["cpg2-expand"])[0])
    blocked = _kernels(_model(CASES["resnext-cpg4"])[0], grouped="blocked")
    assert not {"split", "gspc_pixels", "shift"} & blocked
    # one-lane segments (9 per group) and two-lane ones at stride 2: pixel vectors
    assert "gspc_pixels" in _kernels(_model(CASES["misaligned-9"])[0])
    assert "gspc_pixels" in _kernels(_model(CASES["misaligned-18-s2"])[0])
    assert "winograd_M" in _kernels(_model(CASES["g2-winograd"])[0])
    if lanes == 16:  # groups across the chunks: pixel vectors; 8 per group inside a chunk:
        # rotated vectors (faster than 8-lane segments); segments where the outputs per
        # group differ from the inputs (2 in, 8 out: one group per 8-lane segment)
        assert "gspc_pixels" in _kernels(_model(CASES["across-24-g2"])[0])
        assert "shift" in _kernels(_model(CASES["inside-8-g16"])[0])
        assert "split" in _kernels(_model(CASES["cpg2-opg8"])[0])
    assert "depthwise" in _kernels(_model(CASES["depthwise-C"])[0])
    # 8 channels per group: whole chunks (the blocked kernel), at 8 lanes and on AVX-512
    # too, where 24 channels take chunks of 8 (tiling.channel_block)
    assert lanes in (8, 16)
    eight = _kernels(_model(CASES["g3-cpg8"])[0])
    assert "split" not in eight and "cocopie.conv2d_nchwc" in eight


@pytest.mark.parametrize("info", [AVX2, AVX512])
@pytest.mark.parametrize("name", ["g8-cpg4", "g16-cpg2", "cpg2-expand", "cpg4-shrink",
                                  "resnext-cpg4", "cpg4-stride2", "misaligned-36",
                                  "misaligned-9", "cpg2-opg8"])
def test_gspc_weight_has_no_zero_padding_and_tiles_fit(info, name):
    geo = _geo(CASES[name])
    ib = tiling.channel_block(geo.c, info)
    ob = tiling.channel_block(geo.o, info)
    assert gspc.applies(geo, ib, ob)
    split = gspc.segments(geo, ob)
    tile = tiling.gspc_tile(geo, ib, ob, split, info)
    # split weight vectors + a broadcast + split x pixels accumulators fit the registers;
    # 8 one-lane segments (9 channels per group) do not fit 16 even for one pixel: one
    # pixel then, LLVM spills a weight
    if 2 * split + 1 <= tiling.vector_registers(info):
        assert split * (tile.th * tile.tw + 1) + 1 <= tiling.vector_registers(info)
    else:
        assert tile.th * tile.tw == 1
    rng = np.random.default_rng(1)
    w = rng.standard_normal((geo.o, geo.cpg, geo.kh, geo.kw)).astype("float32")
    packed = gspc.pack_weight_numpy(w, geo, tile)
    assert packed.size == w.size  # every packed value is a weight: no zeros added
    chunks, lanes = gspc.reduction_extents(geo, ib)
    # lane s * opg + t of output chunk c is output c * ob + s * opg + t: its weights on
    # input channel j * lanes + k of its own group
    for c in range(geo.o // ob):
        for lane in range(ob):
            for j in range(chunks):
                for k in range(lanes):
                    np.testing.assert_array_equal(packed[c, j, :, :, k, lane],
                                                  w[c * ob + lane, j * lanes + k])


def test_gspc_packing_numpy_matches_te():
    import tvm

    geo = _geo(CASES["resnext-cpg4"])
    tile = tiling.gspc_tile(geo, 8, 8, 2, AVX2)
    w = np.random.default_rng(2).standard_normal((geo.o, geo.cpg, 3, 3)).astype("float32")
    wt = tvm.te.placeholder(w.shape, "float32", name="w")
    packed = gspc.pack_weight(wt, geo, tile)
    f = tvm.compile(tvm.te.create_prim_func([wt, packed]), target=TARGET)
    out = tvm.runtime.empty(tuple(int(d) for d in packed.shape), "float32")
    f(tvm.runtime.tensor(w), out)
    np.testing.assert_array_equal(out.numpy(), gspc.pack_weight_numpy(w, geo, tile))


def test_gspc_refuses_what_it_does_not_compute():
    geo = _geo(CASES["g3-cpg8"])  # 8 in and out per group: whole chunks, the direct kernel's
    assert not gspc.applies(geo, 8, 8)
    assert not gspc.applies(_geo(CASES["depthwise-C"]), 8, 8)
    unaligned = ConvGeometry(1, 24, 8, 8, 24, 3, 3, (1, 1), (1,) * 4, (1, 1), 8)  # 3 per group
    assert gspc.applies(unaligned, 8, 8) and gspc.segments(unaligned, 8) == 8
    with pytest.raises(CompilationError, match="GSPC"):
        gspc.pack_weight_numpy(np.zeros((24, 8, 3, 3), "float32"), geo,
                               tiling.gspc_tile(geo, 8, 8, 2, AVX2))


def test_unknown_grouped_kernel_is_a_clear_error():
    mod, data, _ = _model(CASES["g8-cpg4"])
    with pytest.raises(CompilationError, match="grouped-conv kernel 'fast'.*gspc, blocked"):
        run(mod, [data], grouped="fast")


def test_symbolic_batch_grouped_conv():
    """A symbolic batch leaves the conv to TVM's own legalization (static shapes only
    are planned): still correct, for any batch."""
    import tvm
    from tvm import tirx

    from tvm_cocopie.pipeline import cocopie_pipeline

    rng = np.random.default_rng(4)
    weight = rng.standard_normal((32, 4, 3, 3)).astype("float32")
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 32, 8, 8], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(R.nn.conv2d(x, relax.const(weight), padding=[1, 1, 1, 1],
                                             groups=8))
        bb.emit_func_output(out)
    ex = tvm.compile(bb.get(), target=TARGET, relax_pipeline=cocopie_pipeline())
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for batch in (1, 3):
        data = rng.standard_normal((batch, 32, 8, 8)).astype("float32")
        got = vm["main"](tvm.runtime.tensor(data)).numpy()
        assert_allclose(got, conv2d_reference(data, weight, padding=(1, 1, 1, 1), groups=8))


@pytest.mark.parametrize("grouped,transforms", [("gspc", 2), ("blocked", 4)])
def test_narrow_groups_keep_the_blocked_layout_between_convs(grouped, transforms):
    """conv -> grouped conv of 1 input and 2 outputs per group -> conv: with GSPC the
    blocked layout runs through the grouped conv (transforms only at the graph's input
    and output); the block-diagonal kernel refuses it (8x zero padding), which leaves it
    NCHW between two more transforms."""
    from tvm_cocopie.pipeline import PipelineOptions, run_until
    from tvm_cocopie.relay_passes.layout import layout_transforms

    rng = np.random.default_rng(6)
    w1 = rng.standard_normal((16, 16, 1, 1)).astype("float32") / 4
    wg = rng.standard_normal((32, 1, 3, 3)).astype("float32") / 3
    w2 = rng.standard_normal((16, 32, 1, 1)).astype("float32") / 6
    x = tensor_var("x", (1, 16, 12, 12))

    def body(bb, x):
        y = bb.emit(R.nn.relu(R.nn.conv2d(x, relax.const(w1))))
        y = bb.emit(R.nn.relu(R.nn.conv2d(y, relax.const(wg), padding=[1, 1, 1, 1], groups=16)))
        return bb.emit(R.nn.conv2d(y, relax.const(w2)))

    mod = build_graph([x], body)
    laid = run_until(mod, TARGET, "layout", PipelineOptions(grouped=grouped))
    assert layout_transforms(laid) == transforms
    data = rng.standard_normal((1, 16, 12, 12)).astype("float32")
    y = np.maximum(conv2d_reference(data, w1), 0)
    y = np.maximum(conv2d_reference(y, wg, padding=(1, 1, 1, 1), groups=16), 0)
    assert_allclose(run(mod, [data], grouped=grouped), conv2d_reference(y, w2))


def _rotated_sum(x: np.ndarray, packed: np.ndarray, k: int) -> np.ndarray:
    """The rotated-vector conv in numpy at stride 1 without padding (NCHWc in and out):
    each output vector the sum over taps and rotations ``t`` of the packed weight times
    the input vector whose groups of ``k`` lanes are turned by ``t``."""
    n, cb_n, h, w, cb = x.shape
    _, kh, kw, nr, _ = packed.shape
    lane = np.arange(cb)
    oh, ow = h - kh + 1, w - kw + 1
    out = np.zeros((n, cb_n, oh, ow, cb))
    for t in range(nr):
        turned = x[..., lane - lane % k + (lane % k + t) % k]
        for a in range(kh):
            for b in range(kw):
                out += packed[None, :, None, None, a, b, t] * turned[:, :, a:a + oh, b:b + ow]
    return out


@pytest.mark.parametrize("k", [2, 4, 8])
def test_rotated_vectors_compute_the_grouped_conv(k):
    """The packed weight of the rotated-vector kernel is the grouped conv: summed over
    the k rotations of each group in numpy it gives the reference (no TVM), every weight
    of the group used once (no zero padding), and the compute packing it at run time
    packs the same."""
    import tvm

    c, g = 32, 32 // k
    geo = ConvGeometry(1, c, 6, 7, c, 3, 3, (1, 1), (0,) * 4, (1, 1), g)
    rng = np.random.default_rng(k)
    w = rng.standard_normal((c, k, 3, 3)).astype("float32") + 3  # no zero weights
    x = rng.standard_normal((1, c, 6, 7)).astype("float32")
    packed = gspc_shift.pack_weight_numpy(w, geo, 16)
    assert packed.shape == (2, 3, 3, k, 16)
    assert not (packed == 0).any()
    np.testing.assert_array_equal(np.sort(packed[0, 1, 2, :, :k].ravel()),
                                  np.sort(w[:k, :, 1, 2].ravel()))
    xb = x.reshape(1, 2, 16, 6, 7).transpose(0, 1, 3, 4, 2)
    got = _rotated_sum(xb, packed, k).transpose(0, 1, 4, 2, 3).reshape(1, c, 4, 5)
    np.testing.assert_allclose(got, conv2d_reference(x, w, groups=g), rtol=1e-5, atol=1e-4)
    wt = tvm.te.placeholder(w.shape, "float32", name="w")
    te_packed = gspc_shift.pack_weight(wt, geo, 16)
    f = tvm.compile(tvm.te.create_prim_func([wt, te_packed]), target=TARGET)
    out = tvm.runtime.empty(packed.shape, "float32")
    f(tvm.runtime.tensor(w), out)
    np.testing.assert_array_equal(out.numpy(), packed)


def test_shifted_vectors_take_small_equal_groups_inside_a_chunk():
    """2 to 8 inputs and as many outputs per group, inside a chunk of a whole vector: the
    rotated-vector kernel; channel multipliers, groups across chunks, chunks narrower
    than the vector and depthwise convs: not. Unknown shapes are refused clearly."""
    lanes = cpu_info(TARGET).f32_lanes
    for name in ("g16-cpg2", "g8-cpg4", "shift-cpg2-s2", "inside-8-g16"):
        geo = _geo(CASES[name])
        assert gspc_shift.applies(geo, 16, 16, 16)
        assert not gspc_shift.applies(geo, 8, 8, 8)  # not measured on 8 lanes
        assert ("shift" in _kernels(_model(CASES[name])[0])) == (lanes == 16), name
        assert "shift" not in _kernels(_model(CASES[name])[0], grouped="blocked")
    for name in ("cpg2-expand", "cpg4-shrink", "g3-cpg8", "misaligned-9", "depthwise-C"):
        assert not gspc_shift.applies(_geo(CASES[name]), 16, 16, 16), name
    assert not gspc_shift.applies(_geo(CASES["g16-cpg2"]), 8, 8, 16)  # chunks below a vector
    # groups that do not tile the chunk (3, 5, 6, 7 per group: MobileNetV2 G(16)'s 96
    # channels are 6 per group) cross it, so a rotation would read another pixel's lanes
    for k in (3, 5, 6, 7):
        geo = ConvGeometry(1, 16 * k, 8, 8, 16 * k, 3, 3, (1, 1), (1,) * 4, (1, 1), 16)
        assert geo.cpg == k and not gspc_shift.applies(geo, 16, 16, 16), k
        with pytest.raises(CompilationError, match="groups of 2-8 inputs"):
            gspc_shift.pack_weight_numpy(np.zeros((16 * k, k, 3, 3), "float32"), geo, 16)
    # 4 per group in chunks of 4 (NEON): one group per chunk, the direct kernel's
    assert not gspc_shift.applies(_geo(CASES["g8-cpg4"]), 4, 4, 4)
    with pytest.raises(CompilationError, match="groups of 2-8 inputs"):
        gspc_shift.pack_weight_numpy(np.zeros((24, 8, 3, 3), "float32"),
                                     _geo(CASES["g3-cpg8"]), 8)


def test_shifted_vectors_with_symbolic_height_and_width():
    """One build for any size: the shifted-vector conv over a symbolic height and width
    (tiles planned at a size, padded and clamped), with its epilogue, against numpy."""
    import tvm
    from tvm import tirx

    from tvm_cocopie.pipeline import cocopie_pipeline

    rng = np.random.default_rng(9)
    weight = rng.standard_normal((32, 2, 3, 3)).astype("float32")
    h, w = tirx.Var("H", "int64"), tirx.Var("W", "int64")
    x = relax.Var("x", relax.TensorType([1, 32, h, w], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(R.nn.conv2d(x, relax.const(weight), padding=[1, 1, 1, 1], groups=16))
            out = bb.emit_output(R.nn.relu(y))
        bb.emit_func_output(out)
    ex = tvm.compile(bb.get(), target=TARGET, relax_pipeline=cocopie_pipeline())
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for size in ((5, 9), (12, 7), (1, 1)):
        data = rng.standard_normal((1, 32, *size)).astype("float32")
        got = vm["main"](tvm.runtime.tensor(data)).numpy()
        ref = np.maximum(conv2d_reference(data, weight, padding=(1, 1, 1, 1), groups=16), 0)
        assert_allclose(got, ref)

"""Helpers for the kernel tests (Relax graphs built in code, numpy references), and
tests of the untuned heuristics themselves."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_cocopie
from tvm_cocopie.pipeline import PipelineOptions, cocopie_pipeline
from tvm_cocopie.target import CpuInfo, host_target
from tvm_cocopie.topi.cpu import conv2d_nchwc as cn
from tvm_cocopie.topi.cpu import dense_packed as dp
from tvm_cocopie.topi.cpu import depthwise_nchwc as dw
from tvm_cocopie.topi.cpu import tiling

TARGET = host_target()
AVX2 = CpuInfo("x86", 256, 2, True)
AVX512 = CpuInfo("x86", 512, 2, True)
NEON = CpuInfo("aarch64", 128, 4, True)
#: fp32 sums of a few hundred products in a different order: 1e-4 relative is ample
RTOL = 1e-4


def tensor_var(name: str, shape, dtype: str = "float32") -> relax.Var:
    return relax.Var(name, relax.TensorType(list(shape), dtype))


def build_graph(inputs: list[relax.Var], body) -> tvm.IRModule:
    """``body(bb, *inputs) -> relax.Expr`` inside a dataflow block of ``main``."""
    bb = relax.BlockBuilder()
    with bb.function("main", inputs):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *inputs))
        bb.emit_func_output(out)
    return bb.get()


def run(mod: tvm.IRModule, args, **options) -> np.ndarray:
    """Compile ``mod`` with the cocopie pipeline (``options`` switch stages) and run it."""
    tvm_cocopie.register()
    pipeline = cocopie_pipeline(**vars(PipelineOptions(**options)))
    ex = tvm.compile(mod, target=TARGET, relax_pipeline=pipeline)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in args])
    return out.numpy()


def assert_allclose(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL) -> None:
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = float(np.max(np.abs(expected))) or 1.0
    err = float(np.max(np.abs(actual.astype(np.float64) - expected)))
    assert err <= rtol * scale, f"max abs err {err:.3e} > {rtol:g} x {scale:.3e}"


def conv2d_reference(x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """NCHW x OIHW convolution in float64 numpy (padding: top, left, bottom, right)."""
    n, _, h, wd = x.shape
    o, cpg, kh, kw = w.shape
    pt, pl, pb, pr = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + pl + pr - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    opg = o // groups
    for g in range(groups):
        xs = xp[:, g * cpg:(g + 1) * cpg]
        ws = w[g * opg:(g + 1) * opg].astype(np.float64)
        for y in range(kh):
            for x_ in range(kw):
                y0, x0 = y * dilation[0], x_ * dilation[1]
                patch = xs[:, :, y0:y0 + (oh - 1) * stride[0] + 1:stride[0],
                           x0:x0 + (ow - 1) * stride[1] + 1:stride[1]]
                out[:, g * opg:(g + 1) * opg] += np.einsum("nchw,oc->nohw", patch, ws[:, :, y, x_])
    return out


# ----------------------------------------------------------------- heuristics


@pytest.mark.parametrize("info,channels,block", [
    (AVX2, 64, 8), (AVX2, 3, 3), (AVX2, 12, 12), (AVX2, 37, 1), (AVX2, 36, 4),
    (AVX512, 64, 16), (AVX512, 24, 8), (AVX512, 20, 20), (AVX512, 40, 8), (NEON, 24, 4),
])
def test_channel_block(info, channels, block):
    assert tiling.channel_block(channels, info) == block


@pytest.mark.parametrize("info", [AVX2, AVX512, NEON])
@pytest.mark.parametrize("hw,c,o,k,s", [
    (56, 64, 64, 3, 1), (7, 512, 512, 3, 1), (14, 256, 1024, 1, 1), (28, 128, 128, 3, 2),
    (13, 40, 24, 3, 1), (1, 64, 64, 1, 1), (28, 58, 58, 1, 1), (14, 116, 116, 3, 1),
    (7, 24, 58, 1, 1), (2, 58, 58, 1, 1), (13, 512, 1000, 1, 1), (7, 64, 88, 3, 1),
])
def test_conv_tile_fits_the_register_file(info, hw, c, o, k, s):
    geo = cn.ConvGeometry(1, c, hw, hw, o, k, k, (s, s), (k // 2,) * 4, (1, 1), 1)
    ib = tiling.channel_block(c, info)
    ob = tiling.channel_block(o, info)
    tile = tiling.conv_tile(geo, ib, ob, info)
    if tile.wide:  # narrow chunks: r chunks fill whole vectors, never flattened
        vectors = tile.wb // info.f32_lanes
        assert tile.wb % info.f32_lanes == 0 and not tile.flat and ob < info.f32_lanes
        # at most the padding to whole vectors (24 channels in 8-lane chunks on 16 lanes:
        # 32 computed, measured faster end to end than one 24-wide chunk: tiling.channel_block)
        padded = -(-o // info.f32_lanes) * info.f32_lanes
        assert tile.work_chunks(o) * ob < 1.15 * o or tile.work_chunks(o) * ob <= padded
    else:
        vectors = tile.r * max(1, ob // info.f32_lanes)
        # an odd chunk count is padded by one chunk for two weight vectors, never more
        assert geo.o % tile.wb == 0 or (tile.r == 2 and tile.work_chunks(o) * ob == o + ob
                                        and o // ob >= tiling.MIN_PADDED_CHUNKS)
    accumulators = vectors * tile.th * tile.tw
    assert accumulators + vectors + 1 <= tiling.vector_registers(info)
    assert cn.waste(geo, tile) < 1.35  # padding never costs a third of the work


def test_odd_chunk_counts_take_two_weight_vectors_on_a_padded_chunk():
    # 1000 outputs = 125 chunks of 8: two vectors per tile, 126 chunks computed
    geo = cn.ConvGeometry(1, 512, 13, 13, 1000, 1, 1, (1, 1), (0,) * 4, (1, 1), 1)
    tile = tiling.conv_tile(geo, 8, 8, AVX2)
    assert tile.r == 2 and tile.work_chunks(1000) == 126
    assert cn.weight_tiles(geo, tile) == 63
    # a few odd chunks: the padding would cost more than the second vector saves
    few = cn.ConvGeometry(1, 64, 13, 13, 24, 1, 1, (1, 1), (0,) * 4, (1, 1), 1)
    assert tiling.conv_tile(few, 8, 8, AVX2).r == 3
    five = cn.ConvGeometry(1, 64, 13, 13, 40, 1, 1, (1, 1), (0,) * 4, (1, 1), 1)
    assert tiling.conv_tile(five, 8, 8, AVX2).r == 1


def test_deep_convs_take_four_weight_vectors_on_avx512_x86_only():
    # ResNet-50's 1x1 256 -> 1024 at 14x14: 4 vectors x 6 pixels (24 accumulators) on AVX-512
    geo = cn.ConvGeometry(1, 256, 14, 14, 1024, 1, 1, (1, 1), (0,) * 4, (1, 1), 1)
    tile = tiling.conv_tile(geo, 16, 16, AVX512)
    assert (tile.r, tile.tw, tile.flat) == (*tiling.DEEP_WIDE_TILE, True)
    assert tiling.conv_tile(geo, 8, 8, AVX2).r == 2  # 16 registers: the two-vector tile
    assert tiling.conv_tile(geo, 4, 4, NEON).r == 2
    shallow = cn.ConvGeometry(1, 64, 56, 56, 64, 3, 3, (1, 1), (1,) * 4, (1, 1), 1)
    assert tiling.conv_tile(shallow, 16, 16, AVX512).r != 4  # fewer than 128 channels


def test_depthwise_wide_tile_spans_pixels_of_narrow_chunks():
    geo = cn.ConvGeometry(1, 58, 28, 28, 58, 3, 3, (1, 1), (1,) * 4, (1, 1), 58)
    assert tiling.depthwise_wide_tile(geo, 2, AVX2) == (7, 4)  # 4 pixels x 2 channels
    strided = cn.ConvGeometry(1, 58, 28, 28, 58, 3, 3, (2, 2), (1,) * 4, (1, 1), 58)
    assert tiling.depthwise_wide_tile(strided, 2, AVX2) is None
    assert tiling.depthwise_wide_tile(geo, 8, AVX2) is None
    w = np.arange(58 * 9, dtype="float32").reshape(58, 1, 3, 3)
    packed = dw.pack_weight_numpy(w, 2, 4)
    assert packed.shape == (29, 3, 3, 8)
    np.testing.assert_array_equal(packed[5, 1, 2], np.tile(w[10:12, 0, 1, 2], 4))


def test_wide_tile_packing_pads_outputs_with_zeros():
    rng = np.random.default_rng(1)
    geo = cn.ConvGeometry(1, 6, 5, 5, 58, 1, 1, (1, 1), (0,) * 4, (1, 1), 1)
    tile = cn.ConvTile(2, 2, 8, 1, 4, False, True)  # 29 chunks of 2 in tiles of 8 chunks
    w = rng.standard_normal((58, 6, 1, 1)).astype("float32")
    wt = tvm.te.placeholder(w.shape, name="w")
    packed = cn.pack_weight(wt, geo, tile)
    assert [int(s) for s in packed.shape] == [4, 3, 1, 1, 2, 16]
    f = tvm.compile(tvm.te.create_prim_func([wt, packed]), target=TARGET)
    out = tvm.runtime.tensor(np.zeros([int(s) for s in packed.shape], "float32"))
    f(tvm.runtime.tensor(w), out)
    ref = cn.pack_weight_numpy(w, geo, tile)
    np.testing.assert_array_equal(out.numpy(), ref)
    assert ref[3, 1, 0, 0, 1, 9] == w[57, 3, 0, 0] and not ref[3, :, :, :, :, 10:].any()


@pytest.mark.parametrize("m,n", [(1, 1000), (49, 2048), (128, 1536), (512, 512), (5, 7)])
def test_matmul_tile_fits_the_register_file(m, n):
    tile = tiling.matmul_tile(m, n, AVX2)
    vectors = tile.nb // AVX2.f32_lanes
    assert tile.tm * vectors + vectors + 1 <= 16
    assert tile.tm <= max(m, 1)


def test_matmul_tile_rows_pad_little_and_do_not_alias_in_l1():
    """16 rows as 2 x 8, not 2 x 12 (a third of the FMAs on padding rows); over a ``K``
    of 1024-float multiples, rows of A 4 KiB apart share one L1 set: at most 8 rows
    (the ways) per tile; other ``K`` keep the full tile (bench_kernels' wide GEMMs:
    40 x 8192 x 2048 0.63 -> 0.84 of the FMA peak, 16 x 4096 x 1024 0.47 -> 0.90)."""
    assert tiling.matmul_tile(16, 4096, AVX512).tm == 8
    assert tiling.matmul_tile(128, 768, AVX512).tm > tiling.L1_WAYS
    assert tiling.matmul_tile(40, 8192, AVX512, k=512).tm > tiling.L1_WAYS
    for k in (1024, 2048, 3072, 4096):
        assert tiling.matmul_tile(40, 8192, AVX512, k=k).tm <= tiling.L1_WAYS
        assert tiling.matmul_tile(64, 1024, AVX2, k=k).tm <= 6  # AVX2's own budget


def test_weight_packing_numpy_matches_te():
    rng = np.random.default_rng(0)
    geo = cn.ConvGeometry(1, 16, 5, 5, 32, 3, 3, (1, 1), (1,) * 4, (1, 1), 4)
    tile = cn.ConvTile(8, 8, 1, 1, 4)
    w = rng.standard_normal((32, 4, 3, 3)).astype("float32")
    wt = tvm.te.placeholder(w.shape, name="w")
    packed = cn.pack_weight(wt, geo, tile)
    f = tvm.compile(tvm.te.create_prim_func([wt, packed]), target=TARGET)
    out = tvm.runtime.tensor(np.zeros([int(s) for s in packed.shape], "float32"))
    f(tvm.runtime.tensor(w), out)
    np.testing.assert_array_equal(out.numpy(), cn.pack_weight_numpy(w, geo, tile))


def test_depthwise_and_rhs_packing_numpy():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 1, 3, 3)).astype("float32")
    packed = dw.pack_weight_numpy(w, 8)
    assert packed.shape == (2, 3, 3, 8)
    assert packed[1, 2, 0, 5] == w[13, 0, 2, 0]
    b = rng.standard_normal((5, 20)).astype("float32")
    pb = dp.pack_rhs_numpy(b, 16)
    assert pb.shape == (2, 5, 16)
    assert pb[1, 3, 2] == b[3, 18] and pb[1, 3, 5] == 0


def scheduled(mod: tvm.IRModule, **options) -> tvm.IRModule:
    """``mod`` after the cocopie pipeline's ``schedule`` stage (before lowering)."""
    from tvm_cocopie.pipeline import run_until

    return run_until(mod, TARGET, "schedule", PipelineOptions(**options))


def prim_funcs(mod: tvm.IRModule) -> dict:
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}

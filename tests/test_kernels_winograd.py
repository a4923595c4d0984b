"""Winograd F(2,3) / F(4,3) convolutions (tvm_cocopie.topi.cpu.winograd) through the
cocopie pipeline against a float64 numpy reference: odd sizes (partial tiles),
channel counts that are not a multiple of the SIMD block, asymmetric padding, batch,
fused epilogues (bias + ReLU, SiLU, residual add); the transform matrices; the
per-layer choice and its switch; a zoo ResNet-18 against ONNX Runtime.

Accuracy (float32 kernels against float64): F(2,3) stays at the direct conv's error
(~1e-7 of the output's range); F(4,3) is ~5-10x worse (its transforms multiply by up
to 8 and divide by 24): ~1e-6 here, 4.7e-6 at 64 channels (ResNet's 56x56 layer) and
below 2e-5 at 512 channels (the benchmark's ``*_relerr``), so it is tested at
``F43_RTOL``.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, ort_run
from test_kernels_common import (
    AVX2,
    AVX512,
    NEON,
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

import tvm_cocopie
from tvm_cocopie.errors import CompilationError
from tvm_cocopie.topi.cpu import winograd as wg
from tvm_cocopie.topi.cpu.conv2d_nchwc import ConvGeometry, ConvTile

#: F(4,3) in float32: 10x the direct conv's tolerance (see the module docstring)
F43_RTOL = 1e-3
RTOL = {"2": 1e-4, "4": F43_RTOL}

# (N, C, H, W, O, padding (t, l, b, r))
CASES = {
    "resnet-like": (1, 16, 14, 14, 32, (1, 1, 1, 1)),
    "odd-prime-channels": (1, 7, 11, 9, 13, (1, 1, 1, 1)),
    "unaligned-channels": (1, 12, 13, 10, 20, (1, 1, 1, 1)),
    "asym-pad-batch2": (2, 16, 9, 13, 24, (0, 1, 2, 1)),
    "no-pad": (1, 8, 10, 7, 16, (0, 0, 0, 0)),
    "tiny": (1, 16, 3, 3, 16, (1, 1, 1, 1)),
    # enough tiles for cache blocks per core: the three stages fused in one parallel loop
    "cache-blocks-odd": (1, 16, 41, 38, 48, (1, 1, 1, 1)),
    "cache-blocks-batch2": (2, 32, 30, 30, 32, (1, 1, 1, 1)),
    # whole tiles: the gather and epilogue also run inside the cache-block loop
    "cache-blocks-whole-tiles": (1, 16, 40, 40, 32, (1, 1, 1, 1)),
}


@pytest.fixture(params=["2", "4"], ids=["F23", "F43"])
def forced(request):
    """Winograd F(m,3) forced on every eligible conv: ``m`` as the option's text."""
    return request.param


def _model(case, epilogue=None, seed=0):
    n, c, h, w, o, pad = case
    rng = np.random.default_rng(seed + c * o)
    weight = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype("float32")
    bias = rng.standard_normal((1, o, 1, 1)).astype("float32")
    data = rng.standard_normal((n, c, h, w)).astype("float32")
    x = tensor_var("x", (n, c, h, w))

    def body(bb, x):
        y = bb.emit(R.nn.conv2d(x, relax.const(weight), padding=list(pad)))
        return epilogue(bb, y, relax.const(bias), x) if epilogue else y

    return build_graph([x], body), data, conv2d_reference(data, weight, (1, 1), pad), bias


def _is_winograd(mod, winograd="auto") -> bool:
    return any("winograd" in name for name in prim_funcs(scheduled(mod, winograd=winograd)))


def test_transform_matrices_compute_the_correlation():
    rng = np.random.default_rng(0)
    for m in (2, 4):
        at, g, bt = wg.winograd_matrices(m)
        d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
        want = np.array([d[i:i + 3] @ k for i in range(m)])
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, atol=1e-12)
    at, g, bt = wg.winograd_matrices(4)  # the classic F(4,3) table, up to row signs
    assert at[3].tolist() == [0, 1, -1, 8, -8, 1]
    assert bt[0].tolist() == [4, 0, -5, 0, 1, 0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_winograd_matches_float64(name, forced):
    mod, data, ref, _ = _model(CASES[name])
    assert _is_winograd(mod, forced)
    assert_allclose(run(mod, [data], winograd=forced), ref, RTOL[forced])


def test_winograd_without_layout_pass(forced):
    """Layout stage off: the kernel packs NCHW in and unpacks NCHW out itself."""
    mod, data, ref, _ = _model(CASES["unaligned-channels"])
    assert_allclose(run(mod, [data], layout=False, winograd=forced), ref, RTOL[forced])


EPILOGUES = {
    "bias-relu": (lambda bb, y, b, x: bb.emit(R.nn.relu(R.add(y, b))),
                  lambda y, b, x: np.maximum(y + b, 0)),
    "bias-silu": (lambda bb, y, b, x: bb.emit(R.multiply(R.add(y, b), R.sigmoid(R.add(y, b)))),
                  lambda y, b, x: (y + b) / (1 + np.exp(-(y + b)))),
    "residual-relu": (lambda bb, y, b, x: bb.emit(R.nn.relu(R.add(R.add(y, b), x))),
                      lambda y, b, x: np.maximum(y + b + x, 0)),
}


@pytest.mark.parametrize("size", [(11, 13), (32, 32)], ids=["few-tiles", "cache-blocks"])
@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
def test_winograd_fused_epilogues(epilogue, size, forced):
    build_epi, ref_epi = EPILOGUES[epilogue]
    case = (1, 16, *size, 16, (1, 1, 1, 1))  # residual: as many outputs as inputs
    mod, data, ref, bias = _model(case, build_epi)
    funcs = prim_funcs(scheduled(mod, winograd=forced))
    assert any("winograd" in name for name in funcs)
    assert len(funcs) <= 3, sorted(funcs)  # the epilogue fused: no kernel of its own
    expected = ref_epi(ref, bias.astype(np.float64), data.astype(np.float64))
    assert_allclose(run(mod, [data], winograd=forced), expected, RTOL[forced])


def test_f43_error_against_float64_is_small_at_many_channels():
    """The float32 error of F(4,3) over a 256-channel sum: stated, and bounded."""
    mod, data, ref, _ = _model((1, 256, 8, 8, 16, (1, 1, 1, 1)))
    out = run(mod, [data], winograd="4")
    rel = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
    assert rel < 5e-5, rel


@pytest.mark.parametrize("info", [AVX2, AVX512, NEON], ids=["avx2", "avx512", "neon"])
@pytest.mark.parametrize("o, ob", [(128, 0), (24, 8), (12, 12)])
def test_gemm_tile_stays_in_registers(info, o, ob):
    """r x tp accumulators fit the register file beside the weights and a broadcast,
    at most 16 of them, under 1 KiB (see tiling.STACK_ACCUMULATOR_BYTES)."""
    from tvm_cocopie.topi.cpu.tiling import vector_registers, winograd_gemm_tile

    ob = ob or info.f32_lanes
    r, tp = winograd_gemm_tile(o, ob, info)
    vecs = -(-ob // info.f32_lanes)
    assert (o // ob) % r == 0
    assert r * vecs * (tp + 1) + 1 <= vector_registers(info)
    assert r * vecs * tp <= 16
    assert 4 * r * vecs * info.f32_lanes * tp < 1024


def _geo(c, hw, o, stride=1, dilation=1, groups=1, k=3):
    return ConvGeometry(1, c, hw, hw, o, k, k, (stride, stride), (1, 1, 1, 1),
                        (dilation, dilation), groups)


def _choice(geo, constant=True, setting="auto"):
    tile = ConvTile(8, 8, 2, 1, 4)
    chosen = wg.choose(geo, tile, AVX2, constant, setting)
    return chosen.m if chosen else None


def test_choice_only_for_3x3_stride1_constant_weights():
    assert _choice(_geo(64, 56, 64), setting="4") == 4
    assert _choice(_geo(64, 56, 64, stride=2), setting="4") is None
    assert _choice(_geo(64, 56, 64, dilation=2), setting="4") is None
    assert _choice(_geo(64, 56, 64, groups=2), setting="4") == 4  # a GEMM per group
    assert _choice(_geo(64, 56, 64, groups=16), setting="4") is None  # 4 channels per group
    assert _choice(_geo(64, 56, 64, groups=64), setting="4") is None  # depthwise
    assert _choice(_geo(64, 56, 64, k=1), setting="4") is None
    assert _choice(_geo(64, 56, 64), constant=False, setting="4") is None


def test_switch():
    assert _choice(_geo(64, 56, 64), setting="off") is None
    assert _choice(_geo(512, 7, 512), setting="2") == 2
    with pytest.raises(CompilationError, match="auto, off"):
        _choice(_geo(64, 56, 64), setting="winograd please")


def test_measured_heuristic():
    """Where the measurements (module docstring of topi.cpu.winograd) say Winograd wins."""
    for c, hw in wg.MEASURED_WINS:
        assert _choice(_geo(c, hw, c)) is not None, (c, hw)
    for c, hw in wg.MEASURED_LOSSES:
        assert _choice(_geo(c, hw, c)) is None, (c, hw)


def test_narrow_channel_chunks_keep_the_direct_conv():
    """Channel counts in chunks narrower than NARROW_CHUNK (37 -> 53: chunks of 1) keep the
    direct conv under ``auto`` (Winograd ran 8x slower there); forcing still works."""
    geo = _geo(37, 56, 53)
    assert wg.choose(geo, ConvTile(1, 1, 2, 1, 4), AVX2, True, "auto") is None
    assert wg.choose(geo, ConvTile(1, 1, 2, 1, 4), AVX2, True, "4") is not None
    assert wg.choose(_geo(64, 56, 64), ConvTile(8, 8, 2, 1, 4), AVX2, True, "auto") is not None


def test_grouped_bounds_by_vector_width():
    """Grouped convs: the znver1 (8-lane) bounds, and the higher ones of 16-lane vectors
    measured on znver4 (WIDE_* in topi.cpu.winograd)."""
    cases = [  # (c, size, groups): m on 8 lanes, m on 16 lanes
        ((128, 8, 8), 2, None),     # 16 per group on a small map
        ((512, 14, 32), 2, None),
        ((128, 8, 4), 2, 2),        # 32 per group
        ((128, 28, 8), 4, 4),       # 16 per group, F(4,3) map
        ((512, 7, 8), 2, None),     # 64 per group on 7x7
        ((512, 7, 2), 2, 2),        # 256 per group on 7x7
    ]
    for (c, hw, g), narrow, wide in cases:
        geo = _geo(c, hw, c, groups=g)
        assert wg.preferred_m(geo, 8) == narrow, (c, hw, g)
        assert wg.preferred_m(geo, 16) == wide, (c, hw, g)


def test_auto_picks_winograd_in_the_pipeline():
    c, hw = wg.MEASURED_WINS[0]
    mod, _, _, _ = _model((1, c, hw, hw, c, (1, 1, 1, 1)))
    assert _is_winograd(mod)  # PipelineOptions' default: auto
    assert not _is_winograd(mod, winograd="off")


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["auto", "4"])
def test_resnet18_matches_onnxruntime(setting):
    from tvm_cocopie.models.workloads import get_workload

    wl = get_workload("resnet18", image_size=64)
    compiled = tvm_cocopie.compile(wl.model, shapes=wl.shapes, options={"winograd": setting})
    assert_close(compiled(**wl.inputs), ort_run(wl.model, wl.inputs))

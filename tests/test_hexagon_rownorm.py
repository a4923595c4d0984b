"""The int8 layer norm and softmax on HVX (issue 21): the fixed-point definitions of
:mod:`tvm_cocopie.topi.int8.sequence` (numpy reference and TE compute bit-identical on the
host), the HVX kernels of :mod:`tvm_cocopie.hexagon.kernels.layernorm` /
:mod:`~tvm_cocopie.hexagon.kernels.softmax` bit-identical to numpy under qemu-hexagon
(edge rows included), and the warned fallback to TVM's lowering for sizes they do not take."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tvm

from tvm_cocopie.hexagon.kernels.dispatch import hvx_kernel
from tvm_cocopie.hexagon.kernels.elementwise import pack_lut
from tvm_cocopie.topi.int8.sequence import LayerNorm, Softmax, layernorm_func, softmax_func


def _ln(d: int, zx: int, seed: int = 0, gamma_scale: float = 1.0, sy: float = 0.03,
        zy: int = 128) -> LayerNorm:
    rng = np.random.default_rng(seed)
    gamma = rng.uniform(0.5, 1.5, d) * gamma_scale * rng.choice([-1, 1], d)
    return LayerNorm.from_params(gamma, rng.normal(0, 0.3, d), zx, sy, zy, eps=1e-5, sx=0.05)


def _ln_rows(d: int, rows: int, seed: int = 0) -> np.ndarray:
    """Random rows, then the edges: a constant row, one 255 among zeros, alternating 0 /
    255, all 255, two neighbouring values."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, 1, rows, d)).astype(np.uint8)
    x[0, 0, 0] = 77
    x[0, 0, 1] = 0
    x[0, 0, 1, d // 3] = 255
    x[0, 0, 2] = np.arange(d) % 2 * 255
    x[0, 0, 3] = 255
    x[0, 0, 4] = rng.integers(100, 102, d)
    return x


def _sm_input(length: int, rows: int, segments: int, seed: int = 0) -> np.ndarray:
    """Random scores, then a constant segment, one high score among zeros, all 255."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, 1, rows, segments * length)).astype(np.uint8)
    flat = x.reshape(-1)  # segments are consecutive runs of bytes
    flat[:length] = 9
    flat[length: 2 * length] = 0
    flat[length + 1] = 200
    flat[-length:] = 255
    return x


def _sm_tables(op: Softmax) -> np.ndarray:
    return np.stack([pack_lut(t) for t in op.table_bytes()])


def _run_host(func, args):
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target=tvm.target.Target({"kind": "llvm"}))
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


@pytest.mark.parametrize("d,zx", [(256, 120), (64, 0), (96, 255), (384, 7)])
def test_layernorm_te_equals_numpy_on_the_host(d, zx):
    op = _ln(d, zx, seed=d)
    x = _ln_rows(d, 6, seed=d)
    y = _run_host(layernorm_func(op, x.shape), [x, *op.packed_constants(), np.zeros_like(x)])
    assert np.array_equal(y, op.numpy(x))


@pytest.mark.parametrize("length,sx,zy", [(32, 0.08, 0), (16, 0.02, 3), (8, 0.3, 0), (5, 0.1, 0)])
def test_softmax_te_equals_numpy_on_the_host(length, sx, zy):
    op = Softmax.from_scales(length, sx, 1 / 255, zy)
    x = _sm_input(length, 4, 4, seed=length)
    y = _run_host(softmax_func(op, x.shape), [x, _sm_tables(op), np.zeros_like(x)])
    assert np.array_equal(y, op.numpy(x))


def test_fixed_point_ranges():
    """What the HVX lanes rely on: gains within 14 bits, biases within 2**30, shift at
    most 20; a constant row normalizes to zero; softmax's exponential table within an
    unsigned halfword; too many channels refused."""
    op = _ln(256, 3, gamma_scale=1e6)  # gains that would not fit are clipped
    assert max(abs(g) for g in op.gain) < 2**14 and max(abs(b) for b in op.offset) <= 2**30
    assert 1 <= op.shift <= 20
    flat = np.full((1, 1, 2, 256), 42, np.uint8)
    op = _ln(256, 3)
    _, bb = op.constants()
    assert np.array_equal(op.numpy(flat)[0, 0, 0], np.clip((bb >> op.shift) + op.zy, 0, 255))
    sm = Softmax.from_scales(32, 0.001, 1 / 255, 0)
    assert max(sm.exp_table) == 2**15 and sm.table_bytes().max() <= 255
    with pytest.raises(ValueError, match="channels"):
        LayerNorm.from_params(np.ones(20000), np.zeros(20000), 0, 0.1, 0)


def _run_qemu(func, args):
    from tvm_cocopie.emulation.hexagon import run_func

    (y,), res = run_func(func.with_attr("global_symbol", "k"), args, count_packets=True,
                         timeout=300)
    return y, int(res.packets[0])


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("d,rows,zx,zy,gamma_scale", [
    (256, 32, 120, 128, 1.0),  # the encoder's rows
    (128, 6, 0, 0, 0.05),  # small gains: fewer gain bits, larger shift
    (384, 5, 255, 255, 8.0),  # large gains: saturating outputs
])
def test_hvx_layernorm_is_bit_exact(d, rows, zx, zy, gamma_scale):
    op = _ln(d, zx, seed=rows, gamma_scale=gamma_scale, zy=zy)
    x = _ln_rows(d, rows, seed=d)
    kernel = hvx_kernel(layernorm_func(op, x.shape))
    assert kernel is not None and "cocopie.hvx" in kernel.attrs
    y, packets = _run_qemu(kernel, [x, *op.packed_constants(), np.zeros_like(x)])
    assert np.array_equal(y, op.numpy(x))
    if (d, rows) == (256, 32):
        assert packets < 6_000, packets  # TVM's lowering of the compute: ~108K


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("length,rows,segments,sx,sy,zy", [
    (32, 32, 4, 0.08, 1 / 255, 0),  # the encoder's attention map (4 heads)
    (8, 8, 2, 0.3, 1 / 255, 0),  # the small encoder's: 128 bytes in all
    (128, 3, 1, 0.02, 1 / 200, 20),  # one segment per vector, an output zero point
    (4, 4, 64, 0.5, 1 / 128, 0),  # one segment per word
])
def test_hvx_softmax_is_bit_exact(length, rows, segments, sx, sy, zy):
    op = Softmax.from_scales(length, sx, sy, zy)
    x = _sm_input(length, rows, segments, seed=length)
    kernel = hvx_kernel(softmax_func(op, x.shape))
    assert kernel is not None
    y, packets = _run_qemu(kernel, [x, _sm_tables(op), np.zeros_like(x)])
    assert np.array_equal(y, op.numpy(x))
    if length == 32:
        assert packets < 4_000, packets  # TVM's lowering of the compute: ~84K


@pytest.mark.needs_toolchain
def test_sizes_without_a_kernel_keep_the_compute_with_a_warning(caplog):
    """Rows of 96 channels and segments of 12: no HVX kernel, a warning, and the compute
    as TVM lowers it still equals numpy under qemu-hexagon."""
    op = _ln(96, 10)
    x = _ln_rows(96, 5)
    func = layernorm_func(op, x.shape)
    with caplog.at_level(logging.WARNING):
        assert hvx_kernel(func) is None
        assert hvx_kernel(softmax_func(Softmax.from_scales(12, 0.1, 1 / 255, 0),
                                       (1, 1, 4, 24))) is None
    assert sum("no HVX kernel" in r.message for r in caplog.records) == 2
    y, _ = _run_qemu(func, [x, *op.packed_constants(), np.zeros_like(x)])
    assert np.array_equal(y, op.numpy(x))

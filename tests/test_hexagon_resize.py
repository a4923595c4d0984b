"""Nearest upsampling on HVX (issue 21): the kernel against numpy and against TVM's
lowering of the same compute, the dispatch that picks it, and the sizes it leaves to TVM."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_cocopie.hexagon.kernels import resize
from tvm_cocopie.hexagon.kernels.dispatch import hvx_kernel
from tvm_cocopie.topi.int8.hvx import upsample_described

CASES = [((1, 4, 8, 16), 2), ((1, 3, 32, 4), 2), ((1, 4, 64, 2), 2), ((1, 2, 2, 64), 2),
         ((1, 2, 2, 128), 2), ((1, 2, 3, 256), 3)]


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("shape,factor", CASES)
def test_upsampling_kernel_is_numpy_and_cheaper_than_tvms_lowering(shape, factor):
    from tvm_cocopie.emulation.hexagon import run_func

    x = np.random.default_rng(sum(shape)).integers(0, 256, shape).astype(np.uint8)
    want = x.repeat(factor, 1).repeat(factor, 2)
    func = upsample_described(shape, factor)
    kernel = hvx_kernel(func)
    assert kernel is not None
    assert ("vshuff" in kernel.script()) == (shape[3] % 128 != 0)  # narrow pixels interleave
    packets = []
    for f in (kernel, func):
        (y,), res = run_func(f.with_attr("global_symbol", "k"),
                             [x, np.zeros(want.shape, np.uint8)], count_packets=True)
        assert np.array_equal(y, want)
        packets.append(res.packets[0])
    assert packets[0] * 3 < packets[1], packets


def test_sizes_off_whole_vectors_stay_with_tvm():
    assert not resize.supported((1, 4, 4, 16), 2)  # a row of 64 bytes
    assert not resize.supported((1, 4, 8, 16), 3)  # factor 3 of a narrow pixel
    assert not resize.supported((1, 4, 8, 24), 2)  # 24-byte pixels
    assert hvx_kernel(upsample_described((1, 4, 4, 16), 2)) is None

"""Stock TVM's vrmpy tensor intrinsic, tensorized into an int8 conv: the bench's baseline."""

from __future__ import annotations

import pytest


def test_weight_packing_matches_the_intrinsic_operand_order():
    import numpy as np

    from tvm_cocopie.hexagon.tools import tvm_vrmpy

    w = np.arange(3 * 3 * 5 * 32, dtype=np.int64).reshape(3, 3, 5, 32).astype(np.int8)
    packed = tvm_vrmpy.pack_weights(w)
    assert packed.shape == (1, 2, 3, 3, 32, 4)
    # [oo, co, kh, kw, oi, ci] = w[kh, kw, 4 co + ci, 32 oo + oi]
    assert packed[0, 1, 2, 1, 7, 0] == w[2, 1, 4, 7]
    assert packed[0, 1, 2, 1, 7, 1] == 0  # channel 5 is padding


@pytest.mark.needs_toolchain
def test_tvm_vrmpy_conv_is_bit_exact():
    from tvm_cocopie.hexagon.tools import measure

    rec = measure.tvm_vrmpy_conv(6, 5, 8, 32, 3, 2, 1)
    assert rec["exact"] and rec["packets"] > 0

"""GCD²'s int8 matmul on HVX (vmpy / vmpa / vrmpy) and its layouts, under qemu-hexagon."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tvm_cocopie.hexagon.kernels import matmul, transforms
from tvm_cocopie.topi.int8 import layouts, reference
from tvm_cocopie.topi.int8.compute import Requant


def _problem(m, k, n, seed=0, wmax=64):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (m, k)).astype("uint8")
    w = rng.integers(-wmax, wmax + 1, (k, n)).astype("int8")
    b = rng.integers(-3000, 3000, n).astype("int32")
    return x, w, b, Requant.from_scale(1.0 / (40 * k), zero_point=9)


def _run_matmul(variant, m, k, n, seed=0, count_packets=False, wmax=64):
    from tvm_cocopie.emulation import hexagon as runner

    x, w, b, rq = _problem(m, k, n, seed, wmax)
    layout = layouts.LAYOUT_OF[variant]
    res = runner.run(
        {"mm": matmul.matmul(variant, m, k, n, rq)},
        [("mm", ["x", "w", "bias", "y"])],
        {
            "x": layout.pack(x),
            "w": transforms.pack_weights(w, variant),
            "bias": transforms.pad_bias(b, variant),
        },
        ["y"],
        count_packets=count_packets,
    )
    y = layout.unpack(res.outputs["y"], m, n)
    return y, reference.qmatmul(x, w, b, rq), res


# ------------------------------------------------------------------ host-side checks


def test_requant_int32_identity_matches_int64_reference():
    rng = np.random.default_rng(0)
    acc = np.concatenate(
        [
            rng.integers(-(2**31), 2**31, 20000, dtype=np.int64),
            [0, 1, -1, 2**31 - 1, -(2**31), 65535, -65536, 32768],
        ]
    ).astype(np.int32)
    for rq in (
        Requant(1, 17),
        Requant(32767, 40, 255),
        Requant.from_scale(0.0123, 3),
        Requant.from_scale(1 / 3000, 128),
    ):
        expected = (acc.astype(np.int64) * rq.multiplier + (1 << (rq.shift - 1))) >> rq.shift
        np.testing.assert_array_equal(rq.numpy_int32(acc), expected + rq.zero_point)
        np.testing.assert_array_equal(np.clip(rq.numpy_int32(acc), 0, 255), rq.numpy(acc))


def test_requant_rejects_out_of_range_parameters():
    with pytest.raises(ValueError, match="multiplier"):
        Requant(1 << 15, 20)
    with pytest.raises(ValueError, match="shift"):
        Requant(100, 16)
    assert abs(Requant.from_scale(0.0123).scale / 0.0123 - 1) < 1e-4


@pytest.mark.parametrize("layout", [layouts.ONE_COLUMN, layouts.TWO_COLUMN, layouts.FOUR_COLUMN])
def test_layout_pack_matches_figure_4_2(layout):
    m, k = 130, 9
    x = np.arange(m * k).reshape(m, k)
    packed = layout.pack(x)
    r, v = layout.rows, layout.cols
    groups = layouts.round_up(k, layout.col_multiple) // v
    assert packed.shape == (-(-m // r), groups, r, v)
    # one vector = R rows x v adjacent columns, row by row
    assert packed[0, 1].reshape(-1)[: 2 * v].tolist() == [x[0, v + j] for j in range(v)] + [
        x[1, v + j] for j in range(v)
    ]
    np.testing.assert_array_equal(layout.unpack(packed, m, k), x)


def test_weight_words_hold_the_bytes_each_instruction_reads():
    w = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)  # [K=4, N=4]
    b = lambda word: list(np.array([word], "<i4").view(np.int8))
    assert b(transforms.pack_weights(w, "vmpy")[1, 2]) == [w[1, 2]] * 4
    assert b(transforms.pack_weights(w, "vrmpy")[0, 3]) == list(w[:, 3])
    assert b(transforms.pack_weights(w, "vmpa")[0, 1]) == [w[0, 1], w[2, 1], w[1, 1], w[3, 1]]


def test_vmpa_exactness_predicate():
    assert matmul.vmpa_exact(np.full((8, 3), 64, np.int8))
    assert matmul.vmpa_exact(np.full((8, 3), -64, np.int8))
    w = np.zeros((4, 1), np.int8)
    w[0, 0], w[2, 0] = 127, 127  # the pair (4g, 4g+2) shares one 16-bit sum
    assert not matmul.vmpa_exact(w)
    w[2, 0] = -127
    assert matmul.vmpa_exact(w)


# --------------------------------------------------------------------- on the emulator

SHAPES = [(64, 64, 64), (37, 53, 29), (5, 3, 1), (129, 20, 6)]


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("variant", layouts.VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_bit_exact(variant, shape):
    y, ref, _ = _run_matmul(variant, *shape)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("variant", ["vmpy", "vrmpy"])
def test_full_range_weights_are_exact_for_32_bit_accumulating_variants(variant):
    y, ref, _ = _run_matmul(variant, 33, 40, 9, seed=3, wmax=127)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.needs_toolchain
def test_packet_counts_are_deterministic_and_kernel_only():
    _, _, first = _run_matmul("vrmpy", 64, 64, 64, seed=1, count_packets=True)
    _, _, second = _run_matmul("vrmpy", 64, 64, 64, seed=2, count_packets=True)
    assert first.packets == second.packets and first.packets[0] > 0
    assert first.packets_outside_calls == 0


@pytest.mark.needs_toolchain
def test_layout_transforms_on_device():
    from tvm_cocopie.emulation import hexagon as runner

    m, k = 37, 11
    x = np.random.default_rng(0).integers(0, 256, (m, k)).astype("uint8")
    choices = [None, layouts.ONE_COLUMN, layouts.TWO_COLUMN, layouts.FOUR_COLUMN]

    def packed(layout):
        return x if layout is None else layout.pack(x)

    for src, dst in itertools.permutations(choices, 2):
        func = transforms.convert_func(src, dst, m, k)
        (out,), _ = runner.run_func(func, [packed(src), np.zeros_like(packed(dst))])
        np.testing.assert_array_equal(out, packed(dst))


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("shape", [(37, 53), (130, 9)], ids=lambda s: "x".join(map(str, s)))
def test_repack_between_gcd2_layouts_moves_whole_vectors(shape):
    from tvm_cocopie.emulation import hexagon as runner

    m, k = shape
    x = np.random.default_rng(1).integers(0, 256, (m, k)).astype("uint8")
    gcd2 = [layouts.ONE_COLUMN, layouts.TWO_COLUMN, layouts.FOUR_COLUMN]
    for src, dst in itertools.permutations(gcd2, 2):
        res = runner.run(
            {"repack": transforms.repack_func(src, dst, m, k)},
            [("repack", ["x", "y"])],
            {"x": src.pack(x)},
            ["y"],
            count_packets=True,
        )
        np.testing.assert_array_equal(dst.unpack(res.outputs["y"], m, k), x)
        vectors = int(np.prod(dst.shape(m, k)[:2]))
        assert res.packets[0] <= 60 + 10 * vectors, (src.name, dst.name, res.packets)


@pytest.mark.needs_toolchain
def test_two_layer_chain_with_a_layout_change_in_one_program():
    """y = mm_vmpa(repack_4to2(mm_vrmpy(x))): GCD²'s layout edges, one packet count each."""
    from tvm_cocopie.emulation import hexagon as runner

    m, k, n1, n2 = 45, 24, 20, 12
    x, w1, b1, rq1 = _problem(m, k, n1, seed=5)
    _, w2, b2, rq2 = _problem(m, n1, n2, seed=6)
    four, two = layouts.FOUR_COLUMN, layouts.TWO_COLUMN
    funcs = {
        "mm1": matmul.matmul("vrmpy", m, k, n1, rq1),
        "repack": transforms.repack_func(four, two, m, n1),
        "mm2": matmul.matmul("vmpa", m, n1, n2, rq2),
    }
    calls = [
        ("mm1", ["x", "w1", "b1", "h4"]),
        ("repack", ["h4", "h2"]),
        ("mm2", ["h2", "w2", "b2", "y"]),
    ]
    inputs = {
        "x": four.pack(x),
        "w1": transforms.pack_weights(w1, "vrmpy"),
        "b1": transforms.pad_bias(b1, "vrmpy"),
        "w2": transforms.pack_weights(w2, "vmpa"),
        "b2": transforms.pad_bias(b2, "vmpa"),
    }
    res = runner.run(funcs, calls, inputs, ["y"], count_packets=True)
    hidden = reference.qmatmul(x, w1, b1, rq1)
    np.testing.assert_array_equal(
        two.unpack(res.outputs["y"], m, n2), reference.qmatmul(hidden, w2, b2, rq2)
    )
    assert len(res.packets) == 3 and min(res.packets) > 0

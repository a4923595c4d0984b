"""Channel slices, concatenations and shuffles as HVX vector moves on grids, under
qemu-hexagon, bit for bit against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_cocopie.hexagon.kernels.channels import channel_move_kernel
from tvm_cocopie.topi.int8.hvx import channel_sources
from tvm_cocopie.topi.int8.layouts import LAYOUT_OF, VARIANTS, round_up

ROWS = 128  # a whole vector of rows in every layout (four in the 4-column one)

MOVES = [
    # (kind, input channels, output channels, params)
    ("slice", [116], 58, {"offset": 58}),  # ShuffleNetV2's split of 116: off the groups
    ("slice", [64], 32, {"offset": 16}),  # aligned: whole vectors
    ("concat", [58, 58], 116, {}),
    ("concat", [6, 3, 8], 17, {}),
    ("shuffle", [116], 116, {"groups": 2}),
    ("shuffle", [24], 24, {"groups": 3}),
]


def _grid(rng, channels, variant):
    lay = LAYOUT_OF[variant]
    return rng.integers(0, 256, (round_up(channels, lay.col_multiple) // lay.cols, ROWS,
                                 lay.cols)).astype(np.uint8)


def _channels(grid, channels):
    g, r, v = grid.shape
    return grid.transpose(1, 0, 2).reshape(r, g * v)[:, :channels]


def test_channel_sources():
    assert channel_sources("shuffle", [6], 6, {"groups": 2}) == [
        (0, 0), (0, 3), (0, 1), (0, 4), (0, 2), (0, 5)]
    assert channel_sources("concat", [2, 1], 3, {}) == [(0, 0), (0, 1), (1, 0)]


@pytest.mark.needs_toolchain
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("move", MOVES, ids=lambda m: f"{m[0]}{'_'.join(map(str, m[1]))}")
def test_channel_move_bit_exact(variant, move):
    from tvm_cocopie.emulation import hexagon as runner

    kind, cins, cout, params = move
    rng = np.random.default_rng(len(cins) + cout)
    grids = [_grid(rng, c, variant) for c in cins]
    func = channel_move_kernel(kind, variant, [g.shape for g in grids], cins, cout, params)
    names = [f"x{k}" for k in range(len(grids))]
    res = runner.run({"move": func}, [("move", [*names, "y"])], dict(zip(names, grids)), ["y"],
                     count_packets=True)
    y = res.outputs["y"]
    srcs = [_channels(g, c) for g, c in zip(grids, cins)]
    want = np.stack([srcs[k][:, ch] for k, ch in channel_sources(kind, cins, cout, params)], 1)
    np.testing.assert_array_equal(_channels(y, cout), want)
    padded = _channels(y, y.shape[0] * y.shape[2])[:, cout:]
    assert not padded.any()  # padded channels are 0
    assert res.packets[0] < 40 * y.size // 128  # a few packets per output vector


def test_shufflenet_moves_channels_on_grids(tmp_path):
    """ShuffleNetV2's splits, concats and shuffles compile to channel moves on grids,
    none to the NHWC computes (nor the unpacks and regrids around those)."""
    from tvm_cocopie import models
    from tvm_cocopie.hexagon.executor.model import prepare
    from tvm_cocopie.hexagon.executor.program import compile_network
    from tvm_cocopie.topi.int8.hvx import descriptor

    net, *_ = prepare(models.build("shufflenetv2", image_size=32), workdir=tmp_path)
    prog = compile_network(net, schedule=False)
    moved = {q.layer.name for q in net.layers if q.layer.op in ("concat", "slice", "shuffle")}
    kernels = {layer: (descriptor(prog.funcs[name]) or {}).get("op")
               for (name, _), (layer, role) in zip(prog.calls, prog.roles)
               if layer in moved and role == "kernel" and name.startswith("layer")}
    assert len(kernels) == len(moved) == 58
    assert set(kernels.values()) == {"channels"}
    assert not any(name.startswith("unpack") for name, _ in prog.calls[:-1])

"""Grouped int8 convolutions on HVX with ``vrmpy``, only the useful products.

A grouped convolution (ResNeXt's 32 groups of 4 to 32 channels, ShuffleNet v1,
RegNet) is a dense convolution whose weights are block diagonal. Run as a dense conv
on :mod:`.conv2d`, all but ``1 / groups`` of its products would multiply zeros. Here it
runs on the same padded 4-column grids (:mod:`.conv2d`'s shifted-row taps, stride
phases, input zero point in the padding and folded into the bias), but each output
vector (4 output channels x 32 rows) reduces only over the input groups of 4 channels
its conv groups read (:class:`~tvm_cocopie.topi.int8.hvx.GroupWindow`): with 4 channels
per group, one input vector per tap feeds the four ``vrmpy`` of its four output
channels (``Vx.w += vrmpy(Vu.ub, Rt.b)``: each 32-bit lane sums a pixel's 4 group
inputs times the channel's 4 weights). Wider groups read ``cg / 4`` vectors per tap,
narrower ones (2 channels, unaligned groups) some zero weights.

Accumulators stay in registers across the whole reduction, as in :mod:`.gemm`: a block
is 2 row blocks x 2 output vectors (one row block x 4 vectors when all rows fit one),
16 accumulator vectors; taps along a row are unrolled inside the reduction loop, all
taps when one input group is read per tap.
"""

from __future__ import annotations

import numpy as np

from ...topi.int8.compute import Requant
from ...topi.int8.hvx import GroupWindow
from ...topi.int8.layouts import GridGeometry
from . import hvx
from .gemm import block_size, channel_params, requant4
from .tirgen import T, bind, kernel, ramp, vec_buffer, vload, vstore
from .transforms import pack_words

#: Output rows of a 4-column vector.
ROWS = 32


def pack_grouped_weights(w: np.ndarray, groups: int, taps: list | None = None) -> np.ndarray:
    """HWIO ``int8 [KH, KW, C/g, O]`` to the words ``int32 [T, O'/4, span, 4]`` of
    :class:`~tvm_cocopie.topi.int8.hvx.GroupWindow`: word ``[t, ov, k, j]`` byte ``q``
    is the weight of tap ``taps[t]`` (default: all, row by row), input channel
    ``4 (base(ov) + k) + q``, output channel ``4 ov + j``; zero where that input is
    outside the output's group (or past the channels)."""
    kh, kw, cg, o = w.shape
    win = GroupWindow(cg * groups, o, groups)
    taps = np.stack([w[dy, dx] for dy, dx in taps]) if taps else w.reshape(kh * kw, cg, o)
    full = np.zeros((len(taps), win.out_groups, win.span, 4, 4), np.int8)  # t, ov, k, j, q
    for ov in range(win.out_groups):
        base = win.base(ov)
        for j in range(4):
            n = 4 * ov + j
            if n >= o:
                continue
            first = (n // win.og) * cg  # the output's group's first input channel
            for k in range(win.span):
                for q in range(4):
                    ci = 4 * (base + k) + q
                    if first <= ci < first + cg:
                        full[:, ov, k, j, q] = taps[:, ci - first, n]
    return pack_words(*(full[..., q] for q in range(4)))


def _block(row_blocks: int, out_groups: int) -> tuple:
    """``(row blocks, output vectors)`` per register block: 16 accumulators at most."""
    if row_blocks >= 2:
        return 2, block_size(out_groups, 2)
    return 1, block_size(out_groups, 4)


def grouped_conv2d(geo: GridGeometry, channels: int, out_channels: int, groups: int,
                   rq: Requant, taps: list | None = None):
    """The kernel ``(x, w, bias, y)`` of a grouped NHWC int8 conv on 4-column grids.

    ``x``: :func:`.conv2d.pack_input` in ``vrmpy``; ``w``: :func:`pack_grouped_weights`;
    ``bias``: :func:`.transforms.pad_bias`; ``y``: the output grid
    (:func:`.conv2d.unpack_output`). A per-channel ``rq`` adds ``rq`` after ``bias``
    (its :meth:`~tvm_cocopie.topi.int8.compute.Requant.table` over the padded channels).
    ``taps``: the ``(dy, dx)`` computed (all by default), in the weights' order.
    Computes what :func:`tvm_cocopie.topi.int8.hvx.qgroup_conv2d_grid` states.
    """
    win = GroupWindow(channels, out_channels, groups)
    kk = geo.kernel
    all_taps = [(dy, dx) for dy in range(kk) for dx in range(kk)]
    taps = [tuple(t) for t in taps] if taps else all_taps
    x_shape = geo.in_shape("vrmpy", channels)
    y_shape = geo.out_shape("vrmpy", out_channels)
    np_ = win.out_groups * 4
    params = [
        ("x", x_shape, "uint8"),
        ("w", win.weight_shape(len(taps)), "int32"),
        ("bias", (np_,), "int32"),
        *([("rq", (2, np_), "int32")] if rq.per_channel else []),
        ("y", y_shape, "uint8"),
    ]
    row_blocks = y_shape[1] // ROWS
    rb, nb = _block(row_blocks, win.out_groups)
    name = f"qgconv{kk}x{kk}s{geo.stride}_g{groups}"
    with kernel(name, params) as (bufs, out):
        x, w, bias, *table, y = bufs
        rq_params = channel_params(table[0]) if table else None
        acc = [[[vec_buffer(f"acc{r}_{b}_{t}") for t in range(4)] for b in range(nb)]
               for r in range(rb)]

        def step(ps, ovs, bases, ti, dy, dx, k):
            phase, shift = geo.tap(dy, dx)
            for b, ov in enumerate(ovs):
                vs = [bind(hvx.as_vec(x.vload([phase, bases[b] + k, p * ROWS + shift, 0],
                                              "uint8x128"))) for p in ps]
                for t in range(4):
                    wt = w[ti, ov, k, t]
                    for r, v in enumerate(vs):
                        vstore(acc[r][b][t], hvx.vrmpybus_acc(vload(acc[r][b][t]), v, wt))

        def nest(first, count, rows):
            with T.grid(count // rows, win.out_groups // nb) as (pp, blk):
                ps = [first + pp * rows + r for r in range(rows)]
                ovs = [blk * nb + b for b in range(nb)]
                bases = [bind(win.base(ov)) for ov in ovs]
                for r in range(rows):
                    for b, ov in enumerate(ovs):
                        for t in range(4):
                            vstore(acc[r][b][t], T.Broadcast(bias[ov * 4 + t], 32))
                if win.span == 1:  # one input vector per tap: every tap unrolled
                    for ti, (dy, dx) in enumerate(taps):
                        step(ps, ovs, bases, ti, dy, dx, 0)
                elif taps == all_taps:  # the taps of a row unrolled inside the group loop
                    with T.grid(kk, win.span) as (dy, k):
                        for dx in range(kk):
                            step(ps, ovs, bases, dy * kk + dx, dy, dx, k)
                else:  # a few live taps: all unrolled inside the group loop
                    with T.serial(win.span) as k:
                        for ti, (dy, dx) in enumerate(taps):
                            step(ps, ovs, bases, ti, dy, dx, k)
                for r, p in enumerate(ps):
                    for b, ov in enumerate(ovs):
                        chans = ([rq_params(ov * 4 + t) for t in range(4)] if rq_params
                                 else None)
                        vec = requant4(rq, [vload(acc[r][b][t]) for t in range(4)], chans)
                        T.buffer_store(y, vec, [ov, p * ROWS, ramp(0, 128)])

        main = row_blocks - row_blocks % rb
        nest(0, main, rb)
        if main < row_blocks:  # a left-over row block
            nest(main, row_blocks - main, 1)
    return out[0]

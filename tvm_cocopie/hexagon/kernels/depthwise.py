"""Depthwise int8 convolution on HVX in GCD²'s three layouts (seed 004, §4.3).

A depthwise convolution has no reduction over channels, so the instructions that sum
across a vector's columns (``vmpa``, ``vrmpy``) would mix channels. ``vmpy`` instead
multiplies byte ``q`` of a vector by byte ``q % 4`` of ``Rt``: with ``Rt`` holding the
weights of the vector's channels in the order they repeat (``w_c`` four times in the
1-column layout, ``w_c0, w_c1, w_c0, w_c1`` in the 2-column one, ``w_c0 .. w_c3`` in
the 4-column one) one ``vmpy`` applies a tap to 128 (row, channel) pairs at once, in
whichever layout the neighbouring operators chose. Two taps' 16-bit products are summed
into 32 bits by ``vaddhw``, as in the ``vmpy`` matmul; taps are row shifts of the padded
grids of :mod:`.conv2d`.
"""

import numpy as np

from ...topi.int8.compute import Requant
from ...topi.int8.layouts import LAYOUT_OF, GridGeometry, round_up
from . import hvx
from .gemm import block_size, channel_params, requant4
from .tirgen import T, bind, kernel, ramp, vec_buffer, vload, vstore
from .transforms import pack_words


def pack_dw_weights(w: np.ndarray, variant: str) -> np.ndarray:
    """``int8 [KH, KW, C]`` to ``int32 [KH*KW, G]``: per tap and channel group, ``Rt``."""
    layout = LAYOUT_OF[variant]
    kh, kw, c = w.shape
    cp = round_up(c, layout.col_multiple)
    full = np.zeros((kh * kw, cp), dtype=np.int8)
    full[:, :c] = w.reshape(kh * kw, c)
    groups = full.reshape(kh * kw, cp // layout.cols, layout.cols)
    return pack_words(*(groups[..., q % layout.cols] for q in range(4)))


def depthwise_conv2d(
    variant: str, geo: GridGeometry, channels: int, rq: Requant, col_block: int | None = None
):
    """The kernel ``(x, w, bias, y)`` of a depthwise NHWC int8 convolution.

    ``x``: :func:`.conv2d.pack_input`; ``w``: :func:`pack_dw_weights`; ``bias``:
    :func:`.transforms.pad_bias`; ``y``: output grid (:func:`.conv2d.unpack_output`).
    A per-channel ``rq`` adds ``rq`` after ``bias`` (its
    :meth:`~tvm_cocopie.topi.int8.compute.Requant.table`): each of the four vectors
    requantized together holds one channel (``u % v`` of the group), in every layout.
    """
    layout = LAYOUT_OF[variant]
    v, rows = layout.cols, layout.rows
    x_shape = geo.in_shape(variant, channels)
    y_shape = geo.out_shape(variant, channels)
    groups = x_shape[1]
    taps = [(dy, dx) for dy in range(geo.kernel) for dx in range(geo.kernel)]
    params = [
        ("x", x_shape, "uint8"),
        ("w", (len(taps), groups), "int32"),
        ("bias", (groups * v,), "int32"),
        *([("rq", (2, groups * v), "int32")] if rq.per_channel else []),
        ("y", y_shape, "uint8"),
    ]
    cols = col_block or block_size(groups, 4)
    name = f"qdwconv{geo.kernel}x{geo.kernel}s{geo.stride}_{variant}"
    with kernel(name, params) as (bufs, out):
        x, w, bias, *table, y = bufs
        rq_params = channel_params(table[0]) if table else None
        even = [vec_buffer(f"even{j}", 64) for j in range(cols)]
        odd = [vec_buffer(f"odd{j}", 64) for j in range(cols)]
        with T.grid(y_shape[1] // rows, groups // cols) as (p, blk):
            for j in range(cols):
                g = blk * cols + j
                # output byte 4t + u holds channel u % v of the group
                for buf, half, u in (
                    (even[j], 0, 0),
                    (odd[j], 0, 1),
                    (even[j], 1, 2),
                    (odd[j], 1, 3),
                ):
                    vstore(buf, T.Broadcast(bias[g * v + u % v], 32), 32, 32 * half)
            for t in range(0, len(taps), 2):
                pair = taps[t : t + 2]
                for j in range(cols):
                    g = blk * cols + j
                    prods = []
                    for dy, dx in pair:
                        phase, shift = geo.tap(dy, dx)
                        vec = hvx.as_vec(x.vload([phase, g, p * rows + shift, 0], "uint8x128"))
                        prods.append(bind(hvx.vmpybus(vec, w[dy * geo.kernel + dx, g])))
                    lo_b = hvx.lo(prods[1]) if len(prods) == 2 else T.Broadcast(T.int32(0), 32)
                    hi_b = hvx.hi(prods[1]) if len(prods) == 2 else T.Broadcast(T.int32(0), 32)
                    vstore(even[j], hvx.vaddhw_acc(vload(even[j], 64), hvx.lo(prods[0]), lo_b), 64)
                    vstore(odd[j], hvx.vaddhw_acc(vload(odd[j], 64), hvx.hi(prods[0]), hi_b), 64)
            for j in range(cols):
                e, o = even[j], odd[j]
                g = blk * cols + j
                chans = [rq_params(g * v + u % v) for u in range(4)] if rq_params else None
                vec = requant4(rq, [vload(e), vload(o), vload(e, 32, 32), vload(o, 32, 32)],
                               chans)
                T.buffer_store(y, vec, [blk * cols + j, p * rows, ramp(0, 128)])
    return out[0]

"""GCD²'s int8 convolutions on HVX: a sum of shifted matrix multiplications.

Seed 004, §4.3 applies the three instruction layouts to "multiple key operators in
DNN computations (e.g., MatMul, CONV, Depthwise CONV)"; Table 4.3 lists 7x7, 1x1 and
3x3 ResNet-50 convolutions. Here a convolution is a matrix multiplication whose rows
are spatial positions and whose reduction runs over taps and input channels.

To make every tap a *constant row shift*, activations are stored on a padded grid:
the image, zero padded by ``pad``, is flattened row by row (width ``Wq``), and the
output is computed on the same grid width, so output row ``oh*Wq + ow`` reads input
row ``oh*Wq + ow + dy*Wq + dx`` for tap ``(dy, dx)``; grid columns ``ow >= OW`` are
computed and ignored. A stride ``s`` splits the padded input into ``s*s`` phases
(``x[s*i + a, s*j + b]``), each a stride-1 grid: tap ``(dy, dx)`` reads phase
``(dy % s, dx % s)`` shifted by ``(dy // s) * Wq + dx // s``.

Each grid is kept in the variant's layout with all rows in one panel (``(G, rows,
v)``: ``v`` adjacent channels per row, rows contiguous), so a shifted window of
``R = 128 / v`` rows is one unaligned vector load.
"""


import numpy as np

from ...topi.int8.compute import Requant
from ...topi.int8.layouts import LAYOUT_OF, GridGeometry, TapFold, round_up
from . import hvx
from .gemm import EMITTERS, Operands, PackingHint, block_size, channel_params
from .tirgen import T, kernel, ramp
from .transforms import pack_weights


def _planar(rows: np.ndarray, n_rows: int, variant: str) -> np.ndarray:
    """``[r, C]`` rows to the planar layout ``(G, n_rows, v)``, zero padded."""
    layout = LAYOUT_OF[variant]
    r, c = rows.shape
    full = np.zeros((n_rows, round_up(c, layout.col_multiple)), dtype=rows.dtype)
    full[:r, :c] = rows
    return np.ascontiguousarray(full.reshape(n_rows, -1, layout.cols).transpose(1, 0, 2))


def pack_input(x: np.ndarray, geo: GridGeometry, variant: str) -> np.ndarray:
    """NHWC ``uint8 [1, H, W, C]`` to the kernel's input: phases of padded grids."""
    s, p = geo.stride, geo.pad
    img = np.zeros((geo.grid_h * s, geo.grid_w * s, x.shape[3]), dtype=x.dtype)
    img[p : p + geo.h, p : p + geo.w] = x[0]
    rows = geo.in_rows(variant)
    phases = [
        _planar(img[a::s, b::s].reshape(geo.grid_h * geo.grid_w, -1), rows, variant)
        for a in range(s)
        for b in range(s)
    ]
    return np.ascontiguousarray(np.stack(phases))


def unpack_output(y: np.ndarray, geo: GridGeometry, channels: int) -> np.ndarray:
    """The kernel's output grid ``(G, rows, v)`` back to NHWC ``[1, OH, OW, O]``."""
    g, rows, v = y.shape
    flat = y.transpose(1, 0, 2).reshape(rows, g * v)[: geo.out_h * geo.grid_w]
    return np.ascontiguousarray(
        flat.reshape(geo.out_h, geo.grid_w, -1)[None, :, : geo.out_w, :channels]
    )


def pack_conv_weights(w: np.ndarray, variant: str) -> np.ndarray:
    """HWIO ``int8 [KH, KW, C, O]`` to ``int32 [KH*KW, words, O']``: one matrix per tap;
    with the taps folded (:class:`TapFold`) ``[1, groups, O']``, one matrix of them all."""
    kh, kw, c = w.shape[:3]
    if fold := TapFold.of(variant, kh, c):
        return pack_weights(fold.fold(w), variant)[None]
    return np.stack([pack_weights(w[dy, dx], variant) for dy in range(kh) for dx in range(kw)])


def _folded_vector(x, geo: GridGeometry, fold: TapFold, row: int, group: int):
    """The ``vrmpy`` input vector of folded reduction ``group`` at grid row ``row``: each
    tap vector it spans (one unaligned load from its phase grid, as unfolded) masked to
    its channels and shifted to its bytes, OR-ed. The layout's padding byte (the input's
    fill, not always 0) is masked off."""
    from tvm import tirx

    def splat(value):
        return tirx.Broadcast(tirx.const(value, "int32"), 32)

    out = None
    for tap, first, last, offset in fold.pieces(group):
        phase, shift = geo.tap(tap // geo.kernel, tap % geo.kernel)
        v = hvx.as_vec(x.vload([phase, 0, row + shift, 0], "uint8x128"))
        # a left shift pushes the bytes past `last` out by itself when they are the top ones
        if not (first == 0 and offset > 0 and last + offset == 3):
            v = v & splat(sum(0xFF << (8 * c) for c in range(first, last + 1)))
        if offset > 0:
            v = v << splat(8 * offset)
        elif offset < 0:
            v = v >> splat(-8 * offset)  # masked: the top byte is 0, so arithmetic = logical
        out = v if out is None else out | v
    return hvx.as_bytes(out)


def conv2d(
    variant: str,
    geo: GridGeometry,
    channels: int,
    out_channels: int,
    rq: Requant,
    col_block: int | None = None,
    hint: PackingHint | None = None,
):
    """The kernel ``(x, w, bias, y)`` of an NHWC int8 convolution in ``variant``'s layout.

    ``x``: :func:`pack_input`; ``w``: :func:`pack_conv_weights`; ``bias``:
    :func:`.transforms.pad_bias`; ``y``: the output grid, see :func:`unpack_output`.
    A per-channel ``rq`` adds ``rq`` after ``bias``: its
    :meth:`~tvm_cocopie.topi.int8.compute.Requant.table` over the padded channels.
    Without ``col_block`` the ``vrmpy`` loop nest is tiled and unrolled by
    :func:`.gemm.unroll_hint` (or ``hint``, ``vrmpy`` only).
    """
    if variant not in EMITTERS:
        raise ValueError(f"unknown HVX conv variant {variant!r}; use one of {list(EMITTERS)}")
    if hint is not None and variant != "vrmpy":
        raise ValueError(f"a PackingHint tiles the vrmpy loop nest only, not {variant!r}")
    layout = LAYOUT_OF[variant]
    x_shape = geo.in_shape(variant, channels)
    y_shape = geo.out_shape(variant, out_channels)
    kp = round_up(channels, layout.col_multiple)
    np_ = round_up(out_channels, layout.col_multiple)
    fold = TapFold.of(variant, geo.kernel, channels)
    if fold:
        w_shape = (1, fold.groups, np_)
        if hint is None:  # every group unrolled: each is assembled from its own taps
            hint = PackingHint(block_size(y_shape[0], 2), 2, fold.groups, "loop", "folded")
    else:
        w_shape = (geo.kernel * geo.kernel, kp if variant == "vmpy" else kp // 4, np_)
    params = [
        ("x", x_shape, "uint8"),
        ("w", w_shape, "int32"),
        ("bias", (np_,), "int32"),
        *([("rq", (2, np_), "int32")] if rq.per_channel else []),
        ("y", y_shape, "uint8"),
    ]
    rows = layout.rows
    name = f"qconv{geo.kernel}x{geo.kernel}s{geo.stride}_{variant}"
    with kernel(name, params) as (bufs, out):
        x, w, bias, *table, y = bufs

        def load(p, g, tap):
            if fold:
                return _folded_vector(x, geo, fold, p * rows, g)
            phase, shift = geo.tap(*tap) if tap else (0, 0)
            return x.vload([phase, g, p * rows + shift, 0], "uint8x128")

        ops = Operands(
            row_blocks=y_shape[1] // rows,
            in_groups=fold.groups if fold else x_shape[1],
            out_groups=y_shape[0],
            taps=(geo.kernel, geo.kernel) if geo.kernel > 1 and not fold else (),
            x=load,
            w=lambda tap, i, col: w[tap[0] * geo.kernel + tap[1] if tap else 0, i, col],
            bias=lambda col: bias[col],
            store=lambda p, og, vec: T.buffer_store(y, vec, [og, p * rows, ramp(0, 128)]),
            rq_params=channel_params(table[0]) if table else None,
        )
        if hint is None:
            EMITTERS[variant](ops, rq, col_block)
        else:
            EMITTERS[variant](ops, rq, col_block, hint)
    return out[0]

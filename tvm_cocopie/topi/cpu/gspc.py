"""GSPC: grouped spatial-pack convolution for groups narrower than a channel chunk.

Gibson's thesis (chapter 5) computes a grouped conv ``G(g)`` as a dense conv per group:
the output channels of a group are tiled by ``T_O`` (the vector, a divisor of the
outputs per group ``K_PG``), its input channels by ``T_I``, the weight is packed once
per group into ``[g][K_PG / T_O][C_PG / T_I][kh][kw][T_I][T_O]`` and each output vector
accumulates one broadcast input value per input channel of its own group. Where a
group has at least a chunk of outputs, :mod:`.conv2d_nchwc` is that kernel already
(``T_O`` = the chunk, ``T_I`` = the input chunk, the packed weight per weight tile).

This module is the case that kernel pays for with zeros: groups narrower than the
output chunk (ResNeXt-50's 4 channels per group, the G(16) variants of WRN-40-2,
2 channels per group at G(16) of 32 channels). Packing several groups into one vector
makes the weight block-diagonal, ``ib / C_PG`` times the FLOPs. Here the chunk's
``ob`` lanes are ``S = ob / T_O`` segments of ``T_O = K_PG`` lanes, one group each:
the work block iterates them as ``(S, T_O)``, every segment its own (narrower) vector
with its own broadcast from its own group's input channels, so no FLOP is spent on a
zero. The layout stays the CPU layer's ``NCHW{ib}c`` on both sides (the 6-D
``[g][n][C/T_I][h][w][T_I]`` input pack of the thesis is that layout read in place:
the group's ``T_I`` channels are lanes of one chunk, or whole chunks), so grouped
convs chain with their neighbours without a transform, and the 6-D result
``[n][O / ob][h][w][S][T_O]`` is the blocked output with its lanes split, read back by
the result block where the epilogue is fused.

On an AVX2 machine with 128-bit FMA pipes (AMD Zen 1), a 4-lane FMA runs at the rate
of an 8-lane one: ``T_O = 4`` loses nothing to the narrower vector. Where the FMA
units are 256 bits wide, it matches the block-diagonal kernel's useful rate.
"""

from __future__ import annotations

import numpy as np
from tvm import te

from ...errors import CompilationError
from .conv2d_nchwc import ConvGeometry, ConvTile, input_extent, pad_nchwc, tiled_output

#: block annotation kind the conv schedule rule reads (with ``split`` segments)
KIND = "conv"

#: kernels for grouped convs whose groups are narrower than a chunk: ``"gspc"`` (this
#: module) or ``"blocked"``, the block-diagonal packing of :mod:`.conv2d_nchwc` that the
#: CPU layer used before (several groups per vector, zeros off the diagonal; convs it
#: would pad more than 4x go to TVM's own grouped conv)
GROUPED = ("gspc", "blocked")


def check_choice(grouped: str) -> str:
    """``grouped`` if it names a kernel of :data:`GROUPED`, else a clear error."""
    if grouped not in GROUPED:
        raise CompilationError(f"unknown grouped-conv kernel {grouped!r}: choose one of "
                               f"{', '.join(GROUPED)} (PipelineOptions.grouped)")
    return grouped


def applies(geo: ConvGeometry, ib: int, ob: int) -> bool:
    """Whether GSPC segments compute this conv: grouped, not depthwise, groups narrower
    than the output chunk and dividing it, and each group's inputs inside one input
    chunk or a whole number of chunks."""
    if geo.groups == 1 or geo.groups == geo.c == geo.o:
        return False
    opg, cpg = geo.opg, geo.cpg
    if opg >= ob or ob % opg or geo.o % ob or geo.c % ib:
        return False
    return ib % cpg == 0 or cpg % ib == 0


def segments(geo: ConvGeometry, ob: int) -> int:
    """``S``: groups side by side in one output chunk (``ob / K_PG``)."""
    return ob // geo.opg


def reduction_extents(geo: ConvGeometry, ib: int) -> tuple[int, int]:
    """``(chunks, lanes)`` of one group's input channels: ``(1, C_PG)`` when the group
    lies inside one input chunk, ``(C_PG / ib, ib)`` when it spans whole chunks."""
    cpg = geo.cpg
    return (1, cpg) if cpg <= ib else (cpg // ib, ib)


def _check(geo: ConvGeometry, tile: ConvTile) -> None:
    if tile.r != 1 or tile.wide or tile.split != segments(geo, tile.ob):
        raise CompilationError(f"GSPC tile {tile} does not fit {geo.groups} groups of "
                               f"{geo.opg} outputs in chunks of {tile.ob}")
    if not applies(geo, tile.ib, tile.ob):
        raise CompilationError(
            f"GSPC needs groups narrower than the output chunk {tile.ob} with their "
            f"{geo.cpg} input channels aligned to chunks of {tile.ib}; got {geo.groups} "
            f"groups of {geo.cpg} -> {geo.opg} channels")


def pack_weight_numpy(weight: np.ndarray, geo: ConvGeometry, tile: ConvTile) -> np.ndarray:
    """OIHW -> ``(O / ob, CB, KH, KW, T_I, ob)``: for output chunk ``c``, input chunk
    ``j`` of the group, input lane ``k``, the weight of output ``c * ob + lane`` (lane
    ``s * T_O + t``: segment ``s``, group ``c * S + s``) on its group's input channel
    ``j * T_I + k``. Every value is a weight of the conv: no zeros."""
    _check(geo, tile)
    cb, ti = reduction_extents(geo, tile.ib)
    o, cpg, kh, kw = weight.shape
    if (o, cpg) != (geo.o, geo.cpg):
        raise CompilationError(f"GSPC weight {weight.shape} is not {geo.o} outputs x {geo.cpg} "
                               "inputs per group")
    w = weight.reshape(o // tile.ob, tile.ob, cb, ti, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 4, 5, 3, 1))


def pack_weight(weight: te.Tensor, geo: ConvGeometry, tile: ConvTile) -> te.Tensor:
    """:func:`pack_weight_numpy` as a compute, for weights known only at run time."""
    _check(geo, tile)
    cb, ti = reduction_extents(geo, tile.ib)
    ob = tile.ob
    shape = (geo.o // ob, cb, geo.kh, geo.kw, ti, ob)
    return te.compute(shape, lambda c, j, y, x, k, lane: weight[c * ob + lane, j * ti + k, y, x],
                      name="gspc_weight_pack")


def conv2d_gspc(data: te.Tensor, packed: te.Tensor, geo: ConvGeometry, tile: ConvTile,
                out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/ib, H, W, ib) x packed -> (N, O/ob, OH, OW, ob)``, the chunk's lanes
    computed as ``tile.split`` segments of one group each (module docstring)."""
    _check(geo, tile)
    ib, ob = tile.ib, tile.ob
    seg = geo.opg
    cb, ti = reduction_extents(geo, ib)
    per_chunk = ib // geo.cpg if geo.cpg <= ib else 0  # groups per input chunk
    sh, sw = geo.stride
    dh, dw = geo.dilation
    dpad = pad_nchwc(data, geo, *input_extent(geo))
    rco = te.reduce_axis((0, cb), "rco")
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")
    rci = te.reduce_axis((0, ti), "rci")

    def body(n, oc, y, x, s, t):
        g = oc * tile.split + s  # segment s computes one group
        if per_chunk:
            icb, ilane = g // per_chunk, (g % per_chunk) * geo.cpg + rci
        else:
            icb, ilane = g * cb + rco, rci
        return te.sum(
            dpad[n, icb, y * sh + ry * dh, x * sw + rx * dw, ilane].astype(out_dtype)
            * packed[oc, rco, ry, rx, rci, s * seg + t].astype(out_dtype),
            axis=[rco, ry, rx, rci],
        )

    return tiled_output(geo, tile, geo.o // ob, ob, body, "conv2d_nchwc",
                        {"kind": KIND, "r": 1, "split": tile.split}, out_dtype,
                        split=tile.split)

"""GSPC: grouped spatial-pack convolution for groups that do not fall on channel chunks.

Gibson's thesis (chapter 5) computes a grouped conv ``G(g)`` as a dense conv per group:
the output channels of a group are tiled by ``T_O`` (the vector, a divisor of the
outputs per group ``K_PG``), its input channels by ``T_I``, the weight is packed once
per group into ``[g][K_PG / T_O][C_PG / T_I][kh][kw][T_I][T_O]`` and each output vector
accumulates one broadcast input value per input channel of its own group. Where each
group's inputs and outputs are whole channel chunks, :mod:`.conv2d_nchwc` is that
kernel already (``T_O`` = the chunk, ``T_I`` = the input chunk).

This module is every other grouped conv, which that kernel either pays for with zeros
or cannot take at all: groups narrower than the output chunk (ResNeXt-50's 4 channels
per group, the G(16) variants of WRN-40-2, channel multipliers), where packing several
groups into one vector makes the weight block-diagonal (``ib / C_PG`` times the FLOPs),
and groups across chunk boundaries (MobileNetV2 G(4)'s 36 channels per group in chunks
of 8), which went to TVM's own grouped conv in NCHW, 40x slower than ONNX Runtime.
Here the chunk's ``ob`` lanes are ``S = ob / T_O`` segments of ``T_O = gcd(K_PG, ob)``
lanes, each inside one group: the work block iterates them as ``(S, T_O)``, every
segment its own (narrower) vector with its own broadcasts from its own group's input
channels, so no FLOP is spent on a zero. The layout stays the CPU layer's
``NCHW{ib}c`` on both sides (the 6-D ``[g][n][C/T_I][h][w][T_I]`` input pack of the
thesis is that layout read in place where a group's channels are lanes of one chunk
or whole chunks; groups across chunk boundaries are packed, one chunk per group, in
the pass that pads the input: :func:`pack_groups`), so grouped convs chain with their
neighbours without a transform, and
the 6-D result ``[n][O / ob][h][w][S][T_O]`` is the blocked output with its lanes
split, read back by the result block where the epilogue is fused.

On an AVX2 machine with 128-bit FMA pipes (AMD Zen 1), a 4-lane FMA runs at the rate
of an 8-lane one: ``T_O = 4`` loses nothing to the narrower vector. Where the FMA
units are 256 bits wide, it matches the block-diagonal kernel's useful rate.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx

from ...errors import CompilationError
from .conv2d_nchwc import (
    ANNOTATION,
    ConvGeometry,
    ConvTile,
    groups_on_chunks,
    input_extent,
    pad_nchwc,
    tiled_output,
)

#: block annotation kind the conv schedule rule reads (with ``split`` segments)
KIND = "conv"

#: kernels for grouped convs whose groups do not fall on whole chunks: ``"gspc"`` (this
#: module) or ``"blocked"``, the block-diagonal packing of :mod:`.conv2d_nchwc` that the
#: CPU layer used before (several groups per vector, zeros off the diagonal; convs it
#: would pad more than 4x, or whose groups cross chunks, go to TVM's own grouped conv)
GROUPED = ("gspc", "blocked")


def check_choice(grouped: str) -> str:
    """``grouped`` if it names a kernel of :data:`GROUPED`, else a clear error."""
    if grouped not in GROUPED:
        raise CompilationError(f"unknown grouped-conv kernel {grouped!r}: choose one of "
                               f"{', '.join(GROUPED)} (PipelineOptions.grouped)")
    return grouped


def applies(geo: ConvGeometry, ib: int, ob: int) -> bool:
    """Whether GSPC segments compute this conv: grouped, not depthwise, and its groups
    not aligned with the chunks the direct kernel needs without zero weights (each
    group's inputs whole input chunks and its outputs whole output chunks)."""
    if geo.groups == 1 or geo.groups == geo.c == geo.o or geo.o % ob or geo.c % ib:
        return False
    return not groups_on_chunks(geo, ib, ob)


def segment_lanes(geo: ConvGeometry, ob: int) -> int:
    """``T_O``: the outputs of one segment, ``gcd(K_PG, ob)``: a segment never straddles
    two groups (the thesis' largest divisor of ``K_PG`` within a vector)."""
    return math.gcd(geo.opg, ob)


def segments(geo: ConvGeometry, ob: int) -> int:
    """``S``: segments in one output chunk (``ob / T_O``)."""
    return ob // segment_lanes(geo, ob)


def reduction_extents(geo: ConvGeometry, ib: int) -> tuple[int, int]:
    """``(chunks, lanes)`` of one group's input channels: ``(C_PG / ib, ib)`` when the
    group's inputs are whole chunks, else ``(1, C_PG)`` (inside one chunk, or across
    chunk boundaries: each channel's chunk and lane computed)."""
    cpg = geo.cpg
    return (cpg // ib, ib) if cpg % ib == 0 else (1, cpg)


def _check(geo: ConvGeometry, tile: ConvTile) -> None:
    if tile.r != 1 or tile.wide or tile.split != segments(geo, tile.ob):
        raise CompilationError(f"GSPC tile {tile} does not fit {geo.groups} groups of "
                               f"{geo.opg} outputs in chunks of {tile.ob}")
    if not applies(geo, tile.ib, tile.ob):
        raise CompilationError(
            f"GSPC computes grouped convs whose groups the direct kernel cannot take "
            f"without zero weights (chunks of {tile.ib} in, {tile.ob} out); got "
            f"{geo.groups} groups of {geo.cpg} -> {geo.opg} channels")


def pack_weight_numpy(weight: np.ndarray, geo: ConvGeometry, tile: ConvTile) -> np.ndarray:
    """OIHW -> ``(O / ob, CB, KH, KW, T_I, ob)``: for output chunk ``c``, input chunk
    ``j`` of the group, input lane ``k``, the weight of output ``c * ob + lane`` (lane
    ``s * T_O + t`` of segment ``s``) on its own group's input channel ``j * T_I + k``.
    Every value is a weight of the conv: no zeros."""
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


def pack_groups(data: te.Tensor, geo: ConvGeometry) -> te.Tensor:
    """The padded input with each group's channels as one chunk of their own,
    ``(N, G, rows, cols, C_PG)``: the thesis' input pack, for groups across the layout's
    chunk boundaries. Read in place, each of their channels has its own chunk and lane:
    72 addresses per output chunk at 36 channels per group, more than LLVM keeps in
    registers (11.5 GFLOP/s on MobileNetV2 G(4)'s 144@56 layer, 2 threads); packed, a
    segment's broadcasts are one pointer apart by one float. Computed in the pass that
    pads the input anyway, with the zero border."""
    pt, pl = geo.padding[0], geo.padding[1]
    h, w = data.shape[2:4]  # symbolic for a model compiled once for every size
    ib = int(data.shape[4])
    rows, cols = input_extent(geo)
    cpg = geo.cpg

    def fcompute(n, g, y, x, k):
        channel = g * cpg + k
        inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl)
        return tirx.if_then_else(inside, data[n, channel // ib, y - pt, x - pl, channel % ib],
                                 tirx.const(0, data.dtype))

    return te.compute((data.shape[0], geo.groups, rows, cols, cpg), fcompute, name="data_pad")


def conv2d_gspc(data: te.Tensor, packed: te.Tensor, geo: ConvGeometry, tile: ConvTile,
                out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/ib, H, W, ib) x packed -> (N, O/ob, OH, OW, ob)``, the chunk's lanes
    computed as ``tile.split`` segments of one group each (module docstring)."""
    _check(geo, tile)
    ib, ob = tile.ib, tile.ob
    seg = segment_lanes(geo, ob)
    cpg, opg = geo.cpg, geo.opg
    cb, ti = reduction_extents(geo, ib)
    sh, sw = geo.stride
    dh, dw = geo.dilation
    if groups_across_chunks(geo, ib):
        dpad = pack_groups(data, geo)
    else:
        dpad = pad_nchwc(data, geo, *input_extent(geo))
    rco = te.reduce_axis((0, cb), "rco")
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")
    rci = te.reduce_axis((0, ti), "rci")

    def group_of(oc, s):  # the group of segment s of output chunk oc
        if opg == seg:
            return oc * tile.split + s
        return (oc * ob + s * seg) // opg

    def input_of(g):  # (chunk, lane) of the group's input channel rco * ti + rci
        if cpg % ib == 0:
            return g * cb + rco, rci
        if ib % cpg == 0:
            per = ib // cpg
            return g // per, (g % per) * cpg + rci
        return g, rci  # the packed input: one chunk per group

    def body(n, oc, y, x, s, t):
        icb, lane = input_of(group_of(oc, s))
        return te.sum(
            dpad[n, icb, y * sh + ry * dh, x * sw + rx * dw, lane].astype(out_dtype)
            * packed[oc, rco, ry, rx, rci, s * seg + t].astype(out_dtype),
            axis=[rco, ry, rx, rci],
        )

    attrs = {"kind": KIND, "r": 1, "split": tile.split}
    if tile.split == 1:  # one group fills the chunk: plain lanes
        return tiled_output(geo, tile, geo.o // ob, ob,
                            lambda n, oc, y, x, t: body(n, oc, y, x, 0, t),
                            "conv2d_nchwc", attrs, out_dtype)
    return tiled_output(geo, tile, geo.o // ob, ob, body, "conv2d_nchwc", attrs, out_dtype,
                        split=tile.split)


#: block annotation kind of the pixel-vector variant (:func:`conv2d_gspc_pixels`)
PIXELS_KIND = "gspc_pixels"
#: a conv whose segments (``T_O``) fill at most this fraction of a vector runs on
#: vectors of output pixels (:func:`pixel_vectors`): one or two channels of a 16-lane
#: FMA waste 87-94% of it (MobileNetV2 G(16)'s 9 channels per group ran at 6-11
#: GFLOP/s, 0.16-0.28x ONNX Runtime's speed), four 75%
PIXEL_SEGMENT_FRACTION = 0.25
#: ... and at most this fraction where its groups cross the input chunks (packed one
#: group per chunk by :func:`pack_groups`) on 16-lane vectors
PIXEL_SEGMENT_FRACTION_ACROSS = 0.5


def groups_across_chunks(geo: ConvGeometry, ib: int) -> bool:
    """Whether a group's input channels are neither whole chunks of ``ib`` nor inside one."""
    return geo.cpg % ib != 0 and ib % geo.cpg != 0


def pixel_vectors(geo: ConvGeometry, ib: int, ob: int, lanes: int) -> bool:
    """Whether this GSPC conv runs on vectors of ``lanes`` output pixels instead of
    channels: its segments fill at most :data:`PIXEL_SEGMENT_FRACTION` of a vector, or
    :data:`PIXEL_SEGMENT_FRACTION_ACROSS` where its groups cross the input chunks.
    (Strided convs too: the input's column phases are stored apart, so their pixel
    vectors load contiguous input; measured on znver4, pixel over segment time at 1 / 2
    threads: 576@14 s2 G(16) 4-lane segments 1.31 / 1.41, 144@56 s2 G(4) 2.2 / 2.2,
    144@56 s2 G(8) 2-lane 4.7 / 4.8.)

    Half-vector segments (8 of 16 lanes), measured on AVX-512 (Emerald Rapids), pixel
    over segment time at 1 / 2 threads: groups across chunks (24, 72 or 120 channels
    per group in chunks of 16) 0.46-0.93, e.g. 960@7 G(8) 0.51 / 0.46, 576@14 G(8)
    0.62 / 0.59, 144@56 G(2) 0.64 / 0.70, 96@112 s2 G(4) 0.91 / 1.03; groups inside a
    chunk (8 channels) mostly the other way, e.g. 128@28 G(16) 1.86 / 2.21, ResNeXt's
    256@28 G(32) 2.23 / 1.98: they stay on segments. Not measured on 8 or 4 lanes
    (AVX2, NEON), which keep the quarter-vector bound."""
    wide = lanes >= 16 and groups_across_chunks(geo, ib)
    limit = PIXEL_SEGMENT_FRACTION_ACROSS if wide else PIXEL_SEGMENT_FRACTION
    return segment_lanes(geo, ob) <= limit * lanes


#: a static conv runs its pixel vectors over the flattened output grid
#: (:func:`flat_grid`) where that fills its vectors at least this much better than whole
#: rows do (7x7 maps on 16 lanes: 49 of 64 lanes against 7 of 16)
FLAT_GAIN = 1.25


def flat_grid(geo: ConvGeometry, lanes: int) -> int | None:
    """Row pitch ``P`` of the flattened output grid where the pixel-vector conv runs on
    vectors over it, else ``None``.

    Over a grid of ``OH`` rows of ``P = OW + ((KW - 1) * DW) // SW`` columns (the output
    row and the window's reach past it), output ``q = y * P + x`` reads input element
    ``q + a * P + b`` of each phase plane of the stride for tap offsets ``a, b``:
    contiguous along ``q``, so a vector of ``lanes`` consecutive grid points spans rows.
    Points with ``x >= OW`` are computed and dropped. Chosen where whole rows fill
    vectors poorly (:data:`FLAT_GAIN`); a symbolic shape keeps rows."""
    if geo.symbolic_spatial:
        return None
    oh, ow = int(geo.oh), int(geo.ow)
    pitch = ow + ((geo.kw - 1) * geo.dilation[1]) // geo.stride[1]
    rows_fill = ow / (-(-ow // lanes) * lanes)
    flat_fill = oh * ow / (-(-oh * pitch // lanes) * lanes)
    return pitch if flat_fill >= FLAT_GAIN * rows_fill else None


def _flat_conv(data: te.Tensor, weight: te.Tensor, geo: ConvGeometry, lanes: int,
               pitch: int, out_dtype: str, attrs: dict):
    """The pad and conv blocks over the flattened grid (:func:`flat_grid`): the input
    padded into ``(N, C, SH, SW, L)``, each phase plane of the stride a grid of ``pitch``
    columns flattened; the conv ``(N, O, 1, OH * pitch rounded up to lanes)``."""
    ib = int(data.shape[4])
    h, w = geo.h, geo.w
    sh, sw = geo.stride
    dh, dw = geo.dilation
    pt, pl = geo.padding[0], geo.padding[1]
    cpg, opg = geo.cpg, geo.opg
    points = -(-geo.oh * pitch // lanes) * lanes
    reach = ((geo.kh - 1) * dh) // sh * pitch + ((geo.kw - 1) * dw) // sw
    length = points + reach

    def fpad(b, c, py, px, f):  # phase (py, px) of the stride, grid point f
        y, x = f // pitch * sh + py, f % pitch * sw + px
        inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl)
        return tirx.if_then_else(inside, data[b, c // ib, y - pt, x - pl, c % ib],
                                 tirx.const(0, data.dtype))

    dpad = te.compute((geo.n, geo.c, sh, sw, length), fpad, name="data_pad")
    rc = te.reduce_axis((0, cpg), "rc")
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")
    conv = te.compute(
        (geo.n, geo.o, 1, points),
        lambda b, o, _, q: te.sum(
            dpad[b, o // opg * cpg + rc, (ry * dh) % sh, (rx * dw) % sw,
                 q + (ry * dh) // sh * pitch + (rx * dw) // sw].astype(out_dtype)
            * weight[o, rc, ry, rx].astype(out_dtype), axis=[rc, ry, rx]),
        name="conv2d_nchwc", attrs=attrs)
    return lambda b, o, y, x: conv[b, o, 0, y * pitch + x]


def conv2d_gspc_pixels(data: te.Tensor, weight: te.Tensor, geo: ConvGeometry, lanes: int,
                       ob: int, out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/ib, H, W, ib) x OIHW weight -> (N, O/ob, OH, OW, ob)`` with vectors of
    ``lanes`` output pixels of one channel (the NCHW convolution ONNX Runtime and
    MetaSchedule vectorize along the row), for groups of segments too narrow for
    channel vectors (:data:`PIXEL_SEGMENT_FRACTION`).

    Three blocks: the input padded and moved to NCHW (its width padded for whole pixel
    vectors), the conv over ``(N, O, OH, OW')`` (``OW'`` a multiple of ``lanes``, each
    output channel reading its own group's ``C_PG`` input channels, broadcasting one
    weight per FMA), and the blocked result read back across the channels; the weight
    stays OIHW (each FMA broadcasts one value of it). Small maps run over the flattened
    output grid instead of whole rows (:func:`flat_grid`)."""
    ib = int(data.shape[4])
    pitch = flat_grid(geo, lanes)
    if pitch is not None:
        attrs = {ANNOTATION: {"kind": PIXELS_KIND, "lanes": lanes, "opg": geo.opg, "flat": 1}}
        point = _flat_conv(data, weight, geo, lanes, pitch, out_dtype, attrs)
        return te.compute((geo.n, geo.o // ob, geo.oh, geo.ow, ob),
                          lambda b, c, y, x, lane: point(b, c * ob + lane, y, x),
                          name="conv2d_nchwc_out")
    n, h, w = geo.n, geo.h, geo.w
    oh, ow = geo.oh, geo.ow
    sh, sw = geo.stride
    dh, dw = geo.dilation
    pt, pl = geo.padding[0], geo.padding[1]
    owp = (ow + lanes - 1) // lanes * lanes  # symbolic dims too: no negated floordiv
    rows = (oh - 1) * sh + (geo.kh - 1) * dh + 1
    cols = (owp - 1) * sw + (geo.kw - 1) * dw + 1
    phase_cols = (cols + sw - 1) // sw
    cpg, opg = geo.cpg, geo.opg

    def fpad(b, c, y, p, xq):  # padded column xq * sw + p: a stride's phases apart
        x = xq * sw + p
        inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl)
        return tirx.if_then_else(inside, data[b, c // ib, y - pt, x - pl, c % ib],
                                 tirx.const(0, data.dtype))

    # (N, C, rows, stride, cols / stride): each column phase of the stride stored apart,
    # so that a vector of strided output pixels reads contiguous input
    dpad = te.compute((n, geo.c, rows, sw, phase_cols), fpad, name="data_pad")
    rc = te.reduce_axis((0, cpg), "rc")
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")
    attrs = {ANNOTATION: {"kind": PIXELS_KIND, "lanes": lanes, "opg": opg}}
    conv = te.compute(
        (n, geo.o, oh, owp),
        lambda b, o, y, x: te.sum(
            dpad[b, o // opg * cpg + rc, y * sh + ry * dh, (rx * dw) % sw,
                 x + (rx * dw) // sw].astype(out_dtype)
            * weight[o, rc, ry, rx].astype(out_dtype), axis=[rc, ry, rx]),
        name="conv2d_nchwc", attrs=attrs)
    return te.compute((n, geo.o // ob, oh, ow, ob),
                      lambda b, c, y, x, lane: conv[b, c * ob + lane, y, x],
                      name="conv2d_nchwc_out")

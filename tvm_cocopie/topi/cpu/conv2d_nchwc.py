"""Blocked-layout (NCHW[x]c) direct convolution with a flattened, padded spatial axis.

The data layout is ``NCHW{ib}c`` (channel chunks of ``ib`` lanes innermost), the
output ``NCHW{ob}c``; the weight is packed once, at compile time, into
``(O // wb, CBg, KH, KW, ib, wb)`` with ``wb = r * ob`` output channels per register
tile, so that the inner loop of the schedule reads ``wb`` contiguous weights per
input channel and broadcasts one input value against them (an outer product).

The output's spatial axes are flattened into ``p = oh * OW + ow`` and padded up to a
multiple of the register tile ``t`` (``P'``), so that every register tile is full:
rows beyond the image are computed on clamped addresses and dropped by the slice
that gives the op its ``(N, O // ob, OH, OW, ob)`` result. The schedule
(:mod:`tvm_cocopie.schedules.cpu.conv2d_nchwc`) reads the tile from the block
annotation ``cocopie.conv2d_nchwc`` and never has to guess.

Groups are handled by reading, for each register tile of ``wb`` output channels,
the contiguous range of input chunks its groups use (``CBg`` chunks starting at
``icb0``); when a tile spans several groups the packed weight is block-diagonal
with zeros (the GSPC idea of packing groups into full vectors, at a cost of
``wb / opg`` extra FLOPs, which the planner keeps small). Depthwise convolutions
use :mod:`.depthwise_nchwc` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from tvm import te, tirx
from tvm.sym import Analyzer

from ...errors import CompilationError

#: block annotation naming the conv block and its register tile
ANNOTATION = "cocopie.conv2d_nchwc"

#: input rows / columns a conv with a symbolic height or width is planned for (its
#: register tile, its parallel split): a mid-size feature map, where the tiles of larger
#: maps are already the ones chosen (row tiles of 4-8 pixels)
PLAN_SIZE = 64


@dataclass(frozen=True)
class ConvGeometry:
    """Static shape facts of a 2-D convolution, in channels (not chunks)."""

    n: int  # or a symbolic batch (a TIR ``PrimExpr``): see :attr:`images`
    c: int
    h: int  # ``h`` and ``w`` may be symbolic too: see :meth:`planned`
    w: int
    o: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int

    @property
    def oh(self) -> int:
        """Output height."""
        pt, _, pb, _ = self.padding
        return _simplified((self.h + pt + pb - (self.kh - 1) * self.dilation[0] - 1)
                          // self.stride[0] + 1)

    @property
    def ow(self) -> int:
        """Output width."""
        _, pl, _, pr = self.padding
        return _simplified((self.w + pl + pr - (self.kw - 1) * self.dilation[1] - 1)
                          // self.stride[1] + 1)

    @property
    def cpg(self) -> int:
        """Input channels per group."""
        return self.c // self.groups

    @property
    def opg(self) -> int:
        """Output channels per group."""
        return self.o // self.groups

    @property
    def symbolic_spatial(self) -> bool:
        """Whether the height or the width is symbolic (a TIR expression)."""
        return not (isinstance(self.h, int) and isinstance(self.w, int))

    def planned(self) -> ConvGeometry:
        """The static geometry the tiles are chosen for: a symbolic batch as one image, a
        symbolic height or width as :data:`PLAN_SIZE` (the kernel then loops over the real
        extents, its tiles padded and clamped as for any size they do not divide)."""
        return replace(self, n=self.images,
                       h=self.h if isinstance(self.h, int) else PLAN_SIZE,
                       w=self.w if isinstance(self.w, int) else PLAN_SIZE)

    @property
    def images(self) -> int:
        """The batch the tiles are planned for: :attr:`n`, or 1 when the batch is symbolic
        (a ``PrimExpr``: the kernels then loop over it, planned per image)."""
        return self.n if isinstance(self.n, int) else 1

    @property
    def flops(self) -> int:
        """FLOPs of the convolution (2 per multiply-accumulate)."""
        return 2 * self.n * self.o * self.oh * self.ow * self.cpg * self.kh * self.kw


@dataclass(frozen=True)
class ConvTile:
    """Blocking of a NCHWc convolution: layout blocks and the register tile."""

    ib: int  # input channel chunk (layout)
    ob: int  # output channel chunk (layout)
    r: int  # output chunks per register tile: wb = r * ob lanes of weights
    th: int  # output rows per register tile (1 when flat)
    tw: int  # output columns (or flattened pixels when flat) per register tile
    flat: bool = False  # tile the flattened oh*ow axis instead of rows x columns
    #: narrow chunks (``ob`` below a vector, ShuffleNet's 58 channels in chunks of 2):
    #: the conv block computes ``wb`` lanes per pixel, the ``r`` chunks of a weight tile
    #: side by side, so its vector ops are whole; the slice after it gives the chunks
    wide: bool = False
    #: grouped convs whose groups do not fall on whole chunks (GSPC, :mod:`.gspc`): the
    #: chunk's lanes are ``split`` segments of ``ob / split`` outputs inside one group,
    #: each its own vector reading its own group's inputs (no zero weights)
    split: int = 1

    @property
    def wb(self) -> int:
        """Weight values per register row: the tile's rows times the output block."""
        return self.r * self.ob

    def work_chunks(self, outputs: int) -> int:
        """Output chunks the conv computes: ``outputs / ob`` rounded up to whole weight
        tiles. A :attr:`wide` tile fills its vector with ``r`` chunks even when ``r`` does
        not divide them, and a dense conv with an odd number of chunks takes two weight
        vectors per tile all the same (:func:`~.tiling.conv_tile`); the extra chunks are
        computed on zero weights and dropped."""
        return _round_up(outputs // self.ob, self.r)


def groups_on_chunks(geo: ConvGeometry, ib: int, ob: int) -> bool:
    """Whether every group's inputs are whole chunks of ``ib`` and its outputs whole
    blocks of ``ob`` (a dense conv trivially): the convs a kernel tiled by chunks computes
    group by group without zero weights."""
    return geo.groups == 1 or (geo.cpg % ib == 0 and geo.opg % ob == 0)


def group_span(geo: ConvGeometry, tile: ConvTile) -> int:
    """``CBg``: the input chunks one weight tile of ``wb`` output channels reads.

    The tile's outputs belong to one group (``opg % wb == 0``) or to ``wb / opg``
    whole groups; the input channels those groups read must be whole chunks, or lie
    inside one chunk (then the others are multiplied by packed zeros: the GSPC
    trade of ``ib / span`` extra FLOPs for full vectors). Raises
    :class:`CompilationError` when the groups do not align with the chunks.
    """
    wb, ib, cpg, opg = tile.wb, tile.ib, geo.cpg, geo.opg
    if geo.groups == 1:
        return geo.c // ib
    if opg % wb == 0:
        span = cpg
    elif wb % opg == 0:
        span = wb // opg * cpg
    else:
        span = 0
    if span and span % ib == 0:
        return span // ib
    if span and ib % span == 0:
        return 1
    raise CompilationError(
        f"grouped conv with {opg} outputs / {cpg} inputs per group does not fit "
        f"weight tiles of {wb} and input chunks of {ib}"
    )


def tile_input_chunk(geo: ConvGeometry, tile: ConvTile, ocw):
    """First input chunk read by weight tile ``ocw`` (an expression in ``ocw``)."""
    group_span(geo, tile)  # validates the alignment
    if geo.groups == 1:
        return 0
    return (ocw * tile.wb // geo.opg) * geo.cpg // tile.ib


def weight_tiles(geo: ConvGeometry, tile: ConvTile) -> int:
    """Weight tiles of ``wb`` output channels: ``O / wb``, rounded up for narrow chunks
    (the last tile's missing channels packed as zeros; dense convs only)."""
    if geo.o % tile.ob:
        raise CompilationError(f"{geo.o} output channels are not a multiple of the chunk "
                               f"{tile.ob}")
    if geo.o % tile.wb and (geo.groups > 1 or tile.split > 1):
        raise CompilationError(f"{geo.o} output channels are not a multiple of the tile "
                               f"{tile.wb} (only the tiles of dense convs are padded)")
    return tile.work_chunks(geo.o) // tile.r


def pack_weight(weight: te.Tensor, geo: ConvGeometry, tile: ConvTile) -> te.Tensor:
    """OIHW weight -> ``(ceil(O / wb), CBg, KH, KW, ib, wb)``, zero off the group diagonal
    and past the last output channel."""
    cbg = group_span(geo, tile)
    wb, ib = tile.wb, tile.ib
    shape = (weight_tiles(geo, tile), cbg, geo.kh, geo.kw, ib, wb)

    def fcompute(ocw, j, y, x, ci, oi):
        o = ocw * wb + oi
        c = (tile_input_chunk(geo, tile, ocw) + j) * ib + ci  # absolute input channel
        if geo.groups == 1:
            if geo.o % wb == 0:
                return weight[o, c, y, x]
            return tirx.if_then_else(o < geo.o, weight[tirx.min(o, geo.o - 1), c, y, x],
                                     tirx.const(0, weight.dtype))
        g = o // geo.opg
        local = c - g * geo.cpg
        inside = tirx.all(local >= 0, local < geo.cpg)
        safe = tirx.max(tirx.min(local, geo.cpg - 1), 0)
        return tirx.if_then_else(inside, weight[o, safe, y, x], tirx.const(0, weight.dtype))

    return te.compute(shape, fcompute, name="weight_pack")


def pack_weight_numpy(weight: np.ndarray, geo: ConvGeometry, tile: ConvTile) -> np.ndarray:
    """:func:`pack_weight` on a constant, at compile time (no kernel to build)."""
    cbg = group_span(geo, tile)
    wb, ib = tile.wb, tile.ib
    tiles = weight_tiles(geo, tile)
    if tiles * wb > geo.o:  # narrow chunks: zero weights for the padding channels
        extra = np.zeros((tiles * wb - geo.o, *weight.shape[1:]), weight.dtype)
        weight = np.concatenate([weight, extra])
    ocw = np.arange(tiles).reshape(tiles, 1, 1, 1)
    j = np.arange(cbg).reshape(1, cbg, 1, 1)
    ci = np.arange(ib).reshape(1, 1, ib, 1)
    oi = np.arange(wb).reshape(1, 1, 1, wb)
    start = np.array([tile_input_chunk(geo, tile, int(t)) for t in range(tiles)])
    o = ocw * wb + oi
    c = (start.reshape(tiles, 1, 1, 1) + j) * ib + ci
    local = c - (o // geo.opg) * geo.cpg if geo.groups > 1 else c
    inside = (local >= 0) & (local < weight.shape[1])
    picked = weight[o, np.clip(local, 0, weight.shape[1] - 1)]  # (T, CBg, ib, wb, KH, KW)
    picked = np.where(inside[..., None, None], picked, 0).astype(weight.dtype)
    return np.ascontiguousarray(picked.transpose(0, 1, 4, 5, 2, 3))


def pad_nchwc(data: te.Tensor, geo: ConvGeometry, rows: int, cols: int) -> te.Tensor:
    """Zero-pad a NCHWc tensor to ``rows x cols`` (top/left padding from ``geo``)."""
    pt, pl = geo.padding[0], geo.padding[1]
    h, w = (_static(s) for s in data.shape[2:4])
    if pt == 0 and pl == 0 and _provably(rows <= h) and _provably(cols <= w):
        return data
    shape = (data.shape[0], data.shape[1], rows, cols, data.shape[4])

    def fcompute(n, c, y, x, i):
        inside = tirx.all(y >= pt, y < h + pt, x >= pl, x < w + pl)
        return tirx.if_then_else(inside, data[n, c, y - pt, x - pl, i],
                                 tirx.const(0, data.dtype))

    return te.compute(shape, fcompute, name="data_pad")


def _round_up(x: int, m: int, inlined: bool = False) -> int:
    """``x`` rounded up to a multiple of ``m``; ``inlined``: a symbolic result is to be
    proven by TVM to cover ``x`` (a wide tile's slice is inlined into the conv)."""
    if isinstance(x, int):
        return -(-x // m) * m
    padded = tirx.floordiv(x + (m - 1), m) * m  # a symbolic extent (left unsimplified:
    # simplified, it made PP-OCR rec's convs 1.16 -> 1.56x their static builds)
    if not inlined or not isinstance(x, tirx.Mul) or _covers(x, padded):
        return padded
    # TVM's region-cover proof fails on (2 W + m - 1) // m * m >= 2 W (a width written
    # as 2 * W_32 by divisible dims), so a wide tile's padded output could not be
    # inlined into its slice; it proves the same bound for (x - 1) // m + 1 tiles
    return _simplified((tirx.floordiv(x - 1, m) + 1) * m)


_COVERS: dict = {}


def _covers(extent, padded) -> bool:
    """Whether TVM's schedule state proves that a producer over ``padded`` covers a
    consumer over ``extent`` (tried on a two-stage compute: the inline needs it)."""
    from tvm import s_tir
    from tvm_ffi import structural_hash

    key = (structural_hash(extent), structural_hash(padded))
    if key not in _COVERS:
        data = te.placeholder((extent,), "float32", name="data")
        staged = te.compute((padded,), lambda i: data[tirx.min(i, extent - 1)], name="staged")
        out = te.compute((extent,), lambda i: staged[i], name="out")
        sch = s_tir.Schedule(te.create_prim_func([data, out]))
        try:
            sch.compute_inline(sch.get_sblock("staged"))
            _COVERS[key] = True
        except Exception:  # noqa: BLE001 - TVM's "not a stage pipeline": no proof
            _COVERS[key] = False
    return _COVERS[key]


def _simplified(extent):
    """``extent`` as is if static, else simplified: a symbolic extent composed through
    forty layers of output-size formulas (``(W + 1 + 1 - 2 - 1) // 2 + 1`` and the tile
    padding on top) becomes ``W_32 * 16`` where the dims allow, in every kernel's index
    arithmetic and in the proofs the schedules need."""
    return extent if isinstance(extent, int) else Analyzer().simplify(extent)


def _static(dim):
    """A shape dim as an ``int`` when it is a constant, else the expression."""
    return int(dim) if isinstance(dim, (int, tirx.IntImm)) else dim


def _provably(cond) -> bool:
    """Whether ``cond`` (a Python bool, or a TIR condition over symbolic extents) holds
    for every value of its variables."""
    if isinstance(cond, bool):
        return cond
    return bool(Analyzer().can_prove(cond))


def _same(a, b) -> bool:
    """Whether two extents (ints or TIR expressions) are provably equal."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(Analyzer().can_prove_equal(a, b))


def subsample_nchwc(data: te.Tensor, geo: ConvGeometry) -> te.Tensor:
    """The pixels a strided 1x1 conv reads, made contiguous: ``(N, CB, OH, OW, ib)``.

    A stride-2 1x1 conv (a ResNet downsample) reads one pixel in four, half of each
    cache line, with a stride the prefetchers cannot follow, once per output-channel
    tile. Gathering them once into a compact tensor (a quarter of the input) was
    2-6x faster in ResNet-50 (layer 3 and 4 downsamples; their input no longer fits
    L2 otherwise).
    """
    sh, sw = geo.stride
    n, cb, _, _, ib = data.shape
    return te.compute((n, cb, geo.oh, geo.ow, ib),
                      lambda i, c, y, x, ci: data[i, c, y * sh, x * sw, ci], name="data_stride")


def padded_extent(geo: ConvGeometry, tile: ConvTile) -> tuple[int, ...]:
    """Spatial extent the conv block computes: ``(P',)`` when flat, else ``(OH', OW')``."""
    if tile.flat:
        return (_round_up(geo.oh * geo.ow, tile.tw),)
    return (_round_up(geo.oh, tile.th, tile.wide), _round_up(geo.ow, tile.tw, tile.wide))


def waste(geo: ConvGeometry, tile: ConvTile) -> float:
    """Computed / useful output pixels of ``tile`` (1.0: no padding)."""
    ext = padded_extent(geo, tile)
    total = ext[0] if tile.flat else ext[0] * ext[1]
    return total / (geo.oh * geo.ow)


def input_extent(geo: ConvGeometry) -> tuple[int, int]:
    """Rows and columns of the padded input that the output pixels touch."""
    rows = (geo.oh - 1) * geo.stride[0] + (geo.kh - 1) * geo.dilation[0] + 1
    cols = (geo.ow - 1) * geo.stride[1] + (geo.kw - 1) * geo.dilation[1] + 1
    return rows, cols


def tiled_output(geo: ConvGeometry, tile: ConvTile, chunks: int, lanes: int, body,
                 name: str, attrs: dict, out_dtype: str, group: int = 1,
                 split: int = 1) -> te.Tensor:
    """A ``(N, chunks, OH, OW, lanes)`` result computed over the padded extent.

    ``body(n, c, y, x, ci)`` gives the value of output pixel ``(y, x)``; it is called
    on clamped coordinates for the padding pixels. With ``group > 1`` the block doing
    the work computes ``group`` chunks side by side (``c`` a group of chunks, ``ci``
    one of its ``group * lanes`` lanes, iterated as ``(group, lanes)``), ``chunks``
    rounded up to whole groups; else ``chunks`` is rounded up to whole weight tiles of
    ``tile.r`` chunks (:meth:`ConvTile.work_chunks`; the extra ones are dropped). With
    ``split > 1`` it is the other way round: one chunk's
    lanes are iterated as ``(split, lanes / split)`` (the segments of a GSPC tile) and
    ``body(n, c, y, x, segment, lane)`` takes both.
    That block carries the annotation
    ``{ANNOTATION: attrs}`` plus the tile, for the schedule; a slice block after it
    gives the exact result.
    """
    oh, ow = geo.oh, geo.ow
    ext = padded_extent(geo, tile)
    if tile.flat and geo.symbolic_spatial:
        raise CompilationError("a conv with a symbolic height or width takes row tiles, "
                               "not flattened ones")
    attrs = dict(attrs, th=tile.th, tw=tile.tw, flat=int(tile.flat),
                 oh=oh if isinstance(oh, int) else 0, ow=ow if isinstance(ow, int) else 0)
    if group > 1 and split > 1:
        raise ValueError("a work block is either wide (group > 1) or split, not both")
    work_chunks = -(-chunks // group) if group > 1 else _round_up(chunks, tile.r)
    seg = lanes // split
    lane_shape = (group, lanes) if group > 1 else (split, seg) if split > 1 else (lanes,)

    def clamp(v, extent, bound):
        return v if _same(extent, bound) else tirx.min(v, bound - 1)

    def lane(idx):  # the body's lane arguments from the work block's lane iterators
        if split > 1:  # (segment, lane in it): no division for TVM to simplify
            return tuple(idx)
        return (idx[0] * lanes + idx[1],) if group > 1 else (idx[0],)

    def unpack(c, ci):  # work indices of output chunk c, lane ci
        if group > 1:
            return (c // group, c % group, ci)
        return (c, ci // seg, ci % seg) if split > 1 else (c, ci)

    if tile.flat:
        def fflat(n, c, p, *li):
            pe = clamp(p, ext[0], oh * ow)
            return body(n, c, pe // ow, pe % ow, *lane(li))

        work = te.compute((geo.n, work_chunks, ext[0], *lane_shape), fflat, name=name,
                          attrs={ANNOTATION: attrs})
    else:
        def f2d(n, c, y, x, *li):
            return body(n, c, clamp(y, ext[0], oh), clamp(x, ext[1], ow), *lane(li))

        work = te.compute((geo.n, work_chunks, ext[0], ext[1], *lane_shape), f2d, name=name,
                          attrs={ANNOTATION: attrs})
        if (_same(ext[0], oh) and _same(ext[1], ow) and len(lane_shape) == 1
                and work_chunks == chunks):
            return work

    def fout(n, c, y, x, ci):
        wc, *wl = unpack(c, ci)
        pixel = (y * ow + x,) if tile.flat else (y, x)
        return work[(n, wc, *pixel, *wl)]

    return te.compute((geo.n, chunks, oh, ow, lanes), fout, name=name + "_out")


def conv2d_nchwc(data: te.Tensor, packed: te.Tensor, geo: ConvGeometry, tile: ConvTile,
                 out_dtype: str = "float32") -> te.Tensor:
    """``(N, C/ib, H, W, ib) x packed -> (N, O/ob, OH, OW, ob)``.

    ``packed`` is :func:`pack_weight`'s output (or the same layout from a constant).
    The conv block computes the padded extent (:func:`padded_extent`) on clamped
    input addresses; a slice block gives the op its exact output.
    """
    ib, ob, r = tile.ib, tile.ob, tile.r
    weight_tiles(geo, tile)  # validates the chunks against the outputs
    sh, sw = geo.stride
    dh, dw = geo.dilation
    if geo.kh == geo.kw == 1 and (sh, sw) != (1, 1) and not any(geo.padding):
        dpad, sh, sw = subsample_nchwc(data, geo), 1, 1
    else:
        dpad = pad_nchwc(data, geo, *input_extent(geo))
    cbg = group_span(geo, tile)
    rco = te.reduce_axis((0, cbg), "rco")
    ry = te.reduce_axis((0, geo.kh), "ry")
    rx = te.reduce_axis((0, geo.kw), "rx")
    rci = te.reduce_axis((0, ib), "rci")

    def body(n, oc, y, x, oi):
        if tile.wide:  # oc: a weight tile, oi: one of its wb lanes
            ocw, lane = oc, oi
        else:
            ocw = oc // r
            lane = (oc % r) * ob + oi if r > 1 else oi
        icb = tile_input_chunk(geo, tile, ocw) + rco
        return te.sum(
            dpad[n, icb, y * sh + ry * dh, x * sw + rx * dw, rci].astype(out_dtype)
            * packed[ocw, rco, ry, rx, rci, lane].astype(out_dtype),
            axis=[rco, ry, rx, rci],
        )

    if tile.wide:  # one work chunk per weight tile: the schedule sees r = 1, wb lanes
        return tiled_output(geo, tile, geo.o // ob, ob, body, "conv2d_nchwc",
                            {"kind": "conv", "r": 1, "group": r}, out_dtype, group=r)
    return tiled_output(geo, tile, geo.o // ob, ob, body, "conv2d_nchwc",
                        {"kind": "conv", "r": r}, out_dtype)

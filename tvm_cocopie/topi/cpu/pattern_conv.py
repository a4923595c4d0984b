"""Pattern-sparse 3x3 convolution (PatDNN, seed 004 ch. 2): FKW storage and the kernel.

Every kept 3x3 kernel of a pattern-pruned layer has the few positions of one pattern
(:mod:`tvm_cocopie.pruning`); connectivity pruning removed whole kernels. The dense
kernels' vector runs over output channels, where 8 neighbouring filters' kernels have
8 different patterns: a sparse layer gains nothing there. So this kernel vectorizes
over output *pixels* and computes one filter at a time, the way PatDNN's code does:

- **Filter kernel reorder and FKW storage** (:func:`fkw`): filters sorted by their
  number of kernels (``reorder``), each filter's kernels grouped by pattern, then by
  input channel; the arrays of the thesis' FKW format: ``offset`` (a filter's first
  kernel), ``reorder``, ``index`` (each kernel's input channel), ``stride`` (where each
  pattern's kernels start inside a filter) and ``weights`` (each kernel's pattern
  positions, in pattern order).
- **Per-pattern code with static indices**: the kernel has one loop per pattern over
  that pattern's kernels of the filter; the taps' offsets are constants of the code,
  so the only index read in the inner loop is the input channel. The thesis' no-opt
  version (``mode="kernel"``: one loop over a filter's kernels, each tap's position
  read from a pattern table) and CSR (``mode="csr"``: one loop over the nonzeros, the
  input channel and position read per weight) are the same generator's other modes,
  for the comparison ``scripts/bench_pattern.py`` makes.
- **Load redundancy elimination**: a register tile of ``rows`` output rows by
  ``vectors`` pixel vectors per filter; every tap of a kernel updates the whole tile,
  and a kernel's input rows are loaded once for all the output rows and taps that
  read them (the loads have the same static address, the compiler keeps them in
  registers: kernel-level LRE across kernel rows).
- **Input tiling and threads**: the parallel loop runs over tiles of output pixels
  (every filter of a tile reads the same few input rows of every channel, kept in L2);
  the input is unpacked once, in a parallel pass, into a zero-padded plain layout
  split into ``stride`` column phases, so that a pixel vector of any tap is one
  contiguous load even at stride 2.

Input and output are ``NCHW`` or the CPU layer's ``NCHW{b}c``; the epilogue (bias,
ReLU / clip) is applied to the register tile before the store. Where the channel block
is as wide as the pixel vector (``NCHW16c`` with 16 lanes on AVX-512), both layout
changes are lane transposes (:func:`transpose`, TIR ``Shuffle`` nodes: ``vpermt2ps``):
``L`` channel vectors of a tile's input row become ``L`` pixel vectors, and a tile's
results, staged in output-channel order, leave as one full-line store per output
pixel. Element by element, they were ~18% and ~7% of VGG-16 L4's time on AVX-512
(every output element a store into another 64-byte line).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

import numpy as np
from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ...errors import CompilationError
from ...exprs import builder_store, f32, stack_tile
from ...kernel_knobs import REALIZE_ATTR
from .conv2d_nchwc import ConvGeometry

#: code generation modes: PatDNN's pattern code, its no-opt version, CSR
MODES = ("pattern", "kernel", "csr")
#: epilogue activations the kernel applies in registers
ACTIVATIONS = ("none", "relu", "clip")


@dataclass(frozen=True)
class PatternKnobs:
    """Tuning knobs: the register tile (``rows`` x ``vectors`` pixel vectors of
    ``lanes``), whether each tile's input is copied contiguous first (``tile_copy``) and
    how many kernels ahead its lines are prefetched (0: none)."""

    rows: int = 4
    vectors: int = 2
    lanes: int = 8
    tile_copy: bool = True
    prefetch: int = 2

    @property
    def width(self) -> int:
        return self.vectors * self.lanes

    def describe(self) -> str:
        copy = "" if self.tile_copy else "-direct"
        return f"r{self.rows}v{self.vectors}p{self.prefetch}{copy}"


#: accumulators of the register tile: AVX2's 16 registers hold 8 of them, the input
#: vectors a tap loads and the broadcast weight
MAX_ACCUMULATORS = 8
#: the register tiles (rows, pixel vectors) the knob search chooses from, in a fixed
#: order (a MetaSchedule decision is an index into it, replayed across kernels): the
#: tiles :func:`default_knobs` picks from, then six that need 32 vector registers
#: (AVX-512, NEON)
TILE_GRID = ((8, 1), (7, 1), (6, 1), (5, 1), (4, 1), (4, 2), (3, 2), (2, 2),
             (16, 1), (14, 1), (12, 1), (8, 2), (7, 2), (6, 2))


def tile_choices(registers: int) -> list[int]:
    """Indices into :data:`TILE_GRID` of the tiles whose accumulators fit ``registers``
    vector registers with the loaded inputs and broadcast weights beside them (half the
    file, as :data:`MAX_ACCUMULATORS` is half of AVX2's)."""
    limit = max(MAX_ACCUMULATORS, registers // 2)
    return [i for i, (rows, vectors) in enumerate(TILE_GRID) if rows * vectors <= limit]


def default_knobs(geo: ConvGeometry, lanes: int) -> PatternKnobs:
    """The untuned tile: of the tiles with at most :data:`MAX_ACCUMULATORS` vectors
    (one pixel vector per row preferred: rows share their input loads), the one that
    computes the fewest pixels past the image's edges, then the largest. Measured on
    VGG-16's L9 (512 channels at 14x14, one thread): 7x1 4.9 ms, 4x2 5.7 ms, 8x1 6.0."""
    def waste(tile):
        rows, vectors = tile
        oh = -(-geo.oh // rows) * rows
        ow = -(-geo.ow // (vectors * lanes)) * vectors * lanes
        return oh * ow / (geo.oh * geo.ow)

    tiles = [(r, 1) for r in range(MAX_ACCUMULATORS, 3, -1)]
    tiles += [(r, 2) for r in range(MAX_ACCUMULATORS // 2, 1, -1)]
    tiles = [t for t in tiles if t[0] <= geo.oh] or [(geo.oh, 1)]
    rows, vectors = min(tiles, key=lambda t: (round(waste(t), 2), t[1], -t[0]))
    return PatternKnobs(rows, vectors, lanes)


def index_dtype(filters: int, channels: int) -> str:
    """The integer type of a layer's FKW channel indices, filter order and per-filter
    pattern bounds (all below ``max(filters, channels)``): 16 bits where they fit."""
    return "int16" if max(filters, channels) < 2 ** 15 else "int32"


@dataclass(frozen=True)
class FKW:
    """A layer's kept kernels in FKW order (filters reordered, kernels by pattern)."""

    patterns: tuple[tuple[int, ...], ...]
    reorder: np.ndarray  # [O] (index_dtype): computed filter i is output channel reorder[i]
    offset: np.ndarray  # [O + 1] int32: filter i's kernels are offset[i]:offset[i+1]
    stride: np.ndarray  # [O, P + 1] (index_dtype): pattern p's kernels of filter i start
    #                     at offset[i] + stride[i, p] (relative: bounded by the channels)
    index: np.ndarray  # [nk] (index_dtype): input channel of each kernel
    weights: np.ndarray  # [nk, taps] float32: the pattern's positions, zero padded
    pattern_of: np.ndarray  # [nk] int32: each kernel's pattern (the no-opt mode reads it)

    def index_bytes(self) -> int:
        """Bytes of the FKW arrays other than the weights (the thesis' overhead): offset,
        reorder, index and stride, in their own integer types."""
        return sum(a.nbytes for a in (self.offset, self.reorder, self.index, self.stride))

    def dense(self, channels: int) -> np.ndarray:
        """The OIHW weight this FKW stores (the round trip of :func:`fkw`)."""
        o = self.reorder.size
        out = np.zeros((o, channels, 9), np.float32)
        for i in range(o):
            for j in range(self.offset[i], self.offset[i + 1]):
                pat = self.patterns[self.pattern_of[j]]
                out[self.reorder[i], self.index[j], list(pat)] = self.weights[j, :len(pat)]
        return out.reshape(o, channels, 3, 3)


def fkw(weight: np.ndarray, patterns, ids: np.ndarray) -> FKW:
    """FKW of an OIHW 3x3 ``weight`` whose kernel ``(o, i)`` has pattern ``ids[o, i]``
    (-1: pruned). Filters are reordered by kernel count, descending (the thesis' filter
    kernel reorder: similar filters side by side, balanced work)."""
    w = np.asarray(weight, np.float32).reshape(weight.shape[0], weight.shape[1], 9)
    o = w.shape[0]
    npat = len(patterns)
    taps = max(len(p) for p in patterns)
    counts = (ids >= 0).sum(axis=1)
    small = index_dtype(o, w.shape[1])
    reorder = np.argsort(-counts, kind="stable").astype(small)
    offset = np.zeros(o + 1, np.int32)
    stride = np.zeros((o, npat + 1), small)
    index, wts, pids = [], [], []
    pos = 0
    for i, f in enumerate(reorder):
        offset[i] = pos
        for p in range(npat):
            stride[i, p] = pos - offset[i]
            chans = np.nonzero(ids[f] == p)[0]
            for ch in chans:
                row = np.zeros(taps, np.float32)
                row[:len(patterns[p])] = w[f, ch, list(patterns[p])]
                wts.append(row)
            index.extend(int(ch) for ch in chans)
            pids.extend([p] * len(chans))
            pos += len(chans)
        stride[i, npat] = pos - offset[i]
    offset[o] = pos
    return FKW(tuple(tuple(p) for p in patterns), reorder, offset, stride,
               np.asarray(index, small),
               np.asarray(wts, np.float32).reshape(pos, taps),
               np.asarray(pids, np.int32))


@dataclass(frozen=True)
class CSR:
    """The same weights as compressed sparse rows of the ``[O, C * 9]`` matrix."""

    row_ptr: np.ndarray  # [O + 1] int32
    col: np.ndarray  # [nnz] int32: c * 9 + position
    values: np.ndarray  # [nnz] float32

    def index_bytes(self) -> int:
        return 4 * (self.row_ptr.size + self.col.size)


def csr(weight: np.ndarray) -> CSR:
    """CSR of an OIHW 3x3 ``weight``'s nonzeros."""
    m = np.asarray(weight, np.float32).reshape(weight.shape[0], -1)
    nz = m != 0
    row_ptr = np.concatenate([[0], np.cumsum(nz.sum(axis=1))]).astype(np.int32)
    cols = np.nonzero(nz)[1].astype(np.int32)
    return CSR(row_ptr, cols, m[nz].astype(np.float32))


def unsupported(geo: ConvGeometry) -> str | None:
    """Why this kernel does not compute ``geo``, or None."""
    if (geo.kh, geo.kw) != (3, 3) or geo.groups != 1 or geo.dilation != (1, 1):
        return (f"pattern-sparse conv takes dense 3x3 convs without dilation; got kernel "
                f"{geo.kh}x{geo.kw}, groups {geo.groups}, dilation {geo.dilation}")
    if geo.stride[0] != geo.stride[1]:
        return f"pattern-sparse conv needs equal strides; got {geo.stride}"
    return None


def check_geometry(geo: ConvGeometry) -> None:
    """A clear error for convs this kernel does not compute."""
    why = unsupported(geo)
    if why:
        raise CompilationError(why)


@dataclass(frozen=True)
class PatternConv:
    """Everything the generated kernel is specialized for."""

    geo: ConvGeometry
    patterns: tuple[tuple[int, ...], ...]
    kernels: int  # kept kernels (FKW) or nonzeros (CSR)
    knobs: PatternKnobs = PatternKnobs()
    mode: str = "pattern"
    data_block: int = 0  # 0: NCHW in
    out_block: int = 0  # 0: NCHW out
    bias: bool = False
    activation: str = "none"
    clip: tuple[float, float] = (0.0, 6.0)
    #: blocked layouts moved through lane transposes (TIR ``Shuffle``) where the block
    #: is the pixel vector's width; off, element by element: the portable form a model
    #: carries until the cocopie TIR pipeline generates the kernel (:func:`realize_knobs`:
    #: MetaSchedule's flop estimate has no rule for ``Shuffle``)
    lane_transposes: bool = True

    @property
    def row_tiles(self) -> int:
        return -(-self.geo.oh // self.knobs.rows)

    @property
    def col_tiles(self) -> int:
        return -(-self.geo.ow // self.knobs.width)

    def padded_shape(self) -> tuple[int, ...]:
        """``[N, C, S, Hp, Wq]``: the input zero padded, its columns split in ``S``
        stride phases (column ``S * xq + phase`` of the padded image)."""
        g, s = self.geo, self.geo.stride[0]
        hp = (self.row_tiles * self.knobs.rows - 1) * s + 3
        wq = self.col_tiles * self.knobs.width + 2 // s
        return (g.n, g.c, s, hp, wq)

    def tile_shape(self) -> tuple[int, ...]:
        """``[1, C, S, rows', width']``: the input one register tile reads, copied
        contiguous per channel (input tiling)."""
        g, s, k = self.geo, self.geo.stride[0], self.knobs
        return (1, g.c, s, (k.rows - 1) * s + 3, k.width + 2 // s)

    def data_shape(self) -> tuple[int, ...]:
        g, b = self.geo, self.data_block
        return (g.n, g.c // b, g.h, g.w, b) if b else (g.n, g.c, g.h, g.w)

    def out_shape(self) -> tuple[int, ...]:
        g, b = self.geo, self.out_block
        return (g.n, g.o // b, g.oh, g.ow, b) if b else (g.n, g.o, g.oh, g.ow)

    def weight_shapes(self) -> list[tuple[str, tuple[int, ...], str]]:
        """``[(name, shape, dtype)]`` of the weight arrays the kernel takes after the data."""
        o, nk, npat = self.geo.o, self.kernels, len(self.patterns)
        taps = max(len(p) for p in self.patterns) if self.patterns else 1
        if self.mode == "csr":
            shapes = [("row_ptr", (o + 1,), "int32"), ("col", (nk,), "int32"),
                      ("values", (nk,), "float32")]
        else:
            small = index_dtype(o, self.geo.c)
            shapes = [("reorder", (o,), small), ("offset", (o + 1,), "int32"),
                      ("stride", (o, npat + 1), small), ("index", (nk,), small),
                      ("weights", (nk, taps), "float32")]
            if self.mode == "kernel":
                shapes.append(("pattern_of", (nk,), "int32"))
        if self.bias:
            shapes.append(("bias", (o,), "float32"))
        return shapes

    def macs(self) -> int:
        """Multiply-accumulates the kernel does (padding taps included)."""
        g = self.geo
        per_kernel = 1 if self.mode == "csr" else max(len(p) for p in self.patterns)
        return g.n * g.oh * g.ow * self.kernels * per_kernel


def weight_arrays(spec: PatternConv, weight: np.ndarray,
                  layout=None) -> list[np.ndarray]:
    """The arrays :func:`pattern_conv_func` takes for ``weight`` (bias not included), in
    the order of :meth:`PatternConv.weight_shapes`."""
    if spec.mode == "csr":
        m = csr(weight)
        return [m.row_ptr, m.col, m.values]
    f = fkw(weight, layout.patterns, layout.ids)
    arrays = [f.reorder, f.offset, f.stride, f.index, f.weights]
    if spec.mode == "kernel":
        arrays.append(f.pattern_of)
    return arrays




def _fill_padded(spec: PatternConv, data, pbuf) -> None:
    """``pbuf[n, c, ph, yp, xq]`` = the input at row ``yp - pt``, column
    ``s * xq + ph - pl``, zero outside: zeroed with whole vectors, then the image copied
    in, one parallel loop over input rows reading whole channel chunks (a select per
    element over the padded extent cost 3 of VGG L4's 21 ms)."""
    g, s = spec.geo, spec.geo.stride[0]
    pt, pl = g.padding[0], g.padding[1]
    _, _, _, hp, wq = spec.padded_shape()
    b = spec.data_block
    with T.parallel(0, g.n * g.c) as nc, T.serial(0, s * hp) as row, \
            T.vectorized(0, wq) as xq:
        builder_store(pbuf, f32(0.0), nc // g.c, nc % g.c, row // hp, row % hp, xq)
    if b:
        cb = g.c // b
        with T.parallel(0, g.n * cb * g.h) as ny, T.serial(0, g.w) as x, \
                T.vectorized(0, b) as ci:
            n, c0, y = ny // (cb * g.h), ny // g.h % cb, ny % g.h
            builder_store(pbuf, data[n, c0, y, x, ci], n, c0 * b + ci, (x + pl) % s, y + pt,
                   (x + pl) // s)
    else:
        with T.parallel(0, g.n * g.c * g.h) as ny, T.vectorized(0, g.w) as x:
            n, c, y = ny // (g.c * g.h), ny // g.h % g.c, ny % g.h
            builder_store(pbuf, data[n, c, y, x], n, c, (x + pl) % s, y + pt, (x + pl) // s)


def _accumulate(spec: PatternConv, acc, src, ic, weight_of, position) -> None:
    """``acc[r, v*lanes + l] += w * input`` over the register tile for every tap of one
    kernel of input channel ``ic``, the input read as ``src(ic, dx, row, column)``
    (the tap's column offset, the row and column relative to the tile); ``position(t)`` is tap ``t``'s flat 3x3 position (an
    int: static indices, or an expression: read from a table); ``weight_of(t)`` its
    weight."""
    k, s = spec.knobs, spec.geo.stride[0]
    for t, pos in enumerate(position):
        dy, dx = pos // 3, pos % 3
        w = T.Bind(weight_of(t))
        for r in range(k.rows):
            for v in range(k.vectors):
                with T.vectorized(0, k.lanes) as lane:
                    col = v * k.lanes + lane
                    builder_store(acc, acc[r, col] + w * src(ic, dx, r * s + dy, col), r, col)


def _int(value):
    """An index read from a 16-bit FKW array, widened for address arithmetic."""
    return tirx.Cast("int32", value)


def _tile_body(spec: PatternConv, ins: dict, acc, src, f, prefetch=None) -> None:
    """Accumulate filter ``f``'s (computed order) contributions into ``acc``."""
    if spec.mode == "pattern":
        stride, index, weights = ins["stride"], ins["index"], ins["weights"]
        last = int(index.shape[0]) - 1
        first = T.Bind(ins["offset"][f])
        for p, pat in enumerate(spec.patterns):
            with T.serial(first + _int(stride[f, p]), first + _int(stride[f, p + 1])) as j:
                ic = T.Bind(_int(index[j]))
                if spec.knobs.prefetch and prefetch is not None:
                    prefetch(_int(index[tirx.min(j + spec.knobs.prefetch, last)]))
                _accumulate(spec, acc, src, ic,
                            lambda t, j=j: weights[j, t], list(pat))
        return
    if spec.mode == "kernel":  # no-opt: positions read from the pattern table per tap
        index, weights = ins["index"], ins["weights"]
        table = ins["table"]
        taps = weights.shape[1]
        with T.serial(ins["offset"][f], ins["offset"][f + 1]) as j:
            ic = T.Bind(_int(index[j]))
            pid = T.Bind(ins["pattern_of"][j])
            _accumulate(spec, acc, src, ic, lambda t, j=j: weights[j, t],
                        [T.Bind(table[pid, t]) for t in range(int(taps))])
        return
    row_ptr, col, values = ins["row_ptr"], ins["col"], ins["values"]
    with T.serial(row_ptr[f], row_ptr[f + 1]) as j:
        cj = T.Bind(col[j])
        _accumulate(spec, acc, src, T.Bind(cj // 9), lambda t, j=j: values[j],
                    [T.Bind(cj % 9)])


def _epilogue(spec: PatternConv, value, bias_value, lanes: int = 1):
    """Bias (``bias_value``: the channel's bias, or a vector of ``lanes`` channels'
    biases, or None) and activation of ``value``."""
    def const(v):
        return f32(v) if lanes == 1 else tirx.Broadcast(f32(v), lanes)

    if bias_value is not None:
        value = value + bias_value
    if spec.activation == "relu":
        value = tirx.max(value, const(0.0))
    elif spec.activation == "clip":
        value = tirx.max(tirx.min(value, const(spec.clip[1])), const(spec.clip[0]))
    return value


def _ramp(start, lanes: int):
    start = tirx.const(start, "int32") if isinstance(start, int) else start
    return tirx.Ramp(start, tirx.const(1, "int32"), lanes)


def _vload(buf, *idx, lanes: int):
    """The vector ``buf[idx[:-1], idx[-1] : idx[-1] + lanes]``."""
    return tirx.BufferLoad(buf, [*idx[:-1], _ramp(idx[-1], lanes)])


def transpose(vectors: list) -> list:
    """The transpose of a square matrix held as ``L`` vectors of ``L`` lanes (``L`` a power
    of two): ``log2 L`` rounds of interleaving vector ``i`` with vector ``i + L/2``
    (two-source lane shuffles, ``L`` per round: one ``vpermt2ps`` each on AVX-512),
    every intermediate bound once."""
    lanes = len(vectors)
    half = lanes // 2
    if lanes & (lanes - 1) or lanes < 2:
        raise CompilationError(f"transpose needs a power-of-two vector count; got {lanes}")
    low = [tirx.const(x, "int32") for k in range(half) for x in (k, lanes + k)]
    high = [tirx.const(x, "int32") for k in range(half, lanes) for x in (k, lanes + k)]
    for _ in range(lanes.bit_length() - 1):
        pairs = [(vectors[i], vectors[i + half]) for i in range(half)]
        vectors = [T.Bind(tirx.Shuffle(list(pair), order))
                   for pair in pairs for order in (low, high)]
    return vectors


def _copy_tile(spec: PatternConv, data, tb, n, y0, x0) -> None:
    """``tb[c, ph, rr, xq]`` = the input at padded row ``y0 * s + rr`` and padded column
    ``s * (x0 + xq) + ph``, zero in the padding: read from the data in its own layout
    (whole channel chunks of ``NCHW{b}c`` at a time), no padded copy of the image.
    From ``NCHW{L}c`` with ``L`` the pixel vector's width, ``L`` columns at a time are
    ``L`` channel vectors transposed into ``L`` column vectors (:func:`transpose`);
    the columns left over, and other layouts, element by element."""
    g, s, b = spec.geo, spec.geo.stride[0], spec.data_block
    pt, pl = g.padding[0], g.padding[1]
    _, _, _, rs, ws = spec.tile_shape()
    lanes = spec.knobs.lanes
    blocks = ws // lanes if spec.lane_transposes and _transposable(b, lanes) else 0

    def value(c_index, y, x, lane=None):
        yc = tirx.max(tirx.min(y, g.h - 1), 0)
        xc = tirx.max(tirx.min(x, g.w - 1), 0)
        v = data[n, c_index, yc, xc, lane] if b else data[n, c_index, yc, xc]
        return tirx.Select(tirx.all(y >= 0, y < g.h, x >= 0, x < g.w), v, f32(0.0))

    for ph in range(s):
        if blocks:
            with T.serial(0, g.c // b) as c0, T.serial(0, rs) as rr:
                for q in range(blocks):
                    _copy_block(spec, data, tb, n, c0, ph, rr, y0 * s + rr - pt,
                                (x0 + q * lanes) * s + ph - pl, q * lanes)
        if b:
            with T.serial(0, g.c // b) as c0, T.serial(0, rs) as rr, \
                    T.serial(blocks * lanes, ws) as xq, T.vectorized(0, b) as ci:
                y, x = y0 * s + rr - pt, (x0 + xq) * s + ph - pl
                builder_store(tb, value(c0, y, x, ci), c0 * b + ci, ph, rr, xq)
        else:
            with T.serial(0, g.c) as c, T.serial(0, rs) as rr, T.vectorized(0, ws) as xq:
                y, x = y0 * s + rr - pt, (x0 + xq) * s + ph - pl
                builder_store(tb, value(c, y, x), c, ph, rr, xq)


def _transposable(block: int, lanes: int) -> bool:
    """Whether channel blocks of ``block`` transpose into pixel vectors of ``lanes``."""
    return bool(block) and block == lanes and lanes >= 2 and not lanes & (lanes - 1)


def _copy_block(spec: PatternConv, data, tb, n, c0, ph, rr, y, x, xq) -> None:
    """``L`` columns of one input row and channel block into ``tb``: column ``i`` is the
    input at ``(y, x + s * i)`` (zero outside the image), channel ``c0 * L + ci`` lands at
    ``tb[c0 * L + ci, ph, rr, xq : xq + L]``."""
    g, s, lanes = spec.geo, spec.geo.stride[0], spec.knobs.lanes
    zero = tirx.Broadcast(f32(0.0), lanes)

    def put(vectors):
        for ci, column in enumerate(transpose(vectors)):
            T.buffer_store(tb, column, [c0 * lanes + ci, ph, rr, _ramp(xq, lanes)])

    inside = tirx.all(y >= 0, y < g.h, x >= 0, x + s * (lanes - 1) < g.w)
    with T.If(inside):
        with T.Then():
            put([_vload(data, n, c0, y, x + s * i, 0, lanes=lanes) for i in range(lanes)])
        with T.Else():
            yc = tirx.max(tirx.min(y, g.h - 1), 0)
            vectors = []
            for i in range(lanes):
                xi = x + s * i
                xc = tirx.max(tirx.min(xi, g.w - 1), 0)
                ok = tirx.all(y >= 0, y < g.h, xi >= 0, xi < g.w)
                vectors.append(tirx.Select(ok, _vload(data, n, c0, yc, xc, 0, lanes=lanes),
                                           zero))
            put(vectors)


def _tile_source(spec: PatternConv, data, pbuf, n, y0, x0):
    """``(src, prefetch)`` of one register tile: with ``tile_copy``, the tile's input is
    copied contiguous per channel (its few rows, in stride phases) and ``prefetch(ic)``
    asks for a channel's lines ahead of their use; without, the taps read the padded
    copy of the whole image. (A copy per tap column ``dx``, to make every pixel vector
    an aligned load, measured slower: 3x the lines per channel.)"""
    k, s = spec.knobs, spec.geo.stride[0]
    if not k.tile_copy:
        def direct(ic, dx, row, col):
            return pbuf[n, ic, dx % s, y0 * s + row, x0 + col + dx // s]
        return direct, None
    _, _, _, rs, ws = spec.tile_shape()
    tb = T.decl_buffer(spec.tile_shape()[1:], "float32")
    _copy_tile(spec, data, tb, n, y0, x0)

    def copied(ic, dx, row, col):
        return tb[ic, dx % s, row, col + dx // s]

    def prefetch(ic):
        for line in range(0, s * rs * ws, 16):
            T.evaluate(tirx.call_llvm_intrin(
                "void", "llvm.prefetch.p0",
                tirx.address_of(tb[ic, line // (rs * ws), line // ws % rs, line % ws]),
                *(tirx.const(v, "int32") for v in (0, 3, 1))))

    return copied, (prefetch if k.prefetch else None)


def _store_tile(spec: PatternConv, out, acc, bias, n, y0, x0, o) -> None:
    """The register tile, with the epilogue, into the output (rows and columns past the
    image dropped)."""
    g, k, ob = spec.geo, spec.knobs, spec.out_block

    def put(r, c):
        value = _epilogue(spec, acc[r, c], None if bias is None else bias[o])
        if ob:
            builder_store(out, value, n, o // ob, y0 + r, x0 + c, o % ob)
        else:
            builder_store(out, value, n, o, y0 + r, x0 + c)

    full = tirx.all(y0 + k.rows <= g.oh, x0 + k.width <= g.ow)
    with T.If(full):
        with T.Then():
            for r in range(k.rows):
                with T.vectorized(0, k.width) as c:
                    put(r, c)
        with T.Else():
            for r in range(k.rows):
                with T.serial(0, k.width) as c, \
                        T.If(tirx.all(y0 + r < g.oh, x0 + c < g.ow)), T.Then():
                    put(r, c)


def _staged_store(spec: PatternConv) -> bool:
    """Whether the tile's results go out through a staging buffer and lane transposes:
    a blocked output whose block is the pixel vector's width (a power of two). Written
    filter by filter, a pixel vector lands one element per 64-byte line of the
    ``NCHW{b}c`` output (L4 of VGG-16 on AVX-512: a fifth of the kernel's time)."""
    return spec.lane_transposes and _transposable(spec.out_block, spec.knobs.lanes)


def _store_staged(spec: PatternConv, out, stage, bias, n, y0, x0) -> None:
    """``stage[o, r, c]`` (the tile's results in output-channel order) into the
    ``NCHW{L}c`` output: for each block of ``L`` channels and each row, ``L`` pixel
    vectors transposed into ``L`` channel vectors, the epilogue applied to whole vectors,
    one full-line store per output pixel (pixels past the image dropped)."""
    g, k = spec.geo, spec.knobs
    lanes = k.lanes
    with T.serial(0, g.o // lanes) as ob, T.serial(0, k.rows) as r:
        bias_vec = None if bias is None else T.Bind(_vload(bias, ob * lanes, lanes=lanes))
        for v in range(k.vectors):
            rows = [_vload(stage, ob * lanes + i, r, v * lanes, lanes=lanes)
                    for i in range(lanes)]
            for j, column in enumerate(transpose(rows)):
                x = x0 + v * lanes + j
                with T.If(tirx.all(y0 + r < g.oh, x < g.ow)), T.Then():
                    T.buffer_store(out, _epilogue(spec, column, bias_vec, lanes),
                                   [n, ob, y0 + r, x, _ramp(0, lanes)])


def _kernel(spec: PatternConv, ins: dict, out):
    g, k = spec.geo, spec.knobs
    rt, ct = spec.row_tiles, spec.col_tiles
    staged = _staged_store(spec)
    with IRBuilder() as ib, T.serial(0, 1):
        pbuf = None
        if not k.tile_copy:
            pbuf = T.decl_buffer(spec.padded_shape(), "float32")
            _fill_padded(spec, ins["data"], pbuf)
        with T.parallel(0, g.n * rt * ct) as tile:
            n = tile // (rt * ct)
            y0 = T.Bind(tile // ct % rt * k.rows)
            x0 = T.Bind(tile % ct * k.width)
            src, prefetch = _tile_source(spec, ins["data"], pbuf, n, y0, x0)
            stage = T.decl_buffer((g.o, k.rows, k.width), "float32") if staged else None
            with T.serial(0, g.o) as f:
                o = T.Bind(_int(ins["reorder"][f])) if "reorder" in ins else f
                acc = stack_tile((k.rows, k.width))  # in registers (not a workspace)
                for r in range(k.rows):
                    with T.vectorized(0, k.width) as c:
                        builder_store(acc, f32(0.0), r, c)
                _tile_body(spec, ins, acc, src, f, prefetch)
                if staged:
                    for r in range(k.rows):
                        with T.vectorized(0, k.width) as c:
                            builder_store(stage, acc[r, c], o, r, c)
                else:
                    _store_tile(spec, out, acc, ins.get("bias"), n, y0, x0, o)
            if staged:
                _store_staged(spec, out, stage, ins.get("bias"), n, y0, x0)
    return ib.get()


def measurement_fkw(signature: list[tuple[str, tuple[int, ...]]]) -> list[np.ndarray] | None:
    """Valid FKW arrays ``[reorder, offset, stride, index]`` for timing a pattern kernel
    (``"pattern"`` mode) known only by its parameters' ``(dtype, shape)``, as
    MetaSchedule's runner knows a kernel: random integers there would index outside the
    weights. The kernels are spread evenly over the filters, over the patterns and over
    the input channels (the density and pattern mix of the layer, not its connectivity).
    None when the signature is not a pattern kernel's."""
    if len(signature) < 7:
        return None
    (ddt, data), (_, reorder), (odt, offset), (_, stride), (idt, index), (wdt, weights) = \
        signature[:6]
    if (ddt, wdt, odt) != ("float32", "float32", "int32") or len(data) not in (4, 5) \
            or len(reorder) != 1 or len(offset) != 1 or len(stride) != 2 \
            or len(index) != 1 or len(weights) != 2 or idt not in ("int16", "int32"):
        return None
    o, nk = reorder[0], index[0]
    npat = stride[1] - 1
    channels = data[1] * (data[4] if len(data) == 5 else 1)
    if offset[0] != o + 1 or stride[0] != o or weights[0] != nk or npat < 1 \
            or nk > o * channels:
        return None
    counts = [nk // o + (i < nk % o) for i in range(o)]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    strides = np.zeros((o, npat + 1), idt)
    chans = []
    for i, count in enumerate(counts):
        picked = [(j * channels // count + i) % channels for j in range(count)] if count else []
        by_pattern = [sorted(picked[p::npat]) for p in range(npat)]
        strides[i, 1:] = np.cumsum([len(group) for group in by_pattern])
        chans += [ch for group in by_pattern for ch in group]
    return [np.arange(o).astype(idt), offsets, strides, np.asarray(chans, idt)]


def pattern_table(spec: PatternConv) -> np.ndarray:
    """``[P, taps]`` flat positions of each pattern (the no-opt mode's table); a
    pattern with fewer taps repeats its last position, with a zero weight."""
    taps = max(len(p) for p in spec.patterns)
    return np.asarray([list(p) + [p[-1]] * (taps - len(p)) for p in spec.patterns], np.int32)


def pattern_conv_func(spec: PatternConv) -> tirx.PrimFunc:
    """The kernel of ``spec`` as a PrimFunc marked ``tirx.is_scheduled`` (schedule rules
    leave it as written). Parameters: the data, then :meth:`PatternConv.weight_shapes`
    (the no-opt mode also takes the pattern table, last), then the output."""
    if spec.mode not in MODES:
        raise CompilationError(f"unknown pattern-conv mode {spec.mode!r}; one of {MODES}")
    if spec.activation not in ACTIVATIONS:
        raise CompilationError(f"unknown epilogue activation {spec.activation!r}; "
                               f"one of {ACTIVATIONS}")
    check_geometry(spec.geo)
    shapes = [("data", spec.data_shape(), "float32"), *spec.weight_shapes()]
    if spec.mode == "kernel":
        shapes.append(("table", pattern_table(spec).shape, "int32"))
    names = [n for n, _, _ in shapes]
    placeholders = [te.placeholder(s, d, name=n) for n, s, d in shapes]

    def build(ins, outs):
        return _kernel(spec, dict(zip(names, ins)), outs[0])

    out = te.extern([spec.out_shape()], placeholders, build, name=kernel_block(spec),
                    dtype=["float32"])
    func = te.create_prim_func([*placeholders, out])
    return (func.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
            .with_attr(SPEC_ATTR, spec_json(spec))
            .with_attr(REALIZE_ATTR, f"{__name__}:realize_knobs"))


#: PrimFunc attribute: the kernel's :class:`PatternConv` as JSON (:func:`spec_json`)
SPEC_ATTR = "cocopie.pattern_conv"


def kernel_block(spec: PatternConv) -> str:
    """The name of the kernel's block (where a schedule writes its knob choice)."""
    return f"conv2d_{spec.mode}_sparse"


def spec_json(spec: PatternConv) -> str:
    """``spec`` as JSON (:func:`spec_from_json` reads it back)."""
    return json.dumps(asdict(spec), sort_keys=True)


def spec_from_json(text: str) -> PatternConv:
    """The :class:`PatternConv` :func:`spec_json` wrote."""
    d = json.loads(text)
    g = d.pop("geo")
    geo = ConvGeometry(**{k: tuple(v) if isinstance(v, list) else v for k, v in g.items()})
    return PatternConv(geo, tuple(tuple(p) for p in d.pop("patterns")),
                       knobs=PatternKnobs(**d.pop("knobs")), clip=tuple(d.pop("clip")), **d)


def spec_of(func: tirx.PrimFunc) -> PatternConv | None:
    """The spec a pattern kernel was generated from (None: not one)."""
    text = func.attrs.get(SPEC_ATTR) if func.attrs is not None else None
    return None if text is None else spec_from_json(str(text))


def with_tile(spec: PatternConv, choice: int) -> PatternConv:
    """``spec`` with the register tile ``TILE_GRID[choice]``."""
    if not 0 <= choice < len(TILE_GRID):
        raise CompilationError(f"pattern-conv tile choice {choice} is not an index of the "
                               f"{len(TILE_GRID)} tiles of TILE_GRID")
    rows, vectors = TILE_GRID[choice]
    return replace(spec, knobs=replace(spec.knobs, rows=rows, vectors=vectors))


def realize_knobs(func: tirx.PrimFunc, choice: int | None) -> tirx.PrimFunc | None:
    """The generator :mod:`tvm_cocopie.kernel_knobs` calls: the pattern kernel ``func``
    generated again, with the register tile ``TILE_GRID[choice]`` a schedule chose (if
    any) and its lane transposes (a model carries the portable form); None when ``func``
    is already that kernel."""
    spec = spec_of(func)
    if spec is None:
        raise CompilationError(f"a kernel without the {SPEC_ATTR} attribute is not a "
                               "pattern-sparse conv: it cannot take a tile choice")
    if choice is None and spec.lane_transposes:
        return None
    final = replace(spec if choice is None else with_tile(spec, choice), lane_transposes=True)
    return pattern_conv_func(final)


def reference(data: np.ndarray, weight: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """Dense NCHW conv in numpy (float64 accumulation): the tests' reference."""
    pt, pl, pb, pr = geo.padding
    s = geo.stride[0]
    x = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    out = np.zeros((geo.n, geo.o, geo.oh, geo.ow))
    w = weight.astype(np.float64)
    for dy in range(3):
        for dx in range(3):
            patch = x[:, :, dy:dy + s * geo.oh:s, dx:dx + s * geo.ow:s]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, dy, dx])
    return out.astype(np.float32)


__all__ = [
    "ACTIVATIONS",
    "CSR",
    "FKW",
    "MODES",
    "SPEC_ATTR",
    "TILE_GRID",
    "PatternConv",
    "PatternKnobs",
    "csr",
    "default_knobs",
    "fkw",
    "index_dtype",
    "kernel_block",
    "measurement_fkw",
    "pattern_conv_func",
    "pattern_table",
    "realize_knobs",
    "reference",
    "spec_from_json",
    "spec_json",
    "spec_of",
    "tile_choices",
    "unsupported",
    "weight_arrays",
    "with_tile",
]


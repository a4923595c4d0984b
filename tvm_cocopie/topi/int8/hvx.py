"""The int8 operators on GCD²'s HVX data layouts, as TE computes (seed 004, §4.3, §4.4).

GCD² picks, per operator, an instruction (``vmpy`` / ``vmpa`` / ``vrmpy``) and with it
a data layout (1-, 2- or 4-column, :mod:`tvm_cocopie.hexagon.kernels.transforms`), and inserts
layout transforms between operators whose layouts differ. This module states what
each of those PrimFuncs computes, in plain TE, on the layouts' buffers:

- :func:`qadd_grid` (residual add) and :func:`maxpool_grid` on the same grids;
- :func:`qconv2d_grid` / :func:`qdepthwise_grid` / :func:`qgroup_conv2d_grid`: the int8
  convolution of :mod:`.compute` on a padded, phase-split input grid
  (:class:`tvm_cocopie.topi.int8.layouts.GridGeometry`) with weights packed as the
  variant's 32-bit ``Rt`` words, writing the variant's output grid;
- :func:`regrid`: an output grid (or NHWC) into the next convolution's input grid in
  the next layout (layout change, re-padding and stride phases in one gather);
  :func:`shift_copy`: its common special case, a masked shifted copy;
  :func:`unpack`: an output grid back to NHWC;
- :func:`channel_move`: channel slices, concatenations and shuffles between grids.

Each PrimFunc carries a descriptor (attribute :data:`HVX_ATTR`, JSON) naming the
operator, the variant and the sizes; the Hexagon schedule rule
(:mod:`tvm_cocopie.schedules.hexagon.int8`) reads it and replaces the compute by the
HVX kernel of that variant (same signature, bit-identical results: tested under
``qemu-hexagon``). On any other target the computes lower as they are.
"""

from __future__ import annotations

import json

from .compute import Requant, requant_at, requant_table, upsample_func
from .layouts import LAYOUT_OF, GridGeometry, TapFold, round_up

#: PrimFunc attribute holding the JSON descriptor of an HVX-layout operator.
HVX_ATTR = "cocopie.hvx"


def describe(func, **desc):
    """``func`` with the descriptor ``desc`` attached (see :func:`descriptor`)."""
    return func.with_attr(HVX_ATTR, json.dumps(desc, sort_keys=True))


def descriptor(func) -> dict | None:
    """The descriptor of an HVX-layout PrimFunc, or ``None`` for any other function."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or HVX_ATTR not in attrs:
        return None
    return json.loads(str(attrs[HVX_ATTR]))


def geometry_of(desc: dict):
    """The :class:`~tvm_cocopie.topi.int8.layouts.GridGeometry` stored in a descriptor."""

    return GridGeometry(*desc["geo"])


def _geo_list(geo) -> list:
    return [geo.h, geo.w, geo.kernel, geo.stride, geo.pad, geo.min_grid_w]


def _signed_byte(word, byte):
    """Byte ``byte`` of an int32 word as a signed int32 (no shifts past the sign bit)."""
    from tvm import tirx

    v = (word >> (byte * 8)) & tirx.const(255, "int32")
    return tirx.if_then_else(v >= 128, v - 256, v)


#: Byte of ``Rt`` holding reduction column ``4g + q`` (see ``layouts.pack_weights``).
_VMPA_BYTE = (0, 2, 1, 3)


def _weight(variant: str, w, tap, ci, co):
    """The int8 weight of input channel ``ci`` and output column ``co`` at ``tap``."""
    if variant == "vmpy":
        return _signed_byte(w[tap, ci, co], 0)
    q = ci % 4
    byte = q if variant == "vrmpy" else (q % 2) * 2 + q // 2
    return _signed_byte(w[tap, ci // 4, co], byte)


def _input(x, geo, v, tap, row, ch):
    phase, shift = geo.tap(tap // geo.kernel, tap % geo.kernel)
    return x[phase, ch // v, row + shift, ch % v]


def qconv2d_grid(variant: str, geo, channels: int, out_channels: int, rq: Requant):
    """PrimFunc ``(x, w, bias, y)`` of a dense int8 conv in ``variant``'s layout.

    Shapes are those of :func:`tvm_cocopie.hexagon.kernels.conv2d.conv2d`: ``x`` the phase grids
    ``(S*S, G, rows, v)``, ``w`` the packed words ``(K*K, words, O')``, ``bias``
    ``(O',)``, ``y`` the output grid ``(G', rows', v)``. Every grid row is computed
    (columns past the image are junk, as in the kernel). A per-channel ``rq`` adds
    ``rq`` after ``bias`` (:func:`~.compute.requant_table` over ``O'``; the descriptor
    holds the vectors too), in every variant.
    """
    from tvm import te


    layout = LAYOUT_OF[variant]
    v = layout.cols
    kp = round_up(channels, layout.col_multiple)
    np_ = round_up(out_channels, layout.col_multiple)
    taps = geo.kernel * geo.kernel
    y_shape = geo.out_shape(variant, out_channels)
    x = te.placeholder(geo.in_shape(variant, channels), "uint8", name="x")
    bias = te.placeholder((np_,), "int32", name="bias")
    if fold := TapFold.of(variant, geo.kernel, channels):
        w, acc = _folded_conv(fold, x, geo, np_, y_shape)
    else:
        w = te.placeholder((taps, kp if variant == "vmpy" else kp // 4, np_), "int32", name="w")
        t = te.reduce_axis((0, taps), "tap")
        c = te.reduce_axis((0, kp), "rc")
        acc = te.compute(
            y_shape,
            lambda g, r, j: te.sum(
                _input(x, geo, v, t, r, c).astype("int32") * _weight(variant, w, t, c, g * v + j),
                axis=[t, c],
            ),
            name="acc",
        )
    table = requant_table(rq, np_)
    y = te.compute(y_shape, lambda g, r, j: requant_at(rq, table, acc[g, r, j] + bias[g * v + j],
                                                       g * v + j), name="y")
    return describe(
        te.create_prim_func([x, w, bias, *([table] if table is not None else []), y]),
        op="conv", variant=variant, geo=_geo_list(geo), c=channels, o=out_channels,
        rq=[rq.multiplier, rq.shift, rq.zero_point],
    )


def _folded_conv(fold: TapFold, x, geo, np_: int, y_shape):
    """``(w, accumulators)`` of a ``vrmpy`` conv with its taps folded
    (:class:`.layouts.TapFold`): ``w`` is ``(1, groups, O')``, reduction entry ``kappa`` reads channel ``kappa % C`` of
    tap ``kappa // C`` (entries past ``k*k*C`` have zero weights; their tap is clamped)."""
    from tvm import te, tirx

    w = te.placeholder((1, fold.groups, np_), "int32", name="w")
    e = te.reduce_axis((0, 4 * fold.groups), "entry")

    def read(r, kappa):
        tap = tirx.min(kappa // fold.channels, fold.taps - 1)
        return _input(x, geo, 4, tap, r, kappa % fold.channels)

    return w, te.compute(
        y_shape,
        lambda g, r, j: te.sum(
            read(r, e).astype("int32") * _weight("vrmpy", w, 0, e, g * 4 + j), axis=[e]),
        name="acc",
    )


class GroupWindow:
    """Which input channel groups each output vector of a grouped conv reads, in the
    4-column (``vrmpy``) layout.

    A grouped conv of ``channels`` inputs, ``out_channels`` outputs and ``groups``
    groups is a dense conv whose weights are block diagonal. Output vector ``ov``
    (output channels ``4 ov .. 4 ov + 3``) needs only the input groups of 4 channels
    that hold its conv groups' inputs: ``span`` consecutive ones from :meth:`base`.
    With whole groups of 4 channels (ResNeXt's 32 x 4, 8 x 16, ...) every product is
    useful; narrower or unaligned groups read some zero weights (2 channels per group:
    half). The same window serves the compute (:func:`qgroup_conv2d_grid`), the weight
    packing and the HVX kernel (:mod:`tvm_cocopie.hexagon.kernels.grouped`).
    """

    def __init__(self, channels: int, out_channels: int, groups: int):
        if channels % groups or out_channels % groups:
            raise ValueError(f"{groups} groups do not divide {channels} -> {out_channels} "
                             "channels")
        self.channels, self.out_channels, self.groups = channels, out_channels, groups
        self.cg, self.og = channels // groups, out_channels // groups
        self.in_groups = round_up(channels, 4) // 4
        self.out_groups = round_up(out_channels, 4) // 4
        self.span = max(hi - lo for lo, hi in map(self._range, range(self.out_groups)))

    def _range(self, ov: int) -> tuple:
        """``[lo, hi)``: the input groups output vector ``ov``'s real channels read."""
        first = min(4 * ov, self.out_channels - 1) // self.og
        last = min(4 * ov + 3, self.out_channels - 1) // self.og
        return first * self.cg // 4, -(-(last + 1) * self.cg // 4)

    def base(self, ov):
        """First input group of output vector ``ov`` (an int, or a TIR expression of a
        loop variable): its real range's start, moved back so that ``span`` groups stay
        inside the input."""
        lo = (4 * ov // self.og) * self.cg // 4
        top = self.in_groups - self.span
        if isinstance(ov, int):
            return min(lo, top)
        from tvm import tirx

        return tirx.min(lo, top)

    def weight_shape(self, taps: int) -> tuple:
        """Shape of the packed weights: ``(taps, out_groups, span, 4)`` int32 words."""
        return (taps, self.out_groups, self.span, 4)


def _pick(t, values: list):
    """``values[t]`` for a TIR index ``t`` over a short list of ints."""
    from tvm import tirx

    out = tirx.const(values[-1], "int32")
    for i in range(len(values) - 2, -1, -1):
        out = tirx.if_then_else(t == i, tirx.const(values[i], "int32"), out)
    return out


def qgroup_conv2d_grid(geo, channels: int, out_channels: int, groups: int, rq: Requant,
                       taps: list | None = None):
    """PrimFunc ``(x, w, bias, y)`` of a grouped int8 conv on 4-column grids.

    ``x``, ``bias``, ``y`` as :func:`qconv2d_grid`'s in ``vrmpy``; ``w``: words
    ``(T, O/4, span, 4)`` of :class:`GroupWindow` (word ``[t, ov, k, j]`` holds the
    weights of tap ``taps[t]`` and input channels ``4 (base(ov) + k) .. + 3`` for output
    channel ``4 ov + j``, zero across groups:
    :func:`tvm_cocopie.hexagon.kernels.grouped.pack_grouped_weights`). ``taps``: the
    ``(dy, dx)`` computed, all by default (the executor leaves out taps that read only
    padding, :meth:`~.layouts.GridGeometry.live_taps`, their constant in the bias).
    A per-channel ``rq`` adds ``rq`` after ``bias`` (over ``O'``).
    """
    from tvm import te

    win = GroupWindow(channels, out_channels, groups)
    tap_list = [tuple(t) for t in taps] if taps else [
        (dy, dx) for dy in range(geo.kernel) for dx in range(geo.kernel)]
    phases, shifts = zip(*(geo.tap(dy, dx) for dy, dx in tap_list))
    taps = len(tap_list)
    y_shape = geo.out_shape("vrmpy", out_channels)
    x = te.placeholder(geo.in_shape("vrmpy", channels), "uint8", name="x")
    w = te.placeholder(win.weight_shape(taps), "int32", name="w")
    np_ = win.out_groups * 4
    bias = te.placeholder((np_,), "int32", name="bias")
    t = te.reduce_axis((0, taps), "tap")
    k = te.reduce_axis((0, win.span * 4), "rc")

    def body(g, r, j):
        phase, shift = _pick(t, list(phases)), _pick(t, list(shifts))
        value = x[phase, win.base(g) + k // 4, r + shift, k % 4].astype("int32")
        return te.sum(value * _signed_byte(w[t, g, k // 4, j], k % 4), axis=[t, k])

    acc = te.compute(y_shape, body, name="acc")
    table = requant_table(rq, np_)
    y = te.compute(y_shape, lambda g, r, j: requant_at(rq, table, acc[g, r, j] + bias[g * 4 + j],
                                                       g * 4 + j), name="y")
    return describe(
        te.create_prim_func([x, w, bias, *([table] if table is not None else []), y]),
        op="gconv", variant="vrmpy", geo=_geo_list(geo), c=channels, o=out_channels,
        groups=groups, taps=[list(t) for t in tap_list],
        rq=[rq.multiplier, rq.shift, rq.zero_point],
    )


def dense_shapes(k: int, n: int) -> tuple:
    """``(weights, bias)`` shapes of :func:`qdense_grid`: ``ceil(n/32)`` blocks of 32
    outputs, ``ceil(k/4)`` groups of 4 inputs, 128 bytes each (byte ``4i + j``: input
    ``4q + j`` of output ``32b + i``)."""
    nb, kq = -(-n // 32), -(-k // 4)
    return (nb, kq, 128), (nb * 32,)


def qdense_grid(variant: str, src, out_channels: int, rq: Requant):
    """PrimFunc ``(x, w, bias, y)``: a fully connected layer of the 1x1 map ``src`` (its
    grid, any layout) into a 1x1 map's output grid in ``variant``'s layout (row 0 holds
    the outputs, the other rows zero). Weights as :func:`dense_shapes` (int8); a
    per-channel ``rq`` adds ``rq`` after ``bias`` (over the bias' length)."""
    from tvm import te, tirx

    lay = LAYOUT_OF[variant]
    v = lay.cols
    k_dim = src.c
    w_shape, b_shape = dense_shapes(k_dim, out_channels)
    y_shape = GridGeometry(1, 1, 1).out_shape(variant, out_channels)
    vi = LAYOUT_OF[src.variant].cols
    x = te.placeholder(src.shape, "uint8", name="x")
    w = te.placeholder(w_shape, "int8", name="w")
    bias = te.placeholder(b_shape, "int32", name="bias")
    k = te.reduce_axis((0, k_dim), "k")
    acc = te.compute(
        (b_shape[0],),
        lambda n: te.sum(x[k // vi, 0, k % vi].astype("int32")
                         * w[n // 32, k // 4, (n % 32) * 4 + k % 4].astype("int32"), axis=k),
        name="acc",
    )

    table = requant_table(rq, b_shape[0])

    def body(g, r, j):
        n = g * v + j
        safe = tirx.min(n, b_shape[0] - 1)
        value = requant_at(rq, table, acc[safe] + bias[safe], safe)
        return tirx.if_then_else(tirx.all(r == 0, n < out_channels), value,
                                 tirx.const(0, "uint8"))

    y = te.compute(y_shape, body, name="y")
    return describe(
        te.create_prim_func([x, w, bias, *([table] if table is not None else []), y]),
        op="dense", variant=variant, k=k_dim,
        o=out_channels, src=[src.variant, list(src.shape)],
        rq=[rq.multiplier, rq.shift, rq.zero_point],
    )


def qdepthwise_grid(variant: str, geo, channels: int, rq: Requant):
    """PrimFunc ``(x, w, bias, y)`` of a depthwise int8 conv in ``variant``'s layout.

    ``w``: ``(K*K, G)`` words whose byte ``j`` is the weight of channel ``g*v + j % v``
    (:func:`tvm_cocopie.hexagon.kernels.depthwise.pack_dw_weights`); a per-channel
    ``rq`` adds ``rq`` after ``bias`` (over ``G * v``).
    """
    from tvm import te


    v = LAYOUT_OF[variant].cols
    x_shape = geo.in_shape(variant, channels)
    groups = x_shape[1]
    taps = geo.kernel * geo.kernel
    y_shape = geo.out_shape(variant, channels)
    x = te.placeholder(x_shape, "uint8", name="x")
    w = te.placeholder((taps, groups), "int32", name="w")
    bias = te.placeholder((groups * v,), "int32", name="bias")
    t = te.reduce_axis((0, taps), "tap")
    acc = te.compute(
        y_shape,
        lambda g, r, j: te.sum(
            _input(x, geo, v, t, r, g * v + j).astype("int32") * _signed_byte(w[t, g], j),
            axis=[t],
        ),
        name="acc",
    )
    table = requant_table(rq, groups * v)
    y = te.compute(y_shape, lambda g, r, j: requant_at(rq, table, acc[g, r, j] + bias[g * v + j],
                                                       g * v + j), name="y")
    return describe(
        te.create_prim_func([x, w, bias, *([table] if table is not None else []), y]),
        op="dwconv", variant=variant, geo=_geo_list(geo), c=channels,
        rq=[rq.multiplier, rq.shift, rq.zero_point],
    )


def qadd_grid(variant: str, shape: tuple, b_shape: tuple, arq, broadcast: bool = False):
    """PrimFunc ``(a, b, y)``: :class:`~.compute.AddRequant` of two output grids of
    one ``shape`` ``(G, rows, v)`` in ``variant``'s layout (a residual add); with
    ``broadcast``, ``b`` is a 1x1 map's grid (a bias vector) added to every row."""
    from tvm import te

    a = te.placeholder(shape, "uint8", name="a")
    b = te.placeholder(b_shape, "uint8", name="b")
    y = te.compute(shape, lambda g, r, j: arq.te(a[g, r, j], b[g, 0, j] if broadcast
                                                 else b[g, r, j]), name="y")
    return describe(
        te.create_prim_func([a, b, y]), op="add", variant=variant, broadcast=broadcast,
        rq=[arq.ma, arq.mb, arq.shift, arq.offset],
    )


def qmul_grid(variant: str, shape: tuple, b_shape: tuple, mrq, broadcast: bool = False):
    """PrimFunc ``(a, b, y)``: :class:`~.compute.MulRequant` of two grids in ``variant``'s
    layout; with ``broadcast``, ``b`` is a 1x1 map's grid whose row 0 multiplies every row."""
    from tvm import te

    a = te.placeholder(shape, "uint8", name="a")
    b = te.placeholder(b_shape, "uint8", name="b")
    y = te.compute(shape,
                   lambda g, r, j: mrq.te(a[g, r, j], b[g, 0, j] if broadcast else b[g, r, j]),
                   name="y")
    return describe(te.create_prim_func([a, b, y]), op="mul", variant=variant,
                    broadcast=broadcast,
                    rq=[mrq.za, mrq.zb, mrq.rq.multiplier, mrq.rq.shift, mrq.rq.zero_point])


def qattention_grid(kind: str, heads: int, s: int, a_shape: tuple, b_shape: tuple, za: int,
                    zb: int, rq: Requant):
    """PrimFunc ``(a, b, y)``: an attention product on 4-column grids of sequences of ``s``
    valid rows (``qk``: ``Q [s, D]`` by ``K [s, D]`` per head -> ``[s, H*s]``; ``pv``:
    ``P [s, H*s]`` by ``V [s, D]`` per head -> ``[s, D]``): ``rq(sum (a - za)(b - zb))``;
    every row of ``a``'s grid is computed (rows past ``s`` are junk, as in the kernel)."""
    from tvm import te

    d = b_shape[0] * 4
    dh = d // heads
    n_red, out_c = (dh, heads * s) if kind == "qk" else (s, d)
    rows = a_shape[1]
    a = te.placeholder(a_shape, "uint8", name="a")
    b = te.placeholder(b_shape, "uint8", name="b")
    r = te.reduce_axis((0, n_red), "r")

    def acc(g, row, j):
        c = g * 4 + j
        if kind == "qk":
            h, t = c // s, c % s
            ch = h * dh + r
            return te.sum((a[ch // 4, row, ch % 4].astype("int32") - za)
                          * (b[ch // 4, t, ch % 4].astype("int32") - zb), axis=r)
        h = c // dh
        ch = h * s + r
        return te.sum((a[ch // 4, row, ch % 4].astype("int32") - za)
                      * (b[c // 4, r, c % 4].astype("int32") - zb), axis=r)

    y_shape = (out_c // 4, rows, 4)
    accum = te.compute(y_shape, acc, name="acc")
    y = te.compute(y_shape, lambda *i: rq.te(accum[i]), name="y")
    return describe(te.create_prim_func([a, b, y]), op="attention", kind=kind, heads=heads, s=s,
                    z=[za, zb], rq=[rq.multiplier, rq.shift, rq.zero_point])


def lut_grid(variant: str, shape: tuple):
    """PrimFunc ``(x, table, y)``: a 256-entry lookup ``y = table[x]`` on a grid (an
    activation of any shape quantized in and out: hard-sigmoid, sigmoid, ...); the table
    packed as HVX's ``vlut32`` reads it: entry ``e`` at ``table[e // 32, 2 * (e % 32)]``
    (:func:`tvm_cocopie.hexagon.kernels.elementwise.pack_lut`)."""
    from tvm import te

    x = te.placeholder(shape, "uint8", name="x")
    t = te.placeholder((8, 128), "uint8", name="table")
    y = te.compute(shape, lambda *i: t[x[i] // 32, (x[i] % 32) * 2], name="y")
    return describe(te.create_prim_func([x, t, y]), op="lut", variant=variant)


def maxpool_grid(variant: str, geo, channels: int):
    """PrimFunc ``(x, y)``: ``K x K`` max pool on ``geo``'s phase grids (zero padding,
    exact for the non-negative activations after ReLU), output grid as a conv's."""
    from tvm import te, tirx


    v = LAYOUT_OF[variant].cols
    x = te.placeholder(geo.in_shape(variant, channels), "uint8", name="x")

    def body(g, r, j):
        taps = [_input(x, geo, v, t, r, g * v + j) for t in range(geo.kernel * geo.kernel)]
        out = taps[0]
        for t in taps[1:]:
            out = tirx.max(out, t)
        return out

    y = te.compute(geo.out_shape(variant, channels), body, name="y")
    return describe(
        te.create_prim_func([x, y]), op="maxpool", variant=variant, geo=_geo_list(geo), c=channels
    )


def channel_sources(kind: str, in_channels: list, out_channels: int, params: dict) -> list:
    """``(input, channel)`` each output channel of a channel move copies: a ``slice``
    (``params["offset"]``), a ``concat`` of the inputs in order, or ShuffleNet's
    ``shuffle`` (``params["groups"]``: output ``j g + i`` is input ``i C/g + j``)."""
    if kind == "slice":
        return [(0, params["offset"] + c) for c in range(out_channels)]
    if kind == "shuffle":
        g = params["groups"]
        per = out_channels // g
        return [(0, (c % g) * per + c // g) for c in range(out_channels)]
    if kind == "concat":
        return [(k, c) for k, n in enumerate(in_channels) for c in range(n)]
    raise ValueError(f"unknown channel move {kind!r}; one of slice, concat, shuffle")


def channel_move(kind: str, variant: str, src_shapes: list, in_channels: list,
                 out_channels: int, params: dict | None = None):
    """PrimFunc ``(x_0, .., x_{n-1}, y)``: channels moved between output grids of one
    geometry in ``variant``'s layout (:func:`channel_sources`: a channel slice, concat or
    shuffle); every grid row is moved, padded output channels are 0. A concat's
    requantization tables are applied before (:func:`lut_grid`)."""
    from tvm import te, tirx

    params = dict(params or {})
    lay = LAYOUT_OF[variant]
    v = lay.cols
    rows = src_shapes[0][1]
    xs = [te.placeholder(tuple(s), "uint8", name=f"x{k}") for k, s in enumerate(src_shapes)]
    y_shape = (round_up(out_channels, lay.col_multiple) // v, rows, v)
    zero = tirx.const(0, "uint8")

    def read(k, ch, r):
        ch = tirx.max(tirx.min(ch, in_channels[k] - 1), 0)
        return xs[k][ch // v, r, ch % v]

    def body(g, r, j):
        c = g * v + j
        if kind == "slice":
            value = read(0, c + params["offset"], r)
        elif kind == "shuffle":
            per = out_channels // params["groups"]
            value = read(0, (c % params["groups"]) * per + c // params["groups"], r)
        else:
            value, start = None, out_channels
            for k in range(len(xs) - 1, -1, -1):  # the last input first: its range is last
                start -= in_channels[k]
                here = read(k, c - start, r)
                value = here if value is None else tirx.if_then_else(c >= start + in_channels[k],
                                                                     value, here)
        return tirx.if_then_else(c < out_channels, value, zero)

    channel_sources(kind, in_channels, out_channels, params)  # checks the kind
    y = te.compute(y_shape, body, name="y")
    return describe(te.create_prim_func([*xs, y]), op="channels", kind=kind, variant=variant,
                    src=[list(s) for s in src_shapes], c=list(in_channels), o=out_channels,
                    params=params)


# ---------------------------------------------------------------- layout transforms


def regrid(src, geo, variant: str, pad_value: int = 0):
    """PrimFunc ``(x, y)``: tensor ``src`` into the padded, phase-split input grid of a
    ``geo`` convolution in ``variant``'s layout, the padding (``pad_value``: the input's
    zero point, the real zero of an asymmetric uint8 tensor) written explicitly.

    ``src`` describes the source (``shape``, valid ``h``/``w``/``c``, and
    ``read(x, i, j, ch)``; :class:`tvm_cocopie.hexagon.executor.program.Tensor`).
    """
    from tvm import te, tirx


    lay = LAYOUT_OF[variant]
    shape = geo.in_shape(variant, src.c)
    x = te.placeholder(src.shape, "uint8", name="x")
    s, p, gw = geo.stride, geo.pad, geo.grid_w

    def body(ph, g, r, j):
        gi, gj = r // gw, r % gw
        i = gi * s + ph // s - p
        jj = gj * s + ph % s - p
        ch = g * lay.cols + j
        ok = tirx.all(i >= 0, i < src.h, jj >= 0, jj < src.w, ch < src.c, gi < geo.grid_h)
        value = src.read(
            x,
            tirx.max(tirx.min(i, src.h - 1), 0),
            tirx.max(tirx.min(jj, src.w - 1), 0),
            tirx.min(ch, src.c - 1),
        )
        return tirx.if_then_else(ok, value, tirx.const(pad_value, "uint8"))

    y = te.compute(shape, body, name="y")
    extra = {"pad_value": pad_value} if pad_value else {}
    return describe(
        te.create_prim_func([x, y]), op="regrid", variant=variant, geo=_geo_list(geo),
        src=[src.variant, list(src.shape), src.h, src.w, src.c, src.wq], **extra,
    )


def shift_copy(v: int, groups: int, src_bytes: int, dst_bytes: int, shift: int):
    """PrimFunc ``(x, mask, y)`` on flat grids: ``y[g, d] = x[g, d - shift] & mask[d]``
    (zero where ``d - shift`` falls outside the source); ``src_bytes``/``dst_bytes``
    are the bytes of one channel group of the source and destination grids."""
    from tvm import te, tirx

    x = te.placeholder((groups * src_bytes,), "uint8", name="x")
    m = te.placeholder((dst_bytes,), "uint8", name="m")

    def body(i):
        g, d = i // dst_bytes, i % dst_bytes
        idx = d - shift
        ok = tirx.all(idx >= 0, idx < src_bytes)
        safe = tirx.max(tirx.min(idx, src_bytes - 1), 0)
        return tirx.if_then_else(ok, x[g * src_bytes + safe] & m[d], tirx.const(0, "uint8"))

    y = te.compute((groups * dst_bytes,), body, name="y")
    return describe(
        te.create_prim_func([x, m, y]),
        op="shift_copy", v=v, groups=groups, src=src_bytes, dst=dst_bytes, shift=shift,
    )


def unpack(src):
    """PrimFunc ``(x, y)``: an output grid (``src`` as in :func:`regrid`) to NHWC."""
    from tvm import te

    x = te.placeholder(src.shape, "uint8", name="x")
    y = te.compute((1, src.h, src.w, src.c), lambda n, i, j, ch: src.read(x, i, j, ch), name="y")
    return describe(te.create_prim_func([x, y]), op="unpack",
                    src=[src.variant, list(src.shape), src.h, src.w, src.c, src.wq])


def upsample_described(shape: tuple, factor: int):
    """:func:`.compute.upsample_func` (nearest, NHWC) with a descriptor: on Hexagon the
    schedule rule gives it the HVX kernel where the sizes allow
    (:mod:`tvm_cocopie.hexagon.kernels.resize`), else TVM lowers the compute."""
    return describe(upsample_func(shape, factor), op="upsample", factor=factor)

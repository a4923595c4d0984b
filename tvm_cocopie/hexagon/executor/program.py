"""Compiling an int8 network: a plan per layer, its kernels and regrids, one program (seed 004, §4.4.4)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ...errors import CocopieError
from ...topi.int8 import hvx as int8_hvx
from ...topi.int8.layouts import LAYOUT_OF, GridGeometry
from ..kernels.conv2d import pack_conv_weights
from ..kernels.depthwise import pack_dw_weights
from ..kernels.dispatch import hvx_kernel
from ..kernels.elementwise import pack_dense_weights, pack_lut
from ..kernels.grouped import pack_grouped_weights
from ..kernels.matmul import vmpa_exact
from ..kernels.transforms import pad_bias
from ..selection.networks import Layer, selection_graph
from ..selection.search import global_select, local_select
from . import memplan
from .memplan import plan_memory
from .nhwc import nhwc_layer
from .quantization import QLayer, QNetwork, layer_sources

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ quantization


# ------------------------------------------------------------------ tensors on device


@dataclass(frozen=True)
class Tensor:
    """An activation on the device: NHWC, or an output grid ``(G, rows, v)`` of width
    ``wq`` whose first ``w`` columns of each of ``h`` grid rows are valid."""

    name: str
    h: int
    w: int
    c: int
    variant: str | None = None  # None: NHWC
    wq: int = 0
    shape: tuple = ()

    def to_nhwc(self, buf: np.ndarray) -> np.ndarray:
        """This tensor's valid ``[1, h, w, c]`` from its buffer's bytes (host side)."""
        if self.variant is None:
            return buf.reshape(1, self.h, self.w, self.c)
        v = LAYOUT_OF[self.variant].cols
        g = buf.reshape(self.shape)
        rows = g[:, : self.h * self.wq].reshape(g.shape[0], self.h, self.wq, v)[:, :, : self.w]
        return rows.transpose(1, 2, 0, 3).reshape(1, self.h, self.w, -1)[..., : self.c]

    def read(self, x, i, j, ch):
        """Element ``(i, j, ch)`` of this tensor's buffer ``x`` (NHWC or its grid layout), as a TIR
        expression."""
        if self.variant is None:
            return x[0, i, j, ch]
        v = LAYOUT_OF[self.variant].cols
        return x[ch // v, i * self.wq + j, ch % v]


def shift_copy_pays(src: Tensor, geo: GridGeometry, variant: str) -> bool:
    """Whether :func:`..kernels.shift_copy.shift_copy_kernel` beats the row copy of :mod:`..kernels.regrid`.

    Measured per channel group: the shift copy costs ~3 packets per inner vector and
    ~400 per edge vector (done byte by byte), the row copy ~5 per valid pixel plus one
    per zeroed vector. On small grids (MobileNetV2's late 1x1 to 8x8 stages) nearly
    every vector is an edge and the row copy wins; from ~16x16 up, the shift copy."""
    v = LAYOUT_OF[variant].cols
    dst_bytes = geo.in_shape(variant, src.c)[2] * v
    sh = (geo.pad * geo.grid_w + geo.pad) * v
    n_vec = dst_bytes // 128
    t_lo = -(-sh // 128)
    t_hi = min(n_vec - 1, (src.shape[1] * v + sh - 128) // 128)
    inner = max(0, t_hi - t_lo + 1)
    shift_cost = 3 * inner + 400 * (n_vec - inner)
    copy_cost = n_vec + 5 * src.h * src.w
    return shift_cost <= copy_cost


def shift_copy_compute(src: Tensor, geo: GridGeometry, variant: str):
    """:func:`tvm_cocopie.topi.int8.hvx.shift_copy` from ``src``'s grid into a ``geo``
    convolution's input grid in ``variant``'s layout (see :func:`..kernels.shift_copy.shift_copy_kernel`)."""

    v = LAYOUT_OF[variant].cols
    dst_shape = geo.in_shape(variant, src.c)
    sh = (geo.pad * geo.grid_w + geo.pad) * v
    return int8_hvx.shift_copy(v, dst_shape[1], src.shape[1] * v, dst_shape[2] * v, sh)


def shift_mask(geo: GridGeometry, variant: str, h: int, w: int) -> np.ndarray:
    """0xFF where the consumer's grid holds a pixel, 0 on its padding (flat bytes)."""
    v = LAYOUT_OF[variant].cols
    rows = geo.in_rows(variant)
    r = np.arange(rows)
    gi, gj = r // geo.grid_w, r % geo.grid_w
    ok = (gi >= geo.pad) & (gi < geo.pad + h) & (gj >= geo.pad) & (gj < geo.pad + w)
    return np.repeat(np.where(ok, 255, 0).astype(np.uint8), v)


def _passes_grid(lay: Layer) -> bool:
    """Layers whose input grid is their producer's output grid, unshifted."""
    return lay.op == "add" or _reads_grid_as_is(lay)


def _reads_grid_as_is(lay: Layer) -> bool:
    """A 1x1 stride-1 conv (dense or grouped): it reads its producer's grid unchanged."""
    return lay.op in ("conv", "gconv") and lay.k == 1 and lay.s == 1 and lay.p == 0


def grid_widths(layers, plan) -> list:
    """Output grid width each layer should use so that stride-1 consumers in the same
    layout can take its output by :func:`..kernels.shift_copy.shift_copy_kernel` (0: no preference)."""
    index = {lay.name: i for i, lay in enumerate(layers)}
    want = [0] * len(layers)
    for j in range(len(layers) - 1, 0, -1):
        nxt = layers[j]
        for src in layer_sources(nxt, layers[j - 1].name):
            i = index.get(src)
            if i is None or plan[nxt.name] != plan[layers[i].name] or nxt.s != 1:
                continue
            if _passes_grid(nxt):
                want[i] = max(want[i], want[j])
            else:
                want[i] = max(want[i], nxt.w + 2 * nxt.p, want[j])
    return want


# ------------------------------------------------------------------ compilation


@dataclass
class Program:
    """Kernels, calls, buffers and the memory plan of a compiled network."""

    funcs: dict
    calls: list
    inputs: dict  # name -> array
    output: str
    out_tensor: Tensor
    plan: dict  # layer name -> variant
    memory: memplan.MemoryPlan = None
    roles: list = field(default_factory=list)  # per call: (layer name, "kernel"|"regrid"|...)
    #: buffer name -> the buffer whose memory it views (a reshape, no copy)
    aliases: dict = field(default_factory=dict)
    #: layer name -> its output :class:`Tensor` on the device
    tensors: dict = field(default_factory=dict)


#: Packets per byte of a regrid across layouts (a gather; measured under qemu-hexagon: a
#: 14x14x256 map into a 5x5 depthwise conv's 2-column grid, 878k packets for 83k bytes).
REGRID_GATHER_PACKETS_PER_BYTE = 10.0


def choose_plans(net: QNetwork, model=None, local: bool = False) -> dict:
    """GCD²'s global selection over the network (cost model, nothing run; layers
    requantized per channel priced so); ``local``: each layer's cheapest plan alone,
    transforms ignored."""

    first = net.layers[0].layer
    h, w, c = net.input_shape or (first.h, first.w, first.c)
    layers = [Layer("input", "input", (), h, w, c, c)]
    layers += [Layer(name, "const", (), v.shape[1], v.shape[2], v.shape[3], v.shape[3])
               for name, v in net.constants.items()]  # constants: sources, layout-free
    prev = "input"
    exact, per_channel = {}, set()
    for q in net.layers:
        lay = q.layer
        layers.append(
            Layer(lay.name, lay.op, layer_sources(lay, prev), lay.h, lay.w, lay.c, lay.o,
                  lay.k, lay.s, lay.p, q.params.get("groups", lay.groups))
        )
        exact[lay.name] = lay.op == "conv" and _vmpa_ok(q.weights)
        if getattr(q.rq, "per_channel", False):
            per_channel.add(lay.name)
        prev = lay.name
    graph = selection_graph(layers, model, vmpa_ok=lambda lay: exact.get(lay.name, False),
                            gather_packets_per_byte=REGRID_GATHER_PACKETS_PER_BYTE,
                            per_channel=lambda lay: lay.name in per_channel)
    sel = local_select(graph) if local else global_select(graph)
    return {k: v for k, v in sel.plan.items() if k != "input" and k not in net.constants}


def _vmpa_ok(w: np.ndarray) -> bool:
    return all(vmpa_exact(w[dy, dx]) for dy in range(w.shape[0]) for dx in range(w.shape[1]))


@dataclass
class _Emit:
    """What :func:`compile_network` accumulates: kernels, calls, constants, views."""

    funcs: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    roles: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)
    aliases: dict = field(default_factory=dict)

    def call(self, name, func, args, role):
        self.funcs[name] = func
        self.calls.append((name, args))
        self.roles.append(role)


def _input_grid(em: _Emit, idx: int, lay: Layer, cur: Tensor, variant: str, width: int,
                pad_value: int = 0):
    """``(geometry, buffer name, direct)``: ``cur`` made the input grid of ``lay``, its
    padding filled with ``pad_value``."""

    x_name = f"in{idx}"
    if _reads_grid_as_is(lay) and cur.variant == variant:
        em.aliases[x_name] = cur.name  # a 1x1 reads its producer's grid as it is
        return GridGeometry(cur.h, cur.wq, 1), x_name, True
    g0 = lay.geometry
    if lay.s == 1 and cur.variant == variant:
        width = max(width, cur.wq)  # take the producer's grid as it is
    geo = GridGeometry(g0.h, g0.w, g0.kernel, g0.stride, g0.pad, width)
    if (lay.s == 1 and cur.variant == variant and cur.wq == geo.grid_w and not pad_value
            and shift_copy_pays(cur, geo, variant)):
        em.inputs[f"mask{idx}"] = shift_mask(geo, variant, cur.h, cur.w)
        em.aliases[f"{cur.name}_flat"] = cur.name
        em.aliases[f"{x_name}_flat"] = x_name
        em.call(f"regrid{idx}", shift_copy_compute(cur, geo, variant),
                [f"{cur.name}_flat", f"mask{idx}", f"{x_name}_flat"], (lay.name, "regrid"))
    else:
        em.call(f"regrid{idx}", int8_hvx.regrid(cur, geo, variant, pad_value), [cur.name, x_name],
                (lay.name, "regrid"))
    return geo, x_name, False


def _on_grid(em: _Emit, idx: int, lay: Layer, t: Tensor, variant: str, geo, k: int) -> str:
    """Buffer name of ``t`` on the output grid ``geo`` in ``variant`` (regridded if not)."""
    shape = geo.out_shape(variant, t.c)
    if t.variant == variant and t.wq == geo.grid_w and tuple(t.shape) == shape:
        return t.name
    grid = f"ew{idx}_{k}"
    em.aliases[grid] = f"{grid}_grid"
    em.call(f"regrid{idx}_{k}", int8_hvx.regrid(t, geo, variant), [t.name, f"{grid}_grid"],
            (lay.name, "regrid"))
    return grid


def _elementwise(em: _Emit, idx: int, q: QLayer, variant: str, ins: list) -> Tensor:
    """A residual add, a product or a lookup: the inputs brought to one grid
    (``variant``, the width of an input already in it), regridded only where they are
    not; a product's 1x1 operand (a squeeze-excitation scale) stays a 1x1 grid, read
    broadcast."""

    lay = q.layer
    a = ins[0]  # a product's broadcast operand comes second (.qonnx orders them)
    wq = next((t.wq for t in ins if t.variant == variant and (t.h, t.w) == (a.h, a.w)), a.w)
    geo = GridGeometry(a.h, a.w, 1, 1, 0, wq)
    shape = geo.out_shape(variant, lay.o)
    if lay.op == "lut":
        em.inputs[f"lut{idx}"] = pack_lut(q.weights)
        func = int8_hvx.lut_grid(variant, shape)
        args = [_on_grid(em, idx, lay, a, variant, geo, 0), f"lut{idx}"]
    else:  # add / product: the second operand of the same map, or a broadcast 1x1 map
        other = ins[1]
        small = (other.h, other.w) != (a.h, a.w)
        if small and (other.h, other.w) != (1, 1):
            raise CocopieError(f"{lay.name}: {'an add' if lay.op == 'add' else 'a product'} "
                               f"broadcasting a {other.h}x{other.w} map")
        ogeo = GridGeometry(1, 1, 1, 1, 0) if small else geo
        args = [_on_grid(em, idx, lay, a, variant, geo, 0),
                _on_grid(em, idx, lay, other, variant, ogeo, 1)]
        grid = int8_hvx.qadd_grid if lay.op == "add" else int8_hvx.qmul_grid
        func = grid(variant, shape, ogeo.out_shape(variant, lay.o), q.rq, small)
    em.call(f"layer{idx}", func, [*args, f"out{idx}"], (lay.name, "kernel"))
    return Tensor(f"out{idx}", a.h, a.w, lay.o, variant, wq, shape)


def _identity_table(table) -> bool:
    return np.array_equal(np.asarray(table), np.arange(256))


def _channel_move(em: _Emit, idx: int, q: QLayer, variant: str, ins: list) -> Tensor:
    """A channel slice, concat or shuffle as vector moves between grids in ``variant``'s
    layout (:mod:`..kernels.channels`): the inputs brought to one grid (the width of an
    input already in the layout), a concat's inputs first through their requantization
    tables (a lookup, skipped where the table is the identity)."""
    lay = q.layer
    a = ins[0]
    wq = next((t.wq for t in ins if t.variant == variant and (t.h, t.w) == (a.h, a.w)), a.w)
    geo = GridGeometry(a.h, a.w, 1, 1, 0, wq)
    names = []
    for k, t in enumerate(ins):
        name = _on_grid(em, idx, lay, t, variant, geo, k)
        if lay.op == "concat" and not _identity_table(q.weights[k]):
            em.inputs[f"lut{idx}_{k}"] = pack_lut(q.weights[k])
            em.call(f"lut{idx}_{k}", int8_hvx.lut_grid(variant, geo.out_shape(variant, t.c)),
                    [name, f"lut{idx}_{k}", f"req{idx}_{k}"], (lay.name, "kernel"))
            name = f"req{idx}_{k}"
        names.append(name)
    kind = "shuffle" if lay.op == "shuffle" else lay.op
    func = int8_hvx.channel_move(kind, variant, [geo.out_shape(variant, t.c) for t in ins],
                                 [t.c for t in ins], lay.o,
                                 {k: int(v) for k, v in q.params.items()})
    em.call(f"layer{idx}", func, [*names, f"out{idx}"], (lay.name, "kernel"))
    return Tensor(f"out{idx}", a.h, a.w, lay.o, variant, wq, geo.out_shape(variant, lay.o))


def _nhwc(em: _Emit, idx: int, lay: Layer, t: Tensor, k: int) -> str:
    """Buffer name of ``t`` as an NHWC map (unpacked from its grid if it has one)."""
    if t.variant is None:
        return t.name
    name = f"nhwc{idx}_{k}"
    em.call(f"unpack{idx}_{k}", int8_hvx.unpack(t), [t.name, name], (lay.name, "regrid"))
    return name


def _attention_on_grids(em: _Emit, idx: int, q: QLayer, ins: list) -> Tensor | None:
    """An attention product on 4-column grids with the HVX kernel
    (:mod:`..kernels.attention`), when the sequence and head sizes fall on whole groups."""
    lay, op = q.layer, q.rq
    s = lay.w
    d = ins[1].c
    if lay.h != 1 or s % 4 or d % (4 * op.heads) or ins[0].h != 1 or ins[1].h != 1:
        return None
    geo = GridGeometry(1, s, 1, 1, 0, s)
    names = [_on_grid(em, idx, lay, t, "vrmpy", geo, k) for k, t in enumerate(ins)]
    a_shape, b_shape = geo.out_shape("vrmpy", ins[0].c), geo.out_shape("vrmpy", d)
    func = int8_hvx.qattention_grid(op.kind, op.heads, s, a_shape, b_shape, op.za, op.zb, op.rq)
    em.call(f"layer{idx}", func, [*names, f"out{idx}"], (lay.name, "kernel"))
    return Tensor(f"out{idx}", 1, s, lay.o, "vrmpy", s, geo.out_shape("vrmpy", lay.o))


def _sequence(em: _Emit, idx: int, q: QLayer, ins: list) -> Tensor:
    """An attention product, softmax, layer norm, upsampling, or a channel concat / slice /
    shuffle of maps of different sizes (same-size ones are channel moves on the grids):
    integer computes on NHWC maps (:mod:`tvm_cocopie.topi.int8.sequence`,
    :mod:`tvm_cocopie.topi.int8.compute`). Attention products on whole groups, softmaxes
    and layer norms carry descriptors and become HVX kernels in :func:`compile_network`
    (:mod:`..kernels.attention`, :mod:`..kernels.softmax`, :mod:`..kernels.layernorm`);
    the rest is lowered by TVM."""
    lay = q.layer
    if lay.op == "attention":
        on_grids = _attention_on_grids(em, idx, q, ins)
        if on_grids is not None:
            return on_grids
    names = [_nhwc(em, idx, lay, t, k) for k, t in enumerate(ins)]
    func, consts = nhwc_layer(q, [(1, t.h, t.w, t.c) for t in ins])
    for k, value in enumerate(consts):  # tables, packed constants: after the inputs
        em.inputs[f"c{idx}_{k}"] = value
    args = [*names, *(f"c{idx}_{k}" for k in range(len(consts)))]
    em.call(f"layer{idx}", func, [*args, f"out{idx}"], (lay.name, "kernel"))
    oh, ow = lay.out_hw
    return Tensor(f"out{idx}", oh, ow, lay.o, None, 0, (1, oh, ow, lay.o))


def _requant_table(em: _Emit, idx: int, rq, channels: int) -> list:
    """The argument a per-channel requantization adds after a kernel's bias (its
    multipliers and shifts over the ``channels`` the kernel's bias spans); none per
    tensor."""
    if not rq.per_channel:
        return []
    em.inputs[f"rq{idx}"] = rq.table(channels)
    return [f"rq{idx}"]


def _is_dense(lay: Layer, cur: Tensor) -> bool:
    """A 1x1 conv of a 1x1 map (a fully connected layer, a squeeze-excitation conv)."""
    return (lay.op == "conv" and lay.k == 1 and lay.s == 1 and lay.p == 0
            and (cur.h, cur.w) == (1, 1) and cur.variant is not None)


def _dense(em: _Emit, idx: int, q: QLayer, variant: str, cur: Tensor) -> Tensor:
    """A fully connected layer as a matrix-vector product (:func:`int8_hvx.qdense_grid`)."""
    lay = q.layer
    func = int8_hvx.qdense_grid(variant, cur, lay.o, q.rq)
    em.inputs[f"w{idx}"] = pack_dense_weights(q.weights[0, 0])
    bias = np.zeros(int8_hvx.dense_shapes(lay.c, lay.o)[1], np.int32)
    bias[: lay.o] = q.bias
    em.inputs[f"b{idx}"] = bias
    em.call(f"layer{idx}", func, [cur.name, f"w{idx}", f"b{idx}",
                                  *_requant_table(em, idx, q.rq, len(bias)), f"out{idx}"],
            (lay.name, "kernel"))
    shape = GridGeometry(1, 1, 1).out_shape(variant, lay.o)
    return Tensor(f"out{idx}", 1, 1, lay.o, variant, 1, shape)


def _live_taps(geo) -> list | None:
    """The taps of ``geo`` that read the image for some valid output, ``None`` if all do."""
    live = geo.live_taps()
    return None if len(live) == geo.kernel * geo.kernel else live


def _bias_of_dead_taps(q: QLayer, live: list) -> np.ndarray:
    """``q``'s bias plus the products of the taps outside ``live``: for every valid
    output they read the padding, which holds the input's zero point."""
    k = q.layer.k
    bias = q.bias.astype(np.int64)
    for dy in range(k):
        for dx in range(k):
            if (dy, dx) not in live:
                bias = bias + q.pad_value * q.weights[dy, dx].astype(np.int64).sum(0)
    if np.abs(bias).max(initial=0) >= 2**31:
        raise CocopieError(f"{q.layer.name}: the bias with the padding-only taps folded in "
                           "overflows int32")
    return bias.astype(np.int32)


def _grouped_in_vrmpy(net: QNetwork, plan: dict) -> dict:
    """``plan`` with every grouped conv in ``vrmpy``, the only layout its HVX kernel
    (:mod:`..kernels.grouped`) has (a plan asking for another is warned about)."""
    for q in net.layers:
        name = q.layer.name
        if q.layer.op == "gconv" and plan.get(name, "vrmpy") != "vrmpy":
            log.warning("%s: a grouped conv runs in vrmpy only, not %s", name, plan[name])
            plan[name] = "vrmpy"
    return plan


def compile_network(
    net: QNetwork, plan: dict | None = None, model=None, *, schedule: bool = True
) -> Program:
    """Kernels and calls of the whole network, and its static memory plan.

    Every PrimFunc is first the TE compute of :mod:`tvm_cocopie.topi.int8.hvx` for the
    layer's chosen variant, then (``schedule``) the HVX kernel the Hexagon schedule
    rule makes of it (:func:`tvm_cocopie.hexagon.kernels.dispatch.hvx_kernel`), exactly
    as ``tvm.compile(..., relax_pipeline="cocopie")`` does for a Hexagon target.
    """

    plan = _grouped_in_vrmpy(net, dict(plan or choose_plans(net, model)))
    first = net.layers[0].layer
    h, w, c = net.input_shape or (first.h, first.w, first.c)
    tensors = {"input": Tensor("image", h, w, c, None, 0, (1, h, w, c))}
    em = _Emit(inputs={"image": net.image_q if net.image is not None else None})
    for name, value in net.constants.items():
        _, ch, cw, cc = value.shape
        tensors[name] = Tensor(name, ch, cw, cc, None, 0, value.shape)
        em.inputs[name] = value
    want = grid_widths([q.layer for q in net.layers], plan)
    prev = "input"
    for idx, q in enumerate(net.layers):
        lay = q.layer
        variant = plan[lay.name]
        srcs = layer_sources(lay, prev)
        prev = lay.name
        if lay.op in ("add", "mul", "lut"):
            tensors[lay.name] = _elementwise(em, idx, q, variant, [tensors[n] for n in srcs])
            continue
        ins = [tensors[n] for n in srcs]
        if lay.op in ("concat", "slice", "shuffle") and len({(t.h, t.w) for t in ins}) == 1:
            tensors[lay.name] = _channel_move(em, idx, q, variant, ins)
            continue
        if lay.op in ("attention", "softmax", "layernorm", "concat", "slice", "shuffle",
                      "upsample"):
            tensors[lay.name] = _sequence(em, idx, q, [tensors[n] for n in srcs])
            continue
        if lay.op == "conv" and variant == "vmpa" and not _vmpa_ok(q.weights):
            raise CocopieError(
                f"{lay.name}: vmpa's 16-bit pair sums overflow for these weights "
                "(|w| > 64); choose vmpy or vrmpy"
            )
        cur = tensors[srcs[0]]
        if _is_dense(lay, cur):
            tensors[lay.name] = _dense(em, idx, q, variant, cur)
            continue
        geo, x_name, direct = _input_grid(em, idx, lay, cur, variant, want[idx],
                                          q.pad_value if lay.op != "pool" else 0)
        out_name = f"out{idx}"
        if lay.op == "pool":
            func, args = int8_hvx.maxpool_grid(variant, geo, lay.c), [x_name, out_name]
        else:
            if lay.op == "conv":
                func = int8_hvx.qconv2d_grid(variant, geo, lay.c, lay.o, q.rq)
                em.inputs[f"w{idx}"] = pack_conv_weights(q.weights, variant)
            elif lay.op == "gconv":
                groups, taps = q.params["groups"], _live_taps(geo)
                func = int8_hvx.qgroup_conv2d_grid(geo, lay.c, lay.o, groups, q.rq, taps)
                em.inputs[f"w{idx}"] = pack_grouped_weights(q.weights, groups, taps)
            else:
                func = int8_hvx.qdepthwise_grid(variant, geo, lay.c, q.rq)
                em.inputs[f"w{idx}"] = pack_dw_weights(q.weights, variant)
            bias = _bias_of_dead_taps(q, taps) if lay.op == "gconv" and taps else q.bias
            em.inputs[f"b{idx}"] = pad_bias(bias, variant)
            args = [x_name, f"w{idx}", f"b{idx}",
                    *_requant_table(em, idx, q.rq, len(em.inputs[f"b{idx}"])), out_name]
        em.call(f"layer{idx}", func, args, (lay.name, "kernel"))
        g = lay.geometry
        valid_h, valid_w = (g.out_h, g.out_w) if not direct else (cur.h, cur.w)
        tensors[lay.name] = Tensor(
            out_name, valid_h, valid_w, lay.o, variant, geo.grid_w, geo.out_shape(variant, lay.o)
        )
    cur = tensors[prev]
    em.call("unpack", int8_hvx.unpack(cur), [cur.name, "y"], ("output", "unpack"))
    funcs = {name: hvx_kernel(f) or f for name, f in em.funcs.items()} if schedule else em.funcs
    prog = Program(funcs, em.calls, em.inputs, "y", cur, plan, roles=em.roles,
                   aliases=em.aliases, tensors=tensors)
    prog.memory = plan_memory(prog.funcs, prog.calls, list(prog.inputs), prog.output,
                              em.aliases)
    return prog



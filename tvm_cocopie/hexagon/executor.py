"""A static executor: a whole int8 CNN as one Hexagon program (seed 004, §4.4.4).

GCD² compiles a model ahead of time: every operator gets an execution plan (layout and
instruction, :mod:`.selection`), every tensor a place in memory, and the kernels run in
order. Here the same holds under ``qemu-hexagon``:

1. :func:`quantize` builds a chain of convolutions and depthwise convolutions
   (:class:`.networks.Layer`), draws float weights, runs a numpy float forward pass
   and quantizes per tensor (uint8 activations after ReLU, zero point 0; int8
   symmetric weights; int32 bias; :class:`.int8_compute.Requant` per layer);
2. :func:`compile_network` picks a plan per layer (global selection over the cost
   model, or given), and emits the kernels: the layer kernels of :mod:`.conv2d` /
   :mod:`.depthwise`, and between them *regrid* kernels that move a layer's output
   grid into the next layer's padded, phase-split input grid in the next layer's
   layout (a layout change and re-padding in one gather). A 1x1 stride-1 layer in
   the same layout reads its producer's grid directly (no regrid);
3. a static memory plan (:mod:`.memplan`) gives every tensor an arena offset;
   tensors whose lifetimes do not overlap share memory;
4. :func:`run_network` runs the program once and checks the output bit for bit
   against the numpy int8 reference (:mod:`.reference`).

Networks are DAGs of convolutions, depthwise convolutions, residual adds
(:class:`.int8_compute.AddRequant`, inputs regridded to one grid where they differ)
and max pools, in topological order (a chain when layers name no inputs).

Simplifications (stated, not hidden): ReLU after every conv and add (MobileNetV2's
linear projections are clipped at 0 in both the float and the int8 model), no global
average pool or classifier, batch 1, the input image arrives as NHWC uint8 and is
regridded on the device like any other tensor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..errors import CocopieError
from . import memplan, reference
from .conv2d import ConvGeometry, pack_conv_weights
from .depthwise import pack_dw_weights
from .int8_compute import AddRequant, Requant
from .layouts import LAYOUT_OF, pad_bias
from .matmul import vmpa_exact
from .networks import Layer

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ quantization


@dataclass
class QLayer:
    """A quantized layer: the layer, int8 weights, int32 bias, requantization
    (:class:`.int8_compute.AddRequant` for a residual add; none for a max pool)."""

    layer: Layer
    weights: np.ndarray  # int8, HWIO (conv) or HWC (dwconv)
    bias: np.ndarray  # int32
    rq: Requant | AddRequant | None
    float_weights: np.ndarray = None
    float_bias: np.ndarray = None


@dataclass
class QNetwork:
    """A quantized chain and its float counterpart's input."""

    layers: list
    image: np.ndarray  # float [1, H, W, C] in [0, 1)
    input_scale: float
    output_scale: float

    @property
    def image_q(self) -> np.ndarray:
        return np.clip(np.round(self.image / self.input_scale), 0, 255).astype(np.uint8)


def _float_layer(x, lay: Layer, w, b, other=None):
    if lay.op == "add":
        return np.maximum(x + other, 0)
    k, s, p = lay.k, lay.s, lay.p
    g = lay.geometry
    xp = np.pad(x[0], ((p, p), (p, p), (0, 0)))
    acc = np.zeros((g.out_h, g.out_w, lay.o)) if lay.op != "pool" else None
    for dy in range(k):
        for dx in range(k):
            win = xp[dy : dy + s * g.out_h : s, dx : dx + s * g.out_w : s]
            if lay.op == "pool":
                acc = win if acc is None else np.maximum(acc, win)
            else:
                acc += win @ w[dy, dx] if lay.op == "conv" else win * w[dy, dx]
    if lay.op == "pool":
        return acc[None]
    return np.maximum(acc + b, 0)[None]


def _source(lay: Layer, prev: str) -> tuple:
    """Input names of ``lay`` (a chain's layers without inputs read their predecessor)."""
    return tuple(lay.inputs) if lay.inputs else (prev,)


def _check_ops(body) -> None:
    for lay in body:
        if lay.op not in ("conv", "dwconv", "add", "pool") or (lay.op == "pool" and not lay.k):
            raise CocopieError(
                f"the executor runs conv, dwconv, residual add and max pool layers; "
                f"{lay.name} is {lay.op}{' (global average)' if lay.op == 'pool' else ''}"
            )


def quantize(layers, seed: int = 0, weights: dict | None = None) -> QNetwork:
    """Float weights for a DAG of ``conv`` / ``dwconv`` / ``add`` / ``pool`` (max) layers
    in topological order (``weights``: layer name -> ``(w, b)`` with ``w`` HWIO or HWC,
    else random He-normal), quantized with per-tensor scales from one numpy float
    forward pass. A residual add gets an :class:`.int8_compute.AddRequant`; a max pool
    keeps its input's scale."""
    body = [lay for lay in layers if lay.op != "input"]
    _check_ops(body)
    rng = np.random.default_rng(seed)
    first = body[0]
    image = rng.random((1, first.h, first.w, first.c))
    acts = {"input": (image, 1.0 / 255)}
    prev = "input"
    out = []
    for lay in body:
        srcs = _source(lay, prev)
        x, s_x = acts[srcs[0]]
        if lay.op == "add":
            other, s_o = acts[srcs[1]]
            y = _float_layer(x, lay, None, None, other)
            s_y = max(float(y.max()), 1e-6) / 255
            arq = AddRequant.from_scales(s_x / s_y, s_o / s_y)
            out.append(QLayer(lay, None, None, arq))
        elif lay.op == "pool":
            y, s_y = _float_layer(x, lay, None, None), s_x
            out.append(QLayer(lay, None, None, None))
        else:
            fan_in = lay.k * lay.k * (lay.c if lay.op == "conv" else 1)
            shape = (lay.k, lay.k, lay.c, lay.o) if lay.op == "conv" else (lay.k, lay.k, lay.c)
            w = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
            b = rng.standard_normal(lay.o) * 0.1
            if weights and lay.name in weights:
                w, b = (np.asarray(a, dtype=np.float64) for a in weights[lay.name])
                if w.shape != shape or b.shape != (lay.o,):
                    raise CocopieError(
                        f"{lay.name}: weights {w.shape} / bias {b.shape}, want {shape}"
                    )
            y = _float_layer(x, lay, w, b)
            s_w = np.abs(w).max() / 127
            s_y = max(float(y.max()), 1e-6) / 255
            wq = np.clip(np.round(w / s_w), -127, 127).astype(np.int8)
            bq = np.round(b / (s_x * s_w)).astype(np.int32)
            rq = Requant.from_scale(s_x * s_w / s_y)
            out.append(QLayer(lay, wq, bq, rq, w, b))
        acts[lay.name] = (y, s_y)
        prev = lay.name
    return QNetwork(out, image, 1.0 / 255, acts[body[-1].name][1])


def _forward(net: QNetwork, image, step):
    acts, prev = {"input": image}, "input"
    for q in net.layers:
        srcs = _source(q.layer, prev)
        acts[q.layer.name] = step(q, *(acts[n] for n in srcs))
        prev = q.layer.name
    return acts[prev]


def _reference_step(q: QLayer, x, other=None):
    lay = q.layer
    if lay.op == "conv":
        return reference.qconv2d_nhwc(x, q.weights, q.bias, q.rq, lay.s, lay.p)
    if lay.op == "dwconv":
        return reference.qdepthwise_conv2d_nhwc(x, q.weights, q.bias, q.rq, lay.s, lay.p)
    if lay.op == "add":
        return q.rq.numpy(x, other)
    return reference.maxpool_nhwc(x, lay.k, lay.s, lay.p)


def reference_forward(net: QNetwork) -> np.ndarray:
    """The numpy int8 reference of the whole network."""
    return _forward(net, net.image_q, _reference_step)


def float_forward(net: QNetwork) -> np.ndarray:
    return _forward(
        net, net.image,
        lambda q, x, other=None: _float_layer(x, q.layer, q.float_weights, q.float_bias, other),
    )


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

    def read(self, x, i, j, ch):
        if self.variant is None:
            return x[0, i, j, ch]
        v = LAYOUT_OF[self.variant].cols
        return x[ch // v, i * self.wq + j, ch % v]


def shift_copy_kernel(v: int, groups: int, s_src: int, s_dst: int, sh: int):
    """The HVX kernel of :func:`tvm_cocopie.topi.int8_hvx.shift_copy` ``(x, mask, y)``:
    the common case of a regrid, a stride-1 consumer in the producer's layout on a grid
    of the producer's width.

    Then pixel ``(i, j)`` moves by the constant ``pad * Wq + pad`` rows, and the
    producer's junk columns land exactly on the consumer's padding: the regrid is a
    shifted vector copy ANDed with a constant mask of the consumer's valid positions
    (``x`` and ``y`` are flat views of the two grids; ``s_src``/``s_dst`` the bytes of
    one channel group, ``sh`` the shift in bytes). Vectors that would read outside the
    source are done byte by byte.
    """
    from tvm import tirx

    from .tirgen import T, kernel, ramp

    n_vec = s_dst // 128
    t_lo = -(-sh // 128)
    t_hi = min(n_vec - 1, (s_src + sh - 128) // 128)
    params = [
        ("x", (groups * s_src,), "uint8"),
        ("m", (s_dst,), "uint8"),
        ("y", (groups * s_dst,), "uint8"),
    ]
    with kernel(f"shift_copy{v}", params) as ((x, m, y), out), T.serial(groups) as g:
        if t_hi >= t_lo:
            with T.serial(t_hi - t_lo + 1) as t:
                d = (t + t_lo) * 128
                vec = x[ramp(g * s_src + d - sh, 128)] & m[ramp(d, 128)]
                T.buffer_store(y, vec, [ramp(g * s_dst + d, 128)])
        edges = [t for t in range(n_vec) if t < t_lo or t > t_hi]
        for t in edges:
            with T.serial(128) as lane:
                d = t * 128 + lane
                idx = d - sh
                ok = tirx.all(idx >= 0, idx < s_src)
                safe = tirx.max(tirx.min(idx, s_src - 1), 0)
                value = tirx.if_then_else(ok, x[g * s_src + safe] & m[d], tirx.const(0, "uint8"))
                T.buffer_store(y, value, [g * s_dst + d])
    return out[0]


def _shift_copy_pays(src: Tensor, geo: ConvGeometry, variant: str) -> bool:
    """Whether :func:`shift_copy_kernel` beats the row copy of :mod:`.regrid`.

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


def shift_copy_compute(src: Tensor, geo: ConvGeometry, variant: str):
    """:func:`tvm_cocopie.topi.int8_hvx.shift_copy` from ``src``'s grid into a ``geo``
    convolution's input grid in ``variant``'s layout (see :func:`shift_copy_kernel`)."""
    from ..topi import int8_hvx

    v = LAYOUT_OF[variant].cols
    dst_shape = geo.in_shape(variant, src.c)
    sh = (geo.pad * geo.grid_w + geo.pad) * v
    return int8_hvx.shift_copy(v, dst_shape[1], src.shape[1] * v, dst_shape[2] * v, sh)


def shift_mask(geo: ConvGeometry, variant: str, h: int, w: int) -> np.ndarray:
    """0xFF where the consumer's grid holds a pixel, 0 on its padding (flat bytes)."""
    v = LAYOUT_OF[variant].cols
    rows = geo.in_rows(variant)
    r = np.arange(rows)
    gi, gj = r // geo.grid_w, r % geo.grid_w
    ok = (gi >= geo.pad) & (gi < geo.pad + h) & (gj >= geo.pad) & (gj < geo.pad + w)
    return np.repeat(np.where(ok, 255, 0).astype(np.uint8), v)


def _passes_grid(lay: Layer) -> bool:
    """Layers whose input grid is their producer's output grid, unshifted."""
    return lay.op == "add" or (lay.op == "conv" and lay.k == 1 and lay.s == 1 and lay.p == 0)


def grid_widths(layers, plan) -> list:
    """Output grid width each layer should use so that stride-1 consumers in the same
    layout can take its output by :func:`shift_copy_kernel` (0: no preference)."""
    index = {lay.name: i for i, lay in enumerate(layers)}
    want = [0] * len(layers)
    for j in range(len(layers) - 1, 0, -1):
        nxt = layers[j]
        for src in _source(nxt, layers[j - 1].name):
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


def choose_plans(net: QNetwork, model=None, local: bool = False) -> dict:
    """GCD²'s global selection over the network (cost model, nothing run); ``local``:
    each layer's cheapest plan alone, transforms ignored."""
    from .networks import selection_graph
    from .selection import global_select, local_select

    first = net.layers[0].layer
    layers = [Layer("input", "input", (), first.h, first.w, first.c, first.c)]
    prev = "input"
    exact = {}
    for q in net.layers:
        lay = q.layer
        layers.append(
            Layer(lay.name, lay.op, _source(lay, prev), lay.h, lay.w, lay.c, lay.o,
                  lay.k, lay.s, lay.p)
        )
        exact[lay.name] = lay.op == "conv" and _vmpa_ok(q.weights)
        prev = lay.name
    graph = selection_graph(layers, model, vmpa_ok=lambda lay: exact.get(lay.name, False))
    sel = local_select(graph) if local else global_select(graph)
    return {k: v for k, v in sel.plan.items() if k != "input"}


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


def _input_grid(em: _Emit, idx: int, lay: Layer, cur: Tensor, variant: str, width: int):
    """``(geometry, buffer name, direct)``: ``cur`` made the input grid of ``lay``."""
    from ..topi import int8_hvx

    x_name = f"in{idx}"
    if lay.op == "conv" and lay.k == 1 and lay.s == 1 and lay.p == 0 and cur.variant == variant:
        em.aliases[x_name] = cur.name  # a 1x1 reads its producer's grid as it is
        return ConvGeometry(cur.h, cur.wq, 1), x_name, True
    g0 = lay.geometry
    if lay.s == 1 and cur.variant == variant:
        width = max(width, cur.wq)  # take the producer's grid as it is
    geo = ConvGeometry(g0.h, g0.w, g0.kernel, g0.stride, g0.pad, width)
    if lay.s == 1 and cur.variant == variant and cur.wq == geo.grid_w and _shift_copy_pays(
        cur, geo, variant
    ):
        em.inputs[f"mask{idx}"] = shift_mask(geo, variant, cur.h, cur.w)
        em.aliases[f"{cur.name}_flat"] = cur.name
        em.aliases[f"{x_name}_flat"] = x_name
        em.call(f"regrid{idx}", shift_copy_compute(cur, geo, variant),
                [f"{cur.name}_flat", f"mask{idx}", f"{x_name}_flat"], (lay.name, "regrid"))
    else:
        em.call(f"regrid{idx}", int8_hvx.regrid(cur, geo, variant), [cur.name, x_name],
                (lay.name, "regrid"))
    return geo, x_name, False


def _add(em: _Emit, idx: int, q: QLayer, variant: str, ins: list) -> Tensor:
    """A residual add: both inputs brought to one grid (``variant``, width of an input
    already in it), regridded only where they are not."""
    from ..topi import int8_hvx

    lay = q.layer
    a = ins[0]
    wq = next((t.wq for t in ins if t.variant == variant), a.w)
    geo = ConvGeometry(a.h, a.w, 1, 1, 0, wq)
    shape = geo.out_shape(variant, lay.o)
    args = []
    for k, t in enumerate(ins):
        if t.variant == variant and t.wq == wq and tuple(t.shape) == shape:
            args.append(t.name)
            continue
        grid = f"add{idx}_{k}"
        em.aliases[grid] = f"{grid}_grid"
        em.call(f"regrid{idx}_{k}", int8_hvx.regrid(t, geo, variant), [t.name, f"{grid}_grid"],
                (lay.name, "regrid"))
        args.append(grid)
    em.call(f"layer{idx}", int8_hvx.qadd_grid(variant, shape, q.rq), [*args, f"out{idx}"],
            (lay.name, "kernel"))
    return Tensor(f"out{idx}", a.h, a.w, lay.o, variant, wq, shape)


def compile_network(
    net: QNetwork, plan: dict | None = None, model=None, *, schedule: bool = True
) -> Program:
    """Kernels and calls of the whole network, and its static memory plan.

    Every PrimFunc is first the TE compute of :mod:`tvm_cocopie.topi.int8_hvx` for the
    layer's chosen variant, then (``schedule``) the HVX kernel the Hexagon schedule
    rule makes of it (:func:`tvm_cocopie.schedules.hexagon_int8.hvx_kernel`), exactly
    as ``tvm.compile(..., relax_pipeline="cocopie")`` does for a Hexagon target.
    """
    from ..schedules.hexagon_int8 import hvx_kernel
    from ..topi import int8_hvx

    plan = dict(plan or choose_plans(net, model))
    first = net.layers[0].layer
    tensors = {
        "input": Tensor("image", first.h, first.w, first.c, None, 0,
                        (1, first.h, first.w, first.c))
    }
    em = _Emit(inputs={"image": net.image_q if net.image is not None else None})
    want = grid_widths([q.layer for q in net.layers], plan)
    prev = "input"
    for idx, q in enumerate(net.layers):
        lay = q.layer
        variant = plan[lay.name]
        srcs = _source(lay, prev)
        prev = lay.name
        if lay.op == "add":
            tensors[lay.name] = _add(em, idx, q, variant, [tensors[n] for n in srcs])
            continue
        if lay.op == "conv" and variant == "vmpa" and not _vmpa_ok(q.weights):
            raise CocopieError(
                f"{lay.name}: vmpa's 16-bit pair sums overflow for these weights "
                "(|w| > 64); choose vmpy or vrmpy"
            )
        cur = tensors[srcs[0]]
        geo, x_name, direct = _input_grid(em, idx, lay, cur, variant, want[idx])
        out_name = f"out{idx}"
        if lay.op == "pool":
            func, args = int8_hvx.maxpool_grid(variant, geo, lay.c), [x_name, out_name]
        else:
            if lay.op == "conv":
                func = int8_hvx.qconv2d_grid(variant, geo, lay.c, lay.o, q.rq)
                em.inputs[f"w{idx}"] = pack_conv_weights(q.weights, variant)
            else:
                func = int8_hvx.qdepthwise_grid(variant, geo, lay.c, q.rq)
                em.inputs[f"w{idx}"] = pack_dw_weights(q.weights, variant)
            em.inputs[f"b{idx}"] = pad_bias(q.bias, variant)
            args = [x_name, f"w{idx}", f"b{idx}", out_name]
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
                   aliases=em.aliases)
    prog.memory = _plan_memory(prog, em.aliases)
    return prog


def _plan_memory(prog: Program, aliases: dict) -> memplan.MemoryPlan:
    return plan_memory(prog.funcs, prog.calls, list(prog.inputs), prog.output, aliases)


def plan_memory(funcs, calls, inputs, output: str, aliases: dict) -> memplan.MemoryPlan:
    """The static memory plan of a program; ``aliases`` maps a buffer to the one whose
    memory it views (same bytes, another shape), so both get one offset."""
    from .runner import normalize_module, program_spec

    spec = program_spec(normalize_module(funcs), calls, list(inputs), [output])
    sizes = {b.name: b.nbytes for b in spec.buffers}

    def storage(name):
        while name in aliases:
            name = aliases[name]
        return name

    calls = [(f, [storage(a) for a in args]) for f, args in calls]
    st_sizes: dict = {}
    for name, n in sizes.items():
        st_sizes[storage(name)] = max(st_sizes.get(storage(name), 0), n)
    mp = memplan.plan(calls, list(inputs), [output], st_sizes)
    memplan.check(mp, st_sizes)
    mp.offsets = {name: mp.offsets[storage(name)] for name in sizes}
    return mp


@dataclass
class NetworkResult:
    output: np.ndarray
    reference: np.ndarray
    exact: bool
    packets: list
    roles: list
    plan: dict
    arena_bytes: int
    naive_bytes: int

    @property
    def total_packets(self) -> int:
        return int(sum(self.packets))

    def packets_by_role(self) -> dict:
        out: dict = {}
        for (_, role), n in zip(self.roles, self.packets):
            out[role] = out.get(role, 0) + int(n)
        return out


def run_network(net: QNetwork, plan: dict | None = None, *, model=None, timeout=None):
    """Compile, run once under the emulator counting packets, compare with numpy."""
    from .runner import run

    prog = compile_network(net, plan, model)
    res = run(
        prog.funcs,
        prog.calls,
        prog.inputs,
        [prog.output],
        count_packets=True,
        timeout=timeout,
        offsets=prog.memory.offsets,
    )
    ref = reference_forward(net)
    out = res.outputs[prog.output]
    result = NetworkResult(
        out,
        ref,
        bool(np.array_equal(out, ref)),
        list(res.packets),
        prog.roles,
        prog.plan,
        prog.memory.arena_bytes,
        prog.memory.naive_bytes,
    )
    log.info(
        "network: %d packets (%s), arena %d bytes (separate buffers: %d), exact=%s",
        result.total_packets,
        result.packets_by_role(),
        result.arena_bytes,
        result.naive_bytes,
        result.exact,
    )
    return result


def mobilenetv2_head(image: int = 32) -> list:
    """The first blocks of MobileNetV2 as a chain: stem 3x3/2, the t=1 block
    (depthwise, 1x1 projection) and the first t=6 block (expand, depthwise/2, project)."""
    from .networks import mobilenetv2_layers

    layers = mobilenetv2_layers(image, stages=[(1, 16, 1, 1), (6, 24, 1, 2)])
    return [lay for lay in layers if lay.op != "add"]


def resnet50_stem_chain(image: int = 32) -> list:
    """ResNet-50's stem conv and the first bottleneck's main path (no shortcut)."""
    from .networks import _Net

    net = _Net(image, image, 3)
    x = net.add("conv", "input", 64, 7, 2, 3, name="stem")
    x = net.add("conv", x, 64, 1, name="l1b0_c1")
    x = net.add("conv", x, 64, 3, 1, 1, name="l1b0_c2")
    net.add("conv", x, 256, 1, name="l1b0_c3")
    return net.layers


def resnet50_head(image: int = 32, blocks: int = 2) -> list:
    """ResNet-50's stem, max pool and first ``blocks`` bottlenecks with their shortcuts
    (the downsampling 1x1 of the first) and residual adds."""
    from .networks import resnet50_layers

    layers = resnet50_layers(image, blocks=(blocks,))
    return [lay for lay in layers if lay.op not in ("matmul", "pool") or (lay.op == "pool" and lay.k)]


def mobilenetv2_blocks(image: int = 16) -> list:
    """MobileNetV2's stem and first three inverted residuals, the third with its add."""
    from .networks import mobilenetv2_layers

    return mobilenetv2_layers(image, stages=[(1, 16, 1, 1), (6, 24, 2, 2)])


"""The int8 network as Relax operators: written, read, and read back after the pipeline.

The form the Hexagon branch of the cocopie pipeline takes (seed 004, §4.4): a conv is
``nn.conv2d`` (NHWC, HWIO, uint8 x int8 -> int32, dense or depthwise), ``add`` of an
int32 bias, and the requantization of :class:`~tvm_cocopie.topi.int8.compute.Requant` as
``astype int64``, ``multiply``, ``add``, ``right_shift``, ``add``, ``clip(0, 255)``,
``astype uint8`` (a non-zero input zero point pads through an explicit ``nn.pad`` with
it); a residual add is :class:`~tvm_cocopie.topi.int8.compute.AddRequant`
(``astype int32`` and ``multiply`` of each input, ``add``, ``add`` of the offset,
``right_shift``, ``clip``, ``astype uint8``); a product is
:class:`~tvm_cocopie.topi.int8.compute.MulRequant` (``astype int32``, ``subtract`` of the
zero point for each input, ``multiply``, then the conv's requantization); a lookup is
``take`` of a 256-entry uint8 table at ``astype(x, int32)``; a max pool is
``nn.max_pool2d`` (NHWC, uint8). Every other layer -- per-channel convs, grouped convs,
attention products, softmax, layer norm, channel concat / slice / shuffle, upsampling --
is ``call_tir`` of its NHWC integer compute (:func:`.executor.nhwc.nhwc_layer`: the
inputs, then its constants), the layer described in the PrimFunc's :data:`LAYER_ATTR`
(checked against the compute when read back); constant operands (a position embedding)
are bound uint8 constants. :func:`quantized_module` writes a QDQ/QOperator ONNX file in
this form; ``tvm_cocopie.from_onnx(path, int8=True)`` is the front door to it.

- :func:`relax_module` writes a quantized network (:class:`.executor.QNetwork`) in that
  form (:func:`emit_qconv` one conv);
- :func:`read_network` reads it back into a network the selection and the executor take;
- :func:`program_of` reads a module the pipeline has rewritten (and scheduled) back into
  a runner program, so tests run exactly its PrimFuncs under ``qemu-hexagon``
  (:func:`run_program` runs it).

The pass that rewrites the form into HVX-layout computes is :mod:`.select_stage`.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np

from ..errors import UnsupportedOperatorError
from ..exprs import const_np, is_constant, op_name, static_shape
from ..topi.int8.compute import AddRequant, MulRequant, Requant
from ..topi.int8.sequence import AttentionProduct, LayerNorm, Softmax
from .executor.nhwc import nhwc_layer, out_shape
from .executor.quantization import QLayer, QNetwork, layer_sources
from .selection.networks import Layer

log = logging.getLogger(__name__)

#: PrimFunc attribute of a layer written as ``call_tir`` of its NHWC integer compute: the
#: layer described as JSON (operator, geometry, requantization, parameters), which
#: :func:`read_network` reads back.
LAYER_ATTR = "cocopie_int8_layer"

# ------------------------------------------------------------------ the Relax form


def _const(value, dtype):
    from tvm import relax

    value = np.asarray(value, dtype=dtype)
    return relax.const(value, dtype) if value.ndim == 0 else relax.const(value)


def emit_qconv(bb, x, q: QLayer, *others):
    """Emit the Relax operators of layer ``q`` on ``x`` (NHWC uint8; ``others``: the
    further inputs, e.g. the second operand of a residual add); returns the final uint8
    expression (not emitted)."""
    from tvm import relax

    other = others[0] if others else None

    lay = q.layer
    if not _natural(q):
        return _layer_call(bb, q, [x, *others])
    if lay.op == "pool":
        return relax.op.nn.max_pool2d(x, lay.k, lay.s, lay.p, layout="NHWC")
    if lay.op == "add":
        arq = q.rq
        a = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(x, "int32")),
                                      _const(arq.ma, "int32")))
        b = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(other, "int32")),
                                      _const(arq.mb, "int32")))
        y = bb.emit(relax.op.add(bb.emit(relax.op.add(a, b)),
                                 _const(arq.offset, "int32")))
        y = bb.emit(relax.op.right_shift(y, _const(arq.shift, "int32")))
        return relax.op.astype(bb.emit(relax.op.clip(y, 0, 255)), "uint8")
    if lay.op == "lut":
        return relax.op.take(_const(q.weights, "uint8"), bb.emit(relax.op.astype(x, "int32")),
                             axis=0)
    if lay.op == "mul":
        mrq = q.rq
        a = bb.emit(relax.op.subtract(bb.emit(relax.op.astype(x, "int32")),
                                      _const(mrq.za, "int32")))
        b = bb.emit(relax.op.subtract(bb.emit(relax.op.astype(other, "int32")),
                                      _const(mrq.zb, "int32")))
        return _emit_requant(bb, bb.emit(relax.op.multiply(a, b)), mrq.rq)
    w = q.weights if lay.op == "conv" else q.weights[:, :, None, :]
    pad = lay.p
    if pad and q.pad_value:  # the input's zero point is its real zero: pad with it
        x = bb.emit(relax.op.nn.pad(x, [0, 0, pad, pad, pad, pad, 0, 0],
                                    pad_value=float(q.pad_value)))
        pad = 0
    acc = bb.emit(
        relax.op.nn.conv2d(
            x, _const(w, "int8"), strides=lay.s, padding=pad,
            groups=1 if lay.op == "conv" else lay.c,
            data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32",
        )
    )
    acc = bb.emit(relax.op.add(acc, _const(q.bias, "int32")))
    return _emit_requant(bb, acc, q.rq)


def _natural(q: QLayer) -> bool:
    """Whether layer ``q`` is written as Relax operators (per-tensor convs, adds,
    products, lookups, max pools); the others are ``call_tir`` of their NHWC compute."""
    op = q.layer.op
    if op in ("conv", "dwconv"):
        return not q.rq.per_channel
    return op in ("add", "mul", "lut") or (op == "pool" and bool(q.layer.k))


#: Requantizations and integer operators a ``call_tir`` layer's description may hold.
_RQ_CLASSES = {c.__name__: c for c in (Requant, AddRequant, MulRequant, AttentionProduct,
                                       Softmax, LayerNorm)}


def _encode(value):
    """``value`` (a requantization dataclass, numbers, tuples) as JSON-ready data."""
    if dataclasses.is_dataclass(value):
        return {"class": type(value).__name__,
                **{f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_encode(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _decode(value):
    """The inverse of :func:`_encode` (lists back to tuples, dataclasses rebuilt)."""
    if isinstance(value, dict) and "class" in value:
        if value["class"] not in _RQ_CLASSES:
            raise UnsupportedOperatorError(f"an int8 layer with a {value['class']} requantization")
        return _RQ_CLASSES[value["class"]](
            **{k: _decode(v) for k, v in value.items() if k != "class"})
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def _layer_call(bb, q: QLayer, ins: list):
    """Layer ``q`` as ``call_tir`` of its NHWC integer compute (:func:`.executor.nhwc.
    nhwc_layer`) on ``ins`` and its constants, the layer described in the PrimFunc's
    :data:`LAYER_ATTR` for :func:`read_network` (not emitted)."""
    from tvm import relax

    lay = q.layer
    func, consts = nhwc_layer(q, [tuple(static_shape(x)) for x in ins])
    desc = {"op": lay.op,
            "geometry": [lay.h, lay.w, lay.c, lay.o, lay.k, lay.s, lay.p, lay.groups],
            "kind": q.kind, "pad_value": int(q.pad_value), "params": _encode(q.params),
            "rq": _encode(q.rq), "inputs": len(ins)}
    func = func.without_attr("global_symbol").with_attr(LAYER_ATTR, json.dumps(desc))
    gv = bb.add_func(func, f"int8_{lay.op}")
    out = relax.TensorType(list(out_shape(q)), "uint8")
    consts = [np.asarray(c) for c in consts]  # dtypes given: relax.const makes int64 int32
    return relax.call_tir(gv, [*ins, *(relax.const(c, str(c.dtype)) for c in consts)], out)


def _emit_requant(bb, acc, rq):
    """:class:`~tvm_cocopie.topi.int8.compute.Requant` of an int32 expression, as Relax
    arithmetic ending in a uint8 expression (not emitted)."""
    from tvm import relax

    y = bb.emit(relax.op.astype(acc, "int64"))
    y = bb.emit(relax.op.multiply(y, _const(rq.multiplier, "int64")))
    y = bb.emit(relax.op.add(y, _const(1 << (rq.shift - 1), "int64")))
    y = bb.emit(relax.op.right_shift(y, _const(rq.shift, "int64")))
    y = bb.emit(relax.op.add(y, _const(rq.zero_point, "int64")))
    y = bb.emit(relax.op.clip(y, 0, 255))
    return relax.op.astype(y, "uint8")


def relax_module(net: QNetwork):
    """The quantized network ``net`` as a Relax module ``main(image: uint8 NHWC)``."""
    from tvm import relax

    first = net.layers[0].layer
    h, w, c = net.input_shape or (first.h, first.w, first.c)
    x = relax.Var("image", relax.TensorType((1, h, w, c), "uint8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            env, prev = {"input": x}, "input"
            for name, value in net.constants.items():  # a bias or position operand
                env[name] = bb.emit(relax.const(np.asarray(value, np.uint8)))
            for i, q in enumerate(net.layers):
                srcs = layer_sources(q.layer, prev)
                expr = emit_qconv(bb, *(env[n] for n in srcs[:1]), q,
                                  *(env[n] for n in srcs[1:]))
                last = i == len(net.layers) - 1
                env[q.layer.name] = bb.emit_output(expr) if last else bb.emit(expr)
                prev = q.layer.name
        bb.emit_func_output(env[prev])
    return bb.get()


def quantized_module(model, image_size: int | None = None):
    """The Relax module of a QDQ or QOperator ONNX model (path or ``ModelProto``) in the
    int8 form above, ``main(image)`` taking the input quantized, NHWC uint8 (quantize a
    float image with the returned network's ``quantize_input``). Returns ``(module,
    network)``; ``tvm.compile(module, HEXAGON_V66, relax_pipeline="cocopie")`` builds it."""
    from ..onnx_file import load_model
    from .executor.qonnx import read_quantized

    net = read_quantized(load_model(model, check=False), image_size)
    return relax_module(net), net


# ------------------------------------------------------------------ reading it back


def _op_name(expr) -> str:
    """The Relax operator ``expr`` calls, else its class name (for messages and checks)."""
    return op_name(expr) or type(expr).__name__


def _scalar(expr, what: str) -> int:
    if not is_constant(expr) or const_np(expr).size != 1:
        raise UnsupportedOperatorError(f"{what} must be a scalar constant, got {expr}")
    return int(const_np(expr).reshape(()))


class _Graph:
    """The bindings of ``main``: values, uses, and which ones a pattern consumed."""

    def __init__(self, func):
        from tvm import relax

        self.values, self.uses, self.order, self.used = {}, {}, [], set()
        for block in func.body.blocks:
            for b in block.bindings:
                if not isinstance(b, relax.VarBinding):
                    raise UnsupportedOperatorError(f"{b.var.name}: a match_cast binding")
                self.values[b.var] = b.value
                self.order.append(b.var)
                for arg in getattr(b.value, "args", []):
                    if isinstance(arg, relax.Var):
                        self.uses[arg] = self.uses.get(arg, 0) + 1

    def producer(self, expr, op: str, what: str):
        """The call of ``op`` bound to ``expr``, used only here (inside a pattern)."""
        call = self.values.get(expr)
        if call is None or _op_name(call) != op:
            got = _op_name(call) if call is not None else type(expr).__name__
            raise UnsupportedOperatorError(
                f"{what}: found {got} where the int8 pattern expects {op} "
                "(see tvm_cocopie.hexagon.relax_graph for the patterns)",
                {got: 1},
            )
        if self.uses.get(expr, 0) != 1:
            raise UnsupportedOperatorError(
                f"{expr.name} ({op}) is read {self.uses.get(expr, 0)} times inside an int8 "
                "requantization; only its uint8 result may be shared"
            )
        self.used.add(expr)
        return call


def _requant_chain(graph: _Graph, what: str, rq_expr):
    """``(Requant, int32 expression)`` of a requantization ending in ``rq_expr`` (``add``
    of the zero point)."""
    zp_add = graph.producer(rq_expr, "add", what)
    shifted = graph.producer(zp_add.args[0], "right_shift", what)
    rounded = graph.producer(shifted.args[0], "add", what)
    scaled = graph.producer(rounded.args[0], "multiply", what)
    wide = graph.producer(scaled.args[0], "astype", what)
    m = _scalar(scaled.args[1], f"{what}'s multiplier")
    rounding = _scalar(rounded.args[1], f"{what}'s rounding")
    shift = _scalar(shifted.args[1], f"{what}'s shift")
    zp = _scalar(zp_add.args[1], f"{what}'s zero point")
    if rounding != 1 << (shift - 1):
        raise UnsupportedOperatorError(
            f"{what}: rounding constant {rounding} is not 2**(shift-1) = {1 << (shift - 1)}"
        )
    return Requant(m, shift, zp), wide.args[0]


def _product(graph: _Graph, out, rq: Requant, prod_expr, names: dict, index: int):
    """A requantized product ``rq((a - za) * (b - zb))`` of two uint8 tensors."""
    what = out.name
    prod = graph.producer(prod_expr, "multiply", what)
    ins, zps = [], []
    for arg in prod.args:
        centred = graph.producer(arg, "subtract", what)
        wide = graph.producer(centred.args[0], "astype", what)
        if wide.args[0] not in names:
            raise UnsupportedOperatorError(f"{what}: the product reads a tensor that is not uint8")
        ins.append(wide.args[0])
        zps.append(_scalar(centred.args[1], f"{what}'s zero point"))
    (_, h, w, c), other = static_shape(ins[0]), tuple(static_shape(ins[1]))
    if other not in ((1, h, w, c), (1, 1, 1, c)):
        raise UnsupportedOperatorError(
            f"{what}: multiplies {static_shape(ins[0])} by {other}; Hexagon multiplies equal "
            "shapes or a map by a per-channel vector")
    lay = Layer(f"mul{index}", "mul", tuple(names[v] for v in ins), h, w, c, c)
    return QLayer(lay, None, None, MulRequant(zps[0], zps[1], rq))


def _lookup(graph: _Graph, out, call, names: dict, index: int):
    """``take(table, astype(x, int32))``: a 256-entry uint8 lookup of a uint8 tensor."""
    what = out.name
    table, idx = call.args[0], call.args[1]
    wide = graph.producer(idx, "astype", what)
    x = wide.args[0]
    if (not is_constant(table) or const_np(table).shape != (256,)
            or str(const_np(table).dtype) != "uint8" or x not in names):
        raise UnsupportedOperatorError(
            f"{what}: a take that is not a 256-entry uint8 table lookup of a uint8 tensor")
    _, h, w, c = static_shape(x)
    lay = Layer(f"lut{index}", "lut", (names[x],), h, w, c, c)
    return QLayer(lay, np.array(const_np(table)), None, None)


def _conv(graph: _Graph, out, rq_expr, names: dict, index: int):
    """The conv layer (or product) whose requantization ends in ``rq_expr``."""
    what = out.name
    rq, inner = _requant_chain(graph, what, rq_expr)
    producer = graph.values.get(inner)
    if producer is not None and _op_name(producer) == "multiply":
        return _product(graph, out, rq, inner, names, index)
    biased = graph.producer(inner, "add", what)
    conv = graph.producer(biased.args[0], "nn.conv2d", what)
    x, weights = conv.args[0], conv.args[1]
    pad_value, extra_pad = 0, 0
    padded = graph.values.get(x)
    if x not in names and padded is not None and _op_name(padded) == "nn.pad":
        graph.producer(x, "nn.pad", what)
        widths = [int(v) for v in padded.attrs.pad_width]
        if (widths[:2] != [0, 0] or widths[-2:] != [0, 0] or len(set(widths[2:6])) != 1
                or str(padded.attrs.pad_mode) != "constant"):
            raise UnsupportedOperatorError(f"{what}: a pad {widths} before the conv")
        extra_pad, pad_value = widths[2], int(float(padded.attrs.pad_value))
        x = padded.args[0]
    if x not in names:
        raise UnsupportedOperatorError(f"{what}: the conv reads {x.name}, not a uint8 tensor")
    a = conv.attrs
    n, h, w, c = static_shape(x)
    problems = []
    if str(a.data_layout) != "NHWC" or str(a.kernel_layout) != "HWIO":
        problems.append(f"layouts {a.data_layout}/{a.kernel_layout} (need NHWC/HWIO)")
    if str(a.out_dtype) != "int32" or str(x.ty.dtype) != "uint8":
        problems.append(f"dtypes {x.ty.dtype} -> {a.out_dtype} (need uint8 -> int32)")
    if not is_constant(weights) or str(const_np(weights).dtype) != "int8":
        problems.append("weights that are not an int8 constant")
    pads, strides = [int(p) for p in a.padding], [int(s) for s in a.strides]
    if len(set(pads)) != 1 or len(set(strides)) != 1 or any(int(d) != 1 for d in a.dilation):
        problems.append(f"padding {pads}, strides {strides}, dilation {list(a.dilation)}")
    elif extra_pad and pads[0]:
        problems.append("both a pad and a conv padding")
    if n != 1:
        problems.append(f"batch {n}")
    if problems:
        raise UnsupportedOperatorError(
            f"{what}: conv2d with {'; '.join(problems)} is not supported on Hexagon"
        )
    wt = const_np(weights)
    kh, kw, ci, o = wt.shape
    groups = int(a.groups)
    if kh != kw or not (groups == 1 or (groups == c == o and ci == 1)):
        raise UnsupportedOperatorError(
            f"{what}: a {kh}x{kw} conv with {groups} groups; Hexagon runs square dense or "
            "depthwise convolutions"
        )
    bias = biased.args[1]
    if not is_constant(bias) or const_np(bias).shape != (o,):
        raise UnsupportedOperatorError(f"{what}: the bias must be an int32 [{o}] constant")
    op = "conv" if groups == 1 else "dwconv"
    lay = Layer(f"{op}{index}", op, (names[x],), h, w, c, o, kh, strides[0],
                pads[0] or extra_pad)
    weights_np = wt if op == "conv" else wt[:, :, 0, :]
    return QLayer(lay, weights_np, const_np(bias).astype(np.int32), rq, pad_value=pad_value)


def _residual_add(graph: _Graph, out, rq_expr, names: dict, index: int):
    """The residual add whose requantization ends in ``rq_expr`` (``right_shift``)."""
    what = out.name
    shifted = graph.producer(rq_expr, "right_shift", what)
    rounded = graph.producer(shifted.args[0], "add", what)
    total = graph.producer(rounded.args[0], "add", what)
    ins, mults = [], []
    for arg in total.args:
        scaled = graph.producer(arg, "multiply", what)
        wide = graph.producer(scaled.args[0], "astype", what)
        if wide.args[0] not in names:
            raise UnsupportedOperatorError(f"{what}: the add reads a tensor that is not uint8")
        ins.append(wide.args[0])
        mults.append(_scalar(scaled.args[1], f"{what}'s multiplier"))
    shift = _scalar(shifted.args[1], f"{what}'s shift")
    offset = _scalar(rounded.args[1], f"{what}'s offset")
    (_, h, w, c), other = static_shape(ins[0]), tuple(static_shape(ins[1]))
    if other not in ((1, h, w, c), (1, 1, 1, c)):
        raise UnsupportedOperatorError(
            f"{what}: adds {static_shape(ins[0])} and {other}; Hexagon adds equal shapes or "
            "a map and a per-channel vector"
        )
    lay = Layer(f"add{index}", "add", tuple(names[v] for v in ins), h, w, c, c)
    return QLayer(lay, None, None, AddRequant(mults[0], mults[1], shift, offset))


def _max_pool(graph: _Graph, out, call, names: dict, index: int):
    a = call.attrs
    x = call.args[0]
    pool, strides, pads = ([int(v) for v in vals] for vals in (a.pool_size, a.strides, a.padding))
    ok = (
        x in names and str(a.layout) == "NHWC" and len(set(pool)) == 1
        and len(set(strides)) == 1 and len(set(pads)) == 1
        and all(int(d) == 1 for d in a.dilation) and not bool(a.ceil_mode)
    )
    if not ok:
        raise UnsupportedOperatorError(
            f"{out.name}: max_pool2d {pool}/{strides}/{pads} layout {a.layout}; Hexagon runs "
            "square NHWC max pools on uint8 tensors"
        )
    _, h, w, c = static_shape(x)
    lay = Layer(f"pool{index}", "pool", (names[x],), h, w, c, c, pool[0], strides[0], pads[0])
    return QLayer(lay, None, None, None)


def _layer_from_call(prims, out, call, names: dict, index: int) -> QLayer:
    """The layer a ``call_tir`` of an NHWC integer compute stands for (its PrimFunc's
    :data:`LAYER_ATTR`), checked against the compute it calls."""
    import tvm_ffi

    gv = call.args[0]
    prim = prims[gv] if prims is not None and gv in prims.get_global_vars() else None
    desc = prim.attrs.get(LAYER_ATTR) if prim is not None and prim.attrs is not None else None
    if desc is None:
        raise UnsupportedOperatorError(
            f"{out.name}: call_tir of {gv.name_hint}, which is not an int8 layer of this form "
            "(read_network needs the module, and the PrimFunc's "
            f"{LAYER_ATTR!r} attribute)", {"call_tir": 1})
    desc = json.loads(str(desc))
    args = list(call.args[1].fields)
    ins, consts = args[: desc["inputs"]], args[desc["inputs"]:]
    if any(v not in names for v in ins) or not all(is_constant(c) for c in consts):
        raise UnsupportedOperatorError(
            f"{out.name}: an int8 {desc['op']} layer must read uint8 tensors, then constants")
    op = desc["op"]
    lay = Layer(f"{op}{index}", op, tuple(names[v] for v in ins), *desc["geometry"])
    consts = [np.array(const_np(c)) for c in consts]
    weights = consts[0] if op in ("conv", "dwconv", "gconv", "lut", "concat") else None
    bias = consts[1] if op in ("conv", "dwconv", "gconv") else None
    q = QLayer(lay, weights, bias, _decode(desc["rq"]), pad_value=desc["pad_value"],
               kind=desc["kind"], params=dict(_decode(desc["params"])))
    want, _ = nhwc_layer(q, [tuple(static_shape(v)) for v in ins])
    if not tvm_ffi.structural_equal(prim.without_attr(LAYER_ATTR),
                                   want.without_attr("global_symbol")):
        raise UnsupportedOperatorError(
            f"{out.name}: {gv.name_hint} does not compute the {op} layer its "
            f"{LAYER_ATTR!r} attribute describes")
    return q


def read_network(module) -> QNetwork:
    """The quantized network of a Relax module (or its ``main``) written as
    :func:`relax_module` does: int8 convs, residual adds, products, lookups and max pools,
    each a pattern of Relax operators ending in a uint8 tensor, the other layers
    ``call_tir`` of their NHWC compute (these need the module), bound uint8 constants as
    operands; anything else raises :class:`UnsupportedOperatorError`."""
    import tvm

    prims, func = (module, module["main"]) if isinstance(module, tvm.IRModule) else (None, module)
    if len(func.params) != 1:
        raise UnsupportedOperatorError(
            f"main takes {len(func.params)} inputs; the Hexagon pipeline compiles one image input"
        )
    graph = _Graph(func)
    names = {func.params[0]: "input"}
    layers, constants = [], {}
    for var in graph.order:
        call = graph.values[var]
        op = _op_name(call)
        if is_constant(call) and len(static_shape(call)) == 4 and str(call.ty.dtype) == "uint8":
            name = f"const{len(constants)}"
            constants[name] = np.array(const_np(call))
            graph.used.add(var)
            names[var] = name
            continue
        if op == "call_tir":
            q = _layer_from_call(prims, var, call, names, len(layers))
        elif op == "nn.max_pool2d":
            q = _max_pool(graph, var, call, names, len(layers))
        elif op == "take":
            q = _lookup(graph, var, call, names, len(layers))
        elif op == "astype" and str(call.attrs.dtype) == "uint8":
            clip = graph.producer(call.args[0], "clip", var.name)
            bounds = [int(v.value) for v in clip.args[1:]]
            if bounds != [0, 255]:
                raise UnsupportedOperatorError(f"{var.name}: clip{bounds}, need [0, 255]")
            inner = graph.values.get(clip.args[0])
            if inner is not None and _op_name(inner) == "right_shift":
                q = _residual_add(graph, var, clip.args[0], names, len(layers))
            else:
                q = _conv(graph, var, clip.args[0], names, len(layers))
        else:
            continue
        graph.used.add(var)
        names[var] = q.layer.name
        layers.append(q)
    left = [v for v in graph.order if v not in graph.used]
    out = func.body.body
    if left or out not in names or not layers:
        ops: dict = {}
        for v in left:
            ops[_op_name(graph.values[v])] = ops.get(_op_name(graph.values[v]), 0) + 1
        raise UnsupportedOperatorError(
            "the Hexagon pipeline compiles the int8 form of tvm_cocopie.hexagon.relax_graph; "
            f"not compiled: {ops or 'no layer'}",
            ops,
        )
    _, h, w, c = static_shape(func.params[0])
    return QNetwork(layers, None, 1.0, 1.0, constants=constants, input_shape=(h, w, c))


# ------------------------------------------------------------------ the pass


# ------------------------------------------------------------------ back to a program


def program_of(mod) -> tuple:
    """``(funcs, calls, inputs, output, aliases)`` of a rewritten (and possibly
    scheduled) module: the PrimFuncs ``main`` calls, in order, constants as inputs, and
    each reshape as an alias of its source (give :func:`.executor.plan_memory`'s
    offsets to :func:`tvm_cocopie.emulation.hexagon.run`)."""
    from tvm import relax

    mod = relax.transform.RewriteDataflowReshape()(mod)  # legalized reshapes are views
    func = mod["main"]
    names, inputs, funcs, calls, aliases = {func.params[0]: "image"}, {}, {}, [], {}

    def name_of(expr):
        if is_constant(expr):
            key = f"const{len(inputs)}"
            inputs[key] = np.array(const_np(expr))
            return key
        return names[expr]

    for block in func.body.blocks:
        for b in block.bindings:
            value = b.value
            op = _op_name(value)
            if op == "reshape":
                names[b.var] = b.var.name
                aliases[b.var.name] = names[value.args[0]]
            elif op == "call_tir":
                gv, args = value.args[0], value.args[1]
                names[b.var] = b.var.name
                funcs[gv.name_hint] = mod[gv]
                calls.append((gv.name_hint, [name_of(a) for a in args.fields] + [b.var.name]))
            else:
                raise UnsupportedOperatorError(f"{b.var.name}: {op} in a rewritten module")
    return funcs, calls, inputs, names[func.body.body], aliases


def run_program(mod, image: np.ndarray, timeout: float | None = None,
                count_packets: bool = False) -> tuple:
    """Run a module the pipeline has rewritten and scheduled (``run_until(mod, target,
    "schedule")``) under ``qemu-hexagon`` on the quantized NHWC ``image``, with
    :func:`.executor.plan_memory`'s static plan: ``(output integers, packets)``, the
    packets summed over the kernels when ``count_packets`` (else ``None``)."""
    from ..emulation import hexagon as runner
    from .executor.memplan import plan_memory

    funcs, calls, inputs, out, aliases = program_of(mod)
    plan = plan_memory(funcs, calls, [*inputs, "image"], out, aliases)
    res = runner.run(funcs, calls, {"image": np.asarray(image, np.uint8), **inputs}, [out],
                     offsets=plan.offsets, timeout=timeout, count_packets=count_packets)
    return res.outputs[out], (int(sum(res.packets)) if count_packets else None)

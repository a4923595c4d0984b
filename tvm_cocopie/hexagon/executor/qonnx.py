"""A quantized ONNX model as the executor's int8 network: QDQ and QOperator files.

GCD² (seed 004, ch. 4) compiles whole 8-bit models. A user brings them in one of the two
forms ONNX has for quantized graphs (``onnxruntime.quantization.quantize_static`` writes
both, :mod:`tvm_cocopie.ptq` makes one from a float model):

- **QDQ**: float operators between ``DequantizeLinear`` and ``QuantizeLinear`` nodes;
  the integers are the ``QuantizeLinear`` outputs, weights are int8 initializers behind
  a ``DequantizeLinear``;
- **QOperator**: ``QLinearConv``, ``QLinearAdd``, ``QLinearGlobalAveragePool``,
  ``QGemm``, ``QLinearMatMul`` and ``MaxPool`` / ``Flatten`` on the integers.

:func:`read_quantized` reads either into a :class:`.quantization.QNetwork` whose layers
carry the exact integer arithmetic: every scale and zero point of the file becomes a
:class:`~tvm_cocopie.topi.int8.compute.Requant` (conv, FC, pooling) or
:class:`~tvm_cocopie.topi.int8.compute.AddRequant` (add), the input zero point is folded
into the int32 bias (``bias - zx * sum(w)``) and is the value of the padding
(:attr:`.quantization.QLayer.pad_value`). Weights quantized per output channel
(``quantize_static(..., per_channel=True)``: a weight scale per output channel of a
Conv -- dense, depthwise, grouped -- or of a Gemm / MatMul / ``QLinearMatMul`` /
``QGemm``, zero points 0) give a per-channel :class:`~tvm_cocopie.topi.int8.compute.Requant`
(a multiplier and shift per output channel); a per-channel scale along any other axis,
and per-channel weight zero points other than 0, are refused. A global average pool
becomes a depthwise convolution over the whole map with constant weights
(``sum(x - zx) * sx / (HW sy)``; the identity on a 1x1 map with equal parameters), a
fully connected layer a 1x1 convolution of the 1x1 map, ``Flatten`` a view. int8 activations are read in the uint8
domain (``x + 128`` and zero point ``+ 128``: the same real numbers, bit for bit).

What the executor cannot run is refused with every unsupported operator named at once
(:class:`~tvm_cocopie.errors.UnsupportedOperatorError`), with what to do.

Stated difference to ONNX Runtime's arithmetic: ONNX's ``QuantizeLinear`` rounds half to
even in float32; the integer pipeline here rounds half up with a 15-bit fixed-point
multiplier (2**-15 relative), so an output can differ by one step where the float value
falls within ~2**-15 of a half; such steps can grow through later layers (measured in
``scripts/bench_hexagon.py``: ``ort_agreement``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

import numpy as np

from ...errors import ModelError, UnsupportedOperatorError
from ...topi.int8.compute import MULTIPLIER_BITS, SHIFT_RANGE, AddRequant, MulRequant, Requant
from ...topi.int8.sequence import AttentionProduct, LayerNorm, Softmax
from ..selection.networks import Layer
from .quantization import QLayer, QNetwork

log = logging.getLogger(__name__)

#: Unary activations, each a 256-entry table from its input's to its output's quantization
#: (computed in float32, as ONNX Runtime runs them between DequantizeLinear and QuantizeLinear).
UNARY = {
    "HardSigmoid": lambda x, a: np.clip(np.float32(a.get("alpha", 0.2)) * x
                                        + np.float32(a.get("beta", 0.5)), 0, 1),
    "HardSwish": lambda x, a: x * np.clip(x / np.float32(6) + np.float32(0.5), 0, 1),
    "Sigmoid": lambda x, a: np.float32(1) / (np.float32(1) + np.exp(-x)),
    "Tanh": lambda x, a: np.tanh(x),
    "LeakyRelu": lambda x, a: np.where(x >= 0, x, np.float32(a.get("alpha", 0.01)) * x),
    "Relu": lambda x, a: np.maximum(x, np.float32(0)),
    "Erf": lambda x, a: np.vectorize(math.erf)(x.astype(np.float64)).astype(np.float32),
}
#: Binary float operators that become part of a lookup when one operand is a scalar.
SCALAR_BINARY = {
    "Add": lambda x, c: x + c, "Sub": lambda x, c: x - c, "Mul": lambda x, c: x * c,
    "Div": lambda x, c: x / c,
}
#: Views of a sequence map ``[1, 1, S, D]`` (``D = H * dh``) the ONNX tensors take.
VIEWS = ("seq", "split", "heads", "headsT", "scores", "grouped", "groupedT")
#: Operators the reader maps onto the executor's layers, per format.
QDQ_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "Conv", "Add", "Mul", "Sub", "Div", "MaxPool",
    "GlobalAveragePool", "Flatten", "Reshape", "Transpose", "Gemm", "MatMul", "Clip",
    "Softmax", "LayerNormalization", "Gather", "Concat", "Split", "ReduceMean", "AveragePool",
    "Resize", *UNARY,
})
QOPERATOR_OPS = frozenset({
    "QLinearConv", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QGemm",
    "QLinearMatMul", "QLinearSigmoid", "QLinearLeakyRelu",
})

#: Largest requantization scale a 15-bit multiplier with a shift of at least 17 can hold.
MAX_REQUANT_SCALE = (2**MULTIPLIER_BITS - 1) / 2.0 ** SHIFT_RANGE[0]


@dataclass(frozen=True)
class QTensor:
    """A quantized activation: the layer whose output it is, its scale and uint8-domain
    zero point, its NHWC map shape without the batch ``(h, w, c)``; for a sequence, how the
    ONNX tensor views the map (:data:`VIEWS`) and the number of heads."""

    layer: str
    scale: float
    zp: int
    shape: tuple
    view: str | None = None
    heads: int = 0


def to_nhwc(a: np.ndarray, view: str | None) -> np.ndarray:
    """An ONNX integer tensor of the given view as the NHWC map the executor holds
    (int8 values shifted into the uint8 domain)."""
    a = a.astype(np.int32) + (128 if a.dtype == np.int8 else 0)
    if view in ("heads", "scores"):  # [1, H, S, x] -> [1, 1, S, H*x]
        return a.transpose(0, 2, 1, 3).reshape(1, 1, a.shape[2], -1)
    if view == "headsT":  # [1, H, dh, S]
        return a.transpose(0, 3, 1, 2).reshape(1, 1, a.shape[3], -1)
    if view in ("seq", "split"):
        return a.reshape(1, 1, a.shape[-3] if view == "split" else a.shape[-2], -1)
    if a.ndim == 4:
        return a.transpose(0, 2, 3, 1)
    return a.reshape(1, 1, 1, -1)


def is_quantized(model) -> bool:
    """Whether an ONNX model holds quantized operators (QDQ or QOperator)."""
    ops = {n.op_type for n in model.graph.node}
    return bool(ops & (QOPERATOR_OPS | {"QuantizeLinear", "DequantizeLinear"}))


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _centred(raw: np.ndarray, zp: int, node) -> np.ndarray:
    """8-bit weights minus their zero point, which must stay inside int8."""
    w = raw.astype(np.int64) - zp
    if w.min() < -128 or w.max() > 127:
        raise UnsupportedOperatorError(
            f"{node.name}: weights minus their zero point {zp} leave int8; quantize weights "
            "as symmetric int8 (weight_type=QInt8)", {node.op_type: 1})
    return w


def _table(x, sy: float, zy: int, funcs=()) -> np.ndarray:
    """The 256-entry table from ``x``'s quantization to ``(sy, zy)`` through the float
    functions ``funcs`` (applied in float32, as ONNX Runtime runs them between
    DequantizeLinear and QuantizeLinear)."""
    real = (np.arange(256, dtype=np.float32) - np.float32(x.zp)) * np.float32(x.scale)
    for f in funcs:
        real = np.asarray(f(real), dtype=np.float32)
    return np.clip(np.rint(real / np.float32(sy)) + zy, 0, 255).astype(np.uint8)


def _broadcast_pair(node, a, b, verb: str):
    """``(a, b)`` of an add/product with the per-channel vector (a 1x1 map) second,
    shapes checked: equal, or a map by a vector of its channels."""
    if a.shape[:2] == (1, 1) and b.shape[:2] != (1, 1):
        a, b = b, a
    if not (a.shape == b.shape or (b.shape[:2] == (1, 1) and b.shape[2] == a.shape[2])):
        raise UnsupportedOperatorError(
            f"{node.name}: {verb} {a.shape} and {b.shape}; the executor takes equal shapes or a "
            "map and a per-channel vector", {node.op_type: 1})
    return a, b


def _same(a, b) -> bool:
    """Equal scales (floats, or per-channel arrays element by element) up to float32."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.all(np.abs(a - b) <= 1e-6 * np.maximum(np.abs(a), np.abs(b))))


def _label(node) -> str:
    return node.name or node.op_type


class _Reader:
    """One pass over the graph in node order (ONNX graphs are topologically sorted)."""

    def __init__(self, model, image_size):
        from onnx import numpy_helper

        self.graph = model.graph
        self.image_size = image_size
        self.inits = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        self.q: dict = {}  # integer tensor name -> QTensor
        self.dq: dict = {}  # float tensor name -> the QTensor it dequantizes
        self.consts: dict = {}  # float tensor name -> (integer array, scale, zero point)
        self.const_axes: dict = {}  # ... of a constant quantized per channel: its axis
        self.pending: dict = {}  # float output of an op -> (node, relu/clip node or None)
        self.layers: list = []
        self.names: set = set()
        self.input_q: QTensor | None = None
        self.tensor_names: dict = {}  # layer -> (ONNX name of its integer output, view)
        self.constants: dict = {}  # constant operands, uint8 NHWC
        self.chains: dict = {}  # float tensor -> (QTensor, [float functions]) before a Q
        self.embedding = None

    # ------------------------------------------------------------------ helpers

    def scalar(self, name: str, node, what: str):
        if name not in self.inits:
            raise ModelError(f"{node.name or node.op_type}: the {what} {name!r} is not an "
                             "initializer; the Hexagon reader needs constant quantization "
                             "parameters")
        value = self.inits[name]
        if value.size != 1:
            raise UnsupportedOperatorError(
                f"{_label(node)}: per-channel {what} ({value.size} values); the Hexagon "
                "executor takes per-channel scales for the weights of Conv, Gemm and MatMul "
                "along their output channels only, and one scale and zero point per "
                "activation tensor", {node.op_type: 1})
        return value.reshape(())

    def zero_point(self, name: str | None, node) -> int:
        """A zero point in the uint8 domain (int8 ones shifted by 128)."""
        if not name:
            return 0
        z = self.scalar(name, node, "zero point")
        if z.dtype == np.int8:
            return int(z) + 128
        if z.dtype != np.uint8:
            raise UnsupportedOperatorError(
                f"{node.name or node.op_type}: {z.dtype} activations; the Hexagon executor runs "
                "8-bit ones (uint8 or int8)", {node.op_type: 1})
        return int(z)

    def weights(self, name: str, scale_name: str, zp_name: str | None, node, out_axis: int):
        """An 8-bit weight initializer of a QOperator node as int8 values (a uint8 one minus
        its zero point) and its scale: a float, or per output channel (along ``out_axis``
        of the weights) an array (see :meth:`weight_quant`)."""
        if name not in self.inits:
            raise ModelError(f"{node.name}: weights {name!r} are not an initializer")
        for n in (scale_name, zp_name):
            if n and n not in self.inits:
                raise ModelError(f"{_label(node)}: the weight quantization {n!r} is not an "
                                 "initializer; the Hexagon reader needs constant parameters")
        raw = self.inits[name]
        scale = self.inits[scale_name]
        zp = self.inits[zp_name] if zp_name else np.zeros((), raw.dtype)
        sw, zw = self.weight_quant(node, name, raw.shape, scale, zp, out_axis, out_axis)
        return _centred(raw, zw, node), sw

    def weight_quant(self, node, name: str, shape, scale, zp, axis: int, out_axis: int):
        """``(scale, zero point)`` of constant ``name`` of ``shape``, quantized with
        ``scale`` and ``zp`` (arrays) along ``axis``: per tensor a float and an int; per
        channel (more than one scale) a float array over the output channels, which must
        lie along ``out_axis``, and zero point 0 (what ONNX Runtime writes for int8 weights
        quantized per channel)."""
        scale, zp = np.asarray(scale), np.asarray(zp)
        if scale.size == 1 and zp.size == 1:
            return float(scale.reshape(())), int(zp.reshape(()))
        ndim = len(shape)
        axis = axis % ndim if ndim else 0
        what = f"{_label(node)}: {name!r} quantized per channel"
        if out_axis is None or axis != out_axis % max(ndim, 1) or scale.size not in (
                1, shape[axis]):
            raise UnsupportedOperatorError(
                f"{what} along axis {axis} ({scale.size} scales, shape {list(shape)}); the "
                "executor requantizes per output channel: scales along the output channels "
                f"of a Conv, Gemm or MatMul weight (axis {out_axis})", {node.op_type: 1})
        if np.any(zp != 0):
            bad = sorted({int(v) for v in np.ravel(zp)} - {0})[:4]
            raise UnsupportedOperatorError(
                f"{what} with non-zero weight zero points ({bad}); the Hexagon executor "
                "takes symmetric per-channel weights (zero point 0): quantize the weights as "
                "int8 (weight_type=QInt8, as tvm_cocopie.ptq.quantize_onnx(..., "
                "per_channel=True) does) or per tensor", {node.op_type: 1})
        return np.broadcast_to(scale.astype(np.float64).reshape(-1), (shape[axis],)).copy(), 0

    def name(self, node, op: str) -> str:
        base = node.name or f"{op}{len(self.layers)}"
        name, i = base, 1
        while name in self.names or name == "input":
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def requant(self, scale, zp: int, node) -> Requant:
        """The fixed-point requantization of ``scale`` (a float, or per output channel an
        array; per channel collapses to per tensor where every channel gets the same
        multiplier and shift)."""
        arr = np.asarray(scale, np.float64)
        if not np.all((arr > 0) & (arr <= MAX_REQUANT_SCALE)):
            raise UnsupportedOperatorError(
                f"{node.name}: requantization scale {arr.min():.4g}..{arr.max():.4g} is outside "
                f"(0, {MAX_REQUANT_SCALE:.3g}] (input scale x weight scale / output scale); "
                "recalibrate the model", {node.op_type: 1})
        rq = Requant.from_scale(scale, zp)
        if rq.per_channel and len(set(zip(rq.multiplier, rq.shift))) == 1:
            return Requant(rq.multiplier[0], rq.shift[0], zp)
        return rq

    def activation(self, name: str, node) -> QTensor:
        """The quantized tensor a float input ``name`` of a QDQ op dequantizes."""
        if name in self.dq:
            return self.dq[name]
        raise UnsupportedOperatorError(
            f"{node.name or node.op_type} ({node.op_type}) reads {name!r}, which is not a "
            "dequantized int8 tensor: the model has a float path the Hexagon executor cannot "
            "run (quantize every operator, e.g. with tvm_cocopie.ptq.quantize_onnx)",
            {node.op_type: 1})

    # ------------------------------------------------------------------ layers

    def conv(self, node, x: QTensor, w, sw: float, bias, sb: float, sy: float, zy: int):
        a = _attrs(node)
        o, cg, kh, kw = w.shape
        c = x.shape[2]
        pads = list(a.get("pads", [0, 0, 0, 0]))
        strides = list(a.get("strides", [1, 1]))
        problems = []
        if kh != kw:
            problems.append(f"a {kh}x{kw} kernel")
        if len(set(pads)) != 1 or len(set(strides)) != 1:
            problems.append(f"pads {pads} / strides {strides} that differ per side")
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            problems.append(f"dilations {a['dilations']}")
        auto_pad = a.get("auto_pad", b"NOTSET")
        if auto_pad not in (b"NOTSET", "NOTSET"):
            problems.append(f"auto_pad {auto_pad!r}")
        group = int(a.get("group", 1))
        if group == 1 and cg == c:
            op, hw_weights = "conv", w.transpose(2, 3, 1, 0)
        elif group == c == o and cg == 1:
            op, hw_weights = "dwconv", w[:, 0].transpose(1, 2, 0)
        elif group > 1 and cg * group == c and o % group == 0:
            op, hw_weights = "gconv", w.transpose(2, 3, 1, 0)  # HW, C/g, O
        else:
            op, hw_weights = None, None
            problems.append(f"{group} groups of {cg} channels")
        if problems:
            raise UnsupportedOperatorError(
                f"{node.name}: a convolution with {', '.join(problems)}; the Hexagon executor "
                "runs square dense or depthwise convolutions", {node.op_type: 1})
        out = self._conv_layer(node, op, x, hw_weights, w.reshape(o, -1).sum(1), sw, bias, sb,
                               sy, zy, kh, strides[0], pads[0])
        if op == "gconv":
            q = self.layers[-1]
            q.params["groups"] = group
            q.layer = replace(q.layer, groups=group)
        return out

    def _conv_layer(self, node, op, x: QTensor, hw_weights, wsum, sw, bias, sb, sy, zy,
                    k, s, p, kind=""):
        h, wd, c = x.shape
        o = hw_weights.shape[-1]
        if np.ndim(sw) and np.size(sw) != o:
            raise UnsupportedOperatorError(
                f"{node.name}: {np.size(sw)} per-channel weight scales for {o} output channels",
                {node.op_type: 1})
        acc_scale = x.scale * sw  # per channel: an array over the output channels
        if bias is None:
            b = np.zeros(o, np.int64)
        elif sb is None:  # a float bias: in accumulator units
            b = np.rint(np.asarray(bias, np.float64).reshape(o) / acc_scale).astype(np.int64)
        elif _same(sb, acc_scale):
            b = bias.astype(np.int64)
        else:  # a bias quantized with its own scale: rescaled to the accumulator's
            b = np.rint(bias.astype(np.float64) * sb / acc_scale).astype(np.int64)
        b = b - x.zp * wsum.astype(np.int64)
        if np.abs(b).max(initial=0) >= 2**31:
            raise UnsupportedOperatorError(f"{node.name}: the folded bias overflows int32",
                                           {node.op_type: 1})
        lay = Layer(self.name(node, op), op, (x.layer,), h, wd, c, o, k, s, p)
        rq = self.requant(acc_scale / sy, zy, node)
        self.layers.append(QLayer(lay, hw_weights.astype(np.int8), b.astype(np.int32), rq,
                                  pad_value=x.zp if p else 0, kind=kind))
        oh, ow = lay.out_hw
        return QTensor(lay.name, sy, zy, (oh, ow, o))

    def dense(self, node, x: QTensor, w_kn, sw, bias, sb, sy, zy):
        """A fully connected layer ``[.., K] x [K, N]``: a 1x1 conv over the map (every
        token of a sequence; the one pixel of a flattened vector)."""
        k = x.shape[2]
        if w_kn.shape[0] != k or x.view not in (None, "seq"):
            raise UnsupportedOperatorError(
                f"{node.name}: a {node.op_type} of a {x.shape} map ({x.view or 'plain'}) by "
                f"{list(w_kn.shape)}", {node.op_type: 1})
        out = self._conv_layer(node, "conv", x, w_kn[None, None], w_kn.sum(0), sw, bias, sb,
                               sy, zy, 1, 1, 0, kind="fc")
        return QTensor(out.layer, out.scale, out.zp, out.shape, x.view, x.heads)

    def attention(self, node, a: QTensor, b: QTensor, sy: float, zy: int):
        """``MatMul`` of two activations: ``Q K^T`` or ``P V`` per head."""
        if a.view == "heads" and b.view == "headsT" and a.heads == b.heads:
            kind, view, out_c = "qk", "scores", a.heads * a.shape[1]
        elif a.view == "scores" and b.view == "heads" and a.heads == b.heads:
            kind, view, out_c = "pv", "heads", b.shape[2]
        else:
            raise UnsupportedOperatorError(
                f"{node.name}: a MatMul of two activations viewed as {a.view} and {b.view}; the "
                "executor multiplies attention heads (Q K^T, then P V)", {node.op_type: 1})
        rq = self.requant(a.scale * b.scale / sy, zy, node)
        op = AttentionProduct(kind, a.heads, a.zp, b.zp, rq)
        h, w, c = a.shape
        lay = Layer(self.name(node, kind), "attention", (a.layer, b.layer), h, w, c, out_c)
        self.layers.append(QLayer(lay, None, None, op, kind="attention"))
        return QTensor(lay.name, sy, zy, (h, w, out_c), view, a.heads)

    def _channel_axis(self, node, x: QTensor) -> bool:
        axis = _attrs(node).get("axis", 0)
        return (x.view is None and axis in (1, -3)) or (x.view == "seq" and axis in (-1, 2))

    def concat(self, node, xs: list, sy: float, zy: int):
        """Channel concatenation; each input requantized to the output by a table."""
        h, w, _ = xs[0].shape
        if not all(self._channel_axis(node, x) and x.shape[:2] == (h, w) for x in xs):
            raise UnsupportedOperatorError(
                f"{node.name}: a Concat that is not along the channels of equal maps",
                {"Concat": 1})
        tables = [_table(x, sy, zy) for x in xs]
        c = sum(x.shape[2] for x in xs)
        lay = Layer(self.name(node, "concat"), "concat", tuple(x.layer for x in xs), h, w, c, c)
        self.layers.append(QLayer(lay, np.stack(tables), None, None, kind="concat"))
        return QTensor(lay.name, sy, zy, (h, w, c), xs[0].view, xs[0].heads)

    def split(self, node, x: QTensor, out: str, sy: float, zy: int):
        """One output of a channel ``Split``: a slice (same quantization)."""
        ins = list(node.input)
        sizes = _attrs(node).get("split") or (
            [int(v) for v in self.inits[ins[1]]] if len(ins) > 1 and ins[1] in self.inits else
            None)
        n_out = len(node.output)
        c = x.shape[2]
        sizes = sizes or [c // n_out] * n_out
        k = list(node.output).index(out)
        if not self._channel_axis(node, x) or sum(sizes) != c or not (
                _same(x.scale, sy) and x.zp == zy):
            raise UnsupportedOperatorError(
                f"{node.name}: a Split that is not along the channels, or requantizes",
                {"Split": 1})
        h, w, _ = x.shape
        lay = Layer(self.name(node, "slice"), "slice", (x.layer,), h, w, c, sizes[k])
        self.layers.append(QLayer(lay, None, None, None, kind="split",
                                  params={"offset": sum(sizes[:k])}))
        return QTensor(lay.name, sy, zy, (h, w, sizes[k]), x.view, x.heads)

    def softmax(self, node, x: QTensor, sy: float, zy: int):
        axis = _attrs(node).get("axis", -1)
        length = x.shape[1] if x.view == "scores" else x.shape[2]
        if axis not in (-1, 3 if x.view == "scores" else 2):
            raise UnsupportedOperatorError(f"{node.name}: Softmax over axis {axis}; the "
                                           "executor normalizes the last axis", {"Softmax": 1})
        h, w, c = x.shape
        lay = Layer(self.name(node, "softmax"), "softmax", (x.layer,), h, w, c, c)
        self.layers.append(QLayer(lay, None, None, Softmax.from_scales(length, x.scale, sy, zy),
                                  kind="softmax"))
        return QTensor(lay.name, sy, zy, x.shape, x.view, x.heads)

    def layer_norm(self, node, x: QTensor, sy: float, zy: int):
        a = _attrs(node)
        ins = list(node.input) + [""]
        gamma = self.const_real(ins[1])
        beta = self.const_real(ins[2]) if ins[2] else np.zeros_like(gamma)
        if a.get("axis", -1) not in (-1, 2) or gamma is None or beta is None or x.view not in (
                None, "seq"):
            raise UnsupportedOperatorError(
                f"{node.name}: a LayerNormalization over axis {a.get('axis', -1)} or with computed "
                "scale/bias", {node.op_type: 1})
        h, w, c = x.shape
        op = LayerNorm.from_params(gamma.reshape(-1), beta.reshape(-1), x.zp, sy, zy,
                                   eps=float(a.get("epsilon", 1e-5)), sx=x.scale, d=c)
        lay = Layer(self.name(node, "layernorm"), "layernorm", (x.layer,), h, w, c, c)
        self.layers.append(QLayer(lay, None, None, op, kind="layernorm"))
        return QTensor(lay.name, sy, zy, x.shape, x.view, x.heads)

    def add(self, node, a: QTensor, b: QTensor, sy: float, zy: int):
        a, b = _broadcast_pair(node, a, b, "adds")
        arq = AddRequant.from_scales(a.scale / sy, b.scale / sy, a.zp, b.zp, zy)
        h, w, c = a.shape
        lay = Layer(self.name(node, "add"), "add", (a.layer, b.layer), h, w, c, c)
        self.layers.append(QLayer(lay, None, None, arq))
        return QTensor(lay.name, sy, zy, a.shape, a.view, a.heads)

    def mul(self, node, a: QTensor, b: QTensor, sy: float, zy: int):
        """A product of two tensors of one shape, or of a map by a per-channel vector."""
        a, b = _broadcast_pair(node, a, b, "multiplies")
        self.requant(a.scale * b.scale / sy, zy, node)  # checks the scale
        mrq = MulRequant.from_scales(a.scale, a.zp, b.scale, b.zp, sy, zy)
        h, w, c = a.shape
        lay = Layer(self.name(node, "mul"), "mul", (a.layer, b.layer), h, w, c, c)
        self.layers.append(QLayer(lay, None, None, mrq))
        return QTensor(lay.name, sy, zy, a.shape, a.view, a.heads)

    def lut(self, node, x: QTensor, sy: float, zy: int, funcs=None, kind: str = ""):
        """A unary function of ``x`` (``funcs`` applied in order, in float32, as ONNX
        Runtime evaluates them between DequantizeLinear and QuantizeLinear) as the table of
        its 256 possible inputs."""
        table = _table(x, sy, zy, funcs or [lambda v: UNARY[node.op_type](v, _attrs(node))])
        h, w, c = x.shape
        lay = Layer(self.name(node, "lut"), "lut", (x.layer,), h, w, c, c)
        self.layers.append(QLayer(lay, table, None, None,
                                  kind=kind or node.op_type.lower()))
        return QTensor(lay.name, sy, zy, x.shape, x.view, x.heads)

    def max_pool(self, node, x: QTensor):
        a = _attrs(node)
        k = list(a.get("kernel_shape", []))
        pads = list(a.get("pads", [0] * 4))
        strides = list(a.get("strides", [1, 1]))
        if (len(set(k)) != 1 or len(set(pads)) != 1 or len(set(strides)) != 1
                or a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [1, 1]))):
            raise UnsupportedOperatorError(
                f"{node.name}: MaxPool {k}/{pads}/{strides}; the Hexagon executor runs square "
                "pools with equal pads and strides, no ceil_mode", {"MaxPool": 1})
        h, w, c = x.shape
        lay = Layer(self.name(node, "pool"), "pool", (x.layer,), h, w, c, c, k[0], strides[0],
                    pads[0])
        self.layers.append(QLayer(lay, None, None, None, kind="max_pool"))
        oh, ow = lay.out_hw
        return QTensor(lay.name, x.scale, x.zp, (oh, ow, c))

    def avg_pool(self, node, x: QTensor, sy: float, zy: int):
        """A ``k x k`` average pool as a depthwise conv with constant weights, padded with
        the zero point (``count_include_pad``, or no padding: every window counts k*k)."""
        a = _attrs(node)
        k = list(a.get("kernel_shape", []))
        pads = list(a.get("pads", [0] * 4))
        strides = list(a.get("strides", [1, 1]))
        if (len(set(k)) != 1 or len(set(pads)) != 1 or len(set(strides)) != 1
                or a.get("ceil_mode", 0) or (pads[0] and not a.get("count_include_pad", 0))):
            raise UnsupportedOperatorError(
                f"{node.name}: AveragePool {k}/{pads}/{strides}; the executor averages square "
                "windows with equal pads counted in the divisor", {"AveragePool": 1})
        return self._mean_pool(node, x, k[0], strides[0], pads[0], sy, zy, "avg_pool")

    def resize(self, node, x: QTensor, sy: float, zy: int):
        """Nearest-neighbour upsampling by a whole factor (``floor`` rounding, asymmetric or
        half-pixel coordinates land on the same pixels for whole factors)."""
        a = _attrs(node)
        ins = list(node.input) + ["", "", ""]
        scales = self.inits.get(ins[2]) if ins[2] else None
        sizes = self.inits.get(ins[3]) if ins[3] else None
        h, w, c = x.shape
        if scales is not None and scales.size == 4:
            fy, fx = float(scales[2]), float(scales[3])
        elif sizes is not None and sizes.size == 4:
            fy, fx = sizes[2] / h, sizes[3] / w
        else:
            fy = fx = 0.0
        mode = a.get("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if (mode != "nearest" or fy != fx or fy != int(fy) or fy < 1 or x.view is not None
                or not (_same(x.scale, sy) and x.zp == zy)):
            raise UnsupportedOperatorError(
                f"{node.name}: Resize {mode} by {fy}x{fx}; the executor upsamples by whole "
                "factors, nearest, without requantizing", {"Resize": 1})
        f = int(fy)
        lay = Layer(self.name(node, "resize"), "upsample", (x.layer,), h, w, c, c, f)
        self.layers.append(QLayer(lay, None, None, None, kind="resize", params={"factor": f}))
        return QTensor(lay.name, sy, zy, (h * f, w * f, c))

    def global_pool(self, node, x: QTensor, sy: float, zy: int):
        """``zy + round(sum(x - zx) * sx / (n * sy))`` as a depthwise conv over the map."""
        h, w, _ = x.shape
        if (h, w) == (1, 1) and _same(x.scale, sy) and x.zp == zy:
            return x  # the identity
        if h != w:
            raise UnsupportedOperatorError(
                f"{node.name}: a global pool over a {h}x{w} map; the executor pools square maps",
                {node.op_type: 1})
        return self._mean_pool(node, x, h, 1, 0, sy, zy, "global_pool")

    def _mean_pool(self, node, x: QTensor, k: int, s: int, p: int, sy: float, zy: int,
                   kind: str) -> QTensor:
        """``zy + round(sum(x - zx) * sx / (k*k * sy))`` over ``k x k`` windows: a depthwise
        conv with constant integer weights (as large as the requantization's range needs,
        which keeps it exact), padded with the zero point."""
        h, w, c = x.shape
        scale, weight = x.scale / (sy * k * k), 1
        while scale / weight > MAX_REQUANT_SCALE:
            weight += 1
        bias = np.full(c, -x.zp * k * k * weight, np.int64)
        lay = Layer(self.name(node, "avgpool" if kind == "avg_pool" else "gap"), "dwconv",
                    (x.layer,), h, w, c, c, k, s, p)
        self.layers.append(QLayer(lay, np.full((k, k, c), weight, np.int8),
                                  bias.astype(np.int32), self.requant(scale / weight, zy, node),
                                  pad_value=x.zp if p else 0, kind=kind))
        oh, ow = lay.out_hw
        return QTensor(lay.name, sy, zy, (oh, ow, c))

    # ------------------------------------------------------------------ formats

    def qdq_finish(self, node, out, sy: float, zy: int) -> QTensor:
        """The QDQ op whose float output ``out`` a ``QuantizeLinear`` (``sy``, ``zy``) reads."""
        op_node, act = self.pending.pop(out)
        if act is not None and zy != 0:
            raise UnsupportedOperatorError(
                f"{act.name}: a {act.op_type} before a QuantizeLinear with zero point {zy}; the "
                "executor folds activations into the output range (zero point at its minimum)",
                {act.op_type: 1})
        if act is not None and act.op_type == "Clip":
            top = self._clip_max(act)
            if top is not None and top < (255 - zy) * sy * (1 - 1e-3):
                raise UnsupportedOperatorError(
                    f"{act.name}: Clip at {top} inside the quantized range "
                    f"[0, {(255 - zy) * sy:.4g}]", {"Clip": 1})
        t = op_node.op_type
        ins = op_node.input
        if t == "Conv":
            x = self.activation(ins[0], op_node)
            w, sw = self.const(ins[1], op_node, out_axis=0)
            bias, sb = self.const(ins[2], op_node, 0) if len(ins) > 2 and ins[2] else (None, 1.0)
            return self.conv(op_node, x, w, sw, bias, sb, sy, zy)
        if t == "Gather":
            return self.gather(op_node, sy, zy)
        if t in ("Gemm", "MatMul") and ins[1] in self.dq:
            return self.attention(op_node, self.activation(ins[0], op_node),
                                  self.activation(ins[1], op_node), sy, zy)
        if t in ("Gemm", "MatMul"):
            a = _attrs(op_node)
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise UnsupportedOperatorError(f"{op_node.name}: Gemm with transA/alpha/beta",
                                               {t: 1})
            x = self.activation(ins[0], op_node)
            w, sw = self.const(ins[1], op_node, out_axis=0 if a.get("transB", 0) else 1)
            if sw is None:
                raise UnsupportedOperatorError(f"{op_node.name}: float weights {ins[1]!r}; "
                                               "quantize the model's weights", {t: 1})
            w = w.T if a.get("transB", 0) else w
            bias, sb = self.const(ins[2], op_node, 0) if len(ins) > 2 and ins[2] else (None, 1.0)
            return self.dense(op_node, x, w, sw, bias, sb, sy, zy)
        if t in ("Add", "Mul"):
            ops = []
            for name in ins[:2]:
                ops.append(self.dq.get(name) or name)
            like = next((o for o in ops if isinstance(o, QTensor)), None)
            if like is None:
                raise UnsupportedOperatorError(f"{op_node.name}: {t} of two constants", {t: 1})
            a, b = (o if isinstance(o, QTensor) else self.const_operand(o, op_node, like)
                    for o in ops)
            return (self.add if t == "Add" else self.mul)(op_node, a, b, sy, zy)
        if t == "Concat":
            return self.concat(op_node, [self.activation(n, op_node) for n in ins], sy, zy)
        if t == "AveragePool":
            return self.avg_pool(op_node, self.activation(ins[0], op_node), sy, zy)
        if t == "Resize":
            return self.resize(op_node, self.activation(ins[0], op_node), sy, zy)
        if t == "Split":
            return self.split(op_node, self.activation(ins[0], op_node), out, sy, zy)
        if t == "ReduceMean":
            x = self.activation(ins[0], op_node)
            axes = _attrs(op_node).get("axes") or (
                [int(v) for v in self.inits[ins[1]]] if len(ins) > 1 and ins[1] in self.inits
                else None)
            if x.view is not None or sorted(a % 4 for a in (axes or [])) != [2, 3]:
                raise UnsupportedOperatorError(
                    f"{op_node.name}: ReduceMean over axes {axes}; the executor averages over "
                    "the spatial axes", {t: 1})
            return self.global_pool(op_node, x, sy, zy)
        if t == "Softmax":
            return self.softmax(op_node, self.activation(ins[0], op_node), sy, zy)
        if t == "LayerNormalization":
            return self.layer_norm(op_node, self.activation(ins[0], op_node), sy, zy)
        if t == "GlobalAveragePool":
            return self.global_pool(op_node, self.activation(ins[0], op_node), sy, zy)
        x = self.activation(ins[0], op_node)  # MaxPool, Flatten, Reshape, Transpose
        if not (_same(x.scale, sy) and x.zp == zy):
            raise UnsupportedOperatorError(
                f"{op_node.name}: {t} requantizes ({x.scale:.4g}, {x.zp}) -> ({sy:.4g}, {zy})",
                {t: 1})
        return self.max_pool(op_node, x) if t == "MaxPool" else self.view(op_node, x)

    def gather(self, node, sy: float, zy: int):
        """The token embedding: rows of a quantized table at the input ids (gathered on
        the host: the network's input is the ``[1, 1, S, D]`` map of embeddings)."""
        table_name, ids = node.input[0], node.input[1]
        if table_name not in self.consts or _attrs(node).get("axis", 0) != 0:
            raise UnsupportedOperatorError(f"{node.name}: a Gather that is not an embedding "
                                           "lookup of a quantized table", {"Gather": 1})
        raw, scale, zp = self.scalar_const(table_name, node)
        shift = 128 if raw.dtype == np.int8 else 0
        if not (_same(scale, sy) and zp + shift == zy) or raw.ndim != 2:
            raise UnsupportedOperatorError(f"{node.name}: the embedding is requantized",
                                           {"Gather": 1})
        inp = next(i for i in self.graph.input if i.name == ids)
        dims = [d.dim_value or None for d in inp.type.tensor_type.shape.dim]
        if len(dims) != 2 or not dims[1] or dims[0] not in (1, None):
            raise ModelError(f"input {ids} is not [1, S] token ids: dims {dims}")
        self.embedding = (raw.astype(np.int32) + shift).astype(np.uint8)
        self.input_q = QTensor("input", sy, zy, (1, dims[1], raw.shape[1]), "seq")
        self.input_name = ids
        return self.input_q

    def view(self, node, x: QTensor):
        """``Flatten`` / ``Reshape`` / ``Transpose``: the same bytes seen as another ONNX
        tensor (a 1x1 map flattened; a sequence split into heads and back)."""
        t = node.op_type
        h, w, c = x.shape
        target = ([int(v) for v in self.inits.get(node.input[1], np.array([]))]
                  if t == "Reshape" and len(node.input) > 1 else [])
        if t == "Reshape" and x.view is None and len(target) == 5 and target[1] > 0 \
                and target[1] * target[2] == c:
            return QTensor(x.layer, x.scale, x.zp, x.shape, "grouped", target[1])
        if t == "Transpose" and x.view == "grouped" and \
                list(_attrs(node).get("perm", [])) == [0, 2, 1, 3, 4]:
            return QTensor(x.layer, x.scale, x.zp, x.shape, "groupedT", x.heads)
        if t == "Reshape" and x.view == "groupedT" and len(target) == 4:
            lay = Layer(self.name(node, "shuffle"), "shuffle", (x.layer,), h, w, c, c)
            self.layers.append(QLayer(lay, None, None, None, kind="shuffle",
                                      params={"groups": x.heads}))
            return QTensor(lay.name, x.scale, x.zp, x.shape)
        if t == "Flatten" or (t == "Reshape" and (h, w) == (1, 1) and x.view is None):
            if (h, w) != (1, 1):
                raise UnsupportedOperatorError(
                    f"{node.name}: {t} of a {h}x{w} map; the executor flattens 1x1 maps", {t: 1})
            return x
        if t == "Reshape":
            if x.view in ("seq", None) and len(target) == 4 and target[2] > 0 and \
                    target[3] > 0 and target[2] * target[3] == c:
                return QTensor(x.layer, x.scale, x.zp, x.shape, "split", target[2])
            if x.view in ("seq", "split") and len(target) in (2, 3) and target[-1] == c:
                return QTensor(x.layer, x.scale, x.zp, x.shape, "seq", 0)
        if t == "Transpose":
            perm = list(_attrs(node).get("perm", []))
            moves = {("split", (0, 2, 1, 3)): "heads", ("heads", (0, 2, 1, 3)): "split",
                     ("split", (0, 2, 3, 1)): "headsT"}
            view = moves.get((x.view, tuple(perm)))
            if view:
                return QTensor(x.layer, x.scale, x.zp, x.shape, view, x.heads)
        raise UnsupportedOperatorError(
            f"{node.name}: a {t} the executor cannot read as a view of its {x.shape} map "
            f"({x.view or 'plain'})", {t: 1})

    def _clip_bounds(self, node):
        a = _attrs(node)
        lo = float(self.inits[node.input[1]].reshape(())) if len(node.input) > 1 and \
            node.input[1] in self.inits else a.get("min", -np.inf)
        hi = self._clip_max(node)
        return lo, np.inf if hi is None else hi

    def _clip_max(self, node):
        if len(node.input) > 2 and node.input[2]:
            return float(self.inits[node.input[2]].reshape(())) if node.input[2] in self.inits \
                else None
        return _attrs(node).get("max")

    def const(self, name: str, node, out_axis: int | None = None):
        """A constant operand of a conv or FC: ``(integer values, scale)`` behind a
        ``DequantizeLinear`` (8-bit weights minus their zero point, checked to fit int8;
        an int32 bias minus its zero point), or ``(float values, None)`` for a float
        initializer (a bias the quantizer left in float). A constant quantized per channel
        has an array of scales, which must run along ``out_axis`` (its output channels),
        and zero points 0 (:meth:`weight_quant`)."""
        if name in self.consts:
            raw, scale, zp = self.consts[name]
            if np.size(scale) > 1 or np.size(zp) > 1:
                scale, zp = self.weight_quant(node, name, raw.shape, scale, zp,
                                              self.const_axes[name], out_axis)
            if raw.dtype in (np.int8, np.uint8):
                return _centred(raw, zp, node), scale
            return raw.astype(np.int64) - zp, scale
        if name in self.inits and self.inits[name].dtype.kind == "f":
            return self.inits[name].astype(np.float64), None
        raise ModelError(f"{node.name}: {name!r} is computed; the executor needs constant weights")

    def scalar_const(self, name: str, node):
        """``(raw, scale, zero point)`` of a constant quantized per tensor (refused per
        channel: an operand that is not a conv's or FC's weights)."""
        raw, scale, zp = self.consts[name]
        if np.size(scale) > 1 or np.size(zp) > 1:
            raise UnsupportedOperatorError(
                f"{_label(node)}: {name!r} is quantized per channel; the executor takes "
                "per-channel scales for Conv, Gemm and MatMul weights only", {node.op_type: 1})
        return raw, float(np.reshape(scale, ())), int(np.reshape(zp, ()))

    def const_real(self, name: str):
        """The real values of a constant (dequantized, per tensor or per channel along its
        axis, or a float initializer), else None."""
        if name in self.consts:
            raw, scale, zp = self.consts[name]
            shape = [1] * raw.ndim
            if np.size(scale) > 1 or np.size(zp) > 1:
                shape[self.const_axes[name] % raw.ndim] = -1

            def along(v):
                return np.asarray(v, np.float32).reshape(shape if np.size(v) > 1 else ())

            return (raw.astype(np.float32) - along(zp)) * along(scale)
        if name in self.inits and self.inits[name].dtype.kind == "f":
            return self.inits[name].astype(np.float32)
        return None

    def const_operand(self, name: str, node, like: QTensor) -> QTensor:
        """A quantized constant operand of an add/product as a network constant (uint8
        NHWC): a per-channel vector broadcast over the map, or a whole map."""
        if name not in self.consts or self.consts[name][0].dtype not in (np.int8, np.uint8):
            raise UnsupportedOperatorError(
                f"{node.name}: {node.op_type} with a constant {name!r} that is not 8-bit "
                "quantized", {node.op_type: 1})
        raw, scale, zp = self.scalar_const(name, node)
        shift = 128 if raw.dtype == np.int8 else 0
        h, w, c = like.shape
        flat = raw.astype(np.int32) + shift
        if flat.size == c:
            shape = (1, 1, c)
        elif flat.size == h * w * c and like.view in (None, "seq") and raw.shape[-1] == c:
            shape = (h, w, c)
        else:
            raise UnsupportedOperatorError(
                f"{node.name}: {node.op_type} with a constant of shape {list(raw.shape)} against "
                f"a {like.shape} map", {node.op_type: 1})
        key = f"const{len(self.constants)}"
        self.constants[key] = flat.reshape(1, *shape).astype(np.uint8)
        return QTensor(key, scale, zp + shift, shape, like.view, like.heads)

    def qoperator(self, node) -> QTensor:
        t, ins = node.op_type, list(node.input) + [""] * 9
        sc = self.scalar
        if t == "QLinearConv":
            x = self.q_in(ins[0], node)
            w, sw = self.weights(ins[3], ins[4], ins[5], node, 0)
            bias = self.inits.get(ins[8]) if ins[8] else None
            return self.conv(node, x, w, sw, bias, x.scale * sw, float(sc(ins[6], node, "scale")),
                             self.zero_point(ins[7], node))
        if t in ("QLinearAdd", "QLinearMul"):
            step = self.add if t == "QLinearAdd" else self.mul
            return step(node, self.q_in(ins[0], node), self.q_in(ins[3], node),
                        float(sc(ins[6], node, "scale")), self.zero_point(ins[7], node))
        if t in ("QLinearSigmoid", "QLinearLeakyRelu"):
            op = t[len("QLinear"):]
            return self.lut(node, self.q_in(ins[0], node), float(sc(ins[3], node, "scale")),
                            self.zero_point(ins[4], node),
                            [lambda v: UNARY[op](v, _attrs(node))], op.lower())
        if t == "QLinearGlobalAveragePool":
            if _attrs(node).get("channels_last", 0):
                raise UnsupportedOperatorError(f"{node.name}: channels_last pooling", {t: 1})
            return self.global_pool(node, self.q_in(ins[0], node),
                                    float(sc(ins[3], node, "scale")), self.zero_point(ins[4], node))
        if t in ("QGemm", "QLinearMatMul"):
            a = _attrs(node)
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0:
                raise UnsupportedOperatorError(f"{node.name}: {t} with transA/alpha", {t: 1})
            x = self.q_in(ins[0], node)
            w, sw = self.weights(ins[3], ins[4], ins[5], node, 0 if a.get("transB", 0) else 1)
            w = w.T if a.get("transB", 0) else w
            if t == "QGemm":
                bias, y_s, y_z = ins[6], ins[7], ins[8]
                if not y_s:
                    raise UnsupportedOperatorError(f"{node.name}: QGemm with a float output",
                                                   {t: 1})
            else:
                bias, y_s, y_z = "", ins[6], ins[7]
            b = self.inits.get(bias) if bias else None
            return self.dense(node, x, w, sw, b, x.scale * sw, float(sc(y_s, node, "scale")),
                              self.zero_point(y_z, node))
        x = self.q_in(ins[0], node)  # MaxPool / Flatten / Reshape / Transpose on the integers
        return self.max_pool(node, x) if t == "MaxPool" else self.view(node, x)

    def q_in(self, name: str, node) -> QTensor:
        if name not in self.q:
            raise UnsupportedOperatorError(
                f"{node.name} ({node.op_type}) reads {name!r}, which is not an 8-bit tensor of "
                "the quantized graph", {node.op_type: 1})
        return self.q[name]

    # ------------------------------------------------------------------ the walk

    def image(self, node):
        inp = next(i for i in self.graph.input if i.name == node.input[0])
        dims = [d.dim_value or None for d in inp.type.tensor_type.shape.dim]
        if len(dims) != 4 or dims[0] not in (1, None):
            raise ModelError(f"input {inp.name} is not a single NCHW image: dims {dims}")
        size = self.image_size
        h, w = (size, size) if isinstance(size, int) else (size or (dims[2], dims[3]))
        c = dims[1]
        if not (c and h and w):
            raise ModelError(f"input {inp.name} has symbolic dims {dims}; pass image_size")
        scale = float(self.scalar(node.input[1], node, "scale"))
        zp = self.zero_point(node.input[2] if len(node.input) > 2 else None, node)
        self.input_q = QTensor("input", scale, zp, (h, w, c))
        self.input_name = inp.name
        return self.input_q

    def run(self) -> QNetwork:
        self.check_ops()
        graph_inputs = {i.name for i in self.graph.input} - set(self.inits)
        for node in self.graph.node:
            t, ins = node.op_type, node.input
            if t == "QuantizeLinear" and ins[0] in graph_inputs:
                self.q[node.output[0]] = self.image(node)
            elif t == "QuantizeLinear":
                sy = float(self.scalar(ins[1], node, "scale"))
                zy = self.zero_point(ins[2] if len(ins) > 2 else None, node)
                if ins[0] in self.chains:
                    x, funcs, kind = self.chains.pop(ins[0])
                    out = self.lut(node, x, sy, zy, funcs, kind)
                elif ins[0] in self.pending:
                    out = self.qdq_finish(node, ins[0], sy, zy)
                else:
                    raise UnsupportedOperatorError(
                        f"{node.name}: QuantizeLinear of {ins[0]!r}, which no quantizable "
                        "operator produced", {t: 1})
                self.q[node.output[0]] = out
                self._name(out, node.output[0])
            elif t == "DequantizeLinear" and ins[0] in self.inits:
                self.dequantized_constant(node)
            elif t == "DequantizeLinear":
                self.dq[node.output[0]] = self.q_in(ins[0], node)
            elif t in ("Relu", "Clip") and ins[0] in self.pending and self._foldable(ins[0]):
                op_node, _ = self.pending.pop(ins[0])
                self.pending[node.output[0]] = (op_node, node)
            elif t in QOPERATOR_OPS or (t in ("MaxPool", "Flatten", "Reshape", "Transpose")
                                        and ins[0] in self.q):
                self.q[node.output[0]] = self.qoperator(node)
                self._name(self.q[node.output[0]], node.output[0])
            elif self._chain_step(node):
                continue
            elif t in QDQ_OPS:
                for out in node.output:
                    self.pending[out] = (node, None)
            else:
                raise UnsupportedOperatorError(
                    f"{node.name} ({t}) on {list(ins)} is outside the quantized graph",
                    {t: 1})
        return self.network()

    def dequantized_constant(self, node) -> None:
        """A ``DequantizeLinear`` of an initializer: its integers, scale and zero point
        (floats / ints per tensor, arrays per channel along the node's ``axis``)."""
        ins = list(node.input) + [""]
        for n in ins[1:3]:
            if n and n not in self.inits:
                raise ModelError(f"{_label(node)}: the {n!r} of a constant is not an "
                                 "initializer; the Hexagon reader needs constant parameters")
        scale, zp = self.inits[ins[1]], self.inits[ins[2]] if ins[2] else np.zeros((), np.int64)
        out = node.output[0]
        if scale.size == 1 and zp.size == 1:
            self.consts[out] = (self.inits[ins[0]], float(scale.reshape(())),
                                int(zp.reshape(())))
        else:
            self.consts[out] = (self.inits[ins[0]], scale.astype(np.float64), zp)
            self.const_axes[out] = int(_attrs(node).get("axis", 1))

    def _name(self, t: QTensor, onnx_name: str) -> None:
        if t.layer != "input" and not t.layer.startswith("const"):
            self.tensor_names.setdefault(t.layer, (onnx_name, t.view))

    def _chain_step(self, node) -> bool:
        """A unary float function of a dequantized tensor (or of such a chain): kept to
        become one lookup table at the next QuantizeLinear. Binary operators count when
        the other operand is a scalar constant (``x / 1.41``, ``x + 1``)."""
        t, ins = node.op_type, list(node.input)
        if t in UNARY or t == "Clip":
            src = ins[0]
            if t == "Clip":
                lo, hi = self._clip_bounds(node)
                f = (lambda v, lo=lo, hi=hi: np.clip(v, np.float32(lo), np.float32(hi)))
            else:
                attrs = _attrs(node)
                f = (lambda v, t=t, a=attrs: UNARY[t](v, a))
        elif t in SCALAR_BINARY and len(ins) == 2:
            scalars = [self.const_real(n) for n in ins]
            k = next((i for i, v in enumerate(scalars) if v is not None and v.size == 1), None)
            if k is None:
                return False
            src, c = ins[1 - k], np.float32(scalars[k].reshape(()))
            op = SCALAR_BINARY[t]
            f = ((lambda v, c=c, op=op: op(v, c)) if k == 1 else
                 (lambda v, c=c, op=op: op(np.full_like(v, c), v)))
        else:
            return False
        name = {"Add": "x+c", "Sub": "x-c", "Mul": "x*c", "Div": "x/c"}.get(t, t.lower())
        if src in self.dq:
            base, funcs, kind = self.dq[src], [], name
        elif src in self.chains:
            base, funcs, kind = self.chains.pop(src)
            kind = f"{kind},{name}"
        else:
            return False
        self.chains[node.output[0]] = (base, [*funcs, f], kind)
        return True

    def _foldable(self, name: str) -> bool:
        """Whether a Relu/Clip after the pending op ``name`` folds into its output range
        (after a conv or FC: the output zero point at the minimum does the clip)."""
        return self.pending[name][0].op_type in ("Conv", "Gemm", "MatMul", "Add")

    def check_ops(self):
        bad: dict = {}
        for node in self.graph.node:
            if node.op_type not in QDQ_OPS | QOPERATOR_OPS:
                bad.setdefault(node.op_type, []).append(node.name)
        if bad:
            listed = ", ".join(f"{op} ({len(v)})" for op, v in sorted(bad.items()))
            raise UnsupportedOperatorError(
                f"the Hexagon executor does not run: {listed}. It runs convolutions (dense, "
                "depthwise), adds, products, max and global average pools, fully connected "
                "layers, flatten and the unary activations "
                f"{', '.join(sorted(UNARY))} and Clip, quantized as QDQ or QOperator", bad)
        if self.graph.node and not any(n.op_type == "QuantizeLinear" for n in self.graph.node):
            # (a float model: it has no quantized tensor to start from)
            raise ModelError("the model has no QuantizeLinear on its input; it is not a quantized "
                             "model (tvm_cocopie.ptq.quantize_onnx quantizes a float one)")

    def network(self) -> QNetwork:
        if len(self.graph.output) != 1:
            raise UnsupportedOperatorError(
                f"the model has {len(self.graph.output)} outputs; the executor runs one", {})
        name = self.graph.output[0].name
        out = self.dq.get(name) or self.q.get(name)
        if out is None:
            raise UnsupportedOperatorError(f"the output {name!r} is not a quantized tensor", {})
        if not self.layers or out.layer != self.layers[-1].layer.name:
            raise UnsupportedOperatorError(
                f"the output {name!r} is not the last layer's; the executor returns the last "
                "layer", {})
        return QNetwork(self.layers, None, self.input_q.scale, out.scale, self.input_q.zp, out.zp,
                        self.input_name, out.shape, self.tensor_names, self.constants,
                        self.embedding, self.input_q.shape)


def read_quantized(model, image_size: int | tuple | None = None) -> QNetwork:
    """The int8 network of a QDQ or QOperator ONNX model (see the module doc).

    The network's ``image`` is ``None``: set it (float NHWC) before running.
    """
    net = _Reader(model, image_size).run()
    log.info("quantized model: %d layers (%s)", len(net.layers),
             {op: sum(q.layer.op == op for q in net.layers)
              for op in sorted({q.layer.op for q in net.layers})})
    return net

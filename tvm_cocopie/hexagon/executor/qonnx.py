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
(:attr:`.quantization.QLayer.pad_value`). A global average pool becomes a depthwise
convolution over the whole map with constant weights (``sum(x - zx) * sx / (HW sy)``;
the identity on a 1x1 map with equal parameters), a fully connected layer a 1x1
convolution of the 1x1 map, ``Flatten`` a view. int8 activations are read in the uint8
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
from dataclasses import dataclass

import numpy as np

from ...errors import ModelError, UnsupportedOperatorError
from ...topi.int8.compute import MULTIPLIER_BITS, SHIFT_RANGE, AddRequant, MulRequant, Requant
from ..selection.networks import Layer
from .quantization import QLayer, QNetwork

log = logging.getLogger(__name__)

#: Operators the reader maps onto the executor's layers, per format.
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
}
QDQ_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "Conv", "Add", "Mul", "MaxPool", "GlobalAveragePool",
    "Flatten", "Reshape", "Gemm", "MatMul", "Clip", *UNARY,
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
    zero point, its NHWC shape without the batch ``(h, w, c)``."""

    layer: str
    scale: float
    zp: int
    shape: tuple


def is_quantized(model) -> bool:
    """Whether an ONNX model holds quantized operators (QDQ or QOperator)."""
    ops = {n.op_type for n in model.graph.node}
    return bool(ops & (QOPERATOR_OPS | {"QuantizeLinear", "DequantizeLinear"}))


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b))


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
        self.pending: dict = {}  # float output of an op -> (node, relu/clip node or None)
        self.layers: list = []
        self.names: set = set()
        self.input_q: QTensor | None = None
        self.tensor_names: dict = {}  # layer -> ONNX name of its integer output

    # ------------------------------------------------------------------ helpers

    def scalar(self, name: str, node, what: str):
        if name not in self.inits:
            raise ModelError(f"{node.name or node.op_type}: the {what} {name!r} is not an "
                             "initializer; the Hexagon reader needs constant quantization "
                             "parameters")
        value = self.inits[name]
        if value.size != 1:
            raise UnsupportedOperatorError(
                f"{node.name or node.op_type}: per-channel {what} ({value.size} values); the "
                "Hexagon executor requantizes per tensor: quantize with per_channel=False "
                "(tvm_cocopie.ptq.quantize_onnx does)", {node.op_type: 1})
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

    def weights(self, name: str, scale_name: str, zp_name: str | None, node):
        """An 8-bit weight initializer as int8 values (a uint8 one minus its zero point)."""
        if name not in self.inits:
            raise ModelError(f"{node.name}: weights {name!r} are not an initializer")
        w = self.inits[name].astype(np.int32)
        scale = float(self.scalar(scale_name, node, "weight scale"))
        zw = int(self.scalar(zp_name, node, "weight zero point")) if zp_name else 0
        w = w - zw
        if w.min() < -128 or w.max() > 127:
            raise UnsupportedOperatorError(
                f"{node.name}: weights minus their zero point {zw} leave int8; quantize weights "
                "as symmetric int8 (weight_type=QInt8)", {node.op_type: 1})
        return w, scale

    def name(self, node, op: str) -> str:
        base = node.name or f"{op}{len(self.layers)}"
        name, i = base, 1
        while name in self.names or name == "input":
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def requant(self, scale: float, zp: int, node) -> Requant:
        if not 0 < scale <= MAX_REQUANT_SCALE:
            raise UnsupportedOperatorError(
                f"{node.name}: requantization scale {scale:.4g} is outside (0, "
                f"{MAX_REQUANT_SCALE:.3g}] (input scale x weight scale / output scale); "
                "recalibrate the model", {node.op_type: 1})
        return Requant.from_scale(scale, zp)

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
        else:
            op, hw_weights = None, None
            problems.append(f"{group} groups of {cg} channels")
        if problems:
            raise UnsupportedOperatorError(
                f"{node.name}: a convolution with {', '.join(problems)}; the Hexagon executor "
                "runs square dense or depthwise convolutions", {node.op_type: 1})
        return self._conv_layer(node, op, x, hw_weights, w.reshape(o, -1).sum(1), sw, bias, sb,
                                sy, zy, kh, strides[0], pads[0])

    def _conv_layer(self, node, op, x: QTensor, hw_weights, wsum, sw, bias, sb, sy, zy,
                    k, s, p, kind=""):
        h, wd, c = x.shape
        o = hw_weights.shape[-1]
        acc_scale = x.scale * sw
        if bias is None:
            b = np.zeros(o, np.int64)
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
        """A fully connected layer ``[1, K] x [K, N]`` as a 1x1 conv of the 1x1 map."""
        h, wd, k = x.shape
        if (h, wd) != (1, 1) or w_kn.shape[0] != k:
            raise UnsupportedOperatorError(
                f"{node.name}: a {node.op_type} of a {h}x{wd}x{k} tensor by {list(w_kn.shape)}; "
                "the Hexagon executor runs fully connected layers on a flattened vector",
                {node.op_type: 1})
        return self._conv_layer(node, "conv", x, w_kn[None, None], w_kn.sum(0), sw, bias, sb,
                                sy, zy, 1, 1, 0, kind="fc")

    def add(self, node, a: QTensor, b: QTensor, sy: float, zy: int):
        if a.shape != b.shape:
            raise UnsupportedOperatorError(
                f"{node.name}: adds {a.shape} and {b.shape}; broadcasting adds are not supported",
                {node.op_type: 1})
        arq = AddRequant.from_scales(a.scale / sy, b.scale / sy, a.zp, b.zp, zy)
        h, w, c = a.shape
        lay = Layer(self.name(node, "add"), "add", (a.layer, b.layer), h, w, c, c)
        self.layers.append(QLayer(lay, None, None, arq))
        return QTensor(lay.name, sy, zy, a.shape)

    def mul(self, node, a: QTensor, b: QTensor, sy: float, zy: int):
        """A product of two tensors of one shape, or of a map by a per-channel vector."""
        if a.shape[:2] == (1, 1) and b.shape[:2] != (1, 1):
            a, b = b, a  # the broadcast operand second
        if not (a.shape == b.shape or (b.shape[:2] == (1, 1) and b.shape[2] == a.shape[2])):
            raise UnsupportedOperatorError(
                f"{node.name}: multiplies {a.shape} by {b.shape}; the executor multiplies equal "
                "shapes or a map by a per-channel vector", {node.op_type: 1})
        self.requant(a.scale * b.scale / sy, zy, node)  # checks the scale
        mrq = MulRequant.from_scales(a.scale, a.zp, b.scale, b.zp, sy, zy)
        h, w, c = a.shape
        lay = Layer(self.name(node, "mul"), "mul", (a.layer, b.layer), h, w, c, c)
        self.layers.append(QLayer(lay, None, None, mrq))
        return QTensor(lay.name, sy, zy, a.shape)

    def lut(self, node, x: QTensor, sy: float, zy: int, op_type: str | None = None):
        """A unary activation as the table of its 256 possible inputs."""
        f = UNARY[op_type or node.op_type]
        real = (np.arange(256, dtype=np.float32) - np.float32(x.zp)) * np.float32(x.scale)
        y = np.rint(f(real, _attrs(node)) / np.float32(sy)) + zy
        table = np.clip(y, 0, 255).astype(np.uint8)
        h, w, c = x.shape
        lay = Layer(self.name(node, "lut"), "lut", (x.layer,), h, w, c, c)
        self.layers.append(QLayer(lay, table, None, None, kind=(op_type or node.op_type).lower()))
        return QTensor(lay.name, sy, zy, x.shape)

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

    def global_pool(self, node, x: QTensor, sy: float, zy: int):
        """``zy + round(sum(x - zx) * sx / (n * sy))`` as a depthwise conv over the map."""
        h, w, c = x.shape
        if (h, w) == (1, 1) and _same(x.scale, sy) and x.zp == zy:
            return x  # the identity
        if h != w:
            raise UnsupportedOperatorError(
                f"{node.name}: a global pool over a {h}x{w} map; the executor pools square maps",
                {node.op_type: 1})
        scale = x.scale / (sy * h * w)
        weight = 1
        while scale / weight > MAX_REQUANT_SCALE:  # an integer weight keeps it exact
            weight += 1
        hw_weights = np.full((h, w, c), weight, np.int8)
        bias = np.full(c, -x.zp * h * w * weight, np.int64)
        lay = Layer(self.name(node, "gap"), "dwconv", (x.layer,), h, w, c, c, h, 1, 0)
        self.layers.append(QLayer(lay, hw_weights, bias.astype(np.int32),
                                  self.requant(scale / weight, zy, node), kind="global_pool"))
        return QTensor(lay.name, sy, zy, (1, 1, c))

    def view(self, node, x: QTensor):
        """``Flatten`` / ``Reshape`` of a 1x1 map to a vector: the same bytes."""
        h, w, _ = x.shape
        if (h, w) != (1, 1):
            raise UnsupportedOperatorError(
                f"{node.name}: {node.op_type} of a {h}x{w} map; the executor flattens 1x1 maps",
                {node.op_type: 1})
        return x

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
            w, sw = self.const(ins[1], op_node)
            bias, sb = self.const(ins[2], op_node) if len(ins) > 2 and ins[2] else (None, 1.0)
            return self.conv(op_node, x, w, sw, bias, sb, sy, zy)
        if t in ("Gemm", "MatMul"):
            a = _attrs(op_node)
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                raise UnsupportedOperatorError(f"{op_node.name}: Gemm with transA/alpha/beta",
                                               {t: 1})
            x = self.activation(ins[0], op_node)
            w, sw = self.const(ins[1], op_node)
            w = w.T if a.get("transB", 0) else w
            bias, sb = self.const(ins[2], op_node) if len(ins) > 2 and ins[2] else (None, 1.0)
            return self.dense(op_node, x, w, sw, bias, sb, sy, zy)
        if t == "Add":
            return self.add(op_node, self.activation(ins[0], op_node),
                            self.activation(ins[1], op_node), sy, zy)
        if t == "Mul":
            return self.mul(op_node, self.activation(ins[0], op_node),
                            self.activation(ins[1], op_node), sy, zy)
        if t in UNARY or t == "Clip":
            x = self.activation(ins[0], op_node)
            if t == "Clip":
                lo, hi = self._clip_bounds(op_node)
                return self._clip_lut(op_node, x, lo, hi, sy, zy)
            return self.lut(op_node, x, sy, zy)
        if t == "GlobalAveragePool":
            return self.global_pool(op_node, self.activation(ins[0], op_node), sy, zy)
        x = self.activation(ins[0], op_node)  # MaxPool, Flatten, Reshape: same parameters
        if not (_same(x.scale, sy) and x.zp == zy):
            raise UnsupportedOperatorError(
                f"{op_node.name}: {t} requantizes ({x.scale:.4g}, {x.zp}) -> ({sy:.4g}, {zy})",
                {t: 1})
        return self.max_pool(op_node, x) if t == "MaxPool" else self.view(op_node, x)

    def _clip_bounds(self, node):
        a = _attrs(node)
        lo = float(self.inits[node.input[1]].reshape(())) if len(node.input) > 1 and \
            node.input[1] in self.inits else a.get("min", -np.inf)
        hi = self._clip_max(node)
        return lo, np.inf if hi is None else hi

    def _clip_lut(self, node, x: QTensor, lo, hi, sy, zy):
        real = (np.arange(256, dtype=np.float32) - np.float32(x.zp)) * np.float32(x.scale)
        y = np.rint(np.clip(real, lo, hi) / np.float32(sy)) + zy
        table = np.clip(y, 0, 255).astype(np.uint8)
        h, w, c = x.shape
        lay = Layer(self.name(node, "lut"), "lut", (x.layer,), h, w, c, c)
        self.layers.append(QLayer(lay, table, None, None, kind="clip"))
        return QTensor(lay.name, sy, zy, x.shape)

    def _clip_max(self, node):
        if len(node.input) > 2 and node.input[2]:
            return float(self.inits[node.input[2]].reshape(())) if node.input[2] in self.inits \
                else None
        return _attrs(node).get("max")

    def const(self, name: str, node):
        """An integer constant behind a ``DequantizeLinear``: ``(values, scale)``."""
        if name in self.consts:
            return self.consts[name]
        if name in self.inits:
            raise UnsupportedOperatorError(
                f"{node.name}: float constant {name!r}; quantize the model's weights "
                "(tvm_cocopie.ptq.quantize_onnx)", {node.op_type: 1})
        raise ModelError(f"{node.name}: {name!r} is computed; the executor needs constant weights")

    def qoperator(self, node) -> QTensor:
        t, ins = node.op_type, list(node.input) + [""] * 9
        sc = self.scalar
        if t == "QLinearConv":
            x = self.q_in(ins[0], node)
            w, sw = self.weights(ins[3], ins[4], ins[5], node)
            bias = self.inits.get(ins[8]) if ins[8] else None
            return self.conv(node, x, w, sw, bias, x.scale * sw, float(sc(ins[6], node, "scale")),
                             self.zero_point(ins[7], node))
        if t in ("QLinearAdd", "QLinearMul"):
            step = self.add if t == "QLinearAdd" else self.mul
            return step(node, self.q_in(ins[0], node), self.q_in(ins[3], node),
                        float(sc(ins[6], node, "scale")), self.zero_point(ins[7], node))
        if t in ("QLinearSigmoid", "QLinearLeakyRelu"):
            return self.lut(node, self.q_in(ins[0], node), float(sc(ins[3], node, "scale")),
                            self.zero_point(ins[4], node), t[len("QLinear"):])
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
            w, sw = self.weights(ins[3], ins[4], ins[5], node)
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
        x = self.q_in(ins[0], node)  # MaxPool / Flatten / Reshape on the integers
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
        c, h, w = dims[1], self.image_size or dims[2], self.image_size or dims[3]
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
                if ins[0] not in self.pending:
                    raise UnsupportedOperatorError(
                        f"{node.name}: QuantizeLinear of {ins[0]!r}, which no quantizable "
                        "operator produced", {t: 1})
                self.q[node.output[0]] = self.qdq_finish(
                    node, ins[0], float(self.scalar(ins[1], node, "scale")),
                    self.zero_point(ins[2] if len(ins) > 2 else None, node))
                self.tensor_names.setdefault(self.q[node.output[0]].layer, node.output[0])
            elif t == "DequantizeLinear" and ins[0] in self.inits:
                zp = ins[2] if len(ins) > 2 and ins[2] else None
                values = self.inits[ins[0]]
                if values.dtype in (np.int8, np.uint8):
                    self.consts[node.output[0]] = self.weights(ins[0], ins[1], zp, node)
                else:  # an int32 bias
                    self.consts[node.output[0]] = (
                        values.astype(np.int64) - (int(self.scalar(zp, node, "zero point"))
                                                   if zp else 0),
                        float(self.scalar(ins[1], node, "scale")))
            elif t == "DequantizeLinear":
                self.dq[node.output[0]] = self.q_in(ins[0], node)
            elif t in ("Relu", "Clip") and ins[0] in self.pending and self._foldable(ins[0]):
                op_node, _ = self.pending.pop(ins[0])
                self.pending[node.output[0]] = (op_node, node)
            elif t in QOPERATOR_OPS or (t in ("MaxPool", "Flatten", "Reshape") and ins[0] in self.q):
                self.q[node.output[0]] = self.qoperator(node)
                self.tensor_names.setdefault(self.q[node.output[0]].layer, node.output[0])
            elif t in QDQ_OPS:
                self.pending[node.output[0]] = (node, None)
            else:
                raise UnsupportedOperatorError(
                    f"{node.name} ({t}) on {list(ins)} is outside the quantized graph",
                    {t: 1})
        return self.network()

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
                "depthwise), adds, max and global average pools, fully connected layers and "
                "flatten, quantized as QDQ or QOperator", bad)
        if self.graph.node and not any(n.op_type == "QuantizeLinear" for n in self.graph.node):
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
                        self.input_name, out.shape, self.tensor_names)


def read_quantized(model, image_size: int | None = None) -> QNetwork:
    """The int8 network of a QDQ or QOperator ONNX model (see the module doc).

    The network's ``image`` is ``None``: set it (float NHWC) before running.
    """
    net = _Reader(model, image_size).run()
    log.info("quantized model: %d layers (%s)", len(net.layers),
             {op: sum(q.layer.op == op for q in net.layers)
              for op in sorted({q.layer.op for q in net.layers})})
    return net

"""Quantization of a float layer graph to int8 (per-tensor scales), and its numpy references (seed 004, §4.4.4)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ...errors import CocopieError
from ...topi.int8 import reference
from ...topi.int8.compute import AddRequant, Requant
from ..selection.networks import Layer

log = logging.getLogger(__name__)


@dataclass
class QLayer:
    """A quantized layer: the layer, int8 weights, int32 bias, requantization
    (:class:`tvm_cocopie.topi.int8.compute.AddRequant` for a residual add; none for a max pool)."""

    layer: Layer
    weights: np.ndarray  # int8, HWIO (conv) or HWC (dwconv)
    bias: np.ndarray  # int32
    rq: Requant | AddRequant | None
    float_weights: np.ndarray = None
    float_bias: np.ndarray = None
    #: the input's zero point (a conv's padding holds it; folded into ``bias``)
    pad_value: int = 0
    #: the model operator this layer runs (``fc``, ``global_pool``, ...); default ``layer.op``
    kind: str = ""
    #: what a data-movement layer needs: a slice's ``offset``, a shuffle's ``groups``
    params: dict = field(default_factory=dict)

    @property
    def op_class(self) -> str:
        """What the layer is in the model, for reports (``conv``, ``fc``, ``global_pool``...)."""
        return self.kind or self.layer.op


@dataclass
class QNetwork:
    """A quantized DAG, its input and output quantization and its float input."""

    layers: list
    image: np.ndarray  # float [1, H, W, C] in [0, 1)
    input_scale: float
    output_scale: float
    input_zero_point: int = 0
    output_zero_point: int = 0
    #: the ONNX model's input name and the output's ``(h, w, c)``, when read from a file
    input_name: str = "input"
    output_shape: tuple = ()
    #: layer name -> ``(ONNX tensor holding its integer output, view)`` (a file's network;
    #: the view says how the ONNX tensor maps onto the NHWC map: :func:`.qonnx.to_nhwc`)
    tensor_names: dict = field(default_factory=dict)
    #: constant operands (name -> uint8 NHWC array), named in layers' inputs
    constants: dict = field(default_factory=dict)
    #: a token embedding table (uint8 ``[vocab, D]``): the input is token ids, gathered
    #: into the ``[1, 1, S, D]`` map on the host
    embedding: np.ndarray | None = None
    #: ``(h, w, c)`` of the input map (default: the first layer's)
    input_shape: tuple | None = None

    @property
    def image_q(self) -> np.ndarray:
        """The input image quantized to uint8 with the input scale and zero point (ties
        to even, as ONNX's ``QuantizeLinear``); token ids gathered from the embedding."""
        return self.quantize_input(self.image)

    def quantize_input(self, image) -> np.ndarray:
        """A float NHWC ``image`` quantized as the network's input (token ids: their
        embedding rows, already quantized)."""
        if self.embedding is not None:
            ids = np.asarray(image).reshape(-1)
            return self.embedding[ids][None, None]
        q = np.rint(np.asarray(image, dtype=np.float32) / np.float32(self.input_scale))
        return np.clip(q + self.input_zero_point, 0, 255).astype(np.uint8)

    def dequantize_output(self, y) -> np.ndarray:
        """The uint8 output ``y`` as the real numbers it stands for."""
        return (y.astype(np.float32) - self.output_zero_point) * np.float32(self.output_scale)


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


def layer_sources(lay: Layer, prev: str) -> tuple:
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
    forward pass. A residual add gets an :class:`tvm_cocopie.topi.int8.compute.AddRequant`; a max pool
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
        srcs = layer_sources(lay, prev)
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
    acts, prev = {"input": image, **net.constants}, "input"
    for q in net.layers:
        srcs = layer_sources(q.layer, prev)
        acts[q.layer.name] = step(q, *(acts[n] for n in srcs))
        prev = q.layer.name
    return acts[prev]


def reference_step(q: QLayer, x, *others):
    """One layer of the numpy int8 reference on its uint8 NHWC input(s)."""
    lay = q.layer
    other = others[0] if others else None
    if lay.op == "concat":  # each input through its requantization table
        return np.concatenate([t[v] for t, v in zip(q.weights, (x, *others))], axis=-1)
    if lay.op == "upsample":
        f = q.params["factor"]
        return x.repeat(f, axis=1).repeat(f, axis=2)
    if lay.op == "gconv":
        return reference.qgroup_conv2d_nhwc(x, q.weights, q.bias, q.rq, q.params["groups"],
                                            lay.s, lay.p, q.pad_value)
    if lay.op == "slice":
        return x[..., q.params["offset"]: q.params["offset"] + lay.o]
    if lay.op == "shuffle":
        g = q.params["groups"]
        n, h, w, c = x.shape
        return x.reshape(n, h, w, g, c // g).transpose(0, 1, 2, 4, 3).reshape(n, h, w, c)
    if lay.op == "conv":
        return reference.qconv2d_nhwc(x, q.weights, q.bias, q.rq, lay.s, lay.p, q.pad_value)
    if lay.op == "dwconv":
        return reference.qdepthwise_conv2d_nhwc(x, q.weights, q.bias, q.rq, lay.s, lay.p,
                                                q.pad_value)
    if lay.op in ("add", "mul", "attention"):
        return q.rq.numpy(x, other)
    if lay.op in ("softmax", "layernorm"):
        return q.rq.numpy(x)
    if lay.op == "lut":
        return q.weights[x]
    return reference.maxpool_nhwc(x, lay.k, lay.s, lay.p)


def reference_forward(net: QNetwork) -> np.ndarray:
    """The numpy int8 reference of the whole network."""
    return _forward(net, net.image_q, reference_step)


def float_forward(net: QNetwork) -> np.ndarray:
    """The float network's output on its image (numpy, the model the int8 one approximates)."""
    return _forward(
        net, net.image,
        lambda q, x, other=None: _float_layer(x, q.layer, q.float_weights, q.float_bias, other),
    )

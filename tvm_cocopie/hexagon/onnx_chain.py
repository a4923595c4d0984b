"""Read the leading conv chain of an ONNX CNN for the Hexagon executor (seed 004, §4.4.4).

GCD² takes whole models; our static executor (:mod:`.executor`) runs chains of
convolutions and depthwise convolutions. :func:`conv_chain` walks an NCHW ONNX graph
from its input and collects ``Conv`` (dense or depthwise), folding a following
``BatchNormalization`` into the conv and treating ``Relu`` / ``Clip(0, ...)`` as the
uint8 activation, until the first operator it cannot run or the first tensor read
twice (a residual branch); it says where it stopped and why.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import ModelError
from .networks import Layer

log = logging.getLogger(__name__)


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_chain(model, image_size: int | None = None, max_layers: int | None = None):
    """``(layers, weights, stopped)`` of the model's leading conv chain.

    ``layers`` are :class:`.networks.Layer` (NHWC, input first), ``weights`` maps layer
    names to float ``(w, b)`` (HWIO or HWC), ``stopped`` says why the walk ended.
    """
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if not inputs:
        raise ModelError("the ONNX graph has no non-initializer input")
    dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim]
    if len(dims) != 4:
        raise ModelError(f"input {inputs[0].name} is not NCHW: dims {dims}")
    c = dims[1]
    h = image_size or dims[2] or 224
    w = image_size or dims[3] or 224
    consumers: dict = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    layers = [Layer("input", "input", (), h, w, c, c)]
    weights: dict = {}
    cur = inputs[0].name
    stopped = "end of graph"
    while True:
        users = consumers.get(cur, [])
        if len(users) != 1:
            stopped = "end of graph" if not users else f"{cur} is read {len(users)} times"
            break
        node = users[0]
        if max_layers is not None and len(layers) > max_layers and node.op_type == "Conv":
            stopped = f"max_layers={max_layers}"
            break
        if node.op_type == "Conv":
            a = _attrs(node)
            wt = inits.get(node.input[1])
            if wt is None:
                stopped = f"{node.name}: weights are not an initializer"
                break
            o, cin_g, kh, kw = wt.shape
            group = a.get("group", 1)
            pads = a.get("pads", [0, 0, 0, 0])
            strides = a.get("strides", [1, 1])
            if kh != kw or len(set(pads)) != 1 or strides[0] != strides[1]:
                stopped = f"{node.name}: non-square kernel, padding or stride"
                break
            if a.get("dilations", [1, 1]) != [1, 1]:
                stopped = f"{node.name}: dilated conv"
                break
            prev = layers[-1]
            ph, pw = prev.out_hw
            if group == 1:
                op, wf = "conv", wt.transpose(2, 3, 1, 0)
            elif group == prev.o == o and cin_g == 1:
                op, wf = "dwconv", wt[:, 0].transpose(1, 2, 0)
            else:
                stopped = f"{node.name}: grouped conv with {group} groups"
                break
            b = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else np.zeros(o)
            lay = Layer(node.name, op, (prev.name,), ph, pw, prev.o, o, kh, strides[0], pads[0])
            layers.append(lay)
            weights[lay.name] = [wf.astype(np.float64), b.astype(np.float64)]
        elif node.op_type == "BatchNormalization" and layers[-1].op in ("conv", "dwconv"):
            gamma, beta, mean, var = (inits[n].astype(np.float64) for n in node.input[1:5])
            scale = gamma / np.sqrt(var + _attrs(node).get("epsilon", 1e-5))
            wf, b = weights[layers[-1].name]
            weights[layers[-1].name] = [wf * scale, (b - mean) * scale + beta]
        elif node.op_type in ("Relu", "Clip") and layers[-1].op in ("conv", "dwconv"):
            pass  # the uint8 activation clips at 0; Clip's upper bound is not modelled
        else:
            stopped = f"{node.name}: {node.op_type} is not supported by the executor"
            break
        cur = node.output[0]
    if len(layers) == 1:
        raise ModelError(f"no convolution at the start of the model ({stopped})")
    log.info("conv chain of %d layers; stopped: %s", len(layers) - 1, stopped)
    return layers, {k: tuple(v) for k, v in weights.items()}, stopped

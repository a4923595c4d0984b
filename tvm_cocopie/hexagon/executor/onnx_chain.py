"""Read the leading int8-runnable part of an ONNX CNN for the Hexagon executor (seed 004, §4.4.4).

GCD² takes whole models; our static executor (:mod:`tvm_cocopie.hexagon.executor`) runs DAGs of
convolutions, depthwise convolutions, residual adds and max pools. :func:`conv_chain`
walks an NCHW ONNX graph in node order and collects ``Conv`` (dense or depthwise),
folding a following ``BatchNormalization`` into the conv, ``Add`` of two such
tensors, ``MaxPool``, and treating ``Relu`` / ``Clip(0, ...)`` as the uint8
activation, until the first operator it cannot run; it says where it stopped and why.
"""

from __future__ import annotations

import logging

import numpy as np

from ...errors import ModelError
from ..selection.networks import Layer

log = logging.getLogger(__name__)


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_chain(model, image_size: int | None = None, max_layers: int | None = None):
    """``(layers, weights, stopped)`` of the model's leading int8-runnable part.

    ``layers`` are :class:`..selection.networks.Layer` (NHWC, input first, each naming its inputs),
    ``weights`` maps conv layer names to float ``(w, b)`` (HWIO or HWC), ``stopped``
    says why the walk ended (the first unsupported operator, ``max_layers`` convs, or
    the end of the graph).
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
    by_name = {"input": layers[0]}
    weights: dict = {}
    produced = {inputs[0].name: "input"}  # ONNX tensor -> layer whose output it is
    stopped = "end of graph"
    for node in graph.node:
        src = [produced.get(n) for n in node.input if n in produced]
        if not src:
            continue  # constant subgraphs
        prev = by_name[src[0]]
        lay, why = None, None
        if node.op_type == "Conv":
            convs = sum(lay.op in ("conv", "dwconv") for lay in layers)
            if max_layers is not None and convs >= max_layers:
                stopped = f"max_layers={max_layers}"
                break
            lay, why = _conv(node, prev, inits, weights)
        elif node.op_type == "BatchNormalization":
            why = _fold_batchnorm(node, prev, inits, weights, consumers)
            if why is None:
                produced[node.output[0]] = prev.name
                continue
        elif node.op_type in ("Relu", "Clip"):
            if prev.op in ("conv", "dwconv", "add"):
                # the uint8 activation clips at 0; Clip's upper bound is not modelled
                produced[node.output[0]] = prev.name
                continue
            why = f"{node.op_type} after {prev.op}"
        elif node.op_type == "Add" and len(src) == 2 and len(node.input) == 2:
            other = by_name[src[1]]
            if prev.out_hw == other.out_hw and prev.o == other.o:
                ph, pw = prev.out_hw
                lay = Layer(node.name or f"add{len(layers)}", "add", tuple(src), ph, pw,
                            prev.o, prev.o)
            else:
                why = "a broadcasting Add"
        elif node.op_type == "MaxPool":
            lay, why = _max_pool(node, prev)
        else:
            why = f"{node.op_type} is not supported by the executor"
        if lay is None:
            stopped = f"{node.name}: {why}"
            break
        layers.append(lay)
        by_name[lay.name] = lay
        produced[node.output[0]] = lay.name
    if len(layers) == 1:
        raise ModelError(f"no convolution at the start of the model ({stopped})")
    log.info("%d layers; stopped: %s", len(layers) - 1, stopped)
    return layers, {k: tuple(v) for k, v in weights.items()}, stopped


def _square(a: dict) -> tuple | None:
    k = a.get("kernel_shape")
    pads = a.get("pads", [0, 0, 0, 0])
    strides = a.get("strides", [1, 1])
    if (k and k[0] != k[1]) or len(set(pads)) != 1 or strides[0] != strides[1]:
        return None
    if a.get("dilations", [1, 1]) != [1, 1] or a.get("auto_pad", b"NOTSET") not in (
        b"NOTSET", "NOTSET"
    ):
        return None
    return pads[0], strides[0]


def _conv(node, prev: Layer, inits: dict, weights: dict):
    a = _attrs(node)
    wt = inits.get(node.input[1])
    if wt is None:
        return None, "weights are not an initializer"
    o, cin_g, kh, kw = wt.shape
    geometry = _square({**a, "kernel_shape": [kh, kw]})
    if geometry is None:
        return None, "non-square kernel, padding or stride, or dilation"
    pad, stride = geometry
    group = a.get("group", 1)
    if group == 1:
        op, wf = "conv", wt.transpose(2, 3, 1, 0)
    elif group == prev.o == o and cin_g == 1:
        op, wf = "dwconv", wt[:, 0].transpose(1, 2, 0)
    else:
        return None, f"grouped conv with {group} groups"
    b = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else np.zeros(o)
    ph, pw = prev.out_hw
    lay = Layer(node.name, op, (prev.name,), ph, pw, prev.o, o, kh, stride, pad)
    weights[lay.name] = [wf.astype(np.float64), b.astype(np.float64)]
    return lay, None


def _fold_batchnorm(node, prev: Layer, inits: dict, weights: dict, consumers: dict):
    """Fold ``node`` into the conv ``prev``; ``None`` on success, else why not."""
    if prev.op not in ("conv", "dwconv") or len(consumers.get(node.input[0], [])) != 1:
        return "a BatchNormalization not directly after a conv"
    gamma, beta, mean, var = (inits[n].astype(np.float64) for n in node.input[1:5])
    scale = gamma / np.sqrt(var + _attrs(node).get("epsilon", 1e-5))
    wf, b = weights[prev.name]
    weights[prev.name] = [wf * scale, (b - mean) * scale + beta]
    return None


def _max_pool(node, prev: Layer):
    a = _attrs(node)
    geometry = _square(a)
    if geometry is None or a.get("ceil_mode", 0):
        return None, "a MaxPool that is not square (or uses ceil_mode)"
    pad, stride = geometry
    ph, pw = prev.out_hw
    k = a["kernel_shape"][0]
    return Layer(node.name or f"pool{k}", "pool", (prev.name,), ph, pw, prev.o, prev.o, k,
                 stride, pad), None

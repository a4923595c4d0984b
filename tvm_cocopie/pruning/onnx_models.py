"""Pattern and connectivity pruning of whole ONNX models, and the layerwise
representation (LR) PatDNN's compiler reads (seed 004, §2.5.1).

:func:`prune_model` takes every 3x3, ungrouped, undilated ``Conv`` whose weight is an
initializer, builds one pattern set over all of them (the most frequent natural
patterns), projects every kernel onto it and prunes the connectivity of every such
layer but the first (PatDNN keeps the first layer's connections: it has 3 input
channels). It returns the pruned model and the LR: per layer its name, shape, the
patterns it uses, kernels kept and the connectivity rate.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import ModelError
from .patterns import detect, pattern_set, project, prune_connectivity

log = logging.getLogger(__name__)


@dataclass
class LayerLR:
    """One pruned conv's entry in the layerwise representation."""

    name: str
    weight: str
    shape: list[int]
    patterns: list[int]  # ids into the model's pattern set
    kernels: int
    connectivity: float
    density: float
    knobs: dict = field(default_factory=dict)  # tuning knobs, filled by the compiler


@dataclass
class ModelLR:
    """The layerwise representation of a pattern-pruned model."""

    pattern_set: list[list[int]]
    connectivity: float
    layers: list[LayerLR]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def prunable_convs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.TensorProto]]:
    """``[(node, weight initializer)]`` of the 3x3, ungrouped, undilated convs whose
    weight is an initializer, in graph order."""
    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in inits:
            continue
        w = inits[node.input[1]]
        dims = list(w.dims)
        if len(dims) != 4 or dims[2:] != [3, 3] or _attr(node, "group", 1) != 1:
            continue
        if any(d != 1 for d in _attr(node, "dilations", [1, 1])):
            continue
        out.append((node, w))
    return out


def prune_model(model: onnx.ModelProto, patterns: int = 8, connectivity: float = 3.6,
                first_exempt: bool = True) -> tuple[onnx.ModelProto, ModelLR]:
    """``(pruned copy of model, its LR)``: every prunable conv (:func:`prunable_convs`)
    projected onto the model's ``patterns`` most frequent natural patterns, and all but
    the first (``first_exempt``) pruned to ``1 / connectivity`` of their kernels."""
    convs = prunable_convs(model)
    if not convs:
        raise ModelError("the model has no 3x3 ungrouped conv with a constant weight to prune; "
                         "pattern pruning applies to 3x3 convs only")
    weights = {w.name: numpy_helper.to_array(w) for _, w in convs}
    pset = pattern_set(weights.values(), patterns)
    index = {p: i for i, p in enumerate(pset)}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    replaced, layers = {}, []
    for k, (node, w) in enumerate(convs):
        if w.name in replaced:
            continue
        arr, _ = project(weights[w.name], pset)
        rate = 1.0 if first_exempt and k == 0 else connectivity
        if rate > 1:
            arr = prune_connectivity(arr, rate)
        replaced[w.name] = arr
        found = detect(arr, max_density=1.0)
        used = sorted({index[p] for p in found.patterns if p in index}) if found else []
        layers.append(LayerLR(node.name or node.output[0], w.name, list(arr.shape), used,
                              found.kernels if found else 0,
                              round(found.connectivity, 3) if found else float("inf"),
                              round(float((arr != 0).mean()), 4)))
    for t in out.graph.initializer:
        if t.name in replaced:
            t.CopyFrom(numpy_helper.from_array(replaced[t.name].astype(np.float32), t.name))
    log.info("pattern-pruned %d convs: %d patterns, connectivity %.1fx", len(layers),
             len(pset), connectivity)
    return out, ModelLR([list(p) for p in pset], connectivity, layers)


__all__ = ["LayerLR", "ModelLR", "prunable_convs", "prune_model"]

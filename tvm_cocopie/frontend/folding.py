"""Fold the shape arithmetic of an ONNX model once its input shapes are fixed.

Exporters (paddle2onnx, torch.onnx) write shape computations into the graph:
``Shape -> Slice -> Concat -> Reshape``. With symbolic input dims they are real
computation; with fixed dims they are constants, but TVM's Relax importer cannot
always see that (``Reshape`` then receives a tensor where it needs a shape, and the
import fails). This pass makes the model's input dims static, runs ONNX shape
inference, and replaces every node whose result is known at compile time — ``Shape``
of a statically-shaped tensor, or any deterministic node whose inputs are all
constants — by an initializer, evaluated with ONNX's own reference implementation
(``onnx.reference``). Nodes with subgraphs and random ops are never folded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from .symbolic_shapes import has_symbolic_inputs, inferred_dims, resolve_reshapes

log = logging.getLogger(__name__)

#: Outputs larger than this many elements stay in the graph (no constant blow-up).
MAX_FOLDED_ELEMENTS = 1 << 20
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct"}


def fix_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs in ``shapes`` have those dims (an int a
    static dim, a string a symbolic dim of that name)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in out.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for d, size in zip(dims, shapes[value.name]):
                d.Clear()
                if isinstance(size, str):
                    d.dim_param = size
                else:
                    d.dim_value = int(size)
    return out


#: Initializers with more elements than this are left out of the copy shape inference
#: reads (weights: only their type and shape matter, shape operands are small).
SHAPE_INFERENCE_MAX_ELEMENTS = 1024


def _light_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    """``model`` with its large initializers turned into typed graph inputs, and their
    names. Shape inference serializes the whole model; without the weights it has the
    same types and shapes to work with and copies megabytes instead of hundreds."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    src, graph = model.graph, light.graph
    graph.name = src.name
    graph.node.extend(src.node)
    graph.input.extend(src.input)
    graph.output.extend(src.output)
    graph.value_info.extend(src.value_info)
    graph.sparse_initializer.extend(src.sparse_initializer)
    inputs = {v.name for v in src.input}
    dropped = set()
    for tensor in src.initializer:
        if int(np.prod(tensor.dims, dtype=np.int64)) <= SHAPE_INFERENCE_MAX_ELEMENTS:
            graph.initializer.append(tensor)
            continue
        dropped.add(tensor.name)
        if tensor.name not in inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
    return light, dropped - inputs


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    light, added = _light_copy(model)
    return {name: dims for name, dims in inferred_dims(light).items()
            if name not in added and all(isinstance(d, int) for d in dims)}


def _evaluate(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" for i in range(len(inputs))]
    clone = onnx.NodeProto()
    clone.CopyFrom(node)
    del clone.input[:]
    clone.input.extend(n if orig else "" for n, orig in zip(names, node.input))
    evaluator = ReferenceEvaluator(clone, opsets={"": opset})
    feeds = {n: v for n, v, orig in zip(names, inputs, node.input) if orig}
    return list(evaluator.run(None, feeds))


def fold_constants(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None,
                   opset: int | None = None, max_rounds: int = 8) -> tuple[onnx.ModelProto, int]:
    """Fix ``shapes`` and fold every compile-time-known node; return (model, nodes folded).

    Folding repeats (up to ``max_rounds``): a folded shape lets shape inference see
    through the ``Reshape`` it feeds, which makes the next ``Shape`` foldable.
    """
    if shapes:
        model = fix_input_shapes(model, shapes)
    total = 0
    symbolic = has_symbolic_inputs(model)
    for _ in range(max_rounds):
        model, folded = _fold_once(model, opset)
        if not folded and symbolic:  # reshapes to computed targets over symbolic dims
            model, folded = resolve_reshapes(model, _light_copy(model)[0])
        total += folded
        if not folded:
            break
    return model, total


def _fold_once(model: onnx.ModelProto, opset: int | None) -> tuple[onnx.ModelProto, int]:
    if opset is None:
        opset = next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), 1)
    static = _static_shapes(model)
    consts = _Constants(model.graph.initializer)
    kept, folded = [], 0
    for node in model.graph.node:
        values = _fold_node(node, consts, static, opset)
        if values is None:
            kept.append(node)
            continue
        folded += 1
        consts.update(zip(node.output, values))
    if not folded:
        return model, 0
    used = {name for node in kept for name in node.input} | {o.name for o in model.graph.output}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    del out.graph.initializer[:]
    out.graph.initializer.extend(consts.tensors(used))
    graph_inputs = [v for v in out.graph.input if v.name in used or v.name not in consts]
    del out.graph.input[:]
    out.graph.input.extend(graph_inputs)
    log.info("folded %d compile-time nodes of %d", folded, len(model.graph.node))
    return out, folded


class _Constants:
    """The model's initializers as numpy arrays, converted only when a node that is
    folded reads them (weights are hundreds of MB), plus the values folded so far."""

    def __init__(self, initializers):
        self._protos = {t.name: t for t in initializers}
        self._arrays: dict[str, np.ndarray] = {}
        self._folded: dict[str, np.ndarray] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._folded or name in self._protos

    def get(self, name: str) -> np.ndarray | None:
        if name in self._folded:
            return self._folded[name]
        if name not in self._protos:
            return None
        if name not in self._arrays:
            self._arrays[name] = numpy_helper.to_array(self._protos[name])
        return self._arrays[name]

    def update(self, pairs) -> None:
        self._folded.update(pairs)

    def tensors(self, used: set[str]) -> list[onnx.TensorProto]:
        """Initializers for the names in ``used``: the original tensors, then the
        folded values."""
        out = [t for name, t in self._protos.items() if name in used and name not in self._folded]
        out += [numpy_helper.from_array(np.asarray(v), name)
                for name, v in self._folded.items() if name in used]
        return out


def _fold_node(node, consts, static, opset) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER_FOLD:
        return None
    if node.op_type == "Constant":
        return _evaluate(node, [], opset)
    if node.op_type == "Shape" and node.input[0] in static:
        shape = np.array(static[node.input[0]], dtype=np.int64)
        start = _int_attr(node, "start", 0)
        end = _int_attr(node, "end", None)
        return [shape[start:end]]
    if node.op_type == "Size" and node.input[0] in static:
        return [np.array(int(np.prod(static[node.input[0]])), dtype=np.int64)]
    if not all((not name) or name in consts for name in node.input):
        return None
    if not node.input:
        return None
    sizes = [static.get(o) for o in node.output]
    if any(s is not None and int(np.prod(s)) > MAX_FOLDED_ELEMENTS for s in sizes):
        return None
    try:
        values = _evaluate(node, [consts.get(n) for n in node.input], opset)
    except Exception as err:  # noqa: BLE001 - the reference cannot run it: leave it to TVM
        log.debug("not folding %s (%s): %s", node.name, node.op_type, err)
        return None
    if any(np.asarray(v).size > MAX_FOLDED_ELEMENTS for v in values):
        return None
    return values


def _int_attr(node, name, default):
    for attr in node.attribute:
        if attr.name == name:
            return int(attr.i)
    return default

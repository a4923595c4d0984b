"""Reshapes whose target shape is computed from symbolic dims, made constant.

Exporters write a reshape that keeps some of its input's dims as a small shape
computation: ``Reshape(x, Concat(Slice(Shape(x), 0, 2), [-1]))`` (Paddle's p2o, PyTorch's
``x.view(x.size(0), x.size(1), -1)``). With static input shapes :mod:`.folding` folds it
to a constant; with a symbolic dim left (a recognizer's width, SOD²'s dynamic models,
thesis chapter 5) the shape stays a tensor computed at run time, the reshape is
*value-determined* (the thesis' Table 5.2), and TVM's importer refuses it ("Reshape
requires the input new shape to be Shape").

This module propagates the shape values symbolically, as SOD²'s constant propagation
does: each element of a shape tensor is an ``int`` or the name of a symbolic dim (ONNX
shape inference names them), through ``Shape``, ``Slice``, ``Gather``, ``Concat``,
``Unsqueeze``, ``Squeeze``, ``Cast``, ``Identity`` and integer arithmetic on known
values. A reshape whose target is then known element by element becomes a constant
target: an element equal to the input's dim at the same axis is written ``0`` (ONNX:
copy that dim), one other symbolic element ``-1`` (inferred from the size), so the op
moves to the shape-determined class and imports. Targets with two unknown elements are
left as they are.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

log = logging.getLogger(__name__)

#: integer element types a shape tensor may have
_INT_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}


def inferred_dims(light: onnx.ModelProto) -> dict[str, list]:
    """Every value's dims after ONNX shape inference on ``light`` (a model without its
    weights): ints, symbolic dims' names, ``None`` for an unnamed unknown dim."""
    inferred = shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    result = {}
    for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        ttype = value.type.tensor_type
        if not ttype.HasField("shape"):
            continue
        result[value.name] = [int(d.dim_value) if d.HasField("dim_value")
                              else (d.dim_param or None) for d in ttype.shape.dim]
    return result


def has_symbolic_inputs(model: onnx.ModelProto) -> bool:
    """Whether a graph input (not an initializer) has a dim that is not a number."""
    inits = {t.name for t in model.graph.initializer}
    return any(not d.HasField("dim_value") for v in model.graph.input if v.name not in inits
               for d in v.type.tensor_type.shape.dim)


class _ShapeValues:
    """Symbolic values of the model's small integer tensors: ``(elements, scalar)``."""

    def __init__(self, model: onnx.ModelProto, dims: dict[str, list]):
        self.dims = dims
        self.values: dict[str, tuple[list, bool]] = {}
        for tensor in model.graph.initializer:
            if tensor.data_type in _INT_TYPES and int(np.prod(tensor.dims)) <= 64:
                self._set_array(tensor.name, numpy_helper.to_array(tensor))

    def _set_array(self, name: str, array: np.ndarray) -> None:
        if array.ndim <= 1:
            self.values[name] = ([int(v) for v in array.reshape(-1)], array.ndim == 0)

    def get(self, name: str):
        return self.values.get(name)

    def ints(self, name: str) -> list[int] | None:
        got = self.values.get(name)
        if got is None or not all(isinstance(v, int) for v in got[0]):
            return None
        return got[0]

    def visit(self, node: onnx.NodeProto) -> None:
        """Record the node's output value when the rules below know it."""
        if node.domain not in ("", "ai.onnx") or not node.output:
            return
        out = self._value(node)
        if out is not None:
            self.values[node.output[0]] = out

    def _value(self, node):
        op, ins = node.op_type, list(node.input)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if op == "Constant" and "value" in attrs:
            array = numpy_helper.to_array(attrs["value"])
            if array.dtype.kind in "iu" and array.size <= 64 and array.ndim <= 1:
                return [int(v) for v in array.reshape(-1)], array.ndim == 0
            return None
        if op == "Shape":
            dims = self.dims.get(ins[0])
            if dims is None or any(d is None for d in dims):
                return None
            start, end = attrs.get("start", 0), attrs.get("end", None)
            return list(dims[start:end]), False
        if op in ("Cast", "Identity"):
            return self.get(ins[0])
        src = self.get(ins[0]) if ins else None
        if op == "Concat":
            parts = [self.get(i) for i in ins]
            if any(p is None for p in parts):
                return None
            return [v for p, _ in parts for v in p], False
        if src is None:
            return None
        values, scalar = src
        if op == "Slice" and not scalar:
            return self._slice(values, ins, attrs)
        if op == "Gather" and not scalar and attrs.get("axis", 0) == 0:
            index = self.get(ins[1])
            if index is None or not all(isinstance(i, int) for i in index[0]):
                return None
            try:
                return [values[i] for i in index[0]], index[1]
            except IndexError:
                return None
        if op == "Unsqueeze" and scalar:
            return values, False
        if op == "Squeeze" and not scalar and len(values) == 1:
            return values, True
        if op in ("Add", "Sub", "Mul", "Div") and len(ins) == 2:
            return self._arith(op, src, self.get(ins[1]))
        return None

    def _slice(self, values: list, ins: list, attrs: dict):
        if len(ins) >= 3:
            starts, ends = self.ints(ins[1]), self.ints(ins[2])
            axes = self.ints(ins[3]) if len(ins) > 3 and ins[3] else [0]
            steps = self.ints(ins[4]) if len(ins) > 4 and ins[4] else [1]
        else:  # opset 1-9: attributes
            starts, ends = attrs.get("starts"), attrs.get("ends")
            axes, steps = attrs.get("axes", [0]), [1]
        if None in (starts, ends, axes, steps) or list(axes) not in ([0], [-1]):
            return None
        return values[slice(starts[0], ends[0], steps[0])], False

    @staticmethod
    def _arith(op: str, lhs, rhs):
        if rhs is None:
            return None
        (a, sa), (b, sb) = lhs, rhs
        if len(a) != len(b) and 1 not in (len(a), len(b)):
            return None
        n = max(len(a), len(b))
        a, b = a * (n // len(a)), b * (n // len(b))
        out = []
        for x, y in zip(a, b):
            if not (isinstance(x, int) and isinstance(y, int)):
                if op == "Mul" and 1 in (x, y):  # x * 1 keeps a symbolic dim
                    out.append(y if x == 1 else x)
                    continue
                return None
            if op == "Div" and y == 0:
                return None
            out.append({"Add": x + y, "Sub": x - y, "Mul": x * y,
                        "Div": int(x / y) if y else 0}[op])
        return out, sa and sb


def constant_target(target: list, data_dims: list | None) -> list[int] | None:
    """The constant ``Reshape`` target equivalent to the symbolic ``target`` on data of
    dims ``data_dims``, or ``None``: a symbolic element equal to the data's dim at the
    same axis copies it (``0``), a single other one is inferred (``-1``)."""
    out, inferred = [], False
    for axis, value in enumerate(target):
        if isinstance(value, int):
            if value == -1:
                if inferred:
                    return None
                inferred = True
            out.append(value)
        elif data_dims is not None and axis < len(data_dims) and data_dims[axis] == value:
            out.append(0)
        elif not inferred:
            inferred = True
            out.append(-1)
        else:
            return None
    return out


def resolve_reshapes(model: onnx.ModelProto, light: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` with each reshape whose target :class:`_ShapeValues` knows given a
    constant target (:func:`constant_target`); returns it and how many were resolved.
    ``light``: the model without its weights, for shape inference."""
    dims = inferred_dims(light)
    values = _ShapeValues(model, dims)
    consts = {t.name for t in model.graph.initializer}
    changes = {}
    for node in model.graph.node:
        values.visit(node)
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
            continue
        if len(node.input) < 2 or node.input[1] in consts:
            continue
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        known = values.get(node.input[1])
        if known is None or allowzero:
            continue
        target = constant_target(known[0], dims.get(node.input[0]))
        if target is not None:
            changes[node.name or node.output[0]] = target
    if not changes:
        return model, 0
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        key = node.name or node.output[0]
        if node.op_type == "Reshape" and key in changes:
            name = f"{node.output[0]}__target"
            out.graph.initializer.append(
                numpy_helper.from_array(np.array(changes[key], dtype=np.int64), name))
            node.input[1] = name
            log.debug("reshape %s: symbolic target -> %s", key, changes[key])
    log.info("gave %d reshapes with computed targets a constant one", len(changes))
    return prune_dead(out), len(changes)


def prune_dead(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the nodes whose outputs nothing reads (the shape computations a
    constant target replaced), in place."""
    graph = model.graph
    while True:
        used = {name for node in graph.node for name in node.input}
        used |= {o.name for o in graph.output}
        keep = [n for n in graph.node if any(o in used for o in n.output)]
        if len(keep) == len(graph.node):
            return model
        del graph.node[:]
        graph.node.extend(keep)

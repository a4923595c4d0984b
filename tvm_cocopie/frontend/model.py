"""An ONNX model as the front door reads it: load and check a file, its inputs and opset."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import onnx
from onnx import TensorProto

from ..errors import InputShapeError
from ..onnx_file import ModelLike, load_model  # noqa: F401 (the one loader, re-exported)

log = logging.getLogger(__name__)


def model_opset(proto: onnx.ModelProto) -> int:
    """The model's ai.onnx opset version."""
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def graph_inputs(proto: onnx.ModelProto) -> dict[str, tuple[list, str]]:
    """The real inputs of the model (initializers excluded): name -> (dims, dtype).

    A dim is an int, or a string for a symbolic/unknown dimension.
    """
    inits = {t.name for t in proto.graph.initializer}
    result = {}
    for value in proto.graph.input:
        if value.name in inits:
            continue
        ttype = value.type.tensor_type
        dims: list = []
        for i, d in enumerate(ttype.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:  # some exporters write -1
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or f"?{i}")
        result[value.name] = (dims, onnx_dtype_name(ttype.elem_type))
    return result


def check_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int | str]] | None) -> dict:
    """Validate user-given input shapes against the model; return them as lists.

    A dim given as a string stays symbolic under that name (``{"x": [1, 3, 48, "W"]}``
    fixes a recognizer's batch and height and keeps its width: one build for every
    width); inputs naming the same string share the dim."""
    declared = graph_inputs(proto)
    shapes = dict(shapes or {})
    for name, shape in shapes.items():
        if name not in declared:
            raise InputShapeError(
                f"the model has no input named {name!r}; its inputs are {sorted(declared)}"
            )
        dims, _ = declared[name]
        shape = [_dim(name, s) for s in shape]
        if dims and len(dims) != len(shape):
            raise InputShapeError(
                f"input {name!r} has rank {len(dims)} ({_fmt(dims)}), the given shape "
                f"{shape} has rank {len(shape)}"
            )
        for axis, (want, got) in enumerate(zip(dims, shape)):
            if isinstance(want, int) and (isinstance(got, str) or want != got):
                raise InputShapeError(
                    f"input {name!r} is declared {_fmt(dims)}; dim {axis} is fixed at {want}, "
                    f"the given shape {shape} has {got}. Only symbolic dims can be set."
                )
        shapes[name] = shape
    return shapes


def _dim(name: str, value) -> int | str:
    """One dim of a user-given shape: an int, or a symbolic dim's name."""
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        if not value.isidentifier():
            raise InputShapeError(f"input {name!r}: a symbolic dim is named by an identifier "
                                  f"(such as 'W'), not {value!r}")
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InputShapeError(f"input {name!r}: a dim is an int or a symbolic dim's name, "
                              f"not {value!r}") from None


def static_shapes(shapes: Mapping[str, Sequence[int | str]]) -> dict[str, list[int]]:
    """The entries of checked ``shapes`` whose dims are all ints."""
    return {k: list(v) for k, v in shapes.items() if all(isinstance(d, int) for d in v)}


def _fmt(dims: Sequence) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def onnx_dtype_name(elem_type: int) -> str:
    """numpy dtype name of an ONNX tensor element type."""
    if elem_type == TensorProto.UNDEFINED:
        return "float32"
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name

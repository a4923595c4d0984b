"""ONNX import: read a model, check it, and hand it to TVM's Relax ONNX frontend.

TVM's own importer (``tvm.relax.frontend.onnx``) does the conversion, with the
converters of :mod:`tvm_cocopie.onnx_ops` laid over its stock map (operators it
lacks, fixes, newer opsets). This module puts a careful door in front of it: a malformed file, an input shape that
does not fit, or operators the importer lacks become
:mod:`tvm_cocopie.errors` exceptions that say what is wrong and what to do, and all
unsupported operators of a model are reported at once, with their opset and nodes.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import tvm
from onnx import TensorProto

from .errors import InputShapeError, ModelError, UnsupportedOperatorError
from .onnx_folding import fold_constants

log = logging.getLogger(__name__)

ModelLike = Any  # str | os.PathLike | bytes | onnx.ModelProto

#: Operators the stock importer handles outside its converter map.
_HANDLED_OUTSIDE_MAP = {"Constant", "If"}


def load_model(model: ModelLike, check: bool = True) -> onnx.ModelProto:
    """Read ``model`` (a path, serialized bytes, or a ``ModelProto``) and check it.

    ``check=False`` skips ``onnx.checker`` (seconds for a model of hundreds of MB), for
    a ``ModelProto`` that this function has already checked.
    """
    if isinstance(model, onnx.ModelProto):
        proto = model
        where = "the given ModelProto"
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        where = str(path)
        if not path.is_file():
            raise ModelError(f"no ONNX file at {path}: check the path")
        try:
            proto = onnx.load(str(path))
        except Exception as err:  # noqa: BLE001 - protobuf DecodeError and friends
            raise ModelError(
                f"{path} is not a valid ONNX file ({type(err).__name__}: {err}). "
                "Re-export the model, or check that the file is complete."
            ) from None
    elif isinstance(model, (bytes, bytearray)):
        where = "the given bytes"
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as err:  # noqa: BLE001 - protobuf raises several types
            raise ModelError(f"the bytes are not a serialized ONNX model ({err})") from None
    else:
        raise ModelError(
            f"expected an ONNX path, bytes or onnx.ModelProto, got {type(model).__name__}"
        )
    if not proto.graph.node:
        raise ModelError(f"{where} holds no graph nodes: is it an ONNX model at all?")
    if not check:
        return proto
    try:
        # a file is checked from its path: the checker then reads it itself instead of
        # receiving a re-serialized copy of the loaded model (seconds for large weights)
        onnx.checker.check_model(where if isinstance(model, (str, os.PathLike)) else proto)
    except onnx.checker.ValidationError as err:
        first = str(err).strip().splitlines()[0]
        raise ModelError(
            f"{where} is malformed: {first}. Fix the exporter output (onnx.checker "
            "explains), or run onnx.shape_inference / onnxsim on it."
        ) from None
    return proto


def model_opset(proto: onnx.ModelProto) -> int:
    """The model's ai.onnx opset version."""
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def _iter_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _iter_nodes(sub)


def unsupported_operators(proto: onnx.ModelProto, convert_map: Mapping | None = None) -> dict:
    """Every operator of ``proto`` the importer cannot convert.

    Returns ``{(op_type, domain, opset): [node names]}``, subgraphs included.
    ``convert_map`` defaults to the extended map of :mod:`tvm_cocopie.onnx_ops`.
    """
    if convert_map is None:
        from .onnx_ops import converter_map

        convert_map = converter_map()
    opsets = {e.domain or "ai.onnx": int(e.version) for e in proto.opset_import}
    missing: dict[tuple, list[str]] = {}
    for index, node in enumerate(_iter_nodes(proto.graph)):
        if node.op_type in convert_map or node.op_type in _HANDLED_OUTSIDE_MAP:
            continue
        domain = node.domain or "ai.onnx"
        key = (node.op_type, domain, opsets.get(domain, 0))
        missing.setdefault(key, []).append(node.name or f"#{index}")
    return missing


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


def check_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None) -> dict:
    """Validate user-given input shapes against the model; return them as lists."""
    declared = graph_inputs(proto)
    shapes = dict(shapes or {})
    for name, shape in shapes.items():
        if name not in declared:
            raise InputShapeError(
                f"the model has no input named {name!r}; its inputs are {sorted(declared)}"
            )
        dims, _ = declared[name]
        shape = [int(s) for s in shape]
        if dims and len(dims) != len(shape):
            raise InputShapeError(
                f"input {name!r} has rank {len(dims)} ({_fmt(dims)}), the given shape "
                f"{shape} has rank {len(shape)}"
            )
        for axis, (want, got) in enumerate(zip(dims, shape)):
            if isinstance(want, int) and want != got:
                raise InputShapeError(
                    f"input {name!r} is declared {_fmt(dims)}; dim {axis} is fixed at {want}, "
                    f"the given shape {shape} has {got}. Only symbolic dims can be set."
                )
        shapes[name] = shape
    return shapes


def _fmt(dims: Sequence) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def from_onnx(
    model: ModelLike,
    shapes: Mapping[str, Sequence[int]] | None = None,
    keep_params_in_input: bool = False,
    check: bool = True,
) -> tvm.IRModule:
    """Import an ONNX model into a Relax ``IRModule`` with TVM's frontend.

    ``shapes`` fixes symbolic input dims (``{"x": [1, 3, 224, 224]}``); unset symbolic
    dims stay symbolic. Weights become constants unless ``keep_params_in_input``.
    Shape arithmetic that the fixed shapes make constant is folded first
    (:mod:`.onnx_folding`), which TVM's importer needs for models such as PP-OCR's;
    ``If``/``Loop``/``Scan`` known at compile time are resolved
    (:mod:`.onnx_ops.control`). Operators still unsupported after that are all
    reported at once. ``check=False`` skips ``onnx.checker`` for a ``ModelProto`` that
    :func:`load_model` has already checked.
    """
    proto = load_model(model, check=check)
    shapes = check_shapes(proto, shapes)
    from .onnx_ops import import_model
    from .onnx_ops.control import fold_keeping_captures, simplify

    proto = fold_keeping_captures(proto, lambda m: fold_constants(m, shapes)[0])
    proto = simplify(proto, lambda m: fold_constants(m)[0])  # constant If / Loop
    # after folding: an op whose inputs are all constants needs no converter
    missing = unsupported_operators(proto)
    if missing:
        lines = [
            f"  {op} (domain {domain}, opset {opset}): {len(nodes)} node(s), e.g. "
            + ", ".join(nodes[:3])
            for (op, domain, opset), nodes in sorted(missing.items())
        ]
        raise UnsupportedOperatorError(
            "TVM's ONNX frontend cannot import these operators of the model:\n"
            + "\n".join(lines)
            + "\nRe-export the model without them (a lower opset, or simplified with "
            "onnxsim), or file an issue naming them.",
            ops=missing,
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # checker warnings and renames are already handled
        try:
            mod = import_model(
                proto, shape_dict=shapes or None, keep_params_in_input=keep_params_in_input
            )
        except UnsupportedOperatorError:
            raise
        except Exception as err:
            text = str(err).strip().splitlines()
            first = next((ln for ln in reversed(text) if ln.strip()), type(err).__name__)
            raise ModelError(
                f"TVM's ONNX importer failed: {first.strip()}. If an input has symbolic "
                "dims, fixing them with shapes={...} often helps."
            ) from err
    log.debug("imported ONNX model with %d nodes", len(proto.graph.node))
    return mod


def onnx_dtype_name(elem_type: int) -> str:
    """numpy dtype name of an ONNX tensor element type."""
    if elem_type == TensorProto.UNDEFINED:
        return "float32"
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name

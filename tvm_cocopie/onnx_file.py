"""Reading an ONNX file (or bytes, or a ``ModelProto``) with clear errors: the one loader
the front door (:mod:`tvm_cocopie.frontend.model`), post-training quantization and the
Hexagon runner share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnx

from .errors import ModelError

ModelLike = Any  # str | os.PathLike | bytes | onnx.ModelProto


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

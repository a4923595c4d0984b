"""The extended converter map and the import that uses it.

Each family module of :mod:`tvm_cocopie.onnx_ops` decorates its converter classes
with :func:`register`; :func:`converter_map` lays them over TVM's stock map
(``tvm.relax.frontend.onnx.onnx_frontend._get_convert_map``). A converter that fixes
a stock one usually subclasses it, so the opsets it does not touch keep the stock
behaviour; ``OnnxOpConverter.get_converter`` picks the highest ``_impl_vN`` with
``N`` <= the model's opset.

:func:`import_model` runs TVM's ``ONNXGraphImporter`` with that map: the importer
itself (graph walk, initializers, ``If`` subgraphs) is stock TVM's.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
from collections.abc import Mapping, Sequence
from typing import ClassVar

import onnx

from ..errors import ModelError, UnsupportedOperatorError

log = logging.getLogger(__name__)

#: Family modules holding our converters, imported on first use.
FAMILIES = (
    "elementwise",
    "reduction",
    "normalization",
    "tensor",
    "image",
    "recurrent",
    "quantized",
    "transformer",
    "loss",
    "detection",
    "pad",
    "control",
    "ml",
    "tfidf",
    "pooling",
    "conv_transpose",
)

_OURS: dict[str, type] = {}
_loaded = False


def register(*op_types: str):
    """Class decorator: ``@register("LSTM")`` makes the class the converter of ``LSTM``."""

    def wrap(cls):
        for op in op_types:
            if op in _OURS and _OURS[op] is not cls:
                raise ValueError(f"two converters registered for ONNX op {op}")
            _OURS[op] = cls
        return cls

    return wrap


def our_converters() -> dict[str, type]:
    """``{op_type: converter class}`` of this package only."""
    global _loaded
    if not _loaded:
        for name in FAMILIES:
            try:
                importlib.import_module(f"{__package__}.{name}")
            except ModuleNotFoundError as err:
                if err.name != f"{__package__}.{name}":
                    raise
        _loaded = True
    return dict(_OURS)


def stock_converters() -> dict[str, type]:
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return _get_convert_map()


def converter_map() -> dict[str, type]:
    """TVM's stock converter map with ours laid over it."""
    merged = stock_converters()
    merged.update(our_converters())
    return merged


def model_opset(proto: onnx.ModelProto) -> int:
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def _importer_class():
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    class CocopieOnnxImporter(ONNXGraphImporter):
        """TVM's graph importer, converting each node with the extended map."""

        convert_map: ClassVar[dict] = {}

        def _check_for_unsupported_ops(self, graph):
            missing = sorted({n.op_type for n in graph.node if n.op_type not in self.convert_map
                              and n.op_type not in ("If", "Constant")})
            if missing:
                raise UnsupportedOperatorError(
                    "no converter for ONNX operator(s) " + ", ".join(missing),
                    ops={(op, "ai.onnx", self.opset): [] for op in missing},
                )

        def _convert_operator(self, op_name, inputs, attrs, opset):
            converter = self.convert_map.get(op_name)
            if converter is None:
                raise UnsupportedOperatorError(f"no converter for ONNX operator {op_name}")
            try:
                result = converter.get_converter(opset)(
                    self.bb, inputs, attrs, [self._nodes, self._params]
                )
            except UnsupportedOperatorError:
                raise
            except Exception as err:
                node = attrs.get("tvm_custom", {}).get("name") or "(unnamed)"
                raise ModelError(
                    f"converting {op_name} node {node!r} (opset {opset}) failed: "
                    f"{_last_line(err)}"
                ) from err
            from tvm import relax

            if isinstance(result, relax.Expr):
                result = self.bb.normalize(result)
            return result

    return CocopieOnnxImporter


def _last_line(err: Exception) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


def _zero_sized_inputs(proto: onnx.ModelProto) -> dict[str, list[int]]:
    """Static shapes of inputs with a zero-sized dim (TVM's parser reads ``0`` as unknown)."""
    shapes = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else []
        if any(d.HasField("dim_value") and d.dim_value == 0 for d in dims) and all(
                d.HasField("dim_value") for d in dims):
            shapes[value.name] = [int(d.dim_value) for d in dims]
    return shapes


def import_model(
    proto: onnx.ModelProto,
    shape_dict: Mapping[str, Sequence[int]] | None = None,
    keep_params_in_input: bool = False,
    convert_map: Mapping[str, type] | None = None,
):
    """Import ``proto`` into a Relax ``IRModule`` with the extended converter map.

    Raises :class:`~tvm_cocopie.errors.ModelError` naming the op and node that
    failed to convert.
    """
    if proto.ir_version < 3:
        raise ModelError(f"ONNX IR version {proto.ir_version} is too old (3 or newer needed)")
    importer_cls = _importer_class()
    shapes = {**_zero_sized_inputs(proto), **dict(shape_dict or {})}
    importer = importer_cls(
        shapes, "float32", keep_params_in_input=keep_params_in_input,
        sanitize=True,
    )
    importer.convert_map = dict(convert_map) if convert_map is not None else converter_map()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):  # the stock importer prints on errors
            return importer.from_onnx(proto.graph, model_opset(proto))
    finally:
        if captured.getvalue():
            log.debug("importer output: %s", captured.getvalue().strip())

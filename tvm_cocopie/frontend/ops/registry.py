"""The extended converter map and the import that uses it.

Each family module of :mod:`tvm_cocopie.frontend.ops` decorates its converter classes
with :func:`register`; :func:`converter_map` lays them over TVM's stock map
(``tvm.relax.frontend.onnx.onnx_frontend._get_convert_map``). A converter that fixes
a stock one usually subclasses it, so the opsets it does not touch keep the stock
behaviour; ``OnnxOpConverter.get_converter`` picks the highest ``_impl_vN`` with
``N`` <= the model's opset.

:func:`..importer.import_model` runs TVM's ``ONNXGraphImporter`` with that map: the importer
itself (graph walk, initializers, ``If`` subgraphs) is stock TVM's.
"""

from __future__ import annotations

import functools
import importlib
import logging

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
    "pad",
    "control",
    "ml",
    "tfidf",
    "pooling",
    "conv_transpose",
    "einsum",
)

#: ``{op_type: converter class}`` filled by :func:`register` as the family modules load;
#: read through :func:`our_converters` only.
_OURS: dict[str, type] = {}


def register(*op_types: str):
    """Class decorator: ``@register("LSTM")`` makes the class the converter of ``LSTM``."""

    def wrap(cls):
        for op in op_types:
            if op in _OURS and _OURS[op] is not cls:
                raise ValueError(f"two converters registered for ONNX op {op}")
            _OURS[op] = cls
        return cls

    return wrap


@functools.cache
def _load_families() -> None:
    """Import every family module once (their ``@register`` decorators fill the table)."""
    for name in FAMILIES:
        importlib.import_module(f"{__package__}.{name}")


def our_converters() -> dict[str, type]:
    """``{op_type: converter class}`` of this package only (a copy)."""
    _load_families()
    return dict(_OURS)


def stock_converters() -> dict[str, type]:
    """TVM's own ``{op_type: converter class}`` map."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return _get_convert_map()


def converter_map() -> dict[str, type]:
    """TVM's stock converter map with ours laid over it."""
    merged = stock_converters()
    merged.update(our_converters())
    return merged





"""Our ONNX operator converters, extending TVM's stock Relax ONNX importer.

TVM 0.27's importer (``tvm.relax.frontend.onnx``) maps each ONNX ``op_type`` to an
``OnnxOpConverter`` class whose ``_impl_vN`` methods build Relax for opset ``N``.
This package adds converters for operators it lacks and replaces the ones that are
wrong or too old, each module covering one family of the ONNX operator spec
(https://onnx.ai/onnx/operators/). :mod:`.registry` merges them over the stock map;
:mod:`..importer` runs TVM's importer with that map.
"""

from __future__ import annotations

from .registry import converter_map, our_converters

__all__ = ["converter_map", "our_converters"]

"""Converters of ONNX control flow that :mod:`..control_flow` could not resolve at compile time: they say why."""

from __future__ import annotations

import logging

from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ...errors import ModelError
from ..control_flow import MAX_UNROLL
from .registry import register

log = logging.getLogger(__name__)


@register("Scan")
class Scan(OnnxOpConverter):
    """Only reached when :func:`..control_flow.simplify` could not unroll the scan."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        raise ModelError(
            f"Scan needs a static sequence length (at most {MAX_UNROLL}) to be unrolled "
            "(opset 8 Scan, with its batch axis, is not supported); fix the input shapes "
            "with shapes={...}")


@register("Loop")
class Loop(OnnxOpConverter):
    """Only reached when :func:`..control_flow.simplify` could not unroll the loop."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        raise ModelError(
            "Loop needs a trip count known at compile time (at most "
            f"{MAX_UNROLL}) and a body whose condition stays true; TVM's Relax has no "
            "loops to import it into. Fix the input shapes with shapes={...}")

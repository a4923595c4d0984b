"""ONNX ``Pad`` in constant mode as ``relax.op.nn.pad`` (https://onnx.ai/onnx/operators/onnx__Pad.html).

The stock importer lowers every ``Pad`` with ``emit_te(topi.nn.pad)``, a ``call_tir``
the graph rewriter cannot see into, so the DNNFusion simplification "pad folded into
conv" (seeds/004 §3.3; :mod:`tvm_cocopie.relay_passes.rewriting.folding`) never fired
on imported models. Constant-mode pads with constant ``pads`` (and ``axes``) become the
Relax operator instead, which TVM legalizes to the same ``topi.nn.pad``; the other
modes (``edge``, ``reflect``, ``wrap``) keep the stock lowering.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from .registry import register


def _pad_op(data, before, after, value) -> relax.Expr:
    width = []
    for b, a in zip(before, after):
        width.extend((int(b), int(a)))
    return relax.op.nn.pad(data, width, "constant", float(value))


def _float_input(data) -> bool:
    dtype = str(getattr(data.ty, "dtype", ""))
    return dtype.startswith(("float", "bfloat"))


@register("Pad")
class Pad(stock.Pad):
    """Constant-mode ``Pad`` of a floating-point tensor as ``relax.op.nn.pad``."""

    @classmethod
    def _impl_v2(cls, bb, inputs, attr, params):
        mode = attr.get("mode", b"constant").decode("utf-8")
        if mode != "constant" or not _float_input(inputs[0]):
            return super()._impl_v2(bb, inputs, attr, params)
        before, after = np.split(np.asarray(attr.get("pads"), np.int64), 2)
        if (before < 0).any() or (after < 0).any():  # negative pads crop
            return super()._impl_v2(bb, inputs, attr, params)
        return _pad_op(inputs[0], before, after, attr.get("value") or 0.0)

    @classmethod
    def _lower_pad(cls, bb, inputs, attr, params, allowed_modes):
        mode = attr.get("mode", b"constant").decode("utf-8")
        if mode != "constant" or not _float_input(inputs[0]):
            return super()._lower_pad(bb, inputs, attr, params, allowed_modes)
        before, after, value = cls._parse_pads_and_axes(inputs, params)
        if any(int(v) < 0 for v in list(before) + list(after)):  # negative pads crop
            return super()._lower_pad(bb, inputs, attr, params, allowed_modes)
        return _pad_op(inputs[0], before, after, value)

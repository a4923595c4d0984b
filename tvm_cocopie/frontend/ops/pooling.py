"""``MaxPool`` with its second output, ``Indices`` (opsets 8-22), and ``MaxUnpool``.

Spec: https://onnx.ai/onnx/operators/onnx__MaxPool.html. The stock converter gives
the pooled values only; a model that also asks for ``Indices`` (the flat position
of each maximum in the input, row-major over ``N, C, H, W``, or with
``storage_order=1`` column-major over the spatial axes) failed to import. The
values still come from the stock converter; the indices are an unrolled argmax over
the ``kh * kw`` window taps: each tap is a strided slice of the input padded with
``-inf``, its flat source positions a compile-time constant, and a later tap
replaces the running maximum only when strictly greater, so ties keep the first
tap in row-major window order, as ONNX Runtime and the reference do.

``MaxUnpool`` (https://onnx.ai/onnx/operators/onnx__MaxUnpool.html): the stock
converter reads a given ``output_shape`` with ``.tolist()``, which a Relax constant
lacks; here a constant ``output_shape`` reaches it as the numpy array it expects.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from ...errors import UnsupportedOperatorError
from ...exprs import static_shape
from .common import const, const_value
from .registry import register


def _indices(bb, x, out_hw, attr):
    shape = static_shape(x)
    if shape is None or len(shape) != 4:
        raise UnsupportedOperatorError(
            f"MaxPool with an Indices output needs a static 4-D input, got shape {shape}")
    n, c, h, w = shape
    kh, kw = attr["kernel_shape"]
    sh, sw = attr.get("strides", [1, 1])
    dh, dw = attr.get("dilations", [1, 1])
    pads = list(attr.get("pads", [0, 0, 0, 0]))
    if attr.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise UnsupportedOperatorError("MaxPool Indices with auto_pad SAME_* is not supported; "
                                       "export the model with explicit pads")
    ho, wo = out_hw
    top, left = pads[0], pads[1]
    bottom = max(0, (ho - 1) * sh + (kh - 1) * dh + 1 - h - top)
    right = max(0, (wo - 1) * sw + (kw - 1) * dw + 1 - w - left)
    padded = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, top, bottom, left, right],
                                     pad_value=float("-inf")))
    column_major = int(attr.get("storage_order", 0)) == 1
    plane = (np.arange(n * c, dtype=np.int64) * h * w).reshape(n, c, 1, 1)
    best = best_idx = None
    for i in range(kh):
        rows = np.arange(ho) * sh + i * dh - top
        for j in range(kw):
            cols = np.arange(wo) * sw + j * dw - left
            tap = relax.op.strided_slice(padded, [2, 3], [i * dh, j * dw],
                                         [i * dh + (ho - 1) * sh + 1, j * dw + (wo - 1) * sw + 1],
                                         [sh, sw])
            flat = (cols[None, :] * h + rows[:, None]) if column_major else \
                (rows[:, None] * w + cols[None, :])
            where = const(plane + flat[None, None])
            if best is None:
                best, best_idx = bb.emit(tap), bb.emit(relax.op.broadcast_to(where, [n, c, ho, wo]))
                continue
            tap = bb.emit(tap)
            better = bb.emit(relax.op.greater(tap, best))
            best = bb.emit(relax.op.where(better, tap, best))
            best_idx = bb.emit(relax.op.where(better, where, best_idx))
    return best_idx


@register("MaxPool")
class MaxPool(stock.MaxPool):
    """Stock values; the ``Indices`` output when the node asks for it."""

    @classmethod
    def _impl_v8(cls, bb, inputs, attr, params):
        values = stock.MaxPool._impl_v1(bb, inputs, attr, params)
        if int(attr.get("tvm_custom", {}).get("num_outputs", 1)) < 2:
            return values
        values = bb.emit(values)
        out_hw = static_shape(values)[2:]
        return relax.Tuple([values, _indices(bb, inputs[0], out_hw, attr)])


@register("MaxUnpool")
class MaxUnpool(stock.MaxUnpool):
    """The stock converter, with a constant ``output_shape`` input as a numpy array."""

    @classmethod
    def _impl_v9(cls, bb, inputs, attr, params):
        shape = const_value(inputs[2], params)
        if inputs[2] is not None and shape is None:
            raise UnsupportedOperatorError(
                "MaxUnpool needs its output_shape input as a constant (it decides the "
                "output's shape)")
        if shape is not None:
            inputs = stock.onnx_input([inputs[0], inputs[1], shape.astype(np.int64)])
        return super()._impl_v9(bb, inputs, attr, params)

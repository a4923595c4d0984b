"""``ConvTranspose`` with the ``output_shape`` attribute.

Spec: https://onnx.ai/onnx/operators/onnx__ConvTranspose.html. The stock converter
ignores ``output_shape``. Per the spec it decides the padding: ``total_padding[i] =
stride[i] * (in[i] - 1) + output_padding[i] + ((kernel[i] - 1) * dilation[i] + 1) -
output_shape[i]``, split as ``auto_pad`` says (``SAME_UPPER`` puts the odd unit at
the end, otherwise at the start). A negative total asks for a larger output than the
kernel reaches: those rows and columns are output padding at the end (no input
reaches them; only the bias does). The computed ``pads``/``output_padding`` are then
handed to the stock converter.
"""

from __future__ import annotations

from tvm.relax.frontend.onnx import onnx_frontend as stock

from ...errors import UnsupportedOperatorError
from ...exprs import static_shape
from .registry import register


def padding_for_output_shape(in_shape, kernel, strides, dilations, output_padding,
                             output_shape, auto_pad: str) -> tuple[list[int], list[int]]:
    """``(pads, output_padding)`` that make the spatial output ``output_shape``."""
    begins, ends, extra = [], [], []
    for i, want in enumerate(output_shape):
        total = (strides[i] * (in_shape[i] - 1) + output_padding[i]
                 + (kernel[i] - 1) * dilations[i] + 1 - want)
        if total < 0:
            begins.append(0)
            ends.append(0)
            extra.append(output_padding[i] - total)
            continue
        half = total // 2
        begin = half if auto_pad == "SAME_UPPER" else total - half
        begins.append(begin)
        ends.append(total - begin)
        extra.append(output_padding[i])
    return begins + ends, extra


@register("ConvTranspose")
class ConvTranspose(stock.ConvTranspose):
    """The stock converter, with ``pads`` derived from ``output_shape`` when given."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        if "output_shape" in attr:
            in_shape = static_shape(inputs[0])
            if in_shape is None:
                raise UnsupportedOperatorError(
                    "ConvTranspose with output_shape needs static input dims; pass shapes=")
            spatial = len(in_shape) - 2
            out_shape = list(attr.pop("output_shape"))[-spatial:]
            kernel = list(attr.get("kernel_shape") or static_shape(inputs[1])[2:])
            strides = list(attr.get("strides", [1] * spatial))
            dilations = list(attr.get("dilations", [1] * spatial))
            auto_pad = attr.pop("auto_pad", b"NOTSET")
            auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
            pads, extra = padding_for_output_shape(
                in_shape[2:], kernel, strides, dilations,
                list(attr.get("output_padding", [0] * spatial)), out_shape, auto_pad)
            if any(e >= s for e, s in zip(extra, strides)):
                raise UnsupportedOperatorError(
                    f"ConvTranspose output_shape {out_shape} exceeds the natural output by a "
                    f"stride or more ({extra} vs strides {strides}), which Relax cannot express")
            attr["pads"], attr["output_padding"] = pads, extra
        return super()._impl_v1(bb, inputs, attr, params)

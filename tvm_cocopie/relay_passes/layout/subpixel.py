"""Transposed convolutions with kernel == stride as a 1x1 conv plus a pixel shuffle.

A ``conv2d_transpose`` whose kernel equals its stride ``s`` (no padding, no output
padding, no dilation, one group: the 2x2/stride-2 upsampling of DBNet / U-Net heads)
writes every output pixel from exactly one input pixel::

    y[n, o, s*i + a, s*j + b] = sum_c x[n, c, i, j] * W[c, o, a, b]

That is a 1x1 convolution to ``O * s * s`` channels (one per sub-pixel phase)
followed by a depth-to-space interleave, the "sub-pixel convolution" identity. TVM
lowers the transposed conv by dilating the input with zeros and running a direct
conv: ``s * s`` times the FLOPs, in NCHW, with no layout the blocked kernels use.
After this rewrite the 1x1 conv takes the blocked NCHW[x]c path (register-tiled,
weights packed at compile time) and the interleave is a cheap injective kernel.
Only calls with a constant weight are rewritten (the weight is reorganized with
numpy); the rest keep TVM's lowering.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax, te

from ...exprs import ints
from .call_rewrite import rewrite_calls

log = logging.getLogger(__name__)


def subpixel_weight(weight: np.ndarray) -> np.ndarray:
    """``(C, O, s, s)`` transposed-conv weight -> ``(O*s*s, C, 1, 1)`` conv weight."""
    c, o, s, _ = weight.shape
    return np.ascontiguousarray(weight.transpose(1, 2, 3, 0).reshape(o * s * s, c, 1, 1))


def _rewritable(call) -> int | None:
    """The stride ``s`` if ``call`` is a kernel==stride transposed conv we can rewrite."""
    attrs = call.attrs
    weight = call.args[1]
    if not (isinstance(weight, tvm.ir.GenericConst) and isinstance(weight.value, tvm.runtime.Tensor)):
        return None
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "IOHW":
        return None
    if str(attrs.out_layout) != "NCHW" or int(attrs.groups) != 1:
        return None
    shape = weight.value.shape
    strides = ints(attrs.strides)
    if len(shape) != 4 or shape[2] != shape[3] or strides != [shape[2], shape[3]]:
        return None
    if any(ints(attrs.padding)) or any(ints(attrs.output_padding)):
        return None
    if ints(attrs.dilation) != [1, 1] or str(weight.value.dtype) != "float32":
        return None
    dshape = getattr(call.args[0].ty, "shape", None)
    if dshape is None or len(dshape) != 4:
        return None
    return shape[2]


def _as_subpixel(builder, call):
    """A kernel==stride ``conv2d_transpose`` as 1x1 ``conv2d`` + pixel shuffle, or None."""
    s = _rewritable(call)
    if s is None:
        return None
    x = call.args[0]
    w = call.args[1].value.numpy()
    o = w.shape[1]
    out_dtype = str(call.attrs.out_dtype or "") or None
    z = builder.emit(relax.op.nn.conv2d(x, relax.const(subpixel_weight(w)),
                                        out_dtype=out_dtype))
    return builder.emit_te(pixel_shuffle, z, o, s, primfunc_name_hint="pixel_shuffle")


def pixel_shuffle(z, channels: int, s: int):
    """Depth to space: ``y[n, c, i, j] = z[n, (c*s + i % s)*s + j % s, i // s, j // s]``
    (each sub-pixel phase's channels interleaved into an ``s`` times larger map).

    One injective compute whose indices divide by the constant ``s`` only: written as
    reshape, transpose and reshape, a symbolic height and width put the run-time sizes
    in every flattened index, and the fused copy took minutes for LLVM to compile."""
    n, _, h, w = z.shape
    return te.compute((n, channels, h * s, w * s),
                      lambda b, c, i, j: z[b, (c * s + i % s) * s + j % s, i // s, j // s],
                      name="pixel_shuffle")


@tvm.transform.module_pass(opt_level=0, name="SubpixelConvTranspose")
def subpixel_conv_transpose(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: kernel==stride ``conv2d_transpose`` -> 1x1 ``conv2d`` + pixel shuffle."""
    mod, rewritten = rewrite_calls(mod, "relax.nn.conv2d_transpose", _as_subpixel)
    if rewritten:
        log.debug("rewrote %d transposed convolutions as sub-pixel convolutions", rewritten)
    return mod

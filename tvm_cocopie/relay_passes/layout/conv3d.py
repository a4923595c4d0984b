"""3-D convolutions as 2-D ones over the output frames, so they take the blocked conv kernels.

Video and volumetric models (R(2+1)D, X3D, SlowFast, 3-D U-Nets) convolve along depth
too. TVM lowers ``nn.conv3d`` with its generic compute, which no schedule rule of ours
recognizes: a three-layer 3-D CNN on 8 frames of 112x112 ran 602 ms against ONNX
Runtime's 16.7. A conv3d is a conv2d whose images are the output frames and whose
input channels are the ``kd`` depth taps of each input channel::

    x'[n * D' + d, c * kd + t] = x_padded[n, c, d * sd + t * dd]        (N D', C kd, H, W)
    w'[o, c * kd + t]          = w[o, c, t]                             (O, C/g kd, kh, kw)
    conv3d(x, w)[n, o, d]      = conv2d(x', w')[n * D' + d, o]

(the taps of one channel stay inside its group, so ``groups`` carry over). Each call
becomes a depth pad, ``kd`` strided depth slices joined at a new axis, a permute and
reshape to ``x'``, the conv2d, and a reshape and permute back; the blocked layout pass
then moves the conv2d to NCHW[x]c like any other. The input is read ``kd`` times (a
``kd``-fold copy), the FLOPs are the conv3d's. A constant weight is reshaped with
numpy; symbolic shapes and layouts other than ``NCDHW``/``OIDHW`` are left to TVM.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from ...exprs import const_np, declared_out_dtype, ints, is_constant, static_shape
from .call_rewrite import rewrite_calls

log = logging.getLogger(__name__)


def _frames(bb: relax.BlockBuilder, x, shape, kd: int, sd: int, dd: int, out_d: int):
    """``x'`` of the module docstring from the depth-padded ``x`` of ``shape``."""
    n, c, _, h, w = shape
    if kd == 1 and sd == 1:
        taps = bb.emit(relax.op.expand_dims(x, 2))  # (N, C, 1, D, H, W)
    else:
        slices = [bb.emit(relax.op.expand_dims(bb.emit(relax.op.strided_slice(
            x, axes=[2], begin=[t * dd], end=[t * dd + sd * (out_d - 1) + 1], strides=[sd])),
            2)) for t in range(kd)]
        taps = slices[0] if kd == 1 else bb.emit(relax.op.concat(slices, axis=2))
    frames = bb.emit(relax.op.permute_dims(taps, [0, 3, 1, 2, 4, 5]))  # (N, D', C, kd, H, W)
    return bb.emit(relax.op.reshape(frames, (n * out_d, c * kd, h, w)))


def _as_conv2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr | None:
    attrs = call.attrs
    if (str(attrs.data_layout), str(attrs.kernel_layout)) != ("NCDHW", "OIDHW") or str(
            attrs.out_layout) not in ("NCDHW", "", "None"):
        return None
    x, w = call.args
    shape, wshape = static_shape(x), static_shape(w)
    if shape is None or wshape is None:
        return None
    (sd, sh, sw), (dd, dh, dw) = ints(attrs.strides), ints(attrs.dilation)
    front, top, left, back, bottom, right = ints(attrs.padding)
    o, cg, kd, kh, kw = wshape
    if front or back:
        x = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, front, back, 0, 0, 0, 0]))
    n, c, d, h, wd = shape
    d += front + back
    out_d = (d - dd * (kd - 1) - 1) // sd + 1
    if out_d < 1:
        return None
    frames = _frames(bb, x, (n, c, d, h, wd), kd, sd, dd, out_d)
    if is_constant(w):
        weight = relax.const(const_np(w).reshape(o, cg * kd, kh, kw))
    else:
        weight = bb.emit(relax.op.reshape(w, (o, cg * kd, kh, kw)))
    conv = bb.emit(relax.op.nn.conv2d(
        frames, weight, strides=(sh, sw), padding=(top, left, bottom, right),
        dilation=(dh, dw), groups=int(attrs.groups),
        out_dtype=declared_out_dtype(attrs)))
    oh, ow = static_shape(conv)[2:]
    per_frame = bb.emit(relax.op.reshape(conv, (n, out_d, o, oh, ow)))
    return relax.op.permute_dims(per_frame, [0, 2, 1, 3, 4])


@tvm.transform.module_pass(opt_level=0, name="Conv3dAsConv2d")
def conv3d_as_conv2d(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: every static ``NCDHW`` ``nn.conv3d`` as a conv2d over its output frames."""
    mod, rewritten = rewrite_calls(mod, "relax.nn.conv3d", _as_conv2d)
    if rewritten:
        log.debug("rewrote %d 3-D convolutions as 2-D ones over their frames", rewritten)
    return mod

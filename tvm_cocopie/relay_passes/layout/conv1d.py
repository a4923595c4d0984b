"""1-D convolutions as 2-D ones of height 1, so they take the blocked conv kernels.

Audio and sequence models (voice activity, keyword spotting, file-type classifiers,
the convolutional front ends of speech encoders, text CNNs) convolve along one axis.
TVM lowers ``nn.conv1d`` with its generic compute, which no schedule rule of ours
recognizes: in the Silero VAD's opset-15 export one ``Conv1d`` + ReLU took 0.48 ms
of the 0.61 ms its kernels need. A ``NCW`` conv1d is exactly a ``NCHW`` conv2d on an
input of height 1 with an ``OI1W`` weight::

    conv1d(x, w)[n, o, j] = conv2d(x[:, :, None, :], w[:, :, None, :])[n, o, 0, j]

so each call becomes ``expand_dims`` -> ``conv2d`` -> ``squeeze``, which the blocked
layout pass then moves to NCHW[x]c like any other conv (the ``expand_dims`` and
``squeeze`` around consecutive convs become layout transforms it cancels or folds).
A constant weight is reshaped with numpy (our conv legalization pre-packs constant
weights); layouts other than ``NCW``/``OIW`` are left to TVM.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from ...exprs import const_np, declared_out_dtype, ints, is_constant
from .call_rewrite import rewrite_calls

log = logging.getLogger(__name__)


def _as_conv2d(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr | None:
    attrs = call.attrs
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != (
            "NCW", "OIW", "NCW"):
        return None
    x, w = call.args
    if is_constant(w):
        data = const_np(w)
        weight = relax.const(data.reshape(data.shape[0], data.shape[1], 1, data.shape[2]))
    else:
        weight = bb.emit(relax.op.expand_dims(w, 2))
    (stride,), (dilation,) = ints(attrs.strides), ints(attrs.dilation)
    left, right = ints(attrs.padding)
    conv = bb.emit(relax.op.nn.conv2d(
        bb.emit(relax.op.expand_dims(x, 2)), weight, strides=(1, stride),
        padding=(0, left, 0, right), dilation=(1, dilation), groups=int(attrs.groups),
        out_dtype=declared_out_dtype(attrs)))
    return relax.op.squeeze(conv, [2])


@tvm.transform.module_pass(opt_level=0, name="Conv1dAsConv2d")
def conv1d_as_conv2d(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: every ``NCW`` ``nn.conv1d`` as ``expand_dims``, ``nn.conv2d``, ``squeeze``."""
    mod, rewritten = rewrite_calls(mod, "relax.nn.conv1d", _as_conv2d)
    if rewritten:
        log.debug("rewrote %d 1-D convolutions as 2-D ones of height 1", rewritten)
    return mod

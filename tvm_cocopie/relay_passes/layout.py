"""Blocked data layout (NCHW[x]c) for the convolutions of a Relax graph.

Before legalization, every ``conv2d`` that tvm-cocopie's kernels handle is moved to
the layout ``NCHW{b}c`` for its input and output, with ``b`` the canonical channel
block of :func:`tvm_cocopie.topi.tiling.channel_block` (one SIMD vector of fp32
when the channel count allows). TVM's ``ConvertLayout`` then propagates the layout
through the layout-agnostic operators that follow (element-wise, bias add, pooling,
reductions), inserting ``layout_transform`` only where a tensor enters or leaves the
blocked region; between two consecutive convolutions the transforms cancel. The
kernel layout stays ``OIHW``: weights are packed by the legalization, once.

Convolutions the kernels do not handle keep NCHW (the planner is the same one the
legalization uses, so the two always agree).
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from ..target import cpu_info
from ..topi.legalize import conv2d_plan, static_shape
from ..topi.tiling import channel_block

log = logging.getLogger(__name__)


def conv_layout_choice(call, info) -> dict:
    """``{"relax.nn.conv2d": [data, kernel, out]}`` for one call, or ``{}`` to keep it."""
    if call.op.name != "relax.nn.conv2d":
        return {}
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.out_layout) != "NCHW":
        return {}
    dshape, wshape = static_shape(call.args[0]), static_shape(call.args[1])
    if dshape is None or wshape is None or len(dshape) != 4:
        return {}
    ib = channel_block(dshape[1], info)
    ob = channel_block(wshape[0], info)
    if conv2d_plan(call, info, data_block=ib, out_block=ob) is None:
        return {}
    return {"relax.nn.conv2d": [f"NCHW{ib}c", "OIHW", f"NCHW{ob}c"]}


def blocked_layout(target: tvm.target.Target) -> tvm.transform.Pass:
    """The ``ConvertLayout`` pass moving supported convolutions to NCHW[x]c."""
    info = cpu_info(target)
    return relax.transform.ConvertLayout({}, lambda call: conv_layout_choice(call, info))


def layout_passes_for(target: tvm.target.Target) -> list:
    """Passes of the ``layout`` stage for a CPU target (empty for other targets)."""
    from ..target import is_hexagon

    if target.kind.name != "llvm" or is_hexagon(target):
        return []
    from .layout_constants import fold_layout_constants
    from .layout_lift import lift_elementwise_tir

    return [
        lift_elementwise_tir,
        relax.transform.DecomposeOpsForInference(),
        blocked_layout(target),
        relax.transform.Normalize(),
        relax.transform.EliminateCommonSubexpr(),  # one transform per tensor, not per use
        fold_layout_constants,
    ]

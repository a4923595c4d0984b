"""Blocked data layout (NCHW[x]c) for the convolutions of a Relax graph.

Before legalization, every ``conv2d`` that tvm-cocopie's kernels handle is moved to
the layout ``NCHW{b}c`` for its input and output, with ``b`` the canonical channel
block of :func:`tvm_cocopie.topi.cpu.tiling.channel_block` (one SIMD vector of fp32
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

from ...errors import last_line
from ...exprs import is_constant, static_shape
from ...target import cpu_info
from ...topi.cpu.legalize import conv2d_plan
from ...topi.cpu.tiling import channel_block

log = logging.getLogger(__name__)


def conv_layout_choice(call, info) -> dict:
    """``{"relax.nn.conv2d": [data, kernel, out]}`` for one call, or ``{}`` to keep it."""
    if call.op.name == "relax.nn.conv2d_transpose":
        # Its layout inference cannot take a blocked input: ask for NCHW explicitly,
        # so that ConvertLayout inserts the transform back instead of failing.
        return {"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}
    if call.op.name != "relax.nn.conv2d":
        return {}
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.out_layout) != "NCHW":
        return {}
    # A conv the kernels leave to TVM keeps NCHW, asked for explicitly: left to its
    # own layout inference it would take a blocked input as it comes and fail.
    keep = {"relax.nn.conv2d": ["NCHW", str(attrs.kernel_layout), "NCHW"]}
    dshape, wshape = static_shape(call.args[0]), static_shape(call.args[1])
    if dshape is None or wshape is None or len(dshape) != 4:
        return keep
    ib = channel_block(dshape[1], info)
    ob = channel_block(wshape[0], info)
    if conv2d_plan(call, info, data_block=ib, out_block=ob) is None:
        return keep
    return {"relax.nn.conv2d": [f"NCHW{ib}c", "OIHW", f"NCHW{ob}c"]}


def _blocks(choice: dict) -> bool:
    """The choice moves a tensor to a blocked layout (not only NCHW kept explicitly)."""
    return any(layout.endswith("c") for layouts in choice.values() for layout in layouts)


def _convertible_convs(mod: tvm.IRModule, info) -> int:
    count = [0]

    @relax.expr_functor.visitor
    class _Count(relax.PyExprVisitor):
        def visit_call_(self, call):
            if isinstance(call.op, tvm.ir.Op) and _blocks(conv_layout_choice(call, info)):
                count[0] += 1
            super().visit_call_(call)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            _Count().visit_expr(func)
    return count[0]


def layout_transforms(mod: tvm.IRModule) -> int:
    """``layout_transform`` calls on non-constant tensors in the Relax functions of ``mod``
    (each one a kernel per inference: after the layout stage, the places the blocked
    layout is entered or left)."""
    count = [0]

    @relax.expr_functor.visitor
    class _Count(relax.PyExprVisitor):
        def visit_call_(self, call):
            if (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.layout_transform"
                    and not is_constant(call.args[0])):
                count[0] += 1
            super().visit_call_(call)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            _Count().visit_expr(func)
    return count[0]


def blocked_layout(target: tvm.target.Target) -> tvm.transform.Pass:
    """``ConvertLayout`` moving supported convolutions to NCHW[x]c.

    Runs only when some conv is to be converted, and never breaks the build: if
    TVM's layout inference fails on a graph (it has on graphs that already hold
    blocked layouts) the module is kept as it was, with a warning; the
    legalization still uses the blocked kernels, packing NCHW inside each conv.
    """
    info = cpu_info(target)
    convert = relax.transform.ConvertLayout({}, lambda call: conv_layout_choice(call, info))

    @tvm.transform.module_pass(opt_level=0, name="BlockedLayout")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if not _convertible_convs(mod, info):
            return mod
        try:
            return convert(mod)
        except Exception as err:  # noqa: BLE001 - TVM's layout inference refused the graph
            log.warning("blocked layout skipped, TVM's ConvertLayout failed: %s", last_line(err))
            return mod

    return _pass



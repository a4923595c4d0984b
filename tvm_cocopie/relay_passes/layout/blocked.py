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

import dataclasses
import logging

import tvm
from tvm import relax

from ...errors import last_line
from ...exprs import batched_shape, is_constant, static_shape
from ...target import cpu_info
from ...topi.cpu.legalize import SYMBOLIC_DIMS, conv2d_plan
from ...topi.cpu.tiling import channel_block

log = logging.getLogger(__name__)


def conv_layout_choice(call, info, grouped: str = "gspc", data_block: int | None = None) -> dict:
    """``{"relax.nn.conv2d": [data, kernel, out]}`` for one call, or ``{}`` to keep it;
    ``grouped``: the narrow-group conv kernel the legalization will use; ``data_block``:
    the input's block instead of its canonical one (the block its producer writes).

    A side of one channel (a grayscale image in, a one-map head out) stays NCHW while
    the other side is blocked: TVM's layout parser takes no block of 1 ("NCHW1c")."""
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
    dshape, wshape = batched_shape(call.args[0], SYMBOLIC_DIMS), static_shape(call.args[1])
    if dshape is None or wshape is None or len(dshape) != 4:
        return keep
    ib = channel_block(dshape[1], info) if data_block is None else data_block
    ob = channel_block(wshape[0], info)
    if ib == 1 and ob == 1:
        return keep
    ib, ob = (0 if ib == 1 else ib), (0 if ob == 1 else ob)  # 0: NCHW (layout_block)
    if conv2d_plan(call, info, data_block=ib, out_block=ob, grouped=grouped) is None:
        return keep
    return {"relax.nn.conv2d": [_layout(ib), "OIHW", _layout(ob)]}


def _layout(block: int) -> str:
    """The data layout of a channel block (0: NCHW)."""
    return f"NCHW{block}c" if block else "NCHW"


def narrower_blocks(call, info) -> list[int]:
    """The input blocks to try, widest first, when a conv's canonical input block makes
    TVM's ``ConvertLayout`` fail: it cannot move a tensor from one channel block to
    another (NCHW8c -> NCHW16c: "Invalid layout axis 16b"), which a concat of 8-channel
    blocked tensors feeding a conv of 16-channel blocks asks for; the conv reading its
    input in the producers' narrower block needs no transform at all. Depthwise convs
    take none (their input and output blocks are one)."""
    dshape = batched_shape(call.args[0], SYMBOLIC_DIMS)
    if dshape is None or len(dshape) != 4 or int(call.attrs.groups) > 1:
        return []
    canonical = channel_block(dshape[1], info)
    return [b for b in (8, 4, 2) if b < canonical and dshape[1] % b == 0]


def _blocks(choice: dict) -> bool:
    """The choice moves a tensor to a blocked layout (not only NCHW kept explicitly)."""
    return any(layout.endswith("c") for layouts in choice.values() for layout in layouts)


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


def blocked_layout(target: tvm.target.Target, grouped: str = "gspc") -> tvm.transform.Pass:
    """``ConvertLayout`` moving supported convolutions to NCHW[x]c.

    Runs only when some conv is to be converted, and never breaks the build: if
    TVM's layout inference fails on the graph (split of a blocked channel axis, say),
    the convolution whose conversion makes it fail is found by bisection over the
    convs in graph order and kept in NCHW, with a warning naming it, and the rest is
    converted; only if that does not converge is the module kept as it was (the
    legalization still uses the blocked kernels, packing NCHW inside each conv).
    ``grouped``: the narrow-group conv kernel of the legalization (``PipelineOptions``).
    """
    info = cpu_info(target)

    @tvm.transform.module_pass(opt_level=0, name="BlockedLayout")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        data_blocks: dict[int, int] = {}  # weight key -> input block other than canonical

        def choose(call) -> dict:
            return conv_layout_choice(call, info, grouped,
                                      data_blocks.get(_weight_key(call)))

        convs = _convertible_weights(mod, choose)
        if not convs:
            return mod
        kept: set[int] = set()
        while True:
            result, err = _convert(mod, choose, kept, None)
            if result is not None:
                return result
            if len(kept) >= MAX_EXCLUDED:
                break
            order = [c for c in convs if c not in kept]
            culprit = _first_failing(mod, choose, kept, order)
            if culprit is None:
                break
            upto = set(order[:order.index(culprit) + 1])
            for block in narrower_blocks(convs[culprit].call, info):
                data_blocks[culprit] = block
                if _convert(mod, choose, kept, upto)[0] is not None:
                    log.info("blocked layout: a conv (weight %s) reads its input in "
                             "blocks of %d", convs[culprit].shape, block)
                    break
                del data_blocks[culprit]
            else:
                kept.add(culprit)
                log.warning("blocked layout: a conv (weight %s) stays NCHW, TVM's "
                            "ConvertLayout failed with it: %s", convs[culprit].shape, err)
        log.warning("blocked layout skipped, TVM's ConvertLayout failed: %s", err)
        return mod

    return _pass


#: convs left in NCHW before the blocked layout is given up for a whole graph
MAX_EXCLUDED = 8


def _weight_key(call) -> int | None:
    weight = call.args[1] if len(call.args) > 1 else None
    return None if weight is None else hash(weight)


@dataclasses.dataclass(frozen=True)
class _Conv:
    call: relax.Call
    shape: str  # the weight's, for messages


def _convertible_weights(mod: tvm.IRModule, choose) -> dict[int, _Conv]:
    """``{weight key: the conv}`` of the convs the blocked layout would convert, in order."""
    found: dict[int, _Conv] = {}

    @relax.expr_functor.visitor
    class _Collect(relax.PyExprVisitor):
        def visit_call_(self, call):
            if isinstance(call.op, tvm.ir.Op) and _blocks(choose(call)):
                key = _weight_key(call)
                if key is not None and key not in found:
                    found[key] = _Conv(call, str(static_shape(call.args[1])))
            super().visit_call_(call)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            _Collect().visit_expr(func)
    return found


def _convert(mod, choose, kept: set, allowed: set | None):
    """``(converted module, None)`` or ``(None, error)``: ConvertLayout with the convs of
    ``kept`` in NCHW (and, if ``allowed`` is given, only those converted)."""

    def choice(call):
        chosen = choose(call)
        key = _weight_key(call) if _blocks(chosen) else None
        if key is not None and (key in kept or (allowed is not None and key not in allowed)):
            return {call.op.name: ["NCHW", str(call.attrs.kernel_layout), "NCHW"]}
        return chosen

    try:
        return relax.transform.ConvertLayout({}, choice)(mod), None
    except Exception as err:  # noqa: BLE001 - TVM's layout inference refused the graph
        return None, last_line(err)


def _first_failing(mod, choose, kept: set, order: list) -> int | None:
    """The conv whose conversion, with every conv before it in ``order``, first fails
    (converting all of them is known to fail); ``None`` if the graph fails with none of
    them converted (the failure is no conv's: a ``stack`` before its shape_ops rewrite)."""
    lo, hi = 0, len(order)  # order[:lo] converts; order[:hi] fails
    if _convert(mod, choose, kept, set())[0] is None:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _convert(mod, choose, kept, set(order[:mid]))[0] is not None:
            lo = mid
        else:
            hi = mid
    return order[hi - 1]

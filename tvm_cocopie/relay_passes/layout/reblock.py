"""A tensor moved from one channel block to another through NCHW, in one step or none.

Where the producers of a tensor write it in blocks of ``b1`` channels and its consumer
asks for blocks of ``b2`` (a concat of 24-channel convs, in 8-channel blocks on a
16-lane target, feeding a 96-channel conv, in 16-channel blocks; the two halves of a
ShuffleNet stage boundary), ``ConvertLayout`` leaves two transforms, ``T_b2(U_b1(x))``:
two feature-map copies per inference. Then:

* a conv reading ``T_b2(U_b1(x))`` reads ``x`` itself, in blocks of ``b1``, when the
  kernel planner takes that input block (any block that divides the channels, for a
  conv that is not depthwise; the conv's inner loop broadcasts one input channel at a
  time, so the input block does not change its speed);
* any other ``T_b2(U_b1(x))`` is one re-blocking transform of ``x``;
* a conv writing NCHW (a head of one output channel: TVM parses no "NCHW1c") reads
  an NCHW input as it comes, not through a blocking transform (its blocked input is
  for a producer that writes blocks).

The layout stage's dead-code elimination then drops what no one reads any more.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from ...exprs import op_name, var_uses, with_functions
from ...target import cpu_info
from .blocked import conv_layout_choice


def _block_map(block: int) -> tirx.IndexMap:
    return tirx.IndexMap.from_func(lambda n, c, y, x: (n, c // block, y, x, c % block), ndim=4)


def _unblock_map(block: int) -> tirx.IndexMap:
    return tirx.IndexMap.from_func(lambda n, cb, y, x, ci: (n, cb * block + ci, y, x), ndim=5)


def _reblock_map(src: int, dst: int) -> tirx.IndexMap:
    def reblock(n, cb, y, x, ci):
        c = cb * src + ci
        return n, c // dst, y, x, c % dst

    return tirx.IndexMap.from_func(reblock, ndim=5)


def _transform(value):
    """``value`` if it is a ``layout_transform`` call without padding, else ``None``."""
    if op_name(value) == "layout_transform" and value.attrs.pad_value is None:
        return value
    return None


def _blocks(expr) -> int | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if not isinstance(shape, relax.ShapeExpr) or len(shape.values) != 5:
        return None
    last = shape.values[-1]
    return int(last) if isinstance(last, tirx.IntImm) else None


def through_nchw(value, bindings: dict) -> tuple[relax.Expr, int, int] | None:
    """``(x, b1, b2)`` if ``value`` is ``T_b2(U_b1(x))`` with ``b1 != b2`` (``bindings``:
    var -> the value bound to it), else ``None``."""
    block = _transform(value)
    if block is None or (dst := _blocks(block)) is None:
        return None
    unblock = _transform(bindings.get(block.args[0]))
    if unblock is None:
        return None
    source = unblock.args[0]
    src = _blocks(source)
    if src is None or src == dst:
        return None
    if not (block.attrs.index_map.is_equivalent_to(_block_map(dst))
            and unblock.attrs.index_map.is_equivalent_to(_unblock_map(src))):
        return None
    return source, src, dst


def _conv_attrs(call: relax.Call) -> dict:
    attrs = call.attrs
    return {"strides": attrs.strides, "padding": attrs.padding, "dilation": attrs.dilation,
            "groups": attrs.groups, "kernel_layout": attrs.kernel_layout,
            "out_dtype": attrs.out_dtype}


def _plan(func: relax.Function, info, grouped: str) -> tuple[dict, dict]:
    """``({conv var: (its new input, its layout)}, {transform var: (x, b1, b2)})``: the
    convs to rewrite (every reader of their ``T(U(x))`` is such a conv; a conv writing
    NCHW reading ``T(y)`` of an NCHW ``y``) and the two-step transforms to make one."""
    bindings = {b.var: b.value for b in _bindings(func)}
    uses = var_uses(func)
    reblocked = {var: found for var, value in bindings.items()
                 if (found := through_nchw(value, bindings)) is not None}
    readers: dict = {}  # reblocked var -> the convs that can read its source instead
    for var, value in bindings.items():
        data = value.args[0] if op_name(value) == "nn.conv2d" else None
        if data not in reblocked:
            continue
        src = reblocked[data][1]
        # the conv as the planner sees it: on the NCHW tensor between the transforms
        nchw = relax.BlockBuilder().normalize(relax.op.nn.conv2d(
            bindings[data].args[0], value.args[1], data_layout="NCHW", out_layout="NCHW",
            **_conv_attrs(value)))
        choice = conv_layout_choice(nchw, info, grouped, src).get("relax.nn.conv2d")
        if choice and choice[0] == f"NCHW{src}c" and choice[2] == str(value.attrs.out_layout):
            readers.setdefault(data, []).append(var)
    # ConvertLayout writes one T(U(x)) per reader: a copy stays if any reader of any
    # copy needs it, and then all convs go on reading it (the copies are one tensor)
    needed = {(found[0], found[2]) for var, found in reblocked.items()
              if len(readers.get(var, ())) != uses.get(var, 0)}
    convs = {conv: (reblocked[data][0], f"NCHW{reblocked[data][1]}c")
             for data, convs in readers.items()
             if (reblocked[data][0], reblocked[data][2]) not in needed for conv in convs}
    # a conv writing NCHW (a one-channel head) reads an NCHW input as it comes
    for var, value in bindings.items():
        if var in convs or op_name(value) != "nn.conv2d" or \
                str(value.attrs.out_layout) != "NCHW":
            continue
        block = _transform(bindings.get(value.args[0]))
        source = None if block is None else block.args[0]
        if source is not None and _rank(source) == 4 and _blocks(block) and \
                block.attrs.index_map.is_equivalent_to(_block_map(_blocks(block))):
            convs[var] = (source, "NCHW")
    return convs, reblocked


def _rank(expr) -> int | None:
    return getattr(getattr(expr, "ty", None), "ndim", None)


def _bindings(func: relax.Function) -> list:
    body = func.body
    return [b for block in getattr(body, "blocks", ()) for b in block.bindings]


@relax.expr_functor.mutator
class _Reblock(relax.PyExprMutator):
    def __init__(self, mod, convs: dict, reblocked: dict):
        super().__init__(mod)
        self.convs = convs
        self.reblocked = reblocked

    def visit_var_binding_(self, binding):
        value = binding.value
        if binding.var in self.convs:
            source, layout = self.convs[binding.var]
            new = self.builder_.emit(relax.op.nn.conv2d(
                self.visit_expr(source), self.visit_expr(value.args[1]), data_layout=layout,
                out_layout=value.attrs.out_layout, **_conv_attrs(value)))
            self.set_var_remap(binding.var, new)
            return
        if binding.var in self.reblocked and isinstance(binding.var, relax.DataflowVar):
            source, src, dst = self.reblocked[binding.var]
            new = self.builder_.emit(relax.op.layout_transform(
                self.visit_expr(source), _reblock_map(src, dst)))
            self.set_var_remap(binding.var, new)
            return
        super().visit_var_binding_(binding)


def reblocked_conv_inputs(target: tvm.target.Target, grouped: str = "gspc"
                          ) -> tvm.transform.Pass:
    """The rewrite of the module docstring (``grouped``: the narrow-group conv kernel of
    the legalization, as for :func:`.blocked.blocked_layout`)."""
    info = cpu_info(target)

    @tvm.transform.module_pass(opt_level=0, name="ReblockedConvInputs")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gvar, func in mod.functions_items():
            if not isinstance(func, relax.Function):
                continue
            convs, reblocked = _plan(func, info, grouped)
            if not convs and not reblocked:
                continue
            rewriter = _Reblock(mod, convs, reblocked)
            mod = with_functions(mod, {gvar: rewriter.visit_expr(func)})
        return mod

    return _pass

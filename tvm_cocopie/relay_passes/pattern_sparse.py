"""Pattern-sparse convolutions (PatDNN) found in a graph and given their kernel.

Every ``relax.nn.conv2d`` whose constant 3x3 weight is pattern-sparse
(:func:`tvm_cocopie.pruning.detect`: at most a few distinct kernel supports, most
kernels empty) becomes one call of the pattern kernel
(:mod:`tvm_cocopie.topi.cpu.pattern_conv`) with its FKW arrays as constants; a
following bias ``add`` (per-channel constant) and ``relu`` / ``clip`` are taken into
the kernel's epilogue when the conv's result has no other use. Dense convs are left to
the legalization. It runs in the ``legalize`` stage, after the layout stage chose the
conv's ``NCHW{b}c`` layouts, which the kernel then reads and writes. The module
carries the kernel's portable form (layouts moved element by element, no lane
shuffles: MetaSchedule's task analyses read it); the cocopie TIR pipeline generates it
with its lane transposes, and with the register tile a tuning database chose
(:mod:`tvm_cocopie.kernel_knobs`).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import tvm
from tvm import relax

from ..exprs import const_np, is_constant, op_name, static_shape, var_uses
from ..pruning import detect
from ..target import cpu_info
from ..topi.cpu import pattern_conv as pc
from ..topi.cpu.legalize import conv_geometry, conv_unsupported, layout_block

log = logging.getLogger(__name__)


def _channel_bias(value: np.ndarray, o: int, out_block: int) -> np.ndarray | None:
    """A per-output-channel bias of length ``o`` from a broadcast constant in the conv's
    output layout, or None if the constant is not one."""
    v = np.asarray(value, np.float32)
    if out_block:
        if v.shape != (1, o // out_block, 1, 1, out_block):
            return None
        return v.reshape(o)
    if v.shape not in ((1, o, 1, 1), (o, 1, 1)):
        return None
    return v.reshape(o)


@relax.expr_functor.mutator
class _PatternRewriter(relax.PyExprMutator):
    def __init__(self, mod, knobs_for):
        super().__init__(mod)
        self.knobs_for = knobs_for
        self.uses: dict = {}
        self.calls: list = []  # (call_tir expr, spec, data, weight arrays, bias or None)
        self.count = 0

    def _emit(self, spec: pc.PatternConv, data, arrays, bias):
        func = pc.pattern_conv_func(spec)
        gv = self.builder_.add_func(func, "conv2d_pattern_sparse")
        args = [data, *(relax.const(a) for a in arrays)]
        if bias is not None:
            args.append(relax.const(bias))
        call = relax.call_tir(gv, args, relax.TensorType(list(spec.out_shape()), "float32"))
        self.calls.append((call, spec, data, arrays, bias))
        return call

    def _pattern_call(self, var):
        """The pattern call ``var`` is bound to, if it has no epilogue yet and one use."""
        if not isinstance(var, relax.Var) or self.uses.get(var, 0) != 1:
            return None
        try:
            bound = self.lookup_binding(var)
        except Exception:  # noqa: BLE001 - not a binding of this function
            return None
        for entry in self.calls:
            if entry[0].same_as(bound):
                return entry
        return None

    def visit_call_(self, call):
        new = super().visit_call_(call)
        name = op_name(new)
        replacement = None
        if name == "nn.conv2d":
            replacement = self._conv(new)
        elif name == "add":
            replacement = self._bias(new)
        elif name in ("nn.relu", "clip"):
            replacement = self._activation(new, name)
        return new if replacement is None else replacement

    def _conv(self, call):
        weight = call.args[1]
        if not is_constant(weight) or conv_unsupported(call):
            return None
        if static_shape(call.args[0]) is None:  # a symbolic batch: the kernel is static
            return None
        db = layout_block(str(call.attrs.data_layout))
        obk = layout_block(str(call.attrs.out_layout))
        if db is None or obk is None:
            return None
        geo = conv_geometry(call, static_shape(call.args[0]), static_shape(weight))
        if pc.unsupported(geo):
            return None
        w = const_np(weight)
        layout = detect(w)
        if layout is None:
            return None
        spec = pc.PatternConv(geo, layout.patterns, layout.kernels, self.knobs_for(geo),
                              "pattern", db, obk, lane_transposes=False)
        self.count += 1
        log.debug("pattern-sparse conv %dx%d @%dx%d: %d patterns, connectivity %.2fx",
                  geo.o, geo.c, geo.h, geo.w, len(layout.patterns), layout.connectivity)
        return self._emit(spec, call.args[0], pc.weight_arrays(spec, w, layout), None)

    def _bias(self, call):
        lhs, rhs = call.args
        if is_constant(lhs):
            lhs, rhs = rhs, lhs
        entry = self._pattern_call(lhs)
        if entry is None or not is_constant(rhs):
            return None
        _, spec, data, arrays, _ = entry
        if spec.bias or spec.activation != "none":
            return None
        bias = _channel_bias(const_np(rhs), spec.geo.o, spec.out_block)
        if bias is None:
            return None
        return self._emit(dataclasses.replace(spec, bias=True), data, arrays, bias)

    def _activation(self, call, name):
        entry = self._pattern_call(call.args[0])
        if entry is None:
            return None
        _, spec, data, arrays, bias = entry
        if spec.activation != "none":
            return None
        changes = {"activation": "relu"}
        if name == "clip":
            lo, hi = (float(v.value) for v in call.args[1:3])
            changes = {"activation": "clip", "clip": (lo, hi)}
        return self._emit(dataclasses.replace(spec, **changes), data, arrays, bias)


def pattern_sparse_convs(target, knobs_for=None) -> tvm.transform.Pass:
    """The pass: pattern-sparse constant-weight convs (with their bias and activation)
    as pattern kernel calls, for the CPU ``target``. ``knobs_for(geo)`` gives each conv's
    :class:`~tvm_cocopie.topi.cpu.pattern_conv.PatternKnobs` (default:
    :func:`~tvm_cocopie.topi.cpu.pattern_conv.default_knobs`)."""
    lanes = cpu_info(target).f32_lanes

    def knobs(geo):
        return knobs_for(geo) if knobs_for else pc.default_knobs(geo, lanes)

    @tvm.transform.module_pass(opt_level=0, name="PatternSparseConv")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        rewriter = _PatternRewriter(mod, knobs)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.uses = var_uses(func)
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        if not rewriter.count:
            return mod
        log.info("%d pattern-sparse convs on the pattern kernel", rewriter.count)
        return relax.transform.DeadCodeElimination()(rewriter.builder_.get())

    return _pass


__all__ = ["pattern_sparse_convs"]

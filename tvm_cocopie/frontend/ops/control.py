"""Converters of ONNX control flow that :mod:`..control_flow` could not resolve at
compile time (they say why), and of its run-time ``If`` condition check (``IfGuard``)."""

from __future__ import annotations

import logging

from tvm import relax, te, tirx
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ...errors import ModelError
from ..control_flow import GUARD_OP, MAX_UNROLL
from .registry import register

log = logging.getLogger(__name__)


@register("Scan")
class Scan(OnnxOpConverter):
    """Only reached when :func:`..control_flow.simplify` could not unroll the scan."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        raise ModelError(
            f"Scan needs a static sequence length (at most {MAX_UNROLL}) to be unrolled "
            "(opset 8 Scan, with its batch axis, is not supported); fix the input shapes "
            "with shapes={...}")


@register("Loop")
class Loop(OnnxOpConverter):
    """Only reached when :func:`..control_flow.simplify` could not unroll the loop."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        raise ModelError(
            "Loop needs a trip count known at compile time (at most "
            f"{MAX_UNROLL}) and a body whose condition stays true; TVM's Relax has no "
            "loops to import it into. Fix the input shapes with shapes={...}")


def _guard_func(cond: relax.TensorType, value: relax.TensorType, expected: bool,
                message: str) -> tirx.PrimFunc:
    """``out = value`` after asserting that ``cond`` (its one element) is ``expected``."""
    c = te.placeholder(list(cond.shape.values), cond.dtype, name="cond")
    x = te.placeholder(list(value.shape.values), value.dtype, name="value")

    def build(ins, outs):
        flag = tirx.BufferLoad(ins[0], [0] * len(c.shape))
        flag = flag if cond.dtype == "bool" else flag != tirx.const(0, cond.dtype)
        check = flag if expected else tirx.Not(flag)
        with IRBuilder() as ib, T.Assert(check, message, "ValueError"):
            if x.shape:
                with T.grid(*x.shape) as index:
                    T.buffer_store(outs[0], ins[1][tuple(index)], index)
            else:
                T.buffer_store(outs[0], tirx.BufferLoad(ins[1], []), [])
        return ib.get()

    y = te.extern([x.shape], [c, x], build, name="if_guard", dtype=[value.dtype])
    func = te.create_prim_func([c, x, y])
    # opaque (8): a check, not a computation to fuse with its neighbours
    func = func.without_attr("global_symbol").with_attr("op_pattern", 8)
    return func.with_attr("tirx.is_scheduled", True)


@register(GUARD_OP)
class IfGuard(OnnxOpConverter):
    """:data:`..control_flow.GUARD_OP`: ``value`` passed through once the ``If``
    condition ``cond`` is checked at run time (written by
    :func:`..control_flow.simplify` for an ``If`` whose other branch cannot run)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        cond, value = inputs[0], inputs[1]
        types = [getattr(v, "ty", None) for v in (cond, value)]
        if not all(isinstance(t, relax.TensorType) and t.shape is not None
                   and hasattr(t.shape, "values") for t in types):
            raise ModelError(f"{GUARD_OP} needs a condition and a value of known shape, got "
                             f"{types[0]} and {types[1]}")
        message = attr["message"]
        message = message.decode() if isinstance(message, bytes) else str(message)
        func = _guard_func(types[0], types[1], bool(attr.get("expected", 1)), message)
        gv = bb.add_func(func, "if_guard")
        return relax.call_tir(gv, [cond, value], types[1])

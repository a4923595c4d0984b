"""What a fusion stage made of a model: kernels launched, intermediate bytes, fallbacks.

:func:`fusion_stats` runs the cocopie pipeline up to the ``fusion`` stage with the
given options and reads ``main``:

- ``kernels``: PrimFunc calls in ``main`` (each one a kernel launch per inference);
- ``intermediate_bytes``: bytes the kernels write that another kernel reads back
  (every call's result except the model's outputs);
- ``fallbacks``: fused kernels the generic schedule (:class:`~tvm_cocopie.schedules.cpu.
  fallback.Fallback`) gets although they hold a conv or matmul block that has a fast
  rule of its own (the fast rule could not take the fused kernel);
- ``rules``: how many calls each schedule rule takes.

:func:`kernel_profile` times every kernel call of a scheduled module on its own (random
inputs of the call's shapes), to see where a model's time goes.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax, s_tir

from ..exprs import static_shape
from ..pipeline import PipelineOptions, run_until
from ..relay_passes.fusion.profiler import time_primfunc
from ..schedules import default_rules
from ..schedules.base import annotated_blocks
from ..target import parse_target
from ..topi.cpu.conv2d_nchwc import ANNOTATION as CONV_ANNOTATION
from ..topi.cpu.dense_packed import ANNOTATION as MATMUL_ANNOTATION

log = logging.getLogger(__name__)

_FAST = (CONV_ANNOTATION, MATMUL_ANNOTATION)


@dataclass
class KernelCall:
    """One ``call_tir`` of ``main``: its kernel, its result's bytes, whether the result
    leaves the model."""

    kernel: str
    out_bytes: int
    is_output: bool


def kernel_calls(mod: tvm.IRModule) -> list[KernelCall]:
    """The ``call_tir`` bindings of ``mod["main"]``, in program order."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    main = mod["main"]
    outputs = set()

    def mark(expr):
        if isinstance(expr, relax.Var):
            outputs.add(expr)

    relax.analysis.post_order_visit(main.body.body, mark)
    aliases = {}
    calls = []
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Var):  # a rebinding (dataflow output)
                aliases[binding.var] = value
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                shape = static_shape(binding.var)
                size = 0 if shape is None else int(np.prod(shape, dtype=np.int64))
                itemsize = np.dtype(str(binding.var.ty.dtype)).itemsize \
                    if hasattr(binding.var.ty, "dtype") else 0
                calls.append((binding.var, KernelCall(value.args[0].name_hint,
                                                      size * itemsize, False)))
    for var in list(outputs):
        while var in aliases:
            var = aliases[var]
            outputs.add(var)
    for var, call in calls:
        call.is_output = var in outputs
    return [c for _, c in calls]


def _has_fast_block(func: tvm.tirx.PrimFunc) -> bool:
    sch = s_tir.Schedule(func)
    return any(annotated_blocks(sch, key) for key in _FAST)


def rule_of(func: tvm.tirx.PrimFunc, target, rules: list) -> str:
    """The name of the first rule of ``rules`` that schedules ``func`` (``"none"``)."""
    with target:
        for rule in rules:
            if rule.apply(func, target, False) is not None:
                return rule.name
    return "none"


def fusion_stats(mod: tvm.IRModule, target=None, options: PipelineOptions | None = None,
                 fused: tvm.IRModule | None = None) -> dict:
    """Kernels, intermediate bytes, fallbacks and rules of ``mod`` (an imported model)
    after the pipeline's ``fusion`` stage with ``options`` (or of ``fused`` if given)."""
    target = parse_target(target)
    if fused is None:
        fused = run_until(mod, target, "fusion", options)
    calls = kernel_calls(fused)
    rules = default_rules(target)
    rule_by_kernel, fallbacks = {}, 0
    for call in calls:
        if call.kernel not in rule_by_kernel:
            func = fused[call.kernel]
            rule = rule_of(func, target, rules)
            rule_by_kernel[call.kernel] = rule
            if rule == "fallback" and _has_fast_block(func):
                log.warning("kernel %s holds a conv/matmul block but falls back to the "
                            "generic schedule", call.kernel)
                fallbacks += 1
    return {
        "kernels": len(calls),
        "intermediate_bytes": sum(c.out_bytes for c in calls if not c.is_output),
        "fallbacks": fallbacks,
        "rules": dict(Counter(rule_by_kernel[c.kernel] for c in calls)),
    }


def kernel_profile(mod: tvm.IRModule, target=None, options: PipelineOptions | None = None,
                   min_repeat_ms: int = 5) -> list[tuple[str, int, float]]:
    """``(kernel, calls, total µs)`` of ``mod`` built with ``options``, slowest first:
    each kernel scheduled as the pipeline schedules it and timed alone."""
    target = parse_target(target)
    fused = run_until(mod, target, "fusion", options)
    counts = Counter(c.kernel for c in kernel_calls(fused))
    rules = default_rules(target)
    rows = []
    for kernel, n in counts.items():
        us = time_primfunc(fused[kernel], target, rules, min_repeat_ms)
        rows.append((kernel, n, n * us))
    return sorted(rows, key=lambda r: -r[2])

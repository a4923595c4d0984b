"""Measuring for the latency model: a model's kernels, their times inside it, the whole.

:func:`scheduled_kernels` gives a model's kernels as the cocopie pipeline schedules
them (the ``schedule`` stage) with the calls one inference makes of each;
:func:`measure_model` compiles the model, times every kernel call inside it (the Relax
VM's instrument, :func:`.runtime_stats.kernel_times`, medians over rounds), times the
whole inference without the instrument, counts the VM calls, and stores kernel rows
(kind ``model``) and the model row in a :class:`~tvm_cocopie.latency.Dataset`.
:func:`model_prediction` predicts a model from its scheduled kernels; with a measured
model it is the ``--measure`` column of ``tvm-cocopie predict``.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter

import tvm
import tvm_ffi
from tvm import relax

from ..api import compile_model
from ..frontend.importer import from_onnx
from ..latency import Dataset, LatencyModel, ModelPrediction, kernel_features
from ..latency.dataset import ModelRow, Row
from ..pipeline import PipelineOptions, run_until
from ..target import parse_target
from .runtime_stats import kernel_times, random_inputs

log = logging.getLogger(__name__)


def kernel_key(func: tvm.tirx.PrimFunc) -> str:
    """A kernel's key: the structural hash of its scheduled PrimFunc."""
    return f"{tvm_ffi.structural_hash(func) & 0xFFFFFFFFFFFF:x}"


def scheduled_kernels(model, target=None, shapes=None, options: PipelineOptions | None = None
                      ) -> list[tuple[str, tvm.tirx.PrimFunc, int]]:
    """``[(name, scheduled PrimFunc, calls per inference)]`` of the ONNX ``model`` (or a
    Relax module) compiled by the cocopie pipeline for ``target``: the kernels ``main``
    calls, in order of first call."""
    target = parse_target(target)
    mod = model if isinstance(model, tvm.IRModule) else from_onnx(model, shapes=shapes)
    scheduled = run_until(mod, target, "schedule", options)
    calls: Counter = Counter()

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.args and isinstance(expr.args[0],
                                                                     tvm.ir.GlobalVar):
            gv = expr.args[0]
            if isinstance(scheduled[gv], tvm.tirx.PrimFunc):
                calls[gv.name_hint] += 1

    relax.analysis.post_order_visit(scheduled["main"], visit)
    funcs = {gv.name_hint: f for gv, f in scheduled.functions_items()
             if isinstance(f, tvm.tirx.PrimFunc)}
    return [(name, funcs[name], n) for name, n in calls.items()]


def time_model(compiled, inputs: dict, runs: int = 30) -> float:
    """Median milliseconds of one inference of ``compiled`` on ``inputs`` (after two
    warm-up runs), without any instrument."""
    compiled.vm.set_instrument(None)
    for _ in range(2):
        compiled(**inputs)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        compiled(**inputs)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def measure_model(name: str, model, dataset: Dataset, target=None, shapes=None,
                  rounds: int = 20, runs: int = 30, options: PipelineOptions | None = None
                  ) -> ModelRow:
    """Measure model ``name`` (kernels in it, the whole) and store it in
    ``dataset`` as ``source`` ``name``; returns the model row."""
    target = parse_target(target)
    options = options or PipelineOptions()
    kernels = scheduled_kernels(model, target, shapes, options)
    compiled = compile_model(model, target=target, shapes=shapes, options=options)
    inputs = random_inputs(compiled)
    per_call = kernel_times(compiled, inputs, rounds=rounds)
    compiled.vm.set_instrument(None)
    total_ms = time_model(compiled, inputs, runs)
    rows, keys = [], {}
    for kname, func, calls in kernels:
        if kname not in per_call:
            # lowering may turn a kernel into a view (a reshape) or fold it away
            log.debug("%s: kernel %s was not seen running (not counted)", name, kname)
            continue
        key = kernel_key(func)
        keys[key] = keys.get(key, 0) + calls
        rows.append(Row(name, "model", key, kname, kernel_features(func, target),
                        1e6 * per_call[kname], calls, func))
    dataset.put(rows)
    row = ModelRow(name, total_ms, sum(keys.values()), keys)
    dataset.put_model(row)
    log.info("%s: %.2f ms, %d kernel calls (%d distinct kernels)", name, total_ms,
             sum(keys.values()), len(keys))
    return row


def model_prediction(latency_model: LatencyModel, model, target=None, shapes=None,
                     options: PipelineOptions | None = None) -> ModelPrediction:
    """The predicted latency of the ONNX ``model`` compiled by the cocopie pipeline:
    per kernel and in total (the kernel calls of one inference carry the VM's cost per
    call, as in :meth:`~tvm_cocopie.latency.LatencyModel.calibrate`)."""
    target = parse_target(target)
    kernels = scheduled_kernels(model, target, shapes, options)
    items = [(name, calls, kernel_features(func, target)) for name, func, calls in kernels]
    vm_calls = sum(calls for _, _, calls in kernels)
    return latency_model.predict_model(items, vm_calls)


def measured_kernels(model, target=None, shapes=None, options: PipelineOptions | None = None,
                     rounds: int = 20) -> tuple[dict, float]:
    """``({kernel name: us per call inside the model}, ms per inference)`` of the ONNX
    ``model`` compiled by the cocopie pipeline (the ``--measure`` column)."""
    target = parse_target(target)
    compiled = compile_model(model, target=target, shapes=shapes, options=options)
    inputs = random_inputs(compiled)
    per_call = kernel_times(compiled, inputs, rounds=rounds)
    compiled.vm.set_instrument(None)
    total_ms = time_model(compiled, inputs)
    return {k: 1e6 * v for k, v in per_call.items()}, total_ms


def leave_one_out_sources(dataset: Dataset) -> list[str]:
    """The models measured whole in ``dataset`` (the folds of leave-one-model-out)."""
    return [m.source for m in dataset.models()]


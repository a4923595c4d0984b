"""Measuring for the latency model: a model's kernels, their times, the whole.

:func:`scheduled_kernels` gives a model's kernels as the cocopie pipeline schedules
them (the ``schedule`` stage) with the calls one inference makes of each;
:func:`measure_model` compiles the model, times the whole inference, times every
kernel it runs alone with the caches flushed before each call (as in the model), and
stores kernel rows (kind ``model``) and the model row in a
:class:`~tvm_cocopie.latency.Dataset`.
:func:`model_prediction` predicts a model from its scheduled kernels; with a measured
model it is the ``--measure`` column of ``tvm-cocopie predict``.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import Counter

import tvm
from tvm import relax

from ..api import compile_model
from ..frontend.importer import from_onnx
from ..latency import Dataset, LatencyModel, ModelPrediction, kernel_features
from ..latency.dataset import ModelRow, Row, kernel_key
from ..pipeline import PipelineOptions, run_until
from ..relay_passes.fusion.profiler import FLUSH_BYTES, time_primfuncs
from ..target import parse_target
from ..threads import configured_threads, set_pool_threads
from .runtime_stats import random_inputs, vm_call_counts

log = logging.getLogger(__name__)


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


def _fixed_threads(model, target, shapes, options):
    """``model`` compiled to run on the target's cores, every call: no thread governor
    (it would switch to one thread on a noisy stretch and halve some measurements),
    and the process's pool set back to the target's cores (a governor of an earlier
    model may have left it at one)."""
    compiled = compile_model(model, target=target, shapes=shapes, options=options,
                             adaptive_threads=False)
    cores = int(target.attrs.get("num-cores") or 0) or configured_threads()
    set_pool_threads(cores)
    return compiled


def time_model(compiled, inputs: dict, runs: int | None = None, rounds: int = 10,
               pause_s: float = 0.2) -> float:
    """Milliseconds of one inference of ``compiled`` on ``inputs``: the fastest of
    ``rounds`` medians of ``runs`` calls each (default: as many as fill 0.3 s, 5 to 30),
    a pause between rounds (after two warm-up calls; no instrument). The kernels are timed the same way (the fastest round's
    median): this host's speed drifts by 30% and more over minutes (ResNet-18 11.6,
    13.0 and 21 ms in three processes), and one quiet stretch is enough."""
    compiled.vm.set_instrument(None)
    for _ in range(2):
        start = time.perf_counter()
        compiled(**inputs)
        once = time.perf_counter() - start
    if runs is None:
        runs = max(5, min(30, int(0.3 / max(once, 1e-6))))
    best = float("inf")
    for i in range(rounds):
        if i:
            time.sleep(pause_s)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            compiled(**inputs)
            times.append(time.perf_counter() - start)
        best = min(best, statistics.median(times))
    return 1e3 * best


def _measure(model, target, shapes, options, runs: int | None, flush_bytes: int):
    """``(kernels [(name, func, calls)] an inference runs, {kernel key: us}, ms per
    inference)``: the whole timed in the model, each distinct kernel alone with caches
    flushed (see :func:`measure_model`)."""
    kernels = scheduled_kernels(model, target, shapes, options)
    compiled = _fixed_threads(model, target, shapes, options)
    inputs = random_inputs(compiled)
    total_ms = time_model(compiled, inputs, runs)
    ran = vm_call_counts(compiled.executable, [inputs[n] for n in compiled.input_names],
                         compiled.device)
    # lowering may turn a kernel into a view (a reshape) or fold it away: not counted
    present = [(kname, func, calls) for kname, func, calls in kernels if ran.get(kname)]
    distinct = {}
    for _, func, _ in present:
        distinct.setdefault(kernel_key(func), func)
    keys = list(distinct)
    times = time_primfuncs([distinct[k] for k in keys], target, [], flush_bytes=flush_bytes)
    return present, dict(zip(keys, times)), total_ms


def measure_model(name: str, model, dataset: Dataset, target=None, shapes=None,
                  runs: int | None = None, options: PipelineOptions | None = None,
                  flush_bytes: int = FLUSH_BYTES) -> ModelRow:
    """Measure model ``name`` and store it in ``dataset`` as ``source`` ``name``:
    every kernel an inference runs, built alone and timed with ``flush_bytes`` of cache
    flushed before each call (as inside the model, where other layers ran in between;
    :func:`~tvm_cocopie.relay_passes.fusion.profiler.time_primfuncs`), and the whole
    inference (:func:`time_model`). Returns the model row.

    Kernels are not timed inside the model: a Python hook between kernels (the VM's
    instrument) let the pool's workers fall asleep and charged their wake-up to the
    next kernel, and the same ResNet-18 kernels measured 1.8x apart in two runs whose
    whole inference agreed within 5%."""
    target = parse_target(target)
    present, us, total_ms = _measure(model, target, shapes, options or PipelineOptions(),
                                     runs, flush_bytes)
    calls: dict = {}
    first: dict = {}
    for kname, func, n in present:
        key = kernel_key(func)
        calls[key] = calls.get(key, 0) + n
        first.setdefault(key, (kname, func))
    rows = [Row(name, "model", key, first[key][0], kernel_features(first[key][1], target),
                us[key], calls[key], first[key][1]) for key in calls]
    dataset.put(rows)
    row = ModelRow(name, total_ms, sum(calls.values()), calls)
    dataset.put_model(row)
    log.info("%s: %.2f ms, kernels %.2f ms summed, %d kernel calls (%d distinct kernels)",
             name, total_ms, sum(r.latency_us * r.calls for r in rows) / 1e3, row.vm_calls,
             len(calls))
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
                     flush_bytes: int = FLUSH_BYTES) -> tuple[dict, float]:
    """``({kernel name: us per call}, ms per inference)`` of the ONNX ``model``
    compiled by the cocopie pipeline, measured as :func:`measure_model` measures (the
    ``--measure`` column)."""
    target = parse_target(target)
    present, us, total_ms = _measure(model, target, shapes, options or PipelineOptions(),
                                     None, flush_bytes)
    return {kname: us[kernel_key(func)] for kname, func, _ in present}, total_ms

"""Measuring for the latency model: a model's kernels, their times, the whole.

:func:`scheduled_kernels` gives a model's kernels as the cocopie pipeline schedules
them (the ``schedule`` stage) with the calls one inference makes of each;
:func:`measure_model` compiles the model, times the whole inference and every
kernel inside it in the same rounds (:func:`time_model_and_kernels`), and stores kernel rows (kind
``model``) and the model row in a :class:`~tvm_cocopie.latency.Dataset`.
:func:`model_prediction` predicts a model from its scheduled kernels; with a measured
model it is the ``--measure`` column of ``tvm-cocopie predict``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict

import tvm
from tvm import relax

from ..api import compile_model
from ..frontend.importer import from_onnx
from ..latency import Dataset, LatencyModel, ModelPrediction, kernel_features
from ..latency.dataset import ModelRow, Row, kernel_key
from ..pipeline import PipelineOptions, run_until
from ..target import parse_target
from ..threads import configured_threads, set_pool_threads
from .runtime_stats import RUNTIME_CALLS, random_inputs

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


#: The statistic of a model's (and a kernel's) time: this quantile of every call over
#: the rounds. Six alternating measurements of three models (Zen 4 VM, 2 threads, 10
#: rounds of 0.3 s each): coefficient of variation 2.5-3.8% for the 10th percentile,
#: 3.0-5.8% for the fastest round's median, 5.6-12% for the median of all calls
QUANTILE = 0.1


def _quantile(values) -> float:
    ordered = sorted(values)
    return ordered[int(QUANTILE * (len(ordered) - 1))]


def _warm_up(compiled, inputs: dict, runs: int | None) -> int:
    """Two calls of ``compiled``; ``runs``, or as many calls as fill 0.3 s (5 to 30)."""
    for _ in range(2):
        start = time.perf_counter()
        compiled(**inputs)
        once = time.perf_counter() - start
    return runs or max(5, min(30, int(0.3 / max(once, 1e-6))))


def time_model_and_kernels(compiled, inputs: dict, runs: int | None = None,
                           rounds: int = 10, pause_s: float = 0.2, whole: bool = True,
                           kernels: bool = True) -> tuple[float | None, dict[str, float]]:
    """``(ms per inference, {kernel name: microseconds per call})`` of ``compiled`` on
    ``inputs``, from ``rounds`` rounds that each time ``runs`` plain inferences (the
    whole) and then ``runs`` inferences under the VM's instrument (the kernels), a
    pause between rounds (after two warm-up calls); each statistic the
    :data:`QUANTILE` over its calls (this host's speed drifts by 30% and more over
    minutes: ResNet-18 11.6, 13.0 and 21 ms in three processes; a low quantile over a
    few seconds is what repeats). ``whole`` / ``kernels``: either alone. Timed in
    the same rounds, the whole and its kernels see the same stretch of this host's
    drift (timed one after the other, a model's time over its kernels' sum spanned
    0.92-1.27 over 28 models).

    The instrument takes a clock reading as the last thing before each kernel call and
    the first thing after it; the VM's own builtins are not counted. A kernel so timed
    finds what the model leaves it: its input just written by the kernel before it (in
    cache if it fits), the pool's workers awake. Timed alone with the caches flushed
    the same kernels summed 4.64 ms in MobileNetV3-Large's 3.24 ms inference, and 48.7
    ms in ResNeXt-50's 41.9; timed here 3.1-3.5 ms (Zen 4, 2 threads). The
    instrument's own cost (a Python call on each side, the arguments wrapped) falls
    mostly outside the readings."""
    clock = time.perf_counter_ns
    start: dict = {}
    spent: dict = defaultdict(int)  # per kernel name in one inference: ns and calls
    calls: dict = defaultdict(int)

    def instrument(_func, symbol, before_run, _ret, *_args):
        name = str(symbol)
        if name.startswith(RUNTIME_CALLS):
            return 0
        if before_run:
            calls[name] += 1
            start[name] = clock()
        else:
            spent[name] += clock() - start[name]
        return 0  # VMInstrumentReturnKind.NO_OP

    compiled.vm.set_instrument(None)
    runs = _warm_up(compiled, inputs, runs)
    totals: list = []
    per_run = defaultdict(list)
    try:
        for i in range(rounds):
            if i:
                time.sleep(pause_s)
            if whole:
                for _ in range(runs):
                    begin = time.perf_counter()
                    compiled(**inputs)
                    totals.append(time.perf_counter() - begin)
            if kernels:
                compiled.vm.set_instrument(instrument)
                for _ in range(runs):
                    spent.clear()
                    calls.clear()
                    compiled(**inputs)
                    for name, ns in spent.items():
                        per_run[name].append(ns / 1e3 / calls[name])
                compiled.vm.set_instrument(None)
    finally:
        compiled.vm.set_instrument(None)
    ms = 1e3 * _quantile(totals) if totals else None
    return ms, {name: _quantile(us) for name, us in per_run.items()}


def _measure(model, target, shapes, options, runs: int | None):
    """``(kernels [(name, func, calls)] an inference runs, {kernel key: us}, ms per
    inference)``: the whole and each kernel timed in the model (see
    :func:`measure_model`)."""
    kernels = scheduled_kernels(model, target, shapes, options)
    compiled = _fixed_threads(model, target, shapes, options)
    inputs = random_inputs(compiled)
    total_ms, in_model = time_model_and_kernels(compiled, inputs, runs)
    # lowering may turn a kernel into a view (a reshape) or fold it away: not counted
    present = [(kname, func, calls) for kname, func, calls in kernels if kname in in_model]
    us: dict = {}
    weight: dict = {}
    for kname, func, calls in present:  # one key, several names: the calls' mean
        key = kernel_key(func)
        us[key] = us.get(key, 0.0) + in_model[kname] * calls
        weight[key] = weight.get(key, 0) + calls
    return present, {k: us[k] / weight[k] for k in us}, total_ms


def measure_model(name: str, model, dataset: Dataset, target=None, shapes=None,
                  runs: int | None = None, options: PipelineOptions | None = None
                  ) -> ModelRow:
    """Measure model ``name`` and store it in ``dataset`` as ``source`` ``name``:
    the whole inference and every kernel it runs, timed inside it in the same rounds
    (:func:`time_model_and_kernels`), as kernel rows (kind ``model``) and the model row.
    Returns the model row.

    Kernels were timed alone with 4 MiB of cache flushed before each call until
    2026-12-02: summed, that missed the whole inference by 5.6% median and 27-43%
    worst (a kernel in a model finds its input in cache), where the times inside the
    model sum to it within a few percent."""
    target = parse_target(target)
    present, us, total_ms = _measure(model, target, shapes, options or PipelineOptions(),
                                     runs)
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


def measured_kernels(model, target=None, shapes=None, options: PipelineOptions | None = None
                     ) -> tuple[dict, float]:
    """``({kernel name: us per call}, ms per inference)`` of the ONNX ``model``
    compiled by the cocopie pipeline, measured as :func:`measure_model` measures (the
    ``--measure`` column)."""
    target = parse_target(target)
    present, us, total_ms = _measure(model, target, shapes, options or PipelineOptions(),
                                     None)
    return {kname: us[kernel_key(func)] for kname, func, _ in present}, total_ms

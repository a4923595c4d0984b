"""Measurement helpers shared by the benchmark scripts and the demo.

The rules of DESIGN.md ("Benchmarks"): contenders run side by side in one process,
interleaved (A, B, C, A, B, C, ...), so that machine noise hits them alike; we report
medians and ratios; results are written atomically as one JSON object
``{"bench", "machine", "records", "summary"}``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..errors import CocopieError
from ..paths import write_json_atomic  # also the bench scripts' writer


def machine_info(threads: int | None = None) -> dict:
    """The facts a reader needs to interpret a benchmark file."""
    import tvm

    info = {
        "cpu": _cpu_model(),
        "llvm_cpu": str(tvm.target.codegen.llvm_get_system_cpu()),
        "cores": len(os.sched_getaffinity(0)),
        "threads": threads,
        "python": platform.python_version(),
        "tvm": tvm.__version__,
        "numpy": np.__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        info["onnxruntime"] = None
    try:
        import openvino

        info["openvino"] = openvino.__version__
    except ImportError:
        info["openvino"] = None
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def interleaved_times(
    contenders: Mapping[str, Callable[[], object]],
    repeat: int = 10,
    warmup: int = 1,
    max_seconds: float | None = None,
    settle_seconds: float = 0.005,
    block: int = 1,
    switch_seconds: float = 0.25,
) -> dict[str, list[float]]:
    """Run each contender ``repeat`` rounds, round-robin, after ``warmup`` rounds.

    Returns ``{name: [milliseconds, ...]}``. With ``max_seconds`` the rounds stop
    early once that much time has passed (at least three rounds are kept). Between
    two calls the loop pauses ``settle_seconds`` (untimed), so that the worker threads
    one runtime leaves spinning after its call are idle before the next one starts.

    ``block > 1`` runs each contender ``block`` times in a row per round and drops the
    first call of each block (untimed): the first call after switching runtimes pays
    for the other runtime's thread pool and caches. Measured on ResNet-18 (2 threads,
    quiet machine): call-by-call alternation put ONNX Runtime at 51 ms against 24 ms
    in blocks, while TVM moved from 29 to 25 ms, so ``block=1`` favours TVM; the e2e
    benchmark uses blocks.

    With blocks, the loop also pauses ``switch_seconds`` (untimed) before each
    contender's block: ONNX Runtime's intra-op threads go on spinning for tens of
    milliseconds after its last call, and on two cores they starve TVM's workers, whose
    fork-join waits for each of them. Measured on MobileNetV3-Small (2 threads, this
    AVX2 host): cocopie's call right after an ORT block took 50 ms, the next ones 4.4-4.6
    ms, and 3.9-4.1 ms from a 0.1 s pause on (3.5-4.0 ms with no ORT in the process;
    ORT's own time is the same either way). TVM's pool does the same the other way:
    after its last parallel call a worker spins on one core for 170-180 ms (process CPU
    sampled every 20 ms, AMD EPYC Zen 4 VM, 2 threads), so with a 0.1 s pause ONNX
    Runtime's 2-thread block ran beside it: VGG-16 L9 10.3 ms a call in blocks against
    4.4-4.9 ms back to back. Hence 0.25 s.
    """
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    start = time.perf_counter()
    for i in range(repeat):
        for name, fn in contenders.items():
            if block > 1:
                if switch_seconds:
                    time.sleep(switch_seconds)
                fn()
            for _ in range(max(1, block - 1)):
                if settle_seconds:
                    time.sleep(settle_seconds)
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
        if max_seconds is not None and i >= 2 and time.perf_counter() - start > max_seconds:
            break
    return times


#: the timed seconds one contender call should take (``number`` runs of a short kernel)
CALL_SECONDS = 0.002


def repeated(run, number: int):
    """A contender calling ``run`` ``number`` times (one timed call of the benchmark)."""
    def call():
        for _ in range(number):
            run()
    return call


def calls_for(run, seconds: float = CALL_SECONDS) -> int:
    """How many calls of ``run`` take about ``seconds`` (at least one)."""
    run()
    t0 = time.perf_counter()
    run()
    once = max(time.perf_counter() - t0, 1e-6)
    return max(1, int(seconds / once))


def time_per_call(runs: dict, repeat: int, max_seconds: float | None) -> dict:
    """``{name: median ms per call}`` of no-argument callables, interleaved in blocks of
    4, each timed call running its callable enough times for :data:`CALL_SECONDS`."""
    numbers = {k: calls_for(r) for k, r in runs.items()}
    times = interleaved_times({k: repeated(r, numbers[k]) for k, r in runs.items()},
                              repeat=repeat, warmup=1, max_seconds=max_seconds, block=4)
    return {k: median(v) / numbers[k] for k, v in times.items()}


def median(values: Iterable[float]) -> float:
    """The median of ``values``, as a float."""
    return float(statistics.median(list(values)))


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of the positive, finite ``values`` (``nan`` when there is none)."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return float("nan")
    return float(math.exp(sum(math.log(v) for v in vals) / len(vals)))


def geomean_or_none(values: Iterable[float | None]) -> float | None:
    """:func:`geomean` of the measured ``values`` (``None`` and 0 left out), or ``None``
    (valid JSON, unlike NaN) when nothing was measured."""
    vals = [v for v in values if v]
    return geomean(vals) if vals else None


def output_list(result) -> list:
    """A model's result (one array, or a list or tuple of them) as a list of outputs."""
    return list(result) if isinstance(result, (list, tuple)) else [result]


def max_abs_error(a, b) -> float:
    """Largest absolute difference over all outputs (lists are compared pairwise)."""
    if isinstance(a, (list, tuple)):
        return max((max_abs_error(x, y) for x, y in zip(a, b)), default=0.0)
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def max_rel_error(a, b) -> float:
    """Max abs error divided by the reference's largest magnitude (scale-free)."""
    if isinstance(a, (list, tuple)):
        return max((max_rel_error(x, y) for x, y in zip(a, b)), default=0.0)
    scale = float(np.max(np.abs(np.asarray(b, dtype=np.float64)))) or 1.0
    return max_abs_error(a, b) / scale


def bench_result(name: str, records: list, summary: dict, threads: int | None = None) -> dict:
    """The JSON shape of DESIGN.md."""
    return {"bench": name, "machine": machine_info(threads), "records": records, "summary": summary}


def ort_session(model, threads: int, spinning: bool = True):
    """An ONNX Runtime CPU session with ``threads`` intra-op threads (the yardstick), as
    it ships: its intra-op threads spin-wait after each run.

    Interleaved with TVM on the same cores, the spinning threads take the cores TVM's
    next call needs (measured on PP-OCR cls, 2 cores: TVM 139 ms beside a spinning ORT,
    8 ms beside a non-spinning one); :func:`interleaved_times` with blocks pauses before
    each contender's block until both runtimes' workers are idle. Without spinning ORT
    is no fair yardstick on this VM: its 2-thread VGG-16 L9 conv took 8.0-8.1 ms a call
    in blocks, against 4.3-4.6 ms spinning (TVM's time the same either way), so
    ``spinning=False`` is only for call-by-call alternation.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if not spinning:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def ort_runner(session, inputs: Mapping[str, np.ndarray]) -> Callable[[], list]:
    """A no-argument callable that runs ``session`` on ``inputs`` once (a timing contender)."""
    return lambda: session.run(None, dict(inputs))


#: OpenVINO's CPU plugin settings in the side-by-side runs (``INFERENCE_NUM_THREADS`` is
#: added per call). The precision is fixed: on a CPU with AVX512-BF16 or AMX the plugin
#: runs float32 models in bfloat16 by default, which ONNX Runtime and TVM do not.
OPENVINO_CONFIG = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}


def openvino_model(model, threads: int, shapes: Mapping[str, Iterable[int]] | None = None,
                   precision: str | None = "f32", pinning: bool | None = False):
    """An OpenVINO ``CompiledModel`` for the CPU plugin from the ONNX ``model`` (a proto,
    bytes or a path), with ``threads`` inference threads and the latency hint.

    ``shapes`` (``{input name: shape}``) makes the inputs static, as TVM compiles them.
    ``precision``: the ``INFERENCE_PRECISION_HINT`` (``"f32"``; ``None`` leaves the
    plugin's default, bfloat16 on CPUs that have it). ``pinning``: ``ENABLE_CPU_PINNING``
    (``None``: the plugin's default, on under Linux). Off by default, for the reason
    TVM's pool runs unpinned: side by side with other runtimes on a shared 2-core
    machine (blocks of 4, 112 px) pinned OpenVINO took 11-12 ms on MobileNetV3-Small and
    16-20 ms on MobileNetV2 against 2.1 and 3.3-4.1 ms unpinned. Raises what OpenVINO
    raises when it cannot read or compile the model.
    """
    import io

    import openvino as ov

    core = ov.Core()
    if hasattr(model, "SerializeToString"):
        model = io.BytesIO(model.SerializeToString())
    elif isinstance(model, bytes):
        model = io.BytesIO(model)
    ov_model = core.read_model(model if isinstance(model, io.BytesIO) else str(model))
    if shapes:
        ov_model.reshape({name: list(shape) for name, shape in shapes.items()})
    config = dict(OPENVINO_CONFIG, INFERENCE_NUM_THREADS=int(threads))
    if precision is None:
        del config["INFERENCE_PRECISION_HINT"]
    else:
        config["INFERENCE_PRECISION_HINT"] = precision
    if pinning is not None:
        config["ENABLE_CPU_PINNING"] = bool(pinning)
    return core.compile_model(ov_model, "CPU", config)


def openvino_config(compiled) -> dict:
    """The settings an OpenVINO ``compiled`` model runs with (its CPU pinning included,
    which the plugin turns on by default on Linux), as strings, for the record."""
    supported = {str(k) for k in compiled.get_property("SUPPORTED_PROPERTIES")}
    config = {}
    for key in ("PERFORMANCE_HINT", "INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT",
                "NUM_STREAMS", "ENABLE_CPU_PINNING", "ENABLE_HYPER_THREADING"):
        if key in supported:  # not every OpenVINO version has every one
            value = compiled.get_property(key)
            config[key] = str(getattr(value, "name", value)).replace("<Type: '", "").rstrip("'>")
    return config


def openvino_runner(compiled, inputs: Mapping[str, np.ndarray]) -> Callable[[], list]:
    """A no-argument callable that runs the OpenVINO ``compiled`` model on ``inputs``
    once and returns its outputs (copies) as a list in the model's output order."""
    request = compiled.create_infer_request()
    feeds = dict(inputs)
    outputs = list(compiled.outputs)

    def run():
        result = request.infer(feeds)
        return [result[o] for o in outputs]

    return run


def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A plain-text table: ``columns`` are (key, header, format)."""
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append([
            (fmt.format(row[k]) if row.get(k) is not None else "-") for k, _, fmt in columns
        ])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def previous_records(path, settings: dict) -> list:
    """The finished records of an earlier run in ``path`` (none if there is no file).

    Raises :class:`~tvm_cocopie.errors.CocopieError` naming what differs when that run
    was taken at other ``settings`` (threads, rounds, image size, time limit, stock
    TVM on or off, CPU, block size): resuming would mix incomparable figures.
    """
    if not path or not os.path.exists(path):
        return []
    with open(path) as fh:
        previous = json.load(fh)
    taken = previous.get("summary", {}).get("settings")
    if taken != settings:
        if taken is None:
            why = "records no settings (it was written before --resume checked them)"
        else:
            why = ", ".join(f"{k}={taken.get(k)!r} there, {v!r} now"
                            for k, v in settings.items() if taken.get(k) != v)
        raise CocopieError(
            f"--resume: {path} was taken at other settings ({why}); rerun with the same "
            "options, or without --resume (or with another --json path) to start over")
    return [r for r in previous.get("records", []) if "skipped" not in r]


def read_result_cache(path) -> dict:
    """A benchmark's per-item result cache (``key -> record``; empty when there is none)."""
    if not path or not os.path.exists(path):
        return {}
    with open(path) as fh:
        return json.load(fh)


def store_result(path, key: str, record) -> None:
    """Add ``record`` under ``key`` to the result cache at ``path``, written atomically, so
    an interrupted benchmark resumes where it stopped."""
    cache = read_result_cache(path)
    cache[key] = record
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_json_atomic(path, cache)


def previous_part(path, key: str) -> list:
    """The ``key`` list (``models``, ``tuned``) of an earlier run's JSON at ``path`` (none
    if there is no file): the parts of a result beside its ``records`` that ``--resume``
    keeps."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as fh:
        return json.load(fh).get(key, [])


@contextlib.contextmanager
def busy_processes(count: int):
    """``count`` processes spinning on a core while the block runs (a machine where other
    work holds cores: the thread-pool robustness measurement); ended on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(max(0, count))]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()

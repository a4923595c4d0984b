"""Peak memory of inference, measured in a process of its own (``bench_dynamic``).

:func:`peak_run_memory` starts ``python -m tvm_cocopie.bench.memory`` for one runtime
(``"cocopie"``: a library exported by :meth:`~tvm_cocopie.api.CompiledModel.export_library`,
run on a ``relax.VirtualMachine`` as :class:`~tvm_cocopie.api.CompiledModel` runs it;
``"ort"``: an ONNX model on an ONNX Runtime session made by
:func:`~.timing.ort_session`). The child:

1. loads the model (the library and its constants, or the session and its weights,
   pre-packed as ORT does at session creation) and the inputs, as runtime tensors;
2. hands the heap's free memory back to the system (glibc's ``malloc_trim(0)``:
   without it, what loading freed, such as the serialized model, stays resident and
   the runs reuse it unseen: ORT's CRNN runs measured 0.0 MiB of growth that way,
   3.6 MiB after the trim), resets the kernel's peak-RSS mark (``echo 5 >
   /proc/self/clear_refs``: ``VmHWM`` becomes the current RSS) and reads ``VmRSS``
   and ``RssFile`` from ``/proc/self/status``: the baseline;
3. runs the model ``runs`` times on the same inputs (the first run is where both
   runtimes allocate: ORT's arena, TVM's pooled allocator and the build's static
   scratch);
4. reads ``VmHWM`` (the peak RSS since the reset) and ``RssFile`` again.

``peak_mib`` is ``VmHWM - VmRSS(baseline)`` less the growth of ``RssFile`` over the
runs: the file-backed pages the runs faulted in are the runtime's code (TVM's kernels in
the ``.so``, ORT's in its library), not memory for tensors; ``RssFile`` only grows
without memory pressure, so at the peak at most that much of it was file pages. What
is left is the anonymous memory the runs added at their peak: intermediates, workspaces,
outputs, thread stacks touched. Without ``/proc/self/clear_refs`` (not Linux, or not
writable) the peak is ``ru_maxrss``, which also counts any peak before the baseline
(``method`` says which was used; ``trimmed``: whether ``malloc_trim`` ran).
Memory a runtime touched while loading and keeps for its runs (an arena filled at
session creation) is in the baseline, not in the figure.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import CocopieError, last_line

#: Runtimes the child can load.
RUNTIMES = ("cocopie", "ort")
#: Seconds a child may take (loading a large library, three runs of a large input).
TIMEOUT = 900.0


def peak_run_memory(runtime: str, model, inputs: Mapping[str, np.ndarray], threads: int,
                    runs: int = 3, input_names: Sequence[str] | None = None,
                    timeout: float = TIMEOUT) -> dict:
    """Peak memory (MiB) of ``runs`` inferences of ``model`` on ``inputs`` over what
    loading it took, measured in a subprocess (the module docstring says how).

    ``runtime``: ``"cocopie"`` (``model``: a :class:`~tvm_cocopie.api.CompiledModel`,
    exported to a temporary library) or ``"ort"`` (``model``: an ONNX path or
    ``ModelProto``). Returns ``{"peak_mib", "peak_rss_mib", "file_growth_mib",
    "baseline_mib", "method", "trimmed", "runs"}``. Raises
    :class:`~tvm_cocopie.errors.CocopieError` for an unknown runtime or a child that
    failed (its last error line).
    """
    if runtime not in RUNTIMES:
        raise CocopieError(f"unknown runtime {runtime!r} for the memory measure; "
                           f"use one of {', '.join(RUNTIMES)}")
    with tempfile.TemporaryDirectory(prefix="cocopie_memory_") as tmp:
        tmp = Path(tmp)
        if runtime == "cocopie":
            path = model.export_library(tmp / "model.so")
            names = list(input_names or model.input_names)
        else:
            path = _onnx_file(model, tmp)
            names = list(input_names or inputs)
        feeds = tmp / "inputs.npz"
        np.savez(feeds, **{n: np.asarray(inputs[n]) for n in names})
        out = tmp / "result.json"
        cmd = [sys.executable, "-m", __name__, runtime, str(path), str(feeds), str(out),
               "--threads", str(threads), "--runs", str(runs), "--inputs", ",".join(names)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired as err:
            raise CocopieError(f"the {runtime} memory measure took more than {timeout:.0f} s "
                               "(the model may be too large for this machine)") from err
        if proc.returncode or not out.exists():
            raise CocopieError(f"the {runtime} memory measure failed (exit {proc.returncode}): "
                               f"{last_line(proc.stderr) or 'no message'}")
        return json.loads(out.read_text())


def _onnx_file(model, folder: Path) -> Path:
    """An ONNX file of ``model`` (its own path, or the proto written to ``folder``)."""
    if isinstance(model, (str, os.PathLike)):
        return Path(model)
    from ..models import save

    return save(model, folder / "model.onnx")


# ----------------------------------------------------------------------- the child
def _status() -> dict[str, int]:
    """``/proc/self/status``'s memory lines, in KiB."""
    fields = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key.startswith(("Vm", "Rss")):
                fields[key] = int(value.split()[0])
    return fields


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0); whether that worked."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _trim_heap() -> bool:
    """Return the heap's free pages to the system (glibc ``malloc_trim(0)``); whether
    that could be done."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def _runner(runtime: str, path: str, feeds: dict, names: list[str], threads: int):
    """A no-argument callable running the loaded model once on ``feeds``."""
    if runtime == "ort":
        from .timing import ort_runner, ort_session

        # as the timed runs make it (bench.e2e: ORT as it ships, spinning threads)
        return ort_runner(ort_session(path, threads, spinning=True), feeds)
    import tvm
    from tvm import relax

    from .. import vm_scratch  # noqa: F401 - registers the build's static-memory scratch

    vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu(0))
    main = vm["main"]
    args = [tvm.runtime.tensor(feeds[n], tvm.cpu(0)) for n in names]
    return lambda: main(*args)


def measure(runtime: str, path: str, feeds: dict, names: list[str], threads: int,
            runs: int = 3) -> dict:
    """In this process: load, reset the peak, run ``runs`` times, read the peak (MiB)."""
    run = _runner(runtime, path, feeds, names, threads)
    gc.collect()
    trimmed = _trim_heap()
    reset = _reset_peak()
    before = _status()
    for _ in range(max(1, runs)):
        run()  # its outputs dropped at once: one run's are alive at a time, as in use
    after = _status()
    if reset:
        peak_kib, method = after["VmHWM"] - before["VmRSS"], "VmHWM after clear_refs"
    else:  # ru_maxrss is KiB on Linux
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before["VmRSS"]
        method = "ru_maxrss"
    file_kib = max(0, after.get("RssFile", 0) - before.get("RssFile", 0))
    return {"peak_mib": max(0, peak_kib - file_kib) / 1024, "peak_rss_mib": peak_kib / 1024,
            "file_growth_mib": file_kib / 1024, "baseline_mib": before["VmRSS"] / 1024,
            "method": method, "trimmed": trimmed, "runs": runs}


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description="peak memory of one model's runs (a child of "
                                            "tvm_cocopie.bench.memory.peak_run_memory)")
    p.add_argument("runtime", choices=RUNTIMES)
    p.add_argument("model", help="exported library (cocopie) or ONNX file (ort)")
    p.add_argument("inputs", help=".npz of the inputs")
    p.add_argument("out", help="JSON result file")
    p.add_argument("--inputs", dest="names", required=True, help="input names, in call order")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    from ..threads import configure_thread_pool

    configure_thread_pool(args.threads, override=True)  # before TVM's pool starts
    with np.load(args.inputs) as data:
        feeds = {k: data[k] for k in data.files}
    result = measure(args.runtime, args.model, feeds, args.names.split(","), args.threads,
                     args.runs)
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_main())

"""Transfer-tuning's measurements for real (thesis §6.2.3): crashes, resume, RPC, databases.

Every test here builds and runs kernels in MetaSchedule's builder and runner worker
processes (no stand-ins); kernels are tiny so that each takes well under a minute.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transfer_helpers import (
    CRASH,
    HANG,
    annotated_matmul_trace,
    crashing_build,
    matmul_relu,
    seed_database,
    tile_matmul,
    tiny_cnn,
)

from tvm_cocopie.transfer_tuning import kernel_class, readers, search
from tvm_cocopie.transfer_tuning.readers import SourceRecord

LLVM = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}
TESTS = str(Path(__file__).resolve().parent)
pytestmark = pytest.mark.slow


def _target():
    from tvm_cocopie.target import parse_target

    return parse_target(LLVM)


def _record(mod, origin, trace=None):
    return SourceRecord(mod, trace or tile_matmul(mod).trace, [1e-3], _target(), origin, "src")


@pytest.fixture
def helpers_importable(monkeypatch):
    """Builder workers unpickle :func:`crashing_build` by module name: put tests/ on their path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))


def test_crashing_and_hanging_candidates_are_dropped_and_reported(tmp_path, helpers_importable):
    src = matmul_relu(64, 64, 64)
    recs = [_record(src, "good#1"),
            _record(src, "segfault#1", annotated_matmul_trace(src, CRASH)),
            _record(src, "hang#1", annotated_matmul_trace(src, HANG))]
    measurer = search.Measurer(_target(), build_timeout=10, f_build=crashing_build)
    kernel = kernel_class.Kernel("k", matmul_relu(48, 96, 32), 1)
    rep = search.transfer_tune(None, recs, _target(), tmp_path, mode="pool", measurer=measurer,
                               kernels=[kernel])
    k = rep.kernels[0]
    # the good one is timed; it may still lose the side-by-side confirmation to default
    assert set(k.rejected) - {"good#1"} == {"segfault#1", "hang#1"}, k.rejected
    assert k.rejected.get("good#1", "not confirmed").startswith("not confirmed"), k.rejected
    assert "Timeout" in k.rejected["hang#1"]
    assert k.rejected["segfault#1"].startswith("build:")
    assert math.isfinite(k.untuned_secs) and math.isfinite(k.best_secs)
    cached = search.MeasurementCache(tmp_path / search.CACHE_FILE).get(kernel.mod, "good#1")
    assert cached is not None and math.isfinite(cached[0])  # the good one was timed


class InterruptedMeasurer(search.Measurer):
    """A real measurer that is interrupted (Ctrl-C) before its ``stop_at``-th batch."""

    def __init__(self, target, stop_at):
        super().__init__(target)
        self.stop_at, self.batches = stop_at, 0

    def measure(self, mods):
        self.batches += 1
        if self.batches == self.stop_at:
            raise KeyboardInterrupt
        return super().measure(mods)


def test_interrupted_run_resumes_without_repeating_measurements(tmp_path):
    recs = [_record(matmul_relu(64, 64, 64), "A#1")]

    def kernels():
        return [kernel_class.Kernel("k1", matmul_relu(48, 96, 32), 2),
                kernel_class.Kernel("k2", matmul_relu(32, 32, 64), 1)]

    first = InterruptedMeasurer(_target(), stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        search.transfer_tune(None, recs, _target(), tmp_path, measurer=first, kernels=kernels(),
                             batch=2)
    assert first.measured == 2
    second = search.Measurer(_target())
    rep = search.transfer_tune(None, recs, _target(), tmp_path, measurer=second, kernels=kernels(),
                               batch=2)
    total = sum(k.candidates for k in rep.kernels)
    # plus the side-by-side confirmations (4 timings per kernel whose baseline was beaten)
    confirms = sum(1 for key in search.MeasurementCache(tmp_path / search.CACHE_FILE).data
                   if ":confirm" in key)
    assert second.measured == total + confirms - first.measured > 0
    third = search.Measurer(_target())
    rep3 = search.transfer_tune(None, recs, _target(), tmp_path, measurer=third, kernels=kernels(),
                                batch=2)
    assert third.measured == 0
    assert [k.best for k in rep3.kernels] == [k.best for k in rep.kernels]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def rpc_tracker():
    """A local RPC tracker and two RPC servers registered under key ``tt-test``."""
    import tvm.rpc

    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
                               "--port", str(port), "--port-end", str(port + 1)])]
    try:
        time.sleep(3)
        for _ in range(2):
            own = _free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}",
                 "--key", "tt-test", "--host", "127.0.0.1", "--port", str(own),
                 "--port-end", str(own + 1)]))
        deadline = time.monotonic() + 120
        while True:
            summary = tvm.rpc.connect_tracker("127.0.0.1", port).summary()
            free = sum(q.get("free", 0) for k, q in summary["queue_info"].items() if k == "tt-test")
            if free == 2:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"RPC servers did not register: {summary}")
            time.sleep(1)
        yield "127.0.0.1", port, "tt-test"
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def test_rpc_tracker_two_servers_measure_a_small_model(tmp_path, rpc_tracker):
    from tvm_cocopie import models

    source, model = tmp_path / "a.onnx", tmp_path / "b.onnx"
    models.save(tiny_cnn((8, 8), 12, name="a"), source)
    models.save(tiny_cnn((8, 16), 16, seed=1, name="b"), model)
    seed_database(str(source), LLVM, tmp_path / "logs" / "a")
    recs, _ = readers.read_logs(tmp_path / "logs", LLVM)
    measurer = search.Measurer(_target(), rpc=rpc_tracker)
    rep = search.transfer_tune(str(model), recs, LLVM, tmp_path / "out", measurer=measurer)
    assert rep.kernels and all(math.isfinite(k.untuned_secs) for k in rep.kernels)
    assert measurer.measured >= 2 * len(rep.kernels)
    transferred = [k for k in rep.kernels if k.candidates > 2]
    assert transferred, rep.table()  # the conv kernels had a same-class schedule timed remotely
    cache = search.MeasurementCache(tmp_path / "out" / search.CACHE_FILE)
    timed = [v for key, v in cache.data.items() if key != cache.SPENT]
    assert timed and all(v[0] is not None for v in timed if not v[1].startswith("rejected"))
    assert cache.prior_seconds > 0  # the search time is kept for a resumed run

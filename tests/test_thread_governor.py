"""The thread governor of a compiled model: it keeps the thread count whose measured
latency is lower, probes the other one less often while its choice holds, and a model
called through it gives the same numbers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import conv_relu_model

import tvm_cocopie
from tvm_cocopie.target import host_target
from tvm_cocopie.threads import ThreadGovernor


class _Pool:
    def __init__(self, threads):
        self.threads = threads
        self.switches = 0

    def apply(self, n):
        self.threads = n
        self.switches += 1

    def current(self):
        return self.threads


def _run(governor, pool, latency, calls):
    used = []
    for _ in range(calls):
        n = governor.before_call()
        assert pool.threads == n
        used.append(n)
        governor.after_call(latency(n))
    return used


def _busy():  # another process keeps a core busy (the governor's look at /proc)
    return 1.0


def test_busy_core_moves_it_to_one_thread_and_back_when_quiet():
    pool = _Pool(2)
    gov = ThreadGovernor(2, interval=8, apply=pool.apply, current=pool.current,
                         others_load=_busy)
    # another process holds a core: a 2-thread call waits for the preempted worker
    used = _run(gov, pool, lambda n: 5e-3 if n == 2 else 2e-3, 60)
    assert gov.best == 1 and used[-20:].count(1) >= 14  # probes of two threads aside
    # the machine is quiet again: two threads are twice as fast
    _run(gov, pool, lambda n: 1e-3 if n == 2 else 2e-3, 200)
    assert gov.best == 2


def test_a_confirmed_choice_is_probed_less_and_less_often():
    pool = _Pool(2)
    gov = ThreadGovernor(2, interval=8, max_interval=128, apply=pool.apply,
                         current=pool.current, others_load=_busy)
    used = _run(gov, pool, lambda n: 1e-3 if n == 2 else 2e-3, 2000)
    assert gov.best == 2 and gov.interval == 128
    assert used.count(1) < 0.05 * len(used)  # probes: a few calls in a hundred at most


def test_a_quiet_machine_is_never_probed_with_one_thread():
    """No other process uses the CPU: one thread cannot win, so the governor does not
    spend calls finding out (ResNet-18, 30 calls: mean 21.4 ms with probes, 18.7 without);
    the interval still grows, and a busy machine is probed again."""
    pool = _Pool(2)
    load = [0.0]
    gov = ThreadGovernor(2, interval=8, max_interval=128, apply=pool.apply,
                         current=pool.current, others_load=lambda: load[0])
    used = _run(gov, pool, lambda n: 1e-3 if n == 2 else 2e-3, 300)
    assert used.count(1) == 0 and gov.interval == 128
    load[0] = 1.0
    used = _run(gov, pool, lambda n: 5e-3 if n == 2 else 2e-3, 400)
    assert gov.best == 1


def test_others_load_reads_proc():
    """The load other processes put on the CPU, from /proc, after enough time to tell."""
    from tvm_cocopie.threads import OthersLoad

    ticks = [0.0]
    look = OthersLoad(min_seconds=0.05, clock=lambda: ticks[0])
    first = look._last
    assert look() is None and look._last is first  # too soon: not even read (a fast
    # model asks on every call until min_seconds have passed)
    ticks[0] = 1.0
    value = look()
    if os.path.exists("/proc/stat"):
        assert value is not None and value >= 0.0
    else:
        assert value is None


def test_another_model_changing_the_pool_is_noticed():
    pool = _Pool(2)
    gov = ThreadGovernor(2, apply=pool.apply, current=pool.current)
    gov.before_call()
    pool.threads = 1  # another governor (another model of the process) set it
    assert gov.before_call() == 2 and pool.threads == 2


def test_compiled_model_runs_through_the_governor():
    model = conv_relu_model(batch=1)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    adaptive = tvm_cocopie.compile(model, host_target(2))
    fixed = tvm_cocopie.compile(model, host_target(2), adaptive_threads=False)
    assert adaptive.governor is not None and fixed.governor is None
    expected = fixed(x)
    for _ in range(40):  # through probes and switches
        got = adaptive(x)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert sum(len(s) for s in adaptive.governor.samples.values()) > 0


def _fresh_python(code: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "TVM_BIND_THREADS")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300, check=True)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_register_starts_the_pool_on_every_core():
    """TVM alone starts its pool with half the logical CPUs on x86 and never grows it;
    after register() a model built with tvm.compile and run in a plain VirtualMachine
    has a thread per core."""
    code = """
        import os, tvm
        stock = int(tvm.get_global_func("runtime.NumThreads")()) if os.environ.get("STOCK") else 0
        import tvm_cocopie
        tvm_cocopie.register()
        print(stock, int(tvm.get_global_func("runtime.NumThreads")()),
              tvm_cocopie.threads.usable_cores())
    """
    _, ours, cores = map(int, _fresh_python(code).stdout.split())
    assert ours == cores
    # importing tvm_cocopie is enough for a pool that starts later (stock TVM's too)
    late = "import tvm_cocopie, tvm; print(int(tvm.get_global_func('runtime.NumThreads')()))"
    assert _fresh_python(late).stdout.split() == [str(cores)]
    # a pool that TVM started before tvm_cocopie was imported cannot grow: register() says so and what to do
    done = _fresh_python(code, {"STOCK": "1"})
    stock, ours, cores = map(int, done.stdout.split())
    if stock < cores:  # TVM halved the CPUs (x86 with an even count)
        assert ours == stock
        assert "RuntimeWarning" in done.stderr
        assert "cannot grow" in done.stderr and "TVM_NUM_THREADS" in done.stderr


def test_user_thread_count_wins():
    code = """
        import tvm, tvm_cocopie
        tvm_cocopie.register()
        print(int(tvm.get_global_func("runtime.NumThreads")()))
    """
    assert _fresh_python(code, {"TVM_NUM_THREADS": "1"}).stdout.split() == ["1"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_pool_set_to_one_thread_is_no_pool_that_cannot_grow():
    """A governor's one-thread setting (set_pool_threads) leaves a pool that grows back:
    a later compile must not warn that it cannot (bench_fusion's log said so for every
    model after a probe)."""
    code = """
        import warnings, tvm_cocopie
        from tvm_cocopie import threads
        tvm_cocopie.register()
        threads.set_pool_threads(1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            threads.ensure_thread_pool()
        threads.set_pool_threads(threads.usable_cores())
        print(len(caught), threads.pool_threads(), threads.usable_cores())
    """
    warned, now, cores = map(int, _fresh_python(code).stdout.split())
    assert warned == 0
    assert now == cores

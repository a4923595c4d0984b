"""TVM's thread pool: the one place that sets its environment (before the pool starts)."""

from __future__ import annotations

import functools
import os
import warnings
from collections import deque


def configure_thread_pool(cores: int | None = None, override: bool = False) -> None:
    """Set TVM's thread pool up before it starts: ``cores`` threads (``None``: TVM's
    default), unpinned. Values already in the environment win unless ``override``
    (a benchmark's ``--threads`` sets the count it measures at); returns nothing.

    ``TVM_NUM_THREADS``: the target's ``num-cores``. ``TVM_BIND_THREADS=0``: the pool
    otherwise pins each worker to one core, and on a shared machine a pinned worker
    whose core is busy cannot move, so every fork-join waits for it. Measured on this
    2-core machine under load (5 other jobs; cocopie/ORT, median of 3 processes x 15
    interleaved runs, 224 px): MobileNetV2 2.75 -> 1.00, PP-OCR det 3.26 -> 0.93,
    ResNet-18 0.98 -> 1.05 (noise). ``TVM_THREAD_POOL_SPIN_COUNT=0`` was mixed and is
    left alone.
    """
    if cores:
        if override:
            os.environ["TVM_NUM_THREADS"] = str(int(cores))
        else:
            os.environ.setdefault("TVM_NUM_THREADS", str(int(cores)))
    os.environ.setdefault("TVM_BIND_THREADS", "0")


#: the CPUs this process could run on when tvm_cocopie was imported: TVM pins the calling
#: thread to one CPU when its pool starts pinned, after which the affinity says 1
_STARTUP_CPUS = frozenset(os.sched_getaffinity(0))


def usable_cores() -> int:
    """The physical cores this process may run on: its CPUs (as at import, or now if more),
    hyper-thread siblings counted once, as the kernel's topology reports them."""
    cpus = _STARTUP_CPUS | os.sched_getaffinity(0)
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                siblings = f.read().strip()
        except OSError:
            siblings = str(cpu)
        cores.add(siblings)
    return max(1, len(cores))


def configured_threads(default: int | None = None) -> int:
    """Threads of TVM's pool as configured (``TVM_NUM_THREADS``), else ``default`` (else
    :func:`usable_cores`)."""
    configured = os.environ.get("TVM_NUM_THREADS", "")
    return int(configured) if configured.isdigit() else int(default or usable_cores())


def ensure_thread_pool(cores: int | None = None) -> int:
    """Start TVM's thread pool with ``cores`` threads (default: :func:`usable_cores`)
    unless it already runs; the pool's thread count.

    On x86 TVM starts its pool with half the logical CPUs (it takes every second one
    for a hyper-thread sibling, whether the CPU has them or not: this machine's kernel
    reports two cores of one thread each), and the pool never grows afterwards: on this 2-vCPU
    machine a model built with ``tvm.compile(..., relax_pipeline="cocopie")`` and run in
    a ``relax.VirtualMachine`` got one thread while ONNX Runtime used two (ResNet-18
    60 -> 36 ms, ViT-tiny 76 -> 46 ms with two; a 128x256x1024 matmul 43 -> 76
    GFLOP/s). ``TVM_NUM_THREADS`` already set by the user wins. A pool that started
    earlier with fewer threads cannot be changed: a ``RuntimeWarning`` says so and what
    to do.
    """
    wanted = int(cores or usable_cores())
    configure_thread_pool(wanted)
    expected = configured_threads(wanted)
    started = started_threads()
    if started < expected:
        warnings.warn(
            f"TVM's thread pool already runs with {started} thread(s) of the {expected} "
            "wanted (TVM code ran before tvm_cocopie.register() or compile()); it cannot "
            "grow now. Call tvm_cocopie.register() before running any TVM code, or set "
            f"TVM_NUM_THREADS={expected} before the process starts.", RuntimeWarning,
            stacklevel=3)
    return started


class ThreadGovernor:
    """Chooses the thread count of each call from the latency it measures.

    TVM's thread pool splits every parallel loop statically over its threads and the
    caller waits for all of them: when another process holds a core, the worker
    there runs only when the scheduler gives it a slice, and every fork-join of the
    model waits for that. Measured on this 2-core machine with other jobs running:
    100 trivial parallel kernels took 0.3 ms at the median but 3-144 ms at the 90th
    percentile with 2 threads, and a steady 0.02 ms with 1 thread. ONNX Runtime's pool
    lets the caller take the work of a worker that does not show up; TVM's cannot, so
    the model itself adapts: it runs with ``max_threads`` and every ``interval``
    calls tries ``probe_calls`` calls with one thread (or back); the other count wins
    only if the probe's median latency is below the current count's recent median by
    ``margin`` (25%: interleaved with other runtimes on two cores, their spinning
    threads make single calls swing by 10-20%). The first call after a switch is not a
    sample (it wakes workers that slept through the other setting). A probe that
    confirms the choice doubles the interval (up to ``max_interval``), so a quiet
    machine spends a few calls in a thousand on probes. Switching costs ~10 µs
    (``runtime.config_threadpool``). The
    pool is the process's: a governor sets it for every model of the process.
    """

    def __init__(self, max_threads: int, interval: int = 8, probe_calls: int = 3,
                 window: int = 9, margin: float = 0.25, max_interval: int = 1024,
                 apply=None, current=None, others_load=None):
        self.max_threads = max(1, int(max_threads))
        self.best = self.max_threads
        self.base_interval = interval
        self.interval = interval
        self.probe_calls = probe_calls
        self.margin = margin
        self.max_interval = max_interval
        self.samples = {n: deque(maxlen=window) for n in {self.max_threads, 1}}
        self._apply = apply or set_pool_threads
        self._pool_threads = current or pool_threads
        self._current = None
        self._switched = False
        self._since_probe = 0
        self._probing = 0
        self._calls = 0
        #: cores other processes kept busy since the last look (``None``: unknown)
        self._others_load = others_load or OthersLoad()

    def before_call(self) -> int:
        """The thread count for the next call (set in TVM's pool when it changes)."""
        if self.max_threads == 1:
            wanted = 1
        elif self._probing:
            wanted = self._other()
        else:
            wanted = self.best
        if wanted != self._pool_threads():  # the pool is the process's: ask, do not remember
            self._apply(wanted)
            self._switched = True
        self._current = wanted
        return wanted

    def after_call(self, seconds: float) -> None:
        """Record the latency of the call that :meth:`before_call` set up."""
        self._calls += 1
        # the first call pays set-up, and the first after a switch wakes workers that slept
        # through the other setting: neither is a sample of the setting's speed
        if self._calls > 1 and self._current is not None and not self._switched:
            self.samples[self._current].append(seconds)
        self._switched = False
        if self.max_threads == 1:
            return
        if self._probing:
            self._probing -= 1
            if not self._probing:
                self._decide()
            return
        self._since_probe += 1
        if self._since_probe >= self.interval:
            load = self._others_load()
            if load is not None and load < QUIET_CORES and self.best == self.max_threads:
                # nobody else runs: one thread cannot win, and its calls cost a benchmark
                # (ResNet-18, 30 calls on a quiet machine: mean 21.4 ms probing, 18.7 not)
                self._since_probe = 0
                self.interval = min(self.interval * 2, self.max_interval)
                return
            if load is None and self._others_load.too_soon():
                return  # too little time since the last look to tell: wait a call
            self._since_probe = 0
            self._probing = self.probe_calls
            self.samples[self._other()].clear()  # the probe's own calls decide, not old ones

    def _other(self) -> int:
        return 1 if self.best != 1 else self.max_threads

    def _decide(self) -> None:
        mine, other = self.samples[self.best], self.samples[self._other()]
        if len(mine) < 3 or len(other) < max(1, self.probe_calls - 1):
            return
        if _median(other) < (1.0 - self.margin) * _median(mine):
            self.best = self._other()
            self.interval = self.base_interval
            self.samples[self.best].clear()  # fresh evidence for the new choice
        else:
            self.interval = min(self.interval * 2, self.max_interval)


#: other processes keeping less than this many cores busy leave the machine quiet: the
#: governor does not probe one thread then
QUIET_CORES = 0.25


class OthersLoad:
    """Cores other processes kept busy since the previous call, from ``/proc/stat`` (all
    CPUs' busy time) minus ``/proc/self/stat`` (this process's, TVM's workers and ONNX
    Runtime's spinning threads included); ``None`` where ``/proc`` is missing or less than
    ``min_seconds`` have passed (the counters tick at 100 Hz)."""

    def __init__(self, min_seconds: float = 0.05, clock=None):
        import time

        self.min_seconds = min_seconds
        self._clock = clock or time.monotonic
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._sample()

    def _sample(self):
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
            with open("/proc/self/stat") as f:
                own = f.read().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            return None
        busy = sum(fields[:3]) + sum(fields[5:8])  # user nice system, irq softirq steal
        return self._clock(), busy, int(own[11]) + int(own[12])  # utime + stime

    def too_soon(self) -> bool:
        """Whether the last look is too recent to measure (or ``/proc`` is missing)."""
        return self._last is not None and self._clock() - self._last[0] < self.min_seconds

    def __call__(self) -> float | None:
        if self._last is None or self.too_soon():  # no /proc, or asked again too soon:
            return None  # the clock alone, no file read (a fast model asks every call then)
        now = self._sample()
        if now is None:
            return None
        seconds = now[0] - self._last[0]
        busy, own = now[1] - self._last[1], now[2] - self._last[2]
        self._last = now
        return max(0.0, (busy - own) / self._hz / seconds)


def _median(values) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


@functools.cache
def _runtime_func(name: str):
    """A TVM runtime global function, looked up once (a model asks on every call)."""
    import tvm

    return tvm.get_global_func(name)


def pool_threads() -> int:
    """Threads TVM's pool runs with now (starting it if it has not started)."""
    return int(_runtime_func("runtime.NumThreads")())


#: the thread count TVM's pool started with, noted before :func:`set_pool_threads` first
#: changes it (a governor's one-thread probe is not a pool that cannot grow)
_POOL_START: list[int] = []


def started_threads() -> int:
    """Threads TVM's pool started with (starting it if it has not started): what it can
    run with at most, whatever :func:`set_pool_threads` set since."""
    if not _POOL_START:
        _POOL_START.append(pool_threads())
    return _POOL_START[0]


def set_pool_threads(threads: int) -> None:
    """Run TVM's thread pool with ``threads`` threads from the next parallel call on
    (``runtime.config_threadpool``; ~10 µs): the pool is the process's."""
    started_threads()
    # mode 1 (kBig): all cores of a homogeneous CPU; TVM_BIND_THREADS=0 keeps them unpinned
    _runtime_func("runtime.config_threadpool")(1, int(threads))

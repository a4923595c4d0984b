"""MetaSchedule measuring on Hexagon through QEMU: a Builder and a Runner.

MetaSchedule does not need an RPC device: its builder and runner are interfaces
(``ms.builder.PyBuilder``, ``ms.runner.PyRunner``). :class:`QemuBuilder` builds each
candidate with :func:`tvm_cocopie.emulation.hexagon.build` (``tvm.compile`` for ``HEXAGON_V66``, our harness,
``clang-14`` / ``ld.lld-14``) and hands the linked program's directory on as the
artifact; :class:`QemuRunner` runs it under ``qemu-hexagon-static``, checks every
output bit for bit against the reference arrays it was given, and reports the kernel's
dynamic VLIW packet count as the cost.

Cost unit: MetaSchedule wants seconds; we report ``packets * PACKET_SECONDS``
(:data:`PACKET_SECONDS` = 1 ns, a nominal 1 GHz clock, one packet per cycle: *not* a
measured time; :func:`packets_of` turns it back into packets exactly).

Errors are results, not costs: a candidate that fails to build, crashes or traps in the
emulator, runs past the timeout, or computes a wrong output comes back as a
``RunnerResult`` with ``error_msg`` set, so the search never picks it.

:func:`tune_vrmpy_conv` searches a schedule for the conv of :mod:`.tvm_vrmpy` with
stock TVM's ``vrmpy`` intrinsic (``MultiLevelTilingWithIntrin`` + ``RewriteTensorize``,
the rules upstream TVM's Hexagon MetaSchedule tests use for vrmpy convs) at a stated
trial budget; this is the strongest stock-TVM baseline for GCD² (seed 004, §4.5.2).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

from ...emulation import hexagon as runner
from ...emulation.program import normalize_module
from ...metaschedule import tune_context
from ...target import HEXAGON_V66
from . import tvm_vrmpy

log = logging.getLogger(__name__)

#: Seconds reported to MetaSchedule per emulated packet (nominal 1 GHz; see module doc).
PACKET_SECONDS = 1e-9


def packets_of(run_secs: float) -> int:
    """The packet count behind a cost reported by :class:`QemuRunner`."""
    return round(float(run_secs) / PACKET_SECONDS)


@dataclass
class KernelIO:
    """How to call one candidate: parameter buffer names, input arrays, expected outputs."""

    params: tuple  # buffer names, one per PrimFunc parameter, in order
    inputs: dict  # name -> numpy array
    expected: dict  # output name -> numpy array (the numeric reference)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text[-2000:]}" if text else type(err).__name__


@derived_object
class QemuBuilder(PyBuilder):
    """Build each candidate into a linked Hexagon program (artifact = its directory)."""

    def __init__(self, io: KernelIO, cache_dir=None):
        super().__init__()
        self.io = io
        self.cache_dir = cache_dir
        self.programs: dict = {}

    def build(self, build_inputs):
        """Build each candidate into a linked Hexagon program; a ``BuilderResult`` per input (the
        ELF, or the error)."""
        results = []
        for item in build_inputs:
            try:
                mod = normalize_module(item.mod)
                (name,) = [g.name_hint for g in mod.functions]
                program = runner.build(
                    mod,
                    [(name, list(self.io.params))],
                    list(self.io.inputs),
                    list(self.io.expected),
                    cache_dir=self.cache_dir,
                )
            except Exception as err:  # noqa: BLE001 - a failed build is a result
                log.info("candidate did not build: %s", _first_line(err))
                results.append(BuilderResult(None, _first_line(err)))
                continue
            # the ELF itself: a RemoveBuildArtifact callback removes its dirname,
            # which is this one program's cache directory, nothing more
            self.programs[str(program.elf)] = program
            results.append(BuilderResult(str(program.elf), None))
        return results

@derived_object
class QemuRunner(PyRunner):
    """Run each built candidate under QEMU; cost = packets, wrong output = error."""

    def __init__(self, builder, timeout: float = 300.0):
        super().__init__()
        self.builder = builder
        self.timeout = timeout
        self.history: list = []  # (artifact, packets or None, error or None)

    def measure(self, artifact: str):
        """``(packets, None)`` or ``(None, error message)`` for one artifact."""
        program = self.builder.programs.get(artifact)
        if program is None:
            return None, f"no program built at {artifact}"
        io = self.builder.io
        try:
            res = program.run(io.inputs, count_packets=True, timeout=self.timeout)
        except Exception as err:  # noqa: BLE001 - crash, trap, timeout: an error result
            return None, _first_line(err)
        for name, want in io.expected.items():
            got = res.outputs[name]
            if not np.array_equal(got, want):
                bad = int(np.count_nonzero(got != want))
                return None, f"wrong output {name!r}: {bad} of {want.size} values differ"
        return int(res.packets[0]), None

    def run(self, runner_inputs):
        """Run each built candidate under QEMU; a finished ``RunnerFuture`` per input (packets as
        seconds, or the error)."""
        futures = []
        for item in runner_inputs:
            packets, error = self.measure(str(item.artifact_path))
            self.history.append((str(item.artifact_path), packets, error))
            if error is None:
                result = RunnerResult([packets * PACKET_SECONDS], None)
            else:
                log.info("candidate rejected: %s", error.splitlines()[0])
                result = RunnerResult(None, error)
            futures.append(RunnerFuture(lambda: True, lambda r=result: r))
        return futures


def qemu_builder_runner(io: KernelIO, timeout: float = 300.0, cache_dir=None):
    """A ``(QemuBuilder, QemuRunner)`` pair measuring candidates called as ``io`` says."""
    builder = QemuBuilder(io, cache_dir)
    return builder, QemuRunner(builder, timeout)


def vrmpy_space(intrin: str):
    """Upstream's vrmpy space: tile with the intrinsic (SRSRS), fuse the consumer, unroll
    and vectorize (no parallel loops: the harness runs one hardware thread)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.schedule_rule import ReuseType

    rules = [
        ms.schedule_rule.MultiLevelTilingWithIntrin(
            intrin,
            structure="SRSRS",
            max_innermost_factor=64,
            reuse_write=ReuseType(req="may", levels=[1, 2], scope="global"),
        ),
        ms.schedule_rule.ParallelizeVectorizeUnroll(
            max_jobs_per_core=-1,
            max_vectorize_extent=128,
            unroll_max_steps=[0, 16, 64, 512],
            unroll_explicit=True,
        ),
    ]
    postprocs = [
        ms.postproc.RewriteParallelVectorizeUnroll(),
        ms.postproc.RewriteReductionBlock(),
        ms.postproc.RewriteTensorize(vectorize_init_loop=True),
    ]
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs=postprocs, mutator_probs="llvm"
    )


@dataclass
class SearchResult:
    """The best schedule found, what the runner measured, and the search's cost."""

    func: object  # best PrimFunc (scheduled), or None when no candidate ran
    packets: int | None
    trials: int  # candidates measured (built and run, including rejected ones)
    valid: int  # candidates with a cost
    seconds: float
    trace: str


def tune(
    func,
    io: KernelIO,
    trials: int,
    *,
    timeout: float = 300.0,
    space=None,
    per_iter: int | None = None,
) -> SearchResult:
    """MetaSchedule (evolutionary search, XGBoost cost model) over ``space`` with at most
    ``trials`` candidates, each measured under QEMU by :class:`QemuRunner`."""
    import tvm
    from tvm.s_tir import meta_schedule as ms


    # MetaSchedule's rules read num-cores; the builder compiles for HEXAGON_V66 itself
    target = tvm.target.Target({**HEXAGON_V66, "num-cores": 1})
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    builder, qemu = qemu_builder_runner(io, timeout)
    per_iter = per_iter or min(trials, 8)
    strategy = ms.search_strategy.EvolutionarySearch(
        population_size=64, init_min_unmeasured=per_iter, genetic_num_iters=2
    )
    started = time.perf_counter()
    # a TuneContext without importing every target's tensor intrinsics (~100 s here)
    ctx = tune_context(mod, target, space, strategy)
    with tempfile.TemporaryDirectory(prefix="cocopie-ms-") as work:
        db = ms.tune_tasks(
            tasks=[ctx],
            task_weights=[1.0],
            work_dir=work,
            max_trials_global=trials,
            num_trials_per_iter=per_iter,
            builder=builder,
            runner=qemu,
            database="memory",  # JSON databases crash in this tvm-ffi (TVM027.md)
            measure_callbacks=[
                ms.measure_callback.AddToDatabase(),
                ms.measure_callback.UpdateCostModel(),
            ],
            task_scheduler="round-robin",
        )
    seconds = time.perf_counter() - started
    valid = [p for _, p, e in qemu.history if e is None]
    best = min(valid) if valid else None
    sch = ms.tir_integration.compile_tir(db, mod, target) if valid else None
    return SearchResult(
        sch.mod["main"] if sch is not None else None,
        best,
        len(qemu.history),
        len(valid),
        seconds,
        str(sch.trace) if sch is not None else "",
    )


def tune_vrmpy_conv(h, w, c, o, kernel, stride, pad, rq, data, trials: int, **kwargs):
    """MetaSchedule the :mod:`.tvm_vrmpy` conv with stock TVM's ``vrmpy`` intrinsic.

    ``data`` is ``(x_padded, w_packed, bias, y_reference)``; returns a :class:`SearchResult`.
    """

    x, wt, bias, ref = data
    io = KernelIO(("x", "w", "bias", "y"), {"x": x, "w": wt, "bias": bias}, {"y": ref})
    func = tvm_vrmpy.conv_compute(h, w, c, o, kernel, stride, pad, rq)
    space = vrmpy_space(tvm_vrmpy.stock_vrmpy_intrin())
    return tune(func, io, trials, space=space, **kwargs)

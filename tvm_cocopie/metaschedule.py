"""MetaSchedule glue shared by tuning, transfer-tuning and the Hexagon baselines.

- :func:`tune_context`: a ``TuneContext`` without the 100 s import of every target's
  tensor intrinsics on CPU targets;
- :func:`initialized_postprocs`: MetaSchedule's post-processors for a target, ready to
  apply to a schedule outside a tuning run;
- :func:`build_kernel`, :func:`export_shared`, :func:`local_builder`: the builder both
  tuners use (shared libraries linked in the builder's workers);
- :func:`runner_threads`, :class:`Measurer`: standalone timing of kernels with
  MetaSchedule's runner, locally or through an RPC tracker.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from .errors import last_line
from .kernel_knobs import is_generated
from .threads import configure_thread_pool, usable_cores
from .tir_pipeline import tir_pipeline_for

log = logging.getLogger(__name__)


def register_x86_intrinsics() -> None:
    """Register TVM's x86 tensor intrinsics (VNNI, AVX-512 dot products) without
    ``tvm.s_tir.tensor_intrin``'s package import, which registers every target's
    (CUDA's too: 22 s here, against 0.17 s for x86's alone). MetaSchedule's stock CPU
    space asks for ``dot_16x4_vnni`` on a VNNI host and fails if it is missing. The
    module is loaded under its own name, so a later full import finds it there and
    does not register it twice."""
    import importlib.util
    import sys
    import types
    from pathlib import Path

    import tvm.s_tir

    pkg = "tvm.s_tir.tensor_intrin"
    name = f"{pkg}.x86"
    if name in sys.modules:
        return
    base = Path(tvm.s_tir.__file__).parent / "tensor_intrin"
    stub = None
    if pkg not in sys.modules:  # a bare package: its __init__ (every target) is not run
        stub = types.ModuleType(pkg)
        stub.__path__ = [str(base)]
        sys.modules[pkg] = stub
    try:
        spec = importlib.util.spec_from_file_location(name, base / "x86.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    finally:
        if stub is not None and sys.modules.get(pkg) is stub:
            del sys.modules[pkg]


def tune_context(mod: tvm.IRModule, target, space_generator, search_strategy=None,
                 task_name: str = "main"):
    """A MetaSchedule ``TuneContext``; for CPU targets without ``TuneContext.__init__``'s
    import of every target's tensor intrinsics (100 s on this machine, where a design
    space takes 0.1 s), with x86's only (:func:`register_x86_intrinsics`)."""
    if target.kind.name != "llvm":
        return ms.TuneContext(mod=mod, target=target, space_generator=space_generator,
                              search_strategy=search_strategy, task_name=task_name)
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func
    from tvm.s_tir.meta_schedule.utils import cpu_count

    register_x86_intrinsics()  # the stock space's VNNI rule needs them
    if isinstance(space_generator, str):
        space_generator = ms.space_generator.SpaceGenerator.create(space_generator)
    ctx = ms.TuneContext.__new__(ms.TuneContext)
    ctx.__init_handle_by_constructor__(
        _ffi_api.TuneContext, mod, target, space_generator, search_strategy, task_name,
        cpu_count(logical=False), -1, get_logging_func(get_logger("tvm.s_tir.meta_schedule")))
    _ffi_api.TuneContextInitialize(ctx)
    return ctx


@derived_object
class DynamicLoopsOfGeneratedKernels(ms.postproc.PyPostproc):
    """MetaSchedule's ``DisallowDynamicLoop``, except for generated kernels
    (:func:`~tvm_cocopie.kernel_knobs.is_generated`): the pattern conv's loops over a
    filter's kernels run to bounds read from its FKW arrays by design, and the stock
    check rejected every sample of its design space."""

    def __init__(self):
        self.inner = ms.postproc.DisallowDynamicLoop()

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def apply(self, sch) -> bool:
        """Whether ``sch`` passes: a generated kernel always does."""
        if any(isinstance(func, tvm.tirx.PrimFunc) and is_generated(func)
               for func in sch.mod.functions.values()):
            return True
        return self.inner.apply(sch)

    def clone(self):
        """A copy of this post-processor."""
        return DynamicLoopsOfGeneratedKernels()


def postprocs_for(kind: str) -> list:
    """MetaSchedule's post-processors for target kind ``kind`` (``"llvm"``, ``"cuda"``), with
    :class:`DynamicLoopsOfGeneratedKernels` in place of ``DisallowDynamicLoop``."""
    return [DynamicLoopsOfGeneratedKernels() if isinstance(p, ms.postproc.DisallowDynamicLoop)
            else p for p in ms.postproc.Postproc.create(kind)]


def initialized_postprocs(mod: tvm.IRModule, target) -> list:
    """MetaSchedule's post-processors for ``target`` (:func:`postprocs_for`), initialized
    for ``mod``."""
    kind = target.kind.name
    procs = postprocs_for("llvm" if kind not in ("cuda",) else "cuda")
    ctx = tune_context(mod, target, ms.space_generator.PostOrderApply(
        sch_rules=[], postprocs=procs, mutator_probs={}), task_name="transfer")
    for p in procs:
        p._initialize_with_tune_context(ctx)
    return procs


FAILED = float("inf")


def build_kernel(mod: tvm.IRModule, target, _params=None):
    """MetaSchedule's CPU build without importing ``tvm.s_tir.tensor_intrin``, with the
    TIR pipeline a cocopie build of ``target`` uses
    (:func:`~tvm_cocopie.tir_pipeline.tir_pipeline_for`), so that a kernel is timed as it
    runs in the model: with TVM's default lowering the rotated-vector grouped conv's
    lane permutations were gathered lane by lane (its tuning chose by those times).

    The stock ``default_build`` imports every target's tensor intrinsics in each
    builder worker: 100 s per builder call on this machine, against seconds for the
    build itself. Scheduled CPU kernels need none of them.
    """
    return _build(mod, target, tir_pipeline_for(target))


def build_kernel_stock(mod: tvm.IRModule, target, _params=None):
    """:func:`build_kernel` with TVM's default TIR pipeline: stock TVM's kernels, as a
    stock build runs them (the baselines MetaSchedule tunes in its own space)."""
    return _build(mod, target, "default")


def _build(mod: tvm.IRModule, target, pipeline):
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target, pipeline=pipeline)


def export_shared(mod) -> str:
    """Export a built kernel as a shared library, linked here in the builder's worker.

    The stock export writes a tar of object files, which the runner's single worker
    then links on load: 0.1 s per kernel, serial, about half of what timing a fast
    kernel costs. Linked in the builder it runs on every core and the runner only
    ``dlopen``s. (For remote RPC devices the tar stays: their toolchain links it.)
    """
    path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
    mod.export_library(path)
    return path


def local_builder(timeout_sec: float = 300.0, f_build=None, max_workers: int | None = None,
                  shared: bool = True):
    """A ``LocalBuilder`` using :func:`build_kernel` (or ``f_build``, such as
    :func:`build_kernel_stock`) in its workers
    (one per core unless ``max_workers``; tuning and transfer-tuning build alike),
    exporting shared libraries (:func:`export_shared`) unless not ``shared``."""
    workers = max_workers or max(1, len(os.sched_getaffinity(0)))
    return ms.builder.LocalBuilder(max_workers=workers, timeout_sec=timeout_sec,
                                   f_build=f_build or build_kernel,
                                   f_export=export_shared if shared else None)


def runner_threads(target) -> None:
    """Give the runner's worker processes (they inherit the environment) the thread pool
    the model gets: ``num-cores`` threads, unpinned (:func:`~.threads.configure_thread_pool`).

    Without it a worker started before any model was compiled in this process ran
    kernels on TVM's default, half the logical cores on x86: 1 thread of 2 here, and
    the same kernel timed 2x slower than in a worker started after a compile.
    """
    cores = target.attrs.get("num-cores") if target is not None else None
    configure_thread_pool(int(cores) if cores else usable_cores())


@dataclass
class Measurer:
    """Builds and times kernels standalone with MetaSchedule's builder and runner.

    ``rpc``: ``(host, port, key)`` of an RPC tracker, else the local runner.
    ``f_build``: the build function run in the builder's worker processes;
    ``f_alloc_argument``: the runner's argument allocation (MetaSchedule's random
    tensors by default; :func:`tvm_cocopie.transfer_tuning.space.alloc_arguments` gives
    kernels that index their weights valid index arrays).
    ``measured`` counts the modules sent to the builder (finished measurements).
    """

    target: object
    rpc: tuple | None = None
    build_timeout: float = 300.0
    run_timeout: float = 120.0
    number: int = 3
    repeat: int = 3
    #: each repeat runs the kernel at least this long: repeats of three 150 us runs
    #: moved by 20-25% between batches on a quiet machine, deciding nothing
    min_repeat_ms: int = 20
    f_build: object = None
    f_alloc_argument: object = None
    measured: int = 0
    #: the builder and runner every :meth:`measure` call shares: each new one costs a
    #: worker pool's start and sanity check, 1.2 s apiece here (a quarter of a
    #: transfer-tuning run's time when made per batch)
    _builder: object = field(default=None, init=False, repr=False)
    _runner: object = field(default=None, init=False, repr=False)

    def runner(self):
        """MetaSchedule's runner with this measurer's timing (tuning uses it too)."""
        runner_threads(self.target)
        config = ms.runner.EvaluatorConfig(number=self.number, repeat=self.repeat,
                                           min_repeat_ms=self.min_repeat_ms,
                                           enable_cpu_cache_flush=False)
        if self.rpc:
            host, port, key = self.rpc
            rpc_config = ms.runner.RPCConfig(tracker_host=host, tracker_port=int(port),
                                             tracker_key=key, session_timeout_sec=self.run_timeout)
            return ms.runner.RPCRunner(rpc_config=rpc_config, evaluator_config=config, max_workers=1,
                                       f_alloc_argument=self.f_alloc_argument)
        return ms.runner.LocalRunner(timeout_sec=self.run_timeout, evaluator_config=config,
                                     f_alloc_argument=self.f_alloc_argument)

    def measure(self, mods: list[tvm.IRModule]) -> list[tuple[float, str]]:
        """``[(seconds or inf, error message)]``, one per module, in order.

        The seconds are the fastest of ``repeat`` means of ``number`` runs each.
        """
        if not mods:
            return []
        if self._builder is None:
            self._builder = local_builder(self.build_timeout, self.f_build, shared=not self.rpc)
        # a module listed twice (a side-by-side confirmation) is built once, run twice
        digests = [tvm_ffi.structural_hash(m) for m in mods]
        unique = {d: m for d, m in zip(digests, mods)}
        built_unique = dict(zip(unique, self._builder.build(
            [ms.builder.BuilderInput(m, self.target) for m in unique.values()])))
        built = [built_unique[d] for d in digests]
        out: list[tuple[float, str]] = [(FAILED, "")] * len(mods)
        inputs, where = [], []
        for i, (mod, res) in enumerate(zip(mods, built)):
            if res.error_msg:
                out[i] = (FAILED, "build: " + last_line(res.error_msg))
                continue
            func = next(f for _, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
            device = "cpu" if self.target.kind.name == "llvm" else self.target.kind.name
            inputs.append(ms.runner.RunnerInput(res.artifact_path, device,
                                                ms.arg_info.ArgInfo.from_prim_func(func)))
            where.append(i)
        try:
            if inputs and self._runner is None:
                self._runner = self.runner()
            futures = self._runner.run(inputs) if inputs else []
            for i, fut in zip(where, futures):
                res = fut.result()
                if res.error_msg:
                    out[i] = (FAILED, "run: " + last_line(res.error_msg))
                else:
                    # the fastest repeat: other processes only ever add time
                    out[i] = (min(float(s) for s in res.run_secs), "")
        finally:
            for res in built_unique.values():
                if res.artifact_path:
                    shutil.rmtree(os.path.dirname(res.artifact_path), ignore_errors=True)
        self.measured += len(mods)
        return out

"""Run ONNX's backend conformance cases, each in an isolated worker process.

The cases are ONNX's own: the node cases of ``onnx.backend.test.case.node``
(one operator each, with reference inputs and outputs) and the ``light`` models
(AlexNet ... ZFNet-512 with small weights and a stored reference output). A case
*passes* for a contender when it imports, builds, runs and matches the reference
under ONNX's own comparison (``Runner.assert_similar_outputs``: same count, shape,
dtype, and ``allclose`` with the case's ``rtol``/``atol``).

Contenders: ``cocopie`` (our importer, :class:`tvm_cocopie.frontend.backend.TvmCocopieBackend`,
through the pipeline the run names: ``"cocopie"`` or ``"default"``), ``baseline`` (our
importer through stock TVM's ``"default"`` pipeline whatever the run names: a case it
passes and ``cocopie`` fails is a regression of the cocopie pipeline), ``stock``
(TVM 0.27's ``relax.frontend.onnx.from_onnx``, default pipeline) and ``ort`` (ONNX
Runtime, CPU). TVM can segfault or hang on odd inputs, so
:class:`IsolatedRunner` runs cases in worker processes with a per-case timeout: a
crash costs that case (status ``crash``), not the run.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import last_line
from ..threads import configure_thread_pool

log = logging.getLogger(__name__)

CONTENDERS = ("cocopie", "baseline", "stock", "ort")
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


@dataclass
class Case:
    """One conformance case: a model, its input/output data sets, tolerances."""

    name: str
    kind: str  # "node" or "light"
    model: bytes
    data_sets: list = field(default_factory=list)  # [(inputs, outputs)]
    rtol: float = 1e-3
    atol: float = 1e-7

    def proto(self) -> onnx.ModelProto:
        """The case's model, parsed from its serialized bytes."""
        return onnx.load_from_string(self.model)


def case_ops(proto: onnx.ModelProto) -> list[str]:
    """The distinct op types of a model, in order of first use."""
    seen: dict[str, None] = {}
    for node in proto.graph.node:
        seen.setdefault(node.op_type, None)
    return list(seen)


def primary_op(name: str, ops: Sequence[str]) -> str:
    """The operator a case is about (``test_lstm_with_peepholes`` -> ``LSTM``).

    The first of ``ops`` whose name (or snake_case name) starts the case's name, else
    the last op (an ``_expanded`` case's final node).
    """
    import re

    stem = name.removeprefix("test_")
    for op in ops:
        snake = re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", op).lower()
        if stem.startswith((op.lower(), snake)):
            return op
    return ops[-1] if ops else "?"


def case_opset(proto: onnx.ModelProto) -> int:
    """The default-domain opset ``proto`` imports (1 when it names none)."""
    return next((int(e.version) for e in proto.opset_import if e.domain in ("", "ai.onnx")), 1)


def _normalize(value):
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return value


def node_cases(names: Iterable[str] | None = None) -> list[Case]:
    """ONNX's node cases (1884 in onnx 1.23), generated in memory (about 12 s)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    wanted = set(names) if names is not None else None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    result = []
    for tc in cases:
        if wanted is not None and tc.name not in wanted:
            continue
        data = [([_normalize(i) for i in ins], [_normalize(o) for o in outs])
                for ins, outs in tc.data_sets]
        result.append(Case(tc.name, "node", tc.model.SerializeToString(), data,
                           float(tc.rtol), float(tc.atol)))
    return result


def light_cases(names: Iterable[str] | None = None) -> list[Case]:
    """The ``light`` models with the inputs ONNX's runner feeds them and their outputs."""
    from onnx.backend.test.loader import load_model_tests
    from onnx.backend.test.runner import Runner

    wanted = set(names) if names is not None else None
    result = []
    for tc in load_model_tests(kind="real"):
        if wanted is not None and tc.name not in wanted:
            continue
        path = LIGHT_DIR / Path(tc.url).name
        proto = onnx.load(str(path))
        inits = {t.name for t in proto.graph.initializer}
        inputs = [Runner.generate_dummy_data(v, seed=0, name=tc.model_name, random=False)
                  for v in proto.graph.input if v.name not in inits]
        outputs = []
        for i in range(len(proto.graph.output)):
            ref = path.with_name(f"{path.stem}_output_{i}.pb")
            outputs.append(onnx.numpy_helper.to_array(onnx.load_tensor(str(ref))))
        result.append(Case(tc.name, "light", proto.SerializeToString(), [(inputs, outputs)],
                           float(tc.rtol), float(tc.atol)))
    return result


# ----------------------------------------------------------------------------- contenders


def _compare(case: Case, expected: Sequence, actual: Sequence) -> None:
    from onnx.backend.test.runner import Runner

    Runner.assert_similar_outputs(list(expected), list(actual), rtol=case.rtol, atol=case.atol,
                                  model_dir=case.name)


def _prepare_cocopie(proto: onnx.ModelProto, pipeline: str):
    from ..frontend.backend import TvmCocopieBackend

    return TvmCocopieBackend.prepare(proto, "CPU", pipeline=pipeline).run


def _prepare_baseline(proto: onnx.ModelProto, pipeline: str):
    return _prepare_cocopie(proto, "default")


def _prepare_stock(proto: onnx.ModelProto, pipeline: str):
    import warnings

    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    from ..frontend.backend import TvmCocopieRep, default_target

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = from_onnx(proto)
    executable = tvm.compile(mod, target=default_target(), relax_pipeline="default")
    return TvmCocopieRep(executable, proto).run


def _prepare_ort(proto: onnx.ModelProto, pipeline: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]

    def run(inputs):
        return sess.run(None, dict(zip(names, inputs)))

    return run


_PREPARE = {"cocopie": _prepare_cocopie, "baseline": _prepare_baseline, "stock": _prepare_stock,
            "ort": _prepare_ort}


def run_case(case: Case, contender: str, pipeline: str = "default") -> dict:
    """Run ``case`` for ``contender`` in this process; a record with ``status``.

    ``status`` is ``pass``, or ``fail`` with the ``stage`` (``prepare``, ``run``,
    ``compare``) and the ``error``.
    """
    record = {"case": case.name, "kind": case.kind, "contender": contender}
    proto = case.proto()
    record.update(ops=case_ops(proto), opset=case_opset(proto))
    start = time.perf_counter()
    stage = "prepare"
    try:
        run = _PREPARE[contender](proto, pipeline)
        for inputs, expected in case.data_sets:
            stage = "run"
            actual = run(list(inputs))
            stage = "compare"
            _compare(case, expected, actual)
        record.update(status="pass")
    except Exception as err:  # noqa: BLE001 - every failure is a result, not a crash
        record.update(status="fail", stage=stage, error=last_line(err))
        log.debug("%s/%s failed at %s:\n%s", case.name, contender, stage,
                  traceback.format_exc())
    record["seconds"] = round(time.perf_counter() - start, 3)
    return record


# ----------------------------------------------------------------------------- isolation


def _worker_main(conn, quiet: bool) -> None:
    configure_thread_pool(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if quiet:  # TVM and ORT write to fds 1 and 2 directly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    logging.disable(logging.WARNING)
    import warnings

    warnings.simplefilter("ignore")
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        case, contender, pipeline = task
        conn.send(run_case(case, contender, pipeline))


class _Worker:
    def __init__(self, ctx, quiet: bool):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, quiet), daemon=True)
        self.proc.start()
        child.close()
        self.task = None
        self.started = 0.0

    def submit(self, task) -> None:
        self.task = task
        self.started = time.monotonic()
        self.conn.send(task)

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


class IsolatedRunner:
    """Run ``(case, contender)`` tasks in ``jobs`` worker processes.

    Each task has ``timeout`` seconds; a worker that dies (segfault, abort) or
    overruns is replaced and the task is recorded as ``crash`` or ``timeout``.
    """

    def __init__(self, jobs: int = 1, timeout: float = 120.0, pipeline: str = "default",
                 quiet: bool = True, light_timeout: float | None = None):
        self.jobs = max(1, int(jobs))
        self.timeout = float(timeout)
        #: whole models (the ``light`` cases) compile for minutes on a busy machine
        self.light_timeout = float(light_timeout or max(timeout, 900.0))
        self.pipeline = pipeline
        self.quiet = quiet
        self._ctx = multiprocessing.get_context("spawn")

    def run(self, tasks: Iterable[tuple[Case, str]]) -> Iterator[dict]:
        """Yield one record per task, in completion order."""
        pending = list(tasks)[::-1]
        workers: list[_Worker] = []
        try:
            while pending or any(w.task for w in workers):
                while pending and len([w for w in workers if w.task]) < self.jobs:
                    idle = next((w for w in workers if not w.task), None)
                    if idle is None:
                        idle = _Worker(self._ctx, self.quiet)
                        workers.append(idle)
                    case, contender = pending.pop()
                    try:
                        idle.submit((case, contender, self.pipeline))
                    except (OSError, BrokenPipeError):  # the worker died starting up
                        yield self._lost(idle, "crash", "worker died before the case started")
                        idle.stop(kill=True)
                        workers.remove(idle)
                busy = [w for w in workers if w.task]
                ready = wait_for([w.conn for w in busy] + [w.proc.sentinel for w in busy],
                                 timeout=1.0)
                now = time.monotonic()
                for w in busy:
                    record = None
                    if w.conn in ready:
                        try:
                            record = w.conn.recv()
                        except (EOFError, OSError):
                            record = self._lost(w, "crash", f"worker died (exit code "
                                                f"{w.proc.exitcode})")
                    elif w.proc.sentinel in ready:
                        w.proc.join(timeout=1)
                        record = self._lost(w, "crash",
                                            f"worker died (exit code {w.proc.exitcode})")
                    elif now - w.started > self._limit(w.task[0]):
                        limit = self._limit(w.task[0])
                        record = self._lost(w, "timeout", f"no result in {limit:.0f} s")
                    if record is None:
                        continue
                    if record["status"] in ("crash", "timeout"):
                        w.stop(kill=True)
                        workers.remove(w)
                    else:
                        w.task = None
                    yield record
        finally:
            for w in workers:
                w.stop(kill=bool(w.task))

    def _limit(self, case: Case) -> float:
        return self.light_timeout if case.kind == "light" else self.timeout

    @staticmethod
    def _lost(worker: _Worker, status: str, why: str) -> dict:
        case, contender, _ = worker.task
        proto = case.proto()
        return {"case": case.name, "kind": case.kind, "contender": contender,
                "ops": case_ops(proto), "opset": case_opset(proto), "status": status,
                "stage": "isolated", "error": why,
                "seconds": round(time.monotonic() - worker.started, 3)}


def run_isolated(cases: Sequence[Case], contenders: Sequence[str] = ("cocopie",),
                 jobs: int = 1, timeout: float = 120.0, pipeline: str = "default",
                 progress: Any = None, light_timeout: float | None = None) -> list[dict]:
    """All ``cases`` x ``contenders`` through an :class:`IsolatedRunner`; the records."""
    runner = IsolatedRunner(jobs=jobs, timeout=timeout, pipeline=pipeline,
                            light_timeout=light_timeout)
    tasks = [(case, c) for case in cases for c in contenders]
    records = []
    for record in runner.run(tasks):
        records.append(record)
        if progress is not None:
            progress(record)
    return records

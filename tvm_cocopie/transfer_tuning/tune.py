"""Plain MetaSchedule tuning of a model's kernels: the source logs and the reference.

Transfer-tuning needs tuned models to draw schedules from (the pool of §6.2.4) and
full auto-scheduling as the reference it is compared with (§6.3). :func:`tune_model`
tunes exactly the kernels :func:`~.kernel_class.extract_kernels` finds, names each
task after its kernel, and leaves in the work dir, next to MetaSchedule's database,
``tuning.json``: the trials, the search time and a *timeline* ``[[seconds since the
start, records in the database], ...]`` written after every measured batch, so that
"MetaSchedule stopped after S seconds" is the first records of the database
(:func:`truncated_database`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ..metaschedule import Measurer, build_kernel_stock, local_builder, tune_context
from ..paths import write_json_atomic
from ..target import parse_target
from .kernel_class import extract_kernels
from .readers import RECORD_FILE, WORKLOAD_FILE
from .space import alloc_arguments, space_generator

log = logging.getLogger(__name__)

TUNING_FILE = "tuning.json"


@derived_object
class TimelineCallback(ms.measure_callback.PyMeasureCallback):
    """After each measured batch: (seconds since start, records in the database)."""

    def __init__(self, work_dir: Path, meta: dict):
        self.path = Path(work_dir) / TUNING_FILE
        self.records = Path(work_dir) / RECORD_FILE
        self.meta = meta
        self.start = time.perf_counter()

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        """After each batch, note the seconds elapsed and the records written so far."""
        lines = self.records.read_text().count("\n") if self.records.exists() else 0
        self.meta["timeline"].append([time.perf_counter() - self.start, lines])
        self.meta["seconds"] = time.perf_counter() - self.start
        write_json_atomic(self.path, self.meta)


#: the design spaces :func:`tune_model` can search
SPACES = ("cocopie", "stock")


def tune_model(model, target, log_dir, trials: int, build_timeout: float = 300.0,
               kernels=None, shapes=None, population: int = 512, space: str = "cocopie") -> Path:
    """MetaSchedule-tune ``model``'s kernels into ``log_dir`` (a MetaSchedule work dir).

    ``trials`` is the total over all kernels; MetaSchedule's gradient task scheduler
    first gives every kernel a round of ``trials // kernels`` (at least 1) trials.
    Builds run in worker processes with :func:`~tvm_cocopie.metaschedule.build_kernel`
    (:func:`~tvm_cocopie.metaschedule.build_kernel_stock` for the stock space).
    ``population``: the evolutionary search's population (MetaSchedule's default
    512; each round evolves it in this process, minutes per kernel on a loaded
    2-core machine, so small budgets use a smaller one).
    ``space``: ``"cocopie"`` searches the free choices of cocopie's schedule rules
    (:mod:`.space`: register tiles, loop order, padding placement, unroll), starting
    from our default schedules; ``"stock"`` MetaSchedule's own CPU rules
    (``PostOrderApply``), which start from untuned loops.
    """

    target = parse_target(target)
    kernels = kernels if kernels is not None else extract_kernels(model, target, shapes=shapes)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    meta = {"trials": trials, "kernels": len(kernels), "space": space, "seconds": 0.0,
            "timeline": [], "done": False}
    timeline = TimelineCallback(log_dir, meta)
    if space not in SPACES:
        raise ValueError(f"space must be one of {SPACES}, not {space!r}")
    contexts = [tune_context(k.mod, target,
                             "post-order-apply" if space == "stock" else space_generator(target),
                             ms.search_strategy.EvolutionarySearch(
                                 population_size=population, init_min_unmeasured=min(50, population)),
                             task_name=k.name)
                for k in kernels]
    ms.tune.tune_tasks(
        tasks=contexts, task_weights=[float(k.weight) for k in kernels], work_dir=str(log_dir),
        max_trials_global=trials,
        num_trials_per_iter=max(1, min(32, trials // max(1, len(kernels)))),
        # stock rules build as stock TVM does, ours with the cocopie TIR pipeline
        builder=local_builder(build_timeout,
                              f_build=build_kernel_stock if space == "stock" else None),
        # timed like transfer-tuning's candidates, with the model's thread pool
        runner=Measurer(target, run_timeout=120, f_alloc_argument=alloc_arguments).runner(),
        measure_callbacks=ms.measure_callback.MeasureCallback.create("default") + [timeline],
    )
    meta["seconds"] = time.perf_counter() - timeline.start
    meta["done"] = True
    write_json_atomic(log_dir / TUNING_FILE, meta)
    return log_dir


def read_tuning(log_dir) -> dict | None:
    """``tuning.json`` of a finished :func:`tune_model` run (None if absent or unfinished)."""
    path = Path(log_dir) / TUNING_FILE
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return meta if meta.get("done") else None


def truncated_database(log_dir, seconds: float, out_dir) -> tuple[Path, int]:
    """The database MetaSchedule had after ``seconds`` of tuning, as a work dir in ``out_dir``.

    Returns ``(out_dir, number of records)``.
    """
    meta = json.loads((Path(log_dir) / TUNING_FILE).read_text())
    count = 0
    for elapsed, lines in meta["timeline"]:
        if elapsed <= seconds:
            count = lines
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = (Path(log_dir) / RECORD_FILE).read_text().splitlines(keepends=True)[:count]
    (out / RECORD_FILE).write_text("".join(records))
    (out / WORKLOAD_FILE).write_text((Path(log_dir) / WORKLOAD_FILE).read_text())
    return out, count

"""The output of transfer-tuning: the winning schedules as a MetaSchedule database.

Stock ``MetaScheduleApplyDatabase`` (and ``PipelineOptions(database=DIR)``) applies it;
it is written in a temporary folder and moved into place, so a reader never sees half
of one."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms

from .kernel_class import blocks_of


def write_database(winners, target, out: Path) -> Path:
    """Commit the winning schedules as a MetaSchedule database in ``out`` (atomically).

    An untuned winner is stored with a trace that changes nothing (one block lookup:
    MetaSchedule's queries skip records with empty traces) so that the pipeline
    leaves the kernel as it is instead of applying the default rules.
    """
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".db."))
    try:
        db = ms.database.JSONDatabase(work_dir=str(tmp))
        for kernel, _cid, sch, secs in winners:
            if sch is None:  # untuned: a no-op trace (an empty one is never returned by queries)
                sch = tvm.s_tir.Schedule(kernel.mod)
                blocks = blocks_of(kernel.mod["main"])
                if blocks:
                    sch.get_sblock(blocks[0].name)
            func = next(f for _, f in kernel.mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
            db.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, db.commit_workload(kernel.mod), [secs], target,
                ms.arg_info.ArgInfo.from_prim_func(func)))
        del db
        for name in ("database_workload.json", "database_tuning_record.json"):
            src = tmp / name
            if not src.exists():
                src.write_text("")
            os.replace(src, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out

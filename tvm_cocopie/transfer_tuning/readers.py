"""Readers of tuning logs: MetaSchedule database directories (thesis §6.2.4, §6.3).

Transfer-tuning starts from the schedules some auto-scheduler already found for
other models ("the tuned pool", §6.2.4). Today those are MetaSchedule work dirs
(``database_workload.json`` + ``database_tuning_record.json``); any number of them
may sit under a root. Legacy Ansor JSON-lines logs are read by :mod:`.ansor`.

Every reader is tolerant line by line: a corrupt, truncated or foreign line is
skipped, counted under a reason in an :class:`ImportSummary`, and explained. Only a
log from which *nothing* usable is left raises
:class:`~tvm_cocopie.errors.TuningLogError`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..errors import TuningLogError, last_line

log = logging.getLogger(__name__)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
#: how many example explanations an ImportSummary keeps per reason
MAX_EXAMPLES = 5


@dataclass
class ImportSummary:
    """What a reader kept and what it skipped, with a count and examples per reason."""

    source: str = ""
    lines: int = 0
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)
    #: counts that are not skipped records (e.g. Ansor steps replayed)
    notes: Counter = field(default_factory=Counter)

    def skip(self, reason: str, detail: str) -> None:
        """Count a skipped record under ``reason``, keeping a few ``detail`` examples."""
        self.skipped[reason] += 1
        self.examples.setdefault(reason, [])
        if len(self.examples[reason]) < MAX_EXAMPLES:
            self.examples[reason].append(detail)
        log.debug("%s: skipped (%s): %s", self.source, reason, detail)

    def merge(self, other: ImportSummary) -> ImportSummary:
        """Add ``other``'s counts to this summary; this summary."""
        self.lines += other.lines
        self.kept += other.kept
        self.skipped.update(other.skipped)
        self.notes.update(other.notes)
        for reason, ex in other.examples.items():
            mine = self.examples.setdefault(reason, [])
            mine.extend(ex[: MAX_EXAMPLES - len(mine)])
        return self

    def as_dict(self) -> dict:
        """The summary as JSON-ready data."""
        return {"source": self.source, "lines": self.lines, "kept": self.kept,
                "skipped": dict(self.skipped), "notes": dict(self.notes), "examples": self.examples}

    def explain(self) -> str:
        """The summary as readable lines: records usable, and why the others were skipped."""
        parts = [f"{self.source}: {self.kept} of {self.lines} record(s) usable"]
        for reason, n in sorted(self.skipped.items()):
            ex = self.examples.get(reason, [])
            parts.append(f"  {n} skipped: {reason}" + (f" (e.g. {ex[0]})" if ex else ""))
        for note, n in sorted(self.notes.items()):
            parts.append(f"  note: {n} {note}")
        return "\n".join(parts)


@dataclass
class SourceRecord:
    """One tuned schedule: the kernel it was tuned on, its trace and measured time."""

    workload: tvm.IRModule
    trace: object  # tvm.s_tir.schedule.Trace
    run_secs: list[float]
    target: object | None
    origin: str  # "<log file or dir>#<line>"
    model: str = ""  # the tuned model the record came from (the directory name)

    @property
    def mean_secs(self) -> float:
        """Mean of the record's run times (``inf`` when it has none)."""
        vals = [float(v) for v in self.run_secs or []]
        return sum(vals) / len(vals) if vals else float("inf")


def find_database_dirs(root: str | Path) -> list[Path]:
    """Every directory at or under ``root`` holding a MetaSchedule database."""
    root = Path(root)
    if not root.exists():
        raise TuningLogError(f"no such log directory: {root}; pass the MetaSchedule "
                             "work dir (with database_workload.json) or a folder of them")
    if root.is_file():
        root = root.parent
    return sorted({p.parent for p in root.rglob(WORKLOAD_FILE) if (p.parent / RECORD_FILE).exists()})


def _read_lines(path: Path, summary: ImportSummary):
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise TuningLogError(f"cannot read {path}: {err}") from err
    text = raw.decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        yield number, line


def _target_matches(record_target, target) -> bool:
    if target is None or record_target is None:
        return True
    a, b = record_target.export(), target.export()
    return a.get("kind") == b.get("kind") and (
        a.get("mtriple", "") == b.get("mtriple", "") or not a.get("mtriple") or not b.get("mtriple")
    )


def read_database_dir(path: str | Path, target=None, summary: ImportSummary | None = None,
                      strict: bool = True) -> tuple[list[SourceRecord], ImportSummary]:
    """Read one MetaSchedule work dir line by line (bad lines are skipped and counted).

    ``target``: keep only records for that target's kind/triple (others count as
    ``foreign_target``). With ``strict`` a directory with no usable record raises
    :class:`TuningLogError`.
    """
    path = Path(path)
    if target is not None and not isinstance(target, tvm.target.Target):
        from ..target import parse_target

        target = parse_target(target)
    summary = summary or ImportSummary(source=str(path))
    workloads: dict[int, ms.database.Workload] = {}
    for number, line in _read_lines(path / WORKLOAD_FILE, summary):
        try:
            workloads[len(workloads)] = ms.database.Workload.from_json(json.loads(line))
        except Exception as err:  # noqa: BLE001 - any parse failure is a corrupt line
            workloads[len(workloads)] = None
            summary.skip("corrupt_workload", f"{WORKLOAD_FILE}:{number}: {last_line(err)}")
    records = []
    for number, line in _read_lines(path / RECORD_FILE, summary):
        summary.lines += 1
        where = f"{path / RECORD_FILE}:{number}"
        try:
            obj = json.loads(line)
            index, body = int(obj[0]), obj[1]
        except Exception as err:  # noqa: BLE001
            summary.skip("corrupt_line", f"{where}: {last_line(err)}")
            continue
        workload = workloads.get(index)
        if workload is None:
            summary.skip("unknown_workload", f"{where}: workload #{index} missing or corrupt")
            continue
        try:
            rec = ms.database.TuningRecord.from_json(body, workload)
        except Exception as err:  # noqa: BLE001
            summary.skip("corrupt_line", f"{where}: {last_line(err)}")
            continue
        if not _target_matches(rec.target, target):
            summary.skip("foreign_target", f"{where}: tuned for {rec.target.export().get('kind')}")
            continue
        secs = [float(s) for s in (rec.run_secs or [])]
        if not secs or any(s >= 1e9 for s in secs):
            summary.skip("failed_measurement", f"{where}: no valid run time")
            continue
        records.append(SourceRecord(workload.mod, rec.trace, secs, rec.target,
                                    f"{path}#{number}", model=path.name))
        summary.kept += 1
    if strict and not records:
        raise TuningLogError(
            f"no usable tuning record in {path}: "
            + (summary.explain() if summary.lines else "the database is empty")
            + ". Tune the model first (tvm-cocopie tune MODEL.onnx --log-dir DIR) or point "
            "--logs at a MetaSchedule work dir for this target."
        )
    return records, summary


def read_logs(root: str | Path, target=None) -> tuple[list[SourceRecord], ImportSummary]:
    """Read every MetaSchedule database under ``root``; raise only if none is usable."""
    dirs = find_database_dirs(root)
    total = ImportSummary(source=str(root))
    if not dirs:
        raise TuningLogError(
            f"no MetaSchedule database under {root} (looked for {WORKLOAD_FILE} next to "
            f"{RECORD_FILE}); create one with `tvm-cocopie tune` or ms.tune_tir(work_dir=...)")
    records: list[SourceRecord] = []
    for d in dirs:
        recs, summ = read_database_dir(d, target=target, strict=False)
        records += recs
        total.merge(summ)
    if not records:
        raise TuningLogError(f"no usable tuning record under {root}:\n{total.explain()}\n"
                             "Re-tune for this target or check the logs are not truncated.")
    log.info("%s", total.explain())
    return records, total


def best_per_workload(records: list[SourceRecord]) -> list[SourceRecord]:
    """The fastest record of each distinct workload (structural equality)."""
    best: dict[int, SourceRecord] = {}
    for rec in records:
        key = tvm_ffi.structural_hash(rec.workload)
        if key not in best or rec.mean_secs < best[key].mean_secs:
            best[key] = rec
    return list(best.values())

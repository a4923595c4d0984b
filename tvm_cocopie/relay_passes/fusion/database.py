"""DNNFusion's profiling database: measured latencies of fusion candidates, kept across
models and runs (seed 004, §3.4: ~22K entries after 15 models).

One SQLite file (default ``fusion.sqlite`` in the package cache folder,
:func:`tvm_cocopie.paths.cache_dir`), one row per candidate keyed by the target, the
operator sequence and the shapes: the fused block's latency and the sum of its parts'.
A yellow pair looks its block up before it is measured; a second compile of a model
(or of another model with the same blocks) measures nothing.

Several processes may compile at once: SQLite's write-ahead log and a busy timeout
serialize the writers, and a row written twice keeps the first value (``INSERT OR
IGNORE``), so no process loses another's rows. A file that is not such a database
(corrupt, foreign, of another schema version) is moved aside and rebuilt, with a
warning; it never stops a compile.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ...paths import cache_dir
from ...sqlite_file import SqliteFile

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3  # 2: candidates checked against their parts (inf: miscompiled);
#                   3: fused kernels only the generic schedule takes are inf too
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    target TEXT NOT NULL,
    ops TEXT NOT NULL,
    shapes TEXT NOT NULL,
    fused_us REAL NOT NULL,
    parts_us REAL NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (target, ops, shapes)
);
CREATE TABLE IF NOT EXISTS mapping_types (key TEXT PRIMARY KEY, type INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class Entry:
    """A measured candidate: the fused block's latency and the sum of its parts' (µs)."""

    fused_us: float
    parts_us: float

    @property
    def fuse(self) -> bool:
        """Whether the fused block is the faster."""
        return self.fused_us < self.parts_us


def default_path() -> Path:
    """``fusion.sqlite`` in the package cache folder."""
    return cache_dir("fusion.sqlite")


def key_of(target, ops, shapes) -> tuple[str, str, str]:
    """The row key of a candidate: the target (its JSON), the operator sequence, the
    shapes (both as compact JSON)."""
    target_text = json.dumps(target.export(), sort_keys=True, default=str) \
        if hasattr(target, "export") else str(target)
    return (target_text, json.dumps(list(ops), separators=(",", ":")),
            json.dumps([list(s) for s in shapes], separators=(",", ":")))


class ProfileDB:
    """The profiling database at ``path`` (default :func:`default_path`)."""

    def __init__(self, path: str | os.PathLike | None = None, timeout: float = 60.0):
        self.file = SqliteFile(
            path if path is not None else default_path(), _SCHEMA, SCHEMA_VERSION,
            "SELECT target, ops, shapes, fused_us, parts_us FROM candidates LIMIT 1",
            "fusion profiling database", timeout)
        self.path = self.file.path
        self.timeout = timeout

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.file.connect()

    def get(self, target, ops, shapes) -> Entry | None:
        """The measured entry of a candidate, or ``None`` if never measured."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT fused_us, parts_us FROM candidates WHERE target=? AND ops=? AND shapes=?",
                key_of(target, ops, shapes)).fetchone()
        return Entry(*row) if row else None

    def put(self, target, ops, shapes, entry: Entry) -> Entry:
        """Record ``entry`` unless the candidate is there already; the stored entry."""
        with self._connect() as conn:
            conn.execute("INSERT OR IGNORE INTO candidates VALUES (?, ?, ?, ?, ?, ?)",
                         (*key_of(target, ops, shapes), float(entry.fused_us),
                          float(entry.parts_us), time.time()))
        return self.get(target, ops, shapes)

    def mapping_types(self, keys) -> dict[str, int]:
        """The stored mapping types of kernels by key (:func:`.plan.mapping_key`; a
        kernel's type is derived from its TIR once and remembered: on ResNet-18 the
        derivation was 1.2 of a second compile's 9.6 s)."""
        keys = list(keys)
        found: dict[str, int] = {}
        with self._connect() as conn:
            for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                part = keys[start:start + 500]
                marks = ",".join("?" * len(part))
                found.update(conn.execute(
                    f"SELECT key, type FROM mapping_types WHERE key IN ({marks})", part))
        return found

    def put_mapping_types(self, types: dict[str, int]) -> None:
        """Remember kernels' mapping types (a key stored already keeps its value)."""
        if not types:
            return
        with self._connect() as conn:
            conn.executemany("INSERT OR IGNORE INTO mapping_types VALUES (?, ?)",
                             [(k, int(v)) for k, v in types.items()])

    def __len__(self) -> int:
        with self._connect() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0])

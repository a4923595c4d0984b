"""One SQLite file that several processes share, rebuilt when unusable.

The profiling database of DNNFusion (:mod:`.relay_passes.fusion.database`) and the
latency model's dataset (:mod:`.latency.dataset`) are such files: several compiles or
benchmarks may write at once (SQLite's write-ahead log and a busy timeout serialize
them), and a file that is not the expected database (corrupt, foreign, of another
schema version) is moved aside with a warning and started afresh: it never stops a
compile.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)


class SqliteFile:
    """The database at ``path`` with tables ``schema`` (SQL script; it must create a
    ``meta (key TEXT PRIMARY KEY, value TEXT)`` table) at schema ``version``;
    ``probe``: a query that must run on a usable file; ``what``: its name in
    warnings."""

    def __init__(self, path: str | os.PathLike, schema: str, version: int, probe: str,
                 what: str, timeout: float = 60.0):
        self.path = Path(path)
        self.schema = schema
        self.version = str(version)
        self.probe = probe
        self.what = what
        self.timeout = timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._check()
        except sqlite3.DatabaseError as err:
            self._rebuild(str(err))

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A connection in autocommit mode, write-ahead log on, waiting for writers;
        closed when the ``with`` block ends. (A connection left to the garbage
        collector keeps the write-ahead log alive: a file replaced meanwhile would
        still be read through the old log.)"""
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            yield conn
        finally:
            conn.close()

    def _check(self) -> None:
        with self.connect() as conn:
            conn.executescript(self.schema)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (self.version,))
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None or row[0] != self.version:
                raise sqlite3.DatabaseError(f"schema version {row and row[0]}, not {self.version}")
            conn.execute(self.probe)

    def _rebuild(self, why: str) -> None:
        aside = self.path.with_name(f"{self.path.name}.broken-{int(time.time())}-{os.getpid()}")
        log.warning("%s %s is unusable (%s): moved to %s, starting a new one", self.what,
                    self.path, why, aside)
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                os.replace(src, Path(str(aside) + suffix))
        self._check()

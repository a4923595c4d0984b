"""Measured kernels and models: the latency model's training data, per target.

One SQLite file (default ``latency.sqlite`` in the package cache folder) with two
tables:

* ``kernels``: one row per measured kernel: the target, the feature schema
  (:func:`.features.feature_schema`), the ``source`` it came from (the model whose
  kernel it is, or the model whose kernel a design-space sample varies: a
  leave-one-model-out split drops every row of the model under test), the kind of row
  (``model``: timed inside the model; ``sample``: a design-space point timed alone,
  caches flushed; ``fusion``: a fusion candidate of DNNFusion's profiler), a kernel key
  (structural hash; for samples, hash and sample index), the features and the measured
  microseconds per call, and how many times one inference calls it;
* ``models``: one row per measured model: its milliseconds per inference (median),
  the kernel calls the VM makes in one inference (``vm_calls``) and the kernel keys it
  calls with their counts.

Rows are written as they are measured (a long collection that stops keeps them and
resumes); a row measured again replaces the old one. Rows of another feature schema
stay in the file but are not read (:meth:`Dataset.refeaturize` computes the new
features from the kernels kept beside them). A file that is not such a database is
moved aside and rebuilt, with a warning (:class:`~tvm_cocopie.sqlite_file.SqliteFile`).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import zlib
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..paths import cache_dir
from ..sqlite_file import SqliteFile
from ..target import parse_target
from .features import FEATURE_NAMES, feature_schema

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: the scheduled kernel is kept beside its features
KINDS = ("model", "sample", "fusion", "tuning")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kernels (
    target TEXT NOT NULL, features_schema TEXT NOT NULL, source TEXT NOT NULL,
    kind TEXT NOT NULL, kernel TEXT NOT NULL, name TEXT NOT NULL, features BLOB NOT NULL,
    latency_us REAL NOT NULL, calls INTEGER NOT NULL, created REAL NOT NULL, func BLOB,
    PRIMARY KEY (target, features_schema, source, kind, kernel)
);
CREATE TABLE IF NOT EXISTS models (
    target TEXT NOT NULL, features_schema TEXT NOT NULL, source TEXT NOT NULL,
    latency_ms REAL NOT NULL, vm_calls INTEGER NOT NULL, kernels TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (target, features_schema, source)
);
"""


def target_key(target) -> str:
    """A target as compact sorted JSON (the key rows and model files are stored under):
    a Target, its JSON dict or text, ``None`` (this host) or a key already made."""
    target = parse_target(target)
    return json.dumps(json.loads(str(target)), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Row:
    """One measured kernel."""

    source: str
    kind: str
    kernel: str
    name: str
    features: np.ndarray
    latency_us: float
    calls: int = 1
    #: the scheduled kernel itself, kept so that new features can be computed from it
    func: object = None


@dataclass(frozen=True)
class ModelRow:
    """One measured model: ms per inference, VM calls, ``{kernel key: calls}``."""

    source: str
    latency_ms: float
    vm_calls: int
    kernels: dict


def kernel_key(kernel) -> str:
    """A kernel's key in the dataset: the structural hash of its PrimFunc or module
    (48 bits, hex)."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(kernel) & 0xFFFFFFFFFFFF:x}"


def _pack(func) -> bytes | None:
    import tvm

    return None if func is None else zlib.compress(tvm.ir.save_json(func).encode())


def _unpack(blob: bytes):
    import tvm

    return tvm.ir.load_json(zlib.decompress(blob).decode())


def default_path() -> Path:
    """``latency.sqlite`` in the package cache folder."""
    return cache_dir("latency.sqlite")


class Dataset:
    """The measurements at ``path`` (default :func:`default_path`) for ``target``."""

    def __init__(self, target, path: str | os.PathLike | None = None, timeout: float = 60.0):
        self.target = target_key(target)
        self.schema = feature_schema()
        self.file = SqliteFile(path if path is not None else default_path(), _SCHEMA,
                               SCHEMA_VERSION, "SELECT features, latency_us FROM kernels LIMIT 1",
                               "latency dataset", timeout)
        self.path = self.file.path

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.file.connect()

    def put(self, rows: list[Row]) -> None:
        """Store measured kernels (a row measured again replaces the old one)."""
        if not rows:
            return
        for row in rows:
            if row.kind not in KINDS:
                raise ValueError(f"row kind {row.kind!r} is not one of {KINDS}")
            if len(row.features) != len(FEATURE_NAMES):
                raise ValueError(f"{len(row.features)} features, not {len(FEATURE_NAMES)}")
        with self._connect() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO kernels VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(self.target, self.schema, r.source, r.kind, r.kernel, r.name,
                  np.asarray(r.features, np.float32).tobytes(), float(r.latency_us),
                  int(r.calls), time.time(), _pack(r.func)) for r in rows])

    def refeaturize(self, featurize, progress: bool = False, chunk: int = 200) -> int:
        """Compute this feature schema's rows from the kernels stored under other
        schemas (measurements outlive a change of features): ``featurize(func, row
        kind)`` gives the new vector. Models measured whole are carried over too.
        Rows are written ``chunk`` at a time (an interrupted run keeps them and goes on
        where it stopped); ``progress``: a progress bar. Returns the rows added."""
        with self._connect() as conn:
            old = conn.execute(
                "SELECT source, kind, kernel, name, latency_us, calls, func FROM kernels "
                "WHERE target=? AND features_schema!=? AND func IS NOT NULL",
                (self.target, self.schema)).fetchall()
            models = conn.execute(
                "SELECT source, latency_ms, vm_calls, kernels FROM models "
                "WHERE target=? AND features_schema!=?", (self.target, self.schema)).fetchall()
        have = {(r.source, r.kind, r.kernel) for r in self.rows()}
        todo = [o for o in old if tuple(o[:3]) not in have]
        bar = None
        if progress and todo:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="features", unit="kernel")
        rows, added = [], 0
        for source, kind, kernel, name, us, calls, blob in todo:
            if (source, kind, kernel) in have:
                continue
            func = _unpack(blob)
            rows.append(Row(source, kind, kernel, name, featurize(func, kind), us, calls, func))
            have.add((source, kind, kernel))
            if len(rows) >= chunk:
                self.put(rows)
                added += len(rows)
                rows = []
            if bar is not None:
                bar.update()
        self.put(rows)
        added += len(rows)
        if bar is not None:
            bar.close()
        known = {m.source for m in self.models()}
        for source, ms_, calls, kernels in models:
            if source not in known:
                self.put_model(ModelRow(source, ms_, calls, json.loads(kernels)))
                known.add(source)
        return added

    def put_model(self, row: ModelRow) -> None:
        """Store a measured model."""
        with self._connect() as conn:
            conn.execute("INSERT OR REPLACE INTO models VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (self.target, self.schema, row.source, float(row.latency_ms),
                          int(row.vm_calls), json.dumps(row.kernels, sort_keys=True),
                          time.time()))

    def rows(self, kinds=None, sources=None, exclude_sources=()) -> list[Row]:
        """The kernels of this target and feature schema, optionally only of ``kinds``
        and ``sources``, without those of ``exclude_sources``."""
        with self._connect() as conn:
            found = conn.execute(
                "SELECT source, kind, kernel, name, features, latency_us, calls FROM kernels "
                "WHERE target=? AND features_schema=? ORDER BY source, kind, kernel",
                (self.target, self.schema)).fetchall()
        out = []
        for source, kind, kernel, name, blob, us, calls in found:
            if kinds is not None and kind not in kinds:
                continue
            if sources is not None and source not in sources:
                continue
            if source in exclude_sources:
                continue
            out.append(Row(source, kind, kernel, name, np.frombuffer(blob, np.float32).copy(),
                           float(us), int(calls)))
        return out

    def models(self) -> list[ModelRow]:
        """The measured models of this target and feature schema."""
        with self._connect() as conn:
            found = conn.execute(
                "SELECT source, latency_ms, vm_calls, kernels FROM models "
                "WHERE target=? AND features_schema=? ORDER BY source",
                (self.target, self.schema)).fetchall()
        return [ModelRow(s, float(ms_), int(c), json.loads(k)) for s, ms_, c, k in found]

    def has(self, source: str, kind: str) -> bool:
        """Whether any row of ``source`` and ``kind`` is stored (a collection resumes)."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT 1 FROM kernels WHERE target=? AND features_schema=? AND source=? "
                "AND kind=? LIMIT 1", (self.target, self.schema, source, kind)).fetchone()
        return row is not None

    def has_model(self, source: str) -> bool:
        """Whether model ``source`` was measured whole."""
        return any(m.source == source for m in self.models())

    def __len__(self) -> int:
        return len(self.rows())

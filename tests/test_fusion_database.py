"""DNNFusion's profiling database: round trip, several writers, broken files."""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3

from tvm_cocopie.relay_passes.fusion.database import Entry, ProfileDB

TARGET = {"kind": "llvm", "num-cores": 2}


def test_an_entry_round_trips_and_the_first_write_wins(tmp_path):
    db = ProfileDB(tmp_path / "f.sqlite")
    ops, shapes = ["conv2d_nchwc", "add"], [(1, 8, 16, 16, 8), (1, 8, 16, 16, 8)]
    assert db.get(TARGET, ops, shapes) is None
    assert db.put(TARGET, ops, shapes, Entry(10.0, 12.0)) == Entry(10.0, 12.0)
    assert db.put(TARGET, ops, shapes, Entry(99.0, 1.0)) == Entry(10.0, 12.0)
    assert ProfileDB(tmp_path / "f.sqlite").get(TARGET, ops, shapes).fuse
    assert db.get({"kind": "llvm", "num-cores": 4}, ops, shapes) is None  # keyed by target
    assert db.get(TARGET, ops, [(1, 8, 8, 8, 8)]) is None  # and by shapes


def _writer(path, worker, rows):
    db = ProfileDB(path, timeout=120)
    for i in range(rows):
        db.put(TARGET, [f"op{i}"], [(i,)], Entry(float(worker), float(i)))  # shared keys
        db.put(TARGET, [f"w{worker}_{i}"], [(i,)], Entry(1.0, 2.0))  # each its own


def test_two_processes_filling_one_database_lose_no_row(tmp_path):
    path = tmp_path / "shared.sqlite"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 150)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    db = ProfileDB(path)
    assert len(db) == 150 + 2 * 150
    assert all(db.get(TARGET, [f"w{w}_{i}"], [(i,)]) for w in (1, 2) for i in range(150))


def test_a_corrupt_file_is_rebuilt_with_a_warning(tmp_path, caplog):
    path = tmp_path / "f.sqlite"
    path.write_bytes(b"not a database" * 100)
    with caplog.at_level(logging.WARNING):
        db = ProfileDB(path)
    assert "unusable" in caplog.text and len(db) == 0
    assert list(tmp_path.glob("f.sqlite.broken-*"))
    db.put(TARGET, ["a"], [(1,)], Entry(1.0, 2.0))
    assert len(ProfileDB(path)) == 1


def test_a_foreign_sqlite_file_is_rebuilt(tmp_path, caplog):
    path = tmp_path / "f.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE candidates (x INTEGER)")
    with caplog.at_level(logging.WARNING):
        db = ProfileDB(path)
    assert "unusable" in caplog.text
    db.put(TARGET, ["a"], [(1,)], Entry(1.0, 2.0))
    assert db.get(TARGET, ["a"], [(1,)]) == Entry(1.0, 2.0)

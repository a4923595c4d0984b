"""Readers of tuning logs (thesis §6.3): corrupt, truncated, foreign and empty logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_cocopie.errors import TuningLogError
from tvm_cocopie.transfer_tuning import ansor, readers

#: ../shared beside the checkout (as CI lays it out)
ANSOR = Path(__file__).resolve().parents[2] / "shared" / "data" / "ansor"
LLVM = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}
needs_logs = pytest.mark.skipif(not ANSOR.exists(), reason="shared Ansor logs not present")


@needs_logs
def test_ansor_matmul_imports_with_tiles():
    recs, summary = ansor.read_ansor_log(ANSOR / "matmul.json", LLVM)
    assert summary.kept == 1 and len(recs) == 1
    kinds = [inst.kind.name for inst in recs[0].trace.insts]
    assert "SamplePerfectTile" in kinds and "Split" in kinds


@needs_logs
def test_ansor_foreign_target_raises_with_reason():
    with pytest.raises(TuningLogError, match="foreign_target"):
        ansor.read_ansor_log(ANSOR / "resnet-18-NHWC-B1-cuda.json", LLVM)


@needs_logs
def test_ansor_resnet50_counts_unknown_dags(tmp_path):
    lines = (ANSOR / "resnet-50-NHWC-B1-llvm.json").read_text().splitlines()
    small = tmp_path / "r50.json"
    small.write_text("\n".join(lines[:8]) + "\n")
    recs, summary = ansor.read_ansor_log(small, LLVM, validate=False)
    assert recs and summary.kept == len(recs)
    assert summary.lines == summary.kept + sum(summary.skipped.values())


def test_ansor_empty_and_garbage(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(TuningLogError, match="no record"):
        ansor.read_ansor_log(empty, LLVM)
    bad = tmp_path / "bad.json"
    bad.write_text('{"i": [[\n not json\n{"v": "v0.9"}\n')
    with pytest.raises(TuningLogError, match="corrupt_line"):
        ansor.read_ansor_log(bad, LLVM)


@needs_logs
def test_ansor_truncated_keeps_the_good_lines(tmp_path):
    text = (ANSOR / "matmul.json").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("{"))
    log = tmp_path / "trunc.json"
    log.write_text(line + "\n" + line[: len(line) // 2] + "\n")
    recs, summary = ansor.read_ansor_log(log, LLVM, validate=False)
    assert len(recs) == 1 and summary.skipped["corrupt_line"] == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=80), st.binary(max_size=40).map(lambda b: b.hex()),
                          st.just('{"i": [["[\\"x\\", 1]", "llvm"], [[], []]], "r": [[1.0], 0], "v": "v0.5"}'),
                          st.just('{"i": 3, "r": null, "v": "v0.6"}')), max_size=6))
def test_ansor_fuzzed_lines_never_crash(tmp_path, lines):
    log = tmp_path / "fuzz.json"
    log.write_text("\n".join(lines))
    recs, summary = ansor.read_ansor_log(log, LLVM, strict=False, validate=False)
    assert summary.kept == len(recs)
    assert summary.lines == summary.kept + sum(summary.skipped.values())


def test_ms_reader_missing_and_empty(tmp_path):
    with pytest.raises(TuningLogError, match="no such log directory"):
        readers.read_logs(tmp_path / "nope")
    with pytest.raises(TuningLogError, match="no MetaSchedule database"):
        readers.read_logs(tmp_path)
    d = tmp_path / "m"
    d.mkdir()
    (d / readers.WORKLOAD_FILE).write_text("")
    (d / readers.RECORD_FILE).write_text("")
    with pytest.raises(TuningLogError, match="no usable tuning record"):
        readers.read_logs(tmp_path)


@pytest.fixture(scope="module")
def ms_dir(tmp_path_factory):
    from transfer_helpers import matmul_relu, seed_matmul_database

    root = tmp_path_factory.mktemp("logs")
    seed_matmul_database(matmul_relu(64, 64, 64), LLVM, root / "modelA")
    return root


def test_ms_reader_reads_and_skips_corrupt_and_foreign(ms_dir, tmp_path):
    recs, summary = readers.read_logs(ms_dir, LLVM)
    assert len(recs) == 1 and recs[0].model == "modelA"
    work = tmp_path / "logs" / "modelA"
    shutil.copytree(ms_dir / "modelA", work)
    rec_file = work / readers.RECORD_FILE
    good = rec_file.read_text().splitlines()[0]
    foreign = json.loads(good)
    foreign[1][2] = {"kind": "cuda", "keys": ["cuda", "gpu"], "tag": "", "arch": "sm_80",
                     "max_num_threads": 1024, "thread_warp_size": 32}
    rec_file.write_text("\n".join([good, good[:40], "[7, []]", json.dumps(foreign)]) + "\n")
    recs, summary = readers.read_logs(tmp_path / "logs", LLVM)
    assert len(recs) == 1
    assert summary.skipped["corrupt_line"] == 1
    assert summary.skipped["unknown_workload"] == 1
    assert summary.skipped["foreign_target"] + summary.skipped["corrupt_line"] >= 2
    text = summary.explain()
    assert "1 of 4" in text


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=60), st.just("[0, []]"), st.just("[0, [null, [1e-3]]]"),
                          st.just('[-1, ["x"]]'), st.integers().map(str)), max_size=5),
       st.integers(0, 3))
def test_ms_reader_fuzzed_and_truncated_lines_never_crash(ms_dir, tmp_path_factory, lines, cut):
    work = tmp_path_factory.mktemp("fuzz") / "modelA"
    shutil.copytree(ms_dir / "modelA", work)
    rec_file = work / readers.RECORD_FILE
    good = rec_file.read_text().splitlines()[0]
    truncated = good[: len(good) * cut // 4] if cut else ""
    rec_file.write_text("\n".join([good, *lines, truncated]) + "\n")
    recs, summary = readers.read_database_dir(work, LLVM, strict=False)
    assert len(recs) == summary.kept >= 1
    assert summary.lines == summary.kept + sum(summary.skipped.values())

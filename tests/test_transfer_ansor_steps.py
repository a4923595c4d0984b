"""Ansor's transform steps replayed on TIR (:mod:`tvm_cocopie.transfer_tuning.ansor_steps`)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm.s_tir import Schedule

from tvm_cocopie.target import parse_target
from tvm_cocopie.transfer_tuning import ansor
from tvm_cocopie.transfer_tuning.ansor_steps import follow_lengths, fused_follow_lengths
from tvm_cocopie.transfer_tuning.transfer import check_numerics

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ansor"
RESNET50 = DATA / "resnet-50-NHWC-B1-llvm.json"
TARGET = parse_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})

pytestmark = pytest.mark.skipif(not RESNET50.exists(), reason="../shared/data/ansor not beside the checkout")


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _scheduled(rec):
    sch = Schedule(rec.workload)
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def test_follow_split_lengths_are_ansors():
    steps = [["SP", 3, 4, 56, [14, 2, 2], 1], ["SP", 3, 8, 56, [7, 1, 4], 1]]
    assert follow_lengths(steps, 0, 1) == [56]  # one level: everything inside
    assert follow_lengths(steps, 0, 2) == [14, 4]  # the first length, then the rest
    assert follow_lengths(steps, 0, 3) == [14, 2, 2]
    assert fused_follow_lengths(steps, [0, 1], 1, 1) == [2]  # level 1 of both: 2 * 1


def test_every_step_of_the_real_resnet50_log_is_replayed():
    records, summary = ansor.read_ansor_log(RESNET50, TARGET, validate=False)
    assert summary.kept == 24 and dict(summary.skipped) == {"unknown_dag": 2}
    kept_steps = 0
    for line in _lines(RESNET50):
        obj = json.loads(line)
        try:
            ansor.recognize(obj["i"][0][0])
        except ansor._Skip:
            continue
        kept_steps += len(obj["i"][1][1])
    assert summary.notes["steps_replayed"] == kept_steps
    kinds = collections.Counter(inst.kind.name for rec in records for inst in rec.trace.insts)
    # the conv's consumer goes under the conv's tiles (CA of the tiled conv, reversed),
    # cache writes (CHW) and attached untiled producers (CA) are there too
    assert kinds["ReverseComputeAt"] >= 20 and kinds["CacheWrite"] == 4 and kinds["ComputeAt"] >= 1
    assert kinds["Parallel"] > 0 and kinds["Vectorize"] > 0 and kinds["SamplePerfectTile"] > 100


def test_replayed_schedules_compute_what_the_dag_computes():
    records, _ = ansor.read_ansor_log(RESNET50, TARGET, validate=False)
    picked = {}
    for rec in records:  # one record per kind of schedule structure
        shape = tuple(sorted({i.kind.name for i in rec.trace.insts}))
        picked.setdefault(shape, rec)
    assert len(picked) >= 3
    for rec in picked.values():
        check_numerics(_scheduled(rec), rec.workload, TARGET)


def test_upstream_matmul_record_attaches_the_add_under_the_matmul_tiles():
    records, summary = ansor.read_ansor_log(DATA / "matmul.json", TARGET)
    assert summary.kept == 1 and summary.notes["steps_replayed"] == 13
    kinds = {inst.kind.name for inst in records[0].trace.insts}
    assert {"ReverseComputeAt", "Parallel", "Vectorize", "Fuse"} <= kinds
    check_numerics(_scheduled(records[0]), records[0].workload, TARGET)


def _conv_record() -> dict:
    for line in _lines(RESNET50):
        obj = json.loads(line)
        if any(s[0] == "FSP" for s in obj["i"][1][1]):
            return obj
    raise AssertionError("no conv record with follow splits")


def _write(tmp_path, obj) -> Path:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(obj) + "\n")
    return path


def test_consumer_whose_splits_do_not_follow_the_conv_is_untranslatable(tmp_path):
    obj = _conv_record()
    steps = obj["i"][1][1]
    fsp = next(s for s in steps if s[0] == "FSP")
    fsp[4] = 1 if fsp[4] > 1 else 2  # another number of levels than the conv's
    records, summary = ansor.read_ansor_log(_write(tmp_path, obj), TARGET, strict=False)
    assert not records and summary.skipped["untranslatable"] == 1
    assert "untranslatable" in summary.explain()


def test_step_on_a_missing_stage_is_untranslatable_with_its_reason(tmp_path):
    obj = _conv_record()
    obj["i"][1][1].append(["AN", 42, 0, 3])
    records, summary = ansor.read_ansor_log(_write(tmp_path, obj), TARGET, strict=False)
    assert not records and "stage 42 does not exist" in summary.explain()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_steps_are_replayed_or_skipped_never_crash(tmp_path, data):
    obj = _conv_record()
    steps = obj["i"][1][1]
    i = data.draw(st.integers(0, len(steps) - 1))
    j = data.draw(st.integers(1, len(steps[i]) - 1))
    if isinstance(steps[i][j], int):
        steps[i][j] = data.draw(st.integers(-2, 40))
    elif isinstance(steps[i][j], list):
        steps[i][j] = data.draw(st.lists(st.integers(-1, 30), max_size=6))
    _records, summary = ansor.read_ansor_log(_write(tmp_path, obj), TARGET, strict=False,
                                            validate=False)
    assert summary.kept + sum(summary.skipped.values()) == 1

"""scripts/bench_gspc.py's pieces: the grouped layers of a model, MACs, one layer timed
against its contenders (and checked), the thesis tables and the summary figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tvm_cocopie.bench import gspc
from tvm_cocopie.models import build

ROOT = Path(__file__).resolve().parent.parent


def test_grouped_layers_of_a_variant_are_distinct_and_shaped():
    layers = gspc.grouped_layers(build("wrn40_2_g8"))
    # the stem's 16 channels, widths 32, 64, 128, the first conv of stages 2 and 3 strided
    assert len(layers) == len(set(layers)) == 6
    assert {(x.c, x.h, x.stride) for x in layers} == {
        (16, 32, 1), (32, 32, 1), (32, 32, 2), (64, 16, 1), (64, 16, 2), (128, 8, 1)}
    assert all(x.groups == 8 and x.k == 3 and x.pad == (1, 1, 1, 1) for x in layers)
    strided = next(x for x in layers if x.stride == 2)
    assert strided.out_hw == (16, 16)
    assert strided.macs == 32 * 16 * 16 * 4 * 9
    assert gspc.grouped_layers(build("wrn40_2", image_size=8)) == []


def test_model_macs_match_the_thesis_table():
    assert gspc.model_macs(build("wrn40_2")) / 1e6 == pytest.approx(328.3, abs=1.0)
    assert gspc.model_macs(build("wrn40_2_g2")) / 1e6 == pytest.approx(198.15, abs=1.0)


def test_compare_layer_times_and_checks_every_contender():
    from tvm_cocopie.target import cpu_info, host_target
    from tvm_cocopie.threads import pool_threads
    from tvm_cocopie.topi.cpu import gspc_shift

    layer = gspc.GroupedLayer(32, 10, 10, 32, 3, 1, (1, 1, 1, 1), 1, 8)
    before = pool_threads()
    records = gspc.compare_layer(layer, None, [1], repeat=2, max_seconds=5)
    assert pool_threads() == before  # the process's pool given back as it was
    (rec,) = records
    # 4 channels per group: lane-shifted vectors on the 16-lane hosts they were measured
    # on, GSPC's segments on 8 lanes (AVX2)
    lanes = cpu_info(host_target()).f32_lanes
    assert rec["kind"] == ("shift" if lanes == gspc_shift.LANES else "gspc")
    assert rec["threads"] == 1
    for key in ("cocopie", "previous", "tvm", "ort"):
        assert rec[f"{key}_ms"] > 0
    for key in ("cocopie", "previous", "tvm"):
        assert rec[f"{key}_max_rel_err"] < 1e-4
    assert rec["speedup_vs_ort"] == pytest.approx(rec["ort_ms"] / rec["cocopie_ms"])


def _model_rec(family, groups, threads, ms):
    return {"model": f"{family}_{groups}", "family": family, "groups": groups,
            "threads": threads, "macs": 1e9, "cocopie_ms": ms, "ort_ms": 2 * ms,
            "cocopie_over_ort": 0.5, "max_rel_err": 1e-6}


def test_tables_and_summary():
    models = [_model_rec("wrn40_2", "S", 1, 10.0), _model_rec("wrn40_2", 2, 1, 8.0),
              _model_rec("wrn40_2", 4, 1, 5.0), _model_rec("wrn40_2", "S", 2, 6.0),
              _model_rec("wrn40_2", 2, 2, 6.5)]
    rows = gspc.thesis_tables(models)
    by = {(r["threads"], r["variant"]): r for r in rows}
    assert by[(1, "G(2)")]["speedup_over_s"] == pytest.approx(1.25)
    assert by[(1, "G(4)")]["speedup_over_s"] == pytest.approx(2.0)
    assert by[(2, "S")]["speedup_over_s"] == pytest.approx(1.0)
    layers = [
        {"layer": "a", "threads": 1, "groups": 2, "kind": "direct", "speedup_vs_ort": 2.0,
         "speedup_vs_previous": 1.0, "speedup_vs_tvm_default": 3.0, "cocopie_max_rel_err": 0},
        {"layer": "b", "threads": 1, "groups": 8, "kind": "gspc", "speedup_vs_ort": 0.5,
         "speedup_vs_previous": 4.0, "speedup_vs_tvm_default": 5.0, "cocopie_max_rel_err": 0},
        {"layer": "c", "threads": 1, "groups": 64, "kind": "depthwise", "speedup_vs_ort": 9.0,
         "speedup_vs_previous": 1.0, "speedup_vs_tvm_default": 1.0, "cocopie_max_rel_err": 0},
    ]
    summary = gspc.summarize(layers, models)
    assert summary["mean_speedup_vs_tvm_default"] == pytest.approx(3.0)
    assert summary["geomean_speedup_vs_ort"] == pytest.approx(1.0)  # depthwise left out
    assert summary["layers_slower_than_ort"] == 1
    assert summary["min_speedup_vs_ort_layer"] == "b @1t"
    assert summary["speedup_vs_previous"] == pytest.approx(4 ** (1 / 3))
    assert summary["g2_speedup_over_s"] == {"wrn40_2@1t": pytest.approx(1.25),
                                            "wrn40_2@2t": pytest.approx(6 / 6.5)}
    assert summary["g2_slower_than_s"] == 1


def test_script_rejects_unknown_family(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gspc.py"),
                          "--families", "lenet", "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode == 2 and "unknown families" in out.stderr
    assert not (tmp_path / "r.json").exists()


def test_script_resume_refuses_other_settings(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"summary": {"settings": {"threads": [1], "repeat": 99}},
                                "records": [], "models": []}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gspc.py"), "--quick",
                          "--resume", "--json", str(path)], capture_output=True, text=True,
                         cwd=ROOT, check=False)
    assert out.returncode == 2 and "other settings" in out.stderr


def test_tune_layer_compares_both_tunings_and_checks_them(tmp_path):
    """A tiny budget (2 trials each way): the three builds agree with each other, and a
    finished tuning is reused rather than run again."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gspc",
                                                  ROOT / "scripts" / "bench_gspc.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    layer = gspc.GroupedLayer(16, 8, 8, 16, 3, 1, (1, 1, 1, 1), 1, 8)
    rec = script.tune_layer(layer, None, tmp_path, trials=2, repeat=2, population=4)
    assert rec["max_rel_err"] < 1e-5
    for key in ("cocopie_ms", "ms_tuned_ms", "cocopie_tuned_ms"):
        assert rec[key] > 0
    assert rec["tuned_over_ms_tuned"] == pytest.approx(rec["ms_tuned_ms"] / rec["cocopie_tuned_ms"])
    dirs = sorted(p.name for p in tmp_path.iterdir())
    assert len(dirs) == 2 and all((tmp_path / d / "tuning.json").exists() for d in dirs)
    stamp = [(tmp_path / d / "tuning.json").stat().st_mtime for d in dirs]
    script.tune_layer(layer, None, tmp_path, trials=2, repeat=2, population=4)
    assert [(tmp_path / d / "tuning.json").stat().st_mtime for d in dirs] == stamp


@pytest.mark.parametrize("name,groups", [("wrn40_2_g16", 16), ("mobilenetv2_g4", 4)])
def test_compare_model_keeps_the_blocked_layout_through_grouped_layers(name, groups):
    """A variant end to end: checked against ONNX Runtime, timed, its MACs, and only the
    graph's own two layout transforms (WRN G(16): 2 per group in 8-lane chunks;
    MobileNetV2 G(4): 36 per group across chunks)."""
    (rec,) = gspc.compare_model(name, "test", groups, None, [1], repeat=2, max_seconds=3,
                                image_size=16 if name.startswith("wrn") else 32)
    assert rec["max_rel_err"] < 1e-4
    assert rec["cocopie_ms"] > 0 and rec["ort_ms"] > 0
    assert rec["layout_transforms"] == 2
    assert rec["macs"] == gspc.model_macs(build(name, image_size=16 if name.startswith("wrn")
                                                else 32))

"""``tvm-cocopie transfer-tune`` end to end: its database applies in the cocopie pipeline
and through stock ``relax.transform.MetaScheduleApplyDatabase``, numerically checked."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transfer_helpers import seed_database, tiny_cnn

LLVM = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}


@pytest.mark.slow
def test_transfer_tune_cli_database_applies_in_both_pipelines(tmp_path, capsys):
    import tvm
    from tvm import relax

    from tvm_cocopie import models
    from tvm_cocopie.api import compile_model
    from tvm_cocopie.cli import main
    from tvm_cocopie.frontend.importer import from_onnx
    from tvm_cocopie.pipeline import PipelineOptions, run_until
    from tvm_cocopie.target import parse_target

    source, model = tmp_path / "a.onnx", tmp_path / "b.onnx"
    models.save(tiny_cnn((8, 8), 12, name="a"), source)
    models.save(tiny_cnn((8, 16), 16, seed=1, name="b"), model)
    seed_database(str(source), LLVM, tmp_path / "logs" / "a")
    out = tmp_path / "out"
    assert main(["transfer-tune", str(model), "--logs", str(tmp_path / "logs"), "--target",
                 json.dumps(LLVM), "--out", str(out), "--repeat", "3", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "over untuned" in text and "over default" in text and "source" in text
    report = json.loads((out / "report.json").read_text())
    assert report["model"]["max_abs_err"] < 1e-3
    # the conv kernels had the source model's schedules transferred and timed
    assert any(k["candidates"] > 2 for k in report["kernels"]), report["kernels"]

    # stock MetaScheduleApplyDatabase on the cocopie-fused module schedules the winners
    target = parse_target(LLVM)

    def apply_database(onnx_path, database):
        mod = from_onnx(str(onnx_path))
        mod = run_until(mod, target, "fusion")
        with target:
            mod = relax.transform.MetaScheduleApplyDatabase(str(database))(mod)
        marked = [f for f in mod.functions.values()
                  if isinstance(f, tvm.tirx.PrimFunc) and f.attrs and f.attrs.get("tirx.is_scheduled")]
        return mod, len(marked)

    seeded = (tmp_path / "logs" / "a" / "database_tuning_record.json").read_text().count("\n")
    assert apply_database(source, tmp_path / "logs" / "a")[1] == seeded > 0
    scheduled, marked = apply_database(model, out)
    assert marked == sum(1 for k in report["kernels"] if k["best"] != "default")
    # ... and stock TVM's CPU lowering builds it; outputs match the untuned build
    from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

    lower = tvm.transform.Sequential(cpu_generic.dataflow_lower_passes(target)
                                     + cpu_generic.finalize_passes(target))
    vm = relax.VirtualMachine(tvm.compile(scheduled, target=target, relax_pipeline=lower), tvm.cpu())
    feeds = models.sample_inputs(tiny_cnn((8, 16), 16, seed=1))
    got = vm["main"](tvm.runtime.tensor(feeds["input"])).numpy()
    untuned = compile_model(str(model), target=LLVM, options=PipelineOptions(schedule=False))
    np.testing.assert_allclose(got, untuned(**feeds), rtol=1e-4, atol=1e-4)

"""The real Ansor ResNet-50 x86 log, transferred to an NHWC build of another model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transfer_helpers import tiny_cnn

from tvm_cocopie.target import parse_target
from tvm_cocopie.transfer_tuning import ansor, search
from tvm_cocopie.transfer_tuning.kernel_class import class_key, extract_kernels
from tvm_cocopie.transfer_tuning.nhwc import NHWC_OPTIONS, nhwc_module
from tvm_cocopie.transfer_tuning.transfer import check_numerics, transfer

LOG = Path(__file__).resolve().parents[2] / "shared" / "data" / "ansor" / "resnet-50-NHWC-B1-llvm.json"
TARGET = parse_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})

pytestmark = pytest.mark.skipif(not LOG.exists(), reason="../shared/data/ansor not beside the checkout")


def test_ansor_schedules_transfer_to_nhwc_convs_and_compute_them():
    records, _ = ansor.read_ansor_log(LOG, TARGET)
    kernels = extract_kernels(nhwc_module(tiny_cnn(channels=(16, 32), size=14), TARGET), TARGET,
                              options=NHWC_OPTIONS)
    convs = [k for k in kernels if k.label == "pad_temp>conv2d_nhwc>T_add>compute"]
    assert len(convs) == 2  # conv + bias + ReLU, NHWC, TOPI's block names: the log's class
    for k in convs:
        same = [r for r in records if class_key(r.workload) == k.key]
        assert same, "no Ansor record of the padded conv+bias+ReLU class"
        for rec in same:
            result = transfer(rec, k.mod, TARGET, validate=False)
            assert result.ok, result.reason
            assert result.changed_tiles > 0  # ResNet-50's tiles adapted to these shapes
            check_numerics(result.schedule.mod, k.mod, TARGET)


def test_transfer_tuned_nhwc_model_matches_its_untuned_build(tmp_path):
    from tvm_cocopie.api import compile_model
    from tvm_cocopie.transfer_tuning.profile import random_inputs

    records, _ = ansor.read_ansor_log(LOG, TARGET)
    mod = nhwc_module(tiny_cnn(channels=(16, 32), size=14), TARGET)
    report = search.transfer_tune(mod, records, TARGET, tmp_path, mode="pool", max_candidates=1,
                                  kernels=extract_kernels(mod, TARGET, options=NHWC_OPTIONS))
    assert any(k.candidates == 3 for k in report.kernels)  # untuned, default, one transfer
    untuned = compile_model(mod, target=TARGET, options=NHWC_OPTIONS.replace(schedule=False))
    tuned = compile_model(mod, target=TARGET, options=NHWC_OPTIONS.replace(database=report.database))
    x = random_inputs(tuned)
    np.testing.assert_allclose(tuned(**x), untuned(**x), rtol=1e-4, atol=1e-4)

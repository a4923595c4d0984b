"""The Hexagon packet cost model (seed 004, §4.4.1) against the emulator on held-out shapes."""

from __future__ import annotations

import pytest

from tvm_cocopie.hexagon.selection import costmodel
from tvm_cocopie.hexagon.tools import calibrate
from tvm_cocopie.topi.int8.layouts import GridGeometry


def test_shipped_model_covers_every_family_and_variant():
    model = costmodel.CostModel.default()
    geo = GridGeometry(56, 56, 3, 1, 1)
    for v in ("vmpy", "vmpa", "vrmpy"):
        assert model.conv(v, geo, 64, 64) > 0
        assert model.dwconv(v, geo, 64) > 0
        assert model.matmul(v, 64, 64, 64) > 0
    lays = [None, *costmodel.LAYOUT_OF.values()]
    for a in lays:
        for b in lays:
            assert model.transform(a, b, 100, 40) >= 0
    # vrmpy is the cheapest conv at every ResNet-50-like size (measured finding)
    costs = {v: model.conv(v, geo, 64, 64) for v in ("vmpy", "vmpa", "vrmpy")}
    assert min(costs, key=costs.get) == "vrmpy"


def test_fit_recovers_the_stored_coefficients():
    from tvm_cocopie.hexagon.selection.coefficients import COEFFICIENTS, SAMPLES

    refit = calibrate.fit_samples(SAMPLES)
    for key, coef in COEFFICIENTS.items():
        assert refit.coefficients[key] == pytest.approx(coef, rel=1e-3, abs=1e-3)


def test_unknown_variant_is_a_cocopie_error():
    from tvm_cocopie.errors import CocopieError

    with pytest.raises(CocopieError, match="recalibrate"):
        costmodel.CostModel({}).matmul("vrmpy", 32, 32, 32)


@pytest.mark.needs_toolchain
@pytest.mark.parametrize(
    "job", calibrate.HELD_OUT, ids=lambda j: f"{j[0]}-{j[1]}-{'x'.join(map(str, j[2]))}"
)
def test_prediction_within_stated_error_on_held_out_shapes(job):
    predicted, measured, err, family = calibrate.held_out_error(*job)
    assert err <= costmodel.STATED_ERROR[family], (predicted, measured)

"""Every zoo model and the three real PP-OCR models compile through the cocopie
pipeline and match ONNX Runtime (tolerance: conftest.REL_TOL, justified there)."""

import re

import pytest
from conftest import assert_close, ort_run

import tvm_cocopie
from tvm_cocopie.errors import ModelFetchError
from tvm_cocopie.models import list_models
from tvm_cocopie.models.workloads import REAL_WORKLOADS, get_workload

#: CNNs at 64x64 keep the suite fast; the benchmarks run them at full size.
TEST_IMAGE_SIZE = 64

#: Further builder arguments that keep a model small here (the topology is whole,
#: only repeated blocks are fewer or narrower).
SMALL_KWARGS: dict[str, dict] = {
    "vit_tiny": {"depth": 2},
    "crnn_large_vocab": {"hidden": 64},
}

#: Grouped variants (G(g) of MobileNetV2, ResNet-34, WRN-40-2) end to end: one group
#: count per family, a different one each, and the variants with groups per layer
#: (gN); every group count 2-16 is checked against numpy at the kernel level
#: (test_kernels_gspc), MobileNetV2 G(4) and WRN-40-2 G(16) end to end again in
#: test_bench_gspc. The other six grouped variants cost ~11 s each here.
GROUPED_KEPT = {"mobilenetv2_g2", "resnet34_g4", "wrn40_2_g16"}
E2E_MODELS = [n for n in list_models()
              if re.search(r"_g\d+$", n) is None or n in GROUPED_KEPT]


@pytest.mark.slow
@pytest.mark.parametrize("name", E2E_MODELS)
def test_zoo_model_matches_onnxruntime(name):
    wl = get_workload(name, image_size=None if name.startswith("wrn") else TEST_IMAGE_SIZE,
                      **SMALL_KWARGS.get(name, {}))
    compiled = tvm_cocopie.compile(wl.model, shapes=wl.shapes)
    assert_close(compiled(**wl.inputs), ort_run(wl.model, wl.inputs))


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("name", REAL_WORKLOADS)
def test_real_ppocr_model_matches_onnxruntime(name):
    try:
        wl = get_workload(name)
    except ModelFetchError as err:
        pytest.skip(f"the package registry cannot be reached to fetch rapidocr: {err}")
    compiled = tvm_cocopie.compile(wl.model, shapes=wl.shapes)
    assert_close(compiled(**wl.inputs), ort_run(wl.model, wl.inputs))

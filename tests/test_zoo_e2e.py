"""Every zoo model and the three real PP-OCR models compile through the cocopie
pipeline and match ONNX Runtime (tolerance: conftest.REL_TOL, justified there)."""

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


@pytest.mark.slow
@pytest.mark.parametrize("name", list_models())
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

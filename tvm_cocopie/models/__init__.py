"""The model zoo: ONNX models built in code, with deterministic random weights.

No download: every model is written op by op by
:class:`~tvm_cocopie.models.graph_builder.GraphBuilder` (opset 17, IR version 10),
with He-normal weights and BN statistics calibrated so that activations stay O(1).
They are the embedded default for demos, benchmarks and tests; real, trained models
written by others come from :mod:`tvm_cocopie.models.real`.

>>> from tvm_cocopie import models
>>> model = models.build("resnet18", image_size=64)
>>> feeds = models.sample_inputs(model)      # {"input": float32 [1, 3, 64, 64]}

CNNs take ``input`` (float32 ``[batch, 3, H, W]``) and give ``output``; every
builder takes ``batch``, ``seed`` and ``dynamic_batch`` (batch dim ``"N"``), CNNs
also ``image_size`` and ``num_classes``. The classifiers give logits ``[batch,
num_classes]``; ``yolo_detector`` gives ``[batch, 4 + num_classes, anchors]`` (boxes
over the image size, class probabilities), the CRNNs per-column class scores.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ..errors import ModelError
from .bert import bert_encoder
from .crnn import crnn, crnn_large_vocab
from .efficientnet import efficientnet_b0
from .graph_builder import IR_VERSION
from .kws import kws_gru
from .mobilenet import (
    mobilenetv2,
    mobilenetv2_g2,
    mobilenetv2_g4,
    mobilenetv2_g8,
    mobilenetv2_g16,
    mobilenetv2_s,
)
from .mobilenetv3 import mobilenetv3_large, mobilenetv3_small
from .resnet import (
    resnet18,
    resnet34,
    resnet34_g2,
    resnet34_g4,
    resnet34_g8,
    resnet34_g16,
    resnet34_gN,
    resnet50,
    resnext50_32x4d,
)
from .shufflenet import shufflenetv2
from .vgg import vgg16
from .vit import vit_tiny
from .wrn import wrn40_2, wrn40_2_g2, wrn40_2_g4, wrn40_2_g8, wrn40_2_g16, wrn40_2_gN
from .yolo import yolo_detector

logger = logging.getLogger(__name__)

#: Model name -> builder returning an ``onnx.ModelProto``.
ZOO: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet34_g2": resnet34_g2,
    "resnet34_g4": resnet34_g4,
    "resnet34_g8": resnet34_g8,
    "resnet34_g16": resnet34_g16,
    "resnet34_gN": resnet34_gN,
    "resnet50": resnet50,
    "resnext50_32x4d": resnext50_32x4d,
    "mobilenetv2": mobilenetv2,
    "mobilenetv2_s": mobilenetv2_s,
    "mobilenetv2_g2": mobilenetv2_g2,
    "mobilenetv2_g4": mobilenetv2_g4,
    "mobilenetv2_g8": mobilenetv2_g8,
    "mobilenetv2_g16": mobilenetv2_g16,
    "mobilenetv3_large": mobilenetv3_large,
    "mobilenetv3_small": mobilenetv3_small,
    "efficientnet_b0": efficientnet_b0,
    "shufflenetv2": shufflenetv2,
    "wrn40_2": wrn40_2,
    "wrn40_2_g2": wrn40_2_g2,
    "wrn40_2_g4": wrn40_2_g4,
    "wrn40_2_g8": wrn40_2_g8,
    "wrn40_2_g16": wrn40_2_g16,
    "wrn40_2_gN": wrn40_2_gN,
    "vgg16": vgg16,
    "bert_encoder": bert_encoder,
    "crnn": crnn,
    "crnn_large_vocab": crnn_large_vocab,
    "yolo_detector": yolo_detector,
    "vit_tiny": vit_tiny,
    "kws_gru": kws_gru,
}

#: The model demos and benchmarks use when none is named.
DEFAULT_MODEL = "resnet18"

__all__ = [
    "DEFAULT_MODEL",
    "ZOO",
    "build",
    "list_models",
    "sample_inputs",
    "save",
]


def list_models() -> list[str]:
    """Names of the zoo's models, sorted."""
    return sorted(ZOO)


def build(name: str, **kwargs: object) -> onnx.ModelProto:
    """Build zoo model ``name``; ``kwargs`` go to its builder (``image_size=64``...).

    Raises :class:`~tvm_cocopie.errors.ModelError` for an unknown name or an argument
    the builder does not take.
    """
    try:
        builder = ZOO[name]
    except KeyError:
        raise ModelError(
            f"unknown model {name!r}; the zoo has: {', '.join(list_models())}"
        ) from None
    try:
        return builder(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"cannot build {name!r} with {kwargs}: {exc}") from exc


def save(model: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    """Write ``model`` to ``path`` (parents created), with IR version at most 10.

    onnxruntime refuses IR versions above 10, which onnx >= 1.23 writes by default;
    a newer model is lowered (its opsets must be ones IR 10 supports, as here).
    """
    path = Path(path)
    if model.ir_version > IR_VERSION:
        logger.warning("lowering the IR version of %s from %d to %d", path,
                       model.ir_version, IR_VERSION)
        lowered = onnx.ModelProto()
        lowered.CopyFrom(model)
        lowered.ir_version = IR_VERSION
        model = lowered
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, path)
    return path


def _vocab_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Graph input -> row count of the initializer table a Gather indexes with it."""
    tables = {t.name: int(t.dims[0]) for t in model.graph.initializer if t.dims}
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in tables:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if axis == 0:
                ids = node.input[1]
                bounds[ids] = min(bounds.get(ids, tables[node.input[0]]),
                                  tables[node.input[0]])
    return bounds


def sample_inputs(model: onnx.ModelProto, seed: int = 0,
                  shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Deterministic inputs for every graph input of ``model``.

    Floats are N(0, 1); integers are ids in ``[0, vocab)``, the bound read from the
    embedding table they index (else ``[0, 100)``); booleans are random. Symbolic or
    unknown dims are 1 unless ``shapes`` gives the input's full shape.
    """
    shapes = dict(shapes or {})
    initializers = {t.name for t in model.graph.initializer}
    bounds = _vocab_bounds(model)
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        ttype = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise ModelError(f"input {value.name!r} is not a tensor; sample_inputs "
                             "makes tensors only")
        if value.name in shapes:
            shape = [int(d) for d in shapes.pop(value.name)]
        else:
            shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                     for d in ttype.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, bounds.get(value.name, 100), shape,
                                             dtype=dtype)
        elif dtype == np.bool_:
            feeds[value.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            raise ModelError(f"input {value.name!r} has dtype {dtype}, for which "
                             "sample_inputs makes no data; pass your own inputs")
    if shapes:
        raise ModelError(f"shapes= names inputs the model lacks: {sorted(shapes)}; "
                         f"its inputs are {[v.name for v in model.graph.input]}")
    return feeds

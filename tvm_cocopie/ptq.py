"""Post-training quantization of a float ONNX model into a QDQ (or QOperator) file.

GCD² (seed 004, ch. 4) runs 8-bit models; most users hold float ones. :func:`quantize_onnx`
calibrates a float model on sample inputs and writes the quantized model as ONNX Runtime's
``quantize_static`` does (the tool many users already quantize with, so a file made here
and one a user brings are the same kind): BatchNorm folded into the convolutions first
(``quant_pre_process``), activations uint8 with per-tensor scales and zero points from
min/max calibration, weights int8 symmetric per tensor (or, with ``per_channel=True``,
per output channel of every Conv / Gemm / MatMul: one scale per channel, zero point 0),
biases int32 at the product of the input and weight scales. The result runs on ONNX
Runtime and on the Hexagon executor (:mod:`tvm_cocopie.hexagon.executor.qonnx`) alike.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np

from .errors import ModelError
from .models import sample_inputs, save
from .onnx_file import load_model

log = logging.getLogger(__name__)

#: Output formats: ONNX Runtime's QuantFormat member names.
FORMATS = {"qdq": "QDQ", "qoperator": "QOperator"}


def calibration_inputs(model, count: int = 8, seed: int = 0, shapes=None) -> list:
    """``count`` deterministic input dicts for ``model`` (:func:`tvm_cocopie.models.sample_inputs`;
    ``shapes`` for inputs with symbolic dims)."""
    return [sample_inputs(model, seed + i, shapes) for i in range(count)]


def quantize_onnx(model, output, samples=None, *, count: int = 8, seed: int = 0,
                  fmt: str = "qdq", per_channel: bool = False) -> Path:
    """Quantize float ``model`` (path or ``ModelProto``) to ``output`` and return its path.

    ``samples``: the calibration inputs, a list of ``{input name: array}`` (default:
    ``count`` deterministic ones); ``fmt``: ``"qdq"`` or ``"qoperator"``; ``per_channel``:
    weight scales per output channel (ONNX Runtime's ``per_channel=True``; closer to the
    float model where channels' weight ranges differ) instead of one per tensor (the
    default, as before: every consumer of the file takes it).
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: choose one of {sorted(FORMATS)}")
    proto = load_model(model, check=False)
    samples = list(samples) if samples is not None else calibration_inputs(proto, count, seed)
    if not samples:
        raise ModelError("no calibration samples: pass at least one input dict")
    names = {i.name for i in proto.graph.input} - {t.name for t in proto.graph.initializer}
    for s in samples:
        if set(s) != names:
            raise ModelError(f"a calibration sample has inputs {sorted(s)}; the model takes "
                             f"{sorted(names)}")

    class _Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(samples)

        def get_next(self):
            return next(self._it, None)

    proto = _static_inputs(proto, samples[0])
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        float_path, pre_path = Path(tmp) / "float.onnx", Path(tmp) / "pre.onnx"
        save(proto, float_path)
        quant_pre_process(str(float_path), str(pre_path), skip_symbolic_shape=True)
        quantize_static(
            str(pre_path), str(output), _Reader(),
            quant_format=getattr(QuantFormat, FORMATS[fmt]),
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            per_channel=per_channel,
        )
    log.info("quantized %s (%s, %s weights, %d calibration samples) -> %s",
             model if isinstance(model, (str, Path)) else proto.graph.name, fmt,
             "per-channel" if per_channel else "per-tensor", len(samples), output)
    return output


def _static_inputs(proto, sample: dict):
    """``proto`` with every symbolic input dim fixed to the calibration sample's (batch 1,
    the image size): ONNX Runtime's optimizer then folds the shape arithmetic (``Shape`` ->
    ``Slice`` -> ``Reshape`` of a flatten) that the quantized graph would otherwise keep."""
    import onnx

    inits = {t.name for t in proto.graph.initializer}
    if all(d.HasField("dim_value") and d.dim_value > 0
           for i in proto.graph.input if i.name not in inits
           for d in i.type.tensor_type.shape.dim):
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for inp in out.graph.input:
        if inp.name in sample:
            for d, n in zip(inp.type.tensor_type.shape.dim, np.shape(sample[inp.name])):
                d.Clear()
                d.dim_value = int(n)
    del out.graph.value_info[:]
    return out


def image_nhwc(sample: dict) -> np.ndarray:
    """The one NCHW float input of ``sample`` as NHWC (the executor's image layout)."""
    (x,) = sample.values()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).transpose(0, 2, 3, 1))

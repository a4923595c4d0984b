"""A learned latency model: kernel and model speed predicted from scheduled TIR.

:mod:`.features` turns a scheduled PrimFunc into a feature vector, :mod:`.dataset`
keeps measured kernels (per target, with where they came from), :mod:`.model` trains,
saves, checks and loads an XGBoost model per target and predicts kernels and whole
models. Measuring (models, design-space samples) lives with the benchmarks
(:mod:`tvm_cocopie.bench.latency`), above the pipeline; this package sits below it, so
that the fusion stage and transfer-tuning can ask it.
"""

from .dataset import Dataset, Row
from .features import FEATURE_NAMES, FEATURE_VERSION, FeatureError, kernel_features
from .model import LatencyModel, LatencyModelError, ModelPrediction, default_model_path

__all__ = [
    "FEATURE_NAMES",
    "FEATURE_VERSION",
    "Dataset",
    "FeatureError",
    "LatencyModel",
    "LatencyModelError",
    "ModelPrediction",
    "Row",
    "default_model_path",
    "kernel_features",
]

"""The model side of pattern-based sparsity (PatDNN, seed 004 ch. 2): kernel patterns,
connectivity pruning and their detection in constant weights (:mod:`.patterns`, numpy
only), and the same on whole ONNX models with the layerwise representation
(:mod:`.onnx_models`).
"""

from .onnx_models import LayerLR, ModelLR, prunable_convs, prune_model
from .patterns import (
    ALL_PATTERNS,
    PatternLayout,
    detect,
    natural_patterns,
    pattern_set,
    project,
    prune,
    prune_connectivity,
)

__all__ = [
    "ALL_PATTERNS",
    "LayerLR",
    "ModelLR",
    "PatternLayout",
    "detect",
    "natural_patterns",
    "pattern_set",
    "project",
    "prunable_convs",
    "prune",
    "prune_connectivity",
    "prune_model",
]

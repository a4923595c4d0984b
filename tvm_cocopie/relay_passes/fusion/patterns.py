"""TVM's fusion pattern (``op_pattern``) from the mapping type where TVM's analysis gives up.

``FuseOps`` fuses by the ``op_pattern`` attribute the legalization writes on each
PrimFunc (element-wise 0, broadcast 1, injective 2, ..., opaque 8). TVM's analysis
reads a block's indices and calls a function opaque as soon as a load's index holds
anything but the block's own iterators: with symbolic shapes a reshape's flattened
index holds ``H`` and ``W``, a layout transform's and a ``take``'s (nearest
upsampling with a computed index) too. Every such kernel then runs alone: PP-OCR det
with symbolic H and W ran its pixel-shuffle head as four opaque copies (reshape,
transpose, reshape, then the epilogue; 3.5 ms each where the static build's fused
kernel takes 0.2 ms).

:func:`op_patterns_from_mapping` marks injective the opaque PrimFuncs whose mapping
type (:func:`.mapping.classify`, derived from the TIR's index maps, symbols and all)
says they only move or map elements: One-to-One, Reorganize, Shuffle. Reductions,
convolutions and anything :func:`~.mapping.classify` cannot read stay opaque.
"""

from __future__ import annotations

import logging

import tvm
from tvm import tirx

from ...exprs import with_functions
from .mapping import MappingType, classify

log = logging.getLogger(__name__)

#: TVM's ``OpPatternKind`` values used here
INJECTIVE, OPAQUE = 2, 8

#: mapping types whose kernels only move or map elements (each output element read
#: from one input element per operand)
MOVES = (MappingType.ONE_TO_ONE, MappingType.REORGANIZE, MappingType.SHUFFLE)


def pattern_from_mapping(func: tirx.PrimFunc) -> int | None:
    """The ``op_pattern`` to give ``func``: injective if TVM called it opaque and its
    mapping type moves or maps elements, else ``None`` (keep TVM's)."""
    attrs = func.attrs
    if attrs is None or "op_pattern" not in attrs or int(attrs["op_pattern"]) != OPAQUE:
        return None
    if bool(attrs.get("tirx.is_scheduled", False)):
        return None
    try:
        kind = classify(func)
    except Exception as err:  # noqa: BLE001 - a PrimFunc the analysis cannot read stays opaque
        log.debug("no mapping type for an opaque PrimFunc: %s", err)
        return None
    return INJECTIVE if kind in MOVES else None


@tvm.transform.module_pass(opt_level=0, name="OpPatternsFromMapping")
def op_patterns_from_mapping(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: opaque element-moving PrimFuncs of ``mod`` marked injective."""
    updates = {}
    for gv, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            pattern = pattern_from_mapping(func)
            if pattern is not None:
                updates[gv] = func.with_attr("op_pattern", pattern)
    if updates:
        log.debug("%d opaque PrimFuncs marked injective from their mapping type: %s",
                  len(updates), ", ".join(sorted(gv.name_hint for gv in updates)))
    return with_functions(mod, updates)

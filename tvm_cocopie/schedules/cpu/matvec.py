"""Chains of reductions to small results: squeeze-and-excitation blocks, pooled heads.

A squeeze-and-excitation block is a global average pool, a 1x1 conv on the pooled
1x1 map, an activation, a second 1x1 conv, a gate (sigmoid / hard-sigmoid) and the
product of the gate with the pooled tensor; a classifier head is a global pool and a
matmul. DNNFusion (seed 004 §3.4) joins such a chain into one kernel when the
producer's whole result is small (:data:`~tvm_cocopie.relay_passes.fusion.locality.
WHOLE_BUDGET_BYTES`): each reduction is then computed once, at the kernel's root, and
its result stays in L1 for the next one. The register-blocked conv and matmul kernels
tile output pixels and rows; on a 1x1 map or one row there is nothing to tile, and
they do not take a reduction prologue. This rule takes such a kernel:

- it holds a conv or matmul block (the annotated computes of
  :mod:`~tvm_cocopie.topi.cpu.conv2d_nchwc` / :mod:`~tvm_cocopie.topi.cpu.dense_packed`),
  every conv block computes a 1x1 map and every matmul block at most
  :data:`MAX_OUTPUTS` elements (matrix-vector products, not convolutions over a map);
- every reduction block has an innermost output axis that is contiguous in its output
  and in one of its inputs (the channel lanes of the blocked layout, a packed weight's
  columns), so it runs as vector accumulators: the reduction loops move outside that
  axis and it is vectorized (:func:`~.fallback.schedule_reduction`), one FMA per
  vector of outputs and loaded input element;
- element-wise blocks are inlined into element-wise consumers of their own size (a
  gate computed per channel is not recomputed per pixel of the tensor it scales),
  every block then parallel and vectorized as in the generic recipe
  (:func:`~.fallback.schedule_blocks`: the gate's product with the big tensor).

Anything else is left to the next rule. A kernel of this rule with a matvec too slow
to pay is not taken either: DNNFusion's profiler times every such fusion against its
parts before keeping it.
"""

from __future__ import annotations

import logging

from tvm import s_tir

from ...errors import last_line
from ...target import CpuInfo
from ...topi.cpu.conv2d_nchwc import ANNOTATION as CONV_ANNOTATION
from ...topi.cpu.dense_packed import ANNOTATION as MATMUL_ANNOTATION
from ..base import (
    DATA_PAR,
    CpuRule,
    annotated_blocks,
    block_work,
    is_spatial,
    iter_types,
    root_blocks,
    writes_output,
)
from .fallback import contiguous_lane_axis, schedule_blocks

#: a matmul block writing more elements than this is a real matmul (rows): the packed
#: matmul kernel's work, not this rule's
MAX_OUTPUTS = 4096

log = logging.getLogger(__name__)


class Matvec(CpuRule):
    """Kernels of reductions to small results (squeeze-excite, pooled heads) at the
    root, each vectorized along its contiguous output lanes."""

    name = "matvec"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The schedule, or ``None`` when the kernel is not a chain of small reductions."""
        convs = annotated_blocks(sch, CONV_ANNOTATION)
        matmuls = annotated_blocks(sch, MATMUL_ANNOTATION)
        if not convs and not matmuls:
            return None
        for block in convs:
            ann = sch.get(block).annotations[CONV_ANNOTATION]
            if int(ann["oh"]) * int(ann["ow"]) != 1:
                return None  # a map of pixels: the conv kernels' tiles
        for block in matmuls:
            outputs = _outputs(sch, block)
            if outputs is None or outputs > MAX_OUTPUTS:
                return None
        reductions = [b for b in root_blocks(sch) if not is_spatial(sch, b)]
        if len(reductions) < 2:
            return None  # a lone conv / matmul: the register-blocked kernels' case
        for block in reductions:
            if contiguous_lane_axis(sch, block) is None:
                return None
        _inline_same_size(sch)
        sch = schedule_blocks(sch, info)
        return [sch] if tunable else sch


def _inline_same_size(sch: s_tir.Schedule) -> None:
    """Inline each element-wise block into its consumers when they are element-wise
    and of its own size: a gate computed per channel stays a per-channel block, never
    recomputed for every pixel of the tensor it scales."""
    for block in root_blocks(sch):
        if not is_spatial(sch, block) or writes_output(sch, block):
            continue
        consumers = sch.get_consumers(block)
        size = block_work(sch, block)
        if not consumers or size is None or not all(
                is_spatial(sch, c) and block_work(sch, c) == size for c in consumers):
            continue
        try:
            sch.compute_inline(block)
        except Exception as err:  # noqa: BLE001 - kept materialized, scheduled on its own
            log.debug("not inlined: %s", last_line(err))


def _outputs(sch: s_tir.Schedule, block) -> int | None:
    """Elements ``block`` writes: the product of its spatial loop extents (``None``:
    symbolic)."""
    loops = sch.get_loops(block)
    kinds = iter_types(sch, block)
    if len(loops) != len(kinds):
        return None
    spatial = [lp for lp, k in zip(loops, kinds) if k == DATA_PAR]
    if not spatial:
        return 1
    total = 1
    for loop in spatial:
        ext = sch.get(loop).extent
        if not hasattr(ext, "value"):
            return None
        total *= int(ext.value)
    return total if block_work(sch, block) is not None else None

"""Squeeze-and-excitation blocks as one kernel: a global pool and matvecs on its result.

A squeeze-and-excitation block is a global average pool, a 1x1 conv on the pooled
1x1 map, an activation, a second 1x1 conv, a gate (sigmoid / hard-sigmoid) and the
product of the gate with the pooled tensor. DNNFusion (seed 004 §3.4) joins such a
chain into one kernel when the producer's whole result is small
(:data:`~tvm_cocopie.relay_passes.fusion.locality.WHOLE_BUDGET_BYTES`): each reduction
is then computed once, at the kernel's root, and its result stays in L1 for the next
one. The register-blocked conv kernels tile output pixels; on a 1x1 map there is
nothing to tile, and they do not take a reduction prologue. This rule takes a kernel
where:

- every conv block (the annotated computes of :mod:`~tvm_cocopie.topi.cpu.conv2d_nchwc`)
  computes a 1x1 map (a matrix-vector product), and there are at least two reductions;
- every reduction block has an innermost output axis that is contiguous in its output
  and in one of its inputs (the channel lanes of the blocked layout), so it runs as
  vector accumulators kept in registers (:func:`vector_accumulators`): the reduction
  loops move outside that axis and it is vectorized, one FMA per vector of outputs
  and loaded input element, the result written once;
- element-wise blocks are inlined into element-wise consumers of their own size (a
  gate computed per channel is not recomputed per pixel of the tensor it scales),
  every block then parallel and vectorized as in the generic recipe
  (:func:`~.fallback.schedule_blocks`: the gate's product with the big tensor).

A matmul (a classifier head after its global pool) is left to the packed matmul
kernel: with its weights (megabytes) streamed through column panels here, the head of
MobileNetV3-Small fused ran 2.4x slower hot than pool and packed matmul apart, while
the profiler's flushed timing called it even. Anything else is left to the next rule,
and DNNFusion's profiler times every fusion this rule takes against its parts.
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
    const_extent,
    fuse_parallel,
    is_spatial,
    iter_types,
    root_blocks,
    vectorize_inner,
    writes_output,
)
from .fallback import contiguous_lane_axis, schedule_blocks

log = logging.getLogger(__name__)


class Matvec(CpuRule):
    """Squeeze-and-excitation kernels: reductions to small results at the root, each
    vectorized along its contiguous output lanes."""

    name = "matvec"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The schedule, or ``None`` when the kernel is not a chain of a pool and matvecs."""
        convs = annotated_blocks(sch, CONV_ANNOTATION)
        if not convs or annotated_blocks(sch, MATMUL_ANNOTATION):
            return None  # a matmul is the packed matmul kernel's (see the module doc)
        for block in convs:
            ann = sch.get(block).annotations[CONV_ANNOTATION]
            if "oh" not in ann or int(ann["oh"]) * int(ann["ow"]) != 1:
                return None  # a map of pixels: the conv kernels' tiles
        reductions = [b for b in root_blocks(sch) if not is_spatial(sch, b)]
        if len(reductions) < 2:
            return None  # a lone conv: the register-blocked kernels' case
        for block in reductions:
            if contiguous_lane_axis(sch, block) is None:
                return None
        _inline_same_size(sch)
        sch = schedule_blocks(sch, info, vector_accumulators)
        return [sch] if tunable else sch


def vector_accumulators(sch: s_tir.Schedule, block, info: CpuInfo) -> None:
    """A reduction in vector accumulators held in registers: the reduction loops
    inside the outer output loops (parallel when the work is large), the contiguous
    output axis innermost and vectorized, the result written back once per output
    vector (a ``local`` cache, not a load and store of the output per multiply-add)."""
    vec = contiguous_lane_axis(sch, block)
    kinds = iter_types(sch, block)
    loops = sch.get_loops(block)
    vec_loop = sch.get(vec)
    spatial = [lp for lp, k in zip(loops, kinds)
               if k == DATA_PAR and not sch.get(lp).same_as(vec_loop)]
    reduce = [lp for lp, k in zip(loops, kinds) if k != DATA_PAR]
    work = block_work(sch, block)
    write_back = sch.cache_write(block, 0, "local")
    at, chains = _independent_chains(sch, spatial)
    if chains > 1:  # that many accumulators side by side: FMA latency hidden
        spatial[at], inner = sch.split(spatial[at], [None, chains])
        sch.reorder(*spatial, *reduce, inner, vec)
        sch.unroll(inner)
    else:
        sch.reorder(*spatial, *reduce, vec)
    fuse_parallel(sch, spatial, info, work)
    loops = sch.get_loops(block)
    attach = loops[len(loops) - len(reduce) - 2 - (chains > 1)]
    sch.reverse_compute_at(write_back, attach)
    vectorize_inner(sch, sch.get_loops(write_back)[-1], info.f32_lanes)
    vectorize_inner(sch, loops[-1], info.f32_lanes)
    sch.decompose_reduction(block, reduce[0])


#: independent accumulator vectors of a reduction (the FMA latency is 4 cycles, two
#: FMAs issue per cycle on the wider cores: one dependency chain runs at 1/8 of peak)
ACCUMULATORS = 4


def _independent_chains(sch: s_tir.Schedule, spatial: list) -> tuple[int, int]:
    """``(position in spatial, count)``: the innermost of the outer spatial loops that
    iterates, and how many of its output vectors to accumulate side by side (the largest
    divisor of its extent up to :data:`ACCUMULATORS`; 1: no such loop)."""
    for at in range(len(spatial) - 1, -1, -1):
        extent = const_extent(sch, spatial[at]) or 1
        if extent > 1:
            return at, max(d for d in range(1, ACCUMULATORS + 1) if extent % d == 0)
    return 0, 1


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

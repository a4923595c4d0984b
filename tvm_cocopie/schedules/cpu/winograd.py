"""Schedule of the Winograd F(m, 3) convolution (:mod:`tvm_cocopie.topi.cpu.winograd`).

Three parallel passes, each vectorized over a channel chunk (Lavin & Gray 2016, sec. 4):

* input transform ``winograd_V``::

      parallel  tiles x input chunks   (fused)
        xi, nu  (unrolled)             the alpha x alpha transformed values
          ci    (vectorized)           non-zero B^T terms only, constants folded

* batched GEMM ``winograd_M`` (annotated ``cocopie.winograd``), register-tiled like
  the packed matmul: ``r`` vectors of transformed weights times ``tp`` tiles::

      parallel  xi, nu, K / wb          (fused: alpha^2 x K / wb independent panels)
        serial  P' / tp                 <- the accumulators are written back here
          C / ib, ib (unrolled)         one input channel: one broadcast per tile
            r, tp    (unrolled)         r x tp accumulators in vector registers
              ki     (vectorized)       FMA

* output transform ``winograd_Y`` over the exact output, one ``m x m`` tile per
  iteration (``yi, xi`` unrolled, the lanes vectorized), with the conv's consumers
  (bias, batch-norm, ReLU/SiLU/clip, residual add) inlined into it, so the result is
  written once, after the epilogue.
"""

from __future__ import annotations

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.winograd import ANNOTATION
from ..base import (
    MIN_PARALLEL_MACS,
    CpuRule,
    annotated_blocks,
    block_work,
    fuse_parallel,
    inline_consumers,
    inline_prologue,
    parallel_spatial,
    vectorizable,
    vectorize_inner,
)


def _block(sch: s_tir.Schedule, name: str):
    return sch.get_sblock(name)


def schedule_input_transform(sch: s_tir.Schedule, block, info: CpuInfo) -> None:
    """Tiles x chunks parallel, the alpha x alpha outputs unrolled, lanes vectorized."""
    xi, nu, p, cb, ci = sch.get_loops(block)
    sch.reorder(p, cb, xi, nu, ci)
    fuse_parallel(sch, [p, cb], info, block_work(sch, block))
    sch.unroll(xi)
    sch.unroll(nu)
    sch.vectorize(ci)


def schedule_gemm(sch: s_tir.Schedule, anchor, info: CpuInfo, r: int, tp: int, ib: int) -> None:
    """The register-tiled batched GEMM of the module docstring."""
    work = block_work(sch, anchor)
    acc = sch.cache_write(anchor, 0, "local")
    xi, nu, kb, p, ki, rc = sch.get_loops(anchor)
    kbo, kbr = sch.split(kb, [None, r])
    po, pi = sch.split(p, [None, tp])
    rco, rci = sch.split(rc, [None, ib])
    sch.reorder(xi, nu, kbo, po, rco, rci, kbr, pi, ki)
    fuse_parallel(sch, [xi, nu, kbo], info, work, MIN_PARALLEL_MACS)
    sch.reverse_compute_at(acc, po)
    vectorize_inner(sch, sch.get_loops(acc)[-1], info.f32_lanes)
    sch.unroll(rci)
    sch.unroll(kbr)
    sch.unroll(pi)
    sch.vectorize(ki)
    sch.decompose_reduction(anchor, rco)


def schedule_output_transform(sch: s_tir.Schedule, block, info: CpuInfo, m: int) -> None:
    """One ``m x m`` output tile per iteration, its rows/columns unrolled, lanes vectorized."""
    n, kb, y, x, ki = sch.get_loops(block)
    ty, yi = sch.split(y, [None, m])
    tx, xi = sch.split(x, [None, m])
    sch.reorder(n, kb, ty, tx, yi, xi, ki)
    fuse_parallel(sch, [n, kb, ty, tx], info, block_work(sch, block))
    sch.unroll(yi)
    sch.unroll(xi)
    if vectorizable(sch, block):
        sch.vectorize(ki)


def schedule_winograd(sch: s_tir.Schedule, anchor, info: CpuInfo) -> s_tir.Schedule:
    """Schedule the whole Winograd PrimFunc around its GEMM block ``anchor``."""
    ann = sch.get(anchor).annotations[ANNOTATION]
    m, r, tp = int(ann["m"]), int(ann["r"]), int(ann["tp"])
    vblock = _block(sch, "winograd_V")
    yblock = _block(sch, "winograd_Y")
    for block in inline_prologue(sch, vblock):
        parallel_spatial(sch, block, info)
    final = inline_consumers(sch, yblock)
    separate = None
    if final is not None:
        try:
            sch.reverse_compute_inline(final)  # the epilogue in the output transform
        except Exception:  # noqa: BLE001 - a layout change back to NCHW: its own pass
            separate = final
    ib = int(sch.get(vblock).iter_vars[-1].dom.extent)
    schedule_input_transform(sch, _block(sch, "winograd_V"), info)
    schedule_gemm(sch, anchor, info, r, tp, ib)
    schedule_output_transform(sch, _block(sch, "winograd_Y"), info, m)
    if separate is not None:
        parallel_spatial(sch, separate, info)
    return sch


class Winograd(CpuRule):
    """Schedules PrimFuncs holding one ``cocopie.winograd``-annotated GEMM block."""

    name = "winograd"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The Winograd schedule (the same one when ``tunable``: no sampled knobs yet), or
        ``None`` when ``sch`` holds no Winograd conv."""
        anchors = annotated_blocks(sch, ANNOTATION)
        if len(anchors) != 1:
            return None
        sch = schedule_winograd(sch, anchors[0], info)
        return [sch] if tunable else sch

"""Schedule of the pixel-vector GSPC conv (:func:`tvm_cocopie.topi.cpu.gspc.conv2d_gspc_pixels`).

Grouped convs whose segments fill a quarter vector or less (MobileNetV2 G(16)'s 9
channels per group in 16-channel chunks: one lane; :func:`~tvm_cocopie.topi.cpu.gspc.
pixel_vectors`) vectorize along the output row instead::

    parallel  n, groups of To output channels, output rows     data_pad before it, in
      serial  vectors of lanes pixels (xo)                      parallel, NCHW
        rc, ry, rx                  the group's input channels and the window
          oi (unrolled, To)         one broadcast weight each
            xv (vectorized)         a row vector of the padded input (stride 1:
                                    contiguous) FMA into To accumulator vectors
      the accumulators written back per (row, xo)
    parallel  the blocked result (and the fused epilogue), read across the channels

``To`` is the largest divisor of the group's outputs that the accumulator budget holds
(:func:`~tvm_cocopie.topi.cpu.gspc.pixel_channels`): every channel of a register tile
reads the same input vectors, one load per ``To`` FMAs.
"""

from __future__ import annotations

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.conv2d_nchwc import ANNOTATION
from ...topi.cpu.gspc import PIXELS_KIND, pixel_channels
from ...topi.cpu.tiling import vector_registers
from ..base import (
    MIN_PARALLEL_WORK,
    CpuRule,
    annotated_blocks,
    block_work,
    blocks_before,
    fuse_parallel,
    inline_consumers,
    parallel_spatial,
)


def schedule_gspc_pixels(sch: s_tir.Schedule, anchor, info: CpuInfo):
    """The module docstring's nest on ``anchor`` (the conv block); ``sch``."""
    ann = sch.get(anchor).annotations[ANNOTATION]
    lanes, opg = int(ann["lanes"]), int(ann["opg"])
    for block in blocks_before(sch, anchor):
        parallel_spatial(sch, block, info)
    final = inline_consumers(sch, anchor)
    if final is not None:
        parallel_spatial(sch, final, info)
    work = block_work(sch, anchor)
    acc = sch.cache_write(anchor, 0, "local")
    n, o, y, x, rc, ry, rx = sch.get_loops(anchor)
    to = pixel_channels(opg, vector_registers(info) - 4)
    oo, oi = sch.split(o, [None, to])
    xo, xv = sch.split(x, [None, lanes])
    sch.reorder(n, oo, y, xo, rc, ry, rx, oi, xv)
    fuse_parallel(sch, [n, oo, y], info, work, MIN_PARALLEL_WORK)
    sch.reverse_compute_at(acc, xo, preserve_unit_loops=True)
    acc_loops = sch.get_loops(acc)
    sch.vectorize(acc_loops[-1])
    sch.unroll(oi)
    sch.vectorize(xv)
    sch.decompose_reduction(anchor, rc)
    return sch


class GspcPixels(CpuRule):
    """Schedules the pixel-vector GSPC conv (module docstring)."""

    name = "gspc_pixels"

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The nest, or ``None`` for kernels without the pixel-vector conv block."""
        anchors = [b for b in annotated_blocks(sch, ANNOTATION)
                   if str(sch.get(b).annotations[ANNOTATION].get("kind", "")) == PIXELS_KIND]
        if len(anchors) != 1 or len(annotated_blocks(sch, ANNOTATION)) != 1:
            return None
        schedule_gspc_pixels(sch, anchors[0], info)
        return [sch] if tunable else sch

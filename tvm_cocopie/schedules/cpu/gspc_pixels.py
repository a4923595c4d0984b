"""Schedule of the pixel-vector GSPC conv (:func:`tvm_cocopie.topi.cpu.gspc.conv2d_gspc_pixels`).

Grouped convs whose segments fill a quarter vector or less (MobileNetV2 G(16)'s 9
channels per group in 16-channel chunks: one lane; :func:`~tvm_cocopie.topi.cpu.gspc.
pixel_vectors`) vectorize along the output row instead::

    parallel  n, groups, chunks of To of the group's outputs,    data_pad before it, in
              chunks of Yk output rows                            parallel, NCHW
      serial  chunks of Xk vectors of lanes pixels
        rc, ry, rx                  the group's input channels and the window
          yi, xi (unrolled)         Yk x Xk input vectors (stride 1: contiguous), each
            oi (unrolled)           loaded once, FMA with To broadcast weights into
              xv (vectorized)       To x Yk x Xk accumulators
      the accumulators written back per register tile
    parallel  the blocked result (and the fused epilogue), read across the channels

The register tile is :func:`~tvm_cocopie.topi.cpu.tiling.pixel_tile`'s (most FMAs per
load within the accumulator budget). Tunable (``tvm-cocopie tune``, transfer-tuning):
the three tile sizes as ``SamplePerfectTile`` decisions and LLVM's unroll budget of the
reduction nest; the space is tagged ``kind=gspc_pixels`` (the register budget check of
:mod:`tvm_cocopie.transfer_tuning.space`).
"""

from __future__ import annotations

from tvm import s_tir

from ...target import CpuInfo
from ...topi.cpu.conv2d_nchwc import ANNOTATION, PLAN_SIZE
from ...topi.cpu.gspc import PIXELS_KIND
from ...topi.cpu.tiling import pixel_tile, vector_registers
from ..base import (
    MIN_PARALLEL_MACS,
    MIN_PARALLEL_WORK,
    CpuRule,
    annotated_blocks,
    block_work,
    blocks_before,
    const_extent,
    fuse_parallel,
    inline_consumers,
    parallel_spatial,
)
from ..tunable import SPACE_ANNOTATION, sample_unroll_budget, split_tile


def _schedule_pad(sch: s_tir.Schedule, block, info: CpuInfo) -> None:
    """The blocked input moved to padded NCHW in the input's order: a vector of the ``ib``
    channels of one pixel loaded whole (the padding test is the same for all of them),
    stored to its ``ib`` channel planes."""
    ib = int(sch.get(block).reads[0].source.shape[-1])
    n, c, y, p, x = sch.get_loops(block)
    cb, ci = sch.split(c, [None, ib])
    sch.reorder(n, cb, y, p, x, ci)
    sch.vectorize(ci)
    fuse_parallel(sch, [n, cb, y], info, block_work(sch, block), MIN_PARALLEL_WORK)


def schedule_gspc_pixels(sch: s_tir.Schedule, anchor, info: CpuInfo, tunable: bool = False):
    """The module docstring's nest on ``anchor`` (the conv block); ``sch``. ``tunable``:
    the tile and unroll budget sampled (the default tile as the decision)."""
    ann = sch.get(anchor).annotations[ANNOTATION]
    lanes, opg = int(ann["lanes"]), int(ann["opg"])
    for block in blocks_before(sch, anchor):
        if sch.get(block).name_hint == "data_pad":
            _schedule_pad(sch, block, info)
        else:
            parallel_spatial(sch, block, info)
    final = inline_consumers(sch, anchor)
    n, o, y, x, rc, ry, rx = sch.get_loops(anchor)
    rows, cols = const_extent(sch, y), const_extent(sch, x)
    # a symbolic height or width (a model compiled once for every size) planned at
    # PLAN_SIZE: its tiles then carry a predicate for the sizes they do not divide
    to, yk, xk = pixel_tile(opg, rows or PLAN_SIZE, (cols or PLAN_SIZE) // lanes,
                            vector_registers(info))
    # the result stored from the registers when a tile's channels lie in one chunk of
    # the blocked output (every tile's region is then exactly its own)
    ob = int(sch.get(final).writes[0].source.shape[-1]) if final is not None else 0
    # (not over the flattened grid: a tile of grid points is no rectangle of the result)
    fused = bool(ob) and ob % to == 0 and not int(ann.get("flat", 0))
    if final is not None and not fused:
        parallel_spatial(sch, final, info)
    work = block_work(sch, anchor)
    acc = None if fused else sch.cache_write(anchor, 0, "local")
    if tunable:
        sch.annotate(anchor, SPACE_ANNOTATION,
                     f"kind={PIXELS_KIND};opg={opg};ob={ob};fused={int(fused)}")
    g, oc = sch.split(o, [None, opg])
    oo, oi = split_tile(sch, oc, to, opg, tunable)
    yo, yi = split_tile(sch, y, yk, 8, tunable)
    xs, xv = sch.split(x, [None, lanes])
    xo, xi = split_tile(sch, xs, xk, 8, tunable)
    sch.reorder(n, g, oo, yo, xo, rc, ry, rx, yi, xi, oi, xv)
    fuse_parallel(sch, [n, g, oo, yo], info, work, MIN_PARALLEL_MACS)
    if fused:
        depth = len(sch.get_loops(anchor)) - 7  # the loops down to xo
        sch.reverse_compute_at(final, xo, preserve_unit_loops=True)
        sch.set_scope(anchor, 0, "local")
        for loop in sch.get_loops(final)[depth:]:
            if const_extent(sch, loop) is not None:
                sch.unroll(loop)
    else:
        sch.reverse_compute_at(acc, xo, preserve_unit_loops=True)
        row = sch.get_loops(acc)[-1]
        if (const_extent(sch, row) or lanes) > lanes:
            row, vec = sch.split(row, [None, lanes])
            sch.unroll(row)
            row = vec
        sch.vectorize(row)
    for loop in (oi, yi, xi):
        sch.unroll(loop)
    sch.vectorize(xv)
    sch.decompose_reduction(anchor, rc)
    if tunable:
        sample_unroll_budget(sch, rc)
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
        schedule_gspc_pixels(sch, anchors[0], info, tunable)
        return [sch] if tunable else sch

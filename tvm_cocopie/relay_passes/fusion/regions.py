"""``FuseTIR`` with every block's access regions covering what its body touches.

TVM 0.27's ``FuseTIR`` maps each kernel's parameters onto the fused function's buffers.
When one kernel takes the same tensor twice (``concatenate(t, t)``, ``t * t``), its two
parameters become one buffer and the block keeps only one of the two read regions:
``concat`` then claims to read ``t[c - 4]`` where its body also reads ``t[c]``. Schedules
trust those regions (``compute_at`` computes a producer over what its consumer claims to
read), so a fused producer was computed for half the channels and the rest of the output
was whatever memory held. :func:`fuse_tir` runs ``FuseTIR`` and then rewrites each
block's reads and writes where the regions TVM detects from the body are not covered by
the annotated ones; blocks whose regions cover their body are left as they were.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax, s_tir, tirx
from tvm.s_tir import analysis as s_analysis

from ...exprs import with_functions

log = logging.getLogger(__name__)


def _covers(analyzer, outer, inner) -> bool:
    """Whether the region ``outer`` provably contains ``inner`` (same buffer)."""
    if len(outer.region) != len(inner.region):
        return False
    for o, i in zip(outer.region, inner.region, strict=True):
        if not (analyzer.can_prove(i.min >= o.min)
                and analyzer.can_prove(i.min + i.extent <= o.min + o.extent)):
            return False
    return True


def _repaired(annotated, detected, analyzer) -> list | None:
    """``detected`` where some detected region is not covered by an annotated region of
    its buffer; ``None`` when the annotation covers the body."""
    for d in detected:
        same = [a for a in annotated if a.source.same_as(d.source)]
        if not any(_covers(analyzer, a, d) for a in same):
            return list(detected)
    return None


class _Repair:
    """Rebuilds the loop/block tree of a PrimFunc with repaired block regions."""

    def __init__(self, buffers):
        self.buffers = {b: b for b in buffers}
        self.analyzer = tvm.sym.Analyzer()
        self.changed: list[str] = []

    def stmt(self, s):
        if isinstance(s, tirx.SeqStmt):
            seq = [self.stmt(x) for x in s.seq]
            return s if all(a.same_as(b) for a, b in zip(seq, s.seq, strict=True)) \
                else tirx.SeqStmt(seq, s.span)
        if isinstance(s, tirx.For):
            body = self.stmt(s.body)
            return s if body.same_as(s.body) else tirx.For(
                s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding, s.annotations,
                s.step, s.span)
        if isinstance(s, s_tir.SBlockRealize):
            block = self.block(s.block)
            return s if block.same_as(s.block) else s_tir.SBlockRealize(
                s.iter_values, s.predicate, block, s.span)
        return s  # no blocks below other statements in an unscheduled fused function

    def block(self, b):
        self.buffers.update({a: a for a in b.alloc_buffers})
        body = self.stmt(b.body)
        reads, writes = b.reads, b.writes
        if b.iter_vars:  # the root block's regions are not used by schedules
            detected_reads, detected_writes = s_analysis.get_sblock_read_write_region(
                b, self.buffers)
            new_reads = _repaired(b.reads, detected_reads, self.analyzer)
            new_writes = _repaired(b.writes, detected_writes, self.analyzer)
            if new_reads is not None or new_writes is not None:
                self.changed.append(b.name_hint)
                reads = new_reads if new_reads is not None else reads
                writes = new_writes if new_writes is not None else writes
        if body.same_as(b.body) and reads is b.reads and writes is b.writes:
            return b
        return s_tir.SBlock(b.iter_vars, reads, writes, b.name_hint, body, b.init,
                            b.alloc_buffers, b.match_buffers, b.annotations, b.span)


def repair_access_regions(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with each block's reads and writes covering what its body accesses."""
    # scalar parameters (symbolic dims) are Vars too, but not buffers: TVM refuses them
    repair = _Repair([p for p in func.params if isinstance(p.ty, tirx.BufferType)])
    body = repair.stmt(func.body)
    if not repair.changed:
        return func
    log.debug("access regions repaired in blocks %s", ", ".join(repair.changed))
    return func.with_body(body)


@tvm.transform.module_pass(opt_level=0, name="FuseTIRWithRegions")
def fuse_tir(mod: tvm.IRModule, _ctx=None) -> tvm.IRModule:
    """TVM's ``FuseTIR``, then :func:`repair_access_regions` on the functions it made."""
    kernels = {gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    fused = relax.transform.FuseTIR()(mod)
    updates = {}
    for gv, func in fused.functions_items():
        if gv.name_hint not in kernels and isinstance(func, tirx.PrimFunc):
            repaired = repair_access_regions(func)
            if not repaired.same_as(func):
                updates[gv] = repaired
    return with_functions(fused, updates)

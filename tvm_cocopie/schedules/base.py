"""Helpers shared by the schedule rules: block inspection, safe application, epilogues.

Nothing here decides a tile: the rules do. These helpers answer questions about a
PrimFunc (which blocks, which are spatial, extents), apply primitives without
leaving a half-transformed schedule behind, and implement the one epilogue recipe
every register-tiled kernel uses: inline the element-wise consumers into the block
that writes the function's result, give the anchor a local accumulator, and compute
that result tile by tile under the anchor's tile loop.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight
from tvm.sym import Analyzer

from ..errors import last_line
from ..target import CpuInfo, cpu_info

log = logging.getLogger(__name__)

DATA_PAR = tirx.IterVar.DataPar
REDUCE = tirx.IterVar.CommReduce


class CpuRule(dlight.ScheduleRule):
    """A dlight rule for LLVM CPU targets that never raises.

    Subclasses implement :meth:`schedule` on a fresh ``Schedule``; an exception there
    is logged (warning) and the rule answers ``None``, so the next rule (in the end
    the fallback) gets the function and the build never breaks because of a rule.
    """

    name = "cpu-rule"
    #: whether the rule also takes kernels marked ``tirx.is_scheduled`` (a design space
    #: over a generated kernel's own knobs); the others leave them as written
    takes_scheduled = False
    #: whether the rule is the generic schedule every function can take (the fallback),
    #: not a fast kernel of its own
    generic = False

    def is_target_available(self, target: tvm.target.Target) -> bool:
        """Whether the rule serves ``target`` (LLVM CPU targets here)."""
        return target.kind.name == "llvm"

    def apply(self, func, target, tunable):
        """dlight's entry point: a schedule of ``func`` for ``target`` (a list of them when
        ``tunable``), or ``None`` when the rule does not apply or fails (logged)."""
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        if (not self.takes_scheduled and func.attrs is not None
                and bool(func.attrs.get("tirx.is_scheduled", False))):
            # a kernel written already scheduled (recurrent loops, pattern convs): as
            # dlight's ApplyDefaultSchedule, nothing to do (a loop kernel has no blocks)
            return None
        sch = s_tir.Schedule(func)
        try:
            result = self.schedule(sch, cpu_info(target), tunable)
        except Exception as err:  # noqa: BLE001 - a rule must not break the build: fall back
            log.warning("%s could not schedule %s: %s", self.name, _func_name(func),
                        last_line(err))
            return None
        return result

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The schedule (or list of them when ``tunable``), or ``None``: not for this rule."""
        raise NotImplementedError


def _func_name(func) -> str:
    """A readable name: the global symbol, else the blocks' names."""
    attrs = func.attrs
    if attrs is not None and "global_symbol" in attrs:
        return str(attrs["global_symbol"])
    try:
        names = [str(sch_b) for sch_b in _block_names(func)]
    except Exception:  # noqa: BLE001 - naming is best effort
        names = []
    return "PrimFunc(" + ",".join(names[:4]) + ")"


def _block_names(func) -> list[str]:
    sch = s_tir.Schedule(func)
    return [sch.get(b).name_hint for b in root_blocks(sch)]


def uses_var(expr, var) -> bool:
    """Whether the TIR expression ``expr`` reads the variable ``var``."""
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def root_blocks(sch: s_tir.Schedule) -> list:
    """The blocks directly under the root block, in program order."""
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def annotated_blocks(sch: s_tir.Schedule, key: str) -> list:
    """The root-level blocks whose annotations hold ``key``."""
    return [b for b in root_blocks(sch) if key in sch.get(b).annotations]


def iter_types(sch: s_tir.Schedule, block) -> list[int]:
    """The iteration kinds of ``block``'s iterators (data-parallel, reduction, ...)."""
    return [int(iv.iter_type) for iv in sch.get(block).iter_vars]


def is_spatial(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` has only data-parallel iterators."""
    return all(t == DATA_PAR for t in iter_types(sch, block))


def const_extent(sch: s_tir.Schedule, loop) -> int | None:
    """The loop's extent when it is a constant, else ``None``."""
    ext = sch.get(loop).extent
    return int(ext.value) if isinstance(ext, tirx.IntImm) else None


def writes_output(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` writes a buffer of the function's signature."""
    params = list(sch.mod["main"].params)
    return any(w.source.same_as(p) for w in sch.get(block).writes for p in params)


def try_apply(sch: s_tir.Schedule, fn: Callable[[s_tir.Schedule], object]):
    """Run ``fn(sch)`` on a copy; return the copy if it worked, else ``None``.

    Schedule primitives check before they mutate, but a recipe of several
    primitives can fail halfway; working on a copy never leaves a half-done
    schedule behind.
    """
    trial = sch.copy()
    try:
        fn(trial)
    except Exception as err:  # noqa: BLE001 - any primitive may refuse
        log.debug("schedule step skipped: %s", last_line(err))
        return None
    return trial


#: Intrinsics TVM's LLVM backend cannot emit on vectors (checked on TVM 0.27: the
#: build fails with "unknown intrinsic"); loops computing them stay scalar.
_NO_VECTOR_INTRINSICS = re.compile(r"T\.(sinh|cosh|clz|popcount)\(")


def _unwrap_casts(expr):
    while isinstance(expr, tirx.Cast):
        expr = expr.value
    return expr


def vector_safe_store(stmt) -> bool:
    """Whether a vectorized loop may hold ``stmt`` (a block's body or init) for its dtype.

    TVM 0.27 keeps bfloat16 in ``uint16`` storage and float8/6/4 in ``uint8`` storage
    before LLVM, and its storage legalization misses two vector forms (checked: a
    scalar loop builds, the vectorized one does not): a store of a *constant* into a
    bfloat16 buffer (the zero-init of a bfloat16 reduction, a fill) stays a
    ``bfloat16x8`` value for a ``uint16`` buffer ("dtype mismatch on BufferStore"),
    and any store into a float8/6/4 buffer converts lane-wise through a scalar
    ``if_then_else`` ("can only take scalar condition"). Other stores are safe.
    """
    if not isinstance(stmt, tirx.BufferStore):
        return True
    dtype = str(stmt.buffer.dtype)
    if dtype.startswith(("float8", "float6", "float4")):
        return False
    if dtype.startswith("bfloat"):
        return not isinstance(_unwrap_casts(stmt.value), (tirx.FloatImm, tirx.IntImm))
    return True


def vectorizable(sch: s_tir.Schedule, block) -> bool:
    """Whether the body of ``block`` can be vectorized by TVM's LLVM backend: no intrinsic
    it cannot emit on vectors, no store its narrow-float legalization misses
    (:func:`vector_safe_store`)."""
    stmt = sch.get(block)
    if _NO_VECTOR_INTRINSICS.search(stmt.script()):
        return False
    return all(vector_safe_store(s) for s in (stmt.body, stmt.init) if s is not None)


def vectorize_inner(sch: s_tir.Schedule, loop, lanes: int, max_full: int = 64) -> bool:
    """Vectorize ``loop`` (whole if short, else an inner split of ``lanes``)."""
    ext = const_extent(sch, loop)
    if ext is None or ext < 2:
        return False
    if ext <= max_full:
        sch.vectorize(loop)
        return True
    if ext % lanes == 0:
        _, inner = sch.split(loop, [None, lanes])
        sch.vectorize(inner)
        return True
    return False


def _position(sch: s_tir.Schedule, blocks: list, block) -> int:
    target = sch.get(block)  # the block itself: two blocks may share a name
    return [sch.get(b).same_as(target) for b in blocks].index(True)


def blocks_before(sch: s_tir.Schedule, block) -> list:
    """The root blocks before ``block``, in order."""
    blocks = root_blocks(sch)
    return blocks[: _position(sch, blocks, block)]


def blocks_after(sch: s_tir.Schedule, block) -> list:
    """The root blocks after ``block``, in order."""
    blocks = root_blocks(sch)
    return blocks[_position(sch, blocks, block) + 1:]


def inline_consumers(sch: s_tir.Schedule, anchor) -> object | None:
    """Inline the blocks after ``anchor`` into the last one; return that last block.

    ``None`` if the anchor has no consumers (it writes the result itself).
    """
    after = blocks_after(sch, anchor)
    if not after:
        return None
    for block in after[:-1]:
        sch.compute_inline(block)
    return after[-1]


def reads_plainly(sch: s_tir.Schedule, block, producer) -> bool:
    """Whether ``block`` reads ``producer``'s result one element at a time, each index a
    block iterator or a constant. Under a tile loop TVM bounds such a consumer exactly;
    a permuting read (a reshape + transpose epilogue indexing by ``(i * 120 + j) % 360``)
    came out of ``reverse_compute_at`` with most of its iterations dropped (14200 of 14400
    outputs never written), so such consumers stay outside the tile."""
    written = sch.get(producer).writes[0].source
    for region in sch.get(block).reads:
        if not region.source.same_as(written):
            continue
        for rng in region.region:
            if not isinstance(rng.min, (tirx.Var, tirx.IntImm)):
                return False
            extent = rng.extent
            if not (isinstance(extent, tirx.IntImm) and int(extent) == 1):
                return False
    return True


def spills_over(sch: s_tir.Schedule, block, producer) -> bool:
    """Whether ``block`` has more iterations than ``producer`` writes elements: some of
    its outputs come from elsewhere (a concat of a conv's result with another tensor).
    Under the producer's tile loop TVM computes only the iterations that read the tile,
    so the others were never written (a fused conv + concat left the other half of the
    concat unwritten); such a consumer stays outside the tile."""
    iterations = 1
    for iv in sch.get(block).iter_vars:
        iterations *= iv.dom.extent
    produced = 1
    for dim in sch.get(producer).writes[0].source.shape:
        produced *= dim
    # symbolic extents (SOD²: one kernel for every size) are compared as expressions
    if Analyzer().can_prove(iterations <= produced):
        return False
    return not _holds_on_samples(iterations <= produced)


#: values a symbolic extent takes in :func:`_holds_on_samples`: small sizes, where tile
#: padding and floor divisions differ most, and large ones
SAMPLE_EXTENTS = (*range(1, 65), 97, 127, 128, 255, 256, 320, 511, 640, 1000, 1023, 1024, 4096)


def _holds_on_samples(cond) -> bool:
    """Whether ``cond`` over symbolic extents holds for every extent in
    :data:`SAMPLE_EXTENTS` (for up to two variables, every pair of them). The analyzer
    cannot relate floor divisions of one extent by different divisors (a conv's output
    width ``(W - 1) // 4 + 1`` against its tile-padded ``(W - 1) // 20 * 5 + 5``),
    which the epilogue of every conv over a symbolic width has to; a consumer that
    really spills over (a concat doubling the channels) fails at every sample."""
    free = list(tirx.analysis.undefined_vars(cond))
    if not free or len(free) > 2:
        return False
    grid = [(v,) for v in SAMPLE_EXTENTS] if len(free) == 1 else [
        (a, b) for a in SAMPLE_EXTENTS[::4] for b in SAMPLE_EXTENTS[::4]]
    for values in grid:
        analyzer = Analyzer()
        for var, value in zip(free, values):
            analyzer.bind(var, value)
        result = analyzer.simplify(cond)
        if not (isinstance(result, tirx.IntImm) and int(result)):
            return False
    return True


def inline_prologue(sch: s_tir.Schedule, anchor) -> list:
    """Inline producers of producers of ``anchor``; return the blocks left before it.

    The blocks that feed the anchor directly (a padded input, a packed layout) stay
    materialized: inlining them into the anchor would put their index arithmetic and
    conditions in the innermost loop.
    """
    anchor_name = sch.get(anchor).name_hint
    kept = []
    for block in blocks_before(sch, anchor):
        consumers = [sch.get(c).name_hint for c in sch.get_consumers(block)]
        if anchor_name in consumers or not is_spatial(sch, block):
            kept.append(block)
            continue
        try:
            sch.compute_inline(block)  # checks before it mutates
        except Exception:  # noqa: BLE001 - an output, or an opaque access: keep it
            kept.append(block)
    return kept


def lanes_inside_reduction(sch: s_tir.Schedule, block):
    """Move ``block``'s innermost spatial loop (the lanes of a blocked layout) inside its
    trailing reduction loops (a pooling window, a global mean over the map) and vectorize
    it: one vector accumulator per lane group instead of a scalar chain per lane. The
    block's loops must be one per iterator, spatial ones first (a root block, or one
    computed at a loop with ``preserve_unit_loops``). Returns the first reduction loop
    (where the reduction's init goes)."""
    loops = sch.get_loops(block)
    window = sum(k != DATA_PAR for k in iter_types(sch, block))
    lane = loops[-window - 1]
    sch.reorder(*loops[-window:], lane)
    sch.vectorize(lane)
    return loops[-window]


def loops_above(sch: s_tir.Schedule, block, loop) -> list:
    """The loops of ``block``'s nest outside ``loop`` (one of them), outermost first."""
    loops = sch.get_loops(block)
    return loops[:[sch.get(lp).same_as(sch.get(loop)) for lp in loops].index(True)]


def parallel_spatial(sch: s_tir.Schedule, block, info: CpuInfo) -> None:
    """Parallelize the outer loops of a spatial block and vectorize its innermost loop."""
    lanes = info.f32_lanes
    loops = sch.get_loops(block)
    if not loops:
        return
    work = block_work(sch, block)
    if len(loops) == 1:
        ext = const_extent(sch, loops[0])
        if ext is not None and ext >= 4 * lanes and ext % lanes == 0 and vectorizable(sch, block):
            outer, inner = sch.split(loops[0], [None, lanes])
            sch.vectorize(inner)
            fuse_parallel(sch, [outer], info, work)
        else:
            fuse_parallel(sch, loops, info, work)
        return
    if vectorizable(sch, block):
        vectorize_inner(sch, loops[-1], lanes)
    fuse_parallel(sch, loops[:-1], info, work)


#: Below this many innermost iterations a loop nest runs on one thread. A fork-join of
#: TVM's thread pool costs microseconds on an idle machine but a scheduler time slice
#: (milliseconds) when a worker has been preempted, and the pool waits for every
#: worker. Measured on a loaded 2-core machine, MobileNetV2 at 112x112 ran 3x faster
#: fully serial than with every kernel parallel. The thresholds keep kernels of less
#: than ~40 us of single-core work serial: element-wise iterations...
MIN_PARALLEL_WORK = 1 << 17
#: ... and multiply-adds of the register-tiled conv / matmul kernels.
MIN_PARALLEL_MACS = 1 << 20


def block_work(sch: s_tir.Schedule, block) -> int | None:
    """Iterations of the loops around ``block`` (``None``: a symbolic extent)."""
    total = 1
    for loop in sch.get_loops(block):
        ext = const_extent(sch, loop)
        if ext is None:
            return None
        total *= ext
    return total


def fuse_parallel(sch: s_tir.Schedule, loops: list, info: CpuInfo, work: int | None = None,
                  min_work: int = MIN_PARALLEL_WORK):
    """Fuse the leading ``loops`` until they give enough parallel iterations; parallelize.

    Returns the fused loop (``None`` for no loops). Enough is 8 iterations per core,
    so that a static split over the thread pool stays balanced. ``work`` (innermost
    iterations of the whole nest) below ``min_work`` keeps it serial.
    """
    return fuse_parallel_upto(sch, loops, info, work, min_work)[0]


def fuse_parallel_upto(sch: s_tir.Schedule, loops: list, info: CpuInfo,
                       work: int | None = None, min_work: int = MIN_PARALLEL_WORK):
    """:func:`fuse_parallel`, returning ``(the fused loop, the innermost loop of loops
    still standing)``: the fused one when every loop joined, else ``loops[-1]``.

    For a caller that fuses the loops down to its attach point only when the ones above
    give too few iterations: a symbolic extent stops the fusion early (rows of a map of
    run-time size count as enough), and the consumer must then still attach at the tile
    (the accumulators of a register tile; attached at the fused rows they became a
    buffer of a whole row: PP-OCR det's 1x1 convs at H/16 ran 2x their static time).
    """
    if not loops:
        return None, None
    want = max(1, info.num_cores) * 8
    chosen = []
    total = 1
    symbolic = False
    for i, loop in enumerate(loops):
        ext = const_extent(sch, loop)
        if ext is None:
            # a symbolic extent never joins after another one: it would divide the fused
            # index of the loops before it at run time, and TVM then cannot compact the
            # register tile's accumulators (PP-OCR det's 3x3 convs at H/4 x W/4 kept them
            # in memory: 2x their static time) nor keep the divisions out of inner loops
            if symbolic:
                break
            symbolic = True
            chosen.append(loop)
            if i == 0:  # outermost (a batch): maybe 1, so the loops after it join too
                continue
            break  # rows of a map of run-time size: enough
        chosen.append(loop)
        total *= ext
        if total >= want:
            break
    fused = sch.fuse(*chosen) if len(chosen) > 1 else chosen[0]
    if info.num_cores > 1 and (work is None or work >= min_work):
        sch.parallel(fused)
    return fused, fused if len(chosen) == len(loops) else loops[-1]

"""Ansor's transform steps replayed as TIR schedule instructions (thesis §6.3; Ansor §4).

An Ansor state is a list of *stages*, one per operation of the compute DAG in
topological order (placeholders included), each with a list of iterators. Steps
name a stage and iterators by position, and three of them insert stages (cache
write, cache read, rfactor), renumbering the later ones. :class:`StageState`
models that list on top of a ``tvm.s_tir.Schedule``: every compute stage holds its
block and, per Ansor iterator, the TIR loop standing for it, so that every step
finds its loops where Ansor's state had them.

The one step without a literal TIR counterpart is Ansor's usual CPU conv schedule
(its multi-level tiling with fusion): split the conv (SP), make the elementwise
consumer *follow* the conv's splits (FSP, FFSP), reorder both alike (RE), then attach
the conv at one of the consumer's loops (CA). TIR's ``compute_at`` would regenerate the
conv's loops and drop its tiling. The equivalent TIR is the other way round, as
MetaSchedule's own tiling does it: ``reverse_compute_at`` the consumer under the
conv's loop at the same depth. So the follow-splits and reorders of a consumer are
kept *virtual* (only their extents are tracked), and at the CA the extents of the
consumer's outer loops are checked against the conv's before the consumer is moved;
the consumer's loops are then the conv's outer loops plus the inner ones TIR
regenerates, one per axis, where Ansor had them. Later steps on either stage (fuse
and parallelize the shared outer loops, vectorize the innermost) land on those.

Other steps: SP → ``sample_perfect_tile`` + ``split`` (its decision is the tiling, so
it adapts to new shapes on transfer, §6.2.1), RE → ``reorder``, FU → ``fuse``, AN →
``parallel`` / ``vectorize`` / ``unroll``, PR → the auto-unroll pragma, CI →
``compute_inline``, CR → nothing (a TIR block starts at the root), CA of an untiled
producer → ``compute_at``, CHW → ``cache_write``, CHR → ``cache_read``, RF →
``rfactor``. GPU thread bindings are not replayed (x86 logs only). A step that does
not fit raises :class:`Untranslatable`; the caller skips the record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tvm import te

from ..schedules.base import const_extent
from .kernel_class import blocks_of

#: Ansor's ``IteratorAnnotation`` codes that have a CPU meaning
ANNOTATIONS = {1: "unroll", 2: "vectorize", 3: "parallel"}


class Untranslatable(Exception):
    """A step that has no TIR counterpart on this state."""


def dag_ops(outputs) -> list:
    """The operations of a TE DAG in Ansor's stage order: depth-first post-order from the
    outputs, inputs in argument order (``ComputeDAG``'s topological sort)."""
    order, seen = [], set()

    def visit(op):
        if op in seen:
            return
        seen.add(op)
        for t in getattr(op, "input_tensors", []):
            visit(t.op)
        order.append(op)

    for out in outputs:
        visit(out.op)
    return order


@dataclass
class Stage:
    """One Ansor stage: its TIR block (None for a placeholder) and its iterators.

    ``loops[i]`` is the TIR loop of Ansor iterator ``i``; all None while the stage's
    splits are virtual (see the module docstring). ``extents[i]`` is its extent.
    """

    name: str
    block: object | None
    loops: list = field(default_factory=list)
    extents: list = field(default_factory=list)
    virtual: bool = False
    tiled: bool = False  # split by SP: attaching it at a consumer reverses the attachment


class StageState:
    """Ansor's stage list over a TIR schedule of the DAG's PrimFunc."""

    def __init__(self, sch, ops):
        self.sch = sch
        blocks = _blocks(sch)
        self.stages: list[Stage] = []
        computes = iter(blocks)
        for op in ops:
            if isinstance(op, te.PlaceholderOp):
                self.stages.append(Stage(op.name, None))
                continue
            name = next(computes, None)
            if name is None or not name.startswith(op.name):
                raise Untranslatable(f"stage {op.name} has no block (blocks: {blocks})")
            block = sch.get_sblock(name)
            stage = Stage(name, block)
            self._reload(stage)
            self.stages.append(stage)

    # -- helpers ---------------------------------------------------------------------
    def _reload(self, stage: Stage, keep: int | None = None) -> None:
        loops = list(self.sch.get_loops(stage.block))
        if keep is not None:
            loops = loops[-keep:] if keep else []
        stage.loops = loops
        stage.extents = [_extent(self.sch, lp) for lp in loops]

    def stage(self, sid: int) -> Stage:
        """Stage ``sid`` (:class:`Untranslatable` if there is none)."""
        if not 0 <= sid < len(self.stages):
            raise Untranslatable(f"stage {sid} does not exist ({len(self.stages)} stages)")
        st = self.stages[sid]
        if st.block is None:
            raise Untranslatable(f"stage {sid} ({st.name}) is a placeholder")
        return st

    def iters(self, st: Stage, ids) -> list:
        """The TIR loops of Ansor iterators ``ids`` of stage ``st`` (:class:`Untranslatable` for
        one it lacks)."""
        for i in ids:
            if not 0 <= i < len(st.extents):
                raise Untranslatable(f"{st.name} has no iterator {i} ({len(st.extents)} iterators)")
        return [st.loops[i] for i in ids]

    def real(self, st: Stage, what: str) -> None:
        """Raise :class:`Untranslatable` if ``st``'s loops are still virtual (``what`` names the
        step)."""
        if st.virtual:
            raise Untranslatable(f"{what} on {st.name}, whose loops follow a split not yet attached")

    def _holders(self, loops: list) -> list[tuple[Stage, int]]:
        """Every (stage, iterator) standing for one of ``loops`` (stages attached to one
        another share their outer loops, each through its own loop handle)."""
        nodes = [self.sch.get(lp) for lp in loops]
        found = []
        for st in self.stages:
            for j, lp in enumerate(st.loops):
                if lp is None:
                    continue
                try:
                    node = self.sch.get(lp)
                except Exception:  # noqa: BLE001, S112 - a handle of a loop gone earlier
                    continue
                if any(node.same_as(n) for n in nodes):
                    found.append((st, j))
        return found

    # -- steps ---------------------------------------------------------------------
    def split(self, sid: int, it: int, lengths: list[int], inner_to_outer: bool = True,
              perfect: bool = True) -> None:
        """Ansor's SP/FSP: split iterator ``it`` of stage ``sid`` by ``lengths`` (sampled perfect
        tiles when ``perfect``)."""
        st = self.stage(sid)
        self.iters(st, [it])
        extent = st.extents[it]
        if any(v is None or int(v) <= 0 for v in lengths):
            raise Untranslatable(f"split lengths {lengths} are not filled in")
        lengths = [int(v) for v in lengths]
        inner = math.prod(lengths)
        rest = -(-extent // inner)  # ceil: Ansor's outer extent
        factors = [rest] + lengths if inner_to_outer else lengths + [rest]
        if st.virtual or st.loops[it] is None:
            st.virtual = True
            st.loops[it:it + 1] = [None] * len(factors)
            st.extents[it:it + 1] = factors
            return
        loop = st.loops[it]
        if perfect and extent % inner == 0:
            factors = self.sch.sample_perfect_tile(
                loop, len(factors), max_innermost_factor=max(64, factors[-1]),
                decision=[extent // inner] + lengths if inner_to_outer else lengths + [extent // inner])
        else:
            factors = [None] + lengths if inner_to_outer else lengths + [None]
        new = list(self.sch.split(loop, factors))
        st.loops[it:it + 1] = new
        st.extents[it:it + 1] = [_extent(self.sch, lp) for lp in new]
        st.tiled = True

    def follow(self, sid: int, it: int, lengths: list[int]) -> None:
        """FSP/FFSP on a consumer: virtual until the producer is attached to it."""
        st = self.stage(sid)
        self.iters(st, [it])
        if not st.virtual:
            st.virtual = True
            st.loops = [None] * len(st.loops)
        self.split(sid, it, lengths)

    def reorder(self, sid: int, order: list[int]) -> None:
        """Ansor's RE: reorder stage ``sid``'s iterators to ``order``."""
        st = self.stage(sid)
        if sorted(order) != list(range(len(st.extents))):
            raise Untranslatable(f"reorder {order} is not a permutation of {st.name}'s "
                                 f"{len(st.extents)} iterators")
        st.extents = [st.extents[i] for i in order]
        st.loops = [st.loops[i] for i in order]
        if not st.virtual:
            self.sch.reorder(*st.loops)

    def fuse(self, sid: int, ids: list[int]) -> None:
        """Ansor's FU: fuse stage ``sid``'s iterators ``ids`` into one."""
        st = self.stage(sid)
        self.real(st, "fuse")
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise Untranslatable(f"fuse of non-consecutive iterators {ids}")
        old = self.iters(st, ids)
        shared = [(o, j) for o, j in self._holders(old) if o is not st]
        fused = self.sch.fuse(*old)
        for other, j in shared:  # Ansor keeps their iterators; all are the fused loop now
            other.loops[j] = fused
        st.loops[ids[0]:ids[-1] + 1] = [fused]
        st.extents[ids[0]:ids[-1] + 1] = [math.prod(st.extents[i] for i in ids)]

    def annotate(self, sid: int, it: int, code: int) -> None:
        """Ansor's AN: parallelize, vectorize or unroll iterator ``it`` of stage ``sid``
        (annotation ``code``)."""
        how = ANNOTATIONS.get(int(code))
        if how is None:
            return  # no annotation, or a GPU binding
        st = self.stage(sid)
        self.real(st, "annotation")
        getattr(self.sch, how)(self.iters(st, [it])[0])

    def pragma(self, sid: int, it: int, pragma: str) -> None:
        """Ansor's PR: the auto-unroll pragma on iterator ``it`` of stage ``sid``."""
        st = self.stage(sid)
        self.real(st, "pragma")
        if pragma.startswith("auto_unroll_max_step$"):
            loop = self.iters(st, [it])[0]
            self.sch.annotate(loop, "pragma_auto_unroll_max_step", int(pragma.split("$")[1]))
            self.sch.annotate(loop, "pragma_unroll_explicit", 1)

    def compute_at(self, sid: int, target_sid: int, it: int) -> None:
        """Ansor's CA: stage ``sid`` computed at iterator ``it`` of ``target_sid`` (a reverse
        compute-at for a tiled conv's consumer)."""
        st, tgt = self.stage(sid), self.stage(target_sid)
        self.iters(tgt, [it])
        if tgt.virtual:
            # the tiling-with-fusion pattern: move the consumer under the producer's loop
            if not st.tiled or st.virtual or len(st.loops) <= it:
                raise Untranslatable(f"{tgt.name} follows a split, but {st.name} is not tiled")
            if st.extents[:it + 1] != tgt.extents[:it + 1]:
                raise Untranslatable(f"{tgt.name}'s outer loops {tgt.extents[:it + 1]} are not "
                                     f"{st.name}'s {st.extents[:it + 1]}")
            ansor_iters = len(tgt.extents)
            self.sch.reverse_compute_at(tgt.block, st.loops[it], preserve_unit_loops=True)
            self._reload(tgt)
            if len(tgt.loops) != ansor_iters:
                raise Untranslatable(f"{tgt.name} has {len(tgt.loops) - it - 1} inner loops "
                                     f"after attaching, Ansor {ansor_iters - it - 1}")
            tgt.virtual = False
            return
        self.real(st, "compute_at")
        if st.tiled:
            raise Untranslatable(f"compute_at of the tiled {st.name} would drop its tiling")
        n_iters = len(st.extents)
        self.sch.compute_at(st.block, tgt.loops[it], preserve_unit_loops=True)
        self._reload(st, keep=n_iters)

    def compute_inline(self, sid: int) -> None:
        """Ansor's CI: inline stage ``sid`` into its consumers."""
        st = self.stage(sid)
        try:
            self.sch.compute_inline(st.block)
        except Exception:  # noqa: BLE001 - an output stage: inline it into its producer
            self.sch.reverse_compute_inline(st.block)
        st.loops, st.extents = [], []

    def cache_write(self, sid: int) -> None:
        """CHW: stage ``sid`` computes into the cache; a new stage after it copies out."""
        st = self.stage(sid)
        self.real(st, "cache_write")
        copy = self.sch.cache_write(st.block, 0, "global")
        out = Stage(st.name + ".global", copy)
        self._reload(out)
        self.stages.insert(sid + 1, out)

    def cache_read(self, sid: int, readers: list[int]) -> None:
        """CHR: a new stage after ``sid`` copies its output for the first reader."""
        src = self.stages[sid] if 0 <= sid < len(self.stages) else None
        if src is None or not readers:
            raise Untranslatable(f"cache_read of stage {sid} with readers {readers}")
        reader = self.stage(readers[0])
        buffers = [r.buffer.name for r in self.sch.get(reader.block).reads]
        want = src.name.split(".")[0]
        index = next((i for i, b in enumerate(buffers) if b == want or b == src.name), None)
        if index is None:
            raise Untranslatable(f"{reader.name} does not read {src.name} ({buffers})")
        block = self.sch.cache_read(reader.block, index, "global")
        new = Stage(src.name + ".global", block)
        self._reload(new)
        self.stages.insert(sid + 1, new)

    def rfactor(self, sid: int, it: int, factor_iter: int) -> None:
        """RF: a new stage before ``sid`` computes the partial reductions."""
        st = self.stage(sid)
        self.real(st, "rfactor")
        rf = self.sch.rfactor(self.iters(st, [it])[0], int(factor_iter))
        new = Stage(st.name + ".rf", rf)
        self._reload(new)
        self._reload(st)
        self.stages.insert(sid, new)


def replay(sch, ops, steps: list) -> StageState:
    """Apply Ansor ``steps`` (a record's transform steps) to ``sch``; returns the state."""
    state = StageState(sch, ops)
    for step in steps:
        kind = step[0]
        if kind == "SP":  # stage, iter, extent, lengths, inner_to_outer
            state.split(step[1], step[2], list(step[4]), bool(step[5]))
        elif kind == "FSP":  # stage, iter, src_step, n_split
            state.follow(step[1], step[2], follow_lengths(steps, step[3], step[4]))
        elif kind == "FFSP":  # stage, iter, src_steps, level, factor_or_nparts
            state.follow(step[1], step[2], fused_follow_lengths(steps, step[3], step[4], step[5]))
        elif kind == "RE":
            state.reorder(step[1], list(step[2]))
        elif kind == "FU":
            state.fuse(step[1], list(step[2]))
        elif kind == "AN":
            state.annotate(step[1], step[2], step[3])
        elif kind == "PR":
            state.pragma(step[1], step[2], str(step[3]))
        elif kind == "CA":
            state.compute_at(step[1], step[2], step[3])
        elif kind == "CI":
            state.compute_inline(step[1])
        elif kind == "CR":
            continue  # a TIR block not attached anywhere is at the root already
        elif kind == "CHW":
            state.cache_write(step[1])
        elif kind == "CHR":
            state.cache_read(step[1], list(step[3]))
        elif kind == "RF":
            state.rfactor(step[1], step[2], step[3])
        else:
            raise Untranslatable(f"unknown step {kind!r}")
    for st in state.stages:
        if st.virtual:
            raise Untranslatable(f"{st.name} follows a split but was never attached")
    return state


def follow_lengths(steps: list, src: int, n_split: int) -> list[int]:
    """FSP's lengths (Ansor's ``FollowSplitStep::ExtractSplitLengths``): the first
    ``n_split - 1`` lengths of split step ``src``, then the product of the rest."""
    lengths = _split_lengths(steps, src)
    n = int(n_split)
    if n < 1 or n > len(lengths):
        raise Untranslatable(f"follow split of step {src} into {n} is out of range")
    return lengths[:n - 1] + [math.prod(lengths[n - 1:])]


def fused_follow_lengths(steps: list, srcs: list, level: int, factor_or_nparts) -> list[int]:
    """FFSP's one length: the product of level ``level`` of split steps ``srcs``, as the
    inner factor (``factor_or_nparts``) or the number of outer parts."""
    length = math.prod(_split_lengths(steps, s)[int(level)] for s in srcs)
    if not factor_or_nparts:
        raise Untranslatable("fused follow split by number of parts")
    return [length]


def _split_lengths(steps: list, src: int) -> list[int]:
    if not 0 <= int(src) < len(steps) or steps[int(src)][0] != "SP":
        raise Untranslatable(f"follow split refers to step {src}, which is not a split")
    lengths = steps[int(src)][4]
    if any(v is None for v in lengths):
        raise Untranslatable(f"split step {src} has unfilled lengths")
    return [int(v) for v in lengths]


def _blocks(sch) -> list[str]:
    return [b.name for b in blocks_of(sch.mod["main"])]


def _extent(sch, loop) -> int:
    ext = const_extent(sch, loop)
    if ext is None:
        raise Untranslatable(f"loop extent {sch.get(loop).extent} is not a constant")
    return ext

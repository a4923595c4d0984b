"""The assembly pass: re-pack LLVM's Hexagon packets with SDA, check, reassemble.

:class:`Repack` is the ``asm_pass`` of :func:`tvm_cocopie.emulation.hexagon.build`:
it reads the kernels' assembly (:mod:`.asmfile`), re-packs every basic block it can
read whole with :func:`.sda.pack`, trying the weights ``w`` and penalties ``p`` on a
small grid (the thesis sets them "empirically", §4.5) and keeping per block the
packing the cycle model (:mod:`.cycles`) estimates fastest -- a loop body by its
steady-state cycles per iteration, any other block by its cycles from a cold start.
LLVM's own packing is one of the candidates, so no block gets slower by the model's
estimate. ``llvm-mc`` then checks every packet (slots, resources, register rules);
a block it rejects goes back to LLVM's packing.

Blocks left alone: those with instructions we do not read (calls, frames, traps,
cache operations), new-value (``.new``) or ``.tmp`` operands, or a branch anywhere but
the last packet. Mode ``"llvm"`` re-packs nothing: the same text through the same
assembler, the baseline every comparison uses.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...emulation.hexagon import assemble
from ...errors import ToolchainError
from . import asmfile, isa, liveness, rename, sda
from .cycles import CycleModel

log = logging.getLogger(__name__)

VERSION = 1
MODES = ("llvm", *sda.MODES)
#: The (w, p) grid tried per block.
WEIGHTS = (0.2, 0.5, 0.8)
PENALTIES = (0.5, 2.0)
#: Weights of the stall term tried (``None``: no instruction may stall its consumers).
STALL_WEIGHTS = (0.5, 2.0, None)


@dataclass
class BlockReport:
    index: int
    instructions: int
    loop: bool
    llvm_packets: int
    llvm_cycles: float
    packets: int
    cycles: float
    choice: str  # "llvm", "w=..,p=..", "skipped: why", "reverted"


@dataclass
class Repack:
    """Re-pack the hot blocks of Hexagon assembly (see the module doc).

    ``mode``: ``"sda"``, ``"soft_to_hard"``, ``"soft_to_none"`` or ``"llvm"``;
    ``keep_llvm``: keep LLVM's packing of a block when the model finds it faster;
    ``q``: the weights of the stall term of the score tried (the same for every mode);
    ``rename``: also try each block with its short-lived values renamed into registers
    dead throughout it (:mod:`.rename`, :mod:`.liveness`); ``refine``: cost
    evaluations of :func:`.sda.refine` local search per block and start (0: none);
    ``functions``: re-pack only the kernels whose symbol contains one of these names
    (empty: all) -- SDA switched per kernel."""

    mode: str = "sda"
    weights: tuple = WEIGHTS
    penalties: tuple = PENALTIES
    q: tuple = STALL_WEIGHTS
    keep_llvm: bool = True
    rename: bool = True
    refine: int = 3000
    functions: tuple = ()
    reports: list = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown repack mode {self.mode!r}; use one of {MODES}")

    @property
    def key(self) -> str:
        """What changes the output, for build caches: the options and this package's code."""
        return (f"repack{VERSION}:{_code_hash()}:{self.mode}:{self.weights}:{self.penalties}:"
                f"{self.q}:{self.keep_llvm}:{self.rename}:{self.refine}:{self.functions}")

    def __call__(self, text: str, workdir=None) -> str:
        items = asmfile.parse(text)
        blocks = [b for b in items if isinstance(b, asmfile.Block)]
        self.reports = []
        chosen = {}
        if self.mode != "llvm":
            nodes = liveness.analyze(items) if self.rename else {}
            for block in blocks:
                if self.functions and not any(f in block.function for f in self.functions):
                    continue
                node = nodes.get(block.index)
                free = liveness.free_registers(node) if node is not None else frozenset()
                packets, report = self.repack_block(block, free)
                self.reports.append(report)
                if packets is not None:
                    chosen[block.index] = packets
        out, spans = asmfile.emit(items, lambda b: chosen.get(b.index, b.packets))
        if workdir is None or not chosen:
            return out
        for _ in range(8):  # llvm-mc is the judge of every packet
            try:
                assemble(out, Path(workdir) / "repack_check.o")
                return out
            except ToolchainError as err:
                bad = _blocks_at(str(err), spans) & set(chosen)
                if not bad:  # no line to blame (llvm-mc crashed): try the blocks one by one
                    bad = {k for k in chosen if not self._assembles(items, k, chosen[k], workdir)}
                if not bad:
                    raise
                for index in bad:
                    log.info("llvm-mc rejected re-packed block %d; keeping LLVM's packets", index)
                    del chosen[index]
                    for r in self.reports:
                        if r.index == index:
                            r.choice, r.packets, r.cycles = "reverted", r.llvm_packets, r.llvm_cycles
                out, spans = asmfile.emit(items, lambda b: chosen.get(b.index, b.packets))
        raise ToolchainError("llvm-mc kept rejecting the re-packed assembly")

    @staticmethod
    def _assembles(items, index, packets, workdir) -> bool:
        text, _ = asmfile.emit(items, lambda b: packets if b.index == index else b.packets)
        try:
            assemble(text, Path(workdir) / "repack_one.o")
            return True
        except ToolchainError:
            return False

    def repack_block(self, block: asmfile.Block, free=frozenset()):
        """``(new packets or None, BlockReport)`` for one block; ``free``: registers
        dead throughout it that renaming may use."""
        model = CycleModel()
        parsed = [isa.parse(t) for t in block.instructions]
        loop = bool(block.packets and block.packets[-1][1])
        original = block.parsed()

        def cost(packets):
            return model.steady_state(packets) if loop else float(model.run(packets).cycles)

        base = cost(original)
        report = BlockReport(block.index, len(parsed), loop, len(original), base,
                             len(original), base, "llvm")
        why = _unfit(parsed, block)
        if why:
            report.choice = f"skipped: {why}"
            return None, report
        order = linearize(block.packets)
        sizes = [sum(isa.parse(t).kind != "nop" for t in texts) for texts, _ in block.packets]
        if order is None:
            report.choice = "skipped: a packet whose reads and writes cannot be ordered"
            return None, report
        end = block.packets[-1][1]
        original, k = [], 0
        for size in sizes:
            original.append(list(range(k, k + size)))
            k += size
        together = frozenset((a, b) for g in original for a in g for b in g)
        if not sda.verify([i for _, i in order], original, together):
            # the sequential order must mean what LLVM's packets mean: checked, not trusted
            report.choice = "skipped: linear order does not reproduce the packets"
            return None, report
        variants = [(order, 0)]
        if free:
            renamed = rename.rename(order, free)
            if renamed[1] and sda.same_meaning([i for _, i in order],
                                               [i for _, i in renamed[0]], free):
                variants.append(renamed)
        best = None
        for order, n_renamed in variants:
            best = self._search(order, loop, end, best, n_renamed, original, together)
        if best is None:
            report.choice = "skipped: no packing found"
            return None, report
        c, packets, label = best
        if self.keep_llvm and c >= base:
            return None, report
        report.packets, report.cycles, report.choice = len(packets), c, label
        return packets, report

    def _search(self, order, loop, end, best, n_renamed, original, together):
        """The best of ``best`` and the packings of ``order``: Alg. 1 over the (w, p, q)
        grid, then :func:`.sda.refine` from the best of those and from LLVM's own
        packing (``original``, index groups of ``order``)."""
        body = [i for _, i in order]
        texts = [t for t, _ in order]
        model = CycleModel()

        def cost(groups):
            packets = [isa.Packet(isa.with_forms([body[k] for k in sorted(g)])) for g in groups]
            return model.steady_state(packets) if loop else float(model.run(packets).cycles)

        def emit(groups):  # texts in program order inside each packet: fix_forms reads it
            packets = asmfile.fix_forms([([texts[k] for k in sorted(g)], "") for g in groups])
            packets[-1] = (packets[-1][0], end)
            return packets

        found = []
        grid = [(w, p, q) for w in self.weights
                for p in (self.penalties if self.mode == "sda" else (0.0,)) for q in self.q]
        carried = sda.loop_carried(body) if loop else None
        for w, p, q in grid:
            try:
                groups = sda.pack(body, self.mode, w=w, p=p, q=q, carried=carried)
            except RuntimeError:  # a circle of in-packet dependences: leave the block
                continue
            found.append((cost(groups), groups, f"w={w},p={p},q={q}"))
        try:
            groups = sda.list_schedule(body, self.mode, carried)
            found.append((cost(groups), groups, "list"))
        except RuntimeError:
            pass
        starts = sorted(found, key=lambda f: f[0])[:2]
        if self.refine:
            starts.append((cost(original), original, "llvm"))
        for c, groups, label in list(starts):
            if self.refine:
                groups, c = sda.refine(body, groups, cost, self.mode, self.refine)
                label += "+refine"
            found.append((c, groups, label))
        for c, groups, label in found:
            if (best is None or c < best[0]) and sda.verify(body, groups, together):
                best = (c, emit(groups), f"{label},renamed={n_renamed}")
        return best

    def summary(self) -> dict:
        """Blocks seen, re-packed, kept, skipped and reverted; model cycles of the loops."""
        r = self.reports
        return {
            "blocks": len(r),
            "repacked": sum(x.choice.startswith("w=") for x in r),
            "renamed": sum("renamed=0" not in x.choice for x in r if x.choice.startswith("w=")),
            "kept_llvm": sum(x.choice == "llvm" for x in r),
            "skipped": sum(x.choice.startswith("skipped") for x in r),
            "reverted": sum(x.choice == "reverted" for x in r),
            "loop_cycles_llvm": round(sum(x.llvm_cycles for x in r if x.loop), 1),
            "loop_cycles": round(sum(x.cycles for x in r if x.loop), 1),
        }


def _old_reads(ins) -> frozenset:
    """What ``ins`` reads from before its packet (a new-value store's data is not)."""
    if ins.flags.get("new_store"):
        return ins.uses - ins.flags.get("data", frozenset())
    return ins.uses


@functools.cache
def _code_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def linearize(packets):
    """The block's instructions (``(text, Instr)``, ``nop`` dropped) in a sequential
    order with the packets' meaning, or None.

    Inside a packet every instruction reads the values from before the packet, so a
    reader goes before the writer of what it reads, except that the readers of a
    ``.cur`` load see the loaded value and go after it, a load goes before a store of
    its packet, and a branch goes last. A packet where that order has a circle (a
    swap) gives None."""
    out = []
    for texts, _ in packets:
        items = [(t, isa.parse(t)) for t in texts]
        items = [(t, i) for t, i in items if i.kind != "nop"]
        n = len(items)
        before = {k: set() for k in range(n)}  # k must come after every index in before[k]
        for a in range(n):
            for b in range(n):
                if a == b:
                    continue
                ia, ib = items[a][1], items[b][1]
                if ia.cur and ia.defs & ib.uses:
                    before[b].add(a)  # reads the .cur value: after the load
                elif ib.flags.get("new_store") and ia.defs & ib.flags["data"]:
                    before[b].add(a)  # a new-value store: after its producer
                elif _old_reads(ia) & ib.defs and not ib.cur:
                    before[b].add(a)  # a reads the old value: before the writer b
        for b in range(n):  # a branch ends the block: everything else goes before it
            if items[b][1].kind == "branch":
                before[b] |= set(range(n)) - {b}
        for a in range(n):  # LLVM packs a load with a store only when they cannot alias;
            for b in range(n):  # the load first, unless a register says otherwise
                if items[a][1].kind in ("load", "vload") and items[b][1].writes_memory \
                        and b not in before[a] and a != b:
                    before[b].add(a)
        done: list = []
        while len(done) < n:
            ready = [k for k in range(n) if k not in done and before[k] <= set(done)]
            if not ready:
                return None
            done.append(ready[0])
        out.extend(items[k] for k in done)
    return out


def _unfit(parsed, block) -> str:
    if len(parsed) < 2:
        return "single instruction"
    if any(";" in t for t in block.instructions):
        return "compound instruction line"
    for ins in parsed:
        if ins.kind == "opaque":
            return f"unread instruction {ins.text!r}"
        if ins.new:
            return "new-value operand"
        if ins.tmp:
            return ".tmp load"
    last = set(block.packets[-1][0])
    if any(i.kind == "branch" and i.text not in last for i in parsed):
        return "branch before the last packet"
    return ""


_ERR_LINE = re.compile(r":(\d+):\d+: error")


def _blocks_at(message: str, spans: dict) -> set:
    """Blocks whose lines an ``llvm-mc`` error message points at."""
    lines = {int(m.group(1)) for m in _ERR_LINE.finditer(message)}
    return {index for index, (a, b) in spans.items() for n in lines if a <= n <= b}

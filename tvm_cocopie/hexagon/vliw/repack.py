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
from . import asmfile, isa, sda
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
    ``q``: the weights of the stall term of the score tried (the same for every mode)."""

    mode: str = "sda"
    weights: tuple = WEIGHTS
    penalties: tuple = PENALTIES
    q: tuple = STALL_WEIGHTS
    keep_llvm: bool = True
    reports: list = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown repack mode {self.mode!r}; use one of {MODES}")

    @property
    def key(self) -> str:
        """What changes the output, for build caches: the options and this package's code."""
        return (f"repack{VERSION}:{_code_hash()}:{self.mode}:{self.weights}:{self.penalties}:"
                f"{self.q}:{self.keep_llvm}")

    def __call__(self, text: str, workdir=None) -> str:
        items = asmfile.parse(text)
        blocks = [b for b in items if isinstance(b, asmfile.Block)]
        self.reports = []
        chosen = {}
        if self.mode != "llvm":
            for block in blocks:
                packets, report = self.repack_block(block)
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

    def repack_block(self, block: asmfile.Block):
        """``(new packets or None, BlockReport)`` for one block."""
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
        if order is None:
            report.choice = "skipped: a packet whose reads and writes cannot be ordered"
            return None, report
        body = [i for _, i in order]
        texts = [t for t, _ in order]
        end = block.packets[-1][1]
        best = None
        grid = [(w, p, q) for w in self.weights
                for p in (self.penalties if self.mode == "sda" else (0.0,)) for q in self.q]
        carried = sda.loop_carried(body) if loop else None
        for w, p, q in grid:
            try:
                groups = sda.pack(body, self.mode, w=w, p=p, q=q, carried=carried)
            except RuntimeError:  # a circle of in-packet dependences: leave the block
                continue
            packets = asmfile.fix_cur([([texts[k] for k in g], "") for g in groups])
            packets[-1] = (packets[-1][0], end)
            c = cost([isa.parse_packet(t, e) for t, e in packets])
            if best is None or c < best[0]:
                best = (c, packets, f"w={w},p={p},q={q}")
        if best is None:
            report.choice = "skipped: no packing found"
            return None, report
        c, packets, label = best
        if self.keep_llvm and c >= base:
            return None, report
        report.packets, report.cycles, report.choice = len(packets), c, label
        return packets, report

    def summary(self) -> dict:
        """Blocks seen, re-packed, kept, skipped and reverted; model cycles of the loops."""
        r = self.reports
        return {
            "blocks": len(r),
            "repacked": sum(x.choice.startswith("w=") for x in r),
            "kept_llvm": sum(x.choice == "llvm" for x in r),
            "skipped": sum(x.choice.startswith("skipped") for x in r),
            "reverted": sum(x.choice == "reverted" for x in r),
            "loop_cycles_llvm": round(sum(x.llvm_cycles for x in r if x.loop), 1),
            "loop_cycles": round(sum(x.cycles for x in r if x.loop), 1),
        }


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
    ``.cur`` load see the loaded value and go after it. A packet where that order has
    a circle (a swap), or with both a load and a store (their order inside the packet
    is not ours to choose), gives None."""
    out = []
    for texts, _ in packets:
        items = [(t, isa.parse(t)) for t in texts]
        items = [(t, i) for t, i in items if i.kind != "nop"]
        kinds = {i.kind for _, i in items}
        if kinds & {"load", "vload"} and kinds & {"store", "vstore"}:
            return None
        n = len(items)
        before = {k: set() for k in range(n)}  # k must come after every index in before[k]
        for a in range(n):
            for b in range(n):
                if a == b:
                    continue
                ia, ib = items[a][1], items[b][1]
                if ia.cur and ia.defs & ib.uses:
                    before[b].add(a)  # reads the .cur value: after the load
                elif ia.uses & ib.defs and not ib.cur:
                    before[b].add(a)  # a reads the old value: before the writer b
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
    for k, ins in enumerate(parsed):
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

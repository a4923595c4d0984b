"""The assembly pass: re-pack LLVM's Hexagon packets with SDA, check, reassemble.

:class:`Repack` is the ``asm_pass`` of :func:`tvm_cocopie.emulation.hexagon.build`:
it reads the kernels' assembly (:mod:`.asmfile`), and for every basic block it can
read whole:

1. puts the block's instructions in a sequential order that means what LLVM's
   packets mean (:func:`linearize`; checked with :func:`.sda.verify` against LLVM's
   packets, not trusted);
2. optionally renames short-lived values into registers dead throughout the block
   (:mod:`.rename`, :mod:`.liveness`; checked with :func:`.sda.same_meaning`);
3. packs it with Alg. 1 (:func:`.sda.pack`) over a small grid of ``w``, ``p`` and the
   stall weight ``q`` (the thesis sets them "empirically", §4.5) -- for SDA the grid
   of ``p`` includes its two extremes, ``p = 0`` (soft to none) and ``p = inf`` (soft
   to hard) -- and with a latency-aware list schedule (:func:`.sda.list_schedule`);
4. improves the two best packings of each mode of the grid and LLVM's own by local
   search (:func:`.sda.refine`);
5. keeps the packing the cycle model (:mod:`.cycles`) estimates fastest -- a loop
   body (a hardware loop's, or a block whose last branch jumps back to its own label)
   by its steady-state cycles per iteration, any other block from a cold start --
   among those :func:`.sda.verify` accepts; LLVM's packing stays unless beaten.

``llvm-mc`` then checks every packet (slots, resources, register rules); a block it
rejects goes back to LLVM's packing. Blocks left alone: those with instructions we do
not read (calls, frames, traps, cache operations), ``.new`` predicates or compound
compare-jumps, ``.tmp`` loads, or a branch anywhere but the last packet. Mode
``"llvm"`` re-packs nothing: the same text through the same assembler, the baseline
every comparison uses.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
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
WEIGHTS = (0.2, 0.8)
PENALTIES = (0.5, 2.0)
#: Weights of the stall term tried (``None``: no instruction may stall its consumers).
STALL_WEIGHTS = (2.0, None)


@dataclass
class BlockReport:
    """What the pass did with one block (and the model's cycles before and after)."""

    index: int
    instructions: int
    loop: bool
    llvm_packets: int
    llvm_cycles: float
    packets: int
    cycles: float
    choice: str  # "llvm", "w=..,p=..", "skipped: why", "reverted"
    function: str = ""


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
            labels = _entry_labels(items)
            for block in blocks:
                if self.functions and not any(f in block.function for f in self.functions):
                    continue
                node = nodes.get(block.index)
                free = liveness.free_registers(node) if node is not None else frozenset()
                packets, report = self.repack_block(block, free, labels.get(block.index))
                self.reports.append(report)
                if packets is not None:
                    chosen[block.index] = packets
        out, spans = asmfile.emit(items, lambda b: chosen.get(b.index, b.packets))
        if workdir is None or not chosen:
            return out
        while True:  # llvm-mc is the judge of every packet; each round drops >= 1 block
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

    @staticmethod
    def _assembles(items, index, packets, workdir) -> bool:
        text, _ = asmfile.emit(items, lambda b: packets if b.index == index else b.packets)
        try:
            assemble(text, Path(workdir) / "repack_one.o")
            return True
        except ToolchainError:
            return False

    def repack_block(self, block: asmfile.Block, free=frozenset(), label: str | None = None):
        """``(new packets or None, BlockReport)`` for one block; ``free``: registers
        dead throughout it that renaming may use; ``label``: the block's own label, if
        it has one (a block whose last branch jumps to it is a loop body too)."""
        packets_in = fuse_compare_jumps(block.packets)
        parsed = [isa.parse(t) for texts, _ in packets_in for t in texts]
        loop = bool(block.packets and block.packets[-1][1]) or _jumps_back(packets_in, label)
        original = block.parsed()
        base = _block_cost(CycleModel(), original, loop)
        report = BlockReport(block.index, len(parsed), loop, len(original), base,
                             len(original), base, "llvm", block.function)
        why = _unfit(parsed, packets_in)
        if why:
            report.choice = f"skipped: {why}"
            return None, report
        order = linearize(packets_in)
        sizes = [sum(isa.parse(t).kind != "nop" for t in texts) for texts, _ in packets_in]
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
            return _block_cost(model, packets, loop)

        def emit(groups):  # texts in program order inside each packet: fix_forms reads it
            packets = asmfile.fix_forms([([texts[k] for k in sorted(g)], "") for g in groups])
            packets[-1] = (packets[-1][0], end)
            return packets

        found = []
        carried = sda.loop_carried(body) if loop else None
        # SDA prices soft dependences (p); its grid also holds the two extremes, p = 0
        # (soft to none) and p = infinity (soft to hard), so the model picks among them
        if self.mode == "sda":
            variants = [("sda", p) for p in self.penalties]
            variants += [("soft_to_none", 0.0), ("soft_to_hard", math.inf)]
        else:
            variants = [(self.mode, 0.0)]
        graphs = {sub: sda.idg(body, sub) for sub, _ in variants}  # one IDG per mode
        for sub, p in variants:
            for w in self.weights:
                for q in self.q:
                    try:
                        groups = sda.pack(body, sub, w=w, p=0.0 if math.isinf(p) else p,
                                          q=q, carried=carried, edges=graphs[sub])
                    except RuntimeError:  # a circle of in-packet dependences
                        continue
                    found.append((cost(groups), groups, f"w={w},p={p},q={q}", sub))
            try:
                groups = sda.list_schedule(body, sub, carried, edges=graphs[sub])
                found.append((cost(groups), groups, f"list,p={p}", sub))
            except RuntimeError:
                pass
        # the two best of each mode of the grid (SDA's holds soft to none and soft to
        # hard: refined from their own starts, it finds what those modes find)
        starts = []
        for sub in dict.fromkeys(sub for sub, _ in variants):
            starts += sorted((f for f in found if f[3] == sub), key=lambda f: f[0])[:2]
        if self.refine:
            starts.append((cost(original), original, "llvm", self.mode))
        for c, groups, label, sub in list(starts):
            if self.refine:
                groups, c = sda.refine(body, groups, cost, sub, self.refine,
                                       edges=graphs.get(sub))
                label += "+refine"
            found.append((c, groups, label, sub))
        for c, groups, label, _ in found:
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
    ``.cur`` load see the loaded value and go after it, and a branch goes last. A load
    and a store of one packet keep no order: LLVM packs them together only when they
    cannot alias (and :func:`.sda.verify` lets such a pair share a packet again). A
    packet where that order has a circle (a swap) gives None."""
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
        done: list = []
        while len(done) < n:
            ready = [k for k in range(n) if k not in done and before[k] <= set(done)]
            if not ready:
                return None
            done.append(ready[0])
        out.extend(items[k] for k in done)
    return out


_LABEL_LINE = re.compile(r"^\s*([\w.$]+):")
_JUMP_TARGET = re.compile(r"jump(?::n?t)?\s+([\w.$]+)\s*$")


def _entry_labels(items) -> dict:
    """Block index -> the label line right before the block (``.LBB3_3``), if any."""
    out, label = {}, None
    for item in items:
        if isinstance(item, asmfile.Block):
            if label is not None:
                out[item.index] = label
            label = None
        elif (m := _LABEL_LINE.match(item)) and not m.group(1).startswith(".Ltmp"):
            label = m.group(1)
    return out


def _jumps_back(packets, label: str | None) -> bool:
    """Whether the block's last packet branches to ``label``, its own entry: a loop
    closed by a compare and jump (a counted loop LLVM did not make a hardware loop), whose
    body the packer must price per iteration like an ``endloop`` one."""
    if not label or not packets:
        return False
    return any((m := _JUMP_TARGET.search(t)) and m.group(1) == label for t in packets[-1][0])


def _block_cost(model: CycleModel, packets, loop: bool) -> float:
    """A block's estimated cycles: a loop body's per iteration once the pipeline is set
    up, any other block's from a cold start."""
    return model.steady_state(packets) if loop else float(model.run(packets).cycles)


def fuse_compare_jumps(packets) -> list:
    """Packets with each ``pX = cmp...`` and the ``if (pX.new) jump`` of its packet
    joined into one text (one branch for the packer: the two must share a packet)."""
    out = []
    for texts, end in packets:
        texts = list(texts)
        for t in list(texts):
            m = re.match(r"\s*if\s*\(\s*!?(p[0-3])\.new\s*\)\s*jump", t)
            if not m:
                continue
            producers = [c for c in texts if c is not t and ";" not in c
                         and re.match(rf"\s*{m.group(1)}\s*=\s*", c)]
            if len(producers) == 1:
                texts.remove(producers[0])
                texts[texts.index(t)] = f"{producers[0]}; {t}"
        out.append((texts, end))
    return out


def _unfit(parsed, packets) -> str:
    if len(parsed) < 2:
        return "single instruction"
    for ins in parsed:
        if ins.kind == "opaque":
            return f"unread instruction {ins.text!r}"
        if ins.new:
            return "new-value operand"
        if ins.tmp:
            return ".tmp load"
    last = set(packets[-1][0])
    if any(i.kind == "branch" and i.text not in last for i in parsed):
        return "branch before the last packet"
    return ""


_ERR_LINE = re.compile(r":(\d+):\d+: error")


def _blocks_at(message: str, spans: dict) -> set:
    """Blocks whose lines an ``llvm-mc`` error message points at."""
    lines = {int(m.group(1)) for m in _ERR_LINE.finditer(message)}
    return {index for index, (a, b) in spans.items() for n in lines if a <= n <= b}

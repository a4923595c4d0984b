"""SDA: soft-dependency-aware VLIW packing of a basic block (seed 004, §4.5, Alg. 1).

The instruction dependence graph (IDG) of a block has two kinds of edges
(seed 004, §4.5 "Hard/Soft Dependencies"):

- **hard**: the consumer must sit in a later packet -- a true (RAW) register
  dependence through the register file, an output (WAW) dependence, memory order
  between a store and another access, and the instructions before a branch;
- **soft**: the two may share a packet, correctly, at a cost or none -- an HVX
  vector load and its HVX consumer (the load becomes ``.cur``, one cycle more, Fig.
  4.4 (a)), and an anti (WAR) dependence (a Hexagon packet reads every operand before
  it writes; no cost).

Packing runs bottom-up (Alg. 1): seed a packet with the last unpacked instruction
of the critical path (the free instruction deepest from the block's entry), then
fill it, while the slots and HVX units allow (:func:`.isa.fits`), with the free
instruction of best score

    ``score = (order + pred) * w - |hi_lat - lat| * (1 - w) - p * soft(i, packet)
    - q * stall(i)``

``order`` the instruction's depth from the entry, ``pred`` its number of
predecessors, ``hi_lat`` the highest latency already in the packet, ``soft`` the
cost of the soft dependences ``i`` would have inside the packet and ``stall`` the
cycles its hard consumers would wait if it went here. An instruction is *free* when
its consumers are packed already, or sit in the current packet behind soft edges.
Modes (§4.5.3): ``"sda"``; ``"soft_to_hard"`` (soft edges as hard ones: nothing
dependent shares a packet); ``"soft_to_none"`` (soft edges cost nothing, ``p = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import isa

MODES = ("sda", "soft_to_hard", "soft_to_none")


@dataclass
class Edge:
    src: int
    dst: int
    hard: bool
    latency: int  # packets the consumer should trail the producer by (hard RAW)
    cost: int  # cycles if a soft edge's ends share a packet
    order: bool = False  # only "not after the branch": no dependence to harden


def build_idg(instrs) -> list:
    """The IDG of a block's instructions (program order) as a list of :class:`Edge`."""
    edges = []
    n = len(instrs)
    branch_at = [k for k, ins in enumerate(instrs) if ins.kind == "branch"]
    for j in range(n):
        b = instrs[j]
        for i in range(j):
            a = instrs[i]
            raw = a.defs & b.uses
            war = a.uses & b.defs
            waw = a.defs & b.defs
            if raw:
                soft = a.kind == "vload" and not a.tmp and b.kind == "hvx" \
                    and all(r.startswith("v") for r in raw) and not waw
                if soft:
                    edges.append(Edge(i, j, False, 0, isa.CUR_STALL))
                else:
                    edges.append(Edge(i, j, True, isa.LATENCY[a.latency_class], 0))
                continue
            if waw:
                edges.append(Edge(i, j, True, 1, 0))
                continue
            if a.is_memory and b.is_memory and (a.writes_memory or b.writes_memory):
                edges.append(Edge(i, j, True, 1, 0))
                continue
            if war:
                # a load sharing a packet with an earlier reader would have to stay
                # plain, while a later reader in the packet may need it .cur: keep apart
                edges.append(Edge(i, j, b.kind == "vload", 1 if b.kind == "vload" else 0, 0))
        if j in branch_at:
            for i in range(j):
                if not any(e.src == i and e.dst == j for e in edges):
                    edges.append(Edge(i, j, False, 0, 0, order=True))
    return edges


def loop_carried(instrs) -> dict:
    """For a loop body: instruction index -> latency of a value it defines that the
    next iteration reads before redefining it (its consumer is one packet after the
    body's end at the earliest)."""
    exposed = set()
    defined = set()
    for ins in instrs:
        exposed |= ins.uses - defined
        defined |= ins.defs
    out = {}
    seen = set()
    for k in range(len(instrs) - 1, -1, -1):
        ins = instrs[k]
        carried = (ins.defs - seen) & exposed
        if carried:
            out[k] = isa.LATENCY[ins.latency_class]
        seen |= ins.defs
    return out


def pack(instrs, mode: str = "sda", w: float = 0.5, p: float = 1.0, q: float | None = 1.0,
         carried: dict | None = None) -> list:
    """Pack ``instrs`` (:class:`.isa.Instr`, program order) into packets (lists of
    indices, in time order) with Alg. 1 in ``mode`` (see the module doc).

    ``order`` and ``pred`` enter the score normalized to [0, 1] by their largest value
    in the block, so ``w``, ``p`` and ``q`` weigh comparable terms; ``q=None`` forbids
    any instruction but a packet's seed to stall its consumers. ``carried``
    (:func:`loop_carried`) makes a loop body's stalls across its back edge count too."""
    carried = carried or {}
    if mode not in MODES:
        raise ValueError(f"unknown SDA mode {mode!r}; use one of {MODES}")
    n = len(instrs)
    edges = build_idg(instrs)
    if mode == "soft_to_hard":
        edges = [Edge(e.src, e.dst, True, max(e.latency, 1), 0)
                 if not e.hard and not e.order else e for e in edges]
    soft_weight = 0.0 if mode == "soft_to_none" else p
    succ = [[] for _ in range(n)]
    pred = [[] for _ in range(n)]
    for e in edges:
        succ[e.src].append(e)
        pred[e.dst].append(e)
    lat = [isa.LATENCY[ins.latency_class] for ins in instrs]
    # depth from the entry (longest path, hard edges weighted by latency)
    depth = [0] * n
    for j in range(n):
        for e in pred[j]:
            depth[j] = max(depth[j], depth[e.src] + (e.latency if e.hard else 0))
    ancestors = [set() for _ in range(n)]
    for j in range(n):
        for e in pred[j]:
            ancestors[j] |= ancestors[e.src] | {e.src}
    npred = [len(a) for a in ancestors]
    top_depth = max(depth) or 1
    top_pred = max(npred) or 1
    placed = [None] * n  # index of the packet (counted from the end) holding each
    remaining = set(range(n))
    packets_rev = []

    def free(i, current) -> bool:
        for e in succ[i]:
            where = placed[e.dst]
            if where is None:  # a consumer still to pack
                return False
            if where == len(packets_rev) and e.hard:  # in this packet, behind a hard edge
                return False
        return True

    def stall(i, slot) -> int:
        # packets between i (in packet `slot`, counted from the end) and its consumers
        worst = 0
        for e in succ[i]:
            if e.hard and placed[e.dst] is not None:
                dist = slot - placed[e.dst]
                worst = max(worst, e.latency - dist)
        if i in carried:  # read again at the top of the next iteration
            worst = max(worst, carried[i] - (slot + 1))
        return worst

    while remaining:
        slot = len(packets_rev)
        current: list = []
        frees = [i for i in remaining if free(i, current)]
        if not frees:  # cannot happen on a DAG; keep program order as a safe fallback
            raise RuntimeError("SDA found no free instruction; the IDG has a cycle")
        seed = max(frees, key=lambda i: (depth[i], npred[i], i))
        current.append(seed)
        placed[seed] = slot
        while len(current) < 4:
            chosen = [instrs[k] for k in current]
            hi_lat = max(lat[k] for k in current)
            best, best_score = None, None
            for i in remaining:
                if i in current or not free(i, current):
                    continue
                if not isa.fits(chosen + [instrs[i]]):
                    continue
                waits = max(0, stall(i, slot))
                if q is None and waits:
                    continue
                score = (depth[i] / top_depth + npred[i] / top_pred) * w \
                    - abs(hi_lat - lat[i]) * (1 - w)
                soft = sum(e.cost for e in succ[i] if e.dst in current and not e.hard)
                score -= soft_weight * soft + (q or 0.0) * waits
                if best_score is None or score > best_score or (score == best_score and i > best):
                    best, best_score = i, score
            if best is None:
                break
            current.append(best)
            placed[best] = slot
        for k in current:
            remaining.discard(k)
        packets_rev.append(sorted(current))
    return packets_rev[::-1]

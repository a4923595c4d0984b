"""SDA: soft-dependency-aware VLIW packing of a basic block (seed 004, §4.5, Alg. 1).

The instruction dependence graph (IDG) of a block has two kinds of edges
(seed 004, §4.5 "Hard/Soft Dependencies"):

- **hard**: the consumer must sit in a later packet -- a true (RAW) register
  dependence through the register file, an output (WAW) dependence, memory order
  between a store and another access, and the instructions before a branch;
- **soft**: the two may share a packet, correctly, at a cost or none -- an HVX
  vector load and its HVX consumer (the load becomes ``.cur``, one cycle more, Fig.
  4.4 (a)), a producer and the store of its result (a new-value store, one cycle
  more, Fig. 4.4 (b)), and an anti (WAR) dependence (a Hexagon packet reads every
  operand before it writes; no cost).

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
    branch_at = {k for k, ins in enumerate(instrs) if ins.kind == "branch"}
    linked = set()  # (src, dst) of the edges so far, for the branch's order edges
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
                data = b.flags.get("data", frozenset())
                new_store = (b.kind in ("store", "vstore") and raw <= data and len(data) == 1
                             and a.kind in ("alu", "alu2", "load", "hvx", "vload") and not waw
                             and not a.predicated)
                if soft:
                    edges.append(Edge(i, j, False, 0, isa.CUR_STALL))
                elif new_store:  # may share the packet as a new-value store
                    edges.append(Edge(i, j, False, 0, isa.NEW_STALL))
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
                # plain, while a later reader in the packet may need it .cur, and a
                # store of the old value beside the writer would read it as .new:
                # keep those apart
                apart = b.kind == "vload" or (a.kind in ("store", "vstore")
                                              and war & a.flags.get("data", frozenset()))
                edges.append(Edge(i, j, bool(apart), 1 if apart else 0, 0))
        if j in branch_at:
            linked.update((e.src, e.dst) for e in edges if e.dst == j)
            for i in range(j):
                if (i, j) not in linked:
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


def _adjacency(edges, n: int) -> tuple:
    """``(successor edges, predecessor edges)`` per instruction."""
    succ = [[] for _ in range(n)]
    pred = [[] for _ in range(n)]
    for e in edges:
        succ[e.src].append(e)
        pred[e.dst].append(e)
    return succ, pred


def idg(instrs, mode: str) -> list:
    """The IDG of ``instrs`` as ``mode`` sees it (soft edges hard in ``soft_to_hard``)."""
    edges = build_idg(instrs)
    if mode == "soft_to_hard":
        edges = [Edge(e.src, e.dst, True, max(e.latency, 1), 0)
                 if not e.hard and not e.order else e for e in edges]
    return edges


def pack(instrs, mode: str = "sda", w: float = 0.5, p: float = 1.0, q: float | None = 1.0,
         carried: dict | None = None, edges: list | None = None) -> list:
    """Pack ``instrs`` (:class:`.isa.Instr`, program order) into packets (lists of
    indices, in time order) with Alg. 1 in ``mode`` (see the module doc).

    ``order`` and ``pred`` enter the score normalized to [0, 1] by their largest value
    in the block, so ``w``, ``p`` and ``q`` weigh comparable terms; ``q=None`` forbids
    any instruction but a packet's seed to stall its consumers. ``carried``
    (:func:`loop_carried`) makes a loop body's stalls across its back edge count too;
    ``edges``: the block's IDG in this mode (:func:`idg`), when the caller packs the block
    several times."""
    carried = carried or {}
    if mode not in MODES:
        raise ValueError(f"unknown SDA mode {mode!r}; use one of {MODES}")
    n = len(instrs)
    soft_weight = 0.0 if mode == "soft_to_none" else p
    succ, pred = _adjacency(edges if edges is not None else idg(instrs, mode), n)
    lat = [isa.LATENCY[ins.latency_class] for ins in instrs]
    # depth from the entry (longest path, hard edges weighted by latency)
    depth = [0] * n
    for j in range(n):
        for e in pred[j]:
            depth[j] = max(depth[j], depth[e.src] + (e.latency if e.hard else 0))
    ancestors = [0] * n  # bit k set: instruction k precedes (a bitset: a block has ~10^3)
    for j in range(n):
        for e in pred[j]:
            ancestors[j] |= ancestors[e.src] | (1 << e.src)
    npred = [a.bit_count() for a in ancestors]
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
        # the end of the critical path, among the instructions that would not stall
        # their consumers here if there are any
        seed = max(frees, key=lambda i: (stall(i, slot) <= 0, depth[i], npred[i], i))
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


def refine(instrs, groups, cost, mode: str = "sda", budget: int = 3000,
           edges: list | None = None) -> tuple:
    """Local search after packing: move single instructions to other packets (within
    their dependences, where the packet has room) while ``cost(groups)`` -- the cycle
    model's estimate -- drops; a packet left empty disappears. ``groups`` are lists of
    indices in time order (from :func:`pack` or the original packing); returns
    ``(groups, cost)``. Stops after ``budget`` cost evaluations (a count, not a time:
    the result does not depend on the machine); ``edges`` as in :func:`pack`."""
    n = len(instrs)
    succ, pred = _adjacency(edges if edges is not None else idg(instrs, mode), n)
    groups = [list(g) for g in groups if g]
    best = cost(groups)
    evals = [0]

    def spent() -> bool:
        return evals[0] >= budget

    def positions():
        return {i: t for t, g in enumerate(groups) for i in g}

    improved = True
    while improved and not spent():
        improved = False
        where = positions()
        for i in range(n):
            if spent():
                break
            src = where[i]
            lo = max([where[e.src] + (1 if e.hard else 0) for e in pred[i]], default=0)
            hi = min([where[e.dst] - (1 if e.hard else 0) for e in succ[i]],
                     default=len(groups) - 1)
            for t in range(lo, hi + 1):
                if t == src or not isa.fits([instrs[k] for k in groups[t]] + [instrs[i]]):
                    continue
                trial = [list(g) for g in groups]
                trial[src].remove(i)
                trial[t].append(i)
                trial = [g for g in trial if g]
                c = cost(trial)
                evals[0] += 1
                if c < best:
                    groups, best, improved = trial, c, True
                    where = positions()
                    break
    return groups, best


def _linear_reads(instrs):
    """For a block in sequential order: per instruction ``{register: index of the
    instruction whose value it reads}`` (-1: from before the block), and the last
    definition of every register."""
    state: dict = {}
    reads = []
    for j, ins in enumerate(instrs):
        reads.append({r: state.get(r, -1) for r in ins.uses})
        for d in ins.defs:
            state[d] = j
    return reads, state


def verify(instrs, groups, together=frozenset()) -> bool:
    """Whether packing ``instrs`` (program order) as ``groups`` keeps its meaning: every
    operand reads the same definition as in program order (a packet reads the values
    from before it, except through ``.cur`` and new-value stores), the block leaves the
    same last definitions, no packet writes a register twice, a branch stays in the last
    packet, and memory accesses keep
    their order (a load may share a packet with a later store, not the reverse, unless
    the pair is in ``together``: LLVM packed it so, which it does only for accesses
    that cannot alias).

    An independent check of :func:`pack`, :func:`refine` and the edges they trust."""
    want, final = _linear_reads(instrs)
    where = {}
    for t, g in enumerate(groups):
        for j in g:
            where[j] = t
    if sorted(where) != list(range(len(instrs))):
        return False
    if any(ins.kind == "branch" and where[j] != len(groups) - 1 for j, ins in enumerate(instrs)):
        return False  # a branch must stay in the block's last packet
    state: dict = {}
    for g in groups:
        members = sorted(g)
        formed = dict(zip(members, isa.with_forms([instrs[j] for j in members])))
        written = set()
        for j in members:
            ins = formed[j]
            for r in ins.uses:
                got = state.get(r, -1)
                for k in members:
                    if k < j and r in instrs[k].defs and (
                            (formed[k].kind == "vload" and formed[k].cur)
                            or (ins.flags.get("new_store") and r in ins.flags.get("data", ()))):
                        got = k
                if got != want[j][r]:
                    return False
        for j in members:
            if instrs[j].defs & written:
                return False
            written |= instrs[j].defs
        for j in members:
            for d in instrs[j].defs:
                state[d] = j
    if state != final:
        return False
    memory = [j for j, ins in enumerate(instrs) if ins.is_memory]
    for a in memory:
        for b in memory:
            if a < b and (instrs[a].writes_memory or instrs[b].writes_memory):
                if where[a] > where[b]:
                    return False
                if where[a] == where[b] and instrs[a].writes_memory and (a, b) not in together:
                    return False
    return True


def same_meaning(original, renamed, free) -> bool:
    """Whether ``renamed`` (the same instructions, some registers renamed into ``free``
    ones) reads, instruction by instruction, values from the same instructions as
    ``original``, and leaves the same last definitions of every register not in
    ``free``."""
    a_reads, a_final = _linear_reads(original)
    b_reads, b_final = _linear_reads(renamed)
    for ra, rb in zip(a_reads, b_reads):
        if sorted(ra.values()) != sorted(rb.values()):
            return False
    keep = {r: j for r, j in a_final.items() if r not in free}
    return all(b_final.get(r) == j for r, j in keep.items()) and not any(
        r in b_final and b_final[r] != a_final.get(r) and r not in free for r in b_final)


def list_schedule(instrs, mode: str = "sda", carried: dict | None = None,
                  edges: list | None = None) -> list:
    """A top-down, cycle-by-cycle list schedule over the same IDG (a second start for
    :func:`refine`): at each cycle the packet takes, by priority, the instructions whose
    hard predecessors' results are ready by then and whose soft predecessors are
    already placed (in this packet or before), while :func:`.isa.fits` allows. The
    priority is an instruction's height -- the longest latency-weighted path from it
    to the end of the block, plus, in a loop body, the latency of a value the next
    iteration reads. A cycle where nothing is ready leaves no packet (the pipeline
    stalls instead). ``mode`` and ``edges`` apply as in :func:`pack`."""
    carried = carried or {}
    n = len(instrs)
    succ, pred = _adjacency(edges if edges is not None else idg(instrs, mode), n)
    height = [0] * n
    for i in range(n - 1, -1, -1):
        h = carried.get(i, 0)
        for e in succ[i]:
            h = max(h, height[e.dst] + (e.latency if e.hard else 0))
        height[i] = h
    placed_at: dict = {}
    # instructions whose predecessors are all placed, with the cycle their hard
    # predecessors' results are ready (kept as instructions are placed)
    waiting = [len(pred[i]) for i in range(n)]
    ready_at = [0] * n
    candidates = {i for i in range(n) if not waiting[i]}
    priority = {i: (-height[i], -len(succ[i]), i) for i in range(n)}

    def place(i, at):
        placed_at[i] = at
        candidates.discard(i)
        for e in succ[i]:
            if e.hard:
                ready_at[e.dst] = max(ready_at[e.dst], at + max(e.latency, 1))
            waiting[e.dst] -= 1
            if not waiting[e.dst]:
                candidates.add(e.dst)

    groups = []
    cycle = 0
    while len(placed_at) < n:
        current: list = []
        progress = True
        while progress and len(current) < 4:
            progress = False
            ready = sorted((i for i in candidates if ready_at[i] <= cycle),
                           key=priority.__getitem__)
            chosen = [instrs[k] for k in current]
            for i in ready:
                if isa.fits(chosen + [instrs[i]]):
                    current.append(i)
                    place(i, cycle)
                    progress = True
                    break
        if current:
            groups.append(sorted(current))
        cycle += 1
        if cycle > 8 * n + 16:  # cannot happen on a DAG with room in every packet
            raise RuntimeError("list scheduling made no progress")
    return groups

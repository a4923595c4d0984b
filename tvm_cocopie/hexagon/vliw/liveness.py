"""Register liveness over a function's blocks, to find registers a block may borrow.

Packing after register allocation inherits the allocator's reuse of registers: a
``memd`` that reloads ``r7:6`` must wait until every reader of the previous value
has issued, a chain no packing can shorten. Renaming such a value into a register
that is dead throughout the block breaks the chain (:mod:`.rename`). Which registers
are dead comes from classic backward liveness over the function's control flow:

- successors: the next block (fall-through) unless the last packet jumps or returns
  unconditionally; every ``.LBB`` label a jump names; a hardware loop's start (the
  label of the nearest ``loop0``/``loop1`` before it) for a ``:endloop`` packet;
- a return reads the return registers and the callee-saved ones (``r0``, ``r1``,
  ``r16``-``r31``); a call reads the argument registers ``r0``-``r5``;
- anything we cannot read (an indirect jump, an instruction of unknown meaning)
  makes every register live: the analysis only ever errs towards "live".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import isa
from .asmfile import Block

SCALARS = tuple(f"r{i}" for i in range(32))
VECTORS = tuple(f"v{i}" for i in range(32))
ALL = frozenset(SCALARS + VECTORS + tuple(f"p{i}" for i in range(4)) + tuple(f"q{i}" for i in range(4)))
RETURN_LIVE = frozenset({"r0", "r1", *(f"r{i}" for i in range(16, 32))})
CALL_USES = frozenset(f"r{i}" for i in range(6)) | {"r29", "r30", "r31"}
#: Registers a function may use without saving them (Hexagon ABI caller-saved).
CALLER_SAVED = frozenset([*(f"r{i}" for i in range(16)), "r28", *VECTORS])

_TARGET = re.compile(r"(\.LBB\w+)")
_LABEL = re.compile(r"^\s*([\w.$]+):")


def split(text: str) -> list:
    """A printed instruction line as its instructions (``a; b`` compounds split)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == ";" and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


@dataclass
class Node:
    block: Block
    labels: list = field(default_factory=list)
    succ: list = field(default_factory=list)
    falls: bool = True
    returns: bool = False
    unknown: bool = False
    live_in: frozenset = frozenset()
    live_out: frozenset = frozenset()


def _effects(texts):
    """``(uses, defs)`` of one packet for liveness, and its control facts."""
    uses, defs = set(), set()
    ctrl = {"targets": [], "uncond": False, "returns": False, "unknown": False}
    for line in texts:
        for t in split(line):
            low = t.lower()
            ins = isa.parse(t)
            if "jump" in low or "call" in low or "return" in low:
                ctrl["targets"] += _TARGET.findall(t)
                conditional = low.startswith("if")
                if re.search(r"jumpr\s+r(?!31\b)\d+", low):
                    ctrl["unknown"] = True
                if "jumpr r31" in low or "dealloc_return" in low:
                    ctrl["returns"] = True
                    ctrl["uncond"] = ctrl["uncond"] or not conditional
                    uses |= RETURN_LIVE
                elif "call" in low:
                    uses |= CALL_USES
                elif low.startswith("jump") and not conditional:
                    ctrl["uncond"] = True
                uses |= {r for r, _ in isa.registers(low)}
                continue
            if ins.kind == "opaque":
                ctrl["unknown"] = True
            uses |= ins.uses
            defs |= ins.defs - {"pc"}
    # a packet reads before it writes: its uses are upward exposed
    return uses, defs, ctrl


def analyze(items) -> dict:
    """Block index -> :class:`Node` with ``live_in``/``live_out`` for every block of
    the assembly ``items`` (:func:`.asmfile.parse`)."""
    nodes: list = []
    pending: list = []
    by_label = {}
    loop_starts = {"0": [], "1": []}
    for item in items:
        if isinstance(item, Block):
            node = Node(item, labels=pending + [ln.strip()[:-1] for ln in item.labels])
            for lab in node.labels:
                by_label[lab] = len(nodes)
            nodes.append(node)
            pending = []
            for texts, _ in item.packets:
                for line in texts:
                    m = re.match(r"\s*loop([01])\s*\(\s*(\.LBB\w+)", line)
                    if m:
                        loop_starts[m.group(1)].append(m.group(2))
        else:
            m = _LABEL.match(item)
            if m and not item.strip().startswith("."):
                pending.append(m.group(1))  # a function's own label
            elif m:
                pending.append(m.group(1))
            elif item.strip().startswith(".size") or item.strip().startswith(".Lfunc_end"):
                pending = []
    packs = []
    for k, node in enumerate(nodes):
        effects = [_effects(texts) for texts, _ in node.block.packets]
        packs.append(effects)
        last_ctrl = effects[-1][2] if effects else {"targets": [], "uncond": False,
                                                     "returns": False, "unknown": False}
        node.unknown = any(e[2]["unknown"] for e in effects)
        node.returns = any(e[2]["returns"] for e in effects)
        targets = [t for e in effects for t in e[2]["targets"]]
        node.falls = not last_ctrl["uncond"]
        end = node.block.packets[-1][1] if node.block.packets else ""
        for digit in "01":
            if digit in end.replace("endloop", ""):
                starts = [by_label[s] for s in loop_starts[digit] if s in by_label and by_label[s] <= k]
                if starts:
                    node.succ.append(max(starts))
                else:
                    node.unknown = True
        for t in targets:
            if t in by_label:
                node.succ.append(by_label[t])
            else:
                node.unknown = True
        if node.falls and k + 1 < len(nodes):
            node.succ.append(k + 1)
    # backward dataflow to a fixed point
    gen_kill = []
    for effects in packs:
        gen, kill = set(), set()
        for uses, defs, _ in reversed(effects):
            gen = (gen - defs) | uses
            kill |= defs
        gen_kill.append((frozenset(gen), frozenset(kill)))
    changed = True
    while changed:
        changed = False
        for k in range(len(nodes) - 1, -1, -1):
            node = nodes[k]
            out = set()
            for s in node.succ:
                out |= nodes[s].live_in
            if node.unknown:
                out = set(ALL)
            gen, kill = gen_kill[k]
            inn = frozenset(gen | (out - kill)) if not node.unknown else ALL
            if inn != node.live_in or frozenset(out) != node.live_out:
                node.live_in, node.live_out = inn, frozenset(out)
                changed = True
    return {node.block.index: node for node in nodes}


def free_registers(node: Node) -> frozenset:
    """Caller-saved scalar and vector registers dead everywhere in ``node``'s block
    and not named by it: safe to hold a renamed value inside the block."""
    named = set()
    for texts, _ in node.block.packets:
        for line in texts:
            named |= {r for r, _ in isa.registers(line.lower())}
    return CALLER_SAVED - node.live_in - node.live_out - named

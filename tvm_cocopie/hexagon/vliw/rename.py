"""Renaming a block's short-lived values into registers dead throughout the block.

After register allocation a block often reloads the same registers (``r7:6 =
memd(...)`` four times an iteration); each reload must follow every reader of the
previous value, a chain that caps how densely any packer can fill packets. A value
that is defined in the block and redefined later in it (so it cannot be live on
exit) can move to a register that is dead everywhere in the block
(:func:`.liveness.free_registers`): its definition and its readers are rewritten, the
later definition keeps the old name. Free registers are handed out least recently
used first, so the renamed values spread over as many registers as there are.

Values left alone: predicated definitions, instructions that read what they write
(accumulators, post-increments), predicate registers, and values whose register
is read together with a half we do not rename (``r7:6`` used as a pair with only
``r6`` renamed).
"""

from __future__ import annotations

import re

from . import isa

_PAIR = re.compile(r"(?<![\w.])([rv])(\d+):(\d+)")
_SINGLE = re.compile(r"(?<![\w.:])([rv]\d+)(?![\d:])")
_LHS_PAIR = re.compile(r"^\s*([rv])(\d+):(\d+)")


class _Inconsistent(Exception):
    pass


def substitute(text: str, mapping: dict) -> str:
    """``text`` with registers renamed by ``mapping`` (single names, e.g. ``r6 -> r12``);
    a pair token is renamed when both halves are and stay a pair."""

    def pair(m):
        kind, hi, lo = m.group(1), f"{m.group(1)}{m.group(2)}", f"{m.group(1)}{m.group(3)}"
        if hi not in mapping and lo not in mapping:
            return m.group(0)
        new_hi, new_lo = mapping.get(hi, hi), mapping.get(lo, lo)
        if int(new_hi[1:]) != int(new_lo[1:]) + 1 or int(new_lo[1:]) % 2:
            raise _Inconsistent(text)
        return f"{kind}{new_hi[1:]}:{new_lo[1:]}"

    text = _PAIR.sub(pair, text)
    return _SINGLE.sub(lambda m: mapping.get(m.group(1), m.group(1)), text)


def _candidates(free, kind: str, pair: bool):
    regs = sorted(int(r[1:]) for r in free if r[0] == kind)
    if not pair:
        return [(f"{kind}{n}",) for n in regs]
    return [(f"{kind}{n + 1}", f"{kind}{n}") for n in regs if n % 2 == 0 and n + 1 in regs]


def rename(order, free) -> tuple:
    """Rename values of the linearized block ``order`` (``[(text, Instr)]``) into the
    ``free`` registers; ``(new order, values renamed)``."""
    n = len(order)
    maps = [{} for _ in range(n)]
    busy_until: dict = {}  # register -> position of its last reader so far
    last_used: dict = {}  # register -> position it was last handed out (LRU)
    renamed = 0
    for i, (text, ins) in enumerate(order):
        if ins.predicated or ins.kind not in ("alu", "alu2", "load", "vload", "hvx"):
            continue
        if ins.defs & ins.uses or not ins.defs:
            continue
        lhs = text.split("=", 1)[0]
        m = _LHS_PAIR.match(lhs)
        halves = (f"{m.group(1)}{m.group(2)}", f"{m.group(1)}{m.group(3)}") if m else None
        if halves is None:
            single = re.match(r"^\s*([rv]\d+)\b", lhs)
            if not single:
                continue
            halves = (single.group(1),)
        if set(halves) != set(ins.defs):
            continue
        # each half is read until its next (unconditional, not reading) definition
        last = i
        ok = True
        readers = []
        for h in halves:
            kill = None
            for j in range(i + 1, n):
                other = order[j][1]
                if h in other.defs:
                    if h in other.uses or other.predicated:
                        ok = False
                    kill = j
                    break
                if h in other.uses:
                    readers.append((j, h))
                    last = max(last, j)
            if kill is None:
                ok = False  # may be live on exit
            if not ok:
                break
        if not ok:
            continue
        options = [c for c in _candidates(free, halves[0][0], len(halves) == 2)
                   if all(busy_until.get(r, -1) <= i for r in c)]
        if not options:
            continue
        choice = min(options, key=lambda c: max(last_used.get(r, -1) for r in c))
        mapping = dict(zip(halves, choice))
        for old, new in mapping.items():
            maps[i][old] = new
        for j, h in readers:
            maps[j][h] = mapping[h]
        for r in choice:
            busy_until[r] = last
            last_used[r] = i
        renamed += 1
    if not renamed:
        return order, 0
    out = []
    try:
        for (text, _), mapping in zip(order, maps):
            new = substitute(text, mapping) if mapping else text
            out.append((new, isa.parse(new)))
    except _Inconsistent:
        return order, 0
    return out, renamed

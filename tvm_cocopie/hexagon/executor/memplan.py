"""A static memory plan for a program of kernel calls (seed 004, §4.4.4: GCD² compiles a
whole model ahead of time; here every tensor gets a fixed arena offset).

Each buffer lives from the call that first touches it to the call that last reads it
(inputs from the start, outputs to the end). Buffers whose lifetimes do not overlap
share memory: greedy first fit, largest buffers first, offsets aligned to
:data:`tvm_cocopie.emulation.harness.ALIGN`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...emulation.harness import ALIGN
from ...emulation.program import normalize_module, program_spec


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class MemoryPlan:
    """Arena offset per buffer, the arena size, and what separate buffers would take."""

    offsets: dict
    arena_bytes: int
    naive_bytes: int
    lifetimes: dict


def lifetimes(calls, inputs, outputs) -> dict:
    """``name -> (first call, last call)`` from ``[(kernel, [buffer names])]``."""
    live: dict = {}
    end = len(calls)
    for i, (_, args) in enumerate(calls):
        for a in args:
            lo, hi = live.get(a, (i, i))
            live[a] = (min(lo, i), max(hi, i))
    for a in inputs:
        live[a] = (-1, live[a][1])
    for a in outputs:
        live[a] = (live[a][0], end)
    return live


def plan(calls, inputs, outputs, nbytes: dict) -> MemoryPlan:
    """Place every buffer of ``calls``; ``nbytes`` gives each buffer's size."""
    live = lifetimes(calls, inputs, outputs)
    order = sorted(live, key=lambda b: (-nbytes[b], b))
    placed: list = []  # (offset, size, (lo, hi))
    offsets = {}
    for b in order:
        size = _align(max(nbytes[b], 1))
        lo, hi = live[b]
        busy = sorted((o, o + s) for o, s, (l2, h2) in placed if not (h2 < lo or hi < l2))
        offset = 0
        for start, stop in busy:
            if offset + size <= start:
                break
            offset = max(offset, stop)
        offsets[b] = offset
        placed.append((offset, size, (lo, hi)))
    arena = max((o + s for o, s, _ in placed), default=0)
    naive = sum(_align(max(nbytes[b], 1)) for b in live)
    return MemoryPlan(offsets, arena, naive, live)


def check(mp: MemoryPlan, nbytes: dict) -> None:
    """Raise if two buffers that are alive at the same time overlap in memory."""
    items = list(mp.offsets.items())
    for i, (a, oa) in enumerate(items):
        for b, ob in items[i + 1 :]:
            la, lb = mp.lifetimes[a], mp.lifetimes[b]
            if la[1] < lb[0] or lb[1] < la[0]:
                continue
            if oa < ob + nbytes[b] and ob < oa + nbytes[a]:
                raise AssertionError(f"{a} and {b} overlap while both alive")


def plan_memory(funcs, calls, inputs, output: str, aliases: dict) -> MemoryPlan:
    """The static memory plan of a program; ``aliases`` maps a buffer to the one whose
    memory it views (same bytes, another shape), so both get one offset."""

    spec = program_spec(normalize_module(funcs), calls, list(inputs), [output])
    sizes = {b.name: b.nbytes for b in spec.buffers}

    def storage(name):
        while name in aliases:
            name = aliases[name]
        return name

    calls = [(f, [storage(a) for a in args]) for f, args in calls]
    st_sizes: dict = {}
    for name, n in sizes.items():
        st_sizes[storage(name)] = max(st_sizes.get(storage(name), 0), n)
    mp = plan(calls, list(inputs), [output], st_sizes)
    check(mp, st_sizes)
    mp.offsets = {name: mp.offsets[storage(name)] for name in sizes}
    return mp

"""A cycle model for emulated Hexagon: packets plus the stalls their dependences cost.

QEMU counts executed packets exactly but knows no time. GCD²'s SDA packing (seed 004,
§4.5) is about the difference: a consumer issued too soon after its producer stalls
the in-order VLIW pipeline. This model replays a run's executed packets (QEMU's
``-d in_asm,exec`` log, :class:`tvm_cocopie.emulation.packets.TraceRecorder`) through
an in-order, one-packet-per-cycle pipeline:

- packet ``k`` issues at ``t_k = max(t_{k-1} + 1, max over its operands of ready(r))``
  where ``ready(r) = t_producer + LATENCY[producer class]`` (:data:`.isa.LATENCY`);
- a ``.cur`` load read by another instruction of its own packet adds
  :data:`.isa.CUR_STALL`, a new-value store :data:`.isa.NEW_STALL` (it reads its
  data from its own packet, not the register file);
- estimated cycles = packets + stalls (``t_last + 1``).

Instructions of one packet read their operands before any of them writes (Hexagon
packet semantics), so a value defined in the same packet is not waited for, except
through ``.cur``. Branch and loop-back costs are not modelled (a hardware loop's
back edge is free on Hexagon; the kernels' other branches are rare).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import isa


@dataclass
class Estimate:
    """Packets, stall cycles and their sum, the estimated cycles."""

    packets: int
    stalls: int

    @property
    def cycles(self) -> int:
        return self.packets + self.stalls

    def as_dict(self) -> dict:
        return {"packets": self.packets, "stalls": self.stalls, "cycles": self.cycles}


def _compile(packet: isa.Packet, latency: dict, cur_stall: int):
    """A packet as ``(operands read, [(register, latency)] written, extra cycles)``."""
    uses = set()
    defs = []
    extra = 0
    cur_defs = set()
    for ins in packet.instrs:
        if ins.flags.get("new_store"):  # the data comes from this packet's producer
            uses |= ins.uses - ins.flags["data"]
            extra = max(extra, isa.NEW_STALL)
        else:
            uses |= ins.uses
        lat = latency[ins.latency_class]
        defs.extend((d, lat) for d in ins.defs if d != "pc")
        if ins.cur:
            cur_defs |= ins.defs
    if cur_defs and any(ins.uses & cur_defs for ins in packet.instrs if not ins.cur):
        extra = max(extra, cur_stall)
    return tuple(uses), tuple(defs), extra


class CycleModel:
    """Stalls of an executed packet sequence (see the module doc).

    ``latency`` and ``cur_stall`` default to :data:`.isa.LATENCY` and
    :data:`.isa.CUR_STALL`."""

    def __init__(self, latency: dict | None = None, cur_stall: int | None = None):
        self.latency = dict(isa.LATENCY if latency is None else latency)
        self.cur_stall = isa.CUR_STALL if cur_stall is None else cur_stall

    def run(self, packets) -> Estimate:
        """Estimate for an iterable of :class:`.isa.Packet` executed in order."""
        compiled = {}
        seq = []
        for p in packets:
            key = id(p)
            if key not in compiled:
                compiled[key] = _compile(p, self.latency, self.cur_stall)
            seq.append(compiled[key])
        return self._simulate(seq)

    def replay(self, pcs, table: dict) -> Estimate:
        """Estimate for a recorded run: ``pcs`` the executed packet addresses in order,
        ``table`` address -> ``(instruction texts, end mark)`` from the log."""
        compiled = {}
        for pc, (texts, end) in table.items():
            compiled[pc] = _compile(isa.parse_packet(texts, end), self.latency, self.cur_stall)
        missing = set(pcs) - set(compiled)
        if missing:
            raise ValueError(
                f"the trace executed {len(missing)} packets it has no disassembly for "
                f"(e.g. 0x{min(missing):x}); record it with trace=True (-d in_asm,exec)"
            )
        return self._simulate(compiled[pc] for pc in pcs)

    def steady_state(self, packets, iterations: int = 3) -> float:
        """Cycles per iteration of a loop body ``packets`` repeated (the last
        iteration's, once the previous ones have set the pipeline up)."""
        body = list(packets)
        if not body:
            return 0.0
        one = self.run(body * (iterations - 1)).cycles
        return float(self.run(body * iterations).cycles - one)

    @staticmethod
    def _simulate(seq) -> Estimate:
        ready: dict = {}
        t = -1
        n = 0
        stalls = 0
        get = ready.get
        for uses, defs, extra in seq:
            issue = t + 1
            for r in uses:
                at = get(r)
                if at is not None and at > issue:
                    issue = at
            issue += extra
            stalls += issue - (t + 1)
            t = issue
            n += 1
            for r, lat in defs:
                ready[r] = issue + lat
        return Estimate(n, stalls)


def trace_estimates(result, model: CycleModel | None = None) -> list:
    """Per-call :class:`Estimate` of a traced run (``RunResult`` with ``trace=True``)."""
    model = model or CycleModel()
    if result.trace is None:
        raise ValueError("this run was not traced; run it with trace=True")
    return [model.replay(pcs, result.trace.packets) for pcs in result.trace.pcs]

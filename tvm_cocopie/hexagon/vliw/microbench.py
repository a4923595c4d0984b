"""Microbenchmarks of the cycle model: loops whose cycle counts are known by construction.

Each benchmark is a hand-written hardware loop (``loop0``) whose body is built to
exercise one rule of :mod:`.cycles`: a dependent chain, independent streams, a
load and its use, a ``.cur`` load and its in-packet consumer, a new-value store, an HVX multiply and its
consumer, an accumulator chain, a full packet. The expected count is written down
by hand from the rule (``per_iteration`` cycles, less ``first`` stall cycles the
first iteration does not pay because its producers are outside the measured
region), independently of the model's code. The program really runs under
``qemu-hexagon`` (:func:`tvm_cocopie.emulation.hexagon.run_assembly`) and the model
replays QEMU's log of what executed; the error is the difference, in percent.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...emulation.hexagon import run_assembly
from .cycles import CycleModel

#: Iterations of each loop (enough that the loop dominates the two overhead packets).
ITERATIONS = 50


@dataclass(frozen=True)
class MicroBench:
    """A loop body (packets as text), its cycles per iteration by construction, and
    the stall cycles the first iteration does not pay."""

    name: str
    body: tuple
    per_iteration: int
    first: int = 0
    about: str = ""

    def expected(self, iterations: int = ITERATIONS) -> int:
        # + 2 packets around the loop: loop0 set-up, and the call closing the region
        return self.per_iteration * iterations - self.first + 2

    def program(self, iterations: int = ITERATIONS) -> str:
        packets = [f"\t{{ {'; '.join(p)} }}" for p in self.body]
        packets[-1] += " :endloop0"
        return "\n".join([
            "\t.text", "\t.globl _start", "\t.p2align 4", "_start:",
            "\t{ r1 = #3; r2 = add(r29, #-1024); r7 = #5 }",
            "\t{ r2 = and(r2, #-128); r5 = #0 }",
            "\t{ v1 = vsplat(r1); v5 = vsplat(r7) }",
            "\t{ v6 = vsplat(r1); v10 = vsplat(r7) }",
            "\t{ v11 = vsplat(r1); call cocopie_mark }",
            f"\t{{ loop0(.Lbody_{self.name}, #{iterations}) }}",
            "\t.p2align 4",
            f".Lbody_{self.name}:",
            *packets,
            "\t{ call cocopie_mark }",
            "\t{ r0 = #0; r6 = #93 }",
            "\t{ trap0(#1) }",
        ])


BENCHES = (
    MicroBench("scalar_chain", (("r0 = add(r0, #1)",),) * 4, 4,
               about="dependent one-cycle ALU ops: latency 1, no stall"),
    MicroBench("independent_hvx", (("v20.w = vadd(v10.w, v11.w)", "v21.w = vadd(v10.w, v11.w)",
                                    "v22.w = vsub(v10.w, v11.w)", "v23.w = vsub(v11.w, v10.w)"),) * 4,
               4, about="four independent HVX ALU ops per packet: no stall"),
    MicroBench("hvx_chain", (("v0.w = vadd(v0.w, v1.w)",),) * 4, 8, first=1,
               about="dependent HVX ALU ops: latency 2, one stall each (also around the loop)"),
    MicroBench("load_use", (("r3 = memw(r2 + #0)",), ("r4 = add(r3, #1)",),
                            ("r3 = memw(r2 + #4)",), ("r4 = add(r3, #2)",)), 6,
               about="scalar load then its use in the next packet: one stall per pair"),
    MicroBench("vload_use", (("v0 = vmem(r2 + #0)",), ("v3.w = vadd(v0.w, v0.w)",),
                             ("v2.cur = vmem(r2 + #0)", "v4.w = vadd(v2.w, v2.w)")), 5,
               about="vector load then use (one stall); .cur load used in its packet (one cycle)"),
    MicroBench("new_value_store", (("v3.w = vadd(v1.w, v1.w)", "vmem(r2 + #0) = v3.new"),
                                   ("v4.w = vsub(v1.w, v5.w)", "vmem(r2 + #1) = v4.new")), 4,
               about="a store of a value produced in its own packet (.new): one cycle each"),
    MicroBench("mpy_consumer", (("v0.w = vrmpy(v1.ub, r1.b)",), ("v2.w = vadd(v0.w, v0.w)",),
                                ("v3.w = vrmpy(v1.ub, r1.b)",), ("r5 = add(r5, #1)",),
                                ("v4.w = vadd(v3.w, v3.w)",)), 6,
               about="HVX multiply, consumer next packet (one stall) and two packets later (none)"),
    MicroBench("accumulator_chain", (("v0.w += vrmpy(v1.ub, r1.b)",),) * 3, 6, first=1,
               about="vrmpy accumulating into one register: one stall each"),
    MicroBench("full_packet", (("v0.w += vrmpy(v1.ub, r1.b)", "v8.w += vrmpy(v1.ub, r7.b)",
                                "r3 = memw(r2 + #0)", "v4 = valign(v5, v6, r7)"),
                               ("r4 = add(r3, #1)",)), 3,
               about="two multiplies, a load and a permute in one packet; the load's use stalls"),
)


def run(benches=BENCHES, model: CycleModel | None = None, iterations: int = ITERATIONS) -> list:
    """Run each benchmark under QEMU; per benchmark its expected and modelled cycles,
    the executed packets and the error in percent."""
    model = model or CycleModel()
    rows = []
    for bench in benches:
        rec = run_assembly(bench.program(iterations))
        est = model.replay(rec.pcs[0], rec.packets)
        expected = bench.expected(iterations)
        rows.append({
            "name": bench.name,
            "about": bench.about,
            "packets": est.packets,
            "expected_cycles": expected,
            "model_cycles": est.cycles,
            "err_pct": round(100.0 * abs(est.cycles - expected) / expected, 2),
        })
    return rows

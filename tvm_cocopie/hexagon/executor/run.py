"""Running a compiled int8 network under qemu-hexagon, checked against numpy (seed 004, §4.4.4)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ...emulation.hexagon import run
from .program import compile_network
from .quantization import QNetwork, reference_forward

log = logging.getLogger(__name__)


@dataclass
class NetworkResult:
    """One run of a compiled network: its output, the numpy int8 reference and whether they agree
    bit for bit, packets per call and each call's role."""
    output: np.ndarray
    reference: np.ndarray
    exact: bool
    packets: list
    roles: list
    plan: dict
    arena_bytes: int
    naive_bytes: int
    #: layer name -> what it is in the model (:attr:`.quantization.QLayer.op_class`)
    classes: dict = field(default_factory=dict)
    #: estimated cycles per call (:mod:`..vliw.cycles`) when run with ``cycles=True``
    cycles: list | None = None

    @property
    def total_cycles(self) -> int | None:
        """Estimated cycles of the whole program (packets + stalls), if traced."""
        return None if self.cycles is None else int(sum(self.cycles))

    @property
    def total_packets(self) -> int:
        """Packets of the whole program."""
        return int(sum(self.packets))

    def packets_by_role(self) -> dict:
        """Packets summed per call role (layer kernels, regrids, adds, ...)."""
        out: dict = {}
        for (_, role), n in zip(self.roles, self.packets):
            out[role] = out.get(role, 0) + int(n)
        return out

    def packets_by_class(self) -> dict:
        """Packets per operator class: each layer kernel under its class (``conv``,
        ``dwconv``, ``fc``, ``global_pool``, ``add``, ``max_pool``), the layout moves
        between layers as ``regrid``, the final unpacking as ``unpack``."""
        out: dict = {}
        for (layer, role), n in zip(self.roles, self.packets):
            key = self.classes.get(layer, role) if role == "kernel" else role
            out[key] = out.get(key, 0) + int(n)
        return out


def run_network(net: QNetwork, plan: dict | None = None, *, model=None, timeout=None,
                asm_pass=None, cycles: bool = False):
    """Compile, run once under the emulator counting packets, compare with numpy.

    ``asm_pass`` re-packs the kernels' assembly (e.g.
    :class:`tvm_cocopie.hexagon.vliw.repack.Repack`, SDA); ``cycles`` also records the
    executed packets and estimates cycles per call (:mod:`..vliw.cycles`)."""

    prog = compile_network(net, plan, model)
    res = run(
        prog.funcs,
        prog.calls,
        prog.inputs,
        [prog.output],
        count_packets=True,
        timeout=timeout,
        offsets=prog.memory.offsets,
        asm_pass=asm_pass,
        trace=cycles,
    )
    ref = reference_forward(net)
    out = res.outputs[prog.output]
    result = NetworkResult(
        out,
        ref,
        bool(np.array_equal(out, ref)),
        list(res.packets),
        prog.roles,
        prog.plan,
        prog.memory.arena_bytes,
        prog.memory.naive_bytes,
        {q.layer.name: q.op_class for q in net.layers},
    )
    if cycles:
        from ..vliw.cycles import trace_estimates

        result.cycles = [e.cycles for e in trace_estimates(res)]
    log.info(
        "network: %d packets (%s), arena %d bytes (separate buffers: %d), exact=%s",
        result.total_packets,
        result.packets_by_role(),
        result.arena_bytes,
        result.naive_bytes,
        result.exact,
    )
    return result

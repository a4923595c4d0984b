"""Packet counts from QEMU's execution log: the cycle-free cost measure we can trust.

GCD² (seed 004, ch. 4) reports latency on the device and packet counts from its VLIW
packer (§4.4, "packets 19% fewer than TVM"). Under emulation the wall clock means
nothing, but ``qemu-hexagon-static -singlestep -d exec,nochain`` logs one line per
executed VLIW packet, so counting lines gives an exact, deterministic packet count.
``-dfilter`` restricts the log to the kernels' code and the harness's marker function;
the marker's line splits the log into one segment per kernel call.

A log line looks like ``Trace 0: 0x7f..00 [00000000/000200d0/00000000/00000201] sym``;
the second bracketed field is the guest PC of the packet.
"""

from __future__ import annotations


class PacketCounter:
    """Streams a filtered exec log and counts kernel packets per call.

    ``mark_addr`` is the address of the harness's ``cocopie_mark`` function, called
    before call 0, before each following call, and once after the last: the packets
    between mark ``k`` and mark ``k + 1`` belong to call ``k``. Every other logged
    line is a kernel packet (the log is filtered to the kernel's address range).
    """

    def __init__(self, mark_addr: int, num_calls: int):
        self._mark = b"/%08x/" % mark_addr
        self.counts = [0] * num_calls
        self.before_first_mark = 0
        self.after_last_mark = 0
        self.marks_seen = 0
        self._tail = b""

    def _add(self, n: int) -> None:
        seg = self.marks_seen - 1
        if seg < 0:
            self.before_first_mark += n
        elif seg < len(self.counts):
            self.counts[seg] += n
        else:
            self.after_last_mark += n

    def feed(self, chunk: bytes) -> None:
        """Consume the next piece of the log (any size; lines may be split)."""
        data = self._tail + chunk
        cut = data.rfind(b"\n") + 1
        self._tail, data = data[cut:], data[:cut]
        pos = 0
        while True:
            hit = data.find(self._mark, pos)
            if hit < 0:
                self._add(data.count(b"\n", pos))
                return
            line_start = data.rfind(b"\n", 0, hit) + 1
            self._add(data.count(b"\n", pos, line_start))
            self.marks_seen += 1
            pos = data.find(b"\n", hit) + 1

    def finish(self) -> list:
        """Flush a last unterminated line and return the per-call counts."""
        if self._tail:
            self.feed(b"\n")
        return list(self.counts)

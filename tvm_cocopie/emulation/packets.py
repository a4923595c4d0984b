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

import re
from array import array


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


class TraceRecorder(PacketCounter):
    """A :class:`PacketCounter` that also keeps what ran: ``-d in_asm,exec`` logs.

    With ``in_asm`` QEMU prints each packet's disassembly the first time it translates
    it (``0x000200dc:  0xb0014062\\t{\\tR2 = add(R1,#0x3)`` ... ``}``; single-stepped,
    one translation block is one packet). :attr:`packets` maps a packet's address to
    ``(instruction texts, end-of-loop mark)``; :attr:`pcs` holds, per call, the
    addresses of the packets it executed, in order (an ``array('I')``).
    """

    _EXEC = re.compile(rb"^Trace \d+: \S+ \[[0-9a-f]+/([0-9a-f]+)/", re.MULTILINE)
    _ASM = re.compile(rb"^0x([0-9a-f]+):\s+0x[0-9a-f]+\s+(.*)$", re.MULTILINE)

    def __init__(self, mark_addr: int, num_calls: int):
        super().__init__(mark_addr, num_calls)
        self.packets: dict = {}
        self.pcs = [array("I") for _ in range(num_calls)]
        self._mark_int = mark_addr
        self._open = None  # (address, [texts]) of a packet whose "}" is still to come

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk
        cut = data.rfind(b"\n") + 1
        self._tail, data = data[cut:], data[:cut]
        for m in self._ASM.finditer(data):
            self._disasm(int(m.group(1), 16), m.group(2).decode(errors="replace"))
        for m in self._EXEC.finditer(data):
            pc = int(m.group(1), 16)
            if pc == self._mark_int:
                self.marks_seen += 1
                continue
            seg = self.marks_seen - 1
            if seg < 0:
                self.before_first_mark += 1
            elif seg < len(self.counts):
                self.counts[seg] += 1
                self.pcs[seg].append(pc)
            else:
                self.after_last_mark += 1

    def _disasm(self, addr: int, text: str) -> None:
        body = text.strip()
        if body.startswith("{"):
            self._open = (addr, [])
            body = body[1:]
        if self._open is None:
            return
        end = ""
        if "}" in body:
            body, _, rest = body.partition("}")
            end = rest.strip()
        for part in body.split(";"):
            if part.strip():
                self._open[1].append(part.strip())
        if "}" in text:
            start, texts = self._open
            self.packets[start] = (texts, end)
            self._open = None

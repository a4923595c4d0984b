"""LLVM's Hexagon assembly as basic blocks of VLIW packets, and back to text.

``tvm.compile`` for Hexagon writes assembly where every packet is a ``{ ... }``
group, one instruction per line, an end-of-loop mark after the closing brace
(``} :endloop0``). :func:`parse` cuts the text into raw lines and :class:`Block`
runs of packets (a block ends at a label other than LLVM's ``.Ltmp`` debug labels,
at a directive, or after a packet that branches or closes a hardware loop);
:func:`emit` writes the text back with the blocks' (possibly re-packed) packets.
``.Ltmp`` labels inside a block only anchor debug ranges; they move to the start of
their block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import isa

_LTMP = re.compile(r"^\.Ltmp\d+:\s*$")
_LABEL = re.compile(r"^[\w.$]+:\s*(//.*)?$")
_FUNCTION = re.compile(r"^\.type\s+([\w.$]+),\s*@function")


@dataclass
class Block:
    """A run of packets: each a list of instruction texts, plus its end mark."""

    packets: list  # [(texts, endloop)]
    labels: list = field(default_factory=list)  # .Ltmp labels hoisted to the start
    index: int = 0
    function: str = ""  # the symbol of the function the block is in

    @property
    def instructions(self) -> list:
        return [t for texts, _ in self.packets for t in texts]

    def parsed(self) -> list:
        """The packets as :class:`.isa.Packet`."""
        return [isa.parse_packet(texts, end) for texts, end in self.packets]


def parse(text: str) -> list:
    """The assembly as a list of raw lines (``str``) and :class:`Block` objects."""
    items: list = []
    block: Block | None = None
    pending_labels: list = []
    lines = text.splitlines()
    i = 0
    n_blocks = 0
    function = ""

    def close():
        nonlocal block, pending_labels
        if block is not None:
            items.append(block)
        items.extend(pending_labels)
        block, pending_labels = None, []

    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if s == "{":
            texts = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("}"):
                t = lines[i].strip()
                if t and not t.startswith("//"):
                    texts.append(t)
                i += 1
            end = lines[i].strip()[1:].strip() if i < len(lines) else ""
            if block is None:
                block = Block([], index=n_blocks, function=function)
                n_blocks += 1
            block.labels.extend(pending_labels)
            pending_labels = []
            block.packets.append((texts, end))
            i += 1
            parsed = [isa.parse(t) for t in texts]
            if end or any(p.kind == "branch" for p in parsed):
                close()
            continue
        if _LTMP.match(s) and block is not None:
            pending_labels.append(line)
            i += 1
            continue
        close()
        m = _FUNCTION.match(s)
        if m:
            function = m.group(1)
        items.append(line)
        i += 1
    close()
    return items


_CUR = re.compile(r"^((?:if\s*\([^)]*\)\s*)?[vV]\d+)(\.cur)?(\s*=\s*vmem)")


def _set_cur(text: str, on: bool) -> str:
    return _CUR.sub(lambda m: m.group(1) + (".cur" if on else "") + m.group(3), text, count=1)


_NEW = re.compile(r"=\s*([rv]\d+)(\.new)?\s*$")


def _set_new(text: str, on: bool) -> str:
    return _NEW.sub(lambda m: "= " + m.group(1) + (".new" if on else ""), text, count=1)


def fix_forms(packets) -> list:
    """Rewrite each packet's vector loads to ``.cur`` when a later packet-mate (in
    program order: the order of the texts) reads their result, and stores to
    new-value stores when an earlier one produces their data; both back to plain forms
    otherwise (packets as lists of instruction texts)."""
    out = []
    for texts, end in packets:
        parsed = isa.with_forms([isa.parse(t) for t in texts])
        fixed = []
        for t, ins in zip(texts, parsed):
            if ins.kind == "vload":
                t = _set_cur(t, ins.cur)
            elif ins.kind in ("store", "vstore") and "data" in ins.flags:
                t = _set_new(t, bool(ins.flags.get("new_store")))
            fixed.append(t)
        out.append((fixed, end))
    return out


def emit(items, packets_of=None) -> tuple:
    """The assembly text of ``items``; ``packets_of(block)`` gives a block's packets
    (default: its own). Also returns, per block index, its ``(first, last)`` line
    numbers (1-based) in the text, to map assembler errors back to blocks."""
    out: list = []
    spans = {}
    for item in items:
        if isinstance(item, Block):
            first = len(out) + 1
            out.extend(item.labels)
            packets = item.packets if packets_of is None else packets_of(item)
            for texts, end in packets:
                out.append("\t{")
                out.extend(f"\t\t{t}" for t in texts)
                out.append("\t}" + (f" {end}" if end else ""))
            spans[item.index] = (first, len(out))
        else:
            out.append(item)
    return "\n".join(out) + "\n", spans

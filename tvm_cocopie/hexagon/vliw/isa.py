"""Hexagon V66 instructions as the cycle model and the packer see them.

One :class:`Instr` per instruction of a VLIW packet, parsed from its assembly text in
either spelling we meet: LLVM's (``v2.w += vrmpy(v10.ub,r6.b)``) or QEMU's
disassembly in ``-d in_asm`` logs (``V2.w += vrmpy(V10.ub,R6.b)``, hex immediates).
It knows the registers an instruction reads and writes, whether it touches memory,
its execution class, the slots and HVX resources it needs, and the latency of its
result.

Sources:

- slots per class: Hexagon V66 Programmer's Reference Manual (80-N2040-42), §3.3
  "instruction classes": ALU32 any slot, XTYPE slots 2-3, LD slots 0-1, ST slots 0-1,
  J slots 2-3, CR slot 3; and the V66 HVX Programmer's Reference (80-N2040-44) slot
  and resource table, as LLVM encodes it in
  ``llvm/lib/Target/Hexagon/HexagonDepIICHVX.td`` (``SLOT23,VX`` for multiplies on
  ``CVI_MPY0``/``CVI_MPY1``; ``SLOT0123,VA`` on any of ``CVI_MPY0, CVI_MPY1,
  CVI_SHIFT, CVI_XLANE``; ``VS`` on ``CVI_SHIFT``; ``VP`` on ``CVI_XLANE``; the
  ``_DV`` double forms on two units; ``SLOT01,LOAD`` on ``CVI_LD``; ``SLOT0,STORE`` on
  ``CVI_ST``; a ``.cur`` load also takes a VA unit);
- latencies: LLVM's Hexagon itineraries (``HexagonDepIICHVX.td``,
  ``HexagonDepIICScalar.td``), as LLVM itself turns them into operand latencies
  (def stage - use stage + 1, one cycle less with forwarding): HVX results are
  defined at stage 9 and read at stage 7 by ALU and multiply operands -> 2 packets;
  scalar one-cycle ALU ops (``tc_1``: def 3, use 2) -> 1; two-cycle XTYPE ops
  (``tc_2``: def 4) and loads (``tc_ld``: def 4) -> 2. HVX shift and permute operands
  are read earlier (stage 5) in those tables; we keep 2 for them too, which
  understates stalls for every packing alike rather than favour ours.
- a load packed with its consumer (HVX ``.cur``) costs one cycle more than an
  independent packet (seed 004, §4.5, Fig. 4.4 (a): 3 + 1 cycles instead of 3 + 3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

#: Packets between a producer and a consumer that reads without stalling, by
#: producer latency class (see the module doc for where each comes from).
LATENCY = {"alu": 1, "alu2": 2, "load": 2, "hvx": 2, "vload": 2, "none": 1}
#: Extra cycles when a ``.cur`` load and its consumer share a packet (Fig. 4.4 (a)).
CUR_STALL = 1
#: Extra cycles when a new-value store (``= v0.new``) shares a packet with its
#: producer (Fig. 4.4 (b): "a similar situation ... between Assign and Store").
NEW_STALL = 1

#: HVX execution units (LLVM's ``CVI_*`` resources).
UNITS = ("mpy0", "mpy1", "shift", "xlane", "ld", "st")

_ALIASES = {"sp": "r29", "fp": "r30", "lr": "r31"}
_REG = re.compile(
    r"(?<![\w.])(r\d+:\d+|v\d+:\d+|r\d+|v\d+|q[0-3]|p[0-3]|sp|fp|lr|lc[01]|sa[01]|m[01]|usr|gp|ugp)"
    r"((?:\.[a-z]+)*)"
)

_HVX_MPY = (
    "vrmpy", "vmpy", "vmpa", "vdmpy", "vtmpy", "vmpye", "vmpyo", "vmpyi", "vmpyie",
    "vmpyio", "vmpyieo", "vdsad", "vrsad", "vmpahb", "vmpauhb", "vmps",
    "vsplat", "vinsert",  # not multiplies, but slots 2-3 on a multiply unit (SLOT23,VX)
)
#: Single-vector results that still take both multiply units.
_HVX_MPY_DOUBLE = ("vmpye",)
_HVX_SHIFT = ("vasr", "vasl", "vlsr", "vnormamt", "vcl0", "vpopcount", "vrotr", "vasrinto")
_HVX_PERMUTE = (
    "valign", "vlalign", "vror", "vshuff", "vshuffe", "vshuffo", "vshuffoe", "vdeal",
    "vdealb", "vdealh", "vdealb4w", "vdelta", "vrdelta", "vpack", "vpacke", "vpacko",
    "vunpack", "vunpacko", "vlut32", "vlut16", "vzxt", "vsxt", "vzb", "vzh", "vsb", "vsh",
    "vswap", "vshuffvdd",
)
_SCALAR_2CYCLE = (
    "asl", "asr", "lsr", "lsl", "mpy", "mpyi", "mpyu", "extract", "extractu", "insert",
    "bitsclr", "bitsset", "!bitsclr", "!bitsset", "tstbit", "!tstbit", "addasl", "vsplatb",
    "vsplath", "sxtw", "abs", "max", "maxu", "min", "minu", "clb", "cl0", "cl1", "ct0", "ct1",
    "brev", "vaddh", "vaddub", "vmux", "bitsplit", "add:sat", "sfmpy", "convert",
)
_BRANCHES = ("jump", "jumpr", "call", "callr", "dealloc_return", "jumpr:nt", "jumpr:t")
#: Instructions the packer leaves where they are (calls, frames, traps, barriers...).
_OPAQUE = (
    "call", "callr", "allocframe", "deallocframe", "dealloc_return", "trap0", "trap1",
    "barrier", "isync", "syncht", "dcfetch", "l2fetch", "dczeroa", "dccleana", "dcinva",
    "dccleaninva", "icinva", "memw_locked", "memd_locked", "pause",
)


def registers(text: str):
    """``[(register, suffix)]`` in ``text``; pairs expand to both halves."""
    out = []
    for m in _REG.finditer(text):
        name, suffix = m.group(1), m.group(2)
        name = _ALIASES.get(name, name)
        if ":" in name:
            kind = name[0]
            hi, lo = name[1:].split(":")
            out.append((f"{kind}{hi}", suffix))
            out.append((f"{kind}{lo}", suffix))
        else:
            out.append((name, suffix))
    return out


_ASSIGN = re.compile(r"(\+=|-=|\|=|&=|\^=|=)")


def _split_assign(text: str):
    """``(lhs, op, rhs)`` at the first assignment outside parentheses, else None."""
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            m = _ASSIGN.match(text, i)
            if m and not text.startswith("==", i):
                return text[:i].strip(), m.group(1), text[m.end():].strip()
        i += 1
    return None


def _mnemonic(rhs: str) -> str:
    m = re.match(r"\s*(!?[a-z_][\w.:]*)\s*\(", rhs)
    return m.group(1).split(".")[0] if m else ""


@dataclass
class Instr:
    """One instruction: its text and what the model needs to know about it."""

    text: str
    defs: frozenset = frozenset()
    uses: frozenset = frozenset()
    kind: str = "alu"  # alu, alu2, load, store, vload, vstore, hvx, branch, loop, nop, opaque
    hvx_class: str = ""  # VA, VA_DV, VX, VX_DV, VS, VP, VP_VS for HVX computes
    slots: tuple = (0, 1, 2, 3)
    units: tuple = ()  # HVX resources taken, each a tuple of alternatives
    cur: bool = False  # ``vX.cur = vmem(...)``
    new: bool = False  # reads a ``.new`` value (predicate, new-value store)
    tmp: bool = False  # ``.tmp`` load: the value lives only inside its packet
    predicated: bool = False
    flags: dict = field(default_factory=dict)

    @property
    def latency_class(self) -> str:
        """The producer class whose latency :data:`LATENCY` gives."""
        if self.kind in ("vload",):
            return "vload"
        if self.kind == "hvx":
            return "hvx"
        if self.kind in ("load",):
            return "load"
        if self.kind == "alu2":
            return "alu2"
        return "alu" if self.defs else "none"

    @property
    def is_memory(self) -> bool:
        return self.kind in ("load", "store", "vload", "vstore")

    @property
    def writes_memory(self) -> bool:
        return self.kind in ("store", "vstore")

    @property
    def is_control(self) -> bool:
        return self.kind in ("branch", "opaque")


def parse(text: str) -> Instr:
    """Parse one instruction's text (LLVM or QEMU spelling) into an :class:`Instr`.

    ``"p0 = cmp.eq(r9,#0); if (!p0.new) jump:t .L"`` -- a compare and the jump that
    reads its predicate as ``.new`` in the same packet, as LLVM prints compounds and as
    the packer keeps them -- is one branch that reads what the compare reads."""
    if ";" in text:
        return _compound(text)
    ins = _parse(text)
    if "##" in ins.text:  # a constant extender takes a word of the packet
        ins.flags["words"] = 2
    if re.search(r"\(\s*pc\s*,", ins.text.lower()):  # add(pc, ...) issues in slot 3 only
        ins.slots = (3,)
    return ins


def _compound(text: str) -> Instr:
    parts = [t.strip() for t in text.split(";") if t.strip()]
    if len(parts) == 2:
        cmp, jump = parse(parts[0]), parse(parts[1])
        if (jump.kind == "branch" and cmp.kind in ("alu", "alu2") and len(cmp.defs) == 1
                and next(iter(cmp.defs)).startswith("p")
                and f"{next(iter(cmp.defs))}.new" in jump.text.lower()):
            return Instr(text.strip(), cmp.defs | {"pc"}, cmp.uses | (jump.uses - cmp.defs),
                         kind="branch", slots=(2, 3), flags={"words": 2})
    regs = {r for r, _ in registers(text.lower())}
    return Instr(text.strip(), frozenset(regs), frozenset(regs), kind="opaque")


def _parse(text: str) -> Instr:
    raw = text.strip().rstrip(";").strip()
    t = raw.lower()
    t = re.sub(r"\s+", " ", t)
    if t in ("nop", ""):
        return Instr(raw, kind="nop")
    predicated = False
    pred_uses = []
    m = re.match(r"if\s*\(\s*(!?)(p[0-3])((?:\.new)?)\s*\)\s*(.*)$", t)
    new = False
    if m:
        predicated = True
        pred_uses.append(m.group(2))
        new = bool(m.group(3))
        t_body = m.group(4)
    else:
        t_body = t
    first = re.match(r"([a-z_0-9:]+)", t_body)
    word = first.group(1) if first else ""
    # the operation of an assignment form: LLVM writes a return as
    # ``r31:30 = dealloc_return(r30):raw``, whose first word is a register pair
    op = re.match(r"[^=]*=\s*([a-z_0-9]+)", t_body) if "==" not in t_body else None
    op = op.group(1) if op else ""
    if op == "dealloc_return":  # a return: the block's last packet, frame registers written
        regs = {r for r, _ in registers(t_body)}
        return Instr(raw, frozenset(regs | {"pc", "r29", "r30", "r31"}),
                     frozenset({"r30", *pred_uses}), kind="branch", slots=(0,),
                     predicated=predicated, new=new)
    if word in _OPAQUE or op in _OPAQUE or any(t_body.startswith(o) for o in ("trap", "dealloc")):
        regs = {r for r, _ in registers(t_body)}
        return Instr(raw, frozenset(regs | {"r29", "r30", "r31"}), frozenset(regs | set(pred_uses)),
                     kind="opaque", slots=(0, 1, 2, 3), predicated=predicated, new=new)
    if word.startswith(("jump", "call")):
        regs = {r for r, _ in registers(t_body)}
        slots = (2, 3)
        return Instr(raw, frozenset({"pc"}), frozenset(regs | set(pred_uses)), kind="branch",
                     slots=slots, predicated=predicated, new=new)
    if word in ("loop0", "loop1", "p3=sp1loop0", "sp1loop0", "sp2loop0", "sp3loop0"):
        n = word[-1]
        regs = {r for r, _ in registers(t_body)}
        return Instr(raw, frozenset({f"lc{n}", f"sa{n}"}), frozenset(regs), kind="loop", slots=(3,))
    parts = _split_assign(t_body)
    if parts is None:  # an instruction we do not know how to read: keep it in place
        regs = {r for r, _ in registers(t_body)}
        return Instr(raw, frozenset(regs), frozenset(regs | set(pred_uses)), kind="opaque")
    lhs, op, rhs = parts
    lhs_regs = registers(lhs)
    rhs_regs = registers(rhs)
    uses = {r for r, _ in rhs_regs} | set(pred_uses)
    new = new or any(".new" in s for _, s in rhs_regs)
    defs: set = set()
    store = lhs.startswith(("mem", "vmem"))
    postinc = re.compile(r"\(\s*(r\d+|sp|fp)\s*\+\+")
    if store:
        uses |= {r for r, _ in lhs_regs}
        for pm in postinc.finditer(lhs):
            defs.add(_ALIASES.get(pm.group(1), pm.group(1)))
    else:
        defs = {r for r, _ in lhs_regs}
        if op != "=" or predicated:
            uses |= defs  # accumulate, or a conditional write keeps the old value
    for pm in postinc.finditer(rhs):
        defs.add(_ALIASES.get(pm.group(1), pm.group(1)))
    cur = any(".cur" in s for _, s in lhs_regs)
    tmp = any(".tmp" in s for _, s in lhs_regs)
    mnem = _mnemonic(rhs)
    vector = any(r[0] in "vq" for r in defs | uses) or "vmem" in lhs or "vmem" in rhs
    pair_def = bool(re.match(r"\s*v\d+:\d+", lhs))
    ins = Instr(raw, frozenset(defs), frozenset(uses), predicated=predicated, new=new,
                cur=cur, tmp=tmp)
    if store:
        ins.flags["data"] = frozenset(r for r, _ in rhs_regs)
        # QEMU prints a new-value operand as the producer's position, ``O3.new``
        if any(".new" in sfx for _, sfx in rhs_regs) or re.search(r"\bo\d+\.new", rhs):
            ins.flags["new_store"] = True
            ins.new = False  # a new-value store is re-formed by the packer (asmfile.fix_forms)
        if "vmem" in lhs:  # SLOT0,STORE,VA: a vector store also takes an HVX unit
            ins.kind, ins.slots = "vstore", (0,)
            ins.units = (("st",), ("mpy0", "mpy1", "shift", "xlane"))
        else:
            ins.kind, ins.slots = "store", (0, 1)
        return ins
    if re.match(r"\s*(vmem|vmemu)\s*\(", rhs):
        # a vector load also occupies an HVX unit (LLVM's SLOT01,LOAD,VA itineraries;
        # llvm-mc rejects a load beside four busy units)
        ins.kind, ins.slots = "vload", (0, 1)
        ins.units = (("ld",), ("mpy0", "mpy1", "shift", "xlane"))
        if rhs.lstrip().startswith("vmemu"):
            ins.slots = (0,)
            ins.units = (("ld",), ("xlane",), ("mpy0", "mpy1", "shift", "xlane"))
            ins.flags["noslot1"] = True
        if cur:
            ins.units = ins.units + (("mpy0", "mpy1", "shift", "xlane"),)
        return ins
    if re.match(r"\s*!?mem[a-z]*\s*\(", rhs) or rhs.startswith("memop"):
        ins.kind, ins.slots = "load", (0, 1)
        return ins
    if vector:
        ins.kind = "hvx"
        if mnem in _HVX_SHIFT:  # also accumulating (vasrw_acc): one shift unit
            cls = "VP_VS" if pair_def else "VS"
        elif mnem in _HVX_MPY or op == "+=" or mnem in _HVX_MPY_DOUBLE:
            # accumulating forms (vaddhw_acc, vasrw_acc ...) run on the multiply units,
            # and vmpye on both: llvm-mc rejects packets that oversubscribe them
            cls = "VX_DV" if pair_def or mnem in _HVX_MPY_DOUBLE else "VX"
        elif mnem in _HVX_PERMUTE:
            cls = "VP_VS" if pair_def else "VP"
        else:
            cls = "VA_DV" if pair_def else "VA"
        ins.hvx_class = cls
        any_unit = ("mpy0", "mpy1", "shift", "xlane")
        if cls == "VX":
            ins.slots, ins.units = (2, 3), (("mpy0", "mpy1"),)
        elif cls == "VX_DV":
            ins.slots, ins.units = (2, 3), (("mpy0",), ("mpy1",))
        elif cls == "VS":
            ins.units = (("shift",),)
        elif cls == "VP":
            ins.units = (("xlane",),)
        elif cls == "VP_VS":
            ins.units = (("shift",), ("xlane",))
        elif cls == "VA_DV":
            ins.units = (any_unit, any_unit)
        else:
            ins.units = (any_unit,)
        return ins
    # scalar computes
    dest_is_pred = any(r.startswith("p") for r in defs)
    if mnem in _SCALAR_2CYCLE or mnem.startswith(("mpy", "vsplat")):
        ins.kind, ins.slots = "alu2", (2, 3)
    elif dest_is_pred and (mnem.startswith("!") or mnem in ("and", "or", "not", "xor", "any8", "all8")
                           and all(u.startswith("p") for u in uses - defs)):
        ins.kind, ins.slots = "alu", (2, 3)
    else:
        ins.kind, ins.slots = "alu", (0, 1, 2, 3)
    if any(r in ("lc0", "lc1", "sa0", "sa1", "usr", "m0", "m1") for r in defs):
        ins.slots = (3,)
    return ins


@dataclass
class Packet:
    """A VLIW packet: its instructions (no ``nop``) and the end-of-loop marks."""

    instrs: list
    endloop: str = ""  # "", ":endloop0", ":endloop1" or ":endloop01"


def parse_packet(lines, endloop: str = "") -> Packet:
    """A packet from its instruction texts (``nop`` dropped)."""
    instrs = [parse(s) for s in lines if s.strip()]
    return Packet([i for i in instrs if i.kind != "nop"], endloop)


def _match(demands, used=frozenset()) -> bool:
    """Whether every demand (a tuple of alternatives) gets a distinct resource."""
    if not demands:
        return True
    first, rest = demands[0], demands[1:]
    return any(_match(rest, used | {r}) for r in first if r not in used)


def fits(instrs) -> bool:
    """Whether ``instrs`` can form one packet: at most 4, a slot each, the HVX units
    they need, one vector load and one vector store, loads and stores in slots 0-1."""
    instrs = [i for i in instrs if i.kind != "nop"]
    if sum(i.flags.get("words", 1) for i in instrs) > 4:
        return False
    if sum(i.kind == "branch" for i in instrs) > 1:
        return False
    if sum(i.kind in ("load", "store", "vload", "vstore") for i in instrs) > 2:
        return False
    if sum(i.kind == "vload" for i in instrs) > 1 or sum(i.kind == "vstore" for i in instrs) > 1:
        return False
    stores = [i for i in instrs if i.kind in ("store", "vstore")]
    produced = set().union(*(i.defs for i in instrs))
    if len(stores) > 1 and any(i.flags.get("data", frozenset()) & produced for i in stores):
        return False  # a new-value store must be the packet's only store
    slots = [i.slots for i in instrs]
    if any(i.flags.get("noslot1") for i in instrs):
        slots = [tuple(s for s in alts if s != 1) for alts in slots]
    units = [alts for i in instrs for alts in i.units]
    for i in instrs:  # a load read inside its packet becomes .cur: one more ALU unit
        if i.kind == "vload" and not i.cur and any(i.defs & o.uses for o in instrs if o is not i):
            units.append(("mpy0", "mpy1", "shift", "xlane"))
    order = sorted(slots, key=len)
    return _match(order) and _match(sorted(units, key=len))


def with_forms(instrs) -> list:
    """The instructions of one packet, in program order, as they will be written: a
    vector load read by a later packet-mate is ``.cur``, a store of a value an
    earlier packet-mate produces a new-value store (the text form is
    :func:`.asmfile.fix_forms`'s). Reads by earlier packet-mates of what a later one
    writes see the old value, as in any packet."""
    out = []
    for k, ins in enumerate(instrs):
        if ins.kind == "vload":
            cur = any(ins.defs & o.uses for o in instrs[k + 1:])
            if cur != ins.cur:
                ins = replace(ins, cur=cur, flags=dict(ins.flags))
        elif ins.kind in ("store", "vstore") and "data" in ins.flags:
            new = any(ins.flags["data"] & o.defs for o in instrs[:k])
            if new != bool(ins.flags.get("new_store")):
                flags = dict(ins.flags)
                flags["new_store"] = new
                ins = replace(ins, flags=flags)
        out.append(ins)
    return out

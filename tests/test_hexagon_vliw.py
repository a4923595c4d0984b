"""The cycle model and SDA packing (tvm_cocopie.hexagon.vliw): parsing, packet rules,
the microbenchmarks under qemu, the meaning checks, and re-packed kernels that stay
bit-exact."""

from __future__ import annotations

import pytest

from tvm_cocopie.emulation import packets
from tvm_cocopie.hexagon.vliw import asmfile, cycles, isa, liveness, rename, repack, sda

P = isa.parse


def test_parse_reads_llvm_and_qemu_spellings():
    acc = P("v2.w += vrmpy(v10.ub,r6.b)")
    assert acc.kind == "hvx" and acc.hvx_class == "VX"
    assert acc.defs == {"v2"} and acc.uses == {"v2", "v10", "r6"}
    pair = P("r7:6 = memd(r23+#-512)")
    assert pair.kind == "load" and pair.defs == {"r6", "r7"} and pair.uses == {"r23"}
    post = P("r0 = memw(r1++#4)")
    assert post.defs == {"r0", "r1"}
    store = P("vmem(r0++#1) = v3")
    assert store.kind == "vstore" and store.defs == {"r0"} and store.uses == {"r0", "v3"}
    qemu = P("V3 = valign(V2,V1,R1)")
    assert qemu.hvx_class == "VP" and qemu.uses == {"v2", "v1", "r1"}
    assert P("vmem(R2+#0x0) = O3.new").flags["new_store"]
    assert P("if (p0) v8 = vmem(r24+#0)").uses == {"p0", "r24", "v8"}  # keeps the old value
    assert P("jumpr r31").kind == "branch" and P("loop0(.LBB3_4,#3)").defs == {"lc0", "sa0"}
    assert P("allocframe(r29,#8):raw").kind == "opaque"


def test_packet_resources():
    two_mpy = [P("v2.w += vrmpy(v10.ub,r6.b)"), P("v3.w += vrmpy(v10.ub,r7.b)")]
    assert isa.fits(two_mpy + [P("v8 = valign(v9,v8,r4)"), P("r7:6 = memd(r23+#-512)")])
    assert not isa.fits(two_mpy + [P("v4.w += vrmpy(v10.ub,r8.b)")])  # two multiply units
    assert not isa.fits([P("v2 = vmem(r1+#0)"), P("v3 = vmem(r2+#0)")])  # one vector load
    assert not isa.fits([P("v1:0.h = vmpy(v2.ub,r3.b)"), P("v5.w = vmpye(v4.w,v6.uh)")])
    assert not isa.fits([P("r0 = add(pc,##.L.str@PCREL)")] * 2)  # extenders take words


def test_trace_recorder_reads_in_asm_and_exec():
    log = (
        b"IN: k\n0x00020010:  0x1\t{\tR2 = add(R1,#0x3)\n0x00020014:  0x2\t\tR3 = R2 }\n\n"
        b"Trace 0: 0x7f [00000000/00020100/00000000/00000201] mark\n"
        b"Trace 0: 0x7f [00000000/00020010/00000000/00000201] k\n"
        b"Trace 0: 0x7f [00000000/00020010/00000000/00000201] k\n"
        b"Trace 0: 0x7f [00000000/00020100/00000000/00000201] mark\n"
    )
    rec = packets.TraceRecorder(0x20100, 1)
    for i in range(0, len(log), 11):
        rec.feed(log[i : i + 11])
    assert rec.finish() == [2]
    assert list(rec.pcs[0]) == [0x20010, 0x20010]
    assert rec.packets[0x20010] == (["R2 = add(R1,#0x3)", "R3 = R2"], "")


def test_cycle_model_counts_stalls():
    model = cycles.CycleModel()
    chain = [isa.parse_packet(["v0.w = vadd(v0.w,v1.w)"])] * 3
    assert model.run(chain).as_dict() == {"packets": 3, "stalls": 2, "cycles": 5}
    apart = [isa.parse_packet(["r1 = memw(r2+#0)"]), isa.parse_packet(["r3 = add(r4,#1)"]),
             isa.parse_packet(["r5 = add(r1,#1)"])]
    assert model.run(apart).stalls == 0
    cur = [isa.parse_packet(["v2.cur = vmem(r2+#0)", "v4.w = vadd(v2.w,v2.w)"])]
    assert model.run(cur).cycles == 2


@pytest.mark.needs_toolchain
def test_microbenchmarks_match_construction():
    from tvm_cocopie.hexagon.vliw import microbench

    rows = microbench.run(iterations=12)
    assert len(rows) >= 9
    bad = [r for r in rows if r["err_pct"] > 0]
    assert not bad, bad


def _order(texts):
    return repack.linearize([(texts, "")])


def test_linearize_keeps_packet_meaning():
    # the store reads the old r3 and the .new value of v31: store before the add
    order = _order(["r3 = add(r3,#256)", "v31.ub = vsat(v28.h,v29.h)", "vmem(r3+#0) = v31.new"])
    texts = [t for t, _ in order]
    assert texts.index("vmem(r3+#0) = v31.new") < texts.index("r3 = add(r3,#256)")
    assert texts.index("v31.ub = vsat(v28.h,v29.h)") < texts.index("vmem(r3+#0) = v31.new")
    branch = _order(["v1.ub = vsat(v28.h,v29.h)", "if (!p1) jumpr:nt r31", "vmem(r9+#2) = v1.new"])
    assert branch[-1][0] == "if (!p1) jumpr:nt r31"
    assert _order(["r1 = r2", "r2 = r1"]) is None  # a swap has no sequential order


def test_verify_rejects_a_packing_that_changes_meaning():
    body = [P("r1 = add(r2,#1)"), P("r3 = add(r1,#1)"), P("r1 = add(r4,#1)")]
    assert sda.verify(body, [[0], [1], [2]])
    assert sda.verify(body, [[0], [1, 2]])  # r3 reads the old r1 in the packet: fine
    assert not sda.verify(body, [[0, 1], [2]])  # r3 would read r1 from before the block
    assert not sda.verify(body, [[0], [2], [1]])  # r3 would read the second r1
    store = [P("memw(r0+#0) = r1"), P("r2 = memw(r0+#0)")]
    assert not sda.verify(store, [[1], [0]])
    assert not sda.verify(store, [[0, 1]])
    assert sda.verify(store, [[0, 1]], together={(0, 1)})


def test_packers_respect_dependences():
    body = [P(t) for t in [
        "r7:6 = memd(r23+#0)", "v0 = vmem(r1+#0)", "v2.w += vrmpy(v0.ub,r6.b)",
        "v3.w += vrmpy(v0.ub,r7.b)", "r7:6 = memd(r23+#8)", "v4.w += vrmpy(v0.ub,r6.b)",
        "vmem(r2+#0) = v4", "r1 = add(r1,#128)",
    ]]
    for mode in sda.MODES:
        for groups in (sda.pack(body, mode), sda.list_schedule(body, mode)):
            assert sda.verify(body, groups), (mode, groups)
            assert all(isa.fits([body[k] for k in g]) for g in groups)
    hard = sda.pack(body, "soft_to_hard")
    where = {i: t for t, g in enumerate(hard) for i in g}
    assert where[1] < where[2]  # soft to hard: no .cur sharing


def test_a_raw_dealloc_return_stays_the_blocks_last_instruction():
    """LLVM writes a function's return as ``r31:30 = dealloc_return(r30):raw`` and spreads
    the frame's register restores through the last block; read as an assignment, the
    return was packed mid-block and the rest of the block never ran (a 7x7 stem's last
    column block, wrong output under SDA)."""
    ret = P("r31:30 = dealloc_return(r30):raw")
    assert ret.kind == "branch" and {"pc", "r29", "r30", "r31"} <= ret.defs
    assert P("if (p0) r31:30 = dealloc_return(r30):raw").kind == "branch"
    body = [P(t) for t in [
        "r17:16 = memd(r30+#-8)", "v2.w += vrmpy(v0.ub,r6.b)",
        "r19:18 = memd(r30+#-16)",
        "v3.w += vrmpy(v0.ub,r7.b)", "vmem(r2+#0) = v3", "r31:30 = dealloc_return(r30):raw",
    ]]
    for mode in sda.MODES:
        for groups in (sda.pack(body, mode), sda.list_schedule(body, mode)):
            assert sda.verify(body, groups), (mode, groups)
            assert len(body) - 1 in groups[-1], (mode, groups)


def test_a_block_that_jumps_back_to_its_label_is_priced_as_a_loop():
    """A counted loop LLVM closed with a compare and jump (no hardware loop) is a loop
    body: priced per iteration (it was priced once, from a cold start, so a packing with
    a load-use stall in every iteration tied with one without: 256 stalls in a 1x1 conv)."""
    from tvm_cocopie.hexagon.vliw.repack import Repack

    def asm(target):
        return "\n".join([
            "\t.type\tk,@function", "k:", ".LBB0_1:",
            "\t{", "\t\tr1 = add(r1,#1)", "\t\tr2 = memw(r3+#0)", "\t}",
            "\t{", "\t\tr4 = add(r2,r4)", "\t}",
            "\t{", f"\t\tp0 = cmp.eq(r1,#8); if (!p0.new) jump:t {target}", "\t}", ""])

    for target, loop in ((".LBB0_1", True), (".LBB0_9", False)):
        rp = Repack("sda", rename=False)
        rp(asm(target))
        (report,) = [r for r in rp.reports if r.instructions >= 3]
        assert report.loop is loop, (target, report)


def test_rename_uses_free_registers_and_keeps_meaning():
    order = [(t, P(t)) for t in [
        "r7:6 = memd(r23+#0)", "v2.w += vrmpy(v0.ub,r6.b)", "v3.w += vrmpy(v0.ub,r7.b)",
        "r7:6 = memd(r23+#8)", "v4.w += vrmpy(v0.ub,r6.b)",
    ]]
    new, count = rename.rename(order, frozenset({"r10", "r11"}))
    assert count == 1
    assert new[0][0] == "r11:10 = memd(r23+#0)" and "r10.b" in new[1][0]
    assert new[3][0] == "r7:6 = memd(r23+#8)"  # the last value keeps its register
    assert sda.same_meaning([i for _, i in order], [i for _, i in new], {"r10", "r11"})
    assert rename.rename(order, frozenset({"r11"}))[1] == 0  # no aligned pair free


ASM = """\t.text
\t.type\tf,@function
f:
\t{
\t\tr2 = #0
\t\tloop0(.LBB0_1,#4)
\t}
.LBB0_1:
\t{
\t\tr3 = memw(r0+#0)
\t}
\t{
\t\tr2 = add(r2,r3)
\t\tr0 = add(r0,#4)
\t} :endloop0
\t{
\t\tr0 = r2
\t\tjumpr r31
\t}
.Lfunc_end0:
\t.size\tf, .Lfunc_end0-f
"""


def test_liveness_and_round_trip():
    items = asmfile.parse(ASM)
    blocks = [b for b in items if isinstance(b, asmfile.Block)]
    assert len(blocks) == 3
    text, _ = asmfile.emit(items)
    assert asmfile.parse(text)[0] == items[0]
    nodes = liveness.analyze(items)
    loop = nodes[blocks[1].index]
    assert loop.succ == [blocks[1].index, blocks[2].index]  # back edge and exit
    assert {"r0", "r2"} <= loop.live_in and "r3" not in loop.live_in
    free = liveness.free_registers(loop)
    assert "r3" not in free and "r0" not in free and "r4" in free and "r16" not in free


@pytest.mark.needs_toolchain
def test_repacked_kernels_stay_exact_and_never_slower():
    from tvm_cocopie.hexagon.tools import measure

    base = measure.gcd2_matmul("vrmpy", 32, 64, 64, asm_pass=repack.Repack("llvm"), cycles=True)
    for mode in ("sda", "soft_to_hard"):
        rp = repack.Repack(mode)
        got = measure.gcd2_matmul("vrmpy", 32, 64, 64, asm_pass=rp, cycles=True)
        assert got["exact"], mode
        assert got["cycles"] <= base["cycles"], (mode, got["cycles"], base["cycles"])
    dw = measure.gcd2_conv("vmpy", 6, 6, 32, 32, 3, 1, 1, dw=True,
                           asm_pass=repack.Repack("sda"), cycles=True)
    assert dw["exact"]

"""The Hexagon runner: build TVM kernels for V66, run them under qemu, count packets."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_cocopie.emulation import harness, packets, toolchain
from tvm_cocopie.errors import ToolchainError


def _vadd(n=1000, dtype="int32"):
    a = te.placeholder((n,), dtype, name="a")
    b = te.placeholder((n,), dtype, name="b")
    c = te.compute((n,), lambda i: a[i] + b[i], name="c")
    return te.create_prim_func([a, b, c])


def test_packet_counter_splits_log_per_call():
    mark = 0x20100
    line = "Trace 0: 0x7f00 [00000000/{:08x}/00000000/00000201] f\n"
    log = "".join(
        [line.format(0x20000)] * 2  # before the first mark: ignored
        + [line.format(mark)]
        + [line.format(0x20004)] * 5
        + [line.format(mark)]
        + [line.format(0x20008)] * 3
        + [line.format(mark)]
    ).encode()
    counter = packets.PacketCounter(mark, 2)
    for i in range(0, len(log), 7):  # lines split across chunks
        counter.feed(log[i : i + 7])
    assert counter.finish() == [5, 3]
    assert counter.marks_seen == 3 and counter.before_first_mark == 2


def test_harness_source_names_every_kernel_and_buffer():
    spec = harness.ProgramSpec(
        buffers=(harness.BufferSpec("x", (3, 5), "uint8"), harness.BufferSpec("y", (7,), "int32")),
        inputs=("x",),
        outputs=("y",),
        calls=(harness.CallSpec("k", ("x", "y")),),
    )
    src = harness.generate(spec)
    assert "__tvm_ffi_k(" in src and "{1, 8, 1}" in src and "{0, 32, 1}" in src
    assert "trap0(#1)" in src and "_start" in src


def test_missing_tool_says_make_apt(monkeypatch):
    monkeypatch.setenv("COCOPIE_HEXAGON_QEMU", "/nonexistent/qemu-hexagon-static")
    with pytest.raises(ToolchainError, match="make apt"):
        toolchain.toolchain()


@pytest.mark.needs_toolchain
def test_vector_add_round_trip_and_chain():
    from tvm_cocopie.emulation import hexagon as runner

    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, 1000).astype("int32")
    b = rng.integers(-1000, 1000, 1000).astype("int32")
    calls = [("vadd", ["a", "b", "c"]), ("vadd", ["c", "b", "d"])]
    res = runner.run({"vadd": _vadd()}, calls, {"a": a, "b": b}, ["c", "d"], count_packets=True)
    np.testing.assert_array_equal(res.outputs["c"], a + b)
    np.testing.assert_array_equal(res.outputs["d"], a + 2 * b)
    # Same kernel, same sizes: same packets; nothing of the kernel runs outside calls.
    assert res.packets[0] == res.packets[1] > 0
    assert res.packets_outside_calls == 0
    assert res.packets_by_func() == {"vadd": 2 * res.packets[0]}
    again = runner.run({"vadd": _vadd()}, calls, {"a": b, "b": a}, ["c", "d"], count_packets=True)
    assert again.packets == res.packets


@pytest.mark.needs_toolchain
def test_run_func_positional():
    from tvm_cocopie.emulation import hexagon as runner

    a = np.arange(77, dtype="uint8")
    (out,), _ = runner.run_func(_vadd(77, "uint8"), [a, a, np.zeros(77, "uint8")])
    np.testing.assert_array_equal(out, a + a)


@pytest.mark.needs_toolchain
def test_kernel_error_is_reported():
    from tvm.script import tirx as T

    from tvm_cocopie.emulation import hexagon as runner

    @T.prim_func
    def guarded(a: T.Buffer((4,), "int32"), b: T.Buffer((4,), "int32")):
        T.Assert(a[0] == 0, "first element must be zero")
        for i in range(4):
            b[i] = a[i]

    with pytest.raises(ToolchainError, match="(?s)exit code 3.*first element must be zero"):
        runner.run(
            {"guarded": guarded}, [("guarded", ["a", "b"])], {"a": np.ones(4, "int32")}, ["b"]
        )


@pytest.mark.needs_toolchain
def test_long_run_times_out():
    from tvm.script import tirx as T

    from tvm_cocopie.emulation import hexagon as runner

    @T.prim_func
    def spin(a: T.Buffer((1,), "int32"), b: T.Buffer((1,), "int32")):
        for i in range(2000000000):
            b[0] = b[0] * a[0] + T.Cast("int32", i)

    with pytest.raises(ToolchainError, match="more than 1 s"):
        runner.run(
            {"spin": spin}, [("spin", ["a", "b"])], {"a": np.ones(1, "int32")}, ["b"], timeout=1.0
        )


def test_program_spec_describes_the_kernel_buffers():
    from tvm_cocopie.emulation.program import normalize_module, program_spec

    mod = normalize_module({"vadd": _vadd()})
    spec = program_spec(mod, [("vadd", ["a", "b", "c"])], ["a", "b"], ["c"])
    assert spec.buffer("c").shape == (1000,) and spec.buffer("c").dtype == "int32"
    assert isinstance(mod, tvm.IRModule)


def test_build_cache_key_is_stable():
    """The same build gets the same key (in a new module object too); a change to the
    kernels, the harness source or the tools gets another."""
    from tvm_cocopie.emulation import hexagon as runner
    from tvm_cocopie.emulation.program import normalize_module

    tc = toolchain.Toolchain(qemu="q", clang="clang-14", lld="ld.lld-14")
    target = runner.hexagon_target()
    key = runner.build_key(normalize_module({"vadd": _vadd()}), target, "int main;", tc)
    assert key == runner.build_key(normalize_module({"vadd": _vadd()}), target, "int main;", tc)
    others = {
        runner.build_key(normalize_module({"vadd": _vadd(999)}), target, "int main;", tc),
        runner.build_key(normalize_module({"vadd": _vadd()}), target, "int main2;", tc),
        runner.build_key(normalize_module({"vadd": _vadd()}), target, "int main;",
                         toolchain.Toolchain(qemu="q", clang="clang-15", lld="ld.lld-14")),
    }
    assert key not in others and len(others) == 3


@pytest.mark.needs_toolchain
def test_packets_are_attributed_per_call_and_exclude_the_harness():
    from tvm_cocopie.emulation import hexagon as runner

    a = np.arange(1000, dtype="int32")
    alone = runner.run(
        {"vadd": _vadd()}, [("vadd", ["a", "a", "c"])], {"a": a}, ["c"], count_packets=True
    )
    # A second, bigger kernel and 64x more input data around the same call.
    big = np.arange(64000, dtype="int32")
    both = runner.run(
        {"vadd": _vadd(), "vbig": _vadd(64000)},
        [("vbig", ["x", "x", "y"]), ("vadd", ["a", "a", "c"])],
        {"x": big, "a": a},
        ["c", "y"],
        count_packets=True,
    )
    assert both.packets[1] == alone.packets[0]
    assert both.packets[0] > 30 * alone.packets[0]
    np.testing.assert_array_equal(both.outputs["y"], 2 * big)

"""Build TVM PrimFuncs for Hexagon V66 and run them under qemu-hexagon.

This is the measuring instrument behind every GCD² reproduction (seed 004, ch. 4):
the thesis runs on a Hexagon 698 DSP, we run the same HVX instructions on QEMU's
user-mode emulator and count VLIW packets instead of timing.

Pipeline: ``tvm.compile`` (target :data:`tvm_cocopie.target.HEXAGON_V66`) writes an
object; :mod:`.harness` writes a freestanding C program around it; ``clang-14`` and
``ld.lld-14`` link a static ELF; ``qemu-hexagon-static`` runs it with the inputs in a
file and the outputs read back as numpy arrays. Built programs are cached by a hash of
the TIR, the target and the harness, so a second run skips TVM and the toolchain.

Example::

    from tvm_cocopie.hexagon import runner
    res = runner.run({"vadd": f}, [("vadd", ["a", "b", "c"])],
                     inputs={"a": a, "b": b}, outputs=["c"], count_packets=True)
    res.outputs["c"], res.packets            # numpy array, [packets of call 0]
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompilationError, ToolchainError, last_line
from ..paths import cache_dir
from ..target import HEXAGON_V66
from . import harness
from .packets import PacketCounter, TraceRecorder
from .program import ffi_include, input_bytes, normalize_module, program_spec, read_outputs
from .toolchain import run_tool, toolchain

log = logging.getLogger(__name__)

RUNNER_VERSION = 2

CLANG_FLAGS = (
    "--target=hexagon-unknown-linux-musl",
    "-mcpu=hexagonv66",
    "-mhvx",
    "-mhvx-length=128b",
    "-ffreestanding",
    "-nostdlib",
    "-fno-builtin",
    "-O2",
)

#: Seconds an emulated run may take before it is killed (override per call).
DEFAULT_TIMEOUT = 900.0

_KERNEL_OBJECT = "kernel.o"


def hexagon_target():
    """``tvm.target.Target`` for Hexagon V66 with 128-byte HVX."""
    import tvm


    return tvm.target.Target(HEXAGON_V66)


def cache_root() -> Path:
    """Where built programs are kept: ``hexagon/`` in the package cache folder
    (:func:`tvm_cocopie.paths.cache_dir`)."""
    return cache_dir("hexagon")


@dataclass
class RunResult:
    """Outputs by buffer name; packets per call when counted; the emulator's stderr."""

    outputs: dict
    calls: tuple = ()
    packets: list | None = None
    packets_outside_calls: int = 0
    stderr: str = ""
    seconds: float = 0.0
    trace: TraceRecorder | None = None  # with ``trace=True``: the packets that ran

    def packets_by_func(self) -> dict:
        """Per-call packet counts summed by kernel name."""
        total: dict = {}
        for call, n in zip(self.calls, self.packets or []):
            total[call.func] = total.get(call.func, 0) + n
        return total


@dataclass
class HexagonProgram:
    """A linked, cached program: run it as often as you like with new inputs."""

    directory: Path
    spec: harness.ProgramSpec
    kernel_ranges: tuple  # ((lo, hi), ...) code counted as the kernels' (see parse_map)
    mark_addr: int
    cached: bool = False
    info: dict = field(default_factory=dict)

    @property
    def elf(self) -> Path:
        """Path of the linked program."""
        return self.directory / "program.elf"

    def run(self, inputs: dict, *, count_packets: bool = False, trace: bool = False,
            timeout: float | None = None):
        """Run with ``inputs`` (buffer name -> array); returns a :class:`RunResult`.

        ``trace`` also records each call's executed packets with their instruction
        text (``-d in_asm,exec``; implies ``count_packets``), for the cycle model of
        :mod:`tvm_cocopie.hexagon.vliw`."""
        return _execute(self, inputs, count_packets or trace, trace, timeout or DEFAULT_TIMEOUT)


# ----------------------------------------------------------------------------- build


def build_key(mod, target, c_source: str, tc, asm_pass=None) -> str:
    """The cache key of a build: everything that changes the program (runner version, TVM,
    target, kernels, harness source, compiler flags and tools, the assembly pass), hashed."""
    import tvm

    h = hashlib.sha256()
    for part in (
        asm_pass.key if asm_pass is not None else "",
        f"runner{RUNNER_VERSION}",
        tvm.__version__,
        json.dumps(target.export(), sort_keys=True, default=str),
        mod.script(),
        c_source,
        " ".join(CLANG_FLAGS),
        tc.clang,
        tc.lld,
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


_MAP_SECTION = re.compile(
    r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s+(\S+):\((\.text[^)]*)\)"
)
_MAP_SYMBOL = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+\d+\s+(\S+)\s*$")


def parse_map(text: str, obj_name: str = _KERNEL_OBJECT):
    """From an lld map file: the code ranges to count, and every symbol's address.

    The ranges are the kernel object's code sections and the harness's runtime library
    section (:data:`.harness.LIBC_SECTION`), as ``[(start, end)]``.
    """
    ranges, symbols, kernel_code = [], {}, False
    for line in text.splitlines():
        m = _MAP_SECTION.match(line)
        if m:
            start, size = int(m.group(1), 16), int(m.group(2), 16)
            obj, section = os.path.basename(m.group(3)), m.group(4)
            if size and (obj == obj_name or section == harness.LIBC_SECTION):
                ranges.append((start, start + size))
                kernel_code = kernel_code or obj == obj_name
            continue
        m = _MAP_SYMBOL.match(line)
        if m:
            symbols[m.group(2)] = int(m.group(1), 16)
    if not kernel_code:
        raise ToolchainError(f"the link map names no code from {obj_name}; the kernel is empty?")
    return sorted(ranges), symbols


def _compile_object(mod, target, path: Path, asm_pass=None, tc=None) -> None:
    import tvm

    try:
        lib = tvm.compile(mod, target=target)
    except Exception as err:  # TVM raises its own FFI error types
        raise CompilationError(f"TVM could not build the Hexagon kernels: {last_line(err)}") from err
    if asm_pass is None:
        lib.mod.write_to_file(str(path))
        return
    asm = path.with_suffix(".llvm.s")
    lib.mod.write_to_file(str(asm))
    text = asm_pass(asm.read_text(), path.parent)
    path.with_suffix(".s").write_text(text)
    assemble(text, path, tc or toolchain())


#: ``llvm-mc`` flags for V66 with 128-byte HVX (the ``-mcpu``/``-mhvx`` of :data:`CLANG_FLAGS`).
MC_FLAGS = ("-arch=hexagon", "-mcpu=hexagonv66", "-mattr=+hvxv66,+hvx-length128b",
            "-filetype=obj")


def assemble(text: str, out: Path, tc=None) -> None:
    """Assemble Hexagon assembly ``text`` into the object ``out`` with Debian's
    ``llvm-mc``. TVM's LLVM is newer and writes ``.attribute`` lines LLVM 14 does not
    know (build attributes only); they are dropped."""
    tc = tc or toolchain()
    if not tc.mc:
        raise ToolchainError("llvm-mc is not installed; run `make apt` (Debian package llvm-14)")
    src = out.with_suffix(".mc.s")
    src.write_text("".join(line for line in text.splitlines(keepends=True)
                           if not line.lstrip().startswith(".attribute")))
    run_tool([tc.mc, *MC_FLAGS, str(src.name), "-o", str(out.name)],
             "llvm-mc (assembling the re-packed kernels)", out.parent)


def build(
    funcs,
    calls,
    inputs,
    outputs,
    *,
    workspace_bytes: int = 64 << 20,
    cache_dir: str | os.PathLike | None = None,
    offsets: dict | None = None,
    asm_pass=None,
) -> HexagonProgram:
    """Compile ``funcs`` for Hexagon V66 and link them with a harness making ``calls``.

    ``calls`` is a list of ``(kernel name, [buffer names])``; buffers shared between
    calls are the same memory, so a chain (layout transform, kernel, transform back)
    runs as one program. ``inputs`` name the buffers read from the input file, in order;
    ``outputs`` the buffers returned. Other buffers start zeroed unless ``offsets``
    (buffer name -> arena offset, a static memory plan) lets them share memory.
    ``asm_pass`` (a callable ``(assembly text, work dir) -> assembly text`` with a
    ``key`` string) rewrites the kernels' assembly before ``llvm-mc`` assembles it,
    e.g. :class:`tvm_cocopie.hexagon.vliw.repack.Repack`.
    """
    tc = toolchain()
    target = hexagon_target()
    mod = normalize_module(funcs)
    spec = program_spec(mod, calls, inputs, outputs, workspace_bytes, offsets)
    c_source = harness.generate(spec)
    key = build_key(mod, target, c_source, tc, asm_pass)
    root = Path(cache_dir) if cache_dir else cache_root()
    final = root / key
    meta_path = final / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        log.debug("hexagon program %s from cache", key)
        ranges = tuple(tuple(r) for r in meta["kernel_ranges"])
        return HexagonProgram(final, spec, ranges, meta["mark_addr"], True, meta)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        meta = _link_program(mod, target, c_source, tc, work, asm_pass)
        meta["key"] = key
        (work / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(work, final)
        except OSError:  # another process built the same program first
            shutil.rmtree(work, ignore_errors=True)
        log.info("built hexagon program %s in %.1f s", key, meta["build_seconds"])
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    ranges = tuple(tuple(r) for r in meta["kernel_ranges"])
    return HexagonProgram(final, spec, ranges, meta["mark_addr"], False, meta)


def _link_program(mod, target, c_source: str, tc, work: Path, asm_pass=None) -> dict:
    """Compile the kernels and the harness in ``work`` and link ``program.elf``; the
    build's metadata (kernel code ranges, the marker's address, timings)."""
    started = time.perf_counter()
    _compile_object(mod, target, work / _KERNEL_OBJECT, asm_pass, tc)
    tvm_seconds = time.perf_counter() - started
    (work / "harness.c").write_text(c_source)
    run_tool([tc.clang, *CLANG_FLAGS, "-I", ffi_include(), "-c", "harness.c", "-o", "harness.o"],
             "clang-14 (compiling the harness)", work)
    run_tool([tc.lld, "-e", "_start", "-static", "-Map", "program.map", "harness.o",
              _KERNEL_OBJECT, "-o", "program.elf"],
             "ld.lld-14 (linking the harness with the kernels)", work)
    kernel_ranges, symbols = parse_map((work / "program.map").read_text())
    if harness.MARK_SYMBOL not in symbols:
        raise ToolchainError("the link map lacks the harness marker; cannot count packets")
    return {
        "kernel_ranges": [list(r) for r in kernel_ranges],
        "mark_addr": symbols[harness.MARK_SYMBOL],
        "kernels": sorted(str(g.name_hint) for g in mod.functions),
        "tvm_seconds": round(tvm_seconds, 3),
        "build_seconds": round(time.perf_counter() - started, 3),
    }


# ------------------------------------------------------------------------------- run


def _qemu_command(program: HexagonProgram, fifo: Path | None, trace: bool = False) -> list:
    cmd = [toolchain().qemu]
    if fifo is not None:
        spans = [f"0x{lo:x}..0x{hi - 1:x}" for lo, hi in program.kernel_ranges]
        ranges = ",".join([*spans, f"0x{program.mark_addr:x}+0x1"])
        what = "in_asm,exec,nochain" if trace else "exec,nochain"
        cmd += ["-singlestep", "-d", what, "-dfilter", ranges, "-D", str(fifo)]
    return cmd + [str(program.elf)]


def _stream_log(proc, fifo: Path, counter: PacketCounter, deadline: float) -> None:
    # O_RDWR never blocks on a FIFO and keeps it open however often qemu reopens it.
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        while True:
            if time.monotonic() > deadline:  # also while qemu keeps the log streaming
                return
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    chunk = b""
                if chunk:
                    counter.feed(chunk)
                    continue
            if proc.poll() is not None:
                while True:  # drain what qemu wrote before exiting
                    try:
                        chunk = os.read(fd, 1 << 20)
                    except BlockingIOError:
                        break
                    if not chunk:
                        break
                    counter.feed(chunk)
                return
            if time.monotonic() > deadline:
                return
    finally:
        os.close(fd)


def _execute(program: HexagonProgram, inputs: dict, count_packets: bool, trace: bool,
             timeout: float):
    payload = input_bytes(program.spec, inputs)
    with tempfile.TemporaryDirectory(prefix="cocopie-hexagon-") as tmp:
        tmp = Path(tmp)
        (tmp / "inputs.bin").write_bytes(payload)
        fifo = None
        if count_packets:
            fifo = tmp / "exec.log"
            os.mkfifo(fifo)
        recorder = TraceRecorder if trace else PacketCounter
        counter = recorder(program.mark_addr, len(program.spec.calls))
        started = time.monotonic()
        deadline = started + timeout
        with open(tmp / "stdout", "wb") as out, open(tmp / "stderr", "wb") as err:
            proc = subprocess.Popen(_qemu_command(program, fifo, trace), cwd=tmp, stdout=out, stderr=err)
            try:
                if fifo is not None:
                    _stream_log(proc, fifo, counter, deadline)
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            finally:
                # Past the deadline the log reader is closed, so a still-tracing qemu may
                # die of SIGPIPE before we kill it: that is the timeout too.
                lost_reader = (fifo is not None and proc.poll() == -signal.SIGPIPE
                               and time.monotonic() >= deadline)
                if proc.poll() is None or lost_reader:
                    if proc.poll() is None:
                        proc.kill()
                    proc.wait()
                    raise ToolchainError(
                        f"qemu-hexagon ran {program.elf} for more than {timeout:.0f} s and was "
                        "stopped; raise the timeout or shrink the problem"
                        + (" (packet counting single-steps and is much slower)" if fifo else "")
                    )
        seconds = time.monotonic() - started
        stderr = (tmp / "stderr").read_text(errors="replace")
        if proc.returncode != 0:
            raise ToolchainError(
                f"the emulated program {program.elf} failed with exit code {proc.returncode}"
                f" ({_EXIT_MEANING.get(proc.returncode, 'emulator or program crash')}); "
                f"stderr:\n{stderr.strip()[-4000:]}"
            )
        outputs = read_outputs(program.spec, tmp / "outputs.bin")
    result = RunResult(outputs, program.spec.calls, stderr=stderr, seconds=seconds)
    if count_packets:
        result.packets = counter.finish()
        result.packets_outside_calls = counter.before_first_mark + counter.after_last_mark
        result.trace = counter if trace else None
        if counter.marks_seen != len(program.spec.calls) + 1:
            raise ToolchainError(
                f"the packet log saw {counter.marks_seen} call markers, expected "
                f"{len(program.spec.calls) + 1}; the log is incomplete"
            )
    return result


_EXIT_MEANING = {
    2: "the harness could not read its inputs",
    3: "a kernel reported an error",
    4: "the harness could not write its outputs",
}


def run(
    funcs,
    calls,
    inputs: dict,
    outputs,
    *,
    count_packets: bool = False,
    timeout: float | None = None,
    workspace_bytes: int = 64 << 20,
    cache_dir=None,
    offsets: dict | None = None,
    trace: bool = False,
    asm_pass=None,
) -> RunResult:
    """Build (or fetch from the cache) and run once; see :func:`build` for the arguments."""
    program = build(
        funcs,
        calls,
        list(inputs),
        outputs,
        workspace_bytes=workspace_bytes,
        cache_dir=cache_dir,
        offsets=offsets,
        asm_pass=asm_pass,
    )
    return program.run(inputs, count_packets=count_packets, trace=trace, timeout=timeout)


def run_func(func, args, outputs=(-1,), *, count_packets: bool = False, timeout=None):
    """Run one PrimFunc on positional numpy arrays; return the arrays at ``outputs``.

    Arrays at ``outputs`` positions are outputs (their values are ignored); the rest
    are inputs. Returns ``(list of output arrays, RunResult)``.
    """
    mod = normalize_module(func)
    (name,) = [g.name_hint for g in mod.functions]
    names = [f"arg{i}" for i in range(len(args))]
    out_idx = [i % len(args) for i in outputs]
    ins = {names[i]: a for i, a in enumerate(args) if i not in out_idx}
    res = run(
        mod,
        [(name, names)],
        ins,
        [names[i] for i in out_idx],
        count_packets=count_packets,
        timeout=timeout,
    )
    return [res.outputs[names[i]] for i in out_idx], res


#: Address-0 marker of :func:`run_assembly` programs: ``call cocopie_mark`` delimits a call.
ASM_MARK = "cocopie_mark"


def run_assembly(text: str, calls: int = 1, *, timeout: float = 120.0) -> TraceRecorder:
    """Assemble, link and run a freestanding Hexagon program, traced.

    ``text`` defines ``_start`` (and ends with the exit system call) and calls
    ``cocopie_mark`` (defined here) before its first measured region and after each:
    the returned :class:`~.packets.TraceRecorder` holds per region the packets that
    ran and their disassembly. For microbenchmarks of the cycle model.
    """
    tc = toolchain()
    source = text + f"\n\t.p2align 4\n{ASM_MARK}:\n\t{{ jumpr r31 }}\n"
    with tempfile.TemporaryDirectory(prefix="cocopie-asm-") as tmp:
        work = Path(tmp)
        assemble(source, work / "prog.o", tc)
        run_tool([tc.lld, "-e", "_start", "-static", "-Map", "prog.map", "prog.o", "-o", "prog.elf"],
                 "ld.lld-14 (linking the assembly program)", work)
        symbols = parse_map((work / "prog.map").read_text(), "prog.o")[1]
        recorder = TraceRecorder(symbols[ASM_MARK], calls)
        proc = subprocess.run(
            [tc.qemu, "-singlestep", "-d", "in_asm,exec,nochain", "-D", "trace.log", "prog.elf"],
            cwd=work, capture_output=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise ToolchainError(f"the assembly program failed (exit {proc.returncode}): "
                                 f"{proc.stderr.decode(errors='replace')[-2000:]}")
        recorder.feed((work / "trace.log").read_bytes())
        recorder.finish()
    if recorder.marks_seen != calls + 1:
        raise ToolchainError(f"the program passed {recorder.marks_seen} marks, expected {calls + 1}")
    return recorder

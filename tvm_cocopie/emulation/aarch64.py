"""aarch64: a scheduled Relax graph's kernels built for Arm NEON and run under QEMU.

The kernel layer (:mod:`tvm_cocopie.topi`, :mod:`tvm_cocopie.schedules`) targets NEON by its SIMD width: 4
fp32 lanes, 32 vector registers (:func:`tvm_cocopie.topi.cpu.tiling.vector_registers`).
With no Arm machine at hand, the check is functional, not a timing: the cocopie
pipeline runs on a Relax graph for an aarch64 target up to the schedule stage; the
scheduled PrimFuncs are compiled by TVM's LLVM into one aarch64 object; the call
sequence of ``main`` (layout transforms, packed convolutions, matmuls, with the
weights packed at compile time as constants) becomes a freestanding program through
the Hexagon harness generator (:mod:`tvm_cocopie.emulation.harness`, given an aarch64
system-call stub), linked with ``clang-14`` / ``ld.lld-14`` and run by
``qemu-aarch64-static``; its outputs come back as numpy arrays.

Parallel loops are compiled as on a phone (``num-cores`` 4 by default): the harness's
``TVMBackendParallelLaunch`` runs the tasks one after another, which exercises the
same work split.

Example::

    from tvm_cocopie import aarch64
    outs = aarch64.run_relax(mod, {"x": x})   # list of numpy arrays, as main returns
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from ..errors import CompilationError, ToolchainError
from ..exprs import is_constant
from ..target import AARCH64_NEON, parse_target
from . import harness
from .program import ffi_include, input_bytes, normalize_module, program_spec, read_outputs
from .toolchain import run_tool

log = logging.getLogger(__name__)


#: tool -> Debian package (the Makefile's ``APT_PACKAGES`` has them)
TOOLS = {"qemu-aarch64-static": "qemu-user-static", "clang-14": "clang-14",
         "ld.lld-14": "lld-14"}

CLANG_FLAGS = ("--target=aarch64-linux-gnu", "-ffreestanding", "-nostdlib", "-fno-builtin",
               "-O2")

#: ``svc #0`` with the number in x8: the aarch64 Linux system call convention.
AARCH64_SYSCALL = r"""static long cp_syscall(long n, long a, long b, long c, long d) {
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x8 __asm__("x8") = n;
  __asm__ volatile("svc #0" : "+r"(x0) : "r"(x1), "r"(x2), "r"(x3), "r"(x8) : "memory");
  return x0;
}
"""

#: TVM's parallel-launch hooks (function pointers the runtime fills when it loads a
#: library): every task of a parallel loop, in order, on the one emulated core.
PARALLEL_RUNTIME = r"""
typedef struct { void* sync_handle; int32_t num_task; } cp_parallel_env;
typedef int (*cp_parallel_lambda)(int task_id, cp_parallel_env* penv, void* cdata);
static int cp_parallel_launch(cp_parallel_lambda flambda, void* cdata, int num_task) {
  int n = num_task > 0 ? num_task : 4;
  cp_parallel_env env = {0, n};
  for (int i = 0; i < n; i++) {
    int rc = flambda(i, &env, cdata);
    if (rc != 0) return rc;
  }
  return 0;
}
static int cp_parallel_barrier(int task_id, cp_parallel_env* penv) {
  (void)task_id; (void)penv;
  return 0;
}
int (*__TVMBackendParallelLaunch)(cp_parallel_lambda, void*, int) = cp_parallel_launch;
int (*__TVMBackendParallelBarrier)(int, cp_parallel_env*) = cp_parallel_barrier;
"""


def missing_tools() -> list[str]:
    """The executables of :data:`TOOLS` not on ``PATH`` (empty: all there)."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _require_tools() -> dict:
    missing = missing_tools()
    if missing:
        packages = " ".join(sorted({TOOLS[t] for t in missing}))
        raise ToolchainError(
            f"the aarch64 emulation toolchain is incomplete: {', '.join(missing)} not found "
            f"on PATH. Run `make apt`, or `apt-get install -y {packages}`."
        )
    return {tool: shutil.which(tool) for tool in TOOLS}


@dataclass(frozen=True)
class Program:
    """``main`` as a harness program: its kernels, calls, and the constant buffers."""

    kernels: tvm.IRModule  # the scheduled PrimFuncs that main calls
    calls: tuple  # ((kernel, (buffer names...)), ...), outputs last in each
    params: tuple  # buffer names of main's parameters, in order
    outputs: tuple  # buffer names main returns, in order
    constants: dict  # buffer name -> numpy value (weights packed at compile time)


def program_from_main(mod: tvm.IRModule) -> Program:
    """Read ``main``'s ``call_tir`` sequence (after :func:`tvm_cocopie.pipeline.run_until` its ``schedule`` stage).

    Every binding must be a ``call_tir`` with a single output, a tuple of variables or
    an alias; anything else raises :class:`CompilationError` naming it.
    """
    main = mod["main"]
    call_tir = tvm.ir.Op.get("relax.call_tir")
    names: dict = {}
    tuples: dict = {}  # var bound to a tuple -> its buffer names
    constants: dict = {}

    def buffer(expr) -> str:
        if is_constant(expr):
            name = f"const{len(constants)}"
            constants[name] = expr.value.numpy()
            return name
        if isinstance(expr, relax.Var) and expr in names:
            return names[expr]
        raise CompilationError(f"the aarch64 program cannot pass {type(expr).__name__} {expr}")

    for i, param in enumerate(main.params):
        names[param] = f"in{i}"
    calls, kernels = [], {}
    body = main.body
    for block in body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Var):
                names[binding.var] = names[value] if value in tuples else buffer(value)
                tuples.update({binding.var: tuples[value]} if value in tuples else {})
                continue
            if isinstance(value, relax.Tuple):
                tuples[binding.var] = [buffer(f) for f in value.fields]
                names[binding.var] = None
                continue
            if not (isinstance(value, relax.Call) and value.op.same_as(call_tir)
                    and len(value.args) == 2):
                raise CompilationError(
                    f"the aarch64 program runs call_tir bindings only, not {binding.var.name}"
                    f" = {str(value)[:120]}")
            gvar, args = value.args
            out = f"t{len(names)}"
            names[binding.var] = out
            kernels[gvar.name_hint] = mod[gvar]
            calls.append((gvar.name_hint, tuple(buffer(a) for a in args.fields) + (out,)))
    result = body.body
    if isinstance(result, relax.Tuple):
        outputs = [buffer(f) for f in result.fields]
    else:
        outputs = tuples.get(result) or [buffer(result)]
    return Program(normalize_module(kernels), tuple(calls),
                   tuple(names[p] for p in main.params), tuple(outputs), constants)


def compile_kernels(program: Program, target=None):
    """The runtime module of ``program``'s kernels for ``target`` (``.inspect_source("asm")``)."""
    target = parse_target(target or AARCH64_NEON)
    try:
        return tvm.compile(program.kernels, target=target).mod
    except Exception as err:  # TVM raises its own FFI error types
        raise CompilationError(f"TVM could not build the aarch64 kernels: {err}") from err


def build_and_run(program: Program, inputs: list, target=None,
                  workdir: str | os.PathLike | None = None) -> list[np.ndarray]:
    """Compile ``program``'s kernels for ``target``, link, run under qemu; the outputs."""
    tools = _require_tools()
    target = parse_target(target or AARCH64_NEON)
    if len(inputs) != len(program.params):
        raise CompilationError(f"main takes {len(program.params)} inputs, got {len(inputs)}")
    feeds = dict(zip(program.params, inputs))
    feeds.update(program.constants)
    spec = program_spec(program.kernels, program.calls, list(feeds),
                                       program.outputs)
    source = harness.generate(spec, syscall=AARCH64_SYSCALL) + PARALLEL_RUNTIME
    with tempfile.TemporaryDirectory(prefix="cocopie_aarch64_", dir=workdir) as tmp:
        work = Path(tmp)
        compile_kernels(program, target).write_to_file(str(work / "kernel.o"))
        (work / "harness.c").write_text(source)
        include = ffi_include()
        run_tool([tools["clang-14"], *CLANG_FLAGS, "-I", include, "-c", "harness.c", "-o",
               "harness.o"], "clang-14 (aarch64 harness)", work)
        run_tool([tools["ld.lld-14"], "-static", "-e", "_start", "harness.o", "kernel.o", "-o",
               "program.elf"], "ld.lld-14 (aarch64 link)", work)
        (work / "inputs.bin").write_bytes(input_bytes(spec, feeds))
        run_tool([tools["qemu-aarch64-static"], "program.elf"], "qemu-aarch64-static", work)
        out = read_outputs(spec, work / "outputs.bin")
    return [out[name] for name in program.outputs]



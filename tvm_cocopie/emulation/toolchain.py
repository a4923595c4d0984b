"""The free toolchain that stands in for the Hexagon SDK.

GCD² (seed 004, ch. 4) measures on a Snapdragon 865's Hexagon 698 (V66, HVX
128-byte vectors). We have no DSP and no proprietary SDK, so kernels are built by
TVM's LLVM, linked into a freestanding program with Debian's ``clang-14`` and
``ld.lld-14``, and executed by QEMU's user-mode Hexagon emulator
(``qemu-hexagon-static``), which implements HVX for v66. This module finds those
tools and says how to install them when they are missing.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

from ..errors import ToolchainError

#: Debian packages that provide the tools below (``make apt`` installs them).
DEBIAN_PACKAGES = ("qemu-user-static", "clang-14", "lld-14", "llvm-14")

#: tool role -> (candidate executable names, Debian package)
_TOOLS = {
    "qemu": (("qemu-hexagon-static", "qemu-hexagon"), "qemu-user-static"),
    "clang": (("clang-14",), "clang-14"),
    "lld": (("ld.lld-14",), "lld-14"),
    "mc": (("llvm-mc-14", "llvm-mc"), "llvm-14"),
}

#: Environment variable that overrides a tool's path, e.g. ``COCOPIE_HEXAGON_QEMU``.
_ENV_PREFIX = "COCOPIE_HEXAGON_"


@dataclass(frozen=True)
class Toolchain:
    """Absolute paths of the emulator, the C compiler, the linker and the assembler
    (``llvm-mc``, for kernels whose assembly is re-packed, :mod:`tvm_cocopie.hexagon.vliw`)."""

    qemu: str
    clang: str
    lld: str
    mc: str = ""


def _find(role: str) -> str | None:
    override = os.environ.get(_ENV_PREFIX + role.upper())
    if override:
        return shutil.which(override)
    names, _ = _TOOLS[role]
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def missing_tools() -> list[str]:
    """Executable names of the tools that cannot be found (empty when all are here)."""
    return [_TOOLS[role][0][0] for role in _TOOLS if _find(role) is None]


def available() -> bool:
    """True when the emulator, compiler, linker and assembler are all installed."""
    return not missing_tools()


@functools.cache
def _cached_toolchain(key: tuple) -> Toolchain:
    paths = {role: _find(role) for role in _TOOLS}
    absent = [role for role, path in paths.items() if path is None]
    if absent:
        names = ", ".join(_TOOLS[r][0][0] for r in absent)
        packages = " ".join(sorted({_TOOLS[r][1] for r in absent}))
        raise ToolchainError(
            f"the Hexagon emulation toolchain is incomplete: {names} not found on PATH. "
            f"Run `make apt` (it installs the Debian packages {' '.join(DEBIAN_PACKAGES)}), "
            f"or `apt-get install -y {packages}`."
        )
    return Toolchain(**paths)


def toolchain() -> Toolchain:
    """The installed toolchain, or a :class:`ToolchainError` saying how to install it."""
    key = tuple(os.environ.get(_ENV_PREFIX + r.upper(), "") for r in _TOOLS)
    key += (os.environ.get("PATH", ""),)
    return _cached_toolchain(key)


def run_tool(cmd, what: str, cwd, timeout: float = 300.0) -> subprocess.CompletedProcess:
    """Run one toolchain command in ``cwd``; its completed process.

    Raises :class:`~tvm_cocopie.errors.ToolchainError` naming ``what`` when it fails
    or takes longer than ``timeout`` seconds.
    """
    try:
        proc = subprocess.run(
            cmd, check=False, cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as err:
        raise ToolchainError(f"{what} did not finish in {timeout:.0f} s: {' '.join(cmd)}") from err
    if proc.returncode != 0:
        raise ToolchainError(
            f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
            f"{proc.stderr.strip()[-4000:]}"
        )
    return proc

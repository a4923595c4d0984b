"""Targets: parse, validate and describe the machines tvm-cocopie compiles for.

TVM 0.27 takes targets as JSON dicts (``{"kind": "llvm", "mcpu": "znver3"}``); the old
CLI strings (``"llvm -mcpu=..."``) are refused. Users hand us dicts, JSON text, or
``tvm.target.Target`` objects; this module turns each into a validated ``Target``
with a clear :class:`~tvm_cocopie.errors.TargetError` when it cannot, and answers the
questions schedule rules ask (SIMD width, core count, Hexagon or not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tvm.target import Target, codegen

from .errors import TargetError
from .threads import usable_cores

#: Target kinds the cocopie pipeline compiles for. Hexagon and Arm are LLVM targets too.
SUPPORTED_KINDS = ("llvm",)

HEXAGON_V66 = {
    "kind": "llvm",
    "mtriple": "hexagon",
    "mcpu": "hexagonv66",
    "mattr": ["+hvxv66", "+hvx-length128b"],
}
#: A 64-bit Arm target with NEON; 4 cores like a phone's big cluster.
AARCH64_NEON = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"],
                "num-cores": 4}


def host_target(num_cores: int | None = None) -> Target:
    """The machine we run on: LLVM's idea of the host CPU, with its core count."""
    cores = num_cores or usable_cores()
    return Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(), "num-cores": cores})


def parse_target(target: Any = None) -> Target:
    """Turn ``target`` into a validated ``tvm.target.Target``.

    Accepts ``None`` (the host), a ``Target``, a dict, or JSON text of a dict. Raises
    :class:`TargetError` naming what was wrong (bad JSON, unknown kind, a CPU LLVM
    does not know, the retired ``"llvm -mcpu=..."`` string form) and what to write.
    """
    if target is None:
        return host_target()
    if isinstance(target, Target):
        config = None
        tgt = target
    else:
        config = _as_dict(target)
        try:
            tgt = Target(config)
        except Exception as err:  # noqa: BLE001 - TVM raises ValueError or FFI errors
            first = str(err).splitlines()[0]
            raise TargetError(
                f"TVM refused the target {json.dumps(config)}: {first}. Known kinds include "
                f"'llvm' (CPU, Hexagon, Arm), 'cuda', 'rocm', 'metal', 'opencl'."
            ) from None
    if tgt.kind.name not in SUPPORTED_KINDS:
        raise TargetError(
            f"tvm-cocopie compiles for {SUPPORTED_KINDS} targets, got kind "
            f"'{tgt.kind.name}'. For GPUs use TVM's own pipeline (relax_pipeline='default')."
        )
    mcpu = tgt.attrs.get("mcpu")
    triple = str(tgt.attrs.get("mtriple") or codegen.llvm_get_system_triple())
    if mcpu and not codegen.llvm_is_valid_cpu(str(mcpu), triple):
        raise TargetError(
            f"LLVM does not know the CPU mcpu='{mcpu}' for triple "
            f"'{tgt.attrs.get('mtriple') or 'host'}'. Pick one of LLVM's CPU names, e.g. "
            f"'{codegen.llvm_get_system_cpu()}' for this machine, or leave mcpu out."
        )
    return tgt


def _as_dict(target: Any) -> dict:
    if isinstance(target, dict):
        config = dict(target)
    elif isinstance(target, str):
        text = target.strip()
        if not text.startswith(("{", "[")):
            if " " in text or text.startswith("-"):
                raise TargetError(
                    f"target strings like {text!r} are no longer accepted by TVM 0.27: give a "
                    'JSON dict, e.g. \'{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}\'.'
                )
            config = {"kind": text}
        else:
            try:
                config = json.loads(text)
            except json.JSONDecodeError as err:
                raise TargetError(
                    f"target is not valid JSON ({err.msg} at column {err.colno}): {text!r}. "
                    'Write e.g. \'{"kind": "llvm", "mcpu": "znver3"}\'.'
                ) from None
            if not isinstance(config, dict):
                raise TargetError(f"target JSON must be an object, got {type(config).__name__}")
    else:
        raise TargetError(
            f"target must be None, a dict, JSON text or tvm.target.Target, not "
            f"{type(target).__name__}"
        )
    if "kind" not in config:
        raise TargetError(f"target {config} has no 'kind'; add e.g. \"kind\": \"llvm\"")
    return config


@dataclass(frozen=True)
class CpuInfo:
    """What a schedule rule needs to know of a CPU target."""

    arch: str  # "x86", "aarch64", "hexagon", or "other"
    vector_bits: int  # SIMD register width used for vectorization
    num_cores: int
    fma: bool

    @property
    def f32_lanes(self) -> int:
        """fp32 lanes of one SIMD register."""
        return max(1, self.vector_bits // 32)


def cpu_info(target: Target) -> CpuInfo:
    """Describe ``target`` for schedule heuristics (SIMD width, cores, FMA)."""
    triple = str(target.attrs.get("mtriple") or codegen.llvm_get_system_triple())
    mattr = [str(a) for a in (target.attrs.get("mattr") or [])]
    cores = int(target.attrs.get("num-cores") or usable_cores())
    if triple.startswith("hexagon"):
        bits = 1024 if any("128b" in a for a in mattr) else 512
        return CpuInfo("hexagon", bits, 1, False)
    if triple.startswith(("aarch64", "arm64")):
        return CpuInfo("aarch64", 128, cores, True)
    if triple.startswith(("x86_64", "i686")):
        with target:
            has = codegen.llvm_cpu_has_features
            bits = 512 if has(["avx512f"], target) else 256 if has(["avx2"], target) else 128
            fma = bool(has(["fma"], target))
        return CpuInfo("x86", bits, cores, fma)
    return CpuInfo("other", 128, cores, False)


def is_host(target: Target) -> bool:
    """Whether code for ``target`` runs on this machine (no ``mtriple``, or the host's)."""
    triple = str(target.attrs.get("mtriple") or "")
    return not triple or triple == str(codegen.llvm_get_system_triple())


def is_hexagon(target: Target) -> bool:
    """Whether ``target`` generates Hexagon code."""
    return str(target.attrs.get("mtriple") or "").startswith("hexagon")

"""The Hexagon schedule rule: HVX-layout int8 computes become GCD²'s HVX kernels.

Seed 004, §4.4: once the graph-level selection has fixed each operator's instruction
and layout (:mod:`tvm_cocopie.hexagon.select_stage`), every operator is compiled with
its chosen variant. The graph pass emits the TE computes of
:mod:`tvm_cocopie.topi.int8.hvx` (each carrying a descriptor of op, variant and
sizes); this rule, applied by the cocopie pipeline's schedule stage like the CPU
rules, replaces each by its kernel:

- ``conv`` / ``dwconv``: the register-blocked HVX kernel of the variant
  (:func:`tvm_cocopie.hexagon.kernels.conv2d.conv2d`,
  :func:`tvm_cocopie.hexagon.kernels.depthwise.depthwise_conv2d`), same signature;
- ``shift_copy``: the vector masked copy
  (:func:`tvm_cocopie.hexagon.kernels.shift_copy.shift_copy_kernel`);
- ``regrid`` within one layout: row copies
  (:func:`tvm_cocopie.hexagon.kernels.regrid.regrid_copy_kernel`, ~18x fewer packets than
  the gather on a stride-2 phase split);
- ``regrid`` across layouts (the gather), ``add`` and ``maxpool``: the two inner loops
  fused and vectorized by 128 bytes (TVM's HVX code generation does the rest);
- ``unpack``: left to TVM (it runs once, at the end).

The static executor (:mod:`tvm_cocopie.hexagon.executor`) builds its kernels through
:func:`hvx_kernel` too, so the pipeline and the executor emit the same PrimFuncs.
"""

from __future__ import annotations

import tvm
from tvm import s_tir

from ...hexagon.kernels.dispatch import hvx_kernel
from ...target import CpuInfo, is_hexagon
from ..base import CpuRule


class HexagonInt8(CpuRule):
    """dlight rule: the HVX kernel of each HVX-layout int8 compute on Hexagon targets."""

    name = "hexagon-int8"

    def is_target_available(self, target: tvm.target.Target) -> bool:
        """Whether ``target`` is Hexagon."""
        return is_hexagon(target)

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """The HVX kernel of the compute in ``sch`` as a schedule (a list when ``tunable``), or
        ``None`` if it is not an HVX-layout compute."""
        kernel = hvx_kernel(sch.mod["main"])
        if kernel is None:
            return None
        out = s_tir.Schedule(kernel)
        return [out] if tunable else out

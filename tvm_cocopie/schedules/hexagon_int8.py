"""The Hexagon schedule rule: HVX-layout int8 computes become GCD²'s HVX kernels.

Seed 004, §4.4: once the graph-level selection has fixed each operator's instruction
and layout (:mod:`tvm_cocopie.hexagon.relax_graph`), every operator is compiled with
its chosen variant. The graph pass emits the TE computes of
:mod:`tvm_cocopie.topi.int8_hvx` (each carrying a descriptor of op, variant and
sizes); this rule, applied by the cocopie pipeline's schedule stage like the CPU
rules, replaces each by its kernel:

- ``conv`` / ``dwconv``: the register-blocked HVX kernel of the variant
  (:func:`tvm_cocopie.hexagon.conv2d.conv2d`,
  :func:`tvm_cocopie.hexagon.depthwise.depthwise_conv2d`), same signature;
- ``shift_copy``: the vector masked copy
  (:func:`tvm_cocopie.hexagon.executor.shift_copy_kernel`);
- ``regrid`` within one layout: row copies
  (:func:`tvm_cocopie.hexagon.regrid.regrid_copy_kernel`, ~18x fewer packets than
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

from ..target import CpuInfo, is_hexagon
from ..topi.int8_compute import Requant
from ..topi.int8_hvx import descriptor, geometry_of
from .common import CpuRule


def _vectorize_inner(func, lanes: int = 128):
    sch = s_tir.Schedule(func)
    block = sch.get_sblock("y")
    loops = sch.get_loops(block)
    inner = sch.fuse(loops[-2], loops[-1])
    if int(sch.get(inner).extent) % lanes == 0:
        sch.vectorize(sch.split(inner, factors=[None, lanes])[-1])
    return sch.mod["main"]


def _in_root_block(kernel):
    """The kernel's body inside an opaque root block, as TE-made functions have it
    (Relax's reshape detection expects one on every single-input ``call_tir``)."""
    if isinstance(kernel.body, s_tir.SBlockRealize):
        return kernel
    root = s_tir.SBlock([], [], [], "root", kernel.body)
    return kernel.with_body(s_tir.SBlockRealize([], True, root))


def _same_layout_copy(desc: dict) -> bool:
    """A regrid between grids of one layout with no padded channel: row copies."""
    from ..hexagon.layouts import LAYOUT_OF

    variant, _, _, _, c, _ = desc["src"]
    if variant is None:  # the NHWC image: byte copies
        return True
    return variant == desc["variant"] and c % LAYOUT_OF[variant].col_multiple == 0


def hvx_kernel(func):
    """The scheduled PrimFunc for an HVX-layout compute, or ``None`` if ``func`` is not one
    (or is left to TVM). Attributes of ``func`` (name, descriptor) are kept."""
    desc = descriptor(func)
    if desc is None:
        return None
    op = desc["op"]
    if op in ("conv", "dwconv"):
        from ..hexagon.conv2d import conv2d
        from ..hexagon.depthwise import depthwise_conv2d

        rq = Requant(*desc["rq"])
        geo = geometry_of(desc)
        if op == "conv":
            kernel = conv2d(desc["variant"], geo, desc["c"], desc["o"], rq)
        else:
            kernel = depthwise_conv2d(desc["variant"], geo, desc["c"], rq)
    elif op == "shift_copy":
        from ..hexagon.executor import shift_copy_kernel

        kernel = shift_copy_kernel(desc["v"], desc["groups"], desc["src"], desc["dst"],
                                   desc["shift"])
    elif op == "regrid" and _same_layout_copy(desc):
        from ..hexagon.regrid import regrid_copy_kernel

        _, shape, h, w, c, wq = desc["src"]
        kernel = regrid_copy_kernel(desc["variant"], tuple(shape), h, w, wq, geometry_of(desc), c)
    elif op in ("regrid", "add", "maxpool"):
        kernel = _vectorize_inner(func)
    else:
        return None
    kernel = _in_root_block(kernel).without_attr("global_symbol")
    for key, value in func.attrs.items():
        kernel = kernel.with_attr(key, value)
    if "op_pattern" in func.attrs:
        kernel = kernel.with_attr("op_pattern", 8)  # opaque: nothing to fuse or rewrite
    return kernel


class HexagonInt8(CpuRule):
    """dlight rule: the HVX kernel of each HVX-layout int8 compute on Hexagon targets."""

    name = "hexagon-int8"

    def is_target_available(self, target: tvm.target.Target) -> bool:
        return is_hexagon(target)

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        kernel = hvx_kernel(sch.mod["main"])
        if kernel is None:
            return None
        out = s_tir.Schedule(kernel)
        return [out] if tunable else out

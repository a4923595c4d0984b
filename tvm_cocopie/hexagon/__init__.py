"""Hexagon HVX: GCD²'s int8 kernels, their layouts, and the qemu runner (seed 004, ch. 4).

GCD² compiles DNNs for the Hexagon 698 DSP (V66, 128-byte HVX). This package holds
the parts that work without the proprietary SDK:

- :mod:`.runner`, :mod:`.harness`, :mod:`.packets`, :mod:`.toolchain`: build TVM
  PrimFuncs for :data:`tvm_cocopie.target.HEXAGON_V66`, run them under
  ``qemu-hexagon-static`` and count executed VLIW packets.

Submodules import TVM lazily; importing this package is cheap.
"""

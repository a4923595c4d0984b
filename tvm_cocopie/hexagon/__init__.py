"""Hexagon HVX: GCD²'s int8 kernels, their layouts, and the qemu runner (seed 004, ch. 4).

GCD² compiles DNNs for the Hexagon 698 DSP (V66, 128-byte HVX). This package holds
the parts that work without the proprietary SDK:

- :mod:`.runner` (with :mod:`.harness`, :mod:`.packets`, :mod:`.toolchain`): build
  TVM PrimFuncs for :data:`tvm_cocopie.target.HEXAGON_V66`, run them under
  ``qemu-hexagon-static`` on numpy inputs, count executed VLIW packets per call;
- :mod:`.int8_compute` / :mod:`.reference`: the int8 operators (uint8 x int8, int32
  accumulation, :class:`~.int8_compute.Requant` to uint8) as TE computes and numpy;
- :mod:`.layouts`: the 1-, 2- and 4-column layouts of Fig. 4.2, weight packing, and
  on-device transforms;
- :mod:`.matmul`, :mod:`.conv2d`, :mod:`.depthwise`: kernels in the three variants
  ``vmpy`` / ``vmpa`` / ``vrmpy`` (:mod:`.gemm` is their shared loop nest, :mod:`.hvx`
  the intrinsics, :mod:`.tirgen` the TIR building helpers);
- :mod:`.measure`: packets of each kernel and of stock TVM's lowering, bit-exactness
  checked (``scripts/bench_hexagon.py``).

Submodules import TVM lazily where they can; importing this package is cheap.
"""

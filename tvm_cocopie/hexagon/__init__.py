"""Hexagon HVX: GCD²'s int8 kernels, their layouts, and the qemu runner (seed 004, ch. 4).

GCD² compiles DNNs for the Hexagon 698 DSP (V66, 128-byte HVX). This package holds
the parts that work without the proprietary SDK:

- :mod:`.runner` (with :mod:`.harness`, :mod:`.packets`, :mod:`.toolchain`): build
  TVM PrimFuncs for :data:`tvm_cocopie.target.HEXAGON_V66`, run them under
  ``qemu-hexagon-static`` on numpy inputs, count executed VLIW packets per call;
- :mod:`tvm_cocopie.topi.int8_compute` (re-exported as :mod:`.int8_compute`) /
  :mod:`.reference`: the int8 operators (uint8 x int8, int32 accumulation,
  ``Requant`` to uint8, ``AddRequant`` for residual adds) as TE computes and numpy;
  :mod:`tvm_cocopie.topi.int8_hvx`: the same on GCD²'s HVX layouts, which the
  Hexagon schedule rule (:mod:`tvm_cocopie.schedules.hexagon_int8`) turns into the
  kernels below;
- :mod:`.layouts`: the 1-, 2- and 4-column layouts of Fig. 4.2, weight packing, and
  on-device transforms;
- :mod:`.matmul`, :mod:`.conv2d`, :mod:`.depthwise`: kernels in the three variants
  ``vmpy`` / ``vmpa`` / ``vrmpy`` (:mod:`.gemm` is their shared loop nest, :mod:`.hvx`
  the intrinsics, :mod:`.tirgen` the TIR building helpers);
- :mod:`.measure`: packets of each kernel and of stock TVM's lowering, bit-exactness
  checked (``scripts/bench_hexagon.py``); :mod:`.tvm_vrmpy`: stock TVM's own ``vrmpy``
  tensor intrinsic tensorized into a conv, the strongest stock baseline;
- :mod:`.costmodel` (data in :mod:`._calibration`): packets per kernel variant and
  layout transform, fitted on emulator counts (§4.4.1's ``Cost`` and ``TC``);
- :mod:`.selection`: GCD²'s global layout/instruction selection (§4.4.2): local
  choice, exhaustive search, Eq. 4.2's chain DP, an exact frontier DP on DAGs, and
  partitioning at desirable edges; :mod:`.networks`: ResNet-50 / MobileNetV2 layer
  graphs priced by the cost model;
- :mod:`.executor` (with :mod:`.memplan`, :mod:`.regrid`, :mod:`.onnx_chain`,
  :mod:`.cli`): a whole quantized network (convs, depthwise, residual adds, max
  pools) as one program with a static memory plan, bit-exact against numpy
  (``tvm-cocopie hexagon run MODEL.onnx``);
- :mod:`.relax_graph`: the Hexagon branch of the cocopie pipeline --
  ``tvm.compile(mod, HEXAGON_V66, relax_pipeline="cocopie")`` reads the int8 network
  from Relax, runs the global selection and emits the executor's kernels.

Submodules import TVM lazily where they can; importing this package is cheap.
"""

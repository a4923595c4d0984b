"""Hexagon HVX: GCD²'s int8 backend (seed 004, ch. 4).

GCD² compiles DNNs for the Hexagon 698 DSP (V66, 128-byte HVX). This package holds
the parts that work without the proprietary SDK; the kernels run under QEMU through
:mod:`tvm_cocopie.emulation`, and the int8 computes and layouts they implement are in
:mod:`tvm_cocopie.topi.int8`.

- :mod:`.kernels`: the int8 kernels in the three instruction variants ``vmpy`` /
  ``vmpa`` / ``vrmpy`` (matmul, conv, depthwise), weight packing, layout transforms,
  regrids, and :mod:`.kernels.dispatch` mapping each HVX-layout compute to its kernel;
- :mod:`.selection`: the cost model (§4.4.1) and the global layout/instruction
  selection (§4.4.2) over layer graphs;
- :mod:`.executor`: a whole quantized network as one program with a static memory
  plan, bit-exact against numpy (``tvm-cocopie hexagon run MODEL.onnx``, :mod:`.cli`);
- :mod:`.select_stage`: the Hexagon branch of the cocopie pipeline --
  ``tvm.compile(mod, HEXAGON_V66, relax_pipeline="cocopie")`` reads the int8 network
  from Relax (the form of :mod:`.relax_graph`), runs the global selection and emits
  the HVX-layout computes that the schedule rule of :mod:`tvm_cocopie.schedules.hexagon`
  turns into kernels;
- :mod:`.tools`: packet measurements against stock TVM, MetaSchedule through QEMU,
  and the cost model's calibration (benchmarks and by-hand runs, not the compile path).

Submodules import TVM lazily where they can; importing this package is cheap.
"""

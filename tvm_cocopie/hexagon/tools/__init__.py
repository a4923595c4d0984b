"""Measurement and calibration tools of the Hexagon backend (benchmarks, by hand).

- :mod:`.measure`: packets of each kernel and of stock TVM's lowering, bit-exactness
  checked (``scripts/bench_hexagon.py``);
- :mod:`.tvm_vrmpy`: stock TVM's own ``vrmpy`` tensor intrinsic in a conv, the
  strongest stock baseline; :mod:`.ms_runner`: MetaSchedule measuring through QEMU;
- :mod:`.calibrate`: fitting the cost model of :mod:`..selection.costmodel`.
"""

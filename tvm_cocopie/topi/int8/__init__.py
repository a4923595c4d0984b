"""int8 computes (seed 004, ch. 4): uint8 x int8 with int32 accumulation and requantization.

- :mod:`.compute`: the operators as TE computes on NHWC / row-major tensors;
- :mod:`.reference`: the same in numpy (exact, int64 inside);
- :mod:`.layouts`: GCD²'s 1-, 2- and 4-column HVX layouts and the padded grids a
  convolution runs on;
- :mod:`.hvx`: the computes on those layouts, each carrying a descriptor from which
  :mod:`tvm_cocopie.hexagon.kernels.dispatch` picks its HVX kernel.
"""

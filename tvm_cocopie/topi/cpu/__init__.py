"""CPU computes (fp32, NCHW[x]c) and the legalization that uses them.

- :mod:`.conv2d_nchwc`: blocked-layout direct convolution (dense and grouped), with
  compile-time weight packing and a padded, flattened-or-2-D spatial register tile;
- :mod:`.depthwise_nchwc`: depthwise convolution in the same layout;
- :mod:`.dense_packed`: matmul / dense / batch matmul with a packed right-hand side;
- :mod:`.fast_math`: vectorizable exp / erf / tanh for epilogues;
- :mod:`.tiling`: the untuned heuristics (layout block, register tiles) from SIMD width;
- :mod:`.legalize`: plans and Relax legalization functions using the above.
"""

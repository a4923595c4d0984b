"""CPU schedule rules (x86 AVX2/AVX-512, Arm NEON by SIMD width), tried in this order.

- :mod:`.conv2d_nchwc`: register-blocked NCHWc convolutions (dense, grouped,
  depthwise) with their fused epilogues;
- :mod:`.matmul_packed`: packed matmul / dense / batch matmul;
- :mod:`.row_reduction`: softmax, layer norm and other reductions along rows;
- :mod:`.fallback`: parallel + vectorized loops for everything else.
"""

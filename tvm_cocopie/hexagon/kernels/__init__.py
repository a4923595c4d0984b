"""GCD²'s int8 HVX kernels, written as TIR (seed 004, §4.3).

- :mod:`.hvx`: HVX instructions as TIR expressions; :mod:`.tirgen`: TIR building helpers;
- :mod:`.gemm`: the shared loop nest, one emitter per multiply instruction
  (``vmpy`` / ``vmpa`` / ``vrmpy``);
- :mod:`.matmul`, :mod:`.conv2d`, :mod:`.depthwise`: the kernels in the three variants;
- :mod:`.grouped`: grouped convs with ``vrmpy``, each output over its own groups only;
- :mod:`.transforms`: weight packing and on-device layout transforms;
- :mod:`.regrid`, :mod:`.shift_copy`: moving a tensor onto a consumer's grid;
- :mod:`.channels`: channel slices, concatenations and shuffles as vector moves;
- :mod:`.elementwise`, :mod:`.attention`, :mod:`.softmax`, :mod:`.layernorm`: element-wise
  operators, attention products and the transformer's row normalizations;
- :mod:`.dispatch`: the kernel of each HVX-layout compute of :mod:`tvm_cocopie.topi.int8.hvx`.
"""

"""DNNFusion (seed 004, ch. 3; 001 §2.2): operator-class fusion, being built.

- :mod:`.mapping`: every operator's mapping type derived from its TIR;
- :mod:`.table`: the fusion-opportunity table (fused type; green, yellow, red);
- :mod:`.plan`: the extended computational graph and the plan exploration;
- :mod:`.apply`: the plan applied (``Primitive`` functions, ``FuseTIR``): the
  :class:`~.apply.DNNFusion` pass, chosen by ``PipelineOptions(fusion="dnnfusion")``;
- :mod:`.database`: the profiling database that will settle yellow pairs;
- :mod:`.patterns`: TVM's ``op_pattern`` from the mapping type where TVM's analysis
  calls an element-moving kernel opaque (symbolic indices), for the stock ``FuseOps``.

The pipeline's default ``fusion`` stage is still TVM's ``FuseOps`` + ``FuseTIR``: the
plan fuses green pairs only until measured yellow decisions make it faster than stock.
"""

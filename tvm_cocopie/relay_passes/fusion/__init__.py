"""DNNFusion (seed 004, ch. 3; 001 §2.2): operator-class fusion, being built.

- :mod:`.mapping`: every operator's mapping type derived from its TIR;
- :mod:`.table`: the fusion-opportunity table (fused type; green, yellow, red).

The ``fusion`` stage still runs TVM's ``FuseOps`` + ``FuseTIR``
(:func:`tvm_cocopie.relay_passes.fusion_passes`) until the plan exploration lands.
"""

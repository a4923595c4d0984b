"""Hexagon schedule rules: a thin rule over the HVX kernels of :mod:`tvm_cocopie.hexagon.kernels`."""

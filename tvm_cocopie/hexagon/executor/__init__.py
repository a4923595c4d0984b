"""A static executor: a whole int8 CNN as one Hexagon program (seed 004, §4.4.4).

GCD² compiles a model ahead of time: every operator gets an execution plan (layout and
instruction, :mod:`..selection`), every tensor a place in memory, and the kernels run in
order. Here the same holds under ``qemu-hexagon``:

1. :func:`.quantization.quantize` builds a chain of convolutions and depthwise convolutions
   (:class:`..selection.networks.Layer`), draws float weights, runs a numpy float forward pass
   and quantizes per tensor (uint8 activations after ReLU, zero point 0; int8
   symmetric weights; int32 bias; :class:`tvm_cocopie.topi.int8.compute.Requant` per layer);
2. :func:`.program.compile_network` picks a plan per layer (global selection over the cost
   model, or given), and emits the kernels: the layer kernels of :mod:`..kernels.conv2d` /
   :mod:`..kernels.depthwise`, and between them *regrid* kernels that move a layer's output
   grid into the next layer's padded, phase-split input grid in the next layer's
   layout (a layout change and re-padding in one gather). A 1x1 stride-1 layer in
   the same layout reads its producer's grid directly (no regrid);
3. a static memory plan (:mod:`.memplan`) gives every tensor an arena offset;
   tensors whose lifetimes do not overlap share memory;
4. :func:`.run.run_network` runs the program once and checks the output bit for bit
   against the numpy int8 reference (:mod:`tvm_cocopie.topi.int8.reference`).

Networks are DAGs of convolutions, depthwise convolutions, residual adds
(:class:`tvm_cocopie.topi.int8.compute.AddRequant`, inputs regridded to one grid where they
differ) and max pools, in topological order (a chain when layers name no inputs); a
global average pool runs as a depthwise convolution over the whole map and a fully
connected layer as a 1x1 convolution of the 1x1 map (:mod:`.qonnx`). Activations are
uint8 with a zero point per tensor (folded into the int32 bias; the padding of a
convolution holds it), weights int8 symmetric per tensor or per output channel (a
file's per-channel scales: a :class:`tvm_cocopie.topi.int8.compute.Requant` with a
multiplier and shift per channel, which the conv, depthwise and matrix-vector kernels
read from a table after the bias).

Whole models: :mod:`.qonnx` reads a QDQ or QOperator ONNX file into a network with the
file's scales and zero points, :mod:`.model` runs a user's file whole (a float one
quantized first by :mod:`tvm_cocopie.ptq`) and compares it with numpy and ONNX Runtime.
Batch 1; the input image is quantized on the host and arrives as NHWC uint8, regridded on
the device like any other tensor. :func:`.quantization.quantize` still builds random
networks for the kernels' tests (ReLU after every conv and add there).

Modules: :mod:`.quantization` (1), :mod:`.program` (2), :mod:`.memplan` (3), :mod:`.run`
(4), :mod:`.presets` (the ResNet-50 / MobileNetV2 trunks), :mod:`.qonnx`, :mod:`.model`.
"""

from __future__ import annotations

from .memplan import plan_memory
from .presets import mobilenetv2_blocks, mobilenetv2_head, resnet50_head, resnet50_stem_chain
from .program import Program, Tensor, choose_plans, compile_network, grid_widths, shift_mask
from .quantization import QLayer, QNetwork, float_forward, quantize, reference_forward
from .run import NetworkResult, run_network

__all__ = [
    "NetworkResult", "Program", "QLayer", "QNetwork", "Tensor", "choose_plans",
    "compile_network", "float_forward", "grid_widths", "mobilenetv2_blocks",
    "mobilenetv2_head", "plan_memory", "quantize", "reference_forward", "resnet50_head",
    "resnet50_stem_chain", "run_network", "shift_mask",
]

"""Each int8 layer as its plain NHWC integer compute: one table for every layer kind.

The executor's HVX programs (:mod:`.program`) run a layer in the layout the selection
chose; two other readers want the layer as it is written, the unscheduled TE compute of
:mod:`tvm_cocopie.topi.int8.compute` / :mod:`tvm_cocopie.topi.int8.sequence` on NHWC
uint8 maps, with the same integers (weights, folded bias, requantization, zero-point
padding, tables):

- stock TVM's lowering of a whole network (:func:`..tools.measure.stock_network`);
- the int8 Relax form (:mod:`..relax_graph`), which writes the layers it has no Relax
  operators for as ``call_tir`` of these computes.

:func:`nhwc_layer` is that table: the PrimFunc of layer ``q`` for its input shapes and the
constant arrays it takes after the inputs, in order.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOperatorError
from ...topi.int8 import compute as int8_compute
from ...topi.int8 import hvx as int8_hvx
from ...topi.int8 import sequence
from ..kernels.elementwise import pack_lut
from .quantization import QLayer


def softmax_tables(op) -> np.ndarray:
    """The ``[2, 8, 128]`` table argument of a softmax compute: the exponential's low and
    high bytes (:meth:`~tvm_cocopie.topi.int8.sequence.Softmax.table_bytes`) as
    :func:`..kernels.elementwise.pack_lut` packs a lookup table."""
    return np.stack([pack_lut(t) for t in op.table_bytes()])


def out_shape(q: QLayer) -> tuple:
    """The NHWC shape of layer ``q``'s output."""
    return (1, *q.layer.out_hw, q.layer.o)


def _rq_tables(q: QLayer) -> list:
    """A per-channel requantization's table after the bias; none per tensor."""
    return [q.rq.table(q.layer.o)] if q.rq.per_channel else []


def nhwc_layer(q: QLayer, shapes: list) -> tuple:
    """``(PrimFunc, constants)``: the NHWC integer compute of layer ``q`` whose inputs have
    the NHWC ``shapes`` (in :func:`.quantization.layer_sources` order), and the constant
    arrays it reads after them. The PrimFunc's parameters are the inputs, the constants,
    then the output."""
    lay = q.layer
    shape = out_shape(q)
    if lay.op in ("conv", "dwconv"):
        func = int8_compute.qconv2d_func(lay.h, lay.w, lay.c, lay.o, lay.k, lay.s, lay.p, q.rq,
                                         lay.op == "dwconv", q.pad_value)
        return func, [q.weights, q.bias, *_rq_tables(q)]
    if lay.op == "gconv":
        func = int8_compute.qgroup_conv2d_func(lay.h, lay.w, lay.c, lay.o, lay.k, lay.s, lay.p,
                                               q.params["groups"], q.rq, q.pad_value)
        return func, [q.weights, q.bias, *_rq_tables(q)]
    if lay.op == "add":
        return int8_compute.qadd_func(shape, q.rq, tuple(shapes[1])), []
    if lay.op == "mul":
        return int8_compute.mul_func(shape, tuple(shapes[1]), q.rq), []
    if lay.op == "lut":
        return int8_compute.lut_func(shape), [q.weights]
    if lay.op == "attention":
        return sequence.attention_func(q.rq, *(tuple(s) for s in shapes)), []
    if lay.op == "concat":
        return int8_compute.concat_func([tuple(s) for s in shapes], lay.o), [q.weights]
    if lay.op == "upsample":
        return int8_hvx.upsample_described(tuple(shapes[0]), q.params["factor"]), []
    if lay.op == "slice":
        return int8_compute.slice_func(tuple(shapes[0]), q.params["offset"], lay.o), []
    if lay.op == "shuffle":
        return int8_compute.shuffle_func(tuple(shapes[0]), q.params["groups"]), []
    if lay.op == "softmax":  # the exponential's byte tables, packed for vlut32
        return sequence.softmax_func(q.rq, shape), [softmax_tables(q.rq)]
    if lay.op == "layernorm":  # gains and biases in HVX lane order
        return sequence.layernorm_func(q.rq, shape), list(q.rq.packed_constants())
    if lay.op == "pool" and lay.k:
        return int8_compute.maxpool_func(lay.h, lay.w, lay.c, lay.k, lay.s, lay.p), []
    raise UnsupportedOperatorError(
        f"{lay.name}: no NHWC integer compute for a {lay.op!r} layer", {lay.op: 1})

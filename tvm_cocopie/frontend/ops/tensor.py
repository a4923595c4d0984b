"""Tensor manipulation operators missing from or wrong in the stock importer.

Specs under https://onnx.ai/onnx/operators/: ``Unsqueeze``/``Squeeze`` (scalar
axes, as function bodies write them), ``EyeLike`` (``dtype``), ``Split``
(zero-sized parts), ``SpaceToDepth`` (``CRD`` mode, opset 28), ``CenterCropPad``,
``Col2Im``, ``ReverseSequence``, ``TensorScatter`` (24), ``TopK`` (every integer
type), ``Det``.
"""

from __future__ import annotations

import itertools

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from ...errors import ModelError
from ...exprs import static_shape
from .common import (
    attr_str,
    const,
    const_value,
    converter,
    dtype_of,
    is_empty,
    normalize_axes,
    rank_of,
    scalar,
    shape_of,
)
from .registry import register


def _vector_axes(inputs, index: int, params):
    """Inputs with operand ``index`` turned from a scalar constant into a 1-D one."""
    value = const_value(inputs[index], params)
    if value is None or value.ndim != 0:
        return inputs
    fixed = stock.onnx_input(list(inputs))
    fixed[index] = relax.const(value.reshape(1), str(value.dtype))
    return fixed


@register("Unsqueeze")
class Unsqueeze(stock.Unsqueeze):
    """``Unsqueeze`` whose ``axes`` input may be a 0-d or constant-folded vector."""
    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        return stock.Unsqueeze._impl_v13(bb, _vector_axes(inputs, 1, params), attr, params)


@register("Squeeze")
class Squeeze(stock.Squeeze):
    """``Squeeze`` whose ``axes`` input may be a 0-d or constant-folded vector."""
    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        return stock.Squeeze._impl_v13(bb, _vector_axes(inputs, 1, params), attr, params)


@register("EyeLike")
class EyeLike(stock.OnnxOpConverter):
    """Ones on diagonal ``k`` of a 2-D tensor shaped like the input, of type ``dtype``."""

    @classmethod
    def _impl_v9(cls, bb, inputs, attr, params):
        shape = static_shape(inputs[0])
        if shape is None or len(shape) != 2:
            raise ModelError("EyeLike needs a static 2-D input")
        dtype = stock.get_type(int(attr["dtype"])) if "dtype" in attr else dtype_of(inputs[0])
        eye = np.eye(shape[0], shape[1], k=int(attr.get("k", 0)))
        return relax.const(eye.astype(dtype), dtype)


@register("Split")
class Split(stock.Split):
    """``Split`` whose constant ``split`` sizes may include zeros."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        sizes = None if is_empty(inputs[1]) else const_value(inputs[1], params)
        if sizes is None or 0 not in sizes.tolist():
            return stock.Split._impl_v13(bb, inputs, attr, params)
        return cls._by_sizes(bb, inputs[0], sizes.tolist(), int(attr.get("axis", 0)))

    @classmethod
    def _impl_v18(cls, bb, inputs, attr, params):
        return cls._impl_v13(bb, inputs, attr, params)

    @staticmethod
    def _by_sizes(bb, data, sizes, axis):
        axis = axis % rank_of(data)
        parts, start = [], 0
        for size in sizes:
            parts.append(bb.emit(relax.op.strided_slice(data, [axis], [start], [start + size])))
            start += size
        return relax.Tuple(parts)


@register("SpaceToDepth")
class SpaceToDepth(stock.SpaceToDepth):
    """Blocks of ``blocksize`` x ``blocksize`` pixels into channels, in ``DCR``
    (default) or ``CRD`` order."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        if attr_str(attr, "mode", "DCR") != "CRD":
            return stock.SpaceToDepth._impl_v1(bb, inputs, attr, params)
        op = relax.op
        x = inputs[0]
        n, c, h, w = shape_of(x)
        b = int(attr["blocksize"])
        x = bb.emit(op.reshape(x, [n, c, h // b, b, w // b, b]))
        x = bb.emit(op.permute_dims(x, [0, 1, 3, 5, 2, 4]))
        return op.reshape(x, [n, c * b * b, h // b, w // b])


@register("CenterCropPad")
class CenterCropPad(stock.OnnxOpConverter):
    """Crop or zero-pad each axis in ``axes`` to ``shape``, keeping the centre."""

    @classmethod
    def _impl_v18(cls, bb, inputs, attr, params):
        x = inputs[0]
        shape = static_shape(x)
        target = const_value(inputs[1], params)
        if shape is None or target is None:
            raise ModelError("CenterCropPad needs a static input shape and a constant shape")
        rank = len(shape)
        axes = normalize_axes(attr.get("axes", range(rank)), rank)
        pads = [[0, 0] for _ in range(rank)]
        begin, end = list(range(rank)), list(range(rank))
        begin, end = [0] * rank, list(shape)
        for axis, size in zip(axes, target.reshape(-1).tolist()):
            diff = shape[axis] - int(size)
            if diff > 0:  # crop: the extra goes to the end when odd
                begin[axis] = diff // 2
                end[axis] = begin[axis] + int(size)
            elif diff < 0:  # pad: the extra goes to the end when odd
                pads[axis] = [(-diff) // 2, -diff - (-diff) // 2]
        out = bb.emit(relax.op.strided_slice(x, list(range(rank)), begin, end))
        if any(p != [0, 0] for p in pads):
            flat = [v for p in pads for v in p]
            out = bb.emit(relax.op.nn.pad(out, flat))
        return out


@register("Col2Im")
class Col2Im(stock.OnnxOpConverter):
    """Sum sliding-window columns ``[N, C*prod(block), L]`` back into an image.

    Each column entry lands on one image position (or in the padding, dropped); the
    mapping depends on shapes only, so it is a constant 0/1 matrix and the op one
    matmul."""

    @classmethod
    def _impl_v18(cls, bb, inputs, attr, params):
        x = inputs[0]
        image = const_value(inputs[1], params)
        block = const_value(inputs[2], params)
        shape = static_shape(x)
        if image is None or block is None or shape is None:
            raise ModelError("Col2Im needs constant image_shape and block_shape")
        image, block = image.reshape(-1).tolist(), block.reshape(-1).tolist()
        dims = len(image)
        dil = list(attr.get("dilations", [1] * dims))
        stride = list(attr.get("strides", [1] * dims))
        pads = list(attr.get("pads", [0] * 2 * dims))
        n, ckk, cols = shape
        kernel = int(np.prod(block))
        channels = ckk // kernel
        counts = [(image[d] + pads[d] + pads[d + dims] - dil[d] * (block[d] - 1) - 1)
                  // stride[d] + 1 for d in range(dims)]
        if int(np.prod(counts)) != cols:
            raise ModelError(f"Col2Im: {cols} columns do not tile image {image} with "
                             f"block {block}")
        scatter = np.zeros((kernel * cols, int(np.prod(image))), dtype=dtype_of(x))
        for k, offs in enumerate(itertools.product(*[range(b) for b in block])):
            for col, pos in enumerate(itertools.product(*[range(c) for c in counts])):
                where = [pos[d] * stride[d] + offs[d] * dil[d] - pads[d] for d in range(dims)]
                if all(0 <= where[d] < image[d] for d in range(dims)):
                    scatter[k * cols + col, int(np.ravel_multi_index(where, image))] = 1
        flat = bb.emit(relax.op.reshape(x, [n, channels, kernel * cols]))
        out = bb.emit(relax.op.matmul(flat, const(scatter)))
        return relax.op.reshape(out, [n, channels, *image])


def _reverse_sequence(bb, inputs, attr, params):
    """Reverse the first ``sequence_lens[b]`` steps of each batch entry."""
    op = relax.op
    x, lens = inputs[0], inputs[1]
    time_axis = int(attr.get("time_axis", 0))
    batch_axis = int(attr.get("batch_axis", 1))
    shape = shape_of(x)
    steps = shape[time_axis]
    t = op.arange(0, steps, dtype="int64")
    t = bb.emit(op.reshape(t, [steps, 1] if time_axis == 0 else [1, steps]))
    length = bb.emit(op.astype(lens, "int64"))
    length = bb.emit(op.reshape(length, [1, -1] if time_axis == 0 else [-1, 1]))
    source = bb.emit(op.where(op.less(t, length),
                              op.subtract(op.subtract(length, scalar(1, "int64")), t), t))
    index_shape = [1] * len(shape)
    index_shape[time_axis], index_shape[batch_axis] = (shape[time_axis],
                                                       shape[batch_axis])
    index = bb.emit(op.reshape(source, index_shape))
    index = bb.emit(op.broadcast_to(index, shape))
    return op.gather_elements(x, index, axis=time_axis)


ReverseSequence = converter("ReverseSequence", 10, _reverse_sequence)


@register("TensorScatter")
class TensorScatter(stock.OnnxOpConverter):
    """Write ``update`` into the cache along ``axis`` at each batch entry's index
    (``mode=circular`` wraps around)."""

    @classmethod
    def _impl_v24(cls, bb, inputs, attr, params):
        op = relax.op
        cache, update = inputs[0], inputs[1]
        indices = None if is_empty(inputs[2]) else inputs[2]
        rank = rank_of(cache)
        axis = int(attr.get("axis", -2)) % rank
        cshape, ushape = shape_of(cache), shape_of(update)
        length, steps = cshape[axis], ushape[axis]
        batch = cshape[0]
        start = (bb.emit(op.astype(indices, "int64")) if indices is not None
                 else const(np.zeros([batch]), "int64"))
        # for every cache slot: which update step lands there, if any
        slot = bb.emit(op.reshape(op.arange(0, length, dtype="int64"), [1, length]))
        step = bb.emit(op.subtract(slot, op.reshape(start, [batch, 1])))
        if attr_str(attr, "mode", "linear") == "circular":
            step = bb.emit(op.floor_mod(step, scalar(length, "int64")))
        hit = bb.emit(op.logical_and(op.greater_equal(step, scalar(0, "int64")),
                                     op.less(step, scalar(steps, "int64"))))
        safe = bb.emit(op.where(hit, step, scalar(0, "int64")))
        view = [1] * rank
        view[0], view[axis] = batch, length
        gather_shape = list(cshape)
        gather_shape[axis] = length
        index = bb.emit(op.broadcast_to(op.reshape(safe, view), gather_shape))
        moved = bb.emit(op.gather_elements(update, index, axis=axis))
        return op.where(op.reshape(hit, view), moved, cache)


@register("TopK")
class TopK(stock.TopK):
    """``TopK`` for any numeric type (TVM's sort lacks unsigned 64-bit: widened)."""

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        x = inputs[0]
        if dtype_of(x) != "uint64":
            return stock.TopK._impl_v11(bb, inputs, attr, params)
        fixed = stock.onnx_input(list(inputs))
        fixed[0] = bb.emit(relax.op.astype(x, "float64"))
        result = bb.emit(stock.TopK._impl_v11(bb, fixed, attr, params))
        values = bb.emit(relax.TupleGetItem(result, 0))
        return relax.Tuple([bb.emit(relax.op.astype(values, "uint64")),
                            bb.emit(relax.TupleGetItem(result, 1))])


@register("Det")
class Det(stock.OnnxOpConverter):
    """Determinant of the trailing square matrices, by Gaussian elimination with
    partial pivoting unrolled over the (static) matrix size."""

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        op = relax.op
        x = inputs[0]
        shape = static_shape(x)
        if shape is None:
            raise ModelError("Det needs a static input shape")
        n = shape[-1]
        dtype = dtype_of(x)
        batch = shape[:-2]
        a = bb.emit(op.reshape(x, [-1, n, n]))
        det = bb.emit(op.ones([shape and int(np.prod(batch)) or 1], dtype))
        rows = const(np.arange(n).reshape(1, n, 1), "int64")
        for k in range(n):
            col = bb.emit(op.strided_slice(a, [1, 2], [k, k], [n, k + 1]))  # [B, n-k, 1]
            pivot_rel = bb.emit(op.argmax(op.abs(col), axis=1, keepdims=False))  # [B, 1]
            pivot = bb.emit(op.add(op.astype(pivot_rel, "int64"), scalar(k, "int64")))
            # swap rows k and pivot via a permutation of row indices
            p3 = bb.emit(op.reshape(pivot, [-1, 1, 1]))
            kk = scalar(k, "int64")
            perm = op.where(op.equal(rows, kk), p3, op.where(op.equal(rows, p3), kk, rows))
            perm = bb.emit(op.broadcast_to(perm, [a.ty.shape.values[0], n, n]))
            a = bb.emit(op.gather_elements(a, perm, axis=1))
            swapped = bb.emit(op.not_equal(op.reshape(pivot, [-1]), kk))
            sign = op.where(swapped, scalar(-1, dtype), scalar(1, dtype))
            diag = bb.emit(op.strided_slice(a, [1, 2], [k, k], [k + 1, k + 1]))
            diag = bb.emit(op.reshape(diag, [-1]))
            det = bb.emit(op.multiply(op.multiply(det, sign), diag))
            if k + 1 < n:
                safe = bb.emit(op.where(op.equal(diag, scalar(0, dtype)), scalar(1, dtype), diag))
                below = bb.emit(op.strided_slice(a, [1], [k + 1], [n]))  # [B, n-k-1, n]
                factor = bb.emit(op.divide(op.strided_slice(below, [2], [k], [k + 1]),
                                           op.reshape(safe, [-1, 1, 1])))
                pivot_row = bb.emit(op.strided_slice(a, [1], [k], [k + 1]))
                below = bb.emit(op.subtract(below, op.multiply(factor, pivot_row)))
                a = bb.emit(op.concat([op.strided_slice(a, [1], [0], [k + 1]), below], axis=1))
        return op.reshape(det, batch) if batch else op.reshape(det, [])


@register("OneHot")
class OneHot(stock.OneHot):
    """``values[1]`` where the index (negative ones count from ``depth``) equals the
    position along the new ``axis``, ``values[0]`` elsewhere and for indices out of
    ``[-depth, depth)``."""

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        op = relax.op
        indices = inputs[0]
        depth = const_value(inputs[1], params)
        values = inputs[2]
        if depth is None:
            raise ModelError("OneHot needs a constant depth")
        depth = int(depth.reshape(-1)[0])
        rank = rank_of(indices)
        axis = int(attr.get("axis", -1))
        axis = axis + rank + 1 if axis < 0 else axis
        idx = bb.emit(op.astype(indices, "int64"))
        idx = bb.emit(op.where(op.less(idx, scalar(0, "int64")),
                               op.add(idx, scalar(depth, "int64")), idx))
        view = [1] * (rank + 1)
        view[axis] = depth
        positions = const(np.arange(depth).reshape(view), "int64")
        hit = bb.emit(op.equal(op.expand_dims(idx, axis), positions))
        off = bb.emit(op.strided_slice(values, [0], [0], [1]))
        on = bb.emit(op.strided_slice(values, [0], [1], [2]))
        return op.where(hit, op.reshape(on, []), op.reshape(off, []))

"""Image resampling: ``Resize`` (opsets 10-19) and ``Upsample`` (7, 9).

Spec: https://onnx.ai/onnx/operators/onnx__Resize.html. Resizing is separable, so
each resized axis is done on its own as a gather followed by a weighted sum over a
few taps. The taps and their weights depend only on shapes, scales and attributes,
so they are computed here, at import time, in float64 numpy, and enter the graph as
constants; the graph itself is ``take`` + ``multiply`` + ``sum`` (or one ``take``
for ``nearest``). This covers every mode of the spec exactly: all coordinate
transformations (``half_pixel``, ``half_pixel_symmetric``, ``pytorch_half_pixel``,
``align_corners``, ``asymmetric``, ``tf_crop_and_resize`` with its extrapolation
value), nearest rounding modes, linear and cubic (``cubic_coeff_a``,
``exclude_outside``), ``antialias`` when downsampling, ``axes`` and
``keep_aspect_ratio_policy``. TVM's ``resize2d`` derives the sampling ratio from
the integer output size rather than the given scale and has no antialias, which
made most of ONNX's resize cases fail.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ...errors import ModelError
from ...exprs import batched_shape, static_shape
from .common import (
    attr_str,
    const,
    const_value,
    dtype_of,
    is_empty,
    is_float,
    normalize_axes,
    rank_of,
)
from .registry import register


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float,
                       roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Where each output index samples the input (float64), and which are extrapolated."""
    y = np.arange(out_size, dtype=np.float64)
    out_width = scale * in_size  # the ideal (unrounded) output length
    outside = None
    if mode == "align_corners":
        x = np.zeros_like(y) if out_width == 1 else y * (in_size - 1) / (out_width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if out_width == 1:
            x = np.full_like(y, (end - start) * (in_size - 1) / 2)
        else:
            x = y * (end - start) * (in_size - 1) / (out_width - 1)
        x = x + start * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full_like(y, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        shift = in_size / 2 * (1 - out_size / out_width)
        x = shift + (y + 0.5) / scale - 0.5
    else:
        raise ModelError(f"unknown coordinate_transformation_mode {mode!r}")
    return x, outside


def _keys(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances ``d``."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def taps(x: np.ndarray, in_size: int, scale: float, mode: str, nearest_mode: str,
         cubic_a: float, antialias: bool, exclude_outside: bool):
    """``(indices[out, n], weights[out, n])`` sampling the input at ``x``."""
    base = np.floor(x)
    on_grid = x == base
    if mode == "nearest":
        frac = x - base
        up = {"round_prefer_floor": frac > 0.5, "round_prefer_ceil": frac >= 0.5,
              "floor": np.zeros_like(on_grid), "ceil": ~on_grid}.get(nearest_mode)
        if up is None:
            raise ModelError(f"unknown nearest_mode {nearest_mode!r}")
        idx = np.where(on_grid, x, base + up)
        return np.clip(idx, 0, in_size - 1).astype(np.int64)[:, None], None
    # the window starts left of x; an on-grid x counts as ratio 1 from x - 1
    base = np.where(on_grid, x - 1, base)
    ratio = x - base
    stretch = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        first = int(np.floor(-1 / stretch) + 1) if antialias else 0
        offsets = np.arange(first, 2 - first)
        weights = np.clip(1 - np.abs((offsets[None, :] - ratio[:, None]) * stretch), 0, 1)
    elif mode == "cubic":
        first = int(np.floor(-2 / stretch) + 1) if antialias else -1
        offsets = np.arange(first, 2 - first)
        weights = _keys((offsets[None, :] - ratio[:, None]) * stretch, cubic_a)
    else:
        raise ModelError(f"unknown Resize mode {mode!r}")
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    idx = base[:, None].astype(np.int64) + offsets[None, :]
    if exclude_outside:
        weights = np.where((idx < 0) | (idx >= in_size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_size - 1), weights


def resize(bb, data, out_shape, scales, attr, roi=None):
    """Resample ``data`` (static shape) to ``out_shape`` with per-axis ``scales``."""
    op = relax.op
    shape = static_shape(data)
    rank = len(shape)
    dtype = dtype_of(data)
    work = dtype if is_float(dtype) else "float32"
    mode = attr_str(attr, "mode", "nearest")
    coord = attr_str(attr, "coordinate_transformation_mode", "half_pixel")
    nearest_mode = attr_str(attr, "nearest_mode", "round_prefer_floor")
    cubic_a = float(attr.get("cubic_coeff_a", -0.75))
    antialias = bool(attr.get("antialias", 0)) and mode != "nearest"
    exclude = bool(attr.get("exclude_outside", 0))
    extrapolation = float(attr.get("extrapolation_value", 0.0))
    x = data if work == dtype else bb.emit(op.astype(data, work))
    for axis in range(rank):
        out, size, scale = int(out_shape[axis]), shape[axis], float(scales[axis])
        axis_roi = None if roi is None else (float(roi[axis]), float(roi[axis + rank]))
        identity = (out == size and math.isclose(scale, 1.0)
                    and (axis_roi is None or axis_roi == (0.0, 1.0)))
        if identity:
            continue
        if out == 0 or size == 0:
            raise ModelError("Resize to or from an empty axis is not supported")
        coords, outside = source_coordinates(coord, out, size, scale, axis_roi)
        idx, weights = taps(coords, size, scale, mode, nearest_mode, cubic_a, antialias, exclude)
        n = idx.shape[1]
        picked = bb.emit(op.take(x, const(idx.reshape(-1), "int64"), axis))
        if weights is None:
            x = picked
        else:
            split = shape_after(bb, picked)
            split[axis:axis + 1] = [out, n]
            picked = bb.emit(op.reshape(picked, split))
            wshape = [1] * (rank + 1)
            wshape[axis], wshape[axis + 1] = out, n
            w = const(weights.reshape(wshape), work)
            x = bb.emit(op.sum(op.multiply(picked, w), axis=[axis + 1]))
        if outside is not None and outside.any():
            mshape = [1] * rank
            mshape[axis] = out
            mask = const(outside.reshape(mshape))
            x = bb.emit(op.where(mask, const(extrapolation, work), x))
    if work != dtype:
        info = np.iinfo(np.dtype(dtype))
        x = op.clip(op.round(x), float(info.min), float(info.max))
        x = op.astype(x, dtype)
    return x


def shape_after(bb, expr) -> list[int]:
    """The static shape of an emitted expression, as ints."""
    return [int(v) for v in expr.ty.shape.values]


def _requested(shape, scales, sizes, axes, policy):
    """(output shape, per-axis scales) from the ``scales``/``sizes`` inputs."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else axes
    if sizes is not None:
        out = list(shape)
        for a, s in zip(axes, sizes):
            out[a] = int(s)
        ratio = [out[i] / shape[i] if shape[i] else 1.0 for i in range(rank)]
        if policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            common = pick(ratio[a] for a in axes)
            ratio = [common if i in axes else 1.0 for i in range(rank)]
            out = [int(common * shape[i] + 0.5) if i in axes else shape[i] for i in range(rank)]
        elif policy != "stretch":
            raise ModelError(f"unknown keep_aspect_ratio_policy {policy!r}")
        return out, ratio
    ratio = [1.0] * rank
    for a, s in zip(axes, scales):
        ratio[a] = float(s)
    return [int(shape[i] * ratio[i]) for i in range(rank)], ratio


def symbolic_resize(bb, data, scales, sizes, attr, params):
    """``Resize`` of a tensor with symbolic dims (SOD²: one build for every size), in the
    case the taps need no sizes: nearest sampling at whole-number scales with
    ``asymmetric`` coordinates rounded down (a detector neck's 2x/4x/8x upsampling),
    where output index ``i`` reads input ``i // s``: a ``take`` by a computed index per
    axis, the ops :mod:`tvm_cocopie.relay_passes.layout.sink` keeps in the blocked
    layout. Other modes need the input's size at import time."""
    why = None
    if not is_empty(sizes):
        why = "output sizes (not scales)"
    elif attr_str(attr, "mode", "nearest") != "nearest":
        why = f"mode {attr_str(attr, 'mode', 'nearest')}"
    elif attr_str(attr, "coordinate_transformation_mode", "half_pixel") != "asymmetric":
        why = f"coordinate_transformation_mode {attr_str(attr, 'coordinate_transformation_mode')}"
    elif attr_str(attr, "nearest_mode", "round_prefer_floor") != "floor":
        why = f"nearest_mode {attr_str(attr, 'nearest_mode', 'round_prefer_floor')}"
    value = None if why or is_empty(scales) else const_value(scales, params)
    dims = batched_shape(data, tuple(range(rank_of(data))))
    if why is None and (value is None or dims is None or attr.get("axes") is not None):
        why = "scales that are not constant, or an axes attribute"
    if why is None and not all(float(v).is_integer() and v >= 1 for v in value.reshape(-1)):
        why = f"scales {value.reshape(-1).tolist()} (whole numbers only)"
    if why is not None:
        raise ModelError(f"Resize of a tensor with symbolic dims supports nearest, asymmetric, "
                         f"floor sampling at whole-number scales; this one has {why}: fix "
                         "the input shape with shapes={...}")
    x = data
    for axis, scale in enumerate(int(v) for v in value.reshape(-1)):
        if scale == 1:
            continue
        index = relax.op.arange(0, dims[axis] * scale, dtype="int64")
        index = bb.emit(relax.op.floor_divide(index, relax.const(scale, "int64")))
        x = bb.emit(relax.op.take(x, index, axis=axis))
    return x


@register("Resize")
class Resize(OnnxOpConverter):
    """ONNX ``Resize``; opset 10 takes ``(X, scales)`` and samples ``asymmetric``."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        attr = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor", **attr}
        return cls._convert(bb, inputs[0], None, inputs[1], None, attr, params)

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs[0], inputs[1], inputs[2], inputs[3], attr, params)

    @classmethod
    def _convert(cls, bb, data, roi, scales, sizes, attr, params):
        shape = static_shape(data)
        if shape is None:
            return symbolic_resize(bb, data, scales, sizes, attr, params)
        values = {}
        for name, expr in (("roi", roi), ("scales", scales), ("sizes", sizes)):
            if is_empty(expr):
                values[name] = None
                continue
            value = const_value(expr, params)
            if value is None:
                raise ModelError(f"Resize needs constant {name}; make it an initializer")
            values[name] = value.reshape(-1) if value.size else None
        axes = attr.get("axes")
        axes = None if axes is None else normalize_axes(axes, rank_of(data))
        out_shape, ratio = _requested(shape, values["scales"], values["sizes"], axes,
                                      attr_str(attr, "keep_aspect_ratio_policy", "stretch"))
        roi_full = values["roi"]
        if roi_full is not None and axes is not None:
            rank = len(shape)
            full = [0.0] * rank + [1.0] * rank
            for i, a in enumerate(axes):
                full[a], full[a + rank] = roi_full[i], roi_full[i + len(axes)]
            roi_full = np.array(full)
        if attr_str(attr, "coordinate_transformation_mode") != "tf_crop_and_resize":
            roi_full = None
        return resize(bb, data, out_shape, ratio, attr, roi_full)


@register("Upsample")
class Upsample(OnnxOpConverter):
    """ONNX ``Upsample`` (deprecated): ``Resize`` with ``asymmetric`` sampling."""

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs[0], np.array(attr.get("scales", ())), attr)

    @classmethod
    def _impl_v9(cls, bb, inputs, attr, params):
        scales = const_value(inputs[1], params)
        if scales is None:
            raise ModelError("Upsample needs constant scales; make them an initializer")
        return cls._convert(bb, inputs[0], scales.reshape(-1), attr)

    @classmethod
    def _convert(cls, bb, data, scales, attr):
        shape = static_shape(data)
        if shape is None:
            attr = {"mode": attr_str(attr, "mode", "nearest"),
                    "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
            return symbolic_resize(bb, data, const(np.asarray(scales, "float32")), None, attr,
                                   {})
        attr = {"mode": attr_str(attr, "mode", "nearest"),
                "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        out_shape = [int(d * s) for d, s in zip(shape, scales)]
        return resize(bb, data, out_shape, [float(s) for s in scales], attr)

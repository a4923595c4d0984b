"""Numpy references of the int8 operators in :mod:`.compute` (exact, int64 inside).

Every Hexagon kernel (seed 004, ch. 4, GCD²) is checked bit for bit against these.
"""

from __future__ import annotations

import numpy as np

from .compute import Requant, conv2d_output_size


def qmatmul(x: np.ndarray, w: np.ndarray, bias: np.ndarray, rq: Requant) -> np.ndarray:
    """uint8 [M, K] x int8 [K, N] + int32 bias [N] -> requantized uint8 [M, N]."""
    acc = x.astype(np.int64) @ w.astype(np.int64) + bias.astype(np.int64)
    return rq.numpy(acc)


def _windows(x: np.ndarray, kernel: int, stride: int, pad: int, pad_value: int = 0):
    _, h, w, _ = x.shape
    oh, ow = conv2d_output_size(h, kernel, stride, pad), conv2d_output_size(w, kernel, stride, pad)
    xp = np.pad(x[0].astype(np.int64), ((pad, pad), (pad, pad), (0, 0)),
                constant_values=pad_value)
    for dy in range(kernel):
        for dx in range(kernel):
            yield dy, dx, xp[dy : dy + stride * oh : stride, dx : dx + stride * ow : stride]


def qconv2d_nhwc(x, w, bias, rq: Requant, stride: int = 1, pad: int = 0,
                 pad_value: int = 0) -> np.ndarray:
    """x uint8 [1, H, W, C], w int8 [KH, KW, C, O] -> uint8 [1, OH, OW, O]; the padding
    holds ``pad_value`` (the input's zero point)."""
    acc = 0
    for dy, dx, win in _windows(x, w.shape[0], stride, pad, pad_value):
        acc = acc + win @ w[dy, dx].astype(np.int64)
    return rq.numpy(acc + bias.astype(np.int64))[None]


def qgroup_conv2d_nhwc(x, w, bias, rq: Requant, groups: int, stride: int = 1, pad: int = 0,
                       pad_value: int = 0) -> np.ndarray:
    """x uint8 [1, H, W, C], w int8 [KH, KW, C/g, O] (output channel ``n`` reads group
    ``n // (O/g)``) -> uint8 [1, OH, OW, O]: each group a :func:`qconv2d_nhwc`."""
    cg, og = x.shape[3] // groups, w.shape[3] // groups
    return np.concatenate([
        qconv2d_nhwc(x[..., i * cg:(i + 1) * cg], w[..., i * og:(i + 1) * og],
                     bias[i * og:(i + 1) * og], rq.channels(i * og, (i + 1) * og), stride, pad,
                     pad_value)
        for i in range(groups)], axis=-1)


def qdepthwise_conv2d_nhwc(x, w, bias, rq: Requant, stride: int = 1, pad: int = 0,
                           pad_value: int = 0):
    """x uint8 [1, H, W, C], w int8 [KH, KW, C] -> uint8 [1, OH, OW, C]."""
    acc = 0
    for dy, dx, win in _windows(x, w.shape[0], stride, pad, pad_value):
        acc = acc + win * w[dy, dx].astype(np.int64)
    return rq.numpy(acc + bias.astype(np.int64))[None]


def maxpool_nhwc(x: np.ndarray, kernel: int, stride: int, pad: int) -> np.ndarray:
    """Max pool of non-negative uint8 [1, H, W, C] with zero padding (zero is the minimum)."""
    out = None
    for _, _, win in _windows(x, kernel, stride, pad):
        out = win if out is None else np.maximum(out, win)
    return out.astype(np.uint8)[None]

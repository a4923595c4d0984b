"""Transposed convolutions as a convolution plus a pixel shuffle (sub-pixel convolution).

A transposed conv of stride ``s`` writes output ``o = s*q + r`` (phase ``r``) from the
taps ``t = t0 + s*j`` of its kernel, ``t0 = (r + pad) mod s``, reading input
``i = q + c_r - j`` with ``c_r = (r + pad - t0) / s``: per phase, a plain correlation
of the input with every ``s``-th tap, flipped. Per spatial dim::

    y[s*q + r] = sum_j x[q + c_r - j] * W[t0 + s*j]

All phases read the input window ``[q + lo, q + hi]`` (``lo`` the least ``c_r - j``,
``hi`` the largest ``c_r``), so one convolution with a kernel of ``hi - lo + 1`` taps
computes them all as ``O * s * s`` output channels (the taps a phase lacks are zero),
and a depth-to-space interleave puts each phase's pixels in place, cropped to the
output size (output padding and odd sizes only change the crop). With ``kernel ==
stride`` (the 2x2/stride-2 upsampling of DBNet / U-Net heads) it is a 1x1 conv; a
4x4/stride-2/pad-1 deconv (GAN generators, CenterNet, segmentation decoders) a 3x3 conv
to 4 phases (9/16 of the kernel taps per output, against a zero-dilated input's 4x work).
Groups carry over (each group's phases are contiguous channels). TVM lowers a
transposed conv by dilating the input with zeros and running a direct conv in NCHW:
``s * s`` times the FLOPs, no layout the blocked kernels use; a 4x4/stride-2 deconv of
128 -> 64 channels at 32x32 ran 566 ms against ONNX Runtime's 3.1. 1-D and 3-D transposed convs
become 1-D and 3-D convs (which :mod:`.conv1d` and :mod:`.conv3d` then run as 2-D ones). Only calls with a constant
weight and no dilation are rewritten (the weight is reorganized with numpy); the rest
keep TVM's lowering.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax, te

from ...exprs import declared_out_dtype, ints, static_shape
from .call_rewrite import rewrite_calls

log = logging.getLogger(__name__)


def phase_taps(k: int, s: int, pad: int) -> tuple[int, list[list[tuple[int, int]]]]:
    """One spatial dim of a stride-``s`` transposed conv with ``k`` taps, ``pad`` before:
    ``(lo, taps)`` where ``taps[r]`` lists ``(window position, kernel tap)`` of phase
    ``r``: ``y[s*q + r] = sum x[q + lo + m] * W[t]`` over its ``(m, t)``."""
    reads = []
    for r in range(s):
        t0 = (r + pad) % s
        c = (r + pad - t0) // s
        reads.append([(c - j, t0 + s * j) for j in range(-(-(k - t0) // s))])
    lo = min((i for phase in reads for i, _ in phase), default=0)
    return lo, [[(i - lo, t) for i, t in phase] for phase in reads]


def window(k: int, s: int, pad: int) -> tuple[int, int]:
    """``(lo, taps of the window)`` of :func:`phase_taps`' one convolution."""
    lo, taps = phase_taps(k, s, pad)
    return lo, 1 + max((m for phase in taps for m, _ in phase), default=0)


def subpixel_weight(weight: np.ndarray, strides, pads, groups: int = 1) -> np.ndarray:
    """``(C, O/g, *k)`` transposed-conv weight -> ``(O*prod(s), C/g, *window)`` conv
    weight whose output channel ``o * prod(s) + phase`` (phase row-major over the dims)
    is the module docstring's phase ``r`` of output channel ``o``."""
    c, og = weight.shape[:2]
    ks = weight.shape[2:]
    dims = [phase_taps(k, s, p) for k, s, p in zip(ks, strides, pads)]
    sizes = [window(k, s, p)[1] for k, s, p in zip(ks, strides, pads)]
    phases = int(np.prod(strides))
    cg = c // groups
    out = np.zeros((groups * og * phases, cg, *sizes), weight.dtype)
    per_group = weight.reshape(groups, cg, og, *ks)
    for phase, rs in enumerate(np.ndindex(*strides)):
        for combo in np.ndindex(*[len(dims[d][1][r]) for d, r in enumerate(rs)]):
            pos = tuple(dims[d][1][r][j][0] for d, (r, j) in enumerate(zip(rs, combo)))
            tap = tuple(dims[d][1][r][j][1] for d, (r, j) in enumerate(zip(rs, combo)))
            # (g, cg, og) -> output channels g*og*phases + o*phases + phase
            block = per_group[(slice(None), slice(None), slice(None), *tap)]
            for g in range(groups):
                rows = g * og * phases + np.arange(og) * phases + phase
                out[(rows, slice(None), *pos)] = block[g].T
    return out


def _rewrite(builder, call, rank: int):
    """A constant-weight transposed conv of ``rank`` spatial dims as conv + shuffle, or None."""
    attrs = call.attrs
    layouts = {1: ("NCW", "IOW"), 2: ("NCHW", "IOHW"), 3: ("NCDHW", "IODHW")}[rank]
    weight = call.args[1]
    if not (isinstance(weight, tvm.ir.GenericConst) and isinstance(weight.value, tvm.runtime.Tensor)):
        return None
    if (str(attrs.data_layout), str(attrs.kernel_layout)) != layouts or str(
            attrs.out_layout) != layouts[0]:
        return None
    if any(d != 1 for d in ints(attrs.dilation)) or str(weight.value.dtype) != "float32":
        return None
    x = call.args[0]
    xshape, oshape = static_shape(x), static_shape(call)
    if xshape is None or oshape is None:
        return None
    strides, padding, groups = ints(attrs.strides), ints(attrs.padding), int(attrs.groups)
    w = weight.value.numpy()
    ks = w.shape[2:]
    begins = padding[:rank]
    spans = [window(k, s, p) for k, s, p in zip(ks, strides, begins)]
    counts = [-(-o // s) for o, s in zip(oshape[2:], strides)]  # outputs per phase
    # input window of output q: [q + lo, q + lo + size): pad (or crop) the input to it
    before = [-lo for lo, _ in spans]
    after = [q + lo + size - 1 - i for (lo, size), q, i in zip(spans, counts, xshape[2:])]
    if any(v < 0 for v in before + after):
        begin = [max(0, -v) for v in before]
        end = [i - max(0, -v) for v, i in zip(after, xshape[2:])]
        x = builder.emit(relax.op.strided_slice(x, list(range(2, 2 + rank)), begin, end))
        before, after = [max(0, v) for v in before], [max(0, v) for v in after]
    out_dtype = declared_out_dtype(attrs)
    kernel = relax.const(subpixel_weight(w, strides, begins, groups))
    conv = {1: relax.op.nn.conv1d, 2: relax.op.nn.conv2d, 3: relax.op.nn.conv3d}[rank]
    z = builder.emit(conv(x, kernel, padding=before + after, groups=groups, out_dtype=out_dtype))
    return builder.emit_te(pixel_shuffle, z, oshape[1], strides, oshape[2:],
                           primfunc_name_hint="pixel_shuffle")


def pixel_shuffle(z, channels: int, strides, size=None):
    """Depth to space: ``y[n, c, i, j] = z[n, (c*sh + i % sh)*sw + j % sw, i // sh, j // sw]``
    (each sub-pixel phase's channels interleaved into a ``strides`` times larger map,
    cropped to ``size``; any number of spatial dims). An int ``strides`` is every dim's.

    One injective compute whose indices divide by the constant strides only: written as
    reshape, transpose and reshape, a symbolic height and width put the run-time sizes
    in every flattened index, and the fused copy took minutes for LLVM to compile."""
    n, _, *spatial = z.shape
    if isinstance(strides, int):
        strides = [strides] * len(spatial)
    size = size or [d * s for d, s in zip(spatial, strides)]

    def value(b, c, *idx):
        phase = c
        for i, s in zip(idx, strides):
            phase = phase * s + i % s
        return z[(b, phase, *(i // s for i, s in zip(idx, strides)))]

    return te.compute((n, channels, *size), value, name="pixel_shuffle")


@tvm.transform.module_pass(opt_level=0, name="SubpixelConvTranspose")
def subpixel_conv_transpose(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """The pass: constant-weight ``conv1d/2d/3d_transpose`` -> conv + pixel shuffle."""
    total = 0
    for op, rank in (("relax.nn.conv2d_transpose", 2), ("relax.nn.conv1d_transpose", 1),
                     ("relax.nn.conv3d_transpose", 3)):
        mod, rewritten = rewrite_calls(mod, op, lambda b, c, rank=rank: _rewrite(b, c, rank))
        total += rewritten
    if total:
        log.debug("rewrote %d transposed convolutions as sub-pixel convolutions", total)
    return mod

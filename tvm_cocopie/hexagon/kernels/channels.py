"""Channel slices, concatenations and shuffles as HVX vector moves on grids.

ShuffleNet's units split a map's channels in two, run one half through a branch,
concatenate the halves and shuffle the channels (Ma et al., ShuffleNetV2); lowered by
TVM from NHWC maps they cost a byte gather each, plus an unpack and a regrid around
them. On GCD²'s grids (seed 004, Fig. 4.2) a vector of channel group ``g`` holds ``v``
adjacent channels of ``128 / v`` rows, one row per ``v``-byte lane, so every output
vector is assembled from the input vectors holding its channels, the same rows in the
same lanes: per output byte position ``t`` of a lane, the input lane shifted by whole
bytes and masked. Runs of channels that keep their byte position and input vector
(aligned slices, concat halves) need one shift and mask, or none; a shuffle of two
groups merges at most four shifted inputs. No per-byte index, test or load.
"""

from __future__ import annotations

from tvm import tirx

from ...topi.int8.hvx import channel_sources
from ...topi.int8.layouts import LAYOUT_OF, VBYTES
from .tirgen import T, kernel, ramp


def _terms(sources: list, q: int, v: int) -> dict:
    """``{(input, input group, byte shift): lane mask}`` of output group ``q``: each of
    its ``v`` channels as a byte of its input's lane moved by ``shift`` bytes."""
    terms: dict = {}
    for t in range(v):
        c = q * v + t
        if c >= len(sources):  # a padded channel: left 0
            continue
        k, ch = sources[c]
        key = (k, ch // v, t - ch % v)
        terms[key] = terms.get(key, 0) | (0xFF << (8 * t))
    return terms


def channel_move_kernel(kind: str, variant: str, src_shapes: list, in_channels: list,
                        out_channels: int, params: dict):
    """PrimFunc ``(x_0, .., x_{n-1}, y)`` equal to
    :func:`tvm_cocopie.topi.int8.hvx.channel_move`: per output vector, the input vectors
    of its channels as ``v``-byte lanes, shifted by whole bytes, masked and ORed."""
    layout = LAYOUT_OF[variant]
    v = layout.cols
    bits = 8 * v
    lane = f"uint{bits}x{VBYTES // v}"
    full = (1 << bits) - 1
    rows = src_shapes[0][1]
    y_shape = ((out_channels + layout.col_multiple - 1) // layout.col_multiple
               * layout.col_multiple // v, rows, v)
    sources = channel_sources(kind, in_channels, out_channels, params)
    args = [(f"x{k}", tuple(s), "uint8") for k, s in enumerate(src_shapes)]
    with kernel(f"channels_{kind}{v}", [*args, ("y", y_shape, "uint8")]) as (bufs, out):
        *xs, y = bufs

        def const(value):
            return tirx.Broadcast(tirx.const(value, f"uint{bits}"), VBYTES // v)

        with T.serial(rows * v // VBYTES) as p:
            r0 = p * (VBYTES // v)
            for q in range(y_shape[0]):
                value = None
                for (k, g, shift), mask in sorted(_terms(sources, q, v).items()):
                    vec = tirx.reinterpret(lane, xs[k].vload([g, r0, 0], "uint8x128"))
                    if shift > 0:
                        vec = vec << const(8 * shift)
                    elif shift < 0:
                        vec = vec >> const(-8 * shift)
                    if mask != full:
                        vec = vec & const(mask)
                    value = vec if value is None else value | vec
                if value is None:
                    value = const(0)
                T.buffer_store(y, tirx.reinterpret("uint8x128", value), [q, r0, ramp(0, VBYTES)])
    return out[0]

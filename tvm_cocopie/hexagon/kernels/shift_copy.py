"""Regrid as a shifted, masked vector copy: a stride-1 consumer in its producer's layout."""

from __future__ import annotations

import logging

from .tirgen import T, kernel, ramp

log = logging.getLogger(__name__)


def shift_copy_kernel(v: int, groups: int, s_src: int, s_dst: int, sh: int):
    """The HVX kernel of :func:`tvm_cocopie.topi.int8.hvx.shift_copy` ``(x, mask, y)``:
    the common case of a regrid, a stride-1 consumer in the producer's layout on a grid
    of the producer's width.

    Then pixel ``(i, j)`` moves by the constant ``pad * Wq + pad`` rows, and the
    producer's junk columns land exactly on the consumer's padding: the regrid is a
    shifted vector copy ANDed with a constant mask of the consumer's valid positions
    (``x`` and ``y`` are flat views of the two grids; ``s_src``/``s_dst`` the bytes of
    one channel group, ``sh`` the shift in bytes). Vectors that would read outside the
    source are done byte by byte.
    """
    from tvm import tirx


    n_vec = s_dst // 128
    t_lo = -(-sh // 128)
    t_hi = min(n_vec - 1, (s_src + sh - 128) // 128)
    params = [
        ("x", (groups * s_src,), "uint8"),
        ("m", (s_dst,), "uint8"),
        ("y", (groups * s_dst,), "uint8"),
    ]
    with kernel(f"shift_copy{v}", params) as ((x, m, y), out), T.serial(groups) as g:
        if t_hi >= t_lo:
            with T.serial(t_hi - t_lo + 1) as t:
                d = (t + t_lo) * 128
                vec = x[ramp(g * s_src + d - sh, 128)] & m[ramp(d, 128)]
                T.buffer_store(y, vec, [ramp(g * s_dst + d, 128)])
        edges = [t for t in range(n_vec) if t < t_lo or t > t_hi]
        for t in edges:
            with T.serial(128) as lane:
                d = t * 128 + lane
                idx = d - sh
                ok = tirx.all(idx >= 0, idx < s_src)
                safe = tirx.max(tirx.min(idx, s_src - 1), 0)
                value = tirx.if_then_else(ok, x[g * s_src + safe] & m[d], tirx.const(0, "uint8"))
                T.buffer_store(y, value, [g * s_dst + d])
    return out[0]

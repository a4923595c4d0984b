"""GCD²'s int8 matrix multiplication on HVX, one kernel per instruction (seed 004, §4.3).

``Y = requant(X @ W + bias)`` with ``X`` uint8 ``[M, K]`` in the instruction's layout
(:mod:`tvm_cocopie.topi.int8.layouts`), ``W`` int8 as packed ``Rt`` words, ``Y`` uint8 in the same layout
as ``X``. Each kernel walks row panels and blocks of output columns, keeps the int32
accumulators of a block in vector registers across the whole ``K`` loop, and ends with
the exact int32 requantization of :class:`~tvm_cocopie.topi.int8.compute.Requant` and a saturating
interleave into the output layout:

- ``vmpy`` (1-column, Fig. 4.2a): per input column ``k``, ``vmpybus`` multiplies the
  128 rows by ``w[k, n]``; two columns' 16-bit products are widened and summed into
  32 bits by ``vaddhw`` (exact: each product fits int16).
- ``vmpa`` (2-column, Fig. 4.2b): one ``vmpabus`` on a vector pair covers 4 input
  columns of 64 rows; ``vaddhw`` adds its two halves ("the two corresponding output
  elements ... need to be further added") while widening. Pairs of products are
  summed in 16 bits by the instruction itself: exact only when no pair exceeds int16,
  see :func:`vmpa_exact`.
- ``vrmpy`` (4-column, Fig. 4.2c): ``vrmpybus`` sums 4 products of 32 rows into 32
  bits directly (exact).
"""

import numpy as np

from ...topi.int8.compute import Requant
from ...topi.int8.layouts import LAYOUT_OF, round_up
from .gemm import EMITTERS, Operands, channel_params
from .tirgen import T, kernel, ramp


def vmpa_exact(w: np.ndarray) -> bool:
    """True when the ``vmpa`` kernel equals int32 accumulation for any uint8 input.

    ``vmpabus`` adds two products ``x1*w1 + x2*w2`` in 16 bits; with ``x`` up to 255 the
    sum stays in int16 when the same-sign parts of each weight pair stay small:
    ``255 * (max(w1,0) + max(w2,0)) <= 32767`` and ``255 * (max(-w1,0) + max(-w2,0))
    <= 32768``. Weights within [-64, 64] always qualify. Pairs are rows ``(4g, 4g+2)``
    and ``(4g+1, 4g+3)`` of each column.
    """
    k, n = w.shape
    full = np.zeros((round_up(k, 4), n), dtype=np.int64)
    full[:k] = w
    q = full.reshape(-1, 4, n)
    for a, b in ((0, 2), (1, 3)):
        pos = np.maximum(q[:, a], 0) + np.maximum(q[:, b], 0)
        neg = np.maximum(-q[:, a], 0) + np.maximum(-q[:, b], 0)
        if (255 * pos).max(initial=0) > 32767 or (255 * neg).max(initial=0) > 32768:
            return False
    return True


def matmul_shapes(variant: str, m: int, k: int, n: int) -> dict:
    """Buffer shapes of a variant's kernel: ``x``, ``w`` (Rt words), ``bias``, ``y``."""
    layout = LAYOUT_OF[variant]
    kp, np_ = round_up(k, layout.col_multiple), round_up(n, layout.col_multiple)
    w_rows = kp if variant == "vmpy" else kp // 4
    return {
        "x": layout.shape(m, k),
        "w": (w_rows, np_),
        "bias": (np_,),
        "y": layout.shape(m, n),
    }


def matmul(variant: str, m: int, k: int, n: int, rq: Requant, col_block: int | None = None):
    """The GCD² kernel ``(x, w, bias, y)`` for ``variant`` in ``{"vmpy", "vmpa", "vrmpy"}``.

    ``x`` is the ``m x k`` uint8 input in the variant's layout, ``w`` the packed
    weight words (:func:`.transforms.pack_weights`), ``bias`` int32 padded
    (:func:`.transforms.pad_bias`), ``y`` the ``m x n`` uint8 output in the same layout.
    ``col_block`` is the number of output vectors computed together (register
    blocking); by default the largest divisor of the output's column groups up to 4
    (``vmpy``, ``vmpa``) or 2 (``vrmpy``). A per-channel ``rq`` adds ``rq`` after
    ``bias``: its :meth:`~tvm_cocopie.topi.int8.compute.Requant.table` over the padded
    columns.
    """
    if variant not in EMITTERS:
        raise ValueError(f"unknown HVX matmul variant {variant!r}; use one of {list(EMITTERS)}")
    shapes = matmul_shapes(variant, m, k, n)
    params = [
        ("x", shapes["x"], "uint8"),
        ("w", shapes["w"], "int32"),
        ("bias", shapes["bias"], "int32"),
        *([("rq", (2, *shapes["bias"]), "int32")] if rq.per_channel else []),
        ("y", shapes["y"], "uint8"),
    ]
    with kernel(f"qmatmul_{variant}", params) as (bufs, out):
        x, w, bias, *table, y = bufs
        ops = Operands(
            row_blocks=shapes["x"][0],
            in_groups=shapes["x"][1],
            out_groups=shapes["y"][1],
            taps=(),
            x=lambda p, g, tap: x.vload([p, g, 0, 0], "uint8x128"),
            w=lambda tap, i, col: w[i, col],
            bias=lambda col: bias[col],
            store=lambda p, og, vec: T.buffer_store(y, vec, [p, og, 0, ramp(0, 128)]),
            rq_params=channel_params(table[0]) if table else None,
        )
        EMITTERS[variant](ops, rq, col_block)
    return out[0]

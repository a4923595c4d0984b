"""GCD²'s int8 matrix multiplication on HVX, one kernel per instruction (seed 004, §4.3).

``Y = requant(X @ W + bias)`` with ``X`` uint8 ``[M, K]`` in the instruction's layout
(:mod:`.layouts`), ``W`` int8 as packed ``Rt`` words, ``Y`` uint8 in the same layout
as ``X``. Each kernel walks row panels and blocks of output columns, keeps the int32
accumulators of a block in vector registers across the whole ``K`` loop, and ends with
the exact int32 requantization of :class:`~.int8_compute.Requant` and a saturating
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

from . import hvx
from .int8_compute import Requant
from .layouts import LAYOUT_OF, round_up
from .tirgen import T, bind, kernel, ramp, vec_buffer, vload, vstore


def _block(total: int, limit: int) -> int:
    """The largest divisor of ``total`` not above ``limit``."""
    return max(d for d in range(1, min(total, limit) + 1) if total % d == 0)


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

    ``col_block`` is the number of output vectors computed together (register
    blocking); by default the largest divisor of the output's column groups up to 4
    (``vmpy``), 4 (``vmpa``) or 2 (``vrmpy``), keeping the accumulators in registers.
    """
    builders = {"vmpy": _vmpy, "vmpa": _vmpa, "vrmpy": _vrmpy}
    if variant not in builders:
        raise ValueError(f"unknown HVX matmul variant {variant!r}; use one of {list(builders)}")
    shapes = matmul_shapes(variant, m, k, n)
    return builders[variant](shapes, rq, col_block)


def _params(shapes):
    return [
        ("x", shapes["x"], "uint8"),
        ("w", shapes["w"], "int32"),
        ("bias", shapes["bias"], "int32"),
        ("y", shapes["y"], "uint8"),
    ]


def _requant4(rq: Requant, vectors):
    """Requantize four int32x32 vectors and interleave them into one uint8x128."""
    return hvx.saturate_interleave4(*(rq.tir_int32(v, 32, hvx.mul_shr16) for v in vectors))


def _vrmpy(shapes, rq: Requant, col_block):
    p_dim, g_dim, _, _ = shapes["x"]
    ng_dim = shapes["y"][1]
    nb = col_block or _block(ng_dim, 2)
    cols = 4 * nb  # output columns per block, one accumulator vector each
    with kernel("qmatmul_vrmpy", _params(shapes)) as ((x, w, bias, y), out):
        acc = [vec_buffer(f"acc{j}") for j in range(cols)]
        with T.grid(p_dim, ng_dim // nb) as (p, blk):
            for j in range(cols):
                vstore(acc[j], T.Broadcast(bias[blk * cols + j], 32))
            with T.serial(g_dim) as g:
                v = bind(hvx.as_vec(x.vload([p, g, 0, 0], "uint8x128")))
                for j in range(cols):
                    vstore(acc[j], hvx.vrmpybus_acc(vload(acc[j]), v, w[g, blk * cols + j]))
            for b in range(nb):
                # columns 4b + t of the block, 32 rows each: byte 4r + t of the output
                y_vec = _requant4(rq, [vload(acc[4 * b + t]) for t in range(4)])
                T.buffer_store(y, y_vec, [p, blk * nb + b, 0, ramp(0, 128)])
    return out[0]


def _vmpa(shapes, rq: Requant, col_block):
    p_dim, g_dim, _, _ = shapes["x"]
    ng_dim = shapes["y"][1]
    nb = col_block or _block(ng_dim, 4)
    cols = 2 * nb  # output columns per block, one accumulator pair (64 rows) each
    with kernel("qmatmul_vmpa", _params(shapes)) as ((x, w, bias, y), out):
        acc = [vec_buffer(f"acc{j}", 64) for j in range(cols)]
        with T.grid(p_dim, ng_dim // nb) as (p, blk):
            for j in range(cols):
                vstore(acc[j], T.Broadcast(bias[blk * cols + j], 64), 64)
            with T.serial(g_dim // 2) as g4:
                vuu = bind(T.reinterpret("int32x64", x.vload([p, 2 * g4, 0, 0], "uint8x256")))
                for j in range(cols):
                    prod = hvx.vmpabus(vuu, w[g4, blk * cols + j])
                    vstore(
                        acc[j], hvx.vaddhw_acc(vload(acc[j], 64), hvx.lo(prod), hvx.hi(prod)), 64
                    )
            # column c's pair: v[0] rows 2t, v[1] rows 2t+1; the 2-column output vector
            # holds (row r, column 2b + j) at byte 2r + j = 4t + (2 * parity + j).
            for b in range(nb):
                c0, c1 = acc[2 * b], acc[2 * b + 1]
                y_vec = _requant4(rq, [vload(c0), vload(c1), vload(c0, 32, 32), vload(c1, 32, 32)])
                T.buffer_store(y, y_vec, [p, blk * nb + b, 0, ramp(0, 128)])
    return out[0]


def _vmpy(shapes, rq: Requant, col_block):
    p_dim, k_dim, _, _ = shapes["x"]
    n_dim = shapes["y"][1]
    cols = col_block or _block(n_dim, 4)  # output columns (= output vectors) per block
    with kernel("qmatmul_vmpy", _params(shapes)) as ((x, w, bias, y), out):
        # Per column two accumulator pairs: "even" from the products' low halves
        # (rows 4t in v[0], 4t+2 in v[1]) and "odd" from the high halves (4t+1, 4t+3).
        even = [vec_buffer(f"even{j}", 64) for j in range(cols)]
        odd = [vec_buffer(f"odd{j}", 64) for j in range(cols)]
        with T.grid(p_dim, n_dim // cols) as (p, blk):
            for j in range(cols):
                vstore(even[j], T.Broadcast(bias[blk * cols + j], 64), 64)
                vstore(odd[j], T.Broadcast(bias[blk * cols + j], 64), 64)
            with T.serial(k_dim // 2) as k2:
                v0 = bind(hvx.as_vec(x.vload([p, 2 * k2, 0, 0], "uint8x128")))
                v1 = bind(hvx.as_vec(x.vload([p, 2 * k2 + 1, 0, 0], "uint8x128")))
                for j in range(cols):
                    p0 = bind(hvx.vmpybus(v0, w[2 * k2, blk * cols + j]))
                    p1 = bind(hvx.vmpybus(v1, w[2 * k2 + 1, blk * cols + j]))
                    vstore(even[j], hvx.vaddhw_acc(vload(even[j], 64), hvx.lo(p0), hvx.lo(p1)), 64)
                    vstore(odd[j], hvx.vaddhw_acc(vload(odd[j], 64), hvx.hi(p0), hvx.hi(p1)), 64)
            for j in range(cols):
                e, o = even[j], odd[j]
                y_vec = _requant4(rq, [vload(e), vload(o), vload(e, 32, 32), vload(o, 32, 32)])
                T.buffer_store(y, y_vec, [p, blk * cols + j, 0, ramp(0, 128)])
    return out[0]

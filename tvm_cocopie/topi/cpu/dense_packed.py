"""Matmul with a packed right-hand side: ``(..., M, K) @ (K, N)`` and batched variants.

B is packed into column panels ``(N' / nb, K, nb)`` (``N'`` padded up to the panel
width with zeros) so that the inner loop of the schedule reads ``nb`` contiguous
columns of one row of B and broadcasts one element of A against them: a
``tm x nb`` register tile of accumulators (an outer-product micro-kernel, as in
BLIS). For a constant B (the weights of a dense layer) the packing runs once at
compile time; for batched products of activations (attention) it runs as a cheap
separate kernel.

The product block computes the padded ``M' x N'`` extent (rows of A clamped) and
carries the annotation ``cocopie.matmul`` with the tile and the cache blocking for
:mod:`tvm_cocopie.schedules.cpu.matmul_packed`; a slice gives the exact result.
With one B shared by every batch (a dense layer applied to ``(T, 1, K)`` time-major
activations, say), the batch dims are flattened into the rows: one ``T x K`` product
whose register tiles span batches, instead of ``T`` products of one row that each
stream the whole of B.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ...errors import CompilationError
from .tiling import MatmulTile, matmul_blocking

ANNOTATION = "cocopie.matmul"


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def pack_rhs(b: te.Tensor, nb: int) -> te.Tensor:
    """``(*batch, K, N)`` -> ``(*batch, N' / nb, K, nb)``, zero columns past ``N``."""
    *batch, k, n = (int(s) for s in b.shape)
    panels = _round_up(n, nb) // nb

    def fpack(*idx):
        *bi, p, kk, j = idx
        col = p * nb + j
        if panels * nb == n:
            return b[(*bi, kk, col)]
        return tirx.if_then_else(col < n, b[(*bi, kk, tirx.min(col, n - 1))],
                                 tirx.const(0, b.dtype))

    return te.compute((*batch, panels, k, nb), fpack, name="rhs_pack")


def pack_rhs_numpy(b: np.ndarray, nb: int) -> np.ndarray:
    """:func:`pack_rhs` on a constant, at compile time."""
    *batch, k, n = b.shape
    npad = _round_up(n, nb)
    padded = b
    if npad != n:  # one copy when the panels divide N (VGG-16's 400 MB FC weight: 2x faster)
        padded = np.zeros((*batch, k, npad), dtype=b.dtype)
        padded[..., :n] = b
    split = padded.reshape(*batch, k, npad // nb, nb)
    nd = len(batch)
    order = (*range(nd), nd + 1, nd, nd + 2)
    return np.ascontiguousarray(split.transpose(order))


def matmul_packed(a: te.Tensor, packed: te.Tensor, n: int, tile: MatmulTile,
                  out_dtype: str = "float32") -> te.Tensor:
    """``a (*batch, M, K)`` times packed B -> ``(*batch, M, N)``.

    ``packed`` is ``(N'/nb, K, nb)`` (shared by every batch) or
    ``(*batch, N'/nb, K, nb)`` (one B per batch, same batch dims as ``a``).
    """
    *batch, m, k = (int(s) for s in a.shape)
    nb = tile.nb
    shared = len(packed.shape) == 3
    if not shared and [int(s) for s in packed.shape[:-3]] != batch:
        raise CompilationError("batched matmul: A and B batch dims differ")
    if int(packed.shape[-2]) != k or int(packed.shape[-1]) != nb:
        raise CompilationError("packed B does not match K or the panel width")
    if flat_rows(batch, m, shared):
        return _flat_rows_matmul(a, packed, n, tile, out_dtype)
    mp = _round_up(m, tile.tm)
    npad = int(packed.shape[-3]) * nb
    rk = te.reduce_axis((0, k), "rk")

    def fmm(*idx):
        *bi, i, j = idx
        row = tirx.min(i, m - 1) if mp != m else i
        bidx = (j // nb, rk, j % nb) if shared else (*bi, j // nb, rk, j % nb)
        return te.sum(a[(*bi, row, rk)].astype(out_dtype) * packed[bidx].astype(out_dtype),
                      axis=rk)

    attrs = {ANNOTATION: _annotation(tile, m, n, k, shared)}
    work = te.compute((*batch, mp, npad), fmm, name="matmul_packed", attrs=attrs)
    if (mp, npad) == (m, n):
        return work
    return te.compute((*batch, m, n), lambda *idx: work[idx], name="matmul_packed_out")


def _annotation(tile: MatmulTile, rows: int, n: int, k: int, shared: bool) -> dict:
    blocking = matmul_blocking(rows, n, k, tile) if shared else None
    return {"kind": "matmul", "tm": tile.tm, "nb": tile.nb, "m": rows, "n": n,
            "colout": int(bool(blocking and blocking.columns_outer)),
            "kb": blocking.kb if blocking else k}


def flat_rows(batch, m: int, shared: bool) -> bool:
    """Whether a matmul of A ``(*batch, m, K)`` runs as one product over flattened rows.

    With a shared B and one non-unit dim among ``(*batch, m)`` (``(T, 1, K)`` as a
    recurrent layer leaves it): the row index is that dim's index, an affine map the
    schedule's per-tile epilogue can follow. Several non-unit dims would make it a
    div/mod of the row that region analysis cannot invert.
    """
    return shared and bool(batch) and sum(int(d) > 1 for d in (*batch, m)) == 1


def _flat_rows_matmul(a: te.Tensor, packed: te.Tensor, n: int, tile: MatmulTile,
                      out_dtype: str) -> te.Tensor:
    """Shared B, A with one non-unit dim before K: a plain ``rows x K`` product."""
    *batch, m, k = (int(s) for s in a.shape)
    dims = [*batch, m]
    axis = next(i for i, d in enumerate(dims) if d > 1)
    rows = dims[axis]
    nb = tile.nb
    mp = _round_up(rows, tile.tm)
    npad = int(packed.shape[-3]) * nb
    rk = te.reduce_axis((0, k), "rk")

    zero = tirx.const(0, str(a.shape[axis].ty))

    def a_index(r):
        return tuple(r if i == axis else zero for i in range(len(dims)))

    def fmm(r, j):
        row = tirx.min(r, rows - 1) if mp != rows else r
        return te.sum(a[(*a_index(row), rk)].astype(out_dtype)
                      * packed[j // nb, rk, j % nb].astype(out_dtype), axis=rk)

    attrs = {ANNOTATION: _annotation(tile, rows, n, k, True)}
    work = te.compute((mp, npad), fmm, name="matmul_packed", attrs=attrs)
    return te.compute((*batch, m, n), lambda *idx: work[idx[axis], idx[-1]],
                      name="matmul_packed_out")

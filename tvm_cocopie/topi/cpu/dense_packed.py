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

Symbolic sizes (SOD², issue 17: a sequence length or a batch known only at run time)
are taken as they come from the placeholders: the rows ``M``, the batch dims, and for
a B that is not constant its ``K`` and ``N`` too. The register tile is planned once
for :data:`PLANNED_EXTENT` (the caller's choice, :func:`~.legalize.matmul_plan`); the
padded extents become expressions (``ceil(M / tm) * tm`` rows, ``ceil(N / nb)``
panels), so every tile stays whole at any size and the slice to ``(*batch, M, N)``
follows as in the static case.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx
from tvm.sym import Analyzer

from ...errors import CompilationError
from .tiling import MatmulTile, matmul_blocking

ANNOTATION = "cocopie.matmul"
#: Relax's ``OpPatternKind`` values the kernels of a symbolic column count declare
#: (:func:`pack_rhs`, :func:`slice_columns`)
BROADCAST, INJECTIVE = 1, 2

#: The size a symbolic extent (rows, a column count, a reduction) is planned for: a
#: transformer's sequence length, the zoo encoder's 128. The static planner's tile for
#: it is kept at every run-time size (the encoder's matmuls at 128 rows then run the
#: very tile of its static build).
PLANNED_EXTENT = 128


def dims(shape) -> list:
    """A TE shape as Python ints where static, the ``PrimExpr`` where symbolic."""
    return [int(s) if isinstance(s, (int, tirx.IntImm)) else s for s in shape]


def planned(extent) -> int:
    """``extent`` if static, else :data:`PLANNED_EXTENT`."""
    return extent if isinstance(extent, int) else PLANNED_EXTENT


def _round_up(x, m: int):
    """``x`` rounded up to a multiple of ``m`` (an expression when ``x`` is symbolic)."""
    if isinstance(x, int):
        return -(-x // m) * m
    return tirx.floordiv(x + (m - 1), m) * m


def _same(x, y) -> bool:
    """Whether two extents are provably equal (ints, or one TIR variable)."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    return bool(Analyzer().can_prove_equal(x, y))


def pack_rhs(b: te.Tensor, nb: int) -> te.Tensor:
    """``(*batch, K, N)`` -> ``(*batch, N' / nb, K, nb)``, zero columns past ``N``.

    A symbolic ``N`` (attention's ``K^T``, ``N`` the sequence) repeats column ``N - 1``
    instead: the padded columns only make product columns the slice drops, and a
    clamped read vectorizes where the zero's ``if_then_else`` scalarized the loop
    (encoder's K at 128 tokens: 98 -> 40 us). Relax's pattern analysis calls any read
    whose index holds a variable of no output index opaque, so the caller declares
    this pack :data:`INJECTIVE` (it is: one read per element, no reduction), and
    ``FuseOps`` fuses it with the transpose that makes ``K^T`` as in the static case."""
    *batch, k, n = dims(b.shape)
    panels = _round_up(n, nb) // nb if isinstance(n, int) else tirx.floordiv(n + (nb - 1), nb)

    def fpack(*idx):
        *bi, p, kk, j = idx
        col = p * nb + j
        if not isinstance(n, int):
            return b[(*bi, kk, tirx.min(col, n - 1))]
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


def matmul_packed(a: te.Tensor, packed: te.Tensor, n, tile: MatmulTile,
                  out_dtype: str = "float32") -> te.Tensor:
    """``a (*batch, M, K)`` times packed B -> ``(*batch, M, N)``.

    ``packed`` is ``(N'/nb, K, nb)`` (shared by every batch) or
    ``(*batch, N'/nb, K, nb)`` (one B per batch, same batch dims as ``a``). Any of
    ``M``, ``K``, ``N`` (an int or the PrimFunc's own variable) and the batch dims may
    be symbolic. A symbolic ``N`` leaves the result ``(*batch, M, N')``, its columns
    padded to whole panels: :func:`slice_columns` cuts them in a kernel of its own.
    """
    *batch, m, k = dims(a.shape)
    nb = tile.nb
    shared = len(packed.shape) == 3
    if not shared and not (len(packed.shape) - 3 == len(batch) and all(
            _same(x, y) for x, y in zip(dims(packed.shape[:-3]), batch))):
        raise CompilationError("batched matmul: A and B batch dims differ")
    pk, pnb = dims(packed.shape[-2:])
    if not _same(pk, k) or pnb != nb:
        raise CompilationError("packed B does not match K or the panel width")
    if flat_rows(batch, m, shared):
        return _flat_rows_matmul(a, packed, n, tile, out_dtype)
    mp = _round_up(m, tile.tm)
    npad = dims(packed.shape[-3:-2])[0] * nb
    rk = te.reduce_axis((0, k), "rk")

    def fmm(*idx):
        *bi, i, j = idx
        row = i if _exact(mp, m) else tirx.min(i, m - 1)
        bidx = (j // nb, rk, j % nb) if shared else (*bi, j // nb, rk, j % nb)
        return te.sum(a[(*bi, row, rk)].astype(out_dtype) * packed[bidx].astype(out_dtype),
                      axis=rk)

    attrs = {ANNOTATION: _annotation(tile, m, n, k, shared, batch)}
    work = te.compute((*batch, mp, npad), fmm, name="matmul_packed", attrs=attrs)
    cols = n if isinstance(n, int) else npad
    if _exact(mp, m) and _exact(npad, cols):
        return work
    return te.compute((*batch, m, cols), lambda *idx: work[idx], name="matmul_packed_out")


def slice_columns(x: te.Tensor, n) -> te.Tensor:
    """The first ``n`` columns of a product whose ``N`` is symbolic (:func:`matmul_packed`).

    Cut inside the matmul kernel, the last panel's columns made the epilogue's store
    conditional per lane, and TVM's vectorizer scalarizes such a loop: attention's
    ``Q K^T`` (scaled) at 128 tokens took 1.3-1.5x its static time. As a kernel of its own,
    declared :data:`BROADCAST` (each output index reads the same input index, in order),
    ``FuseOps`` joins it to the consumers (the scale and the softmax: one row kernel)
    instead of to the matmul, which only fuses element-wise consumers.
    """
    return te.compute((*x.shape[:-1], n), lambda *idx: x[idx], name="matmul_columns")


def _exact(padded, extent) -> bool:
    """Whether a padded extent is the extent itself (static and already whole tiles)."""
    return isinstance(extent, int) and padded == extent


def _annotation(tile: MatmulTile, rows, n, k, shared: bool, batch=()) -> dict:
    """The schedule's annotation; symbolic sizes stand as :data:`PLANNED_EXTENT`.

    A B shared by ``batch`` products is blocked for all their row tiles together: each
    batch's ``rows`` in whole tiles, times the batches (ConvNeXt's MLP on a 7x7 map, 7
    batches of 7 rows, counted as one row tile streamed its 9.4 MB weight once per batch:
    4.4 ms a call against 1.6 for the same product over 49 flat rows)."""
    rows, n, k = planned(rows), planned(n), planned(k)
    copies = math.prod(planned(d) for d in batch)
    blocking = (matmul_blocking(-(-rows // tile.tm) * tile.tm * copies, n, k, tile)
                if shared else None)
    return {"kind": "matmul", "tm": tile.tm, "nb": tile.nb, "m": rows, "n": n,
            "colout": int(bool(blocking and blocking.columns_outer)),
            "kb": blocking.kb if blocking else k}


def _unit(d) -> bool:
    """Whether a dim is the static 1 (a symbolic one may be any size)."""
    return isinstance(d, (int, tirx.IntImm)) and int(d) == 1


def flat_rows(batch, m, shared: bool) -> bool:
    """Whether a matmul of A ``(*batch, m, K)`` runs as one product over flattened rows.

    With a shared B and one non-unit dim among ``(*batch, m)`` (``(T, 1, K)`` as a
    recurrent layer leaves it; a symbolic dim counts as non-unit): the row index is
    that dim's index, an affine map the schedule's per-tile epilogue can follow.
    Several non-unit dims would make it a div/mod of the row that region analysis
    cannot invert.
    """
    return shared and bool(batch) and sum(not _unit(d) for d in (*batch, m)) == 1


def _flat_rows_matmul(a: te.Tensor, packed: te.Tensor, n, tile: MatmulTile,
                      out_dtype: str) -> te.Tensor:
    """Shared B, A with one non-unit dim before K: a plain ``rows x K`` product."""
    *batch, m, k = dims(a.shape)
    outer = [*batch, m]
    axis = next(i for i, d in enumerate(outer) if not _unit(d))
    rows = outer[axis]
    nb = tile.nb
    mp = _round_up(rows, tile.tm)
    npad = dims(packed.shape[-3:-2])[0] * nb
    rk = te.reduce_axis((0, k), "rk")

    zero = tirx.const(0, str(a.shape[axis].ty))

    def a_index(r):
        return tuple(r if i == axis else zero for i in range(len(outer)))

    def fmm(r, j):
        row = r if _exact(mp, rows) else tirx.min(r, rows - 1)
        return te.sum(a[(*a_index(row), rk)].astype(out_dtype)
                      * packed[j // nb, rk, j % nb].astype(out_dtype), axis=rk)

    attrs = {ANNOTATION: _annotation(tile, rows, n, k, True)}
    work = te.compute((mp, npad), fmm, name="matmul_packed", attrs=attrs)
    cols = n if isinstance(n, int) else npad
    return te.compute((*batch, m, cols), lambda *idx: work[idx[axis], idx[-1]],
                      name="matmul_packed_out")

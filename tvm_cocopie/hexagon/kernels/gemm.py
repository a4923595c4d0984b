"""The inner engine of GCD²'s int8 kernels: one loop nest per multiply instruction.

Seed 004, §4.3 / Fig. 4.2: matrix multiplication and convolution both reduce to
"rows times reduction columns" once the data is in an instruction's layout. This module
emits that loop nest; :mod:`.matmul` and :mod:`.conv2d` only say where the operand
vectors live (:class:`Operands`). For every block of output vectors the int32
accumulators stay in registers across the whole reduction (taps, then input column
groups), then the block is requantized and stored:

- ``vrmpy`` (4-column): ``acc.w += vrmpy(x.ub, Rt.b)`` sums 4 products of 32 rows
  (exact); one accumulator vector per output column.
- ``vmpa`` (2-column): ``vmpa(xx.ub, Rt.b)`` on a pair of vectors gives 4 input
  columns x 64 rows as two halves of 16-bit sums; ``vaddhw`` adds the halves while
  widening to 32 bits. The 16-bit pair sums are exact when :func:`.matmul.vmpa_exact`.
- ``vmpy`` (1-column): ``vmpy(x.ub, Rt.b)`` gives 128 rows x 1 input column in 16
  bits (exact); ``vaddhw`` adds two input columns into 32-bit accumulators.
"""

from collections.abc import Callable
from dataclasses import dataclass

from ...topi.int8.compute import Requant
from . import hvx
from .tirgen import T, bind, vec_buffer, vload, vstore


@dataclass
class Operands:
    """Where a kernel's operands live, as functions emitting TIR.

    ``x(p, g, tap)`` is the ``uint8x128`` input vector of row block ``p`` and input
    column group ``g`` (a group is ``v`` adjacent columns of the layout) for reduction
    tap ``tap`` (a tuple of loop variables, empty for a matmul); ``w(tap, i, n)`` the
    ``int32`` weight word of reduction step ``i`` and output column ``n``;
    ``bias(n)`` an ``int32``; ``store(p, og, vec)`` writes output vector ``og`` (a
    group of output columns) of row block ``p``.
    """

    row_blocks: int
    in_groups: int
    out_groups: int
    taps: tuple
    x: Callable
    w: Callable
    bias: Callable
    store: Callable


def block_size(total: int, limit: int) -> int:
    """The largest divisor of ``total`` not above ``limit``."""
    return max(d for d in range(1, min(total, limit) + 1) if total % d == 0)


def requant4(rq: Requant, vectors):
    """Requantize four int32x32 vectors and interleave them into one uint8x128."""
    return hvx.saturate_interleave4(*(rq.tir_int32(v, 32, hvx.mul_shr16) for v in vectors))


def _loops(ops: Operands, nb: int):
    """``(p, blk)`` loop frame over row blocks and blocks of ``nb`` output vectors."""
    return T.grid(ops.row_blocks, ops.out_groups // nb)


def _tap_loop(ops: Operands):
    if not ops.taps:
        return None
    return T.grid(*ops.taps)


class _Reduction:
    """``with _Reduction(ops) as tap:`` opens the tap loops (if any)."""

    def __init__(self, ops: Operands):
        self._frame = _tap_loop(ops)

    def __enter__(self):
        if self._frame is None:
            return ()
        taps = self._frame.__enter__()
        try:
            return tuple(taps)
        except TypeError:  # a single loop variable
            return (taps,)

    def __exit__(self, *exc):
        if self._frame is not None:
            return self._frame.__exit__(*exc)
        return False


def emit_vrmpy(ops: Operands, rq: Requant, col_block: int | None = None) -> None:
    """Emit the ``vrmpy`` loop nest (4-column layout) of ``ops``, requantized by ``rq``;
    ``col_block`` output column groups per block."""
    nb = col_block or block_size(ops.out_groups, 2)
    cols = 4 * nb  # output columns per block, one accumulator vector each
    acc = [vec_buffer(f"acc{j}") for j in range(cols)]
    with _loops(ops, nb) as (p, blk):
        for j in range(cols):
            vstore(acc[j], T.Broadcast(ops.bias(blk * cols + j), 32))
        with _Reduction(ops) as tap, T.serial(ops.in_groups) as g:
            v = bind(hvx.as_vec(ops.x(p, g, tap)))
            for j in range(cols):
                vstore(acc[j], hvx.vrmpybus_acc(vload(acc[j]), v, ops.w(tap, g, blk * cols + j)))
        for b in range(nb):
            # columns 4b + t of the block, 32 rows each: byte 4r + t of the output
            ops.store(p, blk * nb + b, requant4(rq, [vload(acc[4 * b + t]) for t in range(4)]))


def emit_vmpa(ops: Operands, rq: Requant, col_block: int | None = None) -> None:
    """Emit the ``vmpa`` loop nest (2-column layout) of ``ops``, requantized by ``rq``;
    ``col_block`` output column groups per block."""
    nb = col_block or block_size(ops.out_groups, 4)
    cols = 2 * nb  # output columns per block, one accumulator pair (64 rows) each
    acc = [vec_buffer(f"acc{j}", 64) for j in range(cols)]
    with _loops(ops, nb) as (p, blk):
        for j in range(cols):
            vstore(acc[j], T.Broadcast(ops.bias(blk * cols + j), 64), 64)
        with _Reduction(ops) as tap, T.serial(ops.in_groups // 2) as g4:
            low = hvx.as_vec(ops.x(p, 2 * g4, tap))
            high = hvx.as_vec(ops.x(p, 2 * g4 + 1, tap))
            vuu = bind(hvx.combine(high, low))
            for j in range(cols):
                prod = hvx.vmpabus(vuu, ops.w(tap, g4, blk * cols + j))
                total = hvx.vaddhw_acc(vload(acc[j], 64), hvx.lo(prod), hvx.hi(prod))
                vstore(acc[j], total, 64)
        # column c's pair: v[0] rows 2t, v[1] rows 2t+1; the 2-column output vector
        # holds (row r, column 2b + j) at byte 2r + j = 4t + (2 * parity + j).
        for b in range(nb):
            c0, c1 = acc[2 * b], acc[2 * b + 1]
            parts = [vload(c0), vload(c1), vload(c0, 32, 32), vload(c1, 32, 32)]
            ops.store(p, blk * nb + b, requant4(rq, parts))


def emit_vmpy(ops: Operands, rq: Requant, col_block: int | None = None) -> None:
    """Emit the ``vmpy`` loop nest (1-column layout) of ``ops``, requantized by ``rq``;
    ``col_block`` output columns per block."""
    cols = col_block or block_size(ops.out_groups, 4)  # output columns = vectors per block
    # Per column two accumulator pairs: "even" from the products' low halves (rows 4t
    # in v[0], 4t+2 in v[1]) and "odd" from the high halves (rows 4t+1, 4t+3).
    even = [vec_buffer(f"even{j}", 64) for j in range(cols)]
    odd = [vec_buffer(f"odd{j}", 64) for j in range(cols)]
    with _loops(ops, cols) as (p, blk):
        for j in range(cols):
            vstore(even[j], T.Broadcast(ops.bias(blk * cols + j), 64), 64)
            vstore(odd[j], T.Broadcast(ops.bias(blk * cols + j), 64), 64)
        with _Reduction(ops) as tap, T.serial(ops.in_groups // 2) as k2:
            v0 = bind(hvx.as_vec(ops.x(p, 2 * k2, tap)))
            v1 = bind(hvx.as_vec(ops.x(p, 2 * k2 + 1, tap)))
            for j in range(cols):
                p0 = bind(hvx.vmpybus(v0, ops.w(tap, 2 * k2, blk * cols + j)))
                p1 = bind(hvx.vmpybus(v1, ops.w(tap, 2 * k2 + 1, blk * cols + j)))
                vstore(even[j], hvx.vaddhw_acc(vload(even[j], 64), hvx.lo(p0), hvx.lo(p1)), 64)
                vstore(odd[j], hvx.vaddhw_acc(vload(odd[j], 64), hvx.hi(p0), hvx.hi(p1)), 64)
        for j in range(cols):
            e, o = even[j], odd[j]
            parts = [vload(e), vload(o), vload(e, 32, 32), vload(o, 32, 32)]
            ops.store(p, blk * cols + j, requant4(rq, parts))


EMITTERS = {"vmpy": emit_vmpy, "vmpa": emit_vmpa, "vrmpy": emit_vrmpy}

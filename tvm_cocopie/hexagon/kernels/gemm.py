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

import itertools
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
    group of output columns) of row block ``p``; ``rq_params(n)``, for a per-channel
    requantization, the ``(multiplier, shift)`` of output column ``n`` as int32 values
    (loaded from the kernel's :meth:`~tvm_cocopie.topi.int8.compute.Requant.table`).

    Per-channel requantization costs the same in all three layouts: before it, every
    int32 vector holds one output column (``vrmpy``: an accumulator per column; ``vmpa``,
    ``vmpy``: a column's accumulator pair), so a column's ``(m, s)`` are two scalar loads
    per vector, splatted into the ``vmpye`` and the shift; no layout is excluded.
    """

    row_blocks: int
    in_groups: int
    out_groups: int
    taps: tuple
    x: Callable
    w: Callable
    bias: Callable
    store: Callable
    rq_params: Callable | None = None

    def params(self, cols):
        """``rq_params`` of each of the output columns ``cols`` (``None`` per tensor)."""
        return None if self.rq_params is None else [self.rq_params(c) for c in cols]


def block_size(total: int, limit: int) -> int:
    """The largest divisor of ``total`` not above ``limit``."""
    return max(d for d in range(1, min(total, limit) + 1) if total % d == 0)


def channel_params(table):
    """``rq_params`` of :class:`Operands` reading a per-channel requantization's table
    buffer (``[2, channels]``: multipliers, shifts), each loaded once where used."""
    return lambda col: (bind(table[0, col]), bind(table[1, col]))


def requant4(rq: Requant, vectors, params=None):
    """Requantize four int32x32 vectors and interleave them into one uint8x128;
    ``params``: per vector the ``(m, s)`` of its channel (a per-channel ``rq``)."""
    if params is None and not rq.per_channel:
        return _requant4_narrowing(rq, vectors)
    params = params or [None] * 4
    return hvx.saturate_interleave4(*(rq.tir_int32(v, 32, hvx.mul_shr16, p)
                                      for v, p in zip(vectors, params)))


def _requant4_narrowing(rq: Requant, vectors):
    """:func:`requant4` of a per-tensor ``rq`` with the rounding shift in the narrowing.

    :meth:`Requant.tir_int32` is ``((mul_shr16(acc, m) + 2**(d-1)) >> d) + zp`` with
    ``d = s - 16``; ``vasr(Vu.w, Vv.w, d):rnd:sat`` does the rounding shift and the
    saturation to halfwords of two vectors at once, ``vadd(.h, zp):sat`` adds the zero
    point, ``vsat`` to bytes clips: 9 instructions for four vectors instead of 19 (a
    rounding add, a shift and a zero-point add per vector, then the three ``vsat``).
    Exact: a value beyond int16 saturates to a bound that the zero point cannot bring back
    inside [0, 255]. Shifts beyond 15 (the instruction's range) first shift by ``d - 15``
    without rounding: ``floor((floor(x / 2**a) + 2**14) / 2**15)`` is
    ``floor((x + 2**(d-1)) / 2**d)`` for ``a = d - 15``.
    """
    from tvm import tirx

    d = rq.shift - 16
    ys = [hvx.mul_shr16(v, rq.multiplier) for v in vectors]
    if d > 15:
        ys = [hvx.vasrw(y, d - 15) for y in ys]
        d = 15
    low = hvx.vasrwh_rnd_sat(ys[2], ys[0], d)  # h[2i] = y0[i], h[2i+1] = y2[i]
    high = hvx.vasrwh_rnd_sat(ys[3], ys[1], d)  # h[2i] = y1[i], h[2i+1] = y3[i]
    if rq.zero_point:
        zp = tirx.Broadcast(tirx.const(rq.zero_point * 0x10001, "int32"), 32)
        low, high = hvx.vaddhsat(low, zp), hvx.vaddhsat(high, zp)
    return hvx.as_bytes(hvx.vsathub(high, low))


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


@dataclass(frozen=True)
class PackingHint:
    """How :func:`emit_vrmpy` tiles and unrolls its loop nest (see :func:`unroll_hint`).

    A block is ``row_block`` row blocks x ``col_block`` output column groups: ``4 *
    row_block * col_block`` accumulator vectors, so every input vector feeds ``4 *
    col_block`` ``vrmpy`` and every weight word ``row_block``. ``unroll`` input column
    groups are unrolled in Python per reduction-loop iteration. ``taps`` orders a
    convolution's taps: ``"loop"`` tap loops outside the group loop, ``"unroll"`` every
    tap unrolled (compile-time row shifts), ``"dx"`` the last tap axis unrolled *inside*
    the group loop, so the ``kw`` overlapping windows of one row are loaded once (LLVM
    merges the unaligned loads: 2-3 ``vmem`` + ``kw`` ``valign`` instead of ``2 kw`` +
    ``kw``). ``shape`` is the class the hint was chosen for.
    """

    col_block: int
    row_block: int = 1
    unroll: int = 1
    taps: str = "loop"
    shape: str = ""


#: Bytes of weights one unrolled reduction-loop iteration may span: ``memd(Rs+#s11:3)``
#: reaches +-8 KiB around a base register. Wider bodies need a base register per
#: stretch and spill (1x1 7x7x128->512: 0.64 of peak at 8 groups, 0.33 at 16).
WEIGHT_SPAN = 16384


def unroll_hint(rows: int, reduction_groups: int, out_groups: int, taps: tuple = ()) -> PackingHint:
    """Register tile and unroll of a ``vrmpy`` loop nest of ``rows`` row blocks (32 output
    rows each), ``reduction_groups`` input column groups per tap, ``out_groups`` output
    column groups (4 columns each) and ``taps`` (a convolution's ``(kh, kw)``).

    The tile is 16 accumulator vectors when the rows allow it (plus 2-6 vectors of input
    windows: room in the 32 registers), else 8:

    - *fat* (one row block, all output rows in one vector): 1 x 4 groups -- nothing to
      pair over rows, so widen the column block; 4 groups unrolled (taps ``"dx"``).
    - *near-square* / *skinny* (two or more row blocks): 2 x 2 groups -- each weight word
      (one ``memd`` half) feeds two ``vrmpy``, each input window eight. A convolution
      unrolls its last tap axis inside the group loop (``"dx"``, up to 16 groups), or
      all taps when there is one group (``c <= 4``, the 7x7 stem). A 1x1 unrolls up to 32
      groups, bounded by :data:`WEIGHT_SPAN`.
    - *odd* 1x1 (3 to 15 row blocks, an odd number): 1 x 2 groups, no unroll: the
      left-over row block runs a second, badly packed nest, which costs more than the
      pairing saves (LLVM unrolls and pipelines the 1 x 2 loop well by itself).

    The ratio of rows to columns alone did not predict the winner: among 1x1 layers of 7
    row blocks, pairing rows gained on 64 output groups x 16 reduction groups (0.662 ->
    0.696) but lost on 16 x 16, 16 x 64, 32 x 64 (1-2 %) and 128 x 32 (5 %), hence the odd
    rule. Measured on ResNet-50's first 8 unique convolutions (qemu-hexagon packets, peak
    256 MACs per packet), old schedule (1 x 2, tap loops outside, no unroll) -> this hint,
    spatial scale 1/4: 7x7s2 3->64 0.487 -> 0.577, 1x1 64->64 0.650 (odd: same), 3x3
    64->64 0.646 -> 0.800, 1x1 64->256 0.662 (odd), 1x1 256->64 0.805 (odd), 1x1 256->128
    0.808 (odd), 3x3s2 128->128 0.617 -> 0.701, 1x1 128->512 0.577 -> 0.642 (2 row
    blocks); all eight 0.628 -> 0.702. Scale 1/2: 0.683 -> 0.749, 1/8: 0.459 -> 0.518, no
    layer slower; ``vrmpy`` matmuls 64-256 gain 11-18 %. Grid columns, row padding to 32
    and the requantization's ``vmpye`` (a packet each) cap the eight at 0.765 (1/4).
    """
    ntaps = 1
    for t in taps:
        ntaps *= t
    if rows == 1:
        nb, u = block_size(out_groups, 4), block_size(reduction_groups, 4)
        return PackingHint(nb, 1, u, "dx" if ntaps > 1 else "loop", "fat")
    shape = "skinny" if rows > 2 * out_groups else "near-square"
    nb = block_size(out_groups, 2)
    if ntaps > 1:
        if reduction_groups == 1:
            return PackingHint(nb, 2, 1, "unroll", shape)
        return PackingHint(nb, 2, block_size(reduction_groups, 16), "dx", shape)
    if rows % 2 and rows < 16:
        return PackingHint(nb, 1, 1, "loop", "odd")
    span = max(1, WEIGHT_SPAN // (16 * out_groups))
    return PackingHint(nb, 2, block_size(reduction_groups, min(32, span)), "loop", shape)


def emit_vrmpy(
    ops: Operands,
    rq: Requant,
    col_block: int | None = None,
    hint: PackingHint | None = None,
) -> None:
    """Emit the ``vrmpy`` loop nest (4-column layout) of ``ops``, requantized by ``rq``.

    ``col_block`` output column groups per block (one row block, loops as written);
    without it, ``hint`` or :func:`unroll_hint` of the shape picks the block and unroll.
    """
    if hint is None:
        if col_block:
            hint = PackingHint(col_block)
        else:
            hint = unroll_hint(ops.row_blocks, ops.in_groups, ops.out_groups, ops.taps)
    nb = hint.col_block
    rb = min(hint.row_block, ops.row_blocks)
    cols = 4 * nb  # output columns per block, one accumulator vector each
    acc = [[vec_buffer(f"acc{r}_{j}") for j in range(cols)] for r in range(rb)]

    def step(ps, blk, g, tap):
        vs = [bind(hvx.as_vec(ops.x(p, g, tap))) for p in ps]
        for j in range(cols):
            wj = ops.w(tap, g, blk * cols + j)
            for r, v in enumerate(vs):
                a = acc[r][j]
                vstore(a, hvx.vrmpybus_acc(vload(a), v, wj))

    def nest(first, count, rows):
        """Blocks of ``rows`` row blocks over row blocks ``first .. first + count``."""
        u = block_size(ops.in_groups, hint.unroll)
        with T.grid(count // rows, ops.out_groups // nb) as (pp, blk):
            ps = [first + pp * rows + r for r in range(rows)]
            for r in range(rows):
                for j in range(cols):
                    vstore(acc[r][j], T.Broadcast(ops.bias(blk * cols + j), 32))
            groups = ops.in_groups // u
            mode = hint.taps if ops.taps else "loop"
            if mode == "unroll":
                for tap in itertools.product(*(range(t) for t in ops.taps)):
                    with T.serial(groups) as g2:
                        for q in range(u):
                            step(ps, blk, g2 * u + q, tap)
            elif mode == "dx":
                with T.grid(*ops.taps[:-1], groups) as outer:
                    *taps0, g2 = outer
                    for q in range(u):
                        for dx in range(ops.taps[-1]):
                            step(ps, blk, g2 * u + q, (*taps0, dx))
            else:
                with _Reduction(ops) as tap, T.serial(groups) as g2:
                    for q in range(u):  # fully unrolled: the group as a Python int
                        step(ps, blk, g2 * u + q if groups > 1 else q, tap)
            for r, p in enumerate(ps):
                for b in range(nb):
                    # columns 4b + t of the block, 32 rows each: byte 4r + t of the output
                    vecs = [vload(acc[r][4 * b + t]) for t in range(4)]
                    cols4 = [blk * cols + 4 * b + t for t in range(4)]
                    ops.store(p, blk * nb + b, requant4(rq, vecs, ops.params(cols4)))

    main = ops.row_blocks - ops.row_blocks % rb
    nest(0, main, rb)
    if main < ops.row_blocks:  # the left-over row blocks, one at a time
        nest(main, ops.row_blocks - main, 1)


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
            col = blk * cols + 2 * b
            ops.store(p, blk * nb + b, requant4(rq, parts, ops.params([col, col + 1] * 2)))


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
            ops.store(p, blk * cols + j, requant4(rq, parts, ops.params([blk * cols + j] * 4)))


EMITTERS = {"vmpy": emit_vmpy, "vmpa": emit_vmpa, "vrmpy": emit_vrmpy}

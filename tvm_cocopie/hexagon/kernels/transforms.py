"""Weight packing and on-device transforms between GCD²'s HVX layouts (seed 004, §4.3).

The layouts themselves (1-, 2- and 4-column, packed shape ``(P, G, R, v)``) are described
in :mod:`tvm_cocopie.topi.int8.layouts`; this module packs data into them and emits the
TIR kernels that convert between them on the device (:func:`convert_func`,
:func:`repack_func`).

The weights are compile-time constants; each instruction reads them as 32-bit
scalars ``Rt`` holding 4 bytes, packed here by :func:`pack_weights`.
"""

from __future__ import annotations

import numpy as np

from ...topi.int8.layouts import LAYOUT_OF, VBYTES, Layout, round_up
from .tirgen import T, kernel, ramp


def pack_words(b0, b1, b2, b3) -> np.ndarray:
    """Four int8 arrays to int32 words holding them little-endian (``Rt.b[0..3]``)."""
    stacked = np.stack([b0, b1, b2, b3], axis=-1).astype(np.int8)
    return np.ascontiguousarray(stacked).view("<i4")[..., 0].astype(np.int32)


def pack_weights(w: np.ndarray, variant: str) -> np.ndarray:
    """Weights ``int8 [K, N]`` as the ``Rt`` words the variant's kernel reads.

    - ``vmpy``: ``[Kp, Np]``, each word the weight ``w[k, n]`` four times
      (``vmpybus`` takes byte ``i % 4`` of ``Rt`` for lane ``i``);
    - ``vmpa``: ``[Kp/4, Np]``, bytes ``w[4g], w[4g+2], w[4g+1], w[4g+3]`` of column ``n``
      (``Vuu.v[0]`` holds columns ``4g, 4g+1``, ``Vuu.v[1]`` columns ``4g+2, 4g+3``);
    - ``vrmpy``: ``[Kp/4, Np]``, bytes ``w[4g .. 4g+3]`` of column ``n``.

    ``Kp`` and ``Np`` are ``K`` and ``N`` padded to the layout's column multiple;
    padded weights are zero, so padding columns of the input never contribute.
    """
    layout = LAYOUT_OF[variant]
    k, n = w.shape
    kp, np_ = round_up(k, layout.col_multiple), round_up(n, layout.col_multiple)
    full = np.zeros((kp, np_), dtype=np.int8)
    full[:k, :n] = w
    if variant == "vmpy":
        return pack_words(full, full, full, full)
    q = full.reshape(kp // 4, 4, np_)
    if variant == "vmpa":
        return pack_words(q[:, 0], q[:, 2], q[:, 1], q[:, 3])
    return pack_words(q[:, 0], q[:, 1], q[:, 2], q[:, 3])


def pad_bias(bias: np.ndarray, variant: str) -> np.ndarray:
    """Bias ``int32 [N]`` padded with zeros to the output layout's column multiple."""
    n = bias.shape[0]
    out = np.zeros(round_up(n, LAYOUT_OF[variant].col_multiple), dtype=np.int32)
    out[:n] = bias
    return out


# ------------------------------------------------------------- transforms on the device


def _source_index(layout: Layout, row, col):
    return (row // layout.rows, col // layout.cols, row % layout.rows, col % layout.cols)


def convert_func(src: Layout | None, dst: Layout | None, m: int, k: int):
    """A PrimFunc ``(x, y)`` converting an ``m x k`` uint8 matrix between layouts.

    ``None`` stands for plain row-major ``[m, k]``. Between two GCD² layouts this is
    :func:`repack_func` (whole-vector shuffles). From or to row-major it is a TE
    compute vectorized by TVM, which costs gathers on HVX; destination padding is zero.
    Their packet counts are the edge costs of GCD²'s layout selection (§4.4.1).
    """
    import tvm
    from tvm import te, tirx

    if src is not None and dst is not None:
        return repack_func(src, dst, m, k)

    src_shape = (m, k) if src is None else src.shape(m, k)
    x = te.placeholder(src_shape, "uint8", name="x")

    def read(row, col):
        if src is None:
            return x[row, col]
        return x[_source_index(src, row, col)]

    if dst is None:
        y = te.compute((m, k), lambda i, j: read(i, j), name="y")
    else:

        def body(p, g, r, j):
            row, col = p * dst.rows + r, g * dst.cols + j
            return tirx.if_then_else(
                tirx.all(row < m, col < k),
                read(tirx.min(row, m - 1), tirx.min(col, k - 1)),
                tirx.const(0, "uint8"),
            )

        y = te.compute(dst.shape(m, k), body, name="y")
    func = te.create_prim_func([x, y])
    sch = tvm.s_tir.Schedule(func)
    block = sch.get_sblock("y")
    loops = sch.get_loops(block)
    inner = loops[-1] if dst is None else sch.fuse(loops[-2], loops[-1])
    if dst is None:
        inner = sch.split(inner, factors=[None, min(k, VBYTES)])[-1]
    sch.vectorize(inner)
    return sch.mod["main"]


def _superblock(src: Layout, dst: Layout):
    """The repeating unit of a packed-to-packed transform.

    ``(rows, cols, sources, moves)``: a block of ``rows x cols`` elements holds
    ``sources`` = [(panel offset, group offset)] of source vectors and, for each
    destination vector ``(panel offset, group offset)``, the 128 indices of its bytes in
    the concatenation of the source vectors.
    """
    rows, cols = max(src.rows, dst.rows), max(src.cols, dst.cols)
    per_row = cols // src.cols
    sources = [(i, j) for i in range(rows // src.rows) for j in range(per_row)]
    moves = {}
    for a in range(rows // dst.rows):
        for c in range(cols // dst.cols):
            idx = []
            for d in range(VBYTES):
                row, col = a * dst.rows + d // dst.cols, c * dst.cols + d % dst.cols
                i, j = row // src.rows, col // src.cols
                byte = (row % src.rows) * src.cols + col % src.cols
                idx.append((i * per_row + j) * VBYTES + byte)
            moves[(a, c)] = idx
    return rows, cols, sources, moves


def repack_func(src: Layout, dst: Layout, m: int, k: int):
    """A PrimFunc ``(x, y)`` moving an ``m x k`` matrix from one GCD² layout to another.

    Works on whole vectors: each block of ``max(R) x max(v)`` elements is loaded as
    whole source vectors and permuted with one constant shuffle per destination vector
    (LLVM lowers it to HVX ``vdelta`` / ``vshuff`` / ``vdeal`` networks). Padding is
    carried over, not cleared: padded rows are never read back and padded columns meet
    zero weights (:func:`pack_weights`). Source vectors past the source's padding read
    as zeros.
    """
    from tvm import tirx


    if src == dst:
        raise ValueError("source and destination layouts are the same")
    x_shape, y_shape = src.shape(m, k), dst.shape(m, k)
    rows, cols, sources, moves = _superblock(src, dst)
    y_rows, y_cols = y_shape[0] * dst.rows, y_shape[1] * dst.cols
    full_r, full_c = (
        min(y_rows, x_shape[0] * src.rows) // rows,
        min(y_cols, x_shape[1] * src.cols) // cols,
    )
    zero = tirx.Broadcast(tirx.const(0, "uint8"), VBYTES)

    def block(br, bc, partial_r: bool, partial_c: bool):
        vecs = []
        for i, j in sources:
            ps, gs = br * (rows // src.rows) + i, bc * (cols // src.cols) + j
            inside = (not partial_r or _static(ps) < x_shape[0]) and (
                not partial_c or _static(gs) < x_shape[1]
            )
            vecs.append(x.vload([ps, gs, 0, 0], "uint8x128") if inside else zero)
        for (a, c), idx in moves.items():
            pd, gd = br * (rows // dst.rows) + a, bc * (cols // dst.cols) + c
            if (partial_r and _static(pd) >= y_shape[0]) or (
                partial_c and _static(gd) >= y_shape[1]
            ):
                continue
            value = tirx.Shuffle(vecs, [tirx.const(i, "int32") for i in idx])
            T.buffer_store(y, value, [pd, gd, 0, ramp(0, VBYTES)])

    n_r, n_c = -(-y_rows // rows), -(-y_cols // cols)
    with kernel(
        f"repack_{src.cols}to{dst.cols}", [("x", x_shape, "uint8"), ("y", y_shape, "uint8")]
    ) as (
        (x, y),
        out,
    ):
        if full_r and full_c:
            with T.grid(full_r, full_c) as (br, bc):
                block(br, bc, False, False)
        if full_r:
            for bc in range(full_c, n_c):
                with T.serial(full_r) as br:
                    block(br, bc, False, True)
        for br in range(full_r, n_r):
            if full_c:
                with T.serial(full_c) as bc:
                    block(br, bc, True, False)
            for bc in range(full_c, n_c):
                block(br, bc, True, True)
    return out[0]


def _static(value) -> int:
    """A Python int from an index that is static on the edges of :func:`repack_func`."""
    if isinstance(value, int):
        return value
    raise TypeError(f"{value} is not a static index")

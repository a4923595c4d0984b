"""LSTM / GRU / RNN layers as one loop kernel each (fp32; static batch and hidden size,
static or symbolic sequence length).

An unrolled recurrent layer launches a few kernels per time step (the ``H @ R^T``
matmul, the gates); a CRNN recognizer then runs hundreds of tiny kernels per
inference. Here a whole layer is one TIR PrimFunc:

- ``for d in parallel(D)``: a bidirectional layer runs its two directions on two
  cores with no synchronization between steps;
- ``for s in serial(T)``: the reverse direction walks ``t = T - 1 - s``;
- per step a GEMV ``g[b, j] = sum_k h[b, k] * R^T[k, j]`` over a register tile of
  ``b`` rows and ``JT`` columns (``j`` innermost and vectorized, ``h[b, k]``
  broadcast: no horizontal sums), reading the recurrent weights packed
  column-tile-major (``[D, NJ, H, JT]``, zero-padded; the converter packs them, at
  compile time for constant weights) so that every tile streams through memory in
  order, the tiles in snake order over the steps (:data:`SNAKE`);
- then the gates (ONNX order ``i, o, f, c`` for LSTM, ``z, r, h`` for GRU) with the
  polynomial ``exp`` / ``tanh`` of ``topi.fast_exp`` / ``topi.fast_tanh``
  (bit-identical; LLVM would make one libm call per lane of ``exp``/``tanh``).

The input projection ``X @ W^T + bias`` of all steps and directions stays outside,
one batched matmul: the kernel reads it as ``XW[T, B, D * G * H]`` and writes
``Y[T, D, B, H]`` (ONNX's layout 0), ``Y_h`` and ``Y_c`` (``[D, B, H]``).
The PrimFunc is marked ``tirx.is_scheduled``: schedule rules (ours and dlight's)
leave it as written, and both the cocopie and the stock pipeline build it.

Only the time loop's extent may be symbolic (SOD², thesis chapter 5: a recognizer's
sequence length follows its image width): nothing in the body unrolls or tiles over
time, so one PrimFunc serves every length, reading ``T`` from ``XW``'s shape at run time.
The batch and hidden sizes choose the register tiles and stay static.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ...exprs import builder_store, f32, stack_tile

#: Columns of one GEMV register tile (4 AVX2 vectors) and its most batch rows: 3 rows
#: of 4 accumulators + 3 broadcasts fit AVX2's 16 registers.
COLUMN_TILE = 32
MAX_ROW_TILE = 3
#: Walk the GEMV's column tiles backwards every other step ("snake" order): a step
#: then first reads the weights the step before read last, still in cache when they
#: do not all fit (1 MB per direction at H=256, this machine's L2 per core). Measured
#: there, bidirectional H=256 T=40: 2.05-2.11 ms against 2.27-2.41 ms (medians).
SNAKE = True
#: Lanes of the gates' vector loops.
GATE_LANES = 8

CELLS = ("lstm", "gru", "rnn")
_GATES = {"lstm": 4, "gru": 3, "rnn": 1}


def column_tile(columns: int) -> int:
    """The GEMV tile width for ``columns`` weight columns: 32, or the columns rounded
    up to a multiple of 8 when fewer."""
    return min(COLUMN_TILE, -(-columns // GATE_LANES) * GATE_LANES)


def _row_tile(batch: int) -> int:
    return next(r for r in range(min(batch, MAX_ROW_TILE), 0, -1) if batch % r == 0)



# --- vectorizable transcendental functions ----------------------------------------
# The same arithmetic as TVM's C++ topi::fast_exp / fast_tanh (checked bit for bit in
# the tests), as expressions rather than TE ops so that they inline into the loop.

_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
_TANH_NUM = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
             5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
             4.89352455891786e-03)
_TANH_DEN = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
             4.89352518554385e-03)


def _same(expr: tirx.PrimExpr) -> tirx.PrimExpr:
    return expr


def fast_exp(x: tirx.PrimExpr, bind=_same) -> tirx.PrimExpr:
    """``exp(x)`` by range reduction to ``2^n * p(r)`` (``topi.fast_exp``). ``bind``
    names a subexpression used more than once (``T.Bind`` inside an IRBuilder)."""
    x = bind(x)
    xc = bind(tirx.max(tirx.min(x, f32(88.3762626647950)), f32(-88.3762626647949)))
    n = bind(tirx.floor(xc * f32(1.44269504088896341) + f32(0.5)))
    r = bind(xc - n * f32(0.6931471805599453))
    y = f32(_EXP_POLY[0])
    for c in _EXP_POLY[1:]:
        y = y * r + f32(c)
    y = y * r * r + r + f32(1.0)
    two_n = tirx.reinterpret("float32", (tirx.Cast("int32", n) + 127) << 23)
    return tirx.max(two_n * y, x)


def fast_tanh(x: tirx.PrimExpr, bind=_same) -> tirx.PrimExpr:
    """``tanh(x)`` as a rational polynomial on ``[-9, 9]`` (``topi.fast_tanh``)."""
    xc = bind(tirx.max(f32(-9.0), tirx.min(f32(9.0), x)))
    x2 = bind(xc * xc)
    p = f32(_TANH_NUM[0])
    for c in _TANH_NUM[1:]:
        p = p * x2 + f32(c)
    q = f32(_TANH_DEN[0])
    for c in _TANH_DEN[1:]:
        q = q * x2 + f32(c)
    return p * xc / q


def fast_sigmoid(x: tirx.PrimExpr, bind=_same) -> tirx.PrimExpr:
    """``1 / (1 + exp(-x))`` with :func:`fast_exp` (as ``fast_math``'s sigmoid)."""
    return f32(1.0) / (f32(1.0) + fast_exp(-x, bind))


def _sigmoid(x):
    return T.Bind(fast_sigmoid(x, T.Bind))


def _tanh(x):
    return T.Bind(fast_tanh(x, T.Bind))


# --- the kernel -------------------------------------------------------------------


@dataclass(frozen=True)
class LoopSpec:
    """What one loop kernel computes.

    ``steps``: an int, or a symbolic extent (any integer PrimExpr: a shape var of the
    Relax graph, or an expression of one such as ``W // 4``); ``batch`` and ``hidden``
    are static. ``reverse`` has one flag per direction (``(False, True)`` for bidirectional).
    ``init_h`` / ``init_c``: whether initial states are inputs (else zeros).
    ``peepholes``: LSTM's ``P[D, 3H]`` is an input. ``linear_before_reset``: GRU's
    ``r * (h @ Rh^T + Rbh)`` (``Rbh[D, H]`` an input) instead of ``(r * h) @ Rh^T``.
    """

    cell: str
    steps: int | tirx.PrimExpr
    batch: int
    hidden: int
    reverse: tuple[bool, ...]
    init_h: bool = False
    init_c: bool = False
    peepholes: bool = False
    linear_before_reset: bool = False

    @property
    def dirs(self) -> int:
        return len(self.reverse)

    @property
    def gates(self) -> int:
        return _GATES[self.cell]

    def weight_groups(self) -> list[tuple[int, int]]:
        """``[(first gate, gates)]`` of each packed recurrent weight input: LSTM and
        RNN one group of all gates; GRU ``z, r`` then ``h``, whose GEMV reads
        ``r * h`` (or is scaled by ``r``) and so comes after the other gates."""
        if self.cell == "gru":
            return [(0, 2), (2, 1)]
        return [(0, self.gates)]

    def input_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """``[(name, shape)]`` of the kernel's inputs, in order."""
        d, t, b, h = self.dirs, self.steps, self.batch, self.hidden
        shapes = [("xw", (t, b, d * self.gates * h))]
        for k, (_, gates) in enumerate(self.weight_groups()):
            jt = column_tile(gates * h)
            shapes.append((f"rt{k}", (d, -(-gates * h // jt), h, jt)))
        if self.cell == "gru" and self.linear_before_reset:
            shapes.append(("rbh", (d, h)))
        if self.init_h:
            shapes.append(("h0", (d, b, h)))
        if self.init_c:
            shapes.append(("c0", (d, b, h)))
        if self.peepholes:
            shapes.append(("p", (d, 3 * h)))
        return shapes

    def output_shapes(self) -> list[tuple[int, ...]]:
        """``Y[T, D, B, H]``, ``Y_h[D, B, H]`` (and ``Y_c`` for LSTM)."""
        d, t, b, h = self.dirs, self.steps, self.batch, self.hidden
        return [(t, d, b, h), (d, b, h)] + ([(d, b, h)] if self.cell == "lstm" else [])


def _vector_loop(extent: int, body) -> None:
    """``body(j)`` for ``j`` in ``range(extent)``: vectorized by GATE_LANES, then a
    scalar tail."""
    main = extent // GATE_LANES * GATE_LANES
    if main:
        with T.serial(0, main // GATE_LANES) as jo, T.vectorized(0, GATE_LANES) as ji:
            body(jo * GATE_LANES + ji)
    if extent > main:
        with T.serial(0, extent - main) as jt:
            body(main + jt)



def _gemv(acc_out, h_in, rt, d, batch: int, hidden: int, flip=None) -> None:
    """``acc_out[b, j] = sum_k h_in[b, k] * rt[d, j // JT, k, j % JT]`` for all padded
    ``j``: per column tile and row tile, the accumulators stay in registers over
    ``k``. ``flip`` (an expression, 0 or 1): walk the column tiles backwards."""
    _, tiles, _, jt = (int(v) for v in rt.shape)
    rows = _row_tile(batch)
    with T.serial(0, tiles) as jw, T.serial(0, batch // rows) as bo:
        jo = jw if flip is None else T.Bind(jw + flip * (tiles - 1 - 2 * jw))
        acc = stack_tile((rows, jt))
        for bi in range(rows):
            with T.vectorized(0, jt) as ji:
                builder_store(acc, f32(0.0), bi, ji)
        with T.serial(0, hidden) as k:
            for bi in range(rows):
                hk = h_in[bo * rows + bi, k]
                with T.vectorized(0, jt) as ji:
                    builder_store(acc, acc[bi, ji] + hk * rt[d, jo, k, ji], bi, ji)
        for bi in range(rows):
            with T.vectorized(0, jt) as ji:
                builder_store(acc_out, acc[bi, ji], bo * rows + bi, jo * jt + ji)


def _kernel(spec: LoopSpec, ins: dict, outs: list):
    """The loop kernel's body (an IRBuilder program over the extern's buffers)."""
    D, S, B, H, G = spec.dirs, spec.steps, spec.batch, spec.hidden, spec.gates
    y, y_h = outs[0], outs[1]
    y_c = outs[2] if spec.cell == "lstm" else None
    xw = ins["xw"]
    groups = spec.weight_groups()
    with IRBuilder() as ib:
        loop = T.parallel(0, D) if D > 1 else T.serial(0, 1)
        with loop as d:
            hs = T.decl_buffer((B, H), "float32")
            cs = T.decl_buffer((B, H), "float32") if spec.cell == "lstm" else None
            gbufs = [T.decl_buffer((B, int(ins[f"rt{k}"].shape[1] * ins[f"rt{k}"].shape[3])),
                                   "float32") for k in range(len(groups))]
            rh = T.decl_buffer((B, H), "float32") if spec.cell == "gru" else None
            with T.serial(0, B) as b:
                def init(j, b=b):
                    builder_store(hs, ins["h0"][d, b, j] if spec.init_h else f32(0.0), b, j)
                    if cs is not None:
                        builder_store(cs, ins["c0"][d, b, j] if spec.init_c else f32(0.0), b, j)
                _vector_loop(H, init)
            with T.serial(0, S) as s:
                walks = [S - 1 - s if r else s for r in spec.reverse]
                t = T.Bind(walks[0] if len(set(spec.reverse)) == 1
                           else tirx.Select(d == 0, walks[0], walks[1]))
                flip = T.Bind(s % 2) if SNAKE else None
                _gemv(gbufs[0], hs, ins["rt0"], d, B, H, flip)
                base = d * (G * H)

                def x_row(b, t=t, base=base):  # the input projection of step t, entry b
                    return lambda gate, j: xw[t, b, base + gate * H + j]

                with T.serial(0, B) as b:
                    x_at = x_row(b)
                    if spec.cell == "lstm":
                        _lstm_gates(spec, ins, gbufs[0], x_at, hs, cs, y, t, d, b)
                    elif spec.cell == "rnn":
                        def rnn(j, b=b, x_at=x_at):
                            h_new = _tanh(gbufs[0][b, j] + x_at(0, j))
                            builder_store(hs, h_new, b, j)
                            builder_store(y, h_new, t, d, b, j)
                        _vector_loop(H, rnn)
                    else:
                        _gru_zr(spec, gbufs[0], x_at, hs, rh, b)
                if spec.cell == "gru":
                    _gemv(gbufs[1], hs if spec.linear_before_reset else rh, ins["rt1"], d, B, H,
                          flip)
                    with T.serial(0, B) as b:
                        _gru_h(spec, ins, gbufs, rh, x_row(b), hs, y, t, d, b)
            with T.serial(0, B) as b:
                def final(j, b=b):
                    builder_store(y_h, hs[b, j], d, b, j)
                    if y_c is not None:
                        builder_store(y_c, cs[b, j], d, b, j)
                _vector_loop(H, final)
    return ib.get()


def _lstm_gates(spec, ins, g, x_at, hs, cs, y, t, d, b) -> None:
    H = spec.hidden

    def pre(gate, j):
        return g[b, gate * H + j] + x_at(gate, j)

    def body(j):
        c = T.Bind(cs[b, j])
        i_pre, f_pre = pre(0, j), pre(2, j)
        if spec.peepholes:
            i_pre = i_pre + ins["p"][d, j] * c
            f_pre = f_pre + ins["p"][d, 2 * H + j] * c
        c_new = T.Bind(_sigmoid(f_pre) * c + _sigmoid(i_pre) * _tanh(pre(3, j)))
        builder_store(cs, c_new, b, j)
        o_pre = pre(1, j)
        if spec.peepholes:
            o_pre = o_pre + ins["p"][d, H + j] * c_new
        h_new = T.Bind(_sigmoid(o_pre) * _tanh(c_new))
        builder_store(hs, h_new, b, j)
        builder_store(y, h_new, t, d, b, j)

    _vector_loop(H, body)


def _gru_zr(spec, g, x_at, hs, rh, b) -> None:
    """``z`` stays in ``g[b, :H]`` (sigmoid applied); ``rh = r * h`` (or ``r`` alone
    with ``linear_before_reset``) for the candidate's GEMV."""
    H = spec.hidden

    def body(j):
        z = _sigmoid(g[b, j] + x_at(0, j))
        r = _sigmoid(g[b, H + j] + x_at(1, j))
        builder_store(g, z, b, j)
        builder_store(rh, r if spec.linear_before_reset else r * hs[b, j], b, j)

    _vector_loop(H, body)


def _gru_h(spec, ins, gbufs, rh, x_at, hs, y, t, d, b) -> None:
    """The candidate and the new state: ``gbufs[0]`` holds ``z``, ``gbufs[1]`` the
    candidate's GEMV, ``rh`` holds ``r`` with ``linear_before_reset``."""
    H = spec.hidden
    z_buf, hh = gbufs[0], gbufs[1]

    def body(j):
        if spec.linear_before_reset:
            cand = _tanh(x_at(2, j) + rh[b, j] * (hh[b, j] + ins["rbh"][d, j]))
        else:
            cand = _tanh(x_at(2, j) + hh[b, j])
        z = T.Bind(z_buf[b, j])
        h_new = T.Bind((f32(1.0) - z) * cand + z * hs[b, j])
        builder_store(hs, h_new, b, j)
        builder_store(y, h_new, t, d, b, j)

    _vector_loop(H, body)


def _own_steps(spec: LoopSpec) -> LoopSpec:
    """``spec`` with a symbolic step count replaced by the kernel's own variable.

    The caller's extent may be an expression (``W // 4``) that no parameter's shape
    binds; a fresh int32 var as ``XW``'s and ``Y``'s first dim is bound from those
    buffers at the call, and keeps the index arithmetic int32 like the static kernel's.
    """
    if isinstance(spec.steps, int):
        return spec
    if isinstance(spec.steps, tirx.IntImm):
        return replace(spec, steps=int(spec.steps))
    return replace(spec, steps=tirx.Var("steps", "int32"))


def recurrent_loop(spec: LoopSpec, name: str | None = None) -> tirx.PrimFunc:
    """The loop kernel of ``spec`` as a PrimFunc marked ``tirx.is_scheduled``;
    parameters: :meth:`LoopSpec.input_shapes`, then :meth:`LoopSpec.output_shapes`."""
    if spec.cell not in CELLS:
        raise ValueError(f"unknown recurrent cell {spec.cell!r}; one of {CELLS}")
    if not isinstance(spec.batch, int) or not isinstance(spec.hidden, int):
        raise TypeError(f"the loop kernel needs a static batch and hidden size, got "
                        f"batch={spec.batch}, hidden={spec.hidden}")
    spec = _own_steps(spec)
    names = [n for n, _ in spec.input_shapes()]
    placeholders = [te.placeholder(shape, "float32", name=n) for n, shape in spec.input_shapes()]
    out_shapes = spec.output_shapes()

    def build(ins, outs):
        return _kernel(spec, dict(zip(names, ins)), list(outs))

    outs = te.extern(out_shapes, placeholders, build, name=name or f"{spec.cell}_loop",
                     dtype=["float32"] * len(out_shapes))
    outs = outs if isinstance(outs, list) else [outs]
    func = te.create_prim_func(placeholders + outs)
    return func.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)

"""Scaled dot-product attention as one kernel: ``softmax(Q K^T * scale) V``.

Unfused, attention is three kernels with two ``[*batch, S, T]`` tensors between them
(scores, then probabilities), a separate pack of ``K^T`` for the matmul and a softmax
whose two row reductions each read the whole score matrix again. Here one compute
holds the chain; its schedule (:mod:`tvm_cocopie.schedules.cpu.attention`) runs it per
head and block of query rows with the rows' scores in cache:

- ``attn_k_pack``: ``K^T`` with its ``T`` columns padded to whole register tiles
  (zeros), so the score loop is whole vectors;
- ``attn_q_pack``: a register tile's query rows (padded rows repeat the last query);
- ``attn_scores``: ``Q K^T`` over the padded columns;
- ``attn_max_part`` / ``attn_max_tail`` / ``attn_max_lanes`` / ``attn_max``: the row
  maximum over the ``T``
  real columns, in vector lanes over the whole vectors and a scalar tail (a padded
  column's score, 0, must not enter the maximum);
- ``attn_delta``, TOPI's ``fast_exp`` (vectorizable polynomial), ``attn_exp``:
  ``exp((s - max) * scale)``, 0 on padded columns;
- ``attn_sum_part`` / ``attn_sum``: the row sum, in lanes;
- ``attn_pv`` and ``attn_norm``: the probabilities times ``V`` over the real columns,
  divided by the row sum;
- ``attn_out``: the ``S`` real rows (every step before runs on ``S`` rounded up to whole
  register tiles, the extra rows repeating the last query, so the schedule's row loops
  carry no bound).

``scale`` must be positive (``softmax(c * s)`` then subtracts ``c * max(s)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import te, tirx, topi

#: block names the schedule rule looks for
BLOCKS = ("attn_k_pack", "attn_q_pack", "attn_scores", "attn_max_part", "attn_max_tail",
          "attn_max_lanes", "attn_max", "attn_delta", "attn_exp", "attn_sum_part", "attn_sum",
          "attn_pv", "attn_norm", "attn_out")


@dataclass(frozen=True)
class AttentionTile:
    """``rows`` query rows per register tile, ``cols`` vectors of ``lanes`` scores per
    tile (the score columns are padded to ``cols * lanes``)."""

    rows: int
    cols: int
    lanes: int

    @property
    def width(self) -> int:
        """Columns of one register tile."""
        return self.cols * self.lanes


def attention_tile(lanes: int) -> AttentionTile:
    """The register tile for ``lanes`` float32 lanes: 4 rows x 2 vectors of scores (8
    accumulators, AVX2's 16 registers leave room for the loads; AVX-512 too)."""
    return AttentionTile(rows=4, cols=2, lanes=lanes)


def padded_columns(t, tile: AttentionTile):
    """``t`` rounded up to whole register tiles (an int, or an expression for a symbolic
    ``t``)."""
    if isinstance(t, int):
        return -(-t // tile.width) * tile.width
    return tirx.floordiv(t + (tile.width - 1), tile.width) * tile.width


def _dim(n):
    """A shape's dim as an int, or the expression of a symbolic one."""
    return int(n) if isinstance(n, int | tirx.IntImm) else n


def _is_one(n) -> bool:
    return isinstance(n, int) and n == 1


def _unpermuted(idx, axes) -> list:
    """The input's index of ``permute_dims(input, axes)`` at ``idx`` (or its shape, for a
    shape)."""
    return [idx[axes.index(a)] for a in range(len(axes))]


@dataclass(frozen=True)
class View:
    """How the kernel reads an operand of shape ``shape`` from the tensor it is given,
    without a copy: ``steps``, from the operand back to that tensor, each mapping an
    index of its result to an index of its input:

    - ``("permute", axes)``: the result is ``permute_dims(input, axes)``;
    - ``("squeeze", axes)``: unit ``axes`` of the input squeezed away;
    - ``("offset", axis, begin, extent)``: one part of a ``split`` along ``axis`` of an
      input ``extent`` long there;
    - ``("reshape", input_shape)``: a reshape of the input.

    Dims may be symbolic (a sequence of run-time length): ints and TIR expressions.
    """

    shape: tuple
    steps: tuple = ()

    def rebound(self, dims: dict) -> View:
        """The view with each symbolic dim (a variable) replaced by ``dims[its name]``:
        the pass writes the graph's variables, the kernel's compute has its own (the
        same names). A symbolic dim that is not a plain variable is not supported."""
        def one(n):
            if isinstance(n, int | tirx.IntImm):
                return int(n)
            if isinstance(n, tirx.Var) and str(n.name) in dims:
                return dims[str(n.name)]
            raise ValueError(f"attention view over a dim {n} that is not a variable of "
                             "its operand")
        steps = tuple((kind, tuple(one(n) for n in rest[0])) if kind == "reshape"
                      else (kind, *rest) for kind, *rest in self.steps)
        return View(tuple(one(n) for n in self.shape), steps)

    def index(self, idx) -> tuple:
        """The given tensor's index of the operand's ``idx``."""
        shape = list(self.shape)
        idx = list(idx)
        for step in self.steps:
            kind = step[0]
            if kind == "permute":
                idx, shape = _unpermuted(idx, list(step[1])), _unpermuted(shape, list(step[1]))
            elif kind == "squeeze":
                for a in sorted(step[1]):
                    idx.insert(a, 0)
                    shape.insert(a, 1)
            elif kind == "offset":
                idx[step[1]] = idx[step[1]] + step[2]
                shape[step[1]] = step[3]
            else:  # reshape
                idx, shape = _reshaped_index(idx, shape, list(step[1]))
        return tuple(idx)


def _same_dim(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return a.same_as(b)


def _reshaped_index(idx: list, shape: list, source: list) -> tuple[list, list]:
    """The index into ``source`` (a reshape's input shape) of ``idx`` in its result
    ``shape``: the dims both keep at their start and end pass through, the ones between
    are raveled in the result and unraveled in the input, the outermost of those without
    a modulo. (Raveling the whole index put a modulo by a symbolic sequence length in
    every load of a head's row: BERT's attention over a run-time sequence ran 2x its
    static time.)"""
    head = 0
    while head < min(len(shape), len(source)) and _same_dim(shape[head], source[head]):
        head += 1
    tail = 0
    while (tail < min(len(shape), len(source)) - head
           and _same_dim(shape[-1 - tail], source[-1 - tail])):
        tail += 1
    mid = slice(head, len(idx) - tail)
    flat = 0
    for i, n in zip(idx[mid], shape[mid], strict=True):
        flat = flat * n + i
    dims = source[head:len(source) - tail]
    inner = []
    for n in reversed(dims[1:]):
        inner.insert(0, 0 if _is_one(n) else flat % n)
        flat = flat // n
    middle = ([flat] + inner) if dims else []
    return [*idx[:head], *middle, *idx[len(idx) - tail:]], source


def _through(x: te.Tensor, view: View | None):
    """The operand ``view`` makes of ``x``: its shape and an index function."""
    if view is None:
        return [_dim(n) for n in x.shape], lambda idx: x[tuple(idx)]
    view = view.rebound({str(n.name): n for n in x.shape if isinstance(n, tirx.Var)})
    return list(view.shape), lambda idx: x[view.index(idx)]


def attention(q: te.Tensor, kt: te.Tensor, v: te.Tensor, scale: float,
              tile: AttentionTile, views=(None, None, None), out_axes=None) -> te.Tensor:
    """``softmax(q @ kt * scale, axis=-1) @ v`` for ``q [*b, S, D]``, ``kt [*b, D, T]``,
    ``v [*b, T, E]`` (the same batch dims; ``S`` and ``T`` may be symbolic, a sequence
    of run-time length); ``[*b, S, E]``.

    ``views``: for each of ``q``, ``kt``, ``v``, the :class:`View` the kernel reads it
    through from the tensor given (the heads split off a ``[B, S, H, D]`` projection,
    ``K`` transposed, a ``split``'s part squeezed), or ``None``. ``out_axes``: the
    result written permuted (``permute_dims(result, out_axes)``: the heads merged back
    into ``[B, S, H, E]`` by the store, not by a transpose kernel).
    """
    (q_shape, q_at), (k_shape, k_at), (v_shape, v_at) = (
        _through(x, a) for x, a in zip((q, kt, v), views, strict=True))
    *batch, s, d = q_shape
    t = k_shape[-1]
    e = v_shape[-1]
    tp = padded_columns(t, tile)
    sp = (-(-s // tile.rows) * tile.rows if isinstance(s, int)
          else tirx.floordiv(s + (tile.rows - 1), tile.rows) * tile.rows)
    lanes = tile.lanes
    static = isinstance(t, int)
    whole = t - t % lanes if static else None
    dtype = q.dtype
    zero = tirx.const(0.0, dtype)

    k_pack = te.compute((*batch, d, tp), lambda *i: tirx.if_then_else(
        i[-1] < t, k_at((*i[:-1], tirx.min(i[-1], t - 1))), zero), name="attn_k_pack")
    # the rows of a register tile, the last query repeated on padded rows (a clamped
    # index inside the FMA loop cost a third of the kernel at 197 tokens)
    q_pack = te.compute((*batch, sp, d), lambda *i: q_at((*i[:-2], tirx.min(i[-2], s - 1),
                                                          i[-1])), name="attn_q_pack")
    rd = te.reduce_axis((0, d), "rd")
    scores = te.compute((*batch, sp, tp), lambda *i: te.sum(
        q_pack[(*i[:-1], rd)] * k_pack[(*i[:-2], rd, i[-1])], axis=rd), name="attn_scores")
    if static:
        ro = te.reduce_axis((0, whole // lanes), "ro")
        max_part = te.compute((*batch, sp, lanes), lambda *i: te.max(
            scores[(*i[:-1], ro * lanes + i[-1])], axis=ro), name="attn_max_part")
    else:  # T of run-time size: every padded column, a padded one masked out
        ro = te.reduce_axis((0, tp // lanes), "ro")
        max_part = te.compute((*batch, sp, lanes), lambda *i: te.max(tirx.if_then_else(
            ro * lanes + i[-1] < t, scores[(*i[:-1], ro * lanes + i[-1])],
            tirx.min_value(dtype)), axis=ro), name="attn_max_part")
    if static and t > whole:
        rt = te.reduce_axis((0, t - whole), "rt")
        max_tail = te.compute((*batch, sp), lambda *i: te.max(
            scores[(*i, rt + whole)], axis=rt), name="attn_max_tail")
    else:  # no tail (or masked above): a reduction over nothing would never run its init
        max_tail = te.compute((*batch, sp), lambda *i: tirx.min_value(dtype),
                              name="attn_max_tail")
    rl = te.reduce_axis((0, lanes), "rl")
    lane_max = te.compute((*batch, sp), lambda *i: te.max(max_part[(*i, rl)], axis=rl),
                          name="attn_max_lanes")
    row_max = te.compute((*batch, sp), lambda *i: tirx.max(lane_max(*i), max_tail(*i)),
                         name="attn_max")
    c = tirx.const(float(scale), dtype)
    delta = te.compute((*batch, sp, tp), lambda *i: (scores(*i) - row_max(*i[:-1])) * c,
                       name="attn_delta")
    expo = topi.fast_exp(delta)
    probs = te.compute((*batch, sp, tp), lambda *i: tirx.if_then_else(
        i[-1] < t, expo(*i), zero), name="attn_exp")
    rs = te.reduce_axis((0, tp // lanes), "rs")
    sum_part = te.compute((*batch, sp, lanes), lambda *i: te.sum(
        probs[(*i[:-1], rs * lanes + i[-1])], axis=rs), name="attn_sum_part")
    rl2 = te.reduce_axis((0, lanes), "rl2")
    row_sum = te.compute((*batch, sp), lambda *i: te.sum(sum_part[(*i, rl2)], axis=rl2),
                         name="attn_sum")
    rj = te.reduce_axis((0, t), "rj")
    pv = te.compute((*batch, sp, e), lambda *i: te.sum(
        probs[(*i[:-1], rj)] * v_at((*i[:-2], rj, i[-1])), axis=rj), name="attn_pv")
    norm = te.compute((*batch, sp, e), lambda *i: pv(*i) / row_sum(*i[:-1]), name="attn_norm")
    if out_axes is None:
        return te.compute((*batch, s, e), lambda *i: norm(*i), name="attn_out")
    shape = [*batch, s, e]
    out_axes = [int(a) for a in out_axes]
    return te.compute([shape[a] for a in out_axes], lambda *i: norm(*_unpermuted(i, out_axes)),
                      name="attn_out")


def attention_numpy(q, kt, v, scale: float):
    """The float64 reference of :func:`attention` (tests)."""
    import numpy as np

    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * scale
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.matmul(s / s.sum(axis=-1, keepdims=True), v.astype(np.float64))

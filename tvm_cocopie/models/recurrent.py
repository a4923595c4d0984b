"""Recurrent layers for the zoo: ONNX ``LSTM`` and ``GRU`` nodes with numpy references.

The zoo's :class:`~tvm_cocopie.models.graph_builder.GraphBuilder` computes every
tensor for a calibration batch while it builds the graph; these helpers add one
recurrent node and compute its outputs with the equations of the ONNX operator
specs (https://onnx.ai/onnx/operators/onnx__LSTM.html, ``onnx__GRU.html``), default
activations, no peepholes:

- LSTM (Hochreiter and Schmidhuber, Neural Computation 1997), gates in ONNX order
  ``i, o, f, c``: ``i = s(Xi + Hi)``, ``f = s(Xf + Hf)``, ``c~ = tanh(Xc + Hc)``,
  ``C = f*C + i*c~``, ``o = s(Xo + Ho)``, ``H = o*tanh(C)``;
- GRU (Cho et al., EMNLP 2014), gates ``z, r, h``, with ``linear_before_reset=1``
  as PyTorch exports it: ``h~ = tanh(Xh + r*(H Rh^T + Rbh))``, ``H = (1-z)*h~ + z*H``.

Weights follow PyTorch's default initialization of ``nn.LSTM``/``nn.GRU``: every
weight and bias ``U(-1/sqrt(hidden), 1/sqrt(hidden))``. Inputs are time-major
(``layout=0``: ``[seq, batch, features]``), as the PyTorch exporter writes them.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import helper

from .graph_builder import GraphBuilder

#: Gate count of each cell type.
GATES = {"LSTM": 4, "GRU": 3}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def lstm_reference(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray):
    """ONNX LSTM, ``x [T, N, I]``, one direction per row of ``w``/``r``/``b``.

    Direction 0 runs forward, direction 1 (if present) backward. Returns ``Y [T, D,
    N, H]``, ``Y_h [D, N, H]``, ``Y_c [D, N, H]``.
    """
    steps, batch = x.shape[:2]
    dirs, hidden = w.shape[0], r.shape[-1]
    y = np.zeros((steps, dirs, batch, hidden), np.float64)
    y_h = np.zeros((dirs, batch, hidden))
    y_c = np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        xw = x.astype(np.float64) @ w[d].T + b[d, :4 * hidden] + b[d, 4 * hidden:]
        h = np.zeros((batch, hidden))
        c = np.zeros((batch, hidden))
        for t in (range(steps) if d == 0 else reversed(range(steps))):
            g = xw[t] + h @ r[d].T
            i, o, f, cand = np.split(g, 4, axis=-1)
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cand)
            h = _sigmoid(o) * np.tanh(c)
            y[t, d] = h
        y_h[d], y_c[d] = h, c
    return y.astype(np.float32), y_h.astype(np.float32), y_c.astype(np.float32)


def gru_reference(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray):
    """ONNX GRU with ``linear_before_reset=1``; returns ``Y [T, D, N, H]``, ``Y_h``."""
    steps, batch = x.shape[:2]
    dirs, hidden = w.shape[0], r.shape[-1]
    y = np.zeros((steps, dirs, batch, hidden), np.float64)
    y_h = np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        wb, rb = b[d, :3 * hidden], b[d, 3 * hidden:]
        xw = x.astype(np.float64) @ w[d].T + wb
        h = np.zeros((batch, hidden))
        for t in (range(steps) if d == 0 else reversed(range(steps))):
            hr = h @ r[d].T + rb
            xz, xr, xh = np.split(xw[t], 3, axis=-1)
            hz, hh_r, hh = np.split(hr, 3, axis=-1)
            z = _sigmoid(xz + hz)
            reset = _sigmoid(xr + hh_r)
            cand = np.tanh(xh + reset * hh)
            h = (1.0 - z) * cand + z * h
            y[t, d] = h
        y_h[d] = h
    return y.astype(np.float32), y_h.astype(np.float32)


def recurrent(gb: GraphBuilder, x: str, hidden: int, cell: str = "LSTM",
              bidirectional: bool = False, kind: str = "rnn") -> tuple[str, str]:
    """One ``LSTM``/``GRU`` node over time-major ``x [T, N, I]``; ``(Y, Y_h)`` names.

    ``Y`` is ``[T, D, N, hidden]`` and ``Y_h`` ``[D, N, hidden]`` with ``D = 2`` when
    ``bidirectional`` (forward then backward). Weights are PyTorch's default init.
    """
    cell = cell.upper()
    if cell not in GATES:
        raise ValueError(f"cell must be one of {sorted(GATES)}, got {cell!r}")
    xv = gb.values[x]
    features = int(xv.shape[-1])
    dirs = 2 if bidirectional else 1
    gates = GATES[cell]
    bound = 1.0 / math.sqrt(hidden)

    def uniform(*shape: int) -> np.ndarray:
        return gb.rng.uniform(-bound, bound, shape).astype(np.float32)

    w = uniform(dirs, gates * hidden, features)
    r = uniform(dirs, gates * hidden, hidden)
    b = uniform(dirs, 2 * gates * hidden)
    inputs = [x, gb.const(w, f"{kind}.weight_ih"), gb.const(r, f"{kind}.weight_hh"),
              gb.const(b, f"{kind}.bias")]
    name = gb.fresh(kind)
    y_name, h_name = gb.fresh(f"{kind}.Y"), gb.fresh(f"{kind}.Y_h")
    attrs = {"hidden_size": hidden, "direction": "bidirectional" if bidirectional else "forward"}
    if cell == "LSTM":
        y, y_h, _ = lstm_reference(xv, w, r, b)
    else:
        y, y_h = gru_reference(xv, w, r, b)
        attrs["linear_before_reset"] = 1
    gb.nodes.append(helper.make_node(cell, inputs, [y_name, h_name], name=name, **attrs))
    gb.values[y_name], gb.values[h_name] = y, y_h
    return y_name, h_name


def merge_directions(gb: GraphBuilder, y: str) -> str:
    """``Y [T, D, N, H]`` -> ``[T, N, D*H]`` (Transpose + Reshape, as exporters write it)."""
    hidden = int(gb.values[y].shape[-1]) * int(gb.values[y].shape[1])
    return gb.reshape(gb.transpose(y, (0, 2, 1, 3)), [0, 0, hidden])

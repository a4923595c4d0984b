"""A keyword-spotting model: log-mel frames -> GRU (or LSTM) -> linear classifier.

Zhang, Suda, Lai and Chandra, "Hello Edge: Keyword Spotting on Microcontrollers",
arXiv:1711.07128, 2017 (Sec. 3: the GRU and LSTM models): one second of audio as
``frames`` = 49 feature frames (40 ms windows, 20 ms hop) of ``features`` = 40
log-mel energies, ``input [batch, 49, 40]``, transposed to time-major as the PyTorch
exporter writes ``batch_first`` recurrent layers, ``layers`` stacked GRU layers (the
exporter's ``linear_before_reset=1``), the last layer's final state, and a linear
layer to ``num_classes`` = 12 scores (Speech Commands' ten words, "silence",
"unknown"): ``output [batch, 12]``. The same skeleton, with per-frame outputs,
is a voice-activity detector.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from .graph_builder import GraphBuilder, batch_dim
from .recurrent import recurrent


def kws_gru(*, batch: int = 1, seed: int = 0, frames: int = 49, features: int = 40,
            hidden: int = 128, layers: int = 2, num_classes: int = 12, cell: str = "GRU",
            dynamic_batch: bool = False) -> onnx.ModelProto:
    """Keyword spotting over ``[batch, frames, features]``; ``cell`` is GRU or LSTM."""
    if layers < 1:
        raise ValueError(f"kws_gru needs at least one recurrent layer, got {layers}")
    gb = GraphBuilder(f"kws_{cell.lower()}", seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), frames, features],
                 TensorProto.FLOAT)
    x = gb.transpose(x, (1, 0, 2))  # [T, N, F]
    for i in range(layers):
        with gb.scope(f"rnn.{i}"):
            y, y_h = recurrent(gb, x, hidden, cell, kind=cell.lower())
            x = gb.reshape(y, [0, 0, hidden])  # [T, 1, N, H] -> [T, N, H]
    x = gb.reshape(y_h, [-1, hidden])  # the last layer's final state, [N, H]
    x = gb.gemm(x, num_classes, kind="classifier")
    gb.output(x)
    return gb.model(f"kws_gru: {layers} x {cell}({hidden}) over {frames}x{features} "
                    f"log-mel frames, {num_classes} classes; random weights (seed {seed})")

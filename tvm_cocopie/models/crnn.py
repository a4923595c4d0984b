"""A CRNN text-line recognizer: conv backbone, bidirectional LSTMs, linear head.

Shi, Bai and Yao, "An End-to-End Trainable Neural Network for Image-based Sequence
Recognition and Its Application to Scene Text Recognition", TPAMI 2017 (Sec. 2 and
Table 1), scaled down: a 32-pixel-high grayscale text line ``input [batch, 1, 32,
W]`` goes through five 3x3 conv layers (BN after the third and fifth) with max pools
of 2x2 (twice) and then 2x1 (three times, which halve the height only), so the
feature map is one row of ``W / 4`` columns. "Map-to-sequence" reads the columns as
time steps (Reshape + Transpose to ``[T, batch, C]``), two bidirectional LSTM layers
follow, and a linear layer gives per-column class scores: ``output [batch, W/4,
num_classes]`` (36 letters and digits plus the CTC blank by default), the
pre-softmax input of CTC decoding. This is the shape of the recognizers of OCR
pipelines (PP-OCR's rec model has the same skeleton).

:func:`crnn_large_vocab` is the same network with the paper's 256-wide LSTMs and a
6625-class head, the size of PP-OCR's Chinese dictionary: the large-vocabulary
projection that dominates such recognizers.

``dynamic_width=True`` leaves the line width symbolic (input ``[batch, 1, 32, "W"]``,
output ``[batch, "T", num_classes]`` with ``T = W // 4``): map-to-sequence reshapes to
``[batch, C, -1]`` instead of the built-in step count, so the LSTMs run over as many
steps as the line has columns (issue 17: one build for every width). The weights are
those of the static model of width ``image_size``, where BN is calibrated.
"""

from __future__ import annotations

import onnx

from .graph_builder import GraphBuilder, batch_dim
from .recurrent import merge_directions, recurrent

#: The symbolic dims of a ``dynamic_width`` CRNN: the line width and the time steps.
WIDTH, STEPS = "W", "T"

#: Output channels of the five conv layers and whether BN follows.
CRNN_CONVS = ((32, False), (64, False), (128, True), (128, False), (256, True))
#: Text-line height the backbone reduces to one row.
LINE_HEIGHT = 32


def _pool_height(gb: GraphBuilder, x: str) -> str:
    """MaxPool with a 2x1 window and stride: halves the height, keeps the width."""
    v = gb.values[x]
    n, c, h, w = v.shape
    y = v.reshape(n, c, h // 2, 2, w).max(axis=3)
    return gb.node("MaxPool", [x], y, kind="pool", kernel_shape=[2, 1], strides=[2, 1])


#: Classes of the large-vocabulary head: PP-OCR's Chinese dictionary (6623 characters),
#: the space and the CTC blank.
LARGE_VOCAB = 6625


def crnn(*, batch: int = 1, seed: int = 0, image_size: int = 128, hidden: int = 128,
         num_classes: int = 37, dynamic_batch: bool = False, dynamic_width: bool = False,
         name: str = "crnn") -> onnx.ModelProto:
    """CRNN for ``[batch, 1, 32, image_size]`` lines; ``image_size`` (the width) % 4 == 0.

    ``hidden`` is the LSTM state size per direction (256 in the paper).
    ``dynamic_width``: the width symbolic (``W``, any width; see the module docstring).
    """
    if image_size % 4 or image_size < 8:
        raise ValueError(f"crnn needs a line width divisible by 4 (>= 8), got {image_size}")
    gb = GraphBuilder(name, seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 1, LINE_HEIGHT, image_size])
    with gb.scope("cnn"):
        for i, (cout, bn) in enumerate(CRNN_CONVS):
            with gb.scope(str(i)):
                x = gb.conv_bn(x, cout) if bn else gb.conv(x, cout, bias=True)
                x = gb.relu(x)
                x = gb.maxpool(x, 2, 2) if i < 2 else _pool_height(gb, x)
    channels, steps = gb.channels(x), int(gb.values[x].shape[-1])
    # [T, N, C]; -1: the width's steps, whatever the width
    x = gb.transpose(gb.reshape(x, [0, channels, -1 if dynamic_width else steps]), (2, 0, 1))
    for i in range(2):
        with gb.scope(f"rnn.{i}"):
            y, _ = recurrent(gb, x, hidden, "LSTM", bidirectional=True, kind="lstm")
            x = merge_directions(gb, y)  # [T, N, 2*hidden]
    x = gb.transpose(x, (1, 0, 2))  # [N, T, 2*hidden]
    x = gb.linear(x, num_classes, kind="head")
    gb.output(x)
    if dynamic_width:  # declared after the build: the calibration ran at image_size
        gb.inputs[0].type.tensor_type.shape.dim[3].dim_param = WIDTH
        gb.outputs[0].type.tensor_type.shape.dim[1].dim_param = STEPS
    line = f"32x{WIDTH}" if dynamic_width else f"32x{image_size}"
    return gb.model(f"{name}: {len(CRNN_CONVS)} convs, 2 BiLSTM({hidden}), {num_classes} "
                    f"classes, line {line}; random weights (seed {seed})")


def crnn_large_vocab(*, batch: int = 1, seed: int = 0, image_size: int = 320,
                     hidden: int = 256, num_classes: int = LARGE_VOCAB,
                     dynamic_batch: bool = False,
                     dynamic_width: bool = False) -> onnx.ModelProto:
    """The CRNN with the paper's 256-wide BiLSTMs and a large-vocabulary head.

    6625 classes by default, the size of PP-OCR's Chinese recognizer head; 320-pixel
    lines (PP-OCR's recognizer width), so 80 time steps. The head, a ``[512, 6625]``
    MatMul, holds most of the weights.
    """
    return crnn(batch=batch, seed=seed, image_size=image_size, hidden=hidden,
                num_classes=num_classes, dynamic_batch=dynamic_batch,
                dynamic_width=dynamic_width, name="crnn_large_vocab")

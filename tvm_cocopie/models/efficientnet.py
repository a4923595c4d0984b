"""EfficientNet-B0 with torchvision's topology.

Tan and Le, "EfficientNet: Rethinking Model Scaling for Convolutional Neural
Networks", ICML 2019 (Table 1); the layout follows ``torchvision.models.efficientnet_b0``:
a 3x3/2 stem conv to 32 channels + BN + swish, seven stages of MBConv blocks, a 1x1
conv to 1280 channels + BN + swish, global average pooling, Flatten and a fully
connected layer (dropout and stochastic depth are absent at inference).

An MBConv block (Sandler et al.'s inverted residual with squeeze-and-excitation) is a
1x1 expansion conv + BN + swish (skipped when the expansion ratio is 1), a 3x3 or 5x5
depthwise conv + BN + swish, squeeze-and-excitation (global average pooling, 1x1 conv
with bias to a quarter of the block's *input* width, swish, 1x1 conv with bias back,
sigmoid, multiply), a linear 1x1 projection + BN, and an identity shortcut when the
stride is 1 and the widths match. Swish (SiLU) is ``x * sigmoid(x)``, written as the
PyTorch exporter writes it at opset 17: ``Sigmoid`` + ``Mul``.
"""

from __future__ import annotations

import onnx

from .graph_builder import GraphBuilder, batch_dim
from .mobilenetv3 import squeeze_excite

#: (expansion ratio, kernel, first stride, output width, repeats): Table 1 of the paper.
B0_SETTING = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)


def _conv_bn_silu(gb: GraphBuilder, x: str, cout: int, k: int, stride: int,
                  groups: int = 1) -> str:
    return gb.silu(gb.conv_bn(x, cout, k, stride, groups=groups))


def _mbconv(gb: GraphBuilder, x: str, expand: int, k: int, stride: int, cout: int) -> str:
    cin = gb.channels(x)
    hidden = cin * expand
    y = x
    with gb.scope("block"):
        if expand != 1:
            with gb.scope("expand"):
                y = _conv_bn_silu(gb, y, hidden, 1, 1)
        with gb.scope("dw"):
            y = _conv_bn_silu(gb, y, hidden, k, stride, groups=hidden)
        y = squeeze_excite(gb, y, max(1, cin // 4), inner="silu", gate="sigmoid")
        with gb.scope("project"):
            y = gb.conv_bn(y, cout, 1, 1)
    if stride == 1 and cin == cout:
        y = gb.add(x, y)
    return y


def efficientnet_b0(*, batch: int = 1, seed: int = 0, image_size: int = 224,
                    num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """EfficientNet-B0: 16 MBConv blocks in seven stages, 1280-channel head (Table 1)."""
    gb = GraphBuilder("efficientnet_b0", seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    with gb.scope("features.0"):
        x = _conv_bn_silu(gb, x, 32, 3, 2)
    for stage, (expand, k, stride, cout, repeats) in enumerate(B0_SETTING, start=1):
        for i in range(repeats):
            with gb.scope(f"features.{stage}.{i}"):
                x = _mbconv(gb, x, expand, k, stride if i == 0 else 1, cout)
    with gb.scope(f"features.{len(B0_SETTING) + 1}"):
        x = _conv_bn_silu(gb, x, 1280, 1, 1)
    x = gb.flatten(gb.global_avgpool(x))
    gb.output(gb.gemm(x, num_classes, kind="classifier.1"))
    return gb.model(f"efficientnet_b0: torchvision topology, random weights (seed {seed})")

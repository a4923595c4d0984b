"""MobileNetV2 with torchvision's topology.

Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR 2018;
the layout follows ``torchvision.models.mobilenet_v2``: a 3x3/2 stem conv, seven
stages of inverted residual blocks (1x1 expansion + BN + ReLU6, depthwise 3x3 + BN +
ReLU6, linear 1x1 projection + BN, identity shortcut when the shape allows), a 1x1
conv to 1280 channels, global average pooling and a fully connected layer. ReLU6 is
``Clip(0, 6)`` as the PyTorch exporter writes it; dropout is absent at inference.
"""

from __future__ import annotations

import onnx

from .graph_builder import GraphBuilder, batch_dim

#: (expansion t, channels c, repeats n, first stride s), Table 2 of the paper.
INVERTED_RESIDUAL_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of ``divisor``, never 10% below ``v``."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _conv_bn_relu6(gb: GraphBuilder, x: str, cout: int, k: int, stride: int,
                   groups: int = 1) -> str:
    return gb.relu6(gb.conv_bn(x, cout, k, stride, groups=groups))


def _inverted_residual(gb: GraphBuilder, x: str, cout: int, stride: int, t: int) -> str:
    cin = gb.channels(x)
    hidden = cin * t
    y = x
    with gb.scope("conv"):
        if t != 1:
            with gb.scope("expand"):
                y = _conv_bn_relu6(gb, y, hidden, 1, 1)
        with gb.scope("dw"):
            y = _conv_bn_relu6(gb, y, hidden, 3, stride, groups=hidden)
        with gb.scope("project"):
            y = gb.conv_bn(y, cout, 1, 1)
    if stride == 1 and cin == cout:
        y = gb.add(x, y)
    return y


def mobilenetv2(*, batch: int = 1, seed: int = 0, image_size: int = 224,
                num_classes: int = 1000, width_mult: float = 1.0,
                dynamic_batch: bool = False) -> onnx.ModelProto:
    """MobileNetV2 (torchvision topology); ``width_mult`` scales every layer's width."""
    gb = GraphBuilder("mobilenetv2", seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    with gb.scope("features.0"):
        x = _conv_bn_relu6(gb, x, make_divisible(32 * width_mult), 3, 2)
    index = 1
    for t, c, n, s in INVERTED_RESIDUAL_SETTING:
        cout = make_divisible(c * width_mult)
        for i in range(n):
            with gb.scope(f"features.{index}"):
                x = _inverted_residual(gb, x, cout, s if i == 0 else 1, t)
            index += 1
    with gb.scope(f"features.{index}"):
        x = _conv_bn_relu6(gb, x, make_divisible(1280 * max(1.0, width_mult)), 1, 1)
    x = gb.flatten(gb.global_avgpool(x))
    gb.output(gb.gemm(x, num_classes, kind="classifier"))
    return gb.model(f"mobilenetv2: torchvision topology, random weights (seed {seed})")

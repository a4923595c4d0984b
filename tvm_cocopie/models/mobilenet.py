"""MobileNetV2 with torchvision's topology.

Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR 2018;
the layout follows ``torchvision.models.mobilenet_v2``: a 3x3/2 stem conv, seven
stages of inverted residual blocks (1x1 expansion + BN + ReLU6, depthwise 3x3 + BN +
ReLU6, linear 1x1 projection + BN, identity shortcut when the shape allows), a 1x1
conv to 1280 channels, global average pooling and a fully connected layer. ReLU6 is
``Clip(0, 6)`` as the PyTorch exporter writes it; dropout is absent at inference.

The variants of Gibson's thesis (Table 5.4; :mod:`.grouped`): G(g) gives the 3x3 conv of
every block ``g`` groups instead of one per channel (G(N) is MobileNetV2 itself), and S
one group, a standard 3x3 conv (its text says S replaces the grouped and pointwise convs
by one conv, but its parameter and MAC counts, 44.05M and 5.56G, are those of a
standard 3x3 conv followed by the projection, which this S reproduces).
"""

from __future__ import annotations

import onnx

from .graph_builder import GraphBuilder, batch_dim
from .grouped import conv_groups, variant_name

#: the S variant as ``grouped``: one group in the 3x3 convs (a standard conv)
STANDARD = "s"

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


def _inverted_residual(gb: GraphBuilder, x: str, cout: int, stride: int, t: int,
                       grouped: int | str | None = None) -> str:
    cin = gb.channels(x)
    hidden = cin * t
    y = x
    with gb.scope("conv"):
        if t != 1:
            with gb.scope("expand"):
                y = _conv_bn_relu6(gb, y, hidden, 1, 1)
        groups = (hidden if grouped is None else 1 if grouped == STANDARD
                  else conv_groups(hidden, hidden, grouped))
        with gb.scope("dw"):
            y = _conv_bn_relu6(gb, y, hidden, 3, stride, groups=groups)
        with gb.scope("project"):
            y = gb.conv_bn(y, cout, 1, 1)
    return _shortcut(gb, x, y, stride)


def _shortcut(gb: GraphBuilder, x: str, y: str, stride: int) -> str:
    """The block's output: ``x + y`` when the shapes allow, else ``y``."""
    cin, cout = gb.channels(x), gb.channels(y)
    if stride == 1 and cin == cout:
        y = gb.add(x, y)
    return y


def mobilenetv2(*, batch: int = 1, seed: int = 0, image_size: int = 224,
                num_classes: int = 1000, width_mult: float = 1.0,
                dynamic_batch: bool = False, grouped: int | str | None = None) -> onnx.ModelProto:
    """MobileNetV2 (torchvision topology); ``width_mult`` scales every layer's width;
    ``grouped``: the thesis' G(g) variant (``g`` groups in the 3x3 convs) or ``"s"``
    (standard 3x3 convs), None for the model itself."""
    name = variant_name("mobilenetv2", grouped)
    gb = GraphBuilder(name, seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    with gb.scope("features.0"):
        x = _conv_bn_relu6(gb, x, make_divisible(32 * width_mult), 3, 2)
    index = 1
    for t, c, n, s in INVERTED_RESIDUAL_SETTING:
        cout = make_divisible(c * width_mult)
        for i in range(n):
            with gb.scope(f"features.{index}"):
                x = _inverted_residual(gb, x, cout, s if i == 0 else 1, t, grouped)
            index += 1
    with gb.scope(f"features.{index}"):
        x = _conv_bn_relu6(gb, x, make_divisible(1280 * max(1.0, width_mult)), 1, 1)
    x = gb.flatten(gb.global_avgpool(x))
    gb.output(gb.gemm(x, num_classes, kind="classifier"))
    return gb.model(f"{name}: torchvision topology, random weights (seed {seed})")


def _variant(grouped: int | str):
    """The zoo builder of MobileNetV2's G(``grouped``) (or S) variant."""
    name = variant_name("mobilenetv2", grouped)

    def build(*, batch: int = 1, seed: int = 0, image_size: int = 224,
              num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
        return mobilenetv2(batch=batch, seed=seed, image_size=image_size,
                           num_classes=num_classes, dynamic_batch=dynamic_batch,
                           grouped=grouped)

    label = ("standard 3x3 convs (S)" if grouped == STANDARD
             else f"{grouped} groups in the 3x3 convs")
    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"MobileNetV2 with {label} (Gibson's thesis, Table 5.4)."
    return build


mobilenetv2_s = _variant(STANDARD)
mobilenetv2_g2 = _variant(2)
mobilenetv2_g4 = _variant(4)
mobilenetv2_g8 = _variant(8)
mobilenetv2_g16 = _variant(16)

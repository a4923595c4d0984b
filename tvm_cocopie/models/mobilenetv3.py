"""MobileNetV3-Large and -Small with torchvision's topology.

Howard et al., "Searching for MobileNetV3", ICCV 2019 (Tables 1 and 2); the layout
follows ``torchvision.models.mobilenet_v3_large``/``_small``: a 3x3/2 stem conv + BN +
hard-swish, inverted residual blocks (1x1 expansion unless the expansion equals the
input width, 3x3 or 5x5 depthwise, optional squeeze-and-excitation, linear 1x1
projection, identity shortcut when stride is 1 and widths match), a 1x1 conv to six
times the last block's width + hard-swish, global average pooling, then a two-layer
classifier (Linear + hard-swish + Linear; dropout is absent at inference).

Squeeze-and-excitation (Hu et al., CVPR 2018) is global average pooling, a 1x1 conv
with bias to ``make_divisible(expanded / 4)`` channels, ReLU, a 1x1 conv with bias back
to ``expanded`` channels and a hard-sigmoid that scales the block's depthwise output.
Activations are exported as the PyTorch exporter writes them at opset 17:
``HardSwish``, ``HardSigmoid(alpha=1/6, beta=0.5)`` and ``Relu``. BN uses torchvision's
``eps=1e-3``.
"""

from __future__ import annotations

import onnx

from .graph_builder import GraphBuilder, batch_dim
from .mobilenet import make_divisible

#: BatchNorm epsilon of torchvision's MobileNetV3.
BN_EPS = 1e-3

#: (kernel, expanded width, output width, squeeze-excite, activation, stride):
#: Table 1 of the paper (MobileNetV3-Large); "RE" is ReLU, "HS" hard-swish.
LARGE_SETTING = (
    (3, 16, 16, False, "RE", 1),
    (3, 64, 24, False, "RE", 2),
    (3, 72, 24, False, "RE", 1),
    (5, 72, 40, True, "RE", 2),
    (5, 120, 40, True, "RE", 1),
    (5, 120, 40, True, "RE", 1),
    (3, 240, 80, False, "HS", 2),
    (3, 200, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 480, 112, True, "HS", 1),
    (3, 672, 112, True, "HS", 1),
    (5, 672, 160, True, "HS", 2),
    (5, 960, 160, True, "HS", 1),
    (5, 960, 160, True, "HS", 1),
)

#: Table 2 of the paper (MobileNetV3-Small), same columns.
SMALL_SETTING = (
    (3, 16, 16, True, "RE", 2),
    (3, 72, 24, False, "RE", 2),
    (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2),
    (5, 240, 40, True, "HS", 1),
    (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1),
    (5, 144, 48, True, "HS", 1),
    (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1),
    (5, 576, 96, True, "HS", 1),
)


def _act(gb: GraphBuilder, x: str, act: str) -> str:
    return gb.hardswish(x) if act == "HS" else gb.relu(x)


def _conv_bn_act(gb: GraphBuilder, x: str, cout: int, k: int, stride: int, act: str | None,
                 groups: int = 1) -> str:
    y = gb.batchnorm(gb.conv(x, cout, k, stride, groups=groups), eps=BN_EPS)
    return y if act is None else _act(gb, y, act)


def squeeze_excite(gb: GraphBuilder, x: str, squeeze: int, inner: str = "relu",
                   gate: str = "hardsigmoid") -> str:
    """``x * gate(fc2(inner(fc1(avgpool(x)))))`` with 1x1 convs with bias as fc layers.

    MobileNetV3 uses ReLU and hard-sigmoid, EfficientNet SiLU and sigmoid.
    """
    c = gb.channels(x)
    with gb.scope("se"):
        s = gb.global_avgpool(x)
        s = gb.conv(s, squeeze, 1, 1, pad=0, bias=True, kind="fc1")
        s = gb.relu(s) if inner == "relu" else gb.silu(s)
        s = gb.conv(s, c, 1, 1, pad=0, bias=True, kind="fc2")
        s = gb.hardsigmoid(s) if gate == "hardsigmoid" else gb.sigmoid(s)
    return gb.mul(x, s)


def _block(gb: GraphBuilder, x: str, k: int, expanded: int, cout: int, se: bool, act: str,
           stride: int) -> str:
    cin = gb.channels(x)
    y = x
    with gb.scope("block"):
        if expanded != cin:
            with gb.scope("0"):
                y = _conv_bn_act(gb, y, expanded, 1, 1, act)
        with gb.scope("dw"):
            y = _conv_bn_act(gb, y, expanded, k, stride, act, groups=expanded)
        if se:
            y = squeeze_excite(gb, y, make_divisible(expanded // 4))
        with gb.scope("project"):
            y = _conv_bn_act(gb, y, cout, 1, 1, None)
    if stride == 1 and cin == cout:
        y = gb.add(x, y)
    return y


def mobilenetv3(name: str, setting, last_channel: int, *, batch: int = 1, seed: int = 0,
                image_size: int = 224, num_classes: int = 1000,
                dynamic_batch: bool = False) -> onnx.ModelProto:
    """A MobileNetV3 with blocks ``setting`` and classifier width ``last_channel``."""
    gb = GraphBuilder(name, seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    with gb.scope("features.0"):
        x = _conv_bn_act(gb, x, 16, 3, 2, "HS")
    for i, (k, expanded, cout, se, act, stride) in enumerate(setting, start=1):
        with gb.scope(f"features.{i}"):
            x = _block(gb, x, k, make_divisible(expanded), make_divisible(cout), se, act,
                       stride)
    with gb.scope(f"features.{len(setting) + 1}"):
        x = _conv_bn_act(gb, x, 6 * gb.channels(x), 1, 1, "HS")
    x = gb.flatten(gb.global_avgpool(x))
    x = gb.hardswish(gb.gemm(x, last_channel, kind="classifier.0"))
    gb.output(gb.gemm(x, num_classes, kind="classifier.3"))
    return gb.model(f"{name}: torchvision topology, random weights (seed {seed})")


def mobilenetv3_large(*, batch: int = 1, seed: int = 0, image_size: int = 224,
                      num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """MobileNetV3-Large (Table 1): 15 blocks, 960-channel last conv, 1280-wide classifier."""
    return mobilenetv3("mobilenetv3_large", LARGE_SETTING, 1280, batch=batch, seed=seed,
                       image_size=image_size, num_classes=num_classes,
                       dynamic_batch=dynamic_batch)


def mobilenetv3_small(*, batch: int = 1, seed: int = 0, image_size: int = 224,
                      num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """MobileNetV3-Small (Table 2): 11 blocks, 576-channel last conv, 1024-wide classifier."""
    return mobilenetv3("mobilenetv3_small", SMALL_SETTING, 1024, batch=batch, seed=seed,
                       image_size=image_size, num_classes=num_classes,
                       dynamic_batch=dynamic_batch)

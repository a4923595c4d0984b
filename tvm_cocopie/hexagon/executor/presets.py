"""Network presets for the executor: the int8 trunks of ResNet-50 and MobileNetV2."""

from __future__ import annotations

import logging

from ..selection.networks import NetBuilder, mobilenetv2_layers, resnet50_layers

log = logging.getLogger(__name__)


def mobilenetv2_head(image: int = 32) -> list:
    """The first blocks of MobileNetV2 as a chain: stem 3x3/2, the t=1 block
    (depthwise, 1x1 projection) and the first t=6 block (expand, depthwise/2, project)."""

    layers = mobilenetv2_layers(image, stages=[(1, 16, 1, 1), (6, 24, 1, 2)])
    return [lay for lay in layers if lay.op != "add"]


def resnet50_stem_chain(image: int = 32) -> list:
    """ResNet-50's stem conv and the first bottleneck's main path (no shortcut)."""

    net = NetBuilder(image, image, 3)
    x = net.add("conv", "input", 64, 7, 2, 3, name="stem")
    x = net.add("conv", x, 64, 1, name="l1b0_c1")
    x = net.add("conv", x, 64, 3, 1, 1, name="l1b0_c2")
    net.add("conv", x, 256, 1, name="l1b0_c3")
    return net.layers


def resnet50_head(image: int = 32, blocks: int = 2) -> list:
    """ResNet-50's stem, max pool and first ``blocks`` bottlenecks with their shortcuts
    (the downsampling 1x1 of the first) and residual adds."""

    layers = resnet50_layers(image, blocks=(blocks,))
    return [lay for lay in layers if lay.op not in ("matmul", "pool") or (lay.op == "pool" and lay.k)]


def mobilenetv2_blocks(image: int = 16) -> list:
    """MobileNetV2's stem and first three inverted residuals, the third with its add."""

    return mobilenetv2_layers(image, stages=[(1, 16, 1, 1), (6, 24, 2, 2)])

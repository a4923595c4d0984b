"""ResNet-18/34/50 and ResNeXt-50 (32x4d), with torchvision's topology.

He et al., "Deep Residual Learning for Image Recognition", CVPR 2016; Xie et al.,
"Aggregated Residual Transformations for Deep Neural Networks" (ResNeXt), CVPR 2017.
The layout follows ``torchvision.models.resnet`` (v1.5): a 7x7/2 stem conv + BN +
ReLU + 3x3/2 max pool, four stages of basic or bottleneck blocks with the stride on
the 3x3 conv, a 1x1 conv + BN downsample where the shape changes, global average
pooling, Flatten and a fully connected layer. Weights are random (see
:mod:`tvm_cocopie.models.graph_builder`), not trained.

ResNet-34's G(g) variants (Gibson's thesis, Table 5.3; :mod:`.grouped`) replace each
3x3 conv of the basic blocks by a grouped 3x3 ``cin -> cin`` conv, BN, ReLU and a
pointwise 1x1 ``cin -> planes`` conv, followed by the block's own BN.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from .graph_builder import GraphBuilder, batch_dim
from .grouped import DEPTHWISE, grouped_pointwise, variant_name

#: Stage widths ("planes") of every ResNet.
STAGE_PLANES = (64, 128, 256, 512)


def _basic_block(gb: GraphBuilder, x: str, planes: int, stride: int,
                 grouped: int | str | None = None) -> str:
    """Two 3x3 conv + BN (each a grouped + pointwise pair for G(``grouped``)), identity
    or 1x1 projection shortcut, ReLU after the sum."""
    cin = gb.channels(x)
    if grouped is None:
        y = gb.relu(gb.conv_bn(x, planes, 3, stride, kind="conv1"))
        y = gb.conv_bn(y, planes, 3, 1, kind="conv2")
    else:
        y = gb.relu(gb.batchnorm(grouped_pointwise(gb, x, planes, stride, grouped, "conv1"),
                                 kind="bn1"))
        y = gb.batchnorm(grouped_pointwise(gb, y, planes, 1, grouped, "conv2"), kind="bn2")
    shortcut = x
    if stride != 1 or cin != planes:
        with gb.scope("downsample"):
            shortcut = gb.conv_bn(x, planes, 1, stride, kind="conv")
    return gb.relu(gb.add(y, shortcut))


def _bottleneck(gb: GraphBuilder, x: str, planes: int, stride: int, groups: int,
                base_width: int) -> str:
    """1x1 reduce, 3x3 (grouped, strided), 1x1 expand x4; projection shortcut if needed."""
    cin = gb.channels(x)
    width = int(planes * base_width / 64) * groups
    cout = planes * 4
    y = gb.relu(gb.conv_bn(x, width, 1, 1, kind="conv1"))
    y = gb.relu(gb.conv_bn(y, width, 3, stride, groups=groups, kind="conv2"))
    y = gb.conv_bn(y, cout, 1, 1, kind="conv3")
    shortcut = x
    if stride != 1 or cin != cout:
        with gb.scope("downsample"):
            shortcut = gb.conv_bn(x, cout, 1, stride, kind="conv")
    return gb.relu(gb.add(y, shortcut))


def resnet(
    name: str,
    layers: Sequence[int],
    *,
    bottleneck: bool,
    groups: int = 1,
    width_per_group: int = 64,
    grouped: int | str | None = None,
    batch: int = 1,
    seed: int = 0,
    image_size: int = 224,
    num_classes: int = 1000,
    dynamic_batch: bool = False,
) -> onnx.ModelProto:
    """A torchvision-style ResNet with ``layers[i]`` blocks in stage ``i``; ``groups`` and
    ``width_per_group`` shape bottlenecks (ResNeXt), ``grouped`` selects the G(g)
    variant of basic blocks (None: standard)."""
    gb = GraphBuilder(name, seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    x = gb.relu(gb.conv_bn(x, 64, 7, 2, pad=3, kind="conv1"))
    x = gb.maxpool(x, 3, 2, 1)
    for stage, (planes, blocks) in enumerate(zip(STAGE_PLANES, layers), start=1):
        for i in range(blocks):
            stride = 2 if stage > 1 and i == 0 else 1
            with gb.scope(f"layer{stage}"), gb.scope(str(i)):
                if bottleneck:
                    x = _bottleneck(gb, x, planes, stride, groups, width_per_group)
                else:
                    x = _basic_block(gb, x, planes, stride, grouped)
    x = gb.flatten(gb.global_avgpool(x))
    gb.output(gb.gemm(x, num_classes, kind="fc"))
    return gb.model(f"{name}: torchvision topology, random He/BN weights (seed {seed})")


def resnet18(*, batch: int = 1, seed: int = 0, image_size: int = 224,
             num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """ResNet-18: basic blocks [2, 2, 2, 2] (He et al. 2016, Table 1)."""
    return resnet("resnet18", (2, 2, 2, 2), bottleneck=False, batch=batch, seed=seed,
                  image_size=image_size, num_classes=num_classes, dynamic_batch=dynamic_batch)


def resnet34(*, batch: int = 1, seed: int = 0, image_size: int = 224,
             num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """ResNet-34: basic blocks [3, 4, 6, 3] (He et al. 2016, Table 1)."""
    return resnet("resnet34", (3, 4, 6, 3), bottleneck=False, batch=batch, seed=seed,
                  image_size=image_size, num_classes=num_classes, dynamic_batch=dynamic_batch)


def resnet50(*, batch: int = 1, seed: int = 0, image_size: int = 224,
             num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """ResNet-50: bottleneck blocks [3, 4, 6, 3] (He et al. 2016, Table 1)."""
    return resnet("resnet50", (3, 4, 6, 3), bottleneck=True, batch=batch, seed=seed,
                  image_size=image_size, num_classes=num_classes, dynamic_batch=dynamic_batch)


def resnext50_32x4d(*, batch: int = 1, seed: int = 0, image_size: int = 224,
                    num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """ResNeXt-50 32x4d: ResNet-50 whose 3x3 convs have 32 groups of width 4 (Xie et al.)."""
    return resnet("resnext50_32x4d", (3, 4, 6, 3), bottleneck=True, groups=32,
                  width_per_group=4, batch=batch, seed=seed, image_size=image_size,
                  num_classes=num_classes, dynamic_batch=dynamic_batch)


def _resnet34_variant(grouped: int | str):
    """The zoo builder of ResNet-34 with G(``grouped``) basic blocks."""
    name = variant_name("resnet34", grouped)

    def build(*, batch: int = 1, seed: int = 0, image_size: int = 224,
              num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
        return resnet(name, (3, 4, 6, 3), bottleneck=False, grouped=grouped, batch=batch,
                      seed=seed, image_size=image_size, num_classes=num_classes,
                      dynamic_batch=dynamic_batch)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = (f"ResNet-34 with G({grouped}) basic blocks: grouped 3x3 + pointwise 1x1 "
                     "(Gibson's thesis, Table 5.3).")
    return build


resnet34_g2 = _resnet34_variant(2)
resnet34_g4 = _resnet34_variant(4)
resnet34_g8 = _resnet34_variant(8)
resnet34_g16 = _resnet34_variant(16)
resnet34_gN = _resnet34_variant(DEPTHWISE)

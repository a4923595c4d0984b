"""ShuffleNetV2 x1.0 with torchvision's topology.

Ma et al., "ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture
Design", ECCV 2018 (Fig. 3 and Table 5); the layout follows
``torchvision.models.shufflenet_v2_x1_0``: a 3x3/2 conv to 24 channels + BN + ReLU,
a 3x3/2 max pool, three stages of 4, 8 and 4 units with 116, 232 and 464 channels, a
1x1 conv to 1024 channels + BN + ReLU, a spatial mean (``x.mean([2, 3])``, exported
as ``ReduceMean``) and a fully connected layer.

A stride-1 unit splits its input's channels in two halves (``Split``), keeps the
first and sends the second through a 1x1 conv + BN + ReLU, a 3x3 depthwise conv + BN
and a 1x1 conv + BN + ReLU; a stride-2 unit sends the whole input through that branch
and through a second one (3x3/2 depthwise conv + BN, 1x1 conv + BN + ReLU). Both
concatenate the halves (``Concat``) and shuffle the channels with two groups, which
the exporter writes as ``Reshape [N, 2, C/2, H, W]``, ``Transpose (0, 2, 1, 3, 4)``
and ``Reshape [N, C, H, W]``.
"""

from __future__ import annotations

import onnx

from .graph_builder import GraphBuilder, batch_dim

#: Units per stage and the output widths of conv1, the three stages and conv5 (x1.0).
STAGE_REPEATS = (4, 8, 4)
STAGE_CHANNELS = (24, 116, 232, 464, 1024)


def channel_shuffle(gb: GraphBuilder, x: str, groups: int = 2) -> str:
    """``Reshape [N, g, C/g, H, W]`` -> ``Transpose (0, 2, 1, 3, 4)`` -> ``Reshape [N, C, H, W]``."""
    _, c, h, w = gb.values[x].shape
    y = gb.reshape(x, [0, groups, c // groups, h, w])
    y = gb.transpose(y, (0, 2, 1, 3, 4))
    return gb.reshape(y, [0, c, h, w])


def _branch(gb: GraphBuilder, x: str, width: int, stride: int) -> str:
    """1x1 conv + BN + ReLU, 3x3 depthwise (strided) + BN, 1x1 conv + BN + ReLU."""
    with gb.scope("branch2"):
        y = gb.relu(gb.conv_bn(x, width, 1, 1, kind="conv0"))
        y = gb.conv_bn(y, width, 3, stride, groups=width, kind="conv3")
        return gb.relu(gb.conv_bn(y, width, 1, 1, kind="conv5"))


def _unit(gb: GraphBuilder, x: str, cout: int, stride: int) -> str:
    width = cout // 2
    if stride == 1:
        keep, y = gb.split(x, [width, width], axis=1)
        y = _branch(gb, y, width, 1)
    else:
        with gb.scope("branch1"):
            cin = gb.channels(x)
            keep = gb.conv_bn(x, cin, 3, stride, groups=cin, kind="conv0")
            keep = gb.relu(gb.conv_bn(keep, width, 1, 1, kind="conv2"))
        y = _branch(gb, x, width, stride)
    return channel_shuffle(gb, gb.concat([keep, y], axis=1))


def shufflenetv2(*, batch: int = 1, seed: int = 0, image_size: int = 224,
                 num_classes: int = 1000, dynamic_batch: bool = False) -> onnx.ModelProto:
    """ShuffleNetV2 x1.0 (torchvision topology): stages of 4, 8 and 4 units."""
    gb = GraphBuilder("shufflenetv2", seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    with gb.scope("conv1"):
        x = gb.relu(gb.conv_bn(x, STAGE_CHANNELS[0], 3, 2, kind="conv"))
    x = gb.maxpool(x, 3, 2, 1)
    for stage, repeats in enumerate(STAGE_REPEATS, start=2):
        for i in range(repeats):
            with gb.scope(f"stage{stage}.{i}"):
                x = _unit(gb, x, STAGE_CHANNELS[stage - 1], 2 if i == 0 else 1)
    with gb.scope("conv5"):
        x = gb.relu(gb.conv_bn(x, STAGE_CHANNELS[-1], 1, 1, kind="conv"))
    x = gb.reduce_mean(x, [2, 3])
    gb.output(gb.gemm(x, num_classes, kind="fc"))
    return gb.model(f"shufflenetv2: x1.0, torchvision topology, random weights (seed {seed})")

"""Wide-ResNet-40-2 for CIFAR-10, and its grouped + pointwise G(g) variants.

Zagoruyko and Komodakis, "Wide Residual Networks", BMVC 2016: a 3x3 stem conv to 16
channels, three groups of ``(depth - 4) / 6`` pre-activation blocks (BN-ReLU-conv3x3,
BN-ReLU-conv3x3, plus the block input, or a 1x1 conv of the activated input where
the width or stride changes) of widths ``16k, 32k, 64k``, then BN-ReLU, global
average pooling (8x8 at 32x32 input) and a fully connected layer. The block layout
is that of the widely used PyTorch port, where a width-changing block's first BN-ReLU
also feeds its 1x1 shortcut.

The G(g) variants are those of Gibson's thesis, chapter 5 (GSPC), which takes them
from Crowley et al.'s Moonshine ("Moonshine: Distilling with Cheap Convolutions",
NeurIPS 2018): every standard 3x3 conv of the blocks (not the stem, not the 1x1
shortcuts) becomes a grouped 3x3 conv ``cin -> cin`` with ``g`` groups (carrying the
stride), BN + ReLU, and a pointwise 1x1 conv ``cin -> cout``. G(N) uses ``groups =
cin``, a depthwise conv. This layout reproduces the thesis's Table 5.2 for all six
models: trainable parameters without the FC layer exactly (S 2242.26K ... G(N)
292.22K), and conv + FC MACs 0.70M below the table's counts in every row (S 327.6M
vs 328.3M, G(N) 44.13M vs 44.83M).

A group count must divide a conv's input and output channels (both ``cin`` here);
where ``g`` does not, :func:`.grouped.conv_groups` takes the largest divisor of their
gcd not above ``g`` and logs it. WRN-40-2's widths (16, 32, 64, 128) never need that.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from .graph_builder import GraphBuilder, batch_dim
from .grouped import DEPTHWISE, grouped_pointwise, variant_name


def _conv3x3(gb: GraphBuilder, x: str, cout: int, stride: int, groups: int | str | None,
             kind: str) -> str:
    """A standard 3x3 conv, or for G(g): grouped 3x3, BN, ReLU, pointwise 1x1."""
    if groups is None:
        return gb.conv(x, cout, 3, stride, kind=kind)
    return grouped_pointwise(gb, x, cout, stride, groups, kind)


def _block(gb: GraphBuilder, x: str, cout: int, stride: int,
           groups: int | str | None) -> str:
    """Pre-activation basic block of the WRN port (no dropout at inference)."""
    equal = gb.channels(x) == cout and stride == 1
    act = gb.relu(gb.batchnorm(x, kind="bn1"))
    y = _conv3x3(gb, act, cout, stride, groups, "conv1")
    y = gb.relu(gb.batchnorm(y, kind="bn2"))
    y = _conv3x3(gb, y, cout, 1, groups, "conv2")
    shortcut = x if equal else gb.conv(act, cout, 1, stride, pad=0, kind="convShortcut")
    return gb.add(shortcut, y)


def wide_resnet(*, depth: int = 40, widen: int = 2, groups: int | str | None = None,
                batch: int = 1, seed: int = 0, image_size: int = 32, num_classes: int = 10,
                dynamic_batch: bool = False) -> onnx.ModelProto:
    """WRN-``depth``-``widen``; ``groups`` selects the G(g) variant (None: standard)."""
    if (depth - 4) % 6:
        raise ValueError(f"WRN depth must be 6n+4, got {depth}")
    n = (depth - 4) // 6
    name = variant_name(f"wrn{depth}_{widen}", groups)
    gb = GraphBuilder(name, seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    x = gb.conv(x, 16, 3, 1, kind="conv1")
    for stage, width in enumerate((16 * widen, 32 * widen, 64 * widen), start=1):
        for i in range(n):
            stride = 2 if stage > 1 and i == 0 else 1
            with gb.scope(f"block{stage}.layer.{i}"):
                x = _block(gb, x, width, stride, groups)
    x = gb.relu(gb.batchnorm(x, kind="bn1"))
    x = gb.flatten(gb.global_avgpool(x))
    gb.output(gb.gemm(x, num_classes, kind="fc"))
    kind = "standard 3x3 convs" if groups is None else f"G({groups}) grouped + pointwise"
    return gb.model(f"{name}: WRN-{depth}-{widen} with {kind}, random weights (seed {seed})")


def _variant(groups: int | str | None) -> Callable[..., onnx.ModelProto]:
    """The zoo builder of WRN-40-2 with G(``groups``) convs (None: standard)."""
    def build(*, batch: int = 1, seed: int = 0, image_size: int = 32, num_classes: int = 10,
              dynamic_batch: bool = False) -> onnx.ModelProto:
        return wide_resnet(depth=40, widen=2, groups=groups, batch=batch, seed=seed,
                           image_size=image_size, num_classes=num_classes,
                           dynamic_batch=dynamic_batch)

    label = "standard convs" if groups is None else f"G({groups}): grouped 3x3 + pointwise 1x1"
    build.__name__ = build.__qualname__ = variant_name("wrn40_2", groups)
    build.__doc__ = f"WRN-40-2 for CIFAR-10 (32x32, 10 classes), {label}."
    return build


wrn40_2 = _variant(None)
wrn40_2_g2 = _variant(2)
wrn40_2_g4 = _variant(4)
wrn40_2_g8 = _variant(8)
wrn40_2_g16 = _variant(16)
wrn40_2_gN = _variant(DEPTHWISE)

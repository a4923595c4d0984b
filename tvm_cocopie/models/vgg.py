"""VGG-16 (configuration D) with torchvision's topology.

Simonyan and Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition", ICLR 2015; the layout follows ``torchvision.models.vgg16`` (no BN):
thirteen 3x3 convs with biases and ReLU in five stages closed by 2x2/2 max pools,
then Linear-ReLU-Linear-ReLU-Linear (dropout is absent at inference).

torchvision puts an adaptive 7x7 average pool before the classifier, which is the
identity at 224x224 and which no ONNX operator expresses for other sizes. Here the
classifier reads the final feature map as it is, ``512 * (H/32) * (W/32)`` features,
so a 224x224 model matches torchvision's shapes and a small one stays small.
"""

from __future__ import annotations

import onnx

from .graph_builder import GraphBuilder, batch_dim

#: Output channels of each conv; "M" is a 2x2/2 max pool (configuration D).
VGG16_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                512, 512, 512, "M", 512, 512, 512, "M")


def vgg16(*, batch: int = 1, seed: int = 0, image_size: int = 224, num_classes: int = 1000,
          classifier_width: int = 4096, dynamic_batch: bool = False) -> onnx.ModelProto:
    """VGG-16; ``classifier_width`` (4096 in the paper) sets the two hidden FC layers.

    ``image_size`` must be a multiple of 32. The full model holds 138M parameters
    (553 MB); tests shrink ``image_size`` and ``classifier_width``.
    """
    if image_size % 32:
        raise ValueError(f"vgg16 needs image_size divisible by 32, got {image_size}")
    gb = GraphBuilder("vgg16", seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    for i, item in enumerate(VGG16_CONFIG):
        with gb.scope(f"features.{i}"):
            if item == "M":
                x = gb.maxpool(x, 2, 2)
            else:
                x = gb.relu(gb.conv(x, int(item), 3, 1, bias=True))
    x = gb.flatten(x)
    with gb.scope("classifier"):
        x = gb.relu(gb.gemm(x, classifier_width, kind="0"))
        x = gb.relu(gb.gemm(x, classifier_width, kind="3"))
        x = gb.gemm(x, num_classes, kind="6")
    gb.output(x)
    return gb.model(f"vgg16: torchvision topology, random weights (seed {seed})")

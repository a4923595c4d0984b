"""A YOLOv8-nano-style one-stage detector: C2f backbone, SPPF, PAN neck, 3 heads.

The topology follows the YOLOv8n model definition of Ultralytics (Jocher et al.,
2023; C2f is the cross-stage-partial block of Wang et al., "CSPNet", CVPR-W 2020,
as YOLOv5 and YOLOv8 use it), at depth multiple 1/3 and width multiple 1/4:

- every ``Conv`` is a bias-free convolution + BN (``eps=1e-3``) + SiLU, SiLU written
  as ``Sigmoid`` + ``Mul``;
- backbone: Conv 3x3/2 (16), Conv 3x3/2 (32), C2f x1, Conv 3x3/2 (64), C2f x2 (P3, stride
  8), Conv 3x3/2 (128), C2f x2 (P4, stride 16), Conv 3x3/2 (256), C2f x1, SPPF (P5,
  stride 32);
- C2f: a 1x1 Conv to ``2c`` channels, ``Split`` in two halves, ``n`` bottlenecks (two
  3x3 Convs, residual add in the backbone) chained on the second half, ``Concat`` of
  the halves and every bottleneck output, a 1x1 Conv;
- SPPF: a 1x1 Conv halving the width, three chained 5x5 stride-1 max pools, ``Concat``
  of the four, a 1x1 Conv;
- neck (PAN): nearest 2x upsampling (``Resize``) + ``Concat`` with P4 then P3 going
  down, C2f x1 (no residual) after each, then Conv 3x3/2 + ``Concat`` + C2f going back
  up: three maps at strides 8, 16 and 32;
- head (decoupled, anchor-free): per map a box branch (two 3x3 Convs, a 1x1 conv to
  ``4 * 16`` distance bins) and a class branch (two 3x3 Convs, a 1x1 conv to
  ``num_classes``); the maps are flattened and concatenated over all ``A`` anchor
  points (``[N, 64 + C, A]``), the bins go through the distribution focal loss
  decoding (``Softmax`` over 16 bins, a fixed 1x1 conv with weights ``0..15``), the
  left/top/right/bottom distances become centre and size around each cell's centre
  (``Split``, ``Sub``, ``Add``), and the class scores through ``Sigmoid``.

The output ``output [N, 4 + num_classes, A]`` (``A = 3549`` at 416x416, 8400 at
640x640) is the one of an Ultralytics export, except that box coordinates are
divided by the image size (as Ultralytics' TFLite export does), which keeps them O(1).
"""

from __future__ import annotations

import numpy as np
import onnx

from .graph_builder import GraphBuilder, batch_dim

#: BatchNorm epsilon of Ultralytics' Conv.
BN_EPS = 1e-3
#: Distance bins per box side (``reg_max``).
REG_MAX = 16
#: Strides of the three detection maps.
STRIDES = (8, 16, 32)


def _conv(gb: GraphBuilder, x: str, cout: int, k: int = 1, stride: int = 1,
          kind: str = "conv") -> str:
    with gb.scope(kind):
        return gb.silu(gb.batchnorm(gb.conv(x, cout, k, stride, pad=k // 2), eps=BN_EPS))


def _c2f(gb: GraphBuilder, x: str, cout: int, n: int, shortcut: bool) -> str:
    c = cout // 2
    a, b = gb.split(_conv(gb, x, 2 * c, kind="cv1"), [c, c], axis=1)
    ys = [a, b]
    for i in range(n):
        with gb.scope(f"m.{i}"):
            y = _conv(gb, _conv(gb, ys[-1], c, 3, kind="cv1"), c, 3, kind="cv2")
            ys.append(gb.add(ys[-1], y) if shortcut else y)
    return _conv(gb, gb.concat(ys, axis=1), cout, kind="cv2")


def _sppf(gb: GraphBuilder, x: str, cout: int, k: int = 5) -> str:
    ys = [_conv(gb, x, gb.channels(x) // 2, kind="cv1")]
    for _ in range(3):
        ys.append(gb.maxpool(ys[-1], k, 1, k // 2))
    return _conv(gb, gb.concat(ys, axis=1), cout, kind="cv2")


def _anchors(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres ``[1, 2, A]`` in feature-map units and per-anchor scales ``[1, 1, A]``
    (stride / image size) of the three maps, in the order the maps are concatenated."""
    points, scales = [], []
    for stride in STRIDES:
        cells = image_size // stride
        ys, xs = np.meshgrid(np.arange(cells) + 0.5, np.arange(cells) + 0.5, indexing="ij")
        points.append(np.stack([xs.ravel(), ys.ravel()]))
        scales.append(np.full(cells * cells, stride / image_size))
    return (np.concatenate(points, axis=1)[None].astype(np.float32),
            np.concatenate(scales)[None, None].astype(np.float32))


def _detect(gb: GraphBuilder, maps: list[str], num_classes: int, image_size: int) -> str:
    c2 = max(16, gb.channels(maps[0]) // 4, 4 * REG_MAX)
    c3 = max(gb.channels(maps[0]), min(num_classes, 100))
    flat = []
    for i, x in enumerate(maps):
        with gb.scope(f"cv2.{i}"):
            box = _conv(gb, _conv(gb, x, c2, 3, kind="0"), c2, 3, kind="1")
            box = gb.conv(box, 4 * REG_MAX, 1, 1, pad=0, bias=True, kind="2")
        with gb.scope(f"cv3.{i}"):
            cls = _conv(gb, _conv(gb, x, c3, 3, kind="0"), c3, 3, kind="1")
            cls = gb.conv(cls, num_classes, 1, 1, pad=0, bias=True, kind="2")
        y = gb.concat([box, cls], axis=1)
        flat.append(gb.reshape(y, [0, 4 * REG_MAX + num_classes, -1]))
    y = gb.concat(flat, axis=2)  # [N, 64 + C, A]
    anchors = int(gb.values[y].shape[2])
    box, cls = gb.split(y, [4 * REG_MAX, num_classes], axis=1)
    with gb.scope("dfl"):
        # [N, 4, 16, A] -> [N, 16, 4, A], softmax over the bins, expectation by a 1x1 conv
        box = gb.transpose(gb.reshape(box, [0, 4, REG_MAX, anchors]), (0, 2, 1, 3))
        box = gb.softmax(box, axis=1)
        bins = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
        weight = gb.const(bins, "conv.weight")
        value = np.einsum("nkca,k->nca", gb.values[box], bins.ravel())[:, None]
        box = gb.node("Conv", [box, weight], value.astype(np.float32), kind="conv",
                      kernel_shape=[1, 1])
        box = gb.reshape(box, [0, 4, anchors])
    points, scales = _anchors(image_size)
    points_name = gb.const(points, "anchors")
    lt, rb = gb.split(box, [2, 2], axis=1)
    x1y1 = gb.sub(points_name, lt)
    x2y2 = gb.add(points_name, rb)
    centre = gb.div(gb.add(x1y1, x2y2), 2.0)
    size = gb.sub(x2y2, x1y1)
    boxes = gb.mul(gb.concat([centre, size], axis=1), gb.const(scales, "strides"))
    return gb.concat([boxes, gb.sigmoid(cls)], axis=1)


def yolo_detector(*, batch: int = 1, seed: int = 0, image_size: int = 416,
                  num_classes: int = 80, dynamic_batch: bool = False) -> onnx.ModelProto:
    """YOLOv8n-style detector for ``[batch, 3, image_size, image_size]``, a multiple of 32.

    Output ``[batch, 4 + num_classes, A]``: box centre and size (over the image size)
    and class probabilities for each of the ``A`` anchor points of the three maps.
    """
    if image_size % 32 or image_size < 32:
        raise ValueError(f"yolo_detector needs an image size divisible by 32, got {image_size}")
    gb = GraphBuilder("yolo_detector", seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    layers: dict[int, str] = {}

    def run(i: int, fn, *args) -> str:
        with gb.scope(f"model.{i}"):
            layers[i] = fn(*args)
        return layers[i]

    x = run(0, _conv, gb, x, 16, 3, 2)
    x = run(1, _conv, gb, x, 32, 3, 2)
    x = run(2, _c2f, gb, x, 32, 1, True)
    x = run(3, _conv, gb, x, 64, 3, 2)
    x = run(4, _c2f, gb, x, 64, 2, True)  # P3
    x = run(5, _conv, gb, x, 128, 3, 2)
    x = run(6, _c2f, gb, x, 128, 2, True)  # P4
    x = run(7, _conv, gb, x, 256, 3, 2)
    x = run(8, _c2f, gb, x, 256, 1, True)
    x = run(9, _sppf, gb, x, 256)  # P5
    x = run(10, gb.upsample_nearest, x, 2)
    x = run(11, gb.concat, [x, layers[6]], 1)
    x = run(12, _c2f, gb, x, 128, 1, False)
    x = run(13, gb.upsample_nearest, x, 2)
    x = run(14, gb.concat, [x, layers[4]], 1)
    p3 = run(15, _c2f, gb, x, 64, 1, False)
    x = run(16, _conv, gb, p3, 64, 3, 2)
    x = run(17, gb.concat, [x, layers[12]], 1)
    p4 = run(18, _c2f, gb, x, 128, 1, False)
    x = run(19, _conv, gb, p4, 128, 3, 2)
    x = run(20, gb.concat, [x, layers[9]], 1)
    p5 = run(21, _c2f, gb, x, 256, 1, False)
    with gb.scope("model.22"):
        y = _detect(gb, [p3, p4, p5], num_classes, image_size)
    gb.output(y)
    return gb.model(f"yolo_detector: YOLOv8n-style, {num_classes} classes, "
                    f"{image_size}x{image_size}; random weights (seed {seed})")

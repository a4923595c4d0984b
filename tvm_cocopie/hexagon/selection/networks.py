"""Layer graphs of int8 CNNs for GCD²'s selection (seed 004, §4.4, Fig. 4.10).

A network here is a list of :class:`Layer` (NHWC, batch 1) in topological order:
convolutions, depthwise convolutions, fully connected layers, residual adds and
pools. :func:`selection_graph` turns it into a :class:`.search.Graph` whose plan
costs and edge costs come from :mod:`.costmodel` (packets predicted, nothing run).

Modelled honestly, as measured:

- ``conv`` / ``matmul`` plans are the three instructions, but ``vmpa`` only when its
  16-bit pair sums are exact for the layer's weights (:func:`..kernels.matmul.vmpa_exact`;
  weights in [-64, 64], i.e. 7-bit quantization); with 8-bit per-tensor weights
  (``max |w| = 127``) it is not offered;
- ``gconv`` (grouped) has one plan, ``vrmpy`` (:mod:`..kernels.grouped`), priced as
  the dense ``vrmpy`` conv over each output vector's own input groups;
- ``dwconv`` always multiplies with ``vmpy`` (``vmpa``/``vrmpy`` would mix channels)
  but runs in any of the three layouts: three plans, one instruction;
- ``add`` and ``pool`` work in any layout at the same cost; that cost is an estimate
  (:data:`ELEMENTWISE_PACKETS_PER_VECTOR`), not a measured kernel -- it is the same
  for every plan, so it changes totals, never a choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...models.mobilenet import INVERTED_RESIDUAL_SETTING
from ...topi.int8.layouts import LAYOUT_OF, GridGeometry
from .costmodel import CostModel
from .search import Graph, Node

#: Estimated packets per 128-byte output vector of an elementwise add or a pool tap.
ELEMENTWISE_PACKETS_PER_VECTOR = 4.0


@dataclass(frozen=True)
class Layer:
    """One operator: ``op`` in ``input``, ``conv``, ``dwconv``, ``gconv`` (``groups``
    groups), ``matmul``, ``add``, ``pool`` (``k x k`` max pool or, with ``k = 0``, global
    average pool)."""

    name: str
    op: str
    inputs: tuple
    h: int
    w: int
    c: int
    o: int
    k: int = 1
    s: int = 1
    p: int = 0
    groups: int = 1

    @property
    def geometry(self) -> GridGeometry:
        """The layer's grid geometry (image size, kernel, stride, padding)."""
        return GridGeometry(self.h, self.w, self.k, self.s, self.p)

    @property
    def out_hw(self) -> tuple:
        """``(height, width)`` of the layer's output."""
        if self.op in ("conv", "dwconv", "gconv") or (self.op == "pool" and self.k):
            g = self.geometry
            return g.out_h, g.out_w
        if self.op == "upsample":  # k: the factor
            return self.h * self.k, self.w * self.k
        if self.op in ("matmul",) or (self.op == "pool" and not self.k):
            return 1, 1
        return self.h, self.w

    @property
    def rows(self) -> int:
        """Output positions (height x width): the rows of its matrix."""
        oh, ow = self.out_hw
        return oh * ow

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the layer (0 for data movement and pooling)."""
        if self.op == "conv":
            return self.rows * self.k * self.k * self.c * self.o
        if self.op == "dwconv":
            return self.rows * self.k * self.k * self.c
        if self.op == "gconv":
            return self.rows * self.k * self.k * (self.c // self.groups) * self.o
        if self.op == "matmul":
            return self.c * self.o
        return 0


class NetBuilder:
    """A layer graph built layer by layer: ``add`` appends a layer reading ``src``
    (and ``extra`` inputs) with its output size derived from it; ``layers`` is the graph,
    an ``input`` layer of ``h x w x c`` first."""

    def __init__(self, h, w, c):
        self.layers = [Layer("input", "input", (), h, w, c, c)]

    def add(self, op, src, o, k=1, s=1, p=0, extra=(), name=None) -> str:
        """Append a layer; its name."""
        prev = self.by(src)
        oh, ow = prev.out_hw
        name = name or f"{op}{len(self.layers)}"
        self.layers.append(Layer(name, op, (src, *extra), oh, ow, prev.o, o, k, s, p))
        return name

    def by(self, name) -> Layer:
        """The layer called ``name``."""
        return next(lay for lay in self.layers if lay.name == name)


#: The first 8 unique convolutions of ResNet-50 v1.5 (H, W, C, O, kernel, stride, pad):
#: GCD²'s kernel table (seed 004, Table 4.3), measured by bench_hexagon and bench_sda.
RESNET50_FIRST_CONVS = (
    (224, 224, 3, 64, 7, 2, 3),
    (56, 56, 64, 64, 1, 1, 0),
    (56, 56, 64, 64, 3, 1, 1),
    (56, 56, 64, 256, 1, 1, 0),
    (56, 56, 256, 64, 1, 1, 0),
    (56, 56, 256, 128, 1, 1, 0),
    (56, 56, 128, 128, 3, 2, 1),
    (28, 28, 128, 512, 1, 1, 0),
)


def resnet50_layers(image: int = 224, blocks=(3, 4, 6, 3), classes: int = 1000) -> list:
    """ResNet-50 v1.5 (stride in the 3x3) as layers; batch norm folded into the convs."""
    net = NetBuilder(image, image, 3)
    x = net.add("conv", "input", 64, 7, 2, 3, name="stem")
    x = net.add("pool", x, 64, 3, 2, 1, name="maxpool")
    cin = 64
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
        for b in range(n):
            s = 2 if b == 0 and stage > 0 else 1
            tag = f"l{stage + 1}b{b}"
            y = net.add("conv", x, width, 1, name=f"{tag}_c1")
            y = net.add("conv", y, width, 3, s, 1, name=f"{tag}_c2")
            y = net.add("conv", y, 4 * width, 1, name=f"{tag}_c3")
            short = x
            if b == 0:
                short = net.add("conv", x, 4 * width, 1, s, name=f"{tag}_down")
            x = net.add("add", y, 4 * width, extra=(short,), name=f"{tag}_add")
            cin = 4 * width
    x = net.add("pool", x, cin, 0, name="avgpool")
    net.add("matmul", x, classes, name="fc")
    return net.layers


def mobilenetv2_layers(image: int = 224, classes: int = 1000, stages=None) -> list:
    """MobileNetV2 (width 1.0) as layers: inverted residuals ``(t, c, n, s)``."""

    cfg = stages or INVERTED_RESIDUAL_SETTING
    net = NetBuilder(image, image, 3)
    x = net.add("conv", "input", 32, 3, 2, 1, name="stem")
    cin = 32
    for i, (t, c, n, s) in enumerate(cfg):
        for b in range(n):
            stride = s if b == 0 else 1
            tag = f"b{i}_{b}"
            y = x
            if t != 1:
                y = net.add("conv", y, cin * t, 1, name=f"{tag}_expand")
            y = net.add("dwconv", y, cin * t, 3, stride, 1, name=f"{tag}_dw")
            y = net.add("conv", y, c, 1, name=f"{tag}_project")
            if stride == 1 and cin == c:
                y = net.add("add", y, c, extra=(x,), name=f"{tag}_add")
            x, cin = y, c
    if stages is None:
        x = net.add("conv", x, 1280, 1, name="head")
        x = net.add("pool", x, 1280, 0, name="avgpool")
        net.add("matmul", x, classes, name="fc")
    return net.layers


def plan_costs(layer: Layer, model, vmpa_ok: bool, per_channel: bool = False) -> dict:
    """Predicted packets of each execution plan of ``layer`` (``per_channel``: its
    requantization is per output channel, dearer in the layouts with more channels per
    vector: :data:`.costmodel.PER_CHANNEL_PACKETS_PER_OUT`)."""
    if layer.op in ("input", "const"):
        return {"rowmajor": 0.0}
    if layer.op == "conv":
        variants = [v for v in LAYOUT_OF if v != "vmpa" or vmpa_ok]
        return {v: model.conv(v, layer.geometry, layer.c, layer.o, per_channel)
                for v in variants}
    if layer.op == "matmul":
        variants = [v for v in LAYOUT_OF if v != "vmpa" or vmpa_ok]
        return {v: model.matmul(v, 1, layer.c, layer.o, per_channel) for v in variants}
    if layer.op == "dwconv":
        return {v: model.dwconv(v, layer.geometry, layer.c, per_channel) for v in LAYOUT_OF}
    if layer.op == "gconv":  # its HVX kernel works on 4-column grids only
        return {"vrmpy": model.gconv(layer.geometry, layer.c, layer.o, layer.groups,
                                     per_channel)}
    vectors = -(-layer.rows * layer.o // 128)
    if layer.op == "attention":  # its HVX kernel works on 4-column grids only
        return {"vrmpy": 40.0 * vectors * max(layer.c // 4, 1)}
    taps = max(layer.k * layer.k, 1) if layer.op == "pool" else 1
    if layer.op == "pool" and not layer.k:
        vectors, taps = -(-layer.h * layer.w * layer.c // 128), 1
    cost = ELEMENTWISE_PACKETS_PER_VECTOR * vectors * taps
    return dict.fromkeys(LAYOUT_OF, cost)


def selection_graph(layers, model=None, vmpa_ok=None, gather_packets_per_byte=None,
                    per_channel=None) -> Graph:
    """The :class:`.search.Graph` of ``layers`` with costs from ``model``.

    ``vmpa_ok(layer) -> bool`` says whether ``vmpa`` is exact for the layer's weights
    (default: never, as for 8-bit per-tensor weights); ``per_channel(layer) -> bool``
    whether the layer requantizes per output channel (default: never). ``gather_packets_per_byte``: price
    a change of layout between two layers at this many packets per byte of the tensor
    (the static executor moves tensors across layouts with a gather, not with the
    repack kernels the cost model is calibrated on).
    """

    model = model or CostModel.default()
    vmpa_ok = vmpa_ok or (lambda layer: False)
    per_channel = per_channel or (lambda layer: False)
    by = {lay.name: lay for lay in layers}
    nodes = [
        Node(lay.name, plan_costs(lay, model, vmpa_ok(lay), per_channel(lay)), lay.inputs,
             info={"layer": lay})
        for lay in layers
    ]

    def tc(u, v, pu, pv):
        lay = by[u.name]
        if lay.op == "const":  # a constant operand (a bias vector): regridded once, tiny
            return 0.0
        if gather_packets_per_byte and pu != "rowmajor" and pu != pv:
            return gather_packets_per_byte * lay.rows * lay.o
        src = None if pu == "rowmajor" else LAYOUT_OF[pu]
        return model.transform(src, LAYOUT_OF[pv], lay.rows, lay.o)

    return Graph(nodes, tc)

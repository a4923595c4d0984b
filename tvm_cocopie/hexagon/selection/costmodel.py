"""A packet (or cycle) cost model per kernel variant and layout transform (seed 004, §4.4.1).

GCD²'s global selection needs ``Cost(ep_i(O))`` for every execution plan and
``TC(ep_j, ep_i)`` for every layout transform "based on the number of instructions
(cycles) required", without running anything. Here both are linear models over counts
that follow from the loop nests of :mod:`..kernels.gemm`, :mod:`..kernels.depthwise` and
:mod:`..kernels.transforms` (no run needed to compute them):

- ``mul``: multiply steps (one ``vrmpy``, one ``vmpa`` + ``vaddhw``, or two ``vmpy`` +
  two ``vaddhw``) -- the inner-loop body per output column;
- ``iter``: inner-loop iterations (input vector loads, loop control);
- ``out``: output vectors (requantization and store);
- ``loops``: entries into the reduction loop (per row block, column block and tap);
- ``vec``/``bytes``: vectors or bytes moved by a transform;
- ``const``: call overhead.

A requantization per output channel (weights quantized per channel) adds
:data:`PER_CHANNEL_PACKETS_PER_OUT` packets per output vector (``per_channel=True``).

The coefficients, one set per family (``matmul``, ``conv``, ``dwconv``, ``repack``,
``to_rowmajor``, ``from_rowmajor``) and variant, are fitted by non-negative least
squares on emulator packet counts of a few shapes (:func:`..tools.calibrate.calibrate`, run by
``python -m tvm_cocopie.hexagon.tools.calibrate``) and stored as data in
:mod:`.coefficients`. ``tests/test_hexagon_costmodel.py`` checks predictions on
held-out shapes against fresh measurements within :data:`STATED_ERROR`.

A second set, ``CostModel.default("cycles")``, is fitted the same way on the same shapes'
*estimated cycles* (packets plus pipeline stalls, :mod:`..vliw.cycles` replaying the
emulator's executed-packet trace; ``python -m tvm_cocopie.hexagon.tools.calibrate
--measure cycles``). The packet model stays the default.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from ...errors import CocopieError
from ...topi.int8.hvx import GroupWindow
from ...topi.int8.layouts import LAYOUT_OF, GridGeometry, Layout, TapFold, round_up
from ..kernels.gemm import block_size
from .coefficients import COEFFICIENTS, CYCLE_COEFFICIENTS

log = logging.getLogger(__name__)

#: Relative error allowed between predicted and measured packets on held-out shapes,
#: per family. Kernels fit within 8 % on the calibration set; GCD²-to-GCD² repacks
#: within 12 %; conversions from/to row-major (TVM-vectorized gathers whose code
#: depends on the row width) only within 40 %, and they only price a graph's input.
STATED_ERROR = {
    "matmul": 0.15,
    "conv": 0.15,
    "dwconv": 0.15,
    "repack": 0.25,
    "to_rowmajor": 0.5,
    "from_rowmajor": 0.5,
}

#: Packets a per-channel requantization adds per output vector of a conv, depthwise or
#: matmul kernel (two scalar loads and splats per channel the vector holds: 4 in
#: ``vrmpy``, 2 in ``vmpa``, 1 in ``vmpy``, where LLVM hoists them out of the column
#: loop). Medians of qemu-hexagon packet counts, per channel minus per tensor, over eight
#: conv / depthwise shapes (3x3 and 1x1, stride 1 and 2, 7x7 to 56x56, 16 to 256 channels;
#: spread 2-10 in vrmpy, one vmpa outlier at 36). Per tensor the shipped coefficients
#: apply unchanged. It reorders plans: a 28x28x32 3x3 depthwise measured 7262 / 7695
#: packets (vrmpy / vmpy) per tensor, 9386 / 8005 per channel.
PER_CHANNEL_PACKETS_PER_OUT = {"vrmpy": 6.4, "vmpa": 3.5, "vmpy": 0.6}

#: What a model predicts, and the coefficients shipped for it.
MEASURES = {"packets": COEFFICIENTS, "cycles": CYCLE_COEFFICIENTS}

FEATURES = {
    "matmul": ("const", "mul", "iter", "out", "loops"),
    # folded: input vectors a TapFold conv assembles from its tap vectors (0 otherwise)
    "conv": ("const", "mul", "iter", "out", "loops", "folded"),
    # grouped convs: the same counts, their own coefficients (a short reduction per output
    # vector and a window base per block cost other than a dense conv's)
    "gconv": ("const", "mul", "iter", "out", "loops"),
    "dwconv": ("const", "mul", "iter", "out", "loops"),
    "repack": ("const", "vec", "src", "blocks"),
    "to_rowmajor": ("const", "bytes", "rowvec", "vec"),
    "from_rowmajor": ("const", "bytes", "rowvec", "vec"),
}


@dataclass(frozen=True)
class Work:
    """What a kernel does, in counts: ``family``, ``variant`` and feature values."""

    family: str
    variant: str
    counts: tuple  # (name, value) pairs in FEATURES[family] order

    def vector(self) -> list:
        """The work's counts as the feature vector the coefficients multiply."""
        return [float(v) for _, v in self.counts]


def _gemm_counts(variant, row_blocks, in_groups, out_groups, taps) -> dict:
    if variant == "vrmpy":
        nb = block_size(out_groups, 2)
        steps, per_iter = in_groups, 4 * nb
    elif variant == "vmpa":
        nb = block_size(out_groups, 4)
        steps, per_iter = in_groups // 2, 2 * nb
    else:
        nb = block_size(out_groups, 4)
        steps, per_iter = in_groups // 2, nb
    blocks = row_blocks * (out_groups // nb)
    iters = blocks * taps * steps
    return {
        "const": 1,
        "mul": iters * per_iter,
        "iter": iters,
        "out": row_blocks * out_groups,
        "loops": blocks * taps,
        "folded": 0,
    }


def _work(family, variant, counts) -> Work:
    return Work(family, variant, tuple((f, counts[f]) for f in FEATURES[family]))


def matmul_work(variant: str, m: int, k: int, n: int) -> Work:
    """Counts of :func:`..kernels.matmul.matmul` for an ``m x k`` by ``k x n`` product."""
    layout = LAYOUT_OF[variant]
    x = layout.shape(m, k)
    y = layout.shape(m, n)
    return _work("matmul", variant, _gemm_counts(variant, x[0], x[1], y[1], 1))


def conv_work(variant: str, geo: GridGeometry, channels: int, out_channels: int) -> Work:
    """Counts of :func:`..kernels.conv2d.conv2d`."""
    layout = LAYOUT_OF[variant]
    x = geo.in_shape(variant, channels)
    y = geo.out_shape(variant, out_channels)
    fold = TapFold.of(variant, geo.kernel, channels)
    if fold:  # one reduction over the folded groups, each assembled from its taps
        groups, taps = fold.groups, 1
    else:
        groups, taps = x[1], geo.kernel**2
    counts = _gemm_counts(variant, y[1] // layout.rows, groups, y[0], taps)
    if fold:
        counts["folded"] = counts["iter"]
    return _work("conv", variant, counts)


def gconv_work(geo: GridGeometry, channels: int, out_channels: int, groups: int) -> Work:
    """Counts of :func:`..kernels.grouped.grouped_conv2d`, the ``conv`` family's features
    fitted on grouped convs (``gconv/vrmpy``): a dense ``vrmpy`` conv whose reduction per
    output vector is its window of
    :class:`~tvm_cocopie.topi.int8.hvx.GroupWindow` (``span`` input groups per tap),
    over the taps that read the image (the executor folds the others into the bias)."""
    win = GroupWindow(channels, out_channels, groups)
    y = geo.out_shape("vrmpy", out_channels)
    counts = _gemm_counts("vrmpy", y[1] // LAYOUT_OF["vrmpy"].rows, win.span, y[0],
                          len(geo.live_taps()))
    return _work("gconv", "vrmpy", counts)


def dwconv_work(variant: str, geo: GridGeometry, channels: int) -> Work:
    """Counts of :func:`..kernels.depthwise.depthwise_conv2d` (``vmpy`` in ``variant``'s layout)."""
    layout = LAYOUT_OF[variant]
    groups = geo.in_shape(variant, channels)[1]
    rows = geo.out_rows(variant) // layout.rows
    nb = block_size(groups, 4)
    pairs = math.ceil(geo.kernel**2 / 2)
    blocks = rows * (groups // nb)
    counts = {
        "const": 1,
        "mul": blocks * pairs * nb,
        "iter": blocks * pairs,
        "out": rows * groups,
        "loops": blocks,
    }
    return _work("dwconv", variant, counts)


def transform_work(src: Layout | None, dst: Layout | None, m: int, k: int) -> Work:
    """Counts of :func:`..kernels.transforms.convert_func` (``None`` is row-major)."""
    if src is not None and dst is not None:
        vec = math.prod(dst.shape(m, k)) // 128
        rows, cols = max(src.rows, dst.rows), max(src.cols, dst.cols)
        blocks = math.ceil(round_up(m, dst.rows) / rows) * math.ceil(round_up(k, dst.cols) / cols)
        counts = {
            "const": 1,
            "vec": vec,
            "src": math.prod(src.shape(m, k)) // 128,
            "blocks": blocks,
        }
        return _work("repack", f"{src.cols}to{dst.cols}", counts)
    packed = dst if src is None else src
    counts = {
        "const": 1,
        "bytes": m * k,
        "rowvec": m * math.ceil(k / 128),
        "vec": math.prod(packed.shape(m, k)) // 128,
    }
    if dst is None:
        return _work("to_rowmajor", f"{src.cols}to0", counts)
    return _work("from_rowmajor", f"0to{dst.cols}", counts)


class CostModel:
    """Linear predictor: ``packets = coef . counts`` per ``(family, variant)`` (or estimated
    cycles, when ``measure`` is ``"cycles"``; every method's "packets" then means cycles)."""

    def __init__(self, coefficients: dict, measure: str = "packets"):
        self.coefficients = {k: list(v) for k, v in coefficients.items()}
        self.measure = measure

    @classmethod
    def default(cls, measure: str = "packets") -> CostModel:
        """The model fitted on emulator packets (``measure="packets"``) or on estimated
        cycles (``"cycles"``), shipped in :mod:`.coefficients`."""
        if measure not in MEASURES:
            raise CocopieError(f"no cost model of {measure!r}; one of {sorted(MEASURES)}")
        return cls(MEASURES[measure], measure)

    @classmethod
    def cycles(cls) -> CostModel:
        """``default("cycles")``: the model fitted on estimated cycles."""
        return cls.default("cycles")

    def key(self, work: Work) -> str:
        """``family/variant``: which coefficients price ``work``."""
        return f"{work.family}/{work.variant}"

    def predict(self, work: Work, per_channel: bool = False) -> float:
        """Predicted packets of ``work``; :class:`~tvm_cocopie.errors.CocopieError` if the model
        has no coefficients for it. ``per_channel``: requantized per output channel
        (:data:`PER_CHANNEL_PACKETS_PER_OUT` per output vector on top)."""
        coef = self.coefficients.get(self.key(work))
        if coef is None:
            flag = "" if self.measure == "packets" else f" --measure {self.measure}"
            raise CocopieError(
                f"the Hexagon {self.measure} cost model has no coefficients for "
                f"{self.key(work)}; recalibrate with "
                f"`python -m tvm_cocopie.hexagon.tools.calibrate{flag}`"
            )
        packets = float(sum(c * v for c, v in zip(coef, work.vector())))
        if per_channel:
            packets += PER_CHANNEL_PACKETS_PER_OUT[work.variant] * dict(work.counts)["out"]
        return packets

    # convenience wrappers used by selection
    def matmul(self, variant, m, k, n, per_channel: bool = False) -> float:
        """Predicted packets of an ``m x k`` by ``k x n`` matmul in ``variant``."""
        return self.predict(matmul_work(variant, m, k, n), per_channel)

    def conv(self, variant, geo, channels, out_channels, per_channel: bool = False) -> float:
        """Predicted packets of a ``geo`` convolution from ``channels`` to ``out_channels`` in
        ``variant`` (``per_channel``: requantized per output channel)."""
        return self.predict(conv_work(variant, geo, channels, out_channels), per_channel)

    def gconv(self, geo, channels, out_channels, groups, per_channel: bool = False) -> float:
        """Predicted packets of a ``geo`` grouped convolution (``vrmpy``, its only layout)."""
        return self.predict(gconv_work(geo, channels, out_channels, groups), per_channel)

    def dwconv(self, variant, geo, channels, per_channel: bool = False) -> float:
        """Predicted packets of a ``geo`` depthwise convolution of ``channels`` in ``variant``."""
        return self.predict(dwconv_work(variant, geo, channels), per_channel)

    def transform(self, src, dst, m, k) -> float:
        """Predicted packets of moving an ``m x k`` matrix from layout ``src`` to ``dst`` (0 when
        they are the same)."""
        if src == dst:
            return 0.0
        return self.predict(transform_work(src, dst, m, k))

    @classmethod
    def fit(cls, samples, measure: str = "packets") -> CostModel:
        """Fit from ``[(Work, measured packets)]`` (or cycles, per ``measure``) by
        non-negative least squares.

        Rows are weighted by ``1 / packets`` so the fit minimizes relative error.
        """
        import numpy as np
        from scipy.optimize import nnls

        groups: dict = {}
        for work, packets in samples:
            groups.setdefault((work.family, work.variant), []).append((work.vector(), packets))
        coefficients = {}
        for (family, variant), rows in sorted(groups.items()):
            a = np.array([r for r, _ in rows])
            b = np.array([p for _, p in rows], dtype=float)
            scale = 1.0 / b
            coef, _ = nnls(a * scale[:, None], b * scale)
            coefficients[f"{family}/{variant}"] = [round(float(c), 4) for c in coef]
        return cls(coefficients, measure)


# ------------------------------------------------------------------- calibration


"""A packet cost model per kernel variant and layout transform (seed 004, §4.4.1).

GCD²'s global selection needs ``Cost(ep_i(O))`` for every execution plan and
``TC(ep_j, ep_i)`` for every layout transform "based on the number of instructions
(cycles) required", without running anything. Here both are linear models over counts
that follow from the loop nests of :mod:`.gemm`, :mod:`.depthwise` and
:mod:`.layouts` (no run needed to compute them):

- ``mul``: multiply steps (one ``vrmpy``, one ``vmpa`` + ``vaddhw``, or two ``vmpy`` +
  two ``vaddhw``) -- the inner-loop body per output column;
- ``iter``: inner-loop iterations (input vector loads, loop control);
- ``out``: output vectors (requantization and store);
- ``loops``: entries into the reduction loop (per row block, column block and tap);
- ``vec``/``bytes``: vectors or bytes moved by a transform;
- ``const``: call overhead.

The coefficients, one set per family (``matmul``, ``conv``, ``dwconv``, ``repack``,
``to_rowmajor``, ``from_rowmajor``) and variant, are fitted by non-negative least
squares on emulator packet counts of a few shapes (:func:`calibrate`, run by
``python -m tvm_cocopie.hexagon.costmodel``) and stored as data in
:mod:`._calibration`. ``tests/test_hexagon_costmodel.py`` checks predictions on
held-out shapes against fresh measurements within :data:`STATED_ERROR`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from ..errors import CocopieError
from .conv2d import ConvGeometry
from .gemm import block_size
from .layouts import LAYOUT_OF, Layout, round_up

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

FEATURES = {
    "matmul": ("const", "mul", "iter", "out", "loops"),
    "conv": ("const", "mul", "iter", "out", "loops"),
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
    }


def _work(family, variant, counts) -> Work:
    return Work(family, variant, tuple((f, counts[f]) for f in FEATURES[family]))


def matmul_work(variant: str, m: int, k: int, n: int) -> Work:
    """Counts of :func:`.matmul.matmul` for an ``m x k`` by ``k x n`` product."""
    layout = LAYOUT_OF[variant]
    x = layout.shape(m, k)
    y = layout.shape(m, n)
    return _work("matmul", variant, _gemm_counts(variant, x[0], x[1], y[1], 1))


def conv_work(variant: str, geo: ConvGeometry, channels: int, out_channels: int) -> Work:
    """Counts of :func:`.conv2d.conv2d`."""
    layout = LAYOUT_OF[variant]
    x = geo.in_shape(variant, channels)
    y = geo.out_shape(variant, out_channels)
    counts = _gemm_counts(variant, y[1] // layout.rows, x[1], y[0], geo.kernel**2)
    return _work("conv", variant, counts)


def dwconv_work(variant: str, geo: ConvGeometry, channels: int) -> Work:
    """Counts of :func:`.depthwise.depthwise_conv2d` (``vmpy`` in ``variant``'s layout)."""
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
    """Counts of :func:`.layouts.convert_func` (``None`` is row-major)."""
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
    """Linear packet predictor: ``packets = coef . counts`` per ``(family, variant)``."""

    def __init__(self, coefficients: dict):
        self.coefficients = {k: list(v) for k, v in coefficients.items()}

    @classmethod
    def default(cls) -> CostModel:
        """The model fitted on emulator packets, shipped in :mod:`._calibration`."""
        from ._calibration import COEFFICIENTS

        return cls(COEFFICIENTS)

    def key(self, work: Work) -> str:
        return f"{work.family}/{work.variant}"

    def predict(self, work: Work) -> float:
        coef = self.coefficients.get(self.key(work))
        if coef is None:
            raise CocopieError(
                f"the Hexagon cost model has no coefficients for {self.key(work)}; "
                "recalibrate with `python -m tvm_cocopie.hexagon.costmodel`"
            )
        return float(sum(c * v for c, v in zip(coef, work.vector())))

    # convenience wrappers used by selection
    def matmul(self, variant, m, k, n) -> float:
        return self.predict(matmul_work(variant, m, k, n))

    def conv(self, variant, geo, channels, out_channels) -> float:
        return self.predict(conv_work(variant, geo, channels, out_channels))

    def dwconv(self, variant, geo, channels) -> float:
        return self.predict(dwconv_work(variant, geo, channels))

    def transform(self, src, dst, m, k) -> float:
        if src == dst:
            return 0.0
        return self.predict(transform_work(src, dst, m, k))

    @classmethod
    def fit(cls, samples) -> CostModel:
        """Fit from ``[(Work, measured packets)]`` by non-negative least squares.

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
        return cls(coefficients)


# ------------------------------------------------------------------- calibration

#: Shapes the shipped model is fitted on.
CALIBRATION_SHAPES = {
    "matmul": [(32, 32, 32), (64, 64, 64), (128, 64, 32), (96, 128, 64), (256, 32, 128)],
    # (H, W, C, O, kernel, stride, pad)
    "conv": [
        (8, 8, 16, 16, 3, 1, 1),
        (14, 14, 32, 32, 1, 1, 0),
        (10, 10, 8, 24, 3, 2, 1),
        (16, 16, 3, 16, 7, 2, 3),
        (12, 12, 16, 48, 1, 1, 0),
        (10, 10, 192, 64, 1, 1, 0),
        (6, 6, 128, 256, 1, 1, 0),
        # wide 1x1s: vrmpy's long reduction loops run faster per step than short ones
        (12, 12, 256, 64, 1, 1, 0),
        (8, 8, 320, 96, 1, 1, 0),
    ],
    # (H, W, C, kernel, stride, pad)
    "dwconv": [(12, 12, 32, 3, 1, 1), (16, 16, 16, 3, 2, 1), (8, 8, 64, 3, 1, 1)],
    "transform": [(64, 64), (128, 32), (96, 160)],
}

#: Shapes kept out of the fit; ``tests/test_hexagon_costmodel.py`` measures these.
HELD_OUT = [
    ("matmul", "vmpy", (96, 96, 96)),
    ("matmul", "vmpa", (160, 48, 80)),
    ("matmul", "vrmpy", (96, 96, 96)),
    ("conv", "vmpy", (9, 9, 24, 32, 3, 1, 1)),
    ("conv", "vmpa", (14, 14, 16, 64, 1, 1, 0)),
    ("conv", "vrmpy", (9, 9, 24, 32, 3, 1, 1)),
    ("conv", "vrmpy", (14, 14, 16, 64, 1, 1, 0)),
    ("dwconv", "vrmpy", (14, 14, 24, 3, 1, 1)),
    ("dwconv", "vmpy", (14, 14, 24, 3, 1, 1)),
    ("transform", (4, 1), (80, 48)),
    ("transform", (1, 4), (80, 48)),
    ("transform", (2, 4), (80, 48)),
]


def held_out_error(family, variant, shape, timeout=None) -> tuple:
    """``(predicted, measured, relative error, family)`` of one held-out job."""
    by_cols = {lay.cols: lay for lay in LAYOUT_OF.values()}
    if family == "transform":
        variant = tuple(None if c is None else by_cols[c] for c in variant)
    work, packets = measure_work(family, variant, shape, timeout)
    predicted = CostModel.default().predict(work)
    return predicted, packets, abs(predicted - packets) / packets, work.family


def measure_work(family: str, variant: str, shape, timeout=None):
    """Run one kernel under the emulator: ``(Work, packets)``; raises on a wrong result."""
    from . import measure

    if family == "matmul":
        rec = measure.gcd2_matmul(variant, *shape, timeout=timeout)
        work = matmul_work(variant, *shape)
    elif family == "conv":
        h, w, c, o, k, s, p = shape
        rec = measure.gcd2_conv(variant, h, w, c, o, k, s, p, timeout=timeout)
        work = conv_work(variant, ConvGeometry(h, w, k, s, p), c, o)
    elif family == "dwconv":
        h, w, c, k, s, p = shape
        rec = measure.gcd2_conv(variant, h, w, c, c, k, s, p, dw=True, timeout=timeout)
        work = dwconv_work(variant, ConvGeometry(h, w, k, s, p), c)
    else:
        src, dst = variant
        rec = measure.layout_transform(src, dst, *shape, timeout=timeout)
        work = transform_work(src, dst, *shape)
    if not rec["exact"]:
        raise CocopieError(f"{family} {variant} {shape}: the kernel's result is wrong")
    return work, rec["packets"]


def transform_pairs():
    chain = [None, *LAYOUT_OF.values()]
    return [(a, b) for a in chain for b in chain if a is not b]


def jobs(shapes: dict):
    """Every ``(family, variant, shape)`` of a shape table."""
    out = []
    for family in ("matmul", "conv", "dwconv"):
        for shape in shapes.get(family, []):
            out += [(family, v, shape) for v in LAYOUT_OF]
    for shape in shapes.get("transform", []):
        out += [("transform", pair, shape) for pair in transform_pairs()]
    return out


def calibrate(shapes: dict | None = None, timeout=None):
    """Measure the calibration shapes and fit: ``(CostModel, samples)``."""
    samples = []
    for family, variant, shape in jobs(shapes or CALIBRATION_SHAPES):
        work, packets = measure_work(family, variant, shape, timeout)
        log.info("%s %s %s: %d packets", family, work.variant, shape, packets)
        samples.append((family, _variant_key(variant), shape, packets))
    return fit_samples(samples), samples


def _variant_key(variant):
    if isinstance(variant, tuple):
        return tuple(None if lay is None else lay.cols for lay in variant)
    return variant


def _work_of(family, variant, shape) -> Work:
    if family == "matmul":
        return matmul_work(variant, *shape)
    if family == "conv":
        h, w, c, o, k, s, p = shape
        return conv_work(variant, ConvGeometry(h, w, k, s, p), c, o)
    if family == "dwconv":
        h, w, c, k, s, p = shape
        return dwconv_work(variant, ConvGeometry(h, w, k, s, p), c)
    by_cols = {lay.cols: lay for lay in LAYOUT_OF.values()}
    src, dst = (None if c is None else by_cols[c] for c in variant)
    return transform_work(src, dst, *shape)


def fit_samples(samples) -> CostModel:
    """Fit from stored ``(family, variant, shape, packets)`` samples (no emulator)."""
    return CostModel.fit([(_work_of(f, v, tuple(s)), p) for f, v, s, p in samples])


def write_calibration(model: CostModel, samples, path) -> None:
    """Write the fitted coefficients as the Python data module :mod:`._calibration`."""
    lines = [
        '"""Coefficients of :mod:`.costmodel`, fitted on qemu-hexagon packet counts.',
        "",
        "Generated by ``python -m tvm_cocopie.hexagon.costmodel``; do not edit by hand.",
        '"""',
        "",
        "# fmt: off",
        "COEFFICIENTS = {",
    ]
    for key, coef in sorted(model.coefficients.items()):
        lines.append(f"    {key!r}: {coef!r},")
    lines += [
        "}",
        "",
        "#: (family, variant, shape, measured packets) used in the fit",
        "SAMPLES = [",
    ]
    for family, variant, shape, packets in samples:
        lines.append(f"    ({family!r}, {variant!r}, {tuple(shape)!r}, {packets}),")
    lines += ["]", "# fmt: on", ""]
    with open(path, "w") as fh:
        fh.write("\n".join(lines))


def main(argv=None) -> None:  # pragma: no cover - calibration is run by hand
    import argparse
    import pathlib

    ap = argparse.ArgumentParser(description="calibrate the Hexagon packet cost model")
    ap.add_argument("--refit", action="store_true", help="refit the stored samples only")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.refit:
        from ._calibration import SAMPLES

        samples = list(SAMPLES)
        model = fit_samples(samples)
    else:
        model, samples = calibrate()
    path = pathlib.Path(__file__).with_name("_calibration.py")
    write_calibration(model, samples, path)
    worst = max(abs(model.predict(_work_of(f, v, s)) - p) / p for f, v, s, p in samples)
    log.info("wrote %s; worst relative error on the fit set %.1f%%", path, 100 * worst)


if __name__ == "__main__":  # pragma: no cover
    main()

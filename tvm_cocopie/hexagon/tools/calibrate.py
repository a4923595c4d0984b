"""Calibration of the Hexagon cost model against emulator packet counts (seed 004, §4.4.1).

Run by hand: ``python -m tvm_cocopie.hexagon.tools.calibrate [--refit]`` measures the
calibration shapes under qemu-hexagon, fits :class:`~..selection.costmodel.CostModel`
and rewrites :mod:`..selection.coefficients`; :func:`held_out_error` checks it on
shapes it was not fitted on.
"""

from __future__ import annotations

import logging

from ...errors import CocopieError
from ...topi.int8.layouts import LAYOUT_OF, GridGeometry
from ..selection.coefficients import SAMPLES
from ..selection.costmodel import (
    CostModel,
    Work,
    conv_work,
    dwconv_work,
    matmul_work,
    transform_work,
)
from . import measure

log = logging.getLogger(__name__)


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

    if family == "matmul":
        rec = measure.gcd2_matmul(variant, *shape, timeout=timeout)
        work = matmul_work(variant, *shape)
    elif family == "conv":
        h, w, c, o, k, s, p = shape
        rec = measure.gcd2_conv(variant, h, w, c, o, k, s, p, timeout=timeout)
        work = conv_work(variant, GridGeometry(h, w, k, s, p), c, o)
    elif family == "dwconv":
        h, w, c, k, s, p = shape
        rec = measure.gcd2_conv(variant, h, w, c, c, k, s, p, dw=True, timeout=timeout)
        work = dwconv_work(variant, GridGeometry(h, w, k, s, p), c)
    else:
        src, dst = variant
        rec = measure.layout_transform(src, dst, *shape, timeout=timeout)
        work = transform_work(src, dst, *shape)
    if not rec["exact"]:
        raise CocopieError(f"{family} {variant} {shape}: the kernel's result is wrong")
    return work, rec["packets"]


def transform_pairs():
    """Every ordered pair of distinct layouts (``None``: row-major) a transform is
    calibrated for."""
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
        return conv_work(variant, GridGeometry(h, w, k, s, p), c, o)
    if family == "dwconv":
        h, w, c, k, s, p = shape
        return dwconv_work(variant, GridGeometry(h, w, k, s, p), c)
    by_cols = {lay.cols: lay for lay in LAYOUT_OF.values()}
    src, dst = (None if c is None else by_cols[c] for c in variant)
    return transform_work(src, dst, *shape)


def fit_samples(samples) -> CostModel:
    """Fit from stored ``(family, variant, shape, packets)`` samples (no emulator)."""
    return CostModel.fit([(_work_of(f, v, tuple(s)), p) for f, v, s, p in samples])


def write_calibration(model: CostModel, samples, path) -> None:
    """Write the fitted coefficients as the Python data module :mod:`..selection.coefficients`."""
    lines = [
        '"""Coefficients of :mod:`..selection.costmodel`, fitted on qemu-hexagon packet counts.',
        "",
        "Generated by ``python -m tvm_cocopie.hexagon.tools.calibrate``; do not edit by hand.",
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
    """Measure (or with ``--refit`` refit the stored samples), fit and rewrite
    :mod:`..selection.coefficients`."""
    import argparse
    import pathlib

    ap = argparse.ArgumentParser(description="calibrate the Hexagon packet cost model")
    ap.add_argument("--refit", action="store_true", help="refit the stored samples only")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.refit:
        samples = list(SAMPLES)
        model = fit_samples(samples)
    else:
        model, samples = calibrate()
    path = pathlib.Path(__file__).parent.parent / "selection" / "coefficients.py"
    write_calibration(model, samples, path)
    worst = max(abs(model.predict(_work_of(f, v, s)) - p) / p for f, v, s, p in samples)
    log.info("wrote %s; worst relative error on the fit set %.1f%%", path, 100 * worst)


if __name__ == "__main__":  # pragma: no cover
    main()

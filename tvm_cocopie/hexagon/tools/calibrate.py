"""Calibration of the Hexagon cost model against emulator packet counts (seed 004, §4.4.1).

Run by hand: ``python -m tvm_cocopie.hexagon.tools.calibrate [--refit]`` measures the
calibration shapes under qemu-hexagon, fits :class:`~..selection.costmodel.CostModel`
and rewrites :mod:`..selection.coefficients`; :func:`held_out_error` checks it on
shapes it was not fitted on. With ``--measure cycles`` the same shapes are run traced
and the model is fitted on estimated cycles (:mod:`..vliw.cycles`) instead: stored as
``CYCLE_COEFFICIENTS`` / ``CYCLE_SAMPLES`` next to the packet model, which is kept.
"""

from __future__ import annotations

import logging

from ...errors import CocopieError
from ...topi.int8.layouts import LAYOUT_OF, GridGeometry
from ..selection.coefficients import COEFFICIENTS, CYCLE_COEFFICIENTS, CYCLE_SAMPLES, SAMPLES
from ..selection.costmodel import (
    CostModel,
    Work,
    conv_work,
    dwconv_work,
    gconv_work,
    matmul_work,
    transform_work,
)
from . import measure as kernel_runs

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
        (24, 24, 3, 32, 3, 2, 1),  # a MobileNet stem: taps folded as the 7x7's
        (12, 12, 16, 48, 1, 1, 0),
        (10, 10, 192, 64, 1, 1, 0),
        (6, 6, 128, 256, 1, 1, 0),
        # wide 1x1s: vrmpy's long reduction loops run faster per step than short ones
        (12, 12, 256, 64, 1, 1, 0),
        (8, 8, 320, 96, 1, 1, 0),
    ],
    # (H, W, C, kernel, stride, pad)
    "dwconv": [(12, 12, 32, 3, 1, 1), (16, 16, 16, 3, 2, 1), (8, 8, 64, 3, 1, 1)],
    # (H, W, C, O, groups, kernel, stride, pad): grouped convs (vrmpy grids only)
    "gconv": [(8, 8, 64, 64, 4, 3, 1, 1), (10, 6, 96, 48, 2, 3, 1, 1),
              (12, 12, 32, 32, 8, 1, 1, 0), (6, 6, 64, 64, 16, 3, 1, 1),
              (10, 10, 64, 64, 16, 3, 2, 1), (7, 7, 24, 24, 12, 3, 1, 1),
              (9, 9, 128, 64, 4, 1, 1, 0), (6, 6, 16, 8, 2, 1, 1, 0)],
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


#: What can be measured and fitted: packets, or estimated cycles of a traced run.
MEASURES = ("packets", "cycles")


def held_out_error(family, variant, shape, timeout=None, measure="packets") -> tuple:
    """``(predicted, measured, relative error, family)`` of one held-out job, for the
    packet model or (``measure="cycles"``) the cycle model."""
    by_cols = {lay.cols: lay for lay in LAYOUT_OF.values()}
    if family == "transform":
        variant = tuple(None if c is None else by_cols[c] for c in variant)
    work, measured = measure_work(family, variant, shape, timeout, measure)
    predicted = CostModel.default(measure).predict(work)
    return predicted, measured, abs(predicted - measured) / measured, work.family


def measure_work(family: str, variant: str, shape, timeout=None, measure="packets"):
    """Run one kernel under the emulator: ``(Work, packets)`` (or estimated cycles with
    ``measure="cycles"``); raises on a wrong result."""
    work, rec = measure_record(family, variant, shape, timeout, cycles=measure == "cycles")
    return work, rec[measure]


def measure_record(family: str, variant: str, shape, timeout=None, cycles=False):
    """Run one kernel under the emulator: ``(Work, record of :mod:`.measure`)``, with
    ``cycles`` and ``stalls`` when ``cycles``; raises on a wrong result."""
    if family not in ("matmul", "conv", "dwconv", "gconv", "transform"):
        raise CocopieError(f"no calibration family {family!r}")
    if family == "gconv":
        rec = kernel_runs.gcd2_grouped_conv(*shape, timeout=timeout, cycles=cycles)
    elif family == "matmul":
        rec = kernel_runs.gcd2_matmul(variant, *shape, timeout=timeout, cycles=cycles)
    elif family == "conv":
        h, w, c, o, k, s, p = shape
        rec = kernel_runs.gcd2_conv(variant, h, w, c, o, k, s, p, timeout=timeout,
                                    cycles=cycles)
    elif family == "dwconv":
        h, w, c, k, s, p = shape
        rec = kernel_runs.gcd2_conv(variant, h, w, c, c, k, s, p, dw=True, timeout=timeout,
                                    cycles=cycles)
    else:
        src, dst = variant
        rec = kernel_runs.layout_transform(src, dst, *shape, timeout=timeout, cycles=cycles)
    if not rec["exact"]:
        raise CocopieError(f"{family} {variant} {shape}: the kernel's result is wrong")
    return _work_of(family, _variant_key(variant), shape), rec


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
    out += [("gconv", "vrmpy", shape) for shape in shapes.get("gconv", [])]  # its only layout
    for shape in shapes.get("transform", []):
        out += [("transform", pair, shape) for pair in transform_pairs()]
    return out


def calibrate(shapes: dict | None = None, timeout=None, measure="packets"):
    """Measure the calibration shapes and fit: ``(CostModel, samples)``.

    Samples are ``(family, variant, shape, packets)``; with ``measure="cycles"``
    ``(family, variant, shape, cycles, packets)`` of one traced run each, the model
    fitted on the cycles."""
    if measure not in MEASURES:
        raise CocopieError(f"cannot calibrate on {measure!r}; one of {MEASURES}")
    samples = []
    for family, variant, shape in jobs(shapes or CALIBRATION_SHAPES):
        work, rec = measure_record(family, variant, shape, timeout, cycles=measure == "cycles")
        key = (family, _variant_key(variant), tuple(shape))
        if measure == "cycles":
            log.info("%s %s %s: %d cycles (%d packets)", family, work.variant, shape,
                     rec["cycles"], rec["packets"])
            samples.append((*key, rec["cycles"], rec["packets"]))
        else:
            log.info("%s %s %s: %d packets", family, work.variant, shape, rec["packets"])
            samples.append((*key, rec["packets"]))
    return fit_samples(samples, measure), samples


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
    if family == "gconv":
        h, w, c, o, g, k, s, p = shape
        return gconv_work(GridGeometry(h, w, k, s, p), c, o, g)
    by_cols = {lay.cols: lay for lay in LAYOUT_OF.values()}
    src, dst = (None if c is None else by_cols[c] for c in variant)
    return transform_work(src, dst, *shape)


def fit_samples(samples, measure="packets") -> CostModel:
    """Fit from stored ``(family, variant, shape, value, ...)`` samples (no emulator): the
    fourth item is what is fitted (packets in ``SAMPLES``, cycles in ``CYCLE_SAMPLES``)."""
    return CostModel.fit(
        [(_work_of(f, v, tuple(s)), value) for f, v, s, value, *_ in samples], measure
    )


def _dict_lines(name: str, coefficients: dict) -> list:
    """``NAME = {...}`` as source lines, keys sorted."""
    return [f"{name} = {{", *(f"    {k!r}: {v!r}," for k, v in sorted(coefficients.items())), "}"]


def write_calibration(model: CostModel, samples, path, cycle_model=None,
                      cycle_samples=None) -> None:
    """Write the fitted coefficients as the Python data module :mod:`..selection.coefficients`;
    the cycle model and its samples are kept as stored unless given."""
    if cycle_model is None:
        cycle_model, cycle_samples = CostModel(CYCLE_COEFFICIENTS, "cycles"), CYCLE_SAMPLES
    lines = [
        '"""Coefficients of :mod:`.costmodel`, fitted on qemu-hexagon packet counts',
        "(``COEFFICIENTS``) and on estimated cycles of the same shapes (``CYCLE_COEFFICIENTS``).",
        "",
        "Generated by ``python -m tvm_cocopie.hexagon.tools.calibrate [--measure cycles]``;",
        "do not edit by hand.",
        '"""',
        "",
        "# fmt: off",
        *_dict_lines("COEFFICIENTS", model.coefficients),
        "",
        "#: (family, variant, shape, measured packets) used in the fit",
        "SAMPLES = [",
    ]
    for family, variant, shape, *values in samples:
        lines.append(f"    ({family!r}, {variant!r}, {tuple(shape)!r}, {values[0]}),")
    lines += [
        "]",
        "",
        "#: estimated cycles (packets + stalls, :mod:`..vliw.cycles`) of the same shapes",
        *_dict_lines("CYCLE_COEFFICIENTS", cycle_model.coefficients),
        "",
        "#: (family, variant, shape, estimated cycles, packets of the same traced run)",
        "CYCLE_SAMPLES = [",
    ]
    for family, variant, shape, cycles, packets in cycle_samples:
        lines.append(f"    ({family!r}, {variant!r}, {tuple(shape)!r}, {cycles}, {packets}),")
    lines += ["]", "# fmt: on", ""]
    with open(path, "w") as fh:
        fh.write("\n".join(lines))


def main(argv=None) -> None:  # pragma: no cover - calibration is run by hand
    """Measure (or with ``--refit`` refit the stored samples), fit and rewrite
    :mod:`..selection.coefficients`."""
    import argparse
    import pathlib

    ap = argparse.ArgumentParser(description="calibrate the Hexagon packet (or cycle) cost model")
    ap.add_argument("--refit", action="store_true", help="refit the stored samples only")
    ap.add_argument("--measure", choices=MEASURES, default="packets",
                    help="fit on packets (default) or on estimated cycles of traced runs; "
                         "the other model is kept as stored")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stored = {"packets": SAMPLES, "cycles": CYCLE_SAMPLES}[args.measure]
    if args.refit:
        samples = list(stored)
        model = fit_samples(samples, args.measure)
    else:
        model, samples = calibrate(measure=args.measure)
    path = pathlib.Path(__file__).parent.parent / "selection" / "coefficients.py"
    if args.measure == "cycles":
        write_calibration(CostModel(COEFFICIENTS), SAMPLES, path, model, samples)
    else:
        write_calibration(model, samples, path)
    worst = max(abs(model.predict(_work_of(f, v, s)) - p) / p for f, v, s, p, *_ in samples)
    log.info("wrote %s; worst relative error on the fit set %.1f%%", path, 100 * worst)


if __name__ == "__main__":  # pragma: no cover
    main()

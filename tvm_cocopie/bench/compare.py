"""Builds of one model side by side: compile each variant, check that their outputs
agree, time them interleaved in blocks (:func:`~.timing.interleaved_times`).

Used by transfer-tuning's end-to-end figures, ``scripts/bench_transfer.py`` and
``scripts/bench_rewrite.py``: every "compile these variants and time them" goes
through :func:`compare_builds`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..api import compile_model
from ..pipeline import PipelineOptions
from .timing import interleaved_times, median, output_list


def compare_builds(model, target, variants: dict, inputs: dict, reference: str,
                   repeat: int = 10, max_seconds: float = 30.0) -> dict:
    """Compile ``model`` once per variant and time them interleaved in blocks (median ms).

    ``variants``: ``{name: (pipeline, PipelineOptions or None)}``; ``model`` is one
    model for all, or ``{name: model}`` (e.g. an NHWC build beside the ONNX file).
    Every variant's outputs are compared with ``reference``'s; returns ``{name: ms,
    ..., "max_abs_err": worst difference}``.
    """
    models = model if isinstance(model, dict) else {name: model for name in variants}
    compiled = {name: compile_model(models[name], target=target, pipeline=pipe, options=opt)
                for name, (pipe, opt) in variants.items()}
    ref = [np.asarray(o) for o in output_list(compiled[reference](**inputs))]
    err = 0.0
    for comp in compiled.values():
        for got, want in zip(output_list(comp(**inputs)), ref):
            err = max(err, float(np.max(np.abs(np.asarray(got, "float64") - want), initial=0.0)))
    times = interleaved_times({n: (lambda c=c: c(**inputs)) for n, c in compiled.items()},
                              repeat=repeat, max_seconds=max_seconds, block=4)
    return {n: median(t) for n, t in times.items()} | {"max_abs_err": err}


def measure_model(model, target, database: str | Path, inputs: dict, repeat: int = 10,
                  max_seconds: float = 30.0) -> dict:
    """End-to-end latency (median ms) untuned, with default schedules, with the database.

    Outputs are checked against the untuned build (``max_abs_err``).
    """
    res = compare_builds(model, target, {
        "untuned": ("cocopie", PipelineOptions(schedule=False)),
        "default": ("cocopie", PipelineOptions()),
        "transfer": ("cocopie", PipelineOptions(database=str(database)))},
        inputs, "untuned", repeat, max_seconds)
    return {"untuned_ms": res["untuned"], "default_ms": res["default"], "transfer_ms": res["transfer"],
            "speedup_over_untuned": res["untuned"] / res["transfer"],
            "speedup_over_default": res["default"] / res["transfer"], "max_abs_err": res["max_abs_err"]}

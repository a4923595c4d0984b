"""The second pass of transfer-tuning: profile the tuned model, retry what disappoints.

A schedule is chosen on standalone measurements: the kernel runs alone, its inputs
hot in cache. Inside the model the neighbours have evicted them, and a schedule that
won by a hair standalone (a larger tile, an input-stationary loop order) may lose
there. The thesis measures the whole model only at the end (§6.3); this optional pass
closes the loop: it times every kernel call inside the model (the Relax VM's
instrument hook, :func:`kernel_times`), flags the transferred kernels whose in-model
time exceeds the standalone prediction by more than a tolerance, builds the model
once more with those kernels back on their default schedule, times them again, and
keeps per kernel whichever ran faster in the model.
"""

from __future__ import annotations

import logging

from ..api import compile_model
from ..bench.runtime_stats import kernel_times, random_inputs
from ..pipeline import PipelineOptions

log = logging.getLogger(__name__)


def second_pass(model, target, winners: list, write_database, out_dir, tolerance: float = 1.25,
                rounds: int = 10, shapes=None, options=None) -> tuple[list, dict]:
    """Profile the model built with ``winners``; drop transferred schedules that lose
    to the default schedule inside the model.

    ``winners``: ``[(kernel, candidate id, schedule, standalone seconds)]`` as
    :func:`~.search.transfer_tune` commits them; ``write_database(winners, dir)``
    writes a database. Returns the winners kept and a per-kernel account
    ``{kernel: {"standalone", "in_model", "in_model_default", "kept"}}`` of the
    kernels that were retried. ``options``: the pipeline options the kernels were
    extracted with (e.g. :data:`~.nhwc.NHWC_OPTIONS`).
    """
    import tempfile
    from pathlib import Path


    def profile(selected) -> dict[str, float]:
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".profile.") as tmp:
            db = write_database(selected, Path(tmp))
            compiled = compile_model(model, target=target, shapes=shapes,
                                     options=(options or PipelineOptions()).replace(
                                         database=str(db)))
            return kernel_times(compiled, random_inputs(compiled), rounds,
                                names=[w[0].name for w in winners])

    tuned = [w for w in winners if w[2] is not None]
    if not tuned:
        return winners, {}
    first = profile(winners)
    flagged = {w[0].name for w in tuned
               if w[0].name in first and first[w[0].name] > tolerance * w[3]}
    if not flagged:
        log.info("second pass: every transferred kernel runs in the model within %.0f%% of "
                 "its standalone time", 100 * (tolerance - 1))
        return winners, {}
    second = profile([w for w in winners if w[0].name not in flagged])
    kept, account = [], {}
    for w in winners:
        name = w[0].name
        if name not in flagged:
            kept.append(w)
            continue
        keep = name not in second or first[name] <= second[name]
        account[name] = {"standalone": w[3], "in_model": first[name],
                         "in_model_default": second.get(name), "kept": keep}
        if keep:
            kept.append(w)
        else:
            log.info("second pass: kernel %s goes back to its default schedule (%.3f ms in the "
                     "model against %.3f ms)", name, 1e3 * first[name], 1e3 * second[name])
    return kept, account

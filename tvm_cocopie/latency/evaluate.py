"""How good the latency model is: leave-one-model-out over a dataset.

For each model measured whole, :func:`leave_one_model_out` trains a fresh
:class:`~.model.LatencyModel` on every row of the *other* sources (their kernels in the
model, their design-space samples, fusion and tuning rows: the model under test
contributes nothing), calibrates the whole-model sum on the other models, and
predicts the held-out model's kernels (per-kernel error), its whole latency (model
error) and the ranking of its kernels' design-space samples (Spearman's rank
correlation among the schedules of one kernel, the question transfer-tuning's
pre-screen asks: by the ranking head, :meth:`~.model.LatencyModel.rank`; beside it
``rank_corr_absolute``, the same by the predicted times).
"""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from .dataset import Dataset
from .model import LatencyModel, model_context, relative_errors

log = logging.getLogger(__name__)

#: a design-space group needs this many distinct timings to rank
MIN_RANKED = 3


def spearman(a, b) -> float | None:
    """Spearman's rank correlation of ``a`` and ``b`` (``None`` when either is constant)."""
    from scipy.stats import spearmanr

    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(spearmanr(a, b).statistic)


def sample_groups(rows) -> dict[str, list]:
    """Design-space samples by the kernel they vary (``kernel`` is ``key:index``)."""
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        if r.kind == "sample":
            groups[r.kernel.split(":")[0]].append(r)
    return groups


def evaluate_fold(model: LatencyModel, test_rows: list, test_model, train_models: list,
                  train_kernel_us: dict) -> dict:
    """One fold: ``model`` trained without the held-out source; its kernel errors,
    whole-model error and sample rankings on ``test_rows`` / ``test_model``."""
    in_model = [r for r in test_rows if r.kind == "model"]
    out: dict = {"model": test_model.source if test_model else None}
    if in_model:
        features = [r.features for r in in_model]
        pred = model.predict(features, model_context(features, [r.calls for r in in_model]))
        errs = relative_errors(pred, [r.latency_us for r in in_model])
        out["kernels"] = [{"kernel": r.name, "calls": r.calls, "measured_us": r.latency_us,
                           "predicted_us": float(p), "err_pct": float(e)}
                          for r, p, e in zip(in_model, pred, errs)]
    corr = []
    for key, group in sample_groups(test_rows).items():
        if len({round(r.latency_us, 3) for r in group}) < MIN_RANKED:
            continue
        features = [r.features for r in group]
        measured = [r.latency_us for r in group]
        rho = spearman(model.rank(features), measured)
        if rho is not None:
            corr.append({"kernel": group[0].name, "key": key, "samples": len(group),
                         "rank_corr": rho,
                         "rank_corr_absolute": spearman(model.predict(features), measured)})
    out["rank_corr"] = corr
    if test_model is not None and in_model:
        model.calibrate(train_models, train_kernel_us)
        by_key = {r.kernel: r for r in in_model}
        items = [(by_key[k].name, n, by_key[k].features) for k, n in test_model.kernels.items()
                 if k in by_key]
        missing = sum(n for k, n in test_model.kernels.items() if k not in by_key)
        pred = model.predict_model(items, test_model.vm_calls)
        measured_sum = sum(by_key[k].latency_us * n for k, n in test_model.kernels.items()
                           if k in by_key) / 1000.0
        out.update(measured_ms=test_model.latency_ms, predicted_ms=pred.total_ms,
                   model_err_pct=float(relative_errors([pred.total_ms],
                                                       [test_model.latency_ms])[0]),
                   kernel_sum_ms=measured_sum, scale=model.scale, call_slope=model.call_slope,
                   factor=model.factor(test_model.vm_calls),
                   kernels_unknown=missing)
    return out


def leave_one_model_out(dataset: Dataset, sources: list[str] | None = None,
                        params: dict | None = None, rounds: int | None = None,
                        progress: bool = False, family=None, jobs: int = 1,
                        exclude_sources=()) -> dict:
    """``{"folds": [...], "summary": {...}}`` of leave-one-model-out over the models
    measured whole in ``dataset`` (or ``sources``). ``family(source) -> str``: models
    of one family (variants of one architecture) are held out together, so that a
    model is never predicted from its own variants' kernels. ``jobs``: folds trained
    side by side in that many worker processes (each trains with one thread; the rows
    are sent to each worker once). ``exclude_sources``: stored sources left out of every
    fold's training (and of the models held out), as if never collected. Summary keys:
    ``kernel_median_err_pct`` (over every held-out kernel), ``model_median_err_pct``,
    ``model_max_err_pct``, ``rank_corr`` (median over ranked kernels), ``folds``,
    ``rows``."""
    exclude_sources = set(exclude_sources)
    models = {m.source: m for m in dataset.models() if m.source not in exclude_sources}
    sources = [s for s in (sources or list(models)) if s in models]
    every = dataset.rows(exclude_sources=exclude_sources)
    family = family or (lambda source: source)
    family_of = {s: family(s) for s in {r.source for r in every} | set(models)}
    state = (every, models, family_of, dataset.target, params, rounds)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(sources), desc="leave one model out", unit="model")
    by_source: dict = {}
    if jobs <= 1 or len(sources) <= 1:
        for held in sources:
            by_source[held] = _fold(held, state)
            _done(bar, held, by_source[held])
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from dataclasses import replace

        slim = ([replace(r, func=None) for r in every],) + state[1:]
        with ProcessPoolExecutor(min(jobs, len(sources)),
                                 mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_worker, initargs=(slim,)) as pool:
            futures = {pool.submit(_worker_fold, held): held for held in sources}
            for future in as_completed(futures):
                held = futures[future]
                by_source[held] = future.result()
                _done(bar, held, by_source[held])
    if bar is not None:
        bar.close()
    folds = [by_source[s] for s in sources]
    return {"folds": folds, "summary": summarize(folds, len(every))}


def _fold(held: str, state: tuple) -> dict:
    """One leave-one-model-out fold: ``held`` (and its family) out of the training."""
    every, models, family_of, target, params, rounds = state
    out = family_of[held]
    train = [r for r in every if family_of[r.source] != out]
    test = [r for r in every if r.source == held]
    model = LatencyModel(target, params)
    model.train(train, **({"rounds": rounds} if rounds else {}))
    train_models = [m for s, m in models.items() if family_of[s] != out]
    kernel_us = {r.kernel: r.latency_us for r in train if r.kind == "model"}
    return evaluate_fold(model, test, models[held], train_models, kernel_us)


def _done(bar, held: str, fold: dict) -> None:
    log.info("held out %s: model error %s%%", held, fold.get("model_err_pct"))
    if bar is not None:
        bar.set_postfix_str(held)
        bar.update()


_WORKER_STATE: tuple | None = None


def _init_worker(state: tuple) -> None:
    global _WORKER_STATE
    _WORKER_STATE = state


def _worker_fold(held: str) -> dict:
    return _fold(held, _WORKER_STATE)


def summarize(folds: list, rows: int) -> dict:
    """The summary of :func:`leave_one_model_out`'s folds."""
    kernel_errs = [k["err_pct"] for f in folds for k in f.get("kernels", [])]
    model_errs = [f["model_err_pct"] for f in folds if "model_err_pct" in f]
    corrs = [c["rank_corr"] for f in folds for c in f.get("rank_corr", [])]
    absolute = [c["rank_corr_absolute"] for f in folds for c in f.get("rank_corr", [])
                if c.get("rank_corr_absolute") is not None]
    return {
        "kernel_median_err_pct": float(np.median(kernel_errs)) if kernel_errs else None,
        "kernel_p90_err_pct": float(np.percentile(kernel_errs, 90)) if kernel_errs else None,
        "model_median_err_pct": float(np.median(model_errs)) if model_errs else None,
        "model_max_err_pct": float(np.max(model_errs)) if model_errs else None,
        "rank_corr": float(np.median(corrs)) if corrs else None,
        "rank_corr_kernels": len(corrs),
        "rank_corr_absolute": float(np.median(absolute)) if absolute else None,
        "folds": len(folds),
        "kernels": len(kernel_errs),
        "rows": rows,
    }

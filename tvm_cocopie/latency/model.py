"""The latency model: XGBoost over kernel features, one per target, saved and checked.

:class:`LatencyModel` regresses the logarithm of a kernel's microseconds per call over a
crude roofline estimate (:func:`roofline_us`) on its features (:mod:`.features`):
errors are relative, as latencies span five orders of magnitude, and the trees learn an
efficiency, which a kernel larger than any in the training data still has (trees do
not extrapolate a time).
:meth:`LatencyModel.train` holds out a share of the rows and reports the validation
error; :meth:`LatencyModel.update` adds trees for new rows (incremental, the earlier
trees kept).

Beside it, a ranking head (:meth:`LatencyModel.rank`): trees fitted to each
design-space sample's logarithm of time *relative to the other schedules of its
kernel* (the group's mean subtracted), so that every split is spent on what tells one
schedule of a kernel from another, not on the kernel's size; transfer-tuning's
pre-screen and the evaluation's rank correlation order candidates by it.

Beside a kernel's own features the trees read the context of the model it runs in
(:data:`CONTEXT_NAMES`, :func:`model_context`: the bytes one inference reads), missing
for kernels timed alone: the same kernel runs slower inside a model whose weights do
not stay cached between inferences.

A whole model's latency is the sum of its kernels' predicted times, each times the
calls one inference makes, times a factor that grows with the VM calls of one
inference: ``ms = scale * (vm_calls / 100) ** call_slope * sum(calls * us) / 1000``.
The factor carries what lies between the kernels (the VM's instructions and argument
checks) and the bias of summing each kernel's own low quantile (a sum of
per-kernel 10th percentiles is below the 10th percentile of their sum, the more so
the more kernels): :meth:`LatencyModel.calibrate` fits ``log(measured / summed)``
linearly in ``log(vm_calls)`` on measured models. Over the 28 models of
``bench_latency_model`` measured on 2026-12-02 the ratio of a model's time to its
kernels' measured sum spans 0.92-1.27: with perfect kernel predictions the whole-model
error would still be 4.0% median, 17.5% worst (leave-one-model-out of the
calibration), where one least-squares scale fit on every model (tiny random networks,
whose readings carry the instrument's cost, pulled it to 0.93) gave 14% median.

The model file (:meth:`save`, default next to the dataset: ``latency-<target
digest>.json``) holds a header (format, target, feature schema, xgboost version, rows,
validation error, calibration) and the trees. :meth:`load` refuses a file of another
format, of another target, or trained on other features, with a
:class:`LatencyModelError` naming what differs and what to do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CocopieError
from ..paths import cache_dir, write_json_atomic
from .dataset import ModelRow, Row, target_key
from .features import FEATURE_NAMES, feature_schema

log = logging.getLogger(__name__)

FORMAT = "tvm_cocopie.latency_model"
FORMAT_VERSION = 4  # 2: the ranking head; 3: the calibration by VM calls; 4: the model
# context column

#: What the trees read beside a kernel's own features (:data:`FEATURE_NAMES`): the
#: context of the whole model a kernel runs in, the same for each of its kernels.
#: ``model_read_bytes_log2``: the bytes that one inference's kernel calls read through
#: their parameters (weights and activations, each call counted), log2. A kernel's time
#: inside a model depends on what stays in cache between its calls: the same 19 kernels
#: (same structural hashes) ran 4-136% slower inside ResNet-34 than inside ResNet-18
#: (Winograd 3x3 at 256 channels 563 -> 870 us, the classifier's matmul 75 -> 176 us;
#: reproduced in one process, three alternating rounds: ResNet-18 8.6-8.7 ms, ResNet-34
#: 21.7-22.1 ms, 2.5x at 2x the arithmetic), where the larger model's weights no longer
#: stay cached from one inference to the next. A kernel timed alone (a design-space
#: sample, a fusion candidate) has no such context: the column is missing (NaN), which
#: the trees route on their own.
CONTEXT_NAMES = ("model_read_bytes_log2",)
INPUT_NAMES = (*FEATURE_NAMES, *CONTEXT_NAMES)

#: XGBoost parameters: deep trees, strong shrinkage, row and column subsampling (a few
#: thousand rows of 520 features; leave-one-family-out over 28 models against depth 7,
#: eta 0.05, 60% of the columns: schedule rank correlation 0.69 -> 0.73, kernel and model
#: errors unchanged, 19.1-19.2% and 9.2-9.3%; depth 5: 0.62, 20.0%, 7.7%); one thread:
#: trees of this size train in seconds, and two threads beside another busy process ran
#: 30-100x slower.
PARAMS = {
    "objective": "reg:squarederror",
    "eta": 0.03,
    "max_depth": 9,
    "min_child_weight": 2,
    "subsample": 0.85,
    "colsample_bytree": 0.4,
    "lambda": 1.0,
    "seed": 0,
    "nthread": 1,
}
ROUNDS = 600
#: Row weights by kind: design-space samples (timed hot, many per kernel) teach the
#: ranking of schedules; kernels of compiled models carry what a model's time is made of
#: and count double (leave-one-model-out, 19 models: kernel error 15.9 -> 13.3%, model
#: 10.0 -> 9.1%, rank correlation 0.62 -> 0.64; without samples 14.7%, 6.6%, but 0.13)
KIND_WEIGHTS = {"model": 2.0, "sample": 1.0, "fusion": 1.0, "tuning": 1.0}
UPDATE_ROUNDS = 100
#: Trees of the ranking head, and the samples a kernel needs to count as a group
RANK_ROUNDS = 400
MIN_GROUP = 3


class LatencyModelError(CocopieError):
    """A latency model that cannot be used: missing, corrupt, of another target or
    trained on other features, or asked before it was trained."""


def default_model_path(target) -> Path:
    """``latency-<digest of the target>.json`` in the package cache folder."""
    digest = hashlib.sha256(target_key(target).encode()).hexdigest()[:12]
    return cache_dir(f"latency-{digest}.json")


@dataclass
class ModelPrediction:
    """A whole model's predicted latency: total, per kernel, and the VM calls' share."""

    total_ms: float
    kernels: list = field(default_factory=list)  # (name, calls, us per call)
    vm_calls: int = 0
    overhead_ms: float = 0.0


_INDEX = {name: i for i, name in enumerate(FEATURE_NAMES)}
#: The roofline's machine: FMA lanes per core at 2 GHz, 10 GB/s, 1 us per call
GHZ, BYTES_PER_US, CALL_US = 2.0, 10e3, 1.0


def roofline_us(x: np.ndarray) -> np.ndarray:
    """A crude roofline per feature row: the larger of the arithmetic (the operations
    that execute, ``exec_flops``) at the vector FMA peak of the target's cores and the
    parameter bytes at a memory bandwidth, plus a call. The trees learn the logarithm of the measured time over this estimate (an
    efficiency that stays within a few octaves whatever the size), not the time itself:
    trees cannot extrapolate, and a kernel twice as large as any seen still gets twice
    the estimate."""
    x = np.atleast_2d(x)
    flops = np.exp2(x[:, _INDEX["exec_flops_log2"]]) - 1.0
    io = np.exp2(x[:, _INDEX["io_bytes_log2"]]) - 1.0
    peak = np.maximum(1.0, x[:, _INDEX["cores"]] * x[:, _INDEX["f32_lanes"]] * 2.0 * GHZ * 1e3)
    return np.maximum(flops / peak, io / BYTES_PER_US) + CALL_US


def rank_groups(rows) -> dict[str, list[int]]:
    """Indices of ``rows`` that are design-space samples of one kernel (kind
    ``sample``, key ``kernel:index``), by kernel, for groups of at least
    :data:`MIN_GROUP`."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.kind == "sample":
            groups.setdefault(r.kernel.split(":")[0], []).append(i)
    return {k: v for k, v in groups.items() if len(v) >= MIN_GROUP}


def _relative_targets(rows, groups: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(row indices, log time minus its group's mean log time)`` of ``groups``."""
    idx, y = [], []
    for members in groups.values():
        logs = np.log([rows[i].latency_us for i in members])
        idx.extend(members)
        y.extend(logs - logs.mean())
    return np.array(idx, int), np.array(y)


def _matrix(rows) -> np.ndarray:
    return np.stack([np.asarray(r.features if isinstance(r, Row) else r, np.float32)
                     for r in rows])


def _read_bytes(x: np.ndarray) -> np.ndarray:
    return np.exp2(x[:, _INDEX["input_bytes_log2"]].astype(float)) - 1.0


def model_context(features, calls) -> float:
    """The :data:`CONTEXT_NAMES` value of one inference whose kernels have ``features``
    (rows) and are called ``calls`` times each."""
    read = _read_bytes(_matrix(features))
    return float(np.log2(1.0 + float(np.dot(read, np.asarray(calls, float)))))


def row_context(rows) -> np.ndarray:
    """The context column of dataset ``rows``: for a kernel measured inside a model
    (kind ``model``) its model's (:func:`model_context` over the rows of that source and
    kind), NaN for every other row."""
    by_source: dict = {}
    for r in rows:
        if r.kind == "model":
            by_source.setdefault(r.source, []).append(r)
    context = {source: model_context([r.features for r in group], [r.calls for r in group])
               for source, group in by_source.items()}
    return np.array([context[r.source] if r.kind == "model" else math.nan for r in rows])


def _inputs(features, context=None) -> np.ndarray:
    """The trees' input: ``features`` (rows) and the context column (a value for every
    row, one for all, or ``None``: missing)."""
    x = np.atleast_2d(np.asarray(features, np.float32))
    col = np.full(len(x), math.nan) if context is None else np.broadcast_to(
        np.asarray(context, float), (len(x),))
    return np.column_stack([x, col.astype(np.float32)])


def relative_errors(predicted, measured) -> np.ndarray:
    """``|predicted - measured| / measured`` per item, in percent."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    return 100.0 * np.abs(predicted - measured) / measured


class LatencyModel:
    """An XGBoost latency model for ``target`` (a Target or its JSON dict)."""

    def __init__(self, target, params: dict | None = None):
        self.target = target_key(target)
        self.schema = feature_schema()
        self.params = {**PARAMS, **(params or {})}
        self.booster = None
        self.rank_booster = None  # the ranking head (None: rank by predict)
        self.rows = 0
        self.validation: dict = {}
        self.scale = 1.0  # the whole-model factor at 100 VM calls
        self.call_slope = 0.0  # its exponent of vm_calls / 100

    # -- training -----------------------------------------------------------------
    def _xgb(self):
        import xgboost as xgb  # imported late: only training and prediction need it

        return xgb

    def train(self, rows: list[Row], rounds: int = ROUNDS, validation: float = 0.15,
              seed: int = 0, kind_weights: dict | None = None) -> dict:
        """Train on ``rows`` (a fresh model), holding out ``validation`` of them (a
        seeded random share) to report the error; then retrain on all rows with the
        rounds that were best on the held-out share. ``kind_weights``: the weight of a
        row by its kind (default :data:`KIND_WEIGHTS`). Returns the validation summary
        (``median_err_pct``, ``p90_err_pct``, ``rows``, ``rounds``)."""
        if len(rows) < 4:
            raise LatencyModelError(f"{len(rows)} measured kernels are too few to train a "
                                    "latency model: collect more (scripts/bench_latency_model.py)")
        xgb = self._xgb()
        x = _inputs(_matrix(rows), row_context(rows))
        y = np.log(np.array([r.latency_us for r in rows])) - np.log(roofline_us(x))
        kinds = {**KIND_WEIGHTS, **(kind_weights or {})}
        w = np.array([kinds.get(r.kind, 1.0) for r in rows])
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(rows))
        n_val = max(1, round(validation * len(rows))) if validation > 0 else 0
        best_rounds = rounds
        if n_val and len(rows) - n_val >= 4:
            val, fit = order[:n_val], order[n_val:]
            dfit = self._dmatrix(x[fit], label=y[fit], weight=w[fit])
            dval = self._dmatrix(x[val], label=y[val], weight=w[val])
            booster = xgb.train(self.params, dfit, rounds, evals=[(dval, "val")],
                                early_stopping_rounds=50, verbose_eval=False)
            best_rounds = int(booster.best_iteration) + 1
            pred = booster.predict(dval, iteration_range=(0, best_rounds))
            errors = relative_errors(np.exp(pred - y[val]), np.ones(len(val)))
            self.validation = {"median_err_pct": float(np.median(errors)),
                               "p90_err_pct": float(np.percentile(errors, 90)),
                               "rows": int(n_val)}
        dall = self._dmatrix(x, label=y, weight=w)
        self.booster = xgb.train(self.params, dall, best_rounds)
        self.rows = len(rows)
        self.validation["rounds"] = best_rounds
        self.rank_booster = self._train_rank(rows, x)
        log.info("latency model trained on %d kernels, %d rounds; validation %s",
                 len(rows), best_rounds, self.validation)
        return dict(self.validation)

    def _train_rank(self, rows, x: np.ndarray, base=None, rounds: int = RANK_ROUNDS):
        """The ranking head on the sample groups of ``rows`` (``None`` without any);
        ``base``: a head to add trees to."""
        groups = rank_groups(rows)
        if not groups:
            return base
        xgb = self._xgb()
        idx, y = _relative_targets(rows, groups)
        return xgb.train(self.params, self._dmatrix(x[idx], label=y), rounds, xgb_model=base)

    def update(self, rows: list[Row], rounds: int = UPDATE_ROUNDS) -> dict:
        """Add ``rounds`` trees fitted to ``rows`` (new measurements) to the trained
        model, keeping its trees; returns the error on ``rows`` before and after."""
        self._require()
        xgb = self._xgb()
        x = _inputs(_matrix(rows), row_context(rows))
        y = np.array([r.latency_us for r in rows])
        before = float(np.median(relative_errors(self._predict(x), y)))
        dnew = self._dmatrix(x, label=np.log(y) - np.log(roofline_us(x)))
        self.booster = xgb.train({**self.params, "eta": self.params["eta"] / 2}, dnew,
                                 rounds, xgb_model=self.booster)
        self.rank_booster = self._train_rank(rows, x, self.rank_booster, UPDATE_ROUNDS)
        self.rows += len(rows)
        after = float(np.median(relative_errors(self._predict(x), y)))
        log.info("latency model updated with %d kernels: median error %.1f%% -> %.1f%%",
                 len(rows), before, after)
        return {"before_median_err_pct": before, "after_median_err_pct": after}

    def calibrate(self, models: list[ModelRow], kernel_us: dict) -> None:
        """Fit ``scale`` and ``call_slope`` of the whole-model factor on measured
        ``models``, with ``kernel_us`` (``{kernel key: microseconds per call}``:
        measured or predicted times of their kernels): ``log(measured / summed)``
        linear in ``log(vm_calls / 100)``, each model weighted by its milliseconds up to
        1 (below 1 ms the instrument's own cost per call is a large share of each kernel
        reading). With fewer than three models, or calls all alike, only the scale."""
        ratios, calls, weights = [], [], []
        for m in models:
            if not m.kernels or any(k not in kernel_us for k in m.kernels):
                continue
            summed = sum(kernel_us[k] * n for k, n in m.kernels.items()) / 1000.0
            if summed <= 0 or m.latency_ms <= 0:
                continue
            ratios.append(math.log(m.latency_ms / summed))
            calls.append(math.log(max(m.vm_calls, 1) / 100.0))
            weights.append(min(1.0, m.latency_ms))
        if not ratios:
            return
        r, c, w = np.array(ratios), np.array(calls), np.array(weights)
        if len(r) >= 3 and np.ptp(c) > 0:
            slope, offset = np.polyfit(c, r, 1, w=np.sqrt(w))
            self.scale, self.call_slope = float(math.exp(offset)), float(slope)
        else:
            self.scale, self.call_slope = float(math.exp(np.sum(w * r) / np.sum(w))), 0.0

    def factor(self, vm_calls: int) -> float:
        """The whole-model factor for an inference of ``vm_calls`` VM calls."""
        return self.scale * (max(int(vm_calls), 1) / 100.0) ** self.call_slope

    # -- prediction ---------------------------------------------------------------
    def _require(self) -> None:
        if self.booster is None:
            raise LatencyModelError("the latency model is not trained: train it or load a "
                                    "saved one (scripts/bench_latency_model.py trains and "
                                    "saves one for this machine)")

    def _features(self, features, context=None) -> np.ndarray:
        """The trees' input rows for ``features`` (their width checked) and ``context``."""
        self._require()
        x = np.atleast_2d(np.asarray(features, np.float32))
        if x.shape[1] != len(FEATURE_NAMES):
            raise LatencyModelError(f"{x.shape[1]} features given, the model reads "
                                    f"{len(FEATURE_NAMES)}")
        return _inputs(x, context)

    def _dmatrix(self, x: np.ndarray, **labels):
        """The trees' input rows ``x`` as an XGBoost matrix (``labels``: label, weight)."""
        return self._xgb().DMatrix(x, feature_names=list(INPUT_NAMES), **labels)

    def _predict(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.booster.predict(self._dmatrix(x))) * roofline_us(x)

    def predict(self, features, context=None) -> np.ndarray:
        """Microseconds per call for each feature vector (rows of ``features``).
        ``context``: the :func:`model_context` of the model the kernels run in (one
        value, or one per row); ``None`` for kernels timed alone."""
        return self._predict(self._features(features, context))

    def rank(self, features) -> np.ndarray:
        """Scores of schedules of one kernel (rows of ``features``), timed alone: lower
        is faster. Only their order means anything: the ranking head's relative log
        time, or the log of :meth:`predict` for a model trained without sample groups."""
        if self.rank_booster is None:
            return np.log(self.predict(features))
        return self.rank_booster.predict(self._dmatrix(self._features(features)))

    def predict_model(self, kernels: list, vm_calls: int) -> ModelPrediction:
        """A whole model from its kernels (``(name, calls, features)`` each) and the VM
        calls of one inference; ``overhead_ms``: what the factor adds to the kernels'
        sum (negative where it takes away)."""
        if not kernels:
            return ModelPrediction(0.0, [], int(vm_calls), 0.0)
        features = [f for _, _, f in kernels]
        us = self.predict(features, model_context(features, [c for _, c, _ in kernels]))
        per = [(name, int(calls), float(u)) for (name, calls, _), u in zip(kernels, us)]
        summed = sum(c * u for _, c, u in per) / 1000.0
        total = self.factor(vm_calls) * summed
        return ModelPrediction(float(total), per, int(vm_calls), float(total - summed))

    # -- files --------------------------------------------------------------------
    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the model (header and trees) atomically to ``path`` (default
        :func:`default_model_path`); returns the path."""
        self._require()
        import xgboost as xgb

        path = Path(path) if path is not None else default_model_path(self.target)
        raw = bytes(self.booster.save_raw(raw_format="ubj"))
        rank = (b"" if self.rank_booster is None
                else bytes(self.rank_booster.save_raw(raw_format="ubj")))
        write_json_atomic(path, {
            "format": FORMAT, "format_version": FORMAT_VERSION, "target": self.target,
            "features_schema": self.schema, "features": len(FEATURE_NAMES),
            "context": list(CONTEXT_NAMES),
            "xgboost": xgb.__version__, "rows": self.rows, "validation": self.validation,
            "calibration": {"scale": self.scale, "call_slope": self.call_slope},
            "params": self.params,
            "sha256": hashlib.sha256(raw).hexdigest(),
            "booster": base64.b64encode(raw).decode(),
            "rank_sha256": hashlib.sha256(rank).hexdigest(),
            "rank_booster": base64.b64encode(rank).decode()})
        return path

    @classmethod
    def load(cls, target, path: str | os.PathLike | None = None) -> LatencyModel:
        """The model saved at ``path`` (default :func:`default_model_path`) for
        ``target``; refused with :class:`LatencyModelError` if it is missing, corrupt,
        of another format, target or feature schema."""
        import xgboost as xgb

        key = target_key(target)
        path = Path(path) if path is not None else default_model_path(key)
        retrain = "train one for this target: python scripts/bench_latency_model.py"
        if not path.exists():
            raise LatencyModelError(f"no latency model at {path}: {retrain}")
        try:
            head = json.loads(path.read_text())
            raw = base64.b64decode(head["booster"], validate=True)
            rank = base64.b64decode(head.get("rank_booster", ""), validate=True)
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise LatencyModelError(f"latency model file {path} is unreadable or corrupt "
                                    f"({type(err).__name__}: {err}); delete it and "
                                    f"{retrain}") from err
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise LatencyModelError(f"{path} is not a tvm_cocopie latency model file "
                                    f"(format {head.get('format') if isinstance(head, dict) else None!r})")
        if head.get("format_version") != FORMAT_VERSION:
            raise LatencyModelError(f"latency model {path} has format version "
                                    f"{head.get('format_version')}, this tvm_cocopie reads "
                                    f"{FORMAT_VERSION}: {retrain}")
        if (head.get("sha256") != hashlib.sha256(raw).hexdigest()
                or head.get("rank_sha256") != hashlib.sha256(rank).hexdigest()):
            raise LatencyModelError(f"latency model {path} is corrupt (its trees do not "
                                    f"match their checksum): delete it and {retrain}")
        if head.get("target") != key:
            raise LatencyModelError(f"latency model {path} was trained for another target "
                                    f"({head.get('target')}), not {key}: {retrain}")
        if head.get("features_schema") != feature_schema():
            raise LatencyModelError(f"latency model {path} is stale: trained on features "
                                    f"{head.get('features_schema')}, this tvm_cocopie "
                                    f"computes {feature_schema()}: {retrain}")
        model = cls(key, head.get("params"))

        def trees(data: bytes, what: str):
            booster = xgb.Booster()
            try:
                booster.load_model(bytearray(data))
            except xgb.core.XGBoostError as err:
                raise LatencyModelError(f"latency model {path}: xgboost cannot read its "
                                        f"{what} ({str(err).splitlines()[0]}): "
                                        f"{retrain}") from err
            return booster

        model.booster = trees(raw, "trees")
        model.rank_booster = trees(rank, "ranking head") if rank else None
        model.rows = int(head.get("rows", 0))
        model.validation = dict(head.get("validation") or {})
        cal = head.get("calibration") or {}
        model.scale = float(cal.get("scale", 1.0))
        model.call_slope = float(cal.get("call_slope", 0.0))
        if not (math.isfinite(model.scale) and model.scale > 0
                and math.isfinite(model.call_slope)):
            raise LatencyModelError(f"latency model {path} has an invalid calibration "
                                    f"(scale {model.scale}): {retrain}")
        return model

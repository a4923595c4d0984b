"""Dynamic models compiled once, against static builds and ONNX Runtime (issue 17, SOD²).

``scripts/bench_dynamic.py``'s machinery. Each :class:`DynamicCase` is a model with
symbolic input dims (a recognizer's width, a detector's height and width, an encoder's
sequence length, a batch) and a few sizes, each a binding of those dims. Per model:

* the **dynamic** build: ``compile_model(model, target, shapes=..., specialize=False)``,
  once, its symbolic dims kept (no call compiles again for its concrete shape), its
  memory planned once for the case's largest sizes (:func:`dim_bounds`);
* one ONNX Runtime session on the dynamic model (:func:`~.timing.ort_session`, the
  thread count of the run, made as :mod:`.e2e` makes it: ORT as it ships);

then per size:

* the **static** build: the same model compiled by cocopie with that size's shapes fixed;
* every output of the dynamic build checked against ORT (``max_abs_err``,
  ``max_rel_err``: over the largest reference magnitude; ``matches_ort``: within
  :data:`MATCH_REL_TOL`) and against the static build (``static_max_abs_err``);
* the three timed side by side in blocks of 4 calls, the first of each untimed
  (:func:`~.timing.interleaved_times`), medians: ``dynamic_ms``, ``static_ms``,
  ``ort_ms``, ``dynamic_over_static``, ``dynamic_over_ort``; and the dynamic build's
  VM calls (:func:`~.runtime_stats.compiled_model_stats`: allocations per run, split in
  output and intermediate ones, kernel calls).

Memory, per model at its largest size: the peak memory of three runs of the dynamic
build and of ONNX Runtime over what loading each took, each runtime in a subprocess of
its own (:func:`~.memory.peak_run_memory`: after loading, the heap's free pages handed
back and ``VmHWM`` reset; the peak over that baseline less the code pages the runs
faulted in), ``memory_over_ort`` their ratio.

A model that cannot be fetched or compiled is recorded as ``{"model", "error"}`` and the
run goes on; so is a size whose static build fails (``static_error``, timed without it)
or whose run fails (``error``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..api import CompiledModel, compile_model
from ..errors import CocopieError, InputShapeError, ModelError, last_line
from . import timing as bm
from .memory import peak_run_memory
from .runtime_stats import compiled_model_stats

log = logging.getLogger(__name__)

#: An output matches ONNX Runtime's when its max abs error is within this fraction of
#: the reference's largest magnitude (the tests' ``REL_TOL``: float32 rounding over tens
#: of layers stays below 1e-4; a wrong index or step is off by ~1).
MATCH_REL_TOL = 1e-3
#: The issue's goals (geomeans): reported beside the figures, not tuned for.
GOALS = {"dynamic_over_static": 1.15, "dynamic_over_ort": 1.0}

#: A size: the value of each symbolic dim, e.g. ``{"W": 320}``.
Size = Mapping[str, int]


@dataclass(frozen=True)
class DynamicCase:
    """One model of the benchmark: how to get it, its dynamic build's ``shapes``, sizes.

    ``load()`` gives the ONNX model (a ``ModelProto`` or a path). ``shapes`` is the
    dynamic build's ``shapes=`` (a string dim stays symbolic under that name; ``None``:
    the model's own symbolic dims). ``sizes``/``quick_sizes`` bind those names.
    ``inputs(model, shapes, seed)`` makes the feeds for concrete ``{input: shape}``.
    """

    name: str
    load: Callable[[], object]
    sizes: tuple[dict, ...]
    quick_sizes: tuple[dict, ...]
    inputs: Callable[[object, dict, int], dict]
    shapes: dict | None = None
    note: str = ""


def size_label(size: Size) -> str:
    """``"W=320"``, ``"H=256,W=416"``: a size as one short string (the records' key)."""
    return ",".join(f"{k}={v}" for k, v in size.items())


def concrete_shapes(model: CompiledModel, size: Size) -> dict[str, list[int]]:
    """The input shapes of the dynamic build ``model`` at ``size``. Raises
    :class:`~tvm_cocopie.errors.InputShapeError` when ``size`` leaves a symbolic dim
    unbound or names one the model does not have."""
    dims = {d for spec in model.inputs for d in spec.shape if isinstance(d, str)}
    unbound, unknown = sorted(dims - set(size)), sorted(set(size) - dims)
    if unbound or unknown:
        raise InputShapeError(
            f"size {size_label(size)} does not fit the model's symbolic dims "
            f"{sorted(dims)}: " + "; ".join(
                part for part in (unbound and f"{unbound} unbound",
                                  unknown and f"{unknown} not symbolic") if part)
            + ". Give each symbolic dim a value.")
    return {spec.name: [int(size[d]) if isinstance(d, str) else int(d) for d in spec.shape]
            for spec in model.inputs}


def largest(sizes: Sequence[Size]) -> Size:
    """The size with the most input elements (the product of its dims' values)."""
    return max(sizes, key=lambda s: math.prod(s.values()))


# ------------------------------------------------------------------------- models
def zoo_inputs(model, shapes: dict, seed: int) -> dict:
    """Feeds of a zoo model: :func:`~tvm_cocopie.models.sample_inputs` at ``shapes``."""
    from ..models import sample_inputs

    return sample_inputs(model, seed, shapes=shapes)


def page_inputs(_model, shapes: dict, seed: int) -> dict:
    """Feeds of a PP-OCR model: synthetic document pages
    (:func:`~tvm_cocopie.models.real.page_inputs`) at ``shapes``."""
    from ..models.real import page_inputs as page

    return {name: page(shape, seed) for name, shape in shapes.items()}


def _rapidocr(part: str) -> Callable[[], object]:
    def load():
        from ..models.real import fetch_rapidocr

        return fetch_rapidocr()[part]
    return load


def _zoo(name: str, **kwargs) -> Callable[[], object]:
    def load():
        from .. import models

        return models.build(name, **kwargs)
    return load


#: the encoder's symbolic sequence length and its largest position
SEQUENCE, MAX_POSITIONS = "S", 512


def encoder_symbolic_sequence(num_layers: int = 4, hidden: int = 256, heads: int = 4,
                              ffn: int = 1024, vocab: int = 1000,
                              max_positions: int = MAX_POSITIONS,
                              seed: int = 0) -> onnx.ModelProto:
    """The zoo's BERT-style encoder (:func:`~tvm_cocopie.models.bert.bert_encoder`'s
    layers and sizes) with a symbolic sequence length ``S``, written as exporters write
    it: ``input_ids [1, S]``; position ids sliced from a ``[1, max_positions]`` buffer
    to ``Shape(input_ids)[1]`` and embedded with a Gather; heads split and merged by
    reshapes to ``[0, -1, heads, head_dim]`` / ``[0, -1, hidden]``. Output ``output
    [1, S, hidden]``. For as long as the zoo's builder has only a static ``seq``."""
    from onnx import TensorProto

    from ..models.graph_builder import GraphBuilder

    if hidden % heads:
        raise ModelError(f"hidden={hidden} must be a multiple of heads={heads}")
    head_dim = hidden // heads
    gb = GraphBuilder("bert_encoder_dynamic", seed)
    ids = gb.input("input_ids", [1, SEQUENCE], TensorProto.INT64, high=vocab)
    calib = gb.values[ids].shape[1]  # the calibration sample's length
    shape = gb.node("Shape", [ids], np.array(gb.values[ids].shape, np.int64), kind="shape")
    length = gb.node("Slice", [shape, gb.const(np.array([1]), "one"),
                               gb.const(np.array([2]), "two")], np.array([calib]),
                     kind="length")
    positions = gb.node("Slice", [gb.const(np.arange(max_positions)[None], "position_ids"),
                                  gb.const(np.array([0]), "zero"), length,
                                  gb.const(np.array([1]), "one")],
                        np.arange(calib)[None], kind="positions")
    with gb.scope("embeddings"):
        x = gb.add(gb.embedding(ids, vocab, hidden, kind="word_embeddings"),
                   gb.embedding(positions, max_positions, hidden, kind="position_embeddings"))
        x = gb.layernorm(x, eps=1e-12, kind="LayerNorm")
    for i in range(num_layers):
        with gb.scope(f"encoder.layer.{i}"):
            with gb.scope("attention"):
                def split(t, perm):
                    return gb.transpose(gb.reshape(t, [0, -1, heads, head_dim]), perm)
                q = split(gb.linear(x, hidden, kind="query"), (0, 2, 1, 3))
                k = split(gb.linear(x, hidden, kind="key"), (0, 2, 3, 1))
                v = split(gb.linear(x, hidden, kind="value"), (0, 2, 1, 3))
                scores = gb.softmax(gb.div(gb.matmul(q, k), math.sqrt(head_dim)), axis=-1)
                context = gb.transpose(gb.matmul(scores, v), (0, 2, 1, 3))
                a = gb.linear(gb.reshape(context, [0, -1, hidden]), hidden,
                              kind="output.dense")
                x = gb.layernorm(gb.add(a, x), eps=1e-12, kind="output.LayerNorm")
            h = gb.linear(gb.gelu(gb.linear(x, ffn, kind="intermediate.dense")), hidden,
                          kind="output.dense")
            x = gb.layernorm(gb.add(h, x), eps=1e-12, kind="output.LayerNorm")
    gb.output(x)
    gb.outputs[0].type.tensor_type.shape.dim[1].dim_param = SEQUENCE
    return gb.model(f"bert_encoder, sequence {SEQUENCE} (<= {max_positions}): {num_layers} "
                    f"layers, hidden {hidden}, {heads} heads, FFN {ffn}, vocab {vocab}; "
                    f"random weights (seed {seed})")


def _encoder() -> object:
    """The zoo's encoder with a symbolic sequence when its builder takes one, else
    :func:`encoder_symbolic_sequence`."""
    from .. import models

    try:
        return models.build("bert_encoder", seq=SEQUENCE)
    except ModelError:
        log.info("the zoo's bert_encoder takes no symbolic seq: using "
                 "encoder_symbolic_sequence")
        return encoder_symbolic_sequence()


#: The issue's models, in run order.
CASES: dict[str, DynamicCase] = {case.name: case for case in (
    DynamicCase("bert_encoder", _encoder,
                tuple({"S": s} for s in (32, 64, 128, 256)), ({"S": 32}, {"S": 128}),
                zoo_inputs, note="sequence length S"),
    DynamicCase("crnn_large_vocab", _zoo("crnn_large_vocab", dynamic_width=True),
                tuple({"W": w} for w in (64, 128, 256, 320)), ({"W": 64}, {"W": 160}),
                zoo_inputs, note="line width W (32 px high), 6625 classes"),
    DynamicCase("ppocr_rec", _rapidocr("rec"),
                tuple({"W": w} for w in (100, 200, 320, 480)), ({"W": 100}, {"W": 320}),
                page_inputs, shapes={"x": [1, 3, 48, "W"]}, note="line width W (48 px high)"),
    DynamicCase("ppocr_det", _rapidocr("det"),
                ({"H": 320, "W": 320}, {"H": 256, "W": 416}, {"H": 480, "W": 640}),
                ({"H": 256, "W": 256}, {"H": 320, "W": 416}),
                page_inputs, shapes={"x": [1, 3, "H", "W"]}, note="page height H, width W"),
    DynamicCase("resnet50", _zoo("resnet50", dynamic_batch=True),
                tuple({"N": n} for n in (1, 2, 4)), ({"N": 1}, {"N": 2}),
                zoo_inputs, note="batch N, 224 px"),
)}
#: ``--quick``: two models at two sizes each (a few minutes here).
QUICK_MODELS = ("crnn_large_vocab", "ppocr_rec")


def dim_bounds(case: DynamicCase) -> dict[str, int]:
    """Upper bounds of the case's symbolic dims, its largest sizes: the dynamic build
    plans its memory once for them (``PipelineOptions.dim_bounds``), as a user states
    the largest input a deployment takes."""
    bounds: dict[str, int] = {}
    for size in (*case.sizes, *case.quick_sizes):
        for name, value in size.items():
            bounds[name] = max(bounds.get(name, 1), int(value))
    return bounds


# --------------------------------------------------------------------- one model
def bench_model(case: DynamicCase, target, threads: int, sizes: Sequence[Size],
                repeat: int = 10, max_seconds: float | None = 60.0, memory: bool = True,
                done: Sequence[str] = (),
                on_record: Callable[[dict], None] | None = None,
                divisible_dims: bool = False) -> tuple[dict, list[dict]]:
    """Compile ``case`` once with its symbolic dims, run it at each of ``sizes``;
    return ``(model record, size records)``. ``divisible_dims``: the dynamic build's
    ``PipelineOptions.divisible_dims``.

    ``done``: size labels already measured (a resumed run), skipped. ``on_record`` is
    called with each size record as it is made (to save progress). A model that cannot
    be loaded or compiled gives ``({"model", "error", "stage"}, [])``: never raises for
    the model's sake.
    """
    load_avg = list(os.getloadavg())
    try:
        model = case.load()
        t0 = time.perf_counter()
        dyn = compile_model(model, target, shapes=case.shapes, specialize=False,
                            options={"dim_bounds": dim_bounds(case),
                                     "divisible_dims": divisible_dims})
        compile_s = time.perf_counter() - t0
    except Exception as err:  # noqa: BLE001 - any failure of the model: record it, go on
        log.warning("%s: the dynamic build failed: %s", case.name, last_line(err))
        return {"model": case.name, "error": last_line(err) or type(err).__name__,
                "error_type": type(err).__name__}, []
    rec = {"model": case.name, "dims": case.note,
           "dynamic_shapes": {s.name: list(s.shape) for s in dyn.inputs},
           "dim_bounds": dim_bounds(case),
           "compile_s": round(compile_s, 2),  # ONNX import + tvm.compile, once
           "build_s": round(dyn.compile_seconds, 2),  # tvm.compile only
           "sizes": len(sizes), "size_labels": [size_label(s) for s in sizes],
           "load_avg": load_avg}
    # ORT as it ships (spinning intra-op threads), as bench.e2e: timed in blocks with a
    # pause before each, its spin cannot reach the others' timed calls
    session = bm.ort_session(model, threads, spinning=True)
    records = []
    for size in sizes:
        if size_label(size) in done:
            continue
        record = bench_size(case, model, dyn, session, size, target, repeat, max_seconds)
        records.append(record)
        if on_record:
            on_record(record)
    if memory:
        rec.update(model_memory(case, model, dyn, largest(sizes), threads))
    return rec, records


def bench_size(case: DynamicCase, model, dyn: CompiledModel, session, size: Size, target,
               repeat: int = 10, max_seconds: float | None = 60.0) -> dict:
    """One size of one model: the static build compiled, outputs checked, the dynamic
    build, the static one and ORT timed side by side (module docstring)."""
    label = size_label(size)
    rec: dict = {"model": case.name, "size": label, "load_avg": list(os.getloadavg())}
    try:
        shapes = concrete_shapes(dyn, size)
        feeds = case.inputs(model, shapes, 0)
        rec["input_shapes"] = shapes
        ref = session.run(None, feeds)
        outs = bm.output_list(dyn(**feeds))
    except Exception as err:  # noqa: BLE001 - a size that does not run: record it, go on
        log.warning("%s at %s: the dynamic build failed to run: %s", case.name, label,
                    last_line(err))
        return {**rec, "error": last_line(err) or type(err).__name__}
    rec.update(_errors(outs, ref))
    static = None
    try:
        t0 = time.perf_counter()
        static = compile_model(model, target, shapes=shapes)
        rec["static_compile_s"] = round(time.perf_counter() - t0, 2)
        rec["static_max_abs_err"] = _errors(outs, bm.output_list(static(**feeds)))[
            "max_abs_err"]
    except Exception as err:  # noqa: BLE001 - timed without the static build
        rec["static_error"] = last_line(err) or type(err).__name__
        log.warning("%s at %s: the static build failed: %s", case.name, label,
                    rec["static_error"])
        static = None
    contenders = {"dynamic": lambda: dyn(**feeds)}
    if static is not None:
        contenders["static"] = lambda: static(**feeds)
    contenders["ort"] = bm.ort_runner(session, feeds)
    # the counting VM is a VM of its own: its instrument never runs in a timed call
    stats = compiled_model_stats(dyn, feeds)
    times = bm.interleaved_times(contenders, repeat=repeat, warmup=1,
                                 max_seconds=max_seconds, block=4)

    def ms(name):
        return bm.median(times[name]) if name in times else None

    rec.update(dynamic_ms=ms("dynamic"), static_ms=ms("static"), ort_ms=ms("ort"),
               rounds=len(times["dynamic"]),
               **{f"dynamic_{k}": v for k, v in stats.items()})
    rec["dynamic_over_static"] = (rec["dynamic_ms"] / rec["static_ms"]
                                  if rec["static_ms"] else None)
    rec["dynamic_over_ort"] = rec["dynamic_ms"] / rec["ort_ms"]
    return rec


def _errors(outs: list, ref: list) -> dict:
    """Max abs/rel errors of ``outs`` against ``ref``; ``matches_ort`` False (errors
    ``None``) when the outputs' number or shapes differ."""
    got = [np.shape(o) for o in outs]
    want = [np.shape(r) for r in ref]
    if got != want:
        return {"max_abs_err": None, "max_rel_err": None, "matches_ort": False,
                "output_shapes": [list(s) for s in got],
                "reference_shapes": [list(s) for s in want]}
    rel = bm.max_rel_error(outs, ref)
    return {"max_abs_err": bm.max_abs_error(outs, ref), "max_rel_err": rel,
            "matches_ort": bool(rel <= MATCH_REL_TOL)}


def model_memory(case: DynamicCase, model, dyn: CompiledModel, size: Size,
                 threads: int) -> dict:
    """Peak memory of the dynamic build and of ORT at ``size``, each in a subprocess
    (:mod:`.memory`): ``memory_size``, ``dynamic_memory_mib``, ``ort_memory_mib``,
    ``memory_over_ort`` and the details of both (``memory``); a failure is recorded as
    ``memory_error``."""
    feeds = case.inputs(model, concrete_shapes(dyn, size), 0)
    result: dict = {"memory_size": size_label(size)}
    try:
        details = {"dynamic": peak_run_memory("cocopie", dyn, feeds, threads),
                   "ort": peak_run_memory("ort", model, feeds, threads)}
    except CocopieError as err:
        log.warning("%s: memory not measured: %s", case.name, err)
        return {**result, "memory_error": str(err)}
    dyn_mib, ort_mib = details["dynamic"]["peak_mib"], details["ort"]["peak_mib"]
    return {**result, "dynamic_memory_mib": round(dyn_mib, 2), "ort_memory_mib": round(ort_mib, 2),
            "memory_over_ort": dyn_mib / ort_mib if ort_mib > 0 else None,
            "memory": details}


# ----------------------------------------------------------------------- summary
def summarize(records: list[dict], models: list[dict]) -> dict:
    """The issue's summary keys over the size records and model records."""
    timed = [r for r in records if "error" not in r]
    checked = [r for r in timed if r.get("max_abs_err") is not None]
    return {
        "dynamic_over_static": bm.geomean_or_none(r.get("dynamic_over_static") for r in timed),
        "dynamic_over_ort": bm.geomean_or_none(r.get("dynamic_over_ort") for r in timed),
        "memory_over_ort": bm.geomean_or_none(m.get("memory_over_ort") for m in models),
        "max_abs_err": max((r["max_abs_err"] for r in checked), default=None),
        "max_rel_err": max((r["max_rel_err"] for r in checked), default=None),
        "max_static_abs_err": max((r["static_max_abs_err"] for r in timed
                                   if r.get("static_max_abs_err") is not None), default=None),
        "all_match_ort": bool(timed) and all(r.get("matches_ort") for r in timed),
        "mismatched": [f"{r['model']} {r['size']}" for r in timed if not r.get("matches_ort")],
        "worst_dynamic_over_static": _worst(timed, "dynamic_over_static"),
        "worst_dynamic_over_ort": _worst(timed, "dynamic_over_ort"),
        "models": len([m for m in models if "error" not in m]),
        "sizes": len(timed),
        "failed": {m["model"]: m["error"] for m in models if "error" in m},
        "failed_sizes": {f"{r['model']} {r['size']}": r["error"] for r in records
                         if "error" in r},
        "static_failed": {f"{r['model']} {r['size']}": r["static_error"] for r in timed
                          if "static_error" in r},
        "max_dynamic_intermediate_allocations_per_run": max(
            (r["dynamic_intermediate_allocations_per_run"] for r in timed
             if "dynamic_intermediate_allocations_per_run" in r), default=None),
        "max_compile_s": max((m["compile_s"] for m in models if "compile_s" in m), default=None),
        "goals": GOALS,
    }


def _worst(records: list[dict], key: str) -> dict | None:
    rated = [r for r in records if r.get(key) is not None]
    if not rated:
        return None
    worst = max(rated, key=lambda r: r[key])
    return {"model": worst["model"], "size": worst["size"], key: worst[key]}


SIZE_COLUMNS = [
    ("model", "model", "{}"), ("size", "size", "{}"),
    ("static_ms", "static ms", "{:.2f}"), ("dynamic_ms", "dynamic ms", "{:.2f}"),
    ("ort_ms", "ORT ms", "{:.2f}"), ("dynamic_over_static", "dyn/static", "{:.3f}"),
    ("dynamic_over_ort", "dyn/ORT", "{:.3f}"), ("max_abs_err", "max abs err", "{:.1e}"),
    ("max_rel_err", "max rel err", "{:.1e}"),
    ("dynamic_intermediate_allocations_per_run", "interm. allocs", "{}"),
]
MODEL_COLUMNS = [
    ("model", "model", "{}"), ("dims", "symbolic", "{}"), ("sizes", "sizes", "{}"),
    ("compile_s", "compile s", "{:.1f}"), ("memory_size", "memory at", "{}"),
    ("dynamic_memory_mib", "dynamic MiB", "{:.1f}"), ("ort_memory_mib", "ORT MiB", "{:.1f}"),
    ("memory_over_ort", "mem/ORT", "{:.2f}"),
]


def tables(records: list[dict], models: list[dict]) -> str:
    """The size records and the model records (failed ones left out) as text tables."""
    return "\n\n".join([
        bm.format_table([r for r in records if "error" not in r], SIZE_COLUMNS),
        bm.format_table([m for m in models if "error" not in m], MODEL_COLUMNS)])

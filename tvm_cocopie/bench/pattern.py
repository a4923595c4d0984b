"""Pattern-sparse convolution (PatDNN) against dense convs and CSR, layer by layer and
end to end (``scripts/bench_pattern.py``).

Layers: VGG-16's unique 3x3 convs L1-L9 (seed 004, Table 2.6) at the resolutions of a
224x224 input, each with bias and ReLU, pruned to 8 patterns and 3.6x connectivity
(L1, 3 input channels, keeps its connections as in PatDNN). Every contender computes
the same function, the pruned layer, on the same input, in the CPU layer's blocked
layout where ours take it:

- ``dense``: our dense conv of the pruned weight (the cocopie pipeline with pattern
  kernels off: Winograd where the planner picks it, the direct blocked kernel
  elsewhere); ``dense_direct``: the direct kernel only (Winograd off), the dense
  comparison of the thesis;
- ``ort``: ONNX Runtime's dense conv (NCHW);
- ``pattern``: the cocopie pipeline as a user gets it (the pass finds the patterns,
  untuned knobs, epilogue in the kernel);
- the breakdown of the thesis' Fig. 2.13: ``noopt`` (one loop over a filter's kernels,
  tap positions read from a table, one pixel vector per tile, no input tiling),
  ``reorder`` (+ filter kernel reorder / FKW: per-pattern code with static taps, same
  tile), ``lre`` (+ the register tile over several rows whose input loads are shared,
  input tiling and prefetch: the untuned kernel), ``tuned`` (+ the best register tile
  of :data:`~tvm_cocopie.topi.cpu.pattern_conv.TILE_GRID`, measured);
- ``csr``: the same pruned weights as CSR, tuned over the same grid.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace

import numpy as np

from . import timing as bm
from .gspc import GroupedLayer, blocked_array, layer_data, relax_layer, vm_runner

log = logging.getLogger(__name__)

#: VGG-16's unique 3x3 convs (Table 2.6): name, output and input channels, input size
VGG_LAYERS = (
    ("L1", 64, 3, 224), ("L2", 64, 64, 224), ("L3", 128, 64, 112), ("L4", 128, 128, 112),
    ("L5", 256, 128, 56), ("L6", 256, 256, 56), ("L7", 512, 256, 28), ("L8", 512, 512, 28),
    ("L9", 512, 512, 14),
)
#: quick runs: a small and a large layer
QUICK_LAYERS = ("L4", "L9")
PATTERNS = 8
CONNECTIVITY = 3.6


@dataclass(frozen=True)
class PatternLayer:
    """One benchmark layer: a 3x3 conv + bias + ReLU, pruned."""

    name: str
    o: int
    c: int
    hw: int
    stride: int = 1

    def conv(self) -> GroupedLayer:
        return GroupedLayer(self.c, self.hw, self.hw, self.o, 3, self.stride, (1, 1, 1, 1),
                            1, 1)

    @property
    def connectivity(self) -> float:
        return 1.0 if self.c <= 4 else CONNECTIVITY


def vgg_layers(names=None) -> list[PatternLayer]:
    """The layers named (all of :data:`VGG_LAYERS` by default)."""
    layers = [PatternLayer(n, o, c, hw) for n, o, c, hw in VGG_LAYERS]
    return [lay for lay in layers if names is None or lay.name in names]


def pruned_data(layer: PatternLayer, seed: int = 0):
    """``(pruned weight, bias, input, pattern layout)`` of ``layer``, deterministic."""
    from ..pruning import detect, pattern_set, prune

    w, b, x = layer_data(layer.conv(), seed)
    wp = prune(w, pattern_set([w], PATTERNS), layer.connectivity)
    return wp, b, x, detect(wp, max_density=1.0)


def variant_specs(layer: PatternLayer, weight, layout, lanes: int, block: int) -> dict:
    """``{name: PatternConv}`` of the breakdown variants and CSR (untuned ones)."""
    from ..topi.cpu import pattern_conv as pc
    from ..topi.cpu.conv2d_nchwc import ConvGeometry

    g = layer.conv()
    geo = ConvGeometry(1, g.c, g.h, g.w, g.o, 3, 3, (g.stride,) * 2, g.pad, (1, 1), 1)
    ib = block if g.c % block == 0 else 0
    base = pc.PatternKnobs(1, 1, lanes, tile_copy=False, prefetch=0)
    nnz = int((np.asarray(weight) != 0).sum())

    def spec(mode, knobs):
        return pc.PatternConv(geo, layout.patterns, nnz if mode == "csr" else layout.kernels,
                              knobs, mode, ib, block, True, "relu")

    return {"noopt": spec("kernel", base), "reorder": spec("pattern", base),
            "lre": spec("pattern", pc.default_knobs(geo, lanes)),
            "csr": spec("csr", pc.default_knobs(geo, lanes))}


def kernel_runner(spec, weight, layout, bias, data, target):
    """``(run, output)`` of a standalone pattern-conv PrimFunc on ``data``."""
    import tvm

    from ..topi.cpu import pattern_conv as pc

    func = pc.pattern_conv_func(spec).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target)
    arrays = [*pc.weight_arrays(spec, weight, layout), bias]
    if spec.mode == "kernel":
        arrays.append(pc.pattern_table(spec))
    args = [tvm.runtime.tensor(a) for a in (data, *arrays)]
    out = tvm.runtime.tensor(np.zeros(spec.out_shape(), "float32"))
    fn = lib.mod["main"]
    fn(*args, out)
    return (lambda: fn(*args, out)), out.numpy()


def tune(spec, weight, layout, bias, data, target, repeat: int = 3):
    """``(best spec, {knobs: ms})``: ``spec`` with each register tile of the grid
    MetaSchedule chooses from (:data:`~tvm_cocopie.topi.cpu.pattern_conv.TILE_GRID`,
    the tiles fitting ``target``'s registers) that fits the output, measured (blocks of
    4); the untuned tile is always a candidate."""
    from ..target import cpu_info, parse_target
    from ..topi.cpu import pattern_conv as pc
    from ..topi.cpu.tiling import vector_registers

    geo = spec.geo
    candidates = {spec.knobs}
    for choice in pc.tile_choices(vector_registers(cpu_info(parse_target(target)))):
        knobs = pc.with_tile(spec, choice).knobs
        if knobs.rows <= geo.oh and (knobs.vectors - 1) * knobs.lanes < geo.ow:
            candidates.add(knobs)
    runs = {}
    for knobs in sorted(candidates, key=lambda k: k.describe()):
        runs[knobs] = kernel_runner(replace(spec, knobs=knobs), weight, layout, bias, data,
                                    target)[0]
    ms = bm.time_per_call(runs, repeat, max_seconds=10.0)
    best = min(ms, key=ms.get)
    return replace(spec, knobs=best), {k.describe(): v for k, v in ms.items()}


def compare_layer(layer: PatternLayer, target, threads: list[int], repeat: int = 10,
                  max_seconds: float | None = 30.0, tuning: bool = True) -> list[dict]:
    """One record per thread count (module docstring); tuning at the largest thread
    count."""
    from ..pipeline import cocopie_pipeline
    from ..target import cpu_info, parse_target
    from ..threads import pool_threads, set_pool_threads
    from ..topi.cpu import pattern_conv as pc
    from .gspc import nchw_array, onnx_layer

    target = parse_target(target)
    lanes = cpu_info(target).f32_lanes
    wp, b, x, layout = pruned_data(layer)
    conv = layer.conv()
    ib = lanes if layer.c % lanes == 0 else 0
    xb = blocked_array(x, ib) if ib else x
    mod = relax_layer(conv, wp, b, ib, lanes)
    runs, outs = {}, {}
    runs["dense"], outs["dense"] = vm_runner(mod, target, xb,
                                             cocopie_pipeline(pattern_sparse=False))
    runs["dense_direct"], outs["dense_direct"] = vm_runner(
        mod, target, xb, cocopie_pipeline(pattern_sparse=False, winograd="off"))
    runs["pattern"], outs["pattern"] = vm_runner(mod, target, xb, cocopie_pipeline())
    specs = variant_specs(layer, wp, layout, lanes, lanes)
    before = pool_threads()
    set_pool_threads(max(threads))
    tuned_ms = {}
    if tuning:
        specs["tuned"], tuned_ms["pattern"] = tune(specs["lre"], wp, layout, b, xb, target)
        specs["csr"], tuned_ms["csr"] = tune(specs["csr"], wp, layout, b, xb, target)
    for name, spec in specs.items():
        runs[name], outs[name] = kernel_runner(spec, wp, layout, b, xb, target)
    fkw = pc.fkw(wp, layout.patterns, layout.ids)
    csr = pc.csr(wp)
    model = onnx_layer(conv, wp, b)
    records = []
    for t in threads:
        set_pool_threads(t)
        ort_run = bm.ort_runner(bm.ort_session(model, t), {"x": x})
        ref = ort_run()[0]
        errs = {k: bm.max_rel_error(nchw_array(v), ref) for k, v in outs.items()}
        ms = bm.time_per_call({"ort": ort_run, **runs}, repeat, max_seconds)
        best = ms.get("tuned", ms["lre"])
        rec = {"layer": layer.name, **asdict(layer), "threads": t,
               "dense_macs": conv.macs, "pattern_macs": specs["lre"].macs(),
               "patterns": len(layout.patterns), "connectivity": layout.connectivity,
               **{f"{k}_ms": v for k, v in ms.items()},
               "max_rel_err": max(errs.values()),
               "speedup_vs_dense": ms["dense"] / best,
               "speedup_vs_dense_direct": ms["dense_direct"] / best,
               "speedup_vs_ort": ms["ort"] / best, "speedup_vs_csr": ms["csr"] / best,
               "pipeline_speedup_vs_dense": ms["dense"] / ms["pattern"],
               "breakdown": {"reorder": ms["noopt"] / ms["reorder"],
                             "lre": ms["reorder"] / ms["lre"],
                             "tuning": ms["lre"] / best},
               "fkw_index_bytes": fkw.index_bytes(), "csr_index_bytes": csr.index_bytes(),
               "index_saving": 1 - fkw.index_bytes() / csr.index_bytes(),
               "tuned_knobs": specs.get("tuned", specs["lre"]).knobs.describe(),
               "tuning_ms": tuned_ms}
        records.append(rec)
    set_pool_threads(before)
    return records


def prune_workload(name: str, image_size: int | None = None):
    """``(workload, pruned model)``: a zoo workload with its 3x3 convs pattern-pruned (8
    patterns, 3.6x connectivity, the first kept)."""
    from ..models.workloads import get_workload
    from ..pruning import prune_model

    wl = get_workload(name, image_size=image_size)
    pruned, _ = prune_model(wl.model, PATTERNS, CONNECTIVITY)
    return wl, pruned


def compare_model(name: str, target, threads: list[int], repeat: int = 10,
                  max_seconds: float | None = 60.0, image_size: int | None = None) -> list[dict]:
    """One record per thread count: the pattern-pruned model through cocopie with the
    pattern kernels and without (dense kernels on the pruned weights), and ONNX
    Runtime, blocks of 4."""
    from ..api import compile_model
    from ..pipeline import PipelineOptions
    from ..threads import pool_threads, set_pool_threads

    wl, pruned = prune_workload(name, image_size)
    ours = compile_model(pruned, target, shapes=wl.shapes, adaptive_threads=False)
    dense = compile_model(pruned, target, shapes=wl.shapes, adaptive_threads=False,
                          options=PipelineOptions(pattern_sparse=False))
    records = []
    before = pool_threads()
    for t in threads:
        set_pool_threads(t)
        ort_run = bm.ort_runner(bm.ort_session(pruned, t), wl.inputs)
        ref = ort_run()
        out = ours(**wl.inputs)
        err = bm.max_rel_error(out if isinstance(out, list) else [out], ref)
        times = bm.interleaved_times(
            {"ort": ort_run, "pattern": lambda: ours(**wl.inputs),
             "dense": lambda: dense(**wl.inputs)},
            repeat=repeat, warmup=1, max_seconds=max_seconds, block=4)
        ms = {k: bm.median(v) for k, v in times.items()}
        records.append({"model": name, "threads": t, **{f"{k}_ms": v for k, v in ms.items()},
                        "speedup_vs_dense": ms["dense"] / ms["pattern"],
                        "speedup_vs_ort": ms["ort"] / ms["pattern"], "max_rel_err": err})
    set_pool_threads(before)
    return records


def summarize(layer_records: list[dict], model_records: list[dict]) -> dict:
    """Geomeans over the layer records (all thread counts) and each model's speedups at
    the largest thread count."""
    out = {}
    if layer_records:
        for key in ("speedup_vs_dense", "speedup_vs_dense_direct", "speedup_vs_ort",
                    "speedup_vs_csr", "pipeline_speedup_vs_dense"):
            out[key] = bm.geomean(r[key] for r in layer_records)
        for step in ("reorder", "lre", "tuning"):
            out[f"breakdown_{step}"] = bm.geomean(r["breakdown"][step] for r in layer_records)
        fkw = sum(r["fkw_index_bytes"] for r in layer_records)
        csr = sum(r["csr_index_bytes"] for r in layer_records)
        out["fkw_index_saving"] = 1 - fkw / csr
        out["max_rel_err"] = max(r["max_rel_err"] for r in layer_records)
    top = max((r["threads"] for r in model_records), default=None)
    for r in model_records:
        if r["threads"] == top:
            out[f"e2e_speedup_{r['model']}"] = r["speedup_vs_dense"]
            out[f"e2e_speedup_vs_ort_{r['model']}"] = r["speedup_vs_ort"]
    return out


__all__ = [
    "QUICK_LAYERS",
    "VGG_LAYERS",
    "PatternLayer",
    "compare_layer",
    "compare_model",
    "prune_workload",
    "pruned_data",
    "summarize",
    "tune",
    "vgg_layers",
]

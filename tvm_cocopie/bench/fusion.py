"""What a fusion stage made of a model: kernels launched, intermediate bytes, fallbacks.

:func:`fusion_stats` runs the cocopie pipeline up to the ``fusion`` stage with the
given options and reads ``main``:

- ``kernels``: PrimFunc calls in ``main`` (each one a kernel launch per inference);
- ``intermediate_bytes``: bytes the kernels write that another kernel reads back
  (every call's result except the model's outputs);
- ``fallbacks``: fused kernels the generic schedule (:class:`~tvm_cocopie.schedules.cpu.
  fallback.Fallback`) gets although they hold a conv or matmul block that has a fast
  rule of its own (the fast rule could not take the fused kernel);
- ``rules``: how many calls each schedule rule takes.

:func:`kernel_profile` times every kernel call of a scheduled module on its own (random
inputs of the call's shapes), to see where a model's time goes.

:func:`stock_groups` and :func:`plot_blocks` draw a model's fusion blocks (notebook 03).

:func:`compare_fusion` is one record of ``scripts/bench_fusion.py``: both fusions of a
model counted, compiled, checked against ONNX Runtime and timed side by side.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

import tvm
from tvm import relax, s_tir

from ..api import compile_model
from ..exprs import tensor_bytes
from ..frontend.importer import from_onnx
from ..pipeline import PipelineOptions, run_until
from ..relay_passes.fusion.plan import ECG
from ..relay_passes.fusion.profiler import first_rule, time_primfunc
from ..schedules import default_rules
from ..schedules.base import annotated_blocks
from ..target import parse_target
from ..threads import set_pool_threads
from ..topi.cpu.conv2d_nchwc import ANNOTATION as CONV_ANNOTATION
from ..topi.cpu.dense_packed import ANNOTATION as MATMUL_ANNOTATION
from . import timing as bm

log = logging.getLogger(__name__)

_FAST = (CONV_ANNOTATION, MATMUL_ANNOTATION)


@dataclass
class KernelCall:
    """One ``call_tir`` of ``main``: its kernel, its result's bytes, whether the result
    leaves the model."""

    kernel: str
    out_bytes: int
    is_output: bool


def kernel_calls(mod: tvm.IRModule) -> list[KernelCall]:
    """The ``call_tir`` bindings of ``mod["main"]``, in program order."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    main = mod["main"]
    outputs = set()

    def mark(expr):
        if isinstance(expr, relax.Var):
            outputs.add(expr)

    relax.analysis.post_order_visit(main.body.body, mark)
    aliases = {}
    calls = []
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Var):  # a rebinding (dataflow output)
                aliases[binding.var] = value
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                calls.append((binding.var, KernelCall(value.args[0].name_hint,
                                                      _written_bytes(binding.var.ty),
                                                      False)))
    for var in list(outputs):
        while var in aliases:
            var = aliases[var]
            outputs.add(var)
    for var, call in calls:
        call.is_output = var in outputs
    return [c for _, c in calls]


def _written_bytes(ty) -> int:
    """Bytes of the tensors of type ``ty`` (each field of a tuple: a kernel with several
    outputs); 0 for a symbolic shape."""
    if isinstance(ty, relax.TupleType):
        return sum(tensor_bytes(field) for field in ty.fields)
    return tensor_bytes(ty)


def _has_fast_block(func: tvm.tirx.PrimFunc) -> bool:
    sch = s_tir.Schedule(func)
    return any(annotated_blocks(sch, key) for key in _FAST)


def rule_of(func: tvm.tirx.PrimFunc, target, rules: list) -> str:
    """The name of the first rule of ``rules`` that schedules ``func`` (``"none"``)."""
    rule = first_rule(func, target, rules)
    return "none" if rule is None else rule.name


def fusion_stats(mod: tvm.IRModule, target=None, options: PipelineOptions | None = None,
                 fused: tvm.IRModule | None = None) -> dict:
    """Kernels, intermediate bytes, fallbacks and rules of ``mod`` (an imported model)
    after the pipeline's ``fusion`` stage with ``options`` (or of ``fused`` if given)."""
    target = parse_target(target)
    if fused is None:
        fused = run_until(mod, target, "fusion", options)
    calls = kernel_calls(fused)
    rules = default_rules(target)
    rule_by_kernel, fallbacks = {}, 0
    for call in calls:
        if call.kernel not in rule_by_kernel:
            func = fused[call.kernel]
            rule = rule_of(func, target, rules)
            rule_by_kernel[call.kernel] = rule
            if rule == "fallback" and _has_fast_block(func):
                log.warning("kernel %s holds a conv/matmul block but falls back to the "
                            "generic schedule", call.kernel)
                fallbacks += 1
    return {
        "kernels": len(calls),
        "intermediate_bytes": sum(c.out_bytes for c in calls if not c.is_output),
        "fallbacks": fallbacks,
        "rules": dict(Counter(rule_by_kernel[c.kernel] for c in calls)),
    }


def kernel_profile(mod: tvm.IRModule, target=None, options: PipelineOptions | None = None,
                   min_repeat_ms: int = 5) -> list[tuple[str, int, float]]:
    """``(kernel, calls, total µs)`` of ``mod`` built with ``options``, slowest first:
    each kernel scheduled as the pipeline schedules it and timed alone."""
    target = parse_target(target)
    fused = run_until(mod, target, "fusion", options)
    counts = Counter(c.kernel for c in kernel_calls(fused))
    rules = default_rules(target)
    rows = []
    for kernel, n in counts.items():
        us = time_primfunc(fused[kernel], target, rules, min_repeat_ms)
        rows.append((kernel, n, n * us))
    return sorted(rows, key=lambda r: -r[2])


#: ONNX ops that make a model a sequence model (attention, recurrence, layer norm)
SEQUENCE_OPS = frozenset({"Softmax", "LayerNormalization", "Attention", "MultiHeadAttention",
                          "LSTM", "GRU", "RNN"})


def family(model) -> str:
    """``"transformer"`` for encoders, recognizers and recurrent models (any of
    :data:`SEQUENCE_OPS`, or more MatMul/Gemm than Conv nodes), else ``"cnn"``: the two
    groups the fusion goals are stated for."""
    ops = Counter(node.op_type for node in model.graph.node)
    if SEQUENCE_OPS & set(ops) or ops["MatMul"] + ops["Gemm"] > ops["Conv"]:
        return "transformer"
    return "cnn"


def compare_fusion(wl, target, threads: int, db_path, repeat: int = 10,
                   max_seconds: float | None = 30.0) -> dict:
    """One model, stock ``FuseOps`` against DNNFusion, every other stage equal.

    Counts (kernels, intermediate bytes, fallbacks) of both; DNNFusion compiled twice
    on the profiling database at ``db_path`` (first compile fills it, the second reuses
    it: ``compile_s_first``, ``compile_s_second``); both builds checked against ONNX
    Runtime; end-to-end latency of the two builds in blocked interleaved timing.
    """
    target = parse_target(target)
    stock_opts = PipelineOptions(fusion="stock")
    ours = PipelineOptions(fusion="dnnfusion", fusion_db=str(db_path))
    mod = from_onnx(wl.model, shapes=wl.shapes)
    counts = {"stock": fusion_stats(mod, target, stock_opts)}
    times = {}
    # both builds at ``threads`` for every call: a thread governor per build would let
    # a one-thread probe of one side fall into the other's rounds
    for run in ("first", "second"):
        start = time.perf_counter()
        fused = compile_model(wl.model, target, shapes=wl.shapes, options=ours,
                              adaptive_threads=False)
        times[run] = time.perf_counter() - start
    counts["dnnfusion"] = fusion_stats(mod, target, ours)
    stock = compile_model(wl.model, target, shapes=wl.shapes, options=stock_opts,
                          adaptive_threads=False)
    set_pool_threads(threads)
    ref = bm.ort_session(wl.model, threads).run(None, wl.inputs)
    builds = {"stock": stock, "dnnfusion": fused}
    errors = {k: bm.max_rel_error(bm.output_list(b(**wl.inputs)), ref) for k, b in builds.items()}
    timed = bm.interleaved_times({k: (lambda b=b: b(**wl.inputs)) for k, b in builds.items()},
                                 repeat=repeat, warmup=1, max_seconds=max_seconds, block=4)
    rec = {"model": wl.name, "family": family(wl.model), "input_shapes": wl.shapes}
    for side in ("stock", "dnnfusion"):
        for key in ("kernels", "intermediate_bytes", "fallbacks"):
            rec[f"{side}_{key}"] = counts[side][key]
        rec[f"{side}_ms"] = bm.median(timed[side])
        rec[f"{side}_max_rel_err"] = errors[side]
    rec.update(
        kernel_ratio=rec["dnnfusion_kernels"] / rec["stock_kernels"],
        bytes_ratio=(rec["dnnfusion_intermediate_bytes"] / rec["stock_intermediate_bytes"]
                     if rec["stock_intermediate_bytes"] else None),
        fusion_speedup=rec["stock_ms"] / rec["dnnfusion_ms"],
        compile_s_first=round(times["first"], 2), compile_s_second=round(times["second"], 2),
        recompile_speedup=times["first"] / times["second"],
        rounds=len(timed["stock"]),
    )
    return rec


def summarize(records: list[dict]) -> dict:
    """The summary keys issue 14 asks for (geomeans per family), over the records that
    ran."""
    done = [r for r in records if "skipped" not in r]

    def geo(key, fam=None):
        vals = [r[key] for r in done if r.get(key) and (fam is None or r["family"] == fam)]
        return bm.geomean(vals) if vals else None

    return {
        "models": len(done),
        "skipped": [r["model"] for r in records if "skipped" in r],
        "kernel_ratio_cnn": geo("kernel_ratio", "cnn"),
        "kernel_ratio_transformer": geo("kernel_ratio", "transformer"),
        "fusion_speedup_cnn": geo("fusion_speedup", "cnn"),
        "fusion_speedup_transformer": geo("fusion_speedup", "transformer"),
        "recompile_speedup": geo("recompile_speedup"),
        "bytes_ratio": geo("bytes_ratio"),
        "fallbacks": sum(r["dnnfusion_fallbacks"] for r in done),
        "max_rel_err": max((max(r["stock_max_rel_err"], r["dnnfusion_max_rel_err"])
                            for r in done), default=None),
    }


COLUMNS = [
    ("model", "model", "{}"), ("family", "family", "{}"),
    ("stock_kernels", "stock k", "{}"), ("dnnfusion_kernels", "ours k", "{}"),
    ("kernel_ratio", "k ratio", "{:.2f}"), ("bytes_ratio", "bytes ratio", "{:.2f}"),
    ("dnnfusion_fallbacks", "fallbacks", "{}"), ("stock_ms", "stock ms", "{:.2f}"),
    ("dnnfusion_ms", "ours ms", "{:.2f}"), ("fusion_speedup", "speedup", "{:.3f}"),
    ("recompile_speedup", "recompile x", "{:.1f}"),
    ("dnnfusion_max_rel_err", "rel err", "{:.1e}"),
]


def table(records: list[dict]) -> str:
    """The records (skipped models left out) as a text table of :data:`COLUMNS`."""
    return bm.format_table([r for r in records if "skipped" not in r], COLUMNS)


def stock_groups(mod: tvm.IRModule) -> list[list[int]]:
    """The groups stock ``FuseOps`` makes of a legalized module's kernel calls, as lists
    of :class:`~tvm_cocopie.relay_passes.fusion.plan.ECG` node positions (kernels are
    matched by name, earliest call first: a picture's approximation, not a plan)."""
    graph = ECG.of(mod)
    fused = relax.transform.FuseOps()(mod)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    free: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        free.setdefault(node.kernel, []).append(i)
    groups = []
    for block in fused["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            if value.op.same_as(call_tir):
                names = [value.args[0].name_hint]
            elif isinstance(value.op, tvm.ir.GlobalVar):
                names = [b.value.args[0].name_hint for blk in fused[value.op].body.blocks
                         for b in blk.bindings if isinstance(b.value, relax.Call)
                         and b.value.op.same_as(call_tir)]
            else:
                continue
            group = [free[n].pop(0) for n in names if free.get(n)]
            if group:
                groups.append(group)
    return groups


def plot_blocks(graph: ECG, groups: list[list[int]], ax, title: str = "") -> None:
    """Draw ``graph`` (nodes by depth left to right, edges in grey) on the matplotlib
    axes ``ax``, each group of two or more nodes in its own colour, single nodes grey."""
    import matplotlib.pyplot as plt

    index = {id(n): i for i, n in enumerate(graph.nodes)}
    depth = []
    for node in graph.nodes:
        depth.append(1 + max((depth[index[id(p)]] for p in node.producers), default=-1))
    rows: dict[int, int] = {}
    pos = []
    for d in depth:
        pos.append((d, rows.get(d, 0)))
        rows[d] = rows.get(d, 0) + 1
    for i, node in enumerate(graph.nodes):
        for c in node.consumers:
            j = index[id(c)]
            ax.plot([pos[i][0], pos[j][0]], [pos[i][1], pos[j][1]], color="0.8", lw=0.6,
                    zorder=1)
    colours = plt.get_cmap("tab20")
    colour = ["0.75"] * len(graph.nodes)
    fused = [g for g in groups if len(g) > 1]
    for k, group in enumerate(fused):
        for i in group:
            colour[i] = colours(k % 20)
    ax.scatter([p[0] for p in pos], [p[1] for p in pos], c=colour, s=36, zorder=2,
               edgecolors="0.3", linewidths=0.4)
    ax.set_title(f"{title}: {len(groups)} kernels ({len(fused)} fused)")
    ax.set_xlabel("depth in the graph")
    ax.set_yticks([])

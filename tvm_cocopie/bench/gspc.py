"""Grouped convolution, layer by layer and model by model (``scripts/bench_gspc.py``).

Layers are the grouped convs (``group > 1``) of the thesis' model variants (WRN-40-2,
ResNet-34 and MobileNetV2 in their S, G(2) ... G(N) forms, :mod:`..models.grouped`) and
of ResNeXt-50, taken from the ONNX graphs with their shapes, each once. Every layer is
a conv + bias + ReLU (the work of the thesis' layers with their fused epilogue, and of
ONNX Runtime's Conv + Relu), timed with random weights by:

* ``cocopie``: the cocopie pipeline (GSPC where the groups are narrower than a
  channel chunk, a Winograd GEMM per group where they are aligned and wide, the
  direct blocked kernel otherwise), input and output in the blocked layout the
  pipeline keeps them in inside a network;
* ``previous``: the same pipeline with ``grouped="blocked"``, the CPU layer's kernel
  before GSPC (several groups per vector on block-diagonal zero-padded weights, no
  grouped Winograd, TVM's own grouped conv where the padding would pass 4x);
* ``tvm``: stock TVM's default pipeline on the NCHW graph;
* ``ort``: ONNX Runtime's Conv + Relu.

Each contender call runs the layer ``number`` times (enough for ~2 ms); calls are
interleaved in blocks of 4 (:func:`~.timing.interleaved_times`), the pool set to each
thread count in turn (one build, ``num-cores`` the largest count). Models: the whole
variant through the cocopie pipeline and ONNX Runtime, the same way, with the MACs of
its convs and FC layers (the thesis' formula 5.2).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import CocopieError
from . import timing as bm

log = logging.getLogger(__name__)

#: the model families of the thesis' tables: family -> (S model, {g: variant model})
FAMILIES = {
    "wrn40_2": ("wrn40_2", {2: "wrn40_2_g2", 4: "wrn40_2_g4", 8: "wrn40_2_g8",
                            16: "wrn40_2_g16", "N": "wrn40_2_gN"}),
    "resnet34": ("resnet34", {2: "resnet34_g2", 4: "resnet34_g4", 8: "resnet34_g8",
                              16: "resnet34_g16", "N": "resnet34_gN"}),
    "mobilenetv2": ("mobilenetv2_s", {2: "mobilenetv2_g2", 4: "mobilenetv2_g4",
                                      8: "mobilenetv2_g8", 16: "mobilenetv2_g16",
                                      "N": "mobilenetv2"}),
    "resnext50": (None, {32: "resnext50_32x4d"}),
}



@dataclass(frozen=True)
class GroupedLayer:
    """A grouped conv + bias + ReLU at batch 1 (NCHW, square kernel, one stride)."""

    c: int
    h: int
    w: int
    o: int
    k: int
    stride: int
    pad: tuple[int, int, int, int]
    dilation: int
    groups: int

    @property
    def name(self) -> str:
        """``C@HxW->O kK sS gG``."""
        return (f"{self.c}@{self.h}x{self.w}->{self.o} k{self.k} s{self.stride} "
                f"g{self.groups}")

    @property
    def out_hw(self) -> tuple[int, int]:
        pt, pl, pb, pr = self.pad
        span = (self.k - 1) * self.dilation + 1
        return ((self.h + pt + pb - span) // self.stride + 1,
                (self.w + pl + pr - span) // self.stride + 1)

    @property
    def macs(self) -> int:
        oh, ow = self.out_hw
        return self.o * oh * ow * (self.c // self.groups) * self.k * self.k


def _attr(node, name: str, default):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def grouped_layers(model) -> list[GroupedLayer]:
    """The distinct grouped convs of the ONNX ``model`` (static shapes), in graph order."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.input, *inferred.graph.value_info]}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    layers: list[GroupedLayer] = []
    for node in model.graph.node:
        groups = int(_attr(node, "group", 1))
        if node.op_type != "Conv" or groups == 1:
            continue
        _, c, h, w = shapes[node.input[0]]
        o, _, kh, kw = weights[node.input[1]]
        strides = list(_attr(node, "strides", [1, 1]))
        dil = list(_attr(node, "dilations", [1, 1]))
        pads = list(_attr(node, "pads", [0, 0, 0, 0]))
        if kh != kw or strides[0] != strides[1] or dil[0] != dil[1]:
            continue
        layer = GroupedLayer(c, h, w, o, kh, strides[0], (pads[0], pads[1], pads[2], pads[3]),
                             dil[0], groups)
        if layer not in layers:
            layers.append(layer)
    return layers


def model_macs(model) -> int:
    """Multiply-accumulates of the Conv and Gemm nodes of ``model`` (formula 5.2)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.output]}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    macs = 0
    for node in model.graph.node:
        w = weights.get(node.input[1]) if len(node.input) > 1 else None
        if node.op_type == "Conv":
            macs += int(np.prod(shapes[node.output[0]][1:])) * int(np.prod(w[1:]))
        elif node.op_type == "Gemm":
            macs += int(np.prod(w))
    return macs


# ------------------------------------------------------------------ one layer


def layer_data(layer: GroupedLayer, seed: int = 0):
    """``(weight OIHW, bias, input NCHW)`` of ``layer``, random and deterministic."""
    rng = np.random.default_rng(seed + layer.c * 7 + layer.o + layer.groups)
    cpg = layer.c // layer.groups
    w = (rng.standard_normal((layer.o, cpg, layer.k, layer.k))
         / np.sqrt(cpg * layer.k * layer.k)).astype("float32")
    b = rng.standard_normal(layer.o).astype("float32")
    x = rng.standard_normal((1, layer.c, layer.h, layer.w)).astype("float32")
    return w, b, x


def onnx_layer(layer: GroupedLayer, w, b):
    from onnx import TensorProto, helper, numpy_helper

    from ..models.graph_builder import IR_VERSION

    oh, ow = layer.out_hw
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=layer.groups,
                            kernel_shape=[layer.k, layer.k], strides=[layer.stride] * 2,
                            pads=list(layer.pad), dilations=[layer.dilation] * 2)
    relu = helper.make_node("Relu", ["y"], ["out"])
    graph = helper.make_graph(
        [conv, relu], "grouped_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, layer.c, layer.h, layer.w])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, layer.o, oh, ow])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def relax_layer(layer: GroupedLayer, w, b, ib: int, ob: int):
    """conv + bias + ReLU on ``NCHW{ib}c`` in, ``NCHW{ob}c`` out (``ib = ob = 0``: NCHW)."""
    from tvm import relax
    from tvm.relax import op as R

    if ib:
        shape = [1, layer.c // ib, layer.h, layer.w, ib]
        bias = blocked_array(b.reshape(1, layer.o, 1, 1), ob)
        layouts = {"data_layout": f"NCHW{ib}c", "out_layout": f"NCHW{ob}c"}
    else:
        shape = [1, layer.c, layer.h, layer.w]
        bias = b.reshape(1, layer.o, 1, 1)
        layouts = {}
    var = relax.Var("x", relax.TensorType(shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [var]):
        with bb.dataflow():
            y = bb.emit(R.nn.conv2d(var, relax.const(w), strides=[layer.stride] * 2,
                                    padding=list(layer.pad), dilation=[layer.dilation] * 2,
                                    groups=layer.groups, kernel_layout="OIHW", **layouts))
            out = bb.emit_output(R.nn.relu(R.add(y, relax.const(bias))))
        bb.emit_func_output(out)
    return bb.get()


def vm_runner(mod, target, arg: np.ndarray, pipeline, tir_pipeline: str | None = None):
    """``(run, output)``: a no-argument callable running the compiled ``mod`` once, and
    its output for ``arg``. ``tir_pipeline``: ``"default"`` for stock TVM's contenders,
    else the cocopie build's (:func:`~tvm_cocopie.tir_pipeline.tir_pipeline_for`)."""
    import tvm
    from tvm import relax

    from ..target import parse_target
    from ..tir_pipeline import tir_pipeline_for

    tir = tir_pipeline or tir_pipeline_for(parse_target(target))
    ex = tvm.compile(mod, target=target, relax_pipeline=pipeline, tir_pipeline=tir)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    data = tvm.runtime.tensor(arg)
    fn = vm["main"]
    return (lambda: fn(data)), fn(data).numpy()


def blocked_array(x: np.ndarray, block: int) -> np.ndarray:
    """NCHW -> NCHW{block}c (numpy)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def nchw_array(y: np.ndarray) -> np.ndarray:
    """NCHW[x]c -> NCHW (numpy); an NCHW array as it is."""
    if y.ndim != 5:
        return y
    n, cb, h, w, block = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * block, h, w)


def compare_layer(layer: GroupedLayer, target, threads: list[int], repeat: int = 10,
                  max_seconds: float | None = 20.0, stock: bool = True) -> list[dict]:
    """One record per thread count: the median ms of each contender (module docstring),
    their ratios and the largest error against ONNX Runtime."""
    from tvm import relax

    from ..pipeline import cocopie_pipeline
    from ..target import cpu_info, parse_target
    from ..threads import pool_threads, set_pool_threads
    from ..topi.cpu.tiling import channel_block

    target = parse_target(target)
    info = cpu_info(target)
    w, b, x = layer_data(layer)
    ib, ob = channel_block(layer.c, info), channel_block(layer.o, info)
    blocked = ib > 1 and ob > 1
    xb = blocked_array(x, ib) if blocked else x
    mod = relax_layer(layer, w, b, ib if blocked else 0, ob if blocked else 0)
    plain = relax_layer(layer, w, b, 0, 0)
    runs, outs, errors, layouts = {}, {}, {}, {}

    def ours(name, pipeline):
        # in the blocked layout, as inside a network; a conv our kernels do not take stays
        # NCHW there (the layout stage asks the same planner), and is timed so here
        try:
            runs[name], outs[name] = vm_runner(mod, target, xb, pipeline)
            layouts[name] = "blocked" if blocked else "nchw"
        except Exception:  # noqa: BLE001 - TVM cannot legalize the blocked grouped conv
            runs[name], outs[name] = vm_runner(plain, target, x, pipeline)
            layouts[name] = "nchw"

    ours("cocopie", cocopie_pipeline())
    ours("previous", cocopie_pipeline(grouped="blocked"))
    if stock:
        try:
            runs["tvm"], outs["tvm"] = vm_runner(plain, target, x, relax.get_pipeline("default"),
                                                 "default")
        except Exception as err:  # noqa: BLE001 - stock TVM's failure is recorded, not fatal
            errors["tvm"] = str(err).strip().splitlines()[-1]
    records = []
    model = onnx_layer(layer, w, b)
    before = pool_threads()  # the process's pool: given back as it was
    for t in threads:
        set_pool_threads(t)
        sess = bm.ort_session(model, t)
        ort_run = bm.ort_runner(sess, {"x": x})
        ref = ort_run()[0]
        errs = {k: bm.max_rel_error(nchw_array(v), ref) for k, v in outs.items()}
        ms = bm.time_per_call({"ort": ort_run, **runs}, repeat, max_seconds)
        rec = {"layer": layer.name, **{f: v for f, v in asdict(layer).items()},
               "macs": layer.macs, "threads": t,
               "kind": _kind(layer, info) if layouts["cocopie"] == "blocked" or not blocked
               else "tvm", "layouts": dict(layouts),
               **{f"{k}_ms": v for k, v in ms.items()},
               **{f"{k}_max_rel_err": v for k, v in errs.items()},
               "cocopie_gflops": 2 * layer.macs / ms["cocopie"] / 1e6}
        rec["speedup_vs_ort"] = ms["ort"] / ms["cocopie"]
        rec["speedup_vs_previous"] = ms["previous"] / ms["cocopie"]
        if "tvm" in ms:
            rec["speedup_vs_tvm_default"] = ms["tvm"] / ms["cocopie"]
        if errors:
            rec["errors"] = errors
        records.append(rec)
    set_pool_threads(before)
    return records


def _kind(layer: GroupedLayer, info) -> str:
    """Which cocopie kernel computes ``layer`` (depthwise, shift, pixels, gspc, winograd
    or direct)."""
    from ..topi.cpu import gspc, gspc_shift
    from ..topi.cpu import winograd as wg
    from ..topi.cpu.conv2d_nchwc import ConvGeometry
    from ..topi.cpu.tiling import channel_block, conv_tile

    geo = ConvGeometry(1, layer.c, layer.h, layer.w, layer.o, layer.k, layer.k,
                       (layer.stride,) * 2, layer.pad, (layer.dilation,) * 2, layer.groups)
    ib, ob = channel_block(layer.c, info), channel_block(layer.o, info)
    if layer.groups == layer.c == layer.o:
        return "depthwise"
    if gspc_shift.applies(geo, ib, ob, info.f32_lanes):
        return "shift"
    if gspc.applies(geo, ib, ob):
        return "pixels" if gspc.pixel_vectors(geo, ib, ob, info.f32_lanes) else "gspc"
    try:
        direct = conv_tile(geo, ib, ob, info)
    except CocopieError:
        return "tvm"
    return "winograd" if wg.choose(geo, direct, info, True) is not None else "direct"


# ------------------------------------------------------------------ one model


def compare_model(name: str, family: str, groups, target, threads: list[int],
                  repeat: int = 10, max_seconds: float | None = 30.0,
                  image_size: int | None = None) -> list[dict]:
    """One record per thread count: a model variant through the cocopie pipeline and
    ONNX Runtime (median ms, blocks of 4), its MACs, the largest error and the layout
    transforms the layout stage left (2 when the blocked layout runs through the whole
    network, grouped layers included)."""
    from ..api import compile_model
    from ..models.workloads import get_workload
    from ..threads import pool_threads, set_pool_threads
    from .runtime_stats import layout_transform_count

    wl = get_workload(name, image_size=image_size)
    compiled = compile_model(wl.model, target, shapes=wl.shapes, adaptive_threads=False)
    macs = model_macs(wl.model)
    # the blocked layout through the grouped layers: transforms at the graph's ends only
    transforms = layout_transform_count(wl.model, target, wl.shapes)
    records = []
    before = pool_threads()
    for t in threads:
        set_pool_threads(t)
        sess = bm.ort_session(wl.model, t)
        ort_run = bm.ort_runner(sess, wl.inputs)
        ref = ort_run()
        ours = compiled(**wl.inputs)
        err = bm.max_rel_error(ours if isinstance(ours, list) else [ours], ref)
        times = bm.interleaved_times({"ort": ort_run, "cocopie": lambda: compiled(**wl.inputs)},
                                     repeat=repeat, warmup=1, max_seconds=max_seconds, block=4)
        ms = {k: bm.median(v) for k, v in times.items()}
        records.append({"model": name, "family": family, "groups": groups, "threads": t,
                        "macs": macs, "cocopie_ms": ms["cocopie"], "ort_ms": ms["ort"],
                        "cocopie_over_ort": ms["cocopie"] / ms["ort"], "max_rel_err": err,
                        "layout_transforms": transforms})
    set_pool_threads(before)
    return records


def thesis_tables(model_records: list[dict]) -> list[dict]:
    """Per family and thread count: each variant's MACs, ms and speedup over its S
    model (the thesis' Tables 5.2-5.4 in our numbers)."""
    rows = []
    by_key = {(r["family"], r["threads"], str(r["groups"])): r for r in model_records}
    for (family, t, g), rec in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        base = by_key.get((family, t, "S"))
        rows.append({"family": family, "threads": t, "variant": "S" if g == "S" else f"G({g})",
                     "model": rec["model"], "gmacs": rec["macs"] / 1e9,
                     "cocopie_ms": rec["cocopie_ms"], "ort_ms": rec["ort_ms"],
                     "speedup_over_s": base["cocopie_ms"] / rec["cocopie_ms"] if base else None})
    return rows


def summarize(layer_records: list[dict], model_records: list[dict],
              tuned_records: list[dict] | None = None) -> dict:
    """The issue's figures: mean speedup over stock TVM's default, geomean over ONNX
    Runtime on G(2)-G(16) layers (and the slowest), geomean over the previous kernel,
    over MetaSchedule-tuned stock TVM (untuned and tuned cocopie), G(2) over S per
    family, the largest error."""
    tuned_records = tuned_records or []
    summary: dict = {}
    vs_tvm = [r["speedup_vs_tvm_default"] for r in layer_records if "speedup_vs_tvm_default" in r]
    if vs_tvm:
        summary["mean_speedup_vs_tvm_default"] = float(np.mean(vs_tvm))
    grouped = [r for r in layer_records if r["kind"] != "depthwise" and r["groups"] <= 32]
    if grouped:
        summary["geomean_speedup_vs_ort"] = bm.geomean(r["speedup_vs_ort"] for r in grouped)
        slowest = min(grouped, key=lambda r: r["speedup_vs_ort"])
        summary["min_speedup_vs_ort"] = slowest["speedup_vs_ort"]
        summary["min_speedup_vs_ort_layer"] = f"{slowest['layer']} @{slowest['threads']}t"
        summary["layers_slower_than_ort"] = sum(r["speedup_vs_ort"] < 1 for r in grouped)
    if layer_records:
        summary["speedup_vs_previous"] = bm.geomean(r["speedup_vs_previous"]
                                                    for r in layer_records)
        summary["max_rel_err_layers"] = max(r["cocopie_max_rel_err"] for r in layer_records)
    g2_over_s = {}
    for row in thesis_tables(model_records):
        if row["variant"] == "G(2)" and row["speedup_over_s"] is not None:
            g2_over_s[f"{row['family']}@{row['threads']}t"] = row["speedup_over_s"]
    if g2_over_s:
        summary["g2_speedup_over_s"] = g2_over_s
        summary["g2_slower_than_s"] = sum(v < 1 for v in g2_over_s.values())
    if tuned_records:
        summary["untuned_over_ms_tuned"] = bm.geomean(r["untuned_over_ms_tuned"]
                                                      for r in tuned_records)
        summary["tuned_over_ms_tuned"] = bm.geomean(r["tuned_over_ms_tuned"]
                                                    for r in tuned_records)
        summary["tuned_layers"] = len(tuned_records)
    if model_records:
        summary["geomean_model_cocopie_over_ort"] = bm.geomean(r["cocopie_over_ort"]
                                                               for r in model_records)
        summary["max_rel_err_models"] = max(r["max_rel_err"] for r in model_records)
    return summary


LAYER_COLUMNS = [
    ("layer", "layer", "{}"), ("threads", "thr", "{}"), ("kind", "kernel", "{}"),
    ("cocopie_ms", "cocopie ms", "{:.4f}"), ("previous_ms", "prev ms", "{:.4f}"),
    ("tvm_ms", "TVM ms", "{:.4f}"), ("ort_ms", "ORT ms", "{:.4f}"),
    ("speedup_vs_ort", "x ORT", "{:.2f}"), ("speedup_vs_previous", "x prev", "{:.2f}"),
    ("speedup_vs_tvm_default", "x TVM", "{:.1f}"), ("cocopie_gflops", "GFLOP/s", "{:.1f}"),
]
TABLE_COLUMNS = [
    ("family", "family", "{}"), ("threads", "thr", "{}"), ("variant", "variant", "{}"),
    ("gmacs", "GMACs", "{:.3f}"), ("cocopie_ms", "cocopie ms", "{:.2f}"),
    ("ort_ms", "ORT ms", "{:.2f}"), ("speedup_over_s", "x S", "{:.2f}"),
]

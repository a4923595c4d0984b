"""Pattern-sparse convolution (PatDNN): pattern tools, FKW, the kernel against numpy,
the pipeline's choice of kernel per layer, model pruning and its CLI."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from tvm_cocopie.errors import CompilationError, ModelError
from tvm_cocopie.pruning import (
    ALL_PATTERNS,
    PatternLayout,
    detect,
    pattern_set,
    project,
    prune,
    prune_connectivity,
    prune_model,
)
from tvm_cocopie.topi.cpu import pattern_conv as pc
from tvm_cocopie.topi.cpu.conv2d_nchwc import ConvGeometry

TARGET = {"kind": "llvm", "num-cores": 2}


def _pruned(o, c, seed=0, k=8, rate=3.6):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((o, c, 3, 3)).astype("float32")
    return prune(w, pattern_set([w], k), rate)


def _layout(w, k=8):
    """The pattern layout of a pruned weight, also for layers too small for detect()."""
    pats = pattern_set([w], k)
    _, ids = project(w, pats)
    return PatternLayout(pats, ids)


# --- pattern tools -----------------------------------------------------------------


def test_all_patterns_keep_the_centre():
    assert len(ALL_PATTERNS) == 56 and len(set(ALL_PATTERNS)) == 56
    assert all(len(p) == 4 and 4 in p for p in ALL_PATTERNS)


def test_pattern_set_size_is_checked():
    w = np.ones((2, 2, 3, 3), "float32")
    with pytest.raises(CompilationError, match="4 to 12"):
        pattern_set([w], 3)
    assert len(pattern_set([w], 12)) == 12


def test_projection_keeps_the_best_pattern():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 5, 3, 3)).astype("float32")
    pats = pattern_set([w], 6)
    out, ids = project(w, pats)
    for o in range(6):
        for i in range(5):
            k = w[o, i].ravel()
            kept = [float((k[list(p)] ** 2).sum()) for p in pats]
            assert ids[o, i] == int(np.argmax(kept))
            mask = np.zeros(9, bool)
            mask[list(pats[ids[o, i]])] = True
            np.testing.assert_array_equal(out[o, i].ravel(), np.where(mask, k, 0))


def test_connectivity_pruning_rate_and_survivors():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 32, 3, 3)).astype("float32")
    out = prune_connectivity(w, 4.0)
    kept = (np.abs(out).sum(axis=(2, 3)) > 0)
    assert kept.sum() >= round(16 * 32 / 4) and kept.sum() <= round(16 * 32 / 4) + 16
    assert kept.any(axis=1).all()  # no filter left empty
    norms = np.sqrt((w ** 2).sum(axis=(2, 3)))
    assert norms[kept].min() >= np.sort(norms.ravel())[::-1][round(16 * 32 / 4) - 1] - 1e-6 \
        or kept.sum() > round(16 * 32 / 4)
    with pytest.raises(CompilationError, match="rate"):
        prune_connectivity(w, 0.5)


@pytest.mark.parametrize("shape", [(16, 8, 3, 3), (64, 64, 3, 3), (3, 5, 3, 3)])
def test_detection_has_no_false_positive_on_dense_weights(shape):
    rng = np.random.default_rng(3)
    assert detect(rng.standard_normal(shape).astype("float32")) is None
    # nor on a sparse weight with arbitrary supports (unstructured pruning)
    w = rng.standard_normal(shape).astype("float32")
    w[rng.random(shape) < 0.85] = 0
    assert detect(w) is None
    assert detect(rng.standard_normal((8, 8, 1, 1)).astype("float32")) is None


def test_detection_reads_patterns_and_folds_subsets():
    w = _pruned(32, 16)
    found = detect(w)
    assert found is not None and len(found.patterns) <= 8
    assert abs(found.connectivity - 3.6) < 0.1
    # a kernel keeping only its centre reads as the pattern that contains it
    w2 = w.copy()
    k = np.nonzero(found.ids[0] >= 0)[0][0]
    w2[0, k] = 0
    w2[0, k, 1, 1] = 1.0
    again = detect(w2)
    assert again is not None and len(again.patterns) == len(found.patterns)
    assert 4 in again.patterns[again.ids[0, k]]


# --- FKW -----------------------------------------------------------------------------


def test_fkw_round_trip_and_index_overhead():
    w = _pruned(24, 20, seed=4)
    found = detect(w)
    f = pc.fkw(w, found.patterns, found.ids)
    np.testing.assert_array_equal(f.dense(20), w)
    counts = np.diff(f.offset)
    assert (np.diff(counts) <= 0).all()  # filters reordered by kernel count
    assert sorted(f.reorder.tolist()) == list(range(24))
    c = pc.csr(w)
    assert c.values.size == int((w != 0).sum())
    # per kernel one 16-bit index against CSR's one 32-bit index per weight (4 per
    # kernel), plus per-filter arrays (each pattern's first kernel, relative to the
    # filter's, in 16 bits): under a fifth on a 128x128 layer
    w = _pruned(128, 128, seed=4)
    found = detect(w)
    big = pc.fkw(w, found.patterns, found.ids)
    assert big.index.dtype == big.stride.dtype == big.reorder.dtype == np.int16
    assert big.index_bytes() < 0.2 * pc.csr(w).index_bytes()
    assert pc.index_dtype(64, 40000) == "int32"


# --- the kernel ----------------------------------------------------------------------


def _run_kernel(spec, w, layout, x, bias):
    func = pc.pattern_conv_func(spec).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(TARGET))
    arrays = pc.weight_arrays(spec, w, layout) + ([bias] if spec.bias else [])
    if spec.mode == "kernel":
        arrays.append(pc.pattern_table(spec))
    db = spec.data_block
    n, c, h, wd = x.shape
    xin = x.reshape(n, c // db, db, h, wd).transpose(0, 1, 3, 4, 2).copy() if db else x
    out = tvm.runtime.tensor(np.zeros(spec.out_shape(), "float32"))
    lib.mod["main"](*[tvm.runtime.tensor(a) for a in (xin, *arrays)], out)
    y = out.numpy()
    if spec.out_block:
        y = y.transpose(0, 1, 4, 2, 3).reshape(n, spec.geo.o, spec.geo.oh, spec.geo.ow)
    return y


CASES = [  # n, c, h, w, o, stride, padding, data_block, out_block, mode, knobs
    (1, 5, 9, 11, 7, 1, (1, 1, 1, 1), 0, 0, "pattern", (4, 1)),
    (2, 16, 13, 13, 24, 1, (1, 1, 1, 1), 8, 8, "pattern", (3, 2)),
    (1, 16, 15, 17, 16, 2, (1, 1, 1, 1), 8, 8, "pattern", (4, 1)),
    (1, 12, 12, 12, 9, 2, (0, 0, 1, 1), 4, 0, "pattern", (2, 2)),
    (1, 8, 10, 10, 8, 1, (0, 0, 0, 0), 8, 8, "pattern", (8, 1)),
    (2, 16, 11, 9, 16, 1, (1, 1, 1, 1), 8, 8, "kernel", (1, 1)),
    (1, 16, 11, 9, 16, 2, (1, 1, 1, 1), 8, 0, "csr", (4, 1)),
    # 16 lanes: channel blocks transposed into pixel vectors on the way in and out, the
    # edge blocks (columns past the image, uneven padding, stride 2) on their own path
    (1, 32, 14, 14, 32, 1, (1, 1, 1, 1), 16, 16, "pattern", (7, 1), 16),
    (2, 16, 9, 37, 32, 2, (0, 1, 1, 0), 16, 16, "csr", (3, 2), 16),
    (1, 16, 6, 40, 16, 1, (1, 1, 1, 1), 16, 0, "pattern", (2, 3), 16),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[9]}-c{c[1]}-s{c[5]}-n{c[0]}" for c in CASES])
def test_kernel_matches_numpy(case):
    n, c, h, wd, o, s, pad, db, ob, mode, (rows, vectors), *lanes = case
    rng = np.random.default_rng(5)
    w = _pruned(o, c, seed=6, rate=2.0)
    layout = _layout(w)
    geo = ConvGeometry(n, c, h, wd, o, 3, 3, (s, s), pad, (1, 1), 1)
    nk = int((w != 0).sum()) if mode == "csr" else layout.kernels
    act = "relu" if mode != "kernel" else "clip"
    knobs = pc.PatternKnobs(rows, vectors, lanes[0] if lanes else 8, tile_copy=rows != 1)
    spec = pc.PatternConv(geo, layout.patterns, nk, knobs,
                          mode, db, ob, True, act, (-0.5, 0.75))
    x = rng.standard_normal((n, c, h, wd)).astype("float32")
    bias = rng.standard_normal(o).astype("float32")
    ref = pc.reference(x, w, geo) + bias[None, :, None, None]
    ref = np.maximum(ref, 0) if act == "relu" else np.clip(ref, -0.5, 0.75)
    np.testing.assert_allclose(_run_kernel(spec, w, layout, x, bias), ref, rtol=1e-4, atol=1e-4)


def test_kernel_refuses_other_convs():
    geo = ConvGeometry(1, 8, 8, 8, 8, 5, 5, (1, 1), (2, 2, 2, 2), (1, 1), 1)
    with pytest.raises(CompilationError, match="3x3"):
        pc.pattern_conv_func(pc.PatternConv(geo, ((0, 4),), 4))


def test_default_knobs_fit_the_image():
    for hw, rows in ((224, 8), (14, 7), (30, 6)):
        geo = ConvGeometry(1, 8, hw, hw, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1)
        knobs = pc.default_knobs(geo, 8)
        assert knobs.rows == rows and knobs.rows * knobs.vectors <= pc.MAX_ACCUMULATORS


# --- the pipeline --------------------------------------------------------------------


def _model(layers, size=20):
    """conv(+bias)+ReLU chain; ``layers``: (out channels, pruned, stride)."""
    rng = np.random.default_rng(7)
    nodes, inits, x, c = [], [], "x", 3
    h = size
    for i, (o, pruned, s) in enumerate(layers):
        w = (rng.standard_normal((o, c, 3, 3)) * 0.3).astype("float32")
        if pruned:
            w = prune(w, pattern_set([w], 8), 3.6)
        b = rng.standard_normal(o).astype("float32")
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4,
                                   strides=[s, s]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x, c, h = f"r{i}", o, (h - 1) // s + 1
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, h, h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_pipeline_puts_each_layer_on_its_kernel():
    import onnxruntime as ort

    import tvm_cocopie
    from tvm_cocopie.pipeline import PipelineOptions, run_until

    model = _model([(16, False, 1), (24, True, 1), (32, True, 2), (24, False, 1),
                    (16, True, 1)])
    tvm_cocopie.register()
    mod = tvm_cocopie.from_onnx(model)
    names = [gv.name_hint for gv, _ in run_until(mod, TARGET, "legalize").functions_items()]
    assert sum(n.startswith("conv2d_pattern_sparse") for n in names) == 3
    assert sum(n.startswith(("conv2d_nchwc", "conv2d_winograd")) for n in names) == 2
    assert sum(n.startswith("relu") for n in names) == 2  # pattern layers: epilogue inside
    off = run_until(mod, TARGET, "legalize", PipelineOptions(pattern_sparse=False))
    assert not any(gv.name_hint.startswith("conv2d_pattern") for gv, _ in off.functions_items())
    x = np.random.default_rng(8).standard_normal((1, 3, 20, 20)).astype("float32")
    ours = tvm_cocopie.compile(model, TARGET)(x)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


# --- model pruning and the CLI -------------------------------------------------------


def test_prune_model_and_cli(tmp_path):
    from tvm_cocopie.cli import main

    model = _model([(16, False, 1), (24, False, 1), (16, False, 2)])
    pruned, lr = prune_model(model, 6, 3.0)
    assert len(lr.pattern_set) == 6 and len(lr.layers) == 3
    assert lr.layers[0].connectivity == 1.0  # the first layer keeps its connections
    assert all(abs(layer.connectivity - 3.0) < 0.2 for layer in lr.layers[1:])
    inits = {t.name: numpy_helper.to_array(t) for t in pruned.graph.initializer}
    for layer in lr.layers[1:]:
        assert detect(inits[layer.weight]) is not None
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / "p.onnx"
    assert main(["prune", str(path), "--patterns", "8", "--connectivity", "3.6",
                 "-o", str(out)]) == 0
    lrj = json.loads((tmp_path / "p.lr.json").read_text())
    assert len(lrj["layers"]) == 3 and lrj["layers"][1]["knobs"]["rows"] >= 1
    assert main(["prune", str(path), "--patterns", "20", "-o", str(out)]) == 2
    assert main(["prune", str(path), "--connectivity", "0.5", "-o", str(out)]) == 2
    dense_1x1 = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        [numpy_helper.from_array(np.ones((2, 2, 1, 1), "float32"), "w")]))
    with pytest.raises(ModelError, match="3x3"):
        prune_model(dense_1x1)


# --- the benchmark's layer comparison --------------------------------------------------


def test_bench_layer_record_and_summary():
    import tvm_cocopie
    from tvm_cocopie.bench import pattern as bp

    tvm_cocopie.register()
    layer = bp.PatternLayer("t", 16, 16, 12)
    records = bp.compare_layer(layer, TARGET, [1], repeat=2, max_seconds=5.0)
    (rec,) = records
    assert rec["max_rel_err"] < 1e-4  # every contender against ONNX Runtime
    for key in ("dense_ms", "dense_direct_ms", "ort_ms", "pattern_ms", "noopt_ms",
                "reorder_ms", "lre_ms", "tuned_ms", "csr_ms"):
        assert rec[key] > 0
    assert rec["tuned_knobs"] in rec["tuning_ms"]["pattern"]
    assert rec["fkw_index_bytes"] < rec["csr_index_bytes"]
    summary = bp.summarize(records, [{"model": "m", "threads": 1, "speedup_vs_dense": 1.5,
                                      "speedup_vs_ort": 2.0}])
    assert summary["e2e_speedup_m"] == 1.5
    assert summary["speedup_vs_dense"] == pytest.approx(rec["speedup_vs_dense"])


def test_blocked_layouts_move_through_lane_transposes():
    """With channel blocks as wide as the pixel vectors, the tile's input is transposed
    into pixel vectors and its results back into channel blocks with lane shuffles (no
    element-by-element copy or store); other blocks take the element path."""
    w = _pruned(32, 32, seed=6, rate=2.0)
    layout = _layout(w)
    geo = ConvGeometry(1, 32, 14, 14, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1)

    def shuffles(block, lanes):
        spec = pc.PatternConv(geo, layout.patterns, layout.kernels,
                              pc.PatternKnobs(7, 1, lanes), "pattern", block, block)
        return pc.pattern_conv_func(spec).script().count("T.Shuffle(")

    # a 16-lane transpose is 4 rounds of 16 shuffles: on the way in one for blocks
    # inside the image and one for edge blocks (zeros selected in), one on the way out
    assert shuffles(16, 16) == 3 * 4 * 16
    assert shuffles(8, 16) == 0


def test_register_tile_lives_on_the_stack():
    """The accumulators are a stack slot (promoted to registers), not one of the
    workspace blocks the tile's input copy and result stage get: as a workspace block
    LLVM stored every accumulator after every kernel."""
    w = _pruned(32, 32, seed=6, rate=2.0)
    layout = _layout(w)
    geo = ConvGeometry(1, 32, 14, 14, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    spec = pc.PatternConv(geo, layout.patterns, layout.kernels, pc.PatternKnobs(7, 1, 16),
                          "pattern", 16, 16)
    func = pc.pattern_conv_func(spec).with_attr("global_symbol", "main")
    ir = tvm.compile(tvm.IRModule({"main": func}),
                     target=tvm.target.Target(TARGET)).mod.inspect_source("ll")
    blocks = [int(b) for b in re.findall(r"call ptr %\w+\(i32 1, i32 %\w+, i64 (\d+)", ir)]
    tile_bytes = 32 * 9 * 18 * 4  # the input copy: channels x rows x columns
    assert tile_bytes in blocks  # the pattern found the workspace calls
    assert 7 * 16 * 4 not in blocks


# --- the tile as a MetaSchedule decision ----------------------------------------------


def test_every_tile_choice_is_generated_and_computes_the_conv():
    """The design space samples an index of TILE_GRID; the cocopie TIR pipeline builds the
    kernel with that tile (kernel_knobs.realize_kernels): each one matches numpy."""
    from tvm.s_tir import Schedule

    from tvm_cocopie.kernel_knobs import knob_choice, realize
    from tvm_cocopie.schedules import PatternTiles
    from tvm_cocopie.target import cpu_info, parse_target
    from tvm_cocopie.tir_pipeline import tir_pipeline_for
    from tvm_cocopie.topi.cpu.tiling import vector_registers

    target = parse_target(TARGET)
    lanes = cpu_info(target).f32_lanes
    w = _pruned(2 * lanes, lanes, seed=3)
    layout = _layout(w)
    geo = ConvGeometry(1, lanes, 12, 12, 2 * lanes, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    spec = pc.PatternConv(geo, layout.patterns, layout.kernels, pc.default_knobs(geo, lanes),
                          "pattern", lanes, lanes, True, "relu")
    func = pc.pattern_conv_func(spec)
    assert PatternTiles().apply(func, target, False) is None  # built as generated
    assert PatternTiles().apply(pc.pattern_conv_func(spec).without_attr(pc.SPEC_ATTR),
                                target, True) is None
    space = PatternTiles().apply(func, target, True)[0]
    inst = space.trace.insts[0]
    assert inst.kind.name == "SampleCategorical"
    choices = pc.tile_choices(vector_registers(cpu_info(target)))
    # the design space starts at the pipeline's own tile
    assert choices[int(space.trace.decisions[inst])] == pc.TILE_GRID.index(
        (spec.knobs.rows, spec.knobs.vectors))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, lanes, 12, 12)).astype("float32")
    bias = rng.standard_normal(2 * lanes).astype("float32")
    ref = np.maximum(pc.reference(x, w, geo) + bias[None, :, None, None], 0)
    xb = x.reshape(1, 1, lanes, 12, 12).transpose(0, 1, 3, 4, 2)
    args = [tvm.runtime.tensor(a) for a in (np.ascontiguousarray(xb),
                                            *pc.weight_arrays(spec, w, layout), bias)]
    for k, choice in enumerate(choices):
        sch = Schedule(tvm.IRModule({"main": func}))
        space.trace.with_decision(inst, k, True).apply_to_schedule(sch, remove_postproc=True)
        chosen = sch.mod["main"]
        assert knob_choice(chosen) == choice
        tile = pc.spec_of(realize(chosen)).knobs
        assert (tile.rows, tile.vectors) == pc.TILE_GRID[choice]
        lib = tvm.compile(tvm.IRModule({"main": chosen.with_attr("global_symbol", "main")}),
                          target=target, tir_pipeline=tir_pipeline_for(target))
        out = tvm.runtime.tensor(np.zeros(spec.out_shape(), "float32"))
        lib["main"](*args, out)
        got = out.numpy().transpose(0, 1, 4, 2, 3).reshape(1, 2 * lanes, 12, 12)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=str(tile))
    with pytest.raises(CompilationError, match="tile choice 99"):
        pc.realize_knobs(func, 99)


def test_a_choice_from_an_unknown_generator_is_refused():
    from tvm.s_tir import Schedule

    from tvm_cocopie.kernel_knobs import REALIZE_ATTR, realize

    geo = ConvGeometry(1, 8, 6, 6, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    w = _pruned(8, 8)
    layout = _layout(w)
    spec = pc.PatternConv(geo, layout.patterns, layout.kernels, pc.PatternKnobs(2, 1, 8))
    sch = Schedule(pc.pattern_conv_func(spec).with_attr(REALIZE_ATTR, "tvm_cocopie.nowhere:f"))
    sch.annotate(sch.get_sblock(pc.kernel_block(spec)), "cocopie.knobs", 1)
    with pytest.raises(CompilationError, match="nowhere.*build it again"):
        realize(sch.mod["main"])


@pytest.mark.slow
def test_metaschedule_tunes_the_tile_and_the_pipeline_applies_it(tmp_path):
    """``tune_model`` (MetaSchedule, cocopie's space) measures tile choices of a pruned
    model's pattern kernels; the database's best applies in the pipeline and the model
    computes what ONNX Runtime computes."""
    import onnxruntime as ort

    import tvm_cocopie
    from tvm_cocopie.api import compile_model
    from tvm_cocopie.kernel_knobs import knob_choice
    from tvm_cocopie.pipeline import PipelineOptions, run_until
    from tvm_cocopie.target import parse_target
    from tvm_cocopie.transfer_tuning import readers
    from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels
    from tvm_cocopie.transfer_tuning.tune import tune_model

    model = _model([(16, False, 1), (32, True, 1), (32, True, 1)], size=24)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    tvm_cocopie.register()
    kernels = [k for k in extract_kernels(str(path), TARGET) if "pattern" in k.name]
    assert len(kernels) == 2
    tune_model(str(path), TARGET, tmp_path / "log", trials=8, kernels=kernels, population=8)
    records, _ = readers.read_logs(tmp_path / "log", TARGET)
    best = readers.best_per_workload(records)
    assert len(best) == 2 and all(r.run_secs for r in best)
    options = PipelineOptions(database=str(tmp_path / "log"))
    scheduled = run_until(tvm_cocopie.from_onnx(str(path)), parse_target(TARGET), "schedule",
                          options)
    chosen = [knob_choice(f) for gv, f in scheduled.functions_items()
              if gv.name_hint.startswith("conv2d_pattern")]
    assert len(chosen) == 2 and None not in chosen
    x = np.random.default_rng(9).standard_normal((1, 3, 24, 24)).astype("float32")
    ours = compile_model(str(path), TARGET, options=options)(x)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_runner_gets_valid_index_arrays_for_a_pattern_kernel():
    """MetaSchedule's runner knows a kernel by its parameters' shapes: for a pattern
    kernel's, alloc_arguments gives FKW arrays that index inside its weights (the
    kernel computes the conv those arrays and the weights describe); other kernels
    keep MetaSchedule's random tensors."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from tvm_cocopie.transfer_tuning.space import alloc_arguments

    geo = ConvGeometry(1, 16, 10, 10, 24, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    w = _pruned(24, 16, seed=5)
    layout = _layout(w)
    spec = pc.PatternConv(geo, layout.patterns, layout.kernels, pc.PatternKnobs(4, 1, 8),
                          bias=True)
    func = pc.pattern_conv_func(spec)
    info = [a.as_json() for a in ArgInfo.from_prim_func(func)]
    args = alloc_arguments(tvm.cpu(), info, 1)[0]
    reorder, offset, stride, index = (args[k].numpy() for k in range(1, 5))
    assert offset[-1] == layout.kernels and (np.diff(offset) >= 0).all()
    assert 0 <= index.min() and index.max() < 16 and sorted(reorder) == list(range(24))
    weights, bias = args[5].numpy(), args[6].numpy()
    ids = np.full((24, 16), -1)
    fkw = pc.FKW(layout.patterns, reorder, offset, stride, index, weights,
                 np.zeros(index.size, np.int32))
    for f in range(24):
        for p in range(len(layout.patterns)):
            lo, hi = offset[f] + stride[f, p], offset[f] + stride[f, p + 1]
            fkw.pattern_of[lo:hi] = p
            ids[f, index[lo:hi]] = p
    assert ((ids >= 0).sum(axis=1) >= layout.kernels // 24).all()  # spread over the filters
    dense = fkw.dense(16)
    x = args[0].numpy()
    ref = pc.reference(x, dense, geo) + bias[None, :, None, None]
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                      target=TARGET)
    lib["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), ref, rtol=1e-4, atol=1e-3)
    other = [a.as_json() for a in ArgInfo.from_prim_func(
        pc.pattern_conv_func(pc.PatternConv(geo, layout.patterns, layout.kernels,
                                            pc.PatternKnobs(4, 1, 8), "csr")))]
    assert pc.measurement_fkw([(i[1], tuple(i[2])) for i in other]) is None

"""Row locality (relay_passes/fusion/locality.py): which input dims a kernel reads at its
own output position, from the TIR; and the plan's use of it (red pairs that are
row-local become yellow, joined only when measured faster)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LAYER_NORM_PROLOGUE_ON_AVX2, make_model, ort_run
from onnx import TensorProto, helper
from tvm import te, topi

import tvm_cocopie
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.pipeline import PipelineOptions, run_until
from tvm_cocopie.relay_passes.fusion import locality
from tvm_cocopie.relay_passes.fusion.apply import DNNFusion
from tvm_cocopie.relay_passes.fusion.plan import ECG, merge_blocks, row_local
from tvm_cocopie.target import host_target

X = te.placeholder((4, 16, 32), name="X")
W1 = te.placeholder((32, 24), name="W1")
IMG = te.placeholder((1, 8, 10, 10), name="IMG")
K1 = te.placeholder((4, 8, 1, 1), name="K1")
K3 = te.placeholder((4, 8, 3, 3), name="K3")


def _dense_rows():
    k = te.reduce_axis((0, 32), "k")
    return te.compute((4, 16, 24), lambda b, i, j: te.sum(X[b, i, k] * W1[k, j], axis=k))


def _func(compute, *inputs):
    out = compute()
    return te.create_prim_func([*inputs, out])


@pytest.mark.parametrize("name, compute, inputs, expected", [
    # reductions along the last axis read their own row
    ("sum_last", lambda: topi.sum(X, axis=2, keepdims=True), (X,), {0: 0, 1: 1}),
    ("softmax", lambda: topi.nn.softmax(X, axis=2), (X,), {0: 0, 1: 1}),
    # a matmul reads its left operand at its own row, its right one at no row
    ("matmul_lhs", lambda: topi.matmul(topi.reshape(X, (64, 32)), W1), (X, W1), {}),
    ("dense_rows", lambda: _dense_rows(), (X, W1), {0: 0, 1: 1}),
    # a 1x1 conv reads its input at its own pixel; a 3x3 conv at a window: no row there
    # (the batch of 1 is no row either: an extent-1 iterator is the constant 0)
    ("conv1x1", lambda: topi.nn.conv2d_nchw(IMG, K1, 1, 0, 1), (IMG, K1), {2: 2, 3: 3}),
    ("conv3x3", lambda: topi.nn.conv2d_nchw(IMG, K3, 1, 1, 1), (IMG, K3), {}),
    # a transpose reads every input dim at the output dim it moves to
    ("transpose", lambda: topi.transpose(X, (0, 2, 1)), (X,), {0: 0, 1: 2, 2: 1}),
])
def test_row_map_from_tir(name, compute, inputs, expected):
    func = _func(compute, *inputs)
    assert locality.row_map(func, 0) == expected, name


def test_row_map_of_a_weight_and_compose_chains_maps():
    func = _func(lambda: topi.nn.conv2d_nchw(IMG, K1, 1, 0, 1), IMG, K1)
    assert locality.row_map(func, 1) == {0: 1}  # a weight row per output channel
    assert locality.compose({0: 0, 2: 1}, {1: 0, 3: 2, 4: 5}) == {1: 0, 3: 1}
    assert locality.intersect(None, {0: 1}) == {0: 1}
    assert locality.intersect({0: 1, 2: 2}, {0: 1, 2: 3}) == {0: 1}
    assert locality.slice_bytes([4, 16, 32], "float32", {0: 0, 1: 1}) == 128


def _const(rng, name, shape, scale=0.1):
    """A float initializer of standard-normal values times ``scale``."""
    return helper.make_tensor(name, TensorProto.FLOAT, shape,
                              (rng.standard_normal(shape) * scale).astype(np.float32).ravel())


def _forced_fusion(monkeypatch, tmp_path, model, **options):
    """``model`` up to the fusion stage with DNNFusion's measured decisions forced (a
    candidate whose fused kernel builds and computes its parts' numbers fuses):
    ``(the fused module, the options, the target)``."""
    import math

    import tvm

    from tvm_cocopie.relay_passes.fusion import profiler

    monkeypatch.setattr(profiler.MeasuredDecision, "_faster",
                        lambda self, entry: math.isfinite(entry.fused_us))
    opts = PipelineOptions(fusion="dnnfusion", fusion_db=str(tmp_path / "db.sqlite"), **options)
    target = tvm.target.Target(host_target())
    return run_until(from_onnx(model), target, "fusion", opts), opts, target


def _layer_norm_model(rows=16, width=64):
    """LayerNorm decomposed as ONNX exporters write it: two reductions along the row."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["v"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["y"])]
    eps = helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-5])
    return make_model(nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])],
                      initializers=[eps])


def test_layer_norm_reductions_are_row_local_and_red_without_it():
    # without the rewrite stage, which would make the chain one nn.layer_norm
    mod = run_until(from_onnx(_layer_norm_model()), host_target(), "legalize",
                    PipelineOptions(rewrite=False))
    graph = ECG.of(mod)
    means = [n for n in graph.nodes if n.kernel.startswith("mean")]
    assert len(means) == 2
    second = means[1]
    (square,) = second.producers
    assert row_local([second], square)
    assert not row_local([second], square, budget=16)  # a 256-byte row over the budget
    # without a measurement, nothing red is joined: two reductions stay apart
    fusion = DNNFusion()
    fusion(mod)
    owners = {n.index: i for i, b in enumerate(fusion.blocks) for n in b.nodes}
    assert owners[means[0].index] != owners[second.index]
    # a merge that always agrees joins them into one block, red pair or not
    merged = merge_blocks(fusion.blocks, lambda first, second: True)
    owners = {n.index: i for i, b in enumerate(merged) for n in b.nodes}
    assert owners[means[0].index] == owners[second.index]
    assert len(merged) == 1


def test_a_conv_window_is_not_row_local():
    """3x3 after 3x3: each output pixel reads nine of the producer's: red stays red."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w2"], ["y"], pads=[1, 1, 1, 1])]
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [8, 8, 3, 3],
                                rng.standard_normal(8 * 8 * 9).astype(np.float32).tolist())
             for n in ("w1", "w2")]
    model = make_model(nodes,
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
                       initializers=inits)
    mod = run_until(from_onnx(model), host_target(), "legalize")
    convs = [n for n in ECG.of(mod).nodes if n.kernel.startswith("conv")]
    assert len(convs) == 2
    second = convs[1]
    first = next(p for p in second.producers if p in convs or p.producers)
    assert not row_local([second], first)


def test_layer_norm_fused_into_one_kernel_matches_onnx_runtime(tmp_path):
    """Measured on this machine, the decomposed layer norm's kernels join (the row
    schedule runs them in one pass per row) and the numbers stay ONNX Runtime's."""
    model = _layer_norm_model(rows=256, width=256)
    # the chain's own reductions (the rewrite stage would make it one nn.layer_norm)
    opts = PipelineOptions(fusion="dnnfusion", fusion_db=str(tmp_path / "db.sqlite"),
                           rewrite=False)
    x = np.random.default_rng(0).standard_normal([256, 256]).astype(np.float32)
    got = tvm_cocopie.compile(model, options=opts)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def _linear_layer_norm_model(rows=128, width=256):
    """A transformer's output projection: MatMul + bias + residual, then LayerNormalization."""
    rng = np.random.default_rng(1)


    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Add", ["p", "b"], ["pb"]),
             helper.make_node("Add", ["pb", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "beta"], ["y"], axis=-1,
                              epsilon=1e-5)]
    inits = [_const(rng, "w", [width, width]), _const(rng, "b", [width]),
             _const(rng, "g", [width], 1.0), _const(rng, "beta", [width])]
    return make_model(nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])],
                      initializers=inits, opset=17)


def test_a_matmul_and_its_layer_norm_fused_keep_each_rows_partials_contiguous(
        tmp_path, monkeypatch):
    """Fused (the decision forced), the row tile runs the layer norm after its rows of the
    product; each row's lane partials are one vector (buffer ``[rows, lanes]``): laid out
    ``[lanes, rows]`` as ``rfactor`` makes them, every partial was a gather and a scatter
    (the fused kernel ran 203 us against 173 for its parts in BERT's projection)."""
    import re

    from tvm_cocopie.bench.fusion import kernel_calls
    from tvm_cocopie.relay_passes.fusion import profiler
    from tvm_cocopie.schedules import default_rules
    from tvm_cocopie.target import cpu_info

    model = _linear_layer_norm_model()
    fused, opts, target = _forced_fusion(monkeypatch, tmp_path, model)
    (name,) = [c.kernel for c in kernel_calls(fused)
               if "matmul" in c.kernel and "layer_norm" in c.kernel]
    script = profiler.scheduled_primfunc(fused[name], target, default_rules(target)).script()
    lanes = cpu_info(target).f32_lanes
    partials = re.findall(r"(\w+_rf) = T\.sblock_alloc_buffer\(\((.*?)\)\)", script)
    assert len(partials) == 2, script
    for _, shape in partials:
        dims = [int(d) for d in re.findall(r"T\.int64\((\d+)", shape)]
        assert dims[-1] == lanes, shape  # before: [lanes, 1, rows]
    x = np.random.default_rng(0).standard_normal([128, 256]).astype(np.float32)
    got = tvm_cocopie.compile(model, options=opts)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _pre_norm_linear_model(rows=37, width=64, out=96):
    """A pre-norm transformer's projection: LayerNormalization, then MatMul + bias + GELU
    (ViT, GPT: the normalized rows are the matmul's left operand)."""
    rng = np.random.default_rng(2)


    nodes = [helper.make_node("LayerNormalization", ["x", "g", "beta"], ["n"], axis=-1,
                              epsilon=1e-6),
             helper.make_node("MatMul", ["n", "w"], ["p"]),
             helper.make_node("Add", ["p", "b"], ["pb"]),
             helper.make_node("Relu", ["pb"], ["y"])]
    inits = [_const(rng, "g", [width], 1.0), _const(rng, "beta", [width]),
             _const(rng, "w", [width, out]), _const(rng, "b", [out])]
    return make_model(nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, width])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, out])],
                      initializers=inits, opset=17)


@pytest.mark.parametrize("rows, width", [
    pytest.param(37, 64, marks=LAYER_NORM_PROLOGUE_ON_AVX2),
    pytest.param(64, 64, marks=LAYER_NORM_PROLOGUE_ON_AVX2), (40, 120)])
def test_a_layer_norm_before_a_matmul_is_its_row_pass_and_the_normalized_rows_stay_local(
        tmp_path, monkeypatch, rows, width):
    """Fused (the decision forced), a layer norm feeding a matmul's rows is scheduled by
    the matmul rule (before: the rule failed on the reductions and the fusion was
    dropped as fallback-only, ViT-tiny kept its 25 layer norms apart): the statistics a
    parallel pass of their own, the normalization per row tile into a local copy of A
    (no buffer of all the normalized rows), rows not a multiple of the tile (37) too,
    rows not whole vectors (120 = 7 x 16 + 8: the tail's sums read only the input, and
    were computed for every row in every row's iteration until their row loop was
    merged with the pass's; PP-OCR rec's layer norms failed the fused kernel's check);
    the numbers are ONNX Runtime's."""
    import re

    from tvm_cocopie.bench.fusion import kernel_calls
    from tvm_cocopie.relay_passes.fusion import profiler
    from tvm_cocopie.schedules import default_rules

    model = _pre_norm_linear_model(rows=rows, width=width)
    fused, opts, target = _forced_fusion(monkeypatch, tmp_path, model)
    calls = [c.kernel for c in kernel_calls(fused)]
    (name,) = [k for k in calls if "matmul" in k and "layer_norm" in k]
    assert len(calls) == 1, calls
    rules = default_rules(target)
    assert profiler.first_rule(fused[name], target, rules).name == "matmul_packed"
    script = profiler.scheduled_primfunc(fused[name], target, rules).script()
    buffers = re.findall(r"(\w+) = T\.sblock_alloc_buffer\(\((.*?)\)(.*?)\)", script)
    full = [b for b, shape, _ in buffers
            if [int(d) for d in re.findall(r"T\.int64\((\d+)", shape)][-2:] == [rows, width]]
    assert [b for b in full if "local" not in b] == [], buffers
    x = np.random.default_rng(0).standard_normal([1, rows, width]).astype(np.float32)
    got = tvm_cocopie.compile(model, options=opts)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _conv_pool_model(window, channels=1):
    """Conv 3x3 + bias + ReLU, then a max pool of non-overlapping windows, then another
    conv (VGG's and CRNN's stages; CRNN's later pools are 2x1)."""
    rng = np.random.default_rng(3)


    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=list(window),
                              strides=list(window)),
             helper.make_node("Conv", ["m", "w2"], ["y"], pads=[1, 1, 1, 1])]
    out = [1, 16, 32 // window[0], 128 // window[1]]
    return make_model(nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                     [1, channels, 32, 128])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                      initializers=[_const(rng, "w", [32, channels, 3, 3], 0.3),
                                    _const(rng, "b", [32]), _const(rng, "w2", [16, 32, 3, 3])])


@pytest.mark.parametrize("window, rule", [((2, 2), "conv2d_nchwc"), ((2, 1), "conv2d_nchwc"),
                                          ((2, 2), "winograd")])
def test_a_conv_and_its_max_pool_fused_pool_each_band_of_rows_in_the_conv_loop(
        tmp_path, monkeypatch, window, rule):
    """Fused (the decision forced), conv + bias + ReLU + max pool is one kernel of the
    conv's rule, the direct conv's or Winograd's (before: both failed on the pool's
    reduction and the fusion was dropped as fallback-only): the pool runs inside a
    parallel loop, over each band of rows the conv's tiles (Winograd: its gather) just
    wrote; the numbers are ONNX Runtime's."""

    import tvm
    from tvm import s_tir

    from tvm_cocopie.bench.fusion import kernel_calls
    from tvm_cocopie.relay_passes.fusion import profiler
    from tvm_cocopie.schedules import default_rules

    channels = 16 if rule == "winograd" else 1
    model = _conv_pool_model(window, channels)
    fused, opts, target = _forced_fusion(monkeypatch, tmp_path, model,
                                          winograd="2" if rule == "winograd" else "auto")
    calls = [c.kernel for c in kernel_calls(fused)]
    (name,) = [k for k in calls if "conv2d" in k and "pool" in k]
    rules = default_rules(target)
    assert profiler.first_rule(fused[name], target, rules).name == rule
    sch = s_tir.Schedule(profiler.scheduled_primfunc(fused[name], target, rules))
    kinds = [sch.get(lp).kind for lp in sch.get_loops(sch.get_sblock("pool_max_update"))]
    assert tvm.tirx.ForKind.PARALLEL in kinds, kinds
    x = np.random.default_rng(0).standard_normal([1, channels, 32, 128]).astype(np.float32)
    got = tvm_cocopie.compile(model, options=opts)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _pooled_classifier_model():
    """Conv + ReLU, global average pool, flatten, Gemm: a CNN's head."""
    rng = np.random.default_rng(4)


    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1)]
    return make_model(nodes,
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 7, 7])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 100])],
                      initializers=[_const(rng, "w", [64, 16, 3, 3], 0.2), _const(rng, "b", [64]),
                                    _const(rng, "fc", [100, 64]), _const(rng, "fb", [100])])


def test_a_global_pool_before_the_classifier_is_computed_at_the_matmuls_root(
        tmp_path, monkeypatch):
    """Fused (the decision forced), global average pool + flatten + matmul is one kernel
    of the matmul rule (before: its reductions made the rule fail and the fusion was
    dropped as fallback-only): the pooled vector computed first, the blocked layout's
    lanes in vector accumulators; the numbers are ONNX Runtime's."""

    import tvm
    from tvm import s_tir

    from tvm_cocopie.bench.fusion import kernel_calls
    from tvm_cocopie.relay_passes.fusion import profiler
    from tvm_cocopie.schedules import default_rules

    model = _pooled_classifier_model()
    fused, opts, target = _forced_fusion(monkeypatch, tmp_path, model)
    (name,) = [c.kernel for c in kernel_calls(fused) if "mean" in c.kernel and "matmul" in c.kernel]
    rules = default_rules(target)
    assert profiler.first_rule(fused[name], target, rules).name == "matmul_packed"
    sch = s_tir.Schedule(profiler.scheduled_primfunc(fused[name], target, rules))
    reduction = [b for b in sch.get_child_blocks(sch.get_sblock("root"))
                 if "red" in sch.get(b).name_hint and "init" not in sch.get(b).name_hint]
    assert reduction, sch.mod.script()
    kinds = [sch.get(lp).kind for lp in sch.get_loops(reduction[0])]
    assert kinds[-1] == tvm.tirx.ForKind.VECTORIZED, kinds
    x = np.random.default_rng(0).standard_normal([1, 16, 7, 7]).astype(np.float32)
    got = tvm_cocopie.compile(model, options=opts)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _split_model(channels=32, size=16):
    """YOLO's C2f block: a conv, its result split in two halves along the channels, the
    second half read by a bottleneck (two 3x3 convs) and by the concat of both halves
    and the bottleneck's result."""
    rng = np.random.default_rng(5)
    half = channels // 2
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["y"]),
             helper.make_node("Split", ["y", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Conv", ["b", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r1"]),
             helper.make_node("Conv", ["r1", "w3", "b3"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r"]),
             helper.make_node("Concat", ["a", "b", "r"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2", "b2"], ["out"])]
    inits = [_const(rng, "w0", [channels, channels, 1, 1]), _const(rng, "b0", [channels]),
             _const(rng, "w1", [half, half, 3, 3]), _const(rng, "b1", [half]),
             _const(rng, "w3", [half, half, 3, 3]), _const(rng, "b3", [half]),
             _const(rng, "w2", [channels, channels + half, 1, 1]),
             _const(rng, "b2", [channels]),
             helper.make_tensor("sizes", TensorProto.INT64, [2], [half, half])]
    shape = [1, channels, size, size]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                      [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
                      initializers=inits, opset=13)


def test_a_split_read_by_two_kernels_is_copied_into_both(tmp_path, monkeypatch):
    """A slice read by the next conv and by a concat is computed by each of them (index
    remapping), not as a kernel of its own, and the numbers stay ONNX Runtime's."""
    from tvm_cocopie.bench.fusion import kernel_calls
    from tvm_cocopie.relay_passes.fusion.apply import shared_moves

    model = _split_model()
    legal = run_until(from_onnx(model), host_target(), "legalize")
    assert shared_moves(legal, ECG.of(legal))  # the second half has two readers
    fused, opts, target = _forced_fusion(monkeypatch, tmp_path, model)
    kernels = [c.kernel for c in kernel_calls(fused)]
    assert not any(k.startswith(("strided_slice", "split")) for k in kernels), kernels
    x = np.random.default_rng(0).standard_normal([1, 32, 16, 16]).astype(np.float32)
    got = tvm_cocopie.compile(model, target=target, options=opts)(x=x)
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)

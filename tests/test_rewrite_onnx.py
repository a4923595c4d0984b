"""Rewriting on imported ONNX models, checked against ONNX Runtime (DNNFusion §3.3):
Pad folded into Conv, transposes moved through elementwise ops, models with nothing
to rewrite left alone, partitions, and the FLOPs-and-bytes cost."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from conftest import assert_close, make_model, ort_run
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_cocopie
from tvm_cocopie.exprs import op_name
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.relay_passes import rewriting as rw
from tvm_cocopie.relay_passes.rewriting.cost import Cost, module_cost
from tvm_cocopie.relay_passes.rewriting.engine import Graph
from tvm_cocopie.relay_passes.rewriting.examples import build_example
from tvm_cocopie.relay_passes.rewriting.generated import GENERATED
from tvm_cocopie.relay_passes.rewriting.rule import Rule
from tvm_cocopie.relay_passes.rewriting.terms import V, op

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _ops(mod) -> list[str]:
    out = []
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            out.append(op_name(v) or (str(v.op.name) if isinstance(v, relax.Call)
                                       and hasattr(v.op, "name") else type(v).__name__))
    return out


def _run_stock(mod, feeds) -> list[np.ndarray]:
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(feeds[p.name]) for p in mod["main"].params])
    return [out.numpy()]


def pad_conv_model(mode="constant", value=None, opset=17, pads=(0, 0, 1, 2, 0, 0, 3, 0)):
    """x[1,3,9,9] -> Pad(pads, mode, value) -> Conv3x3 (+ bias)."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "B")
    inits = [w, b]
    if opset >= 11:
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        pad_in = ["x", "pads"]
        if value is not None:
            inits.append(numpy_helper.from_array(np.array(value, np.float32), "val"))
            pad_in.append("val")
        pad = helper.make_node("Pad", pad_in, ["xp"], mode=mode)
    else:
        pad = helper.make_node("Pad", ["x"], ["xp"], mode=mode, pads=list(pads),
                               value=value or 0.0)
    h = 9 + pads[2] + pads[6] - 2
    wd = 9 + pads[3] + pads[7] - 2
    return make_model(
        [pad, helper.make_node("Conv", ["xp", "W", "B"], ["y"])],
        [helper.make_tensor_value_info("x", F, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", F, [1, 4, h, wd])], inits, opset=opset)


FEEDS = {"x": RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)}


@pytest.mark.parametrize("opset", [10, 11, 18])
def test_constant_pad_imports_as_relax_pad_and_folds_into_conv(opset):
    model = pad_conv_model(opset=opset)
    mod = from_onnx(model)
    assert "nn.pad" in _ops(mod) and "call_tir" not in _ops(mod)
    new, stats = rw.rewrite_module(mod, rw.RULES)
    assert stats.applied["fold/pad-into-conv"] == 1
    assert "nn.pad" not in _ops(new)
    ref = ort_run(model, FEEDS)
    assert_close(_run_stock(mod, FEEDS), ref)
    assert_close(_run_stock(new, FEEDS), ref)


def test_pad_into_conv_through_the_cocopie_pipeline():
    """The pipeline's rewrite stage folds the pad; the compiled model stays exact."""
    from tvm_cocopie.pipeline import run_until
    from tvm_cocopie.target import host_target

    model = pad_conv_model()
    rewritten = run_until(tvm_cocopie.from_onnx(model), host_target(), "rewrite")
    assert "nn.pad" not in _ops(rewritten)
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(FEEDS["x"]), ort_run(model, FEEDS))


def test_each_rewrite_pass_keeps_its_own_stats():
    mod = tvm_cocopie.from_onnx(pad_conv_model())
    first, second = rw.MathPropertyRewrite(), rw.MathPropertyRewrite(max_rounds=0)
    assert first.stats is None
    first(mod)
    assert first.stats.applied["fold/pad-into-conv"] == 1 and second.stats is None


@pytest.mark.parametrize("mode,value,pads", [
    ("reflect", None, (0, 0, 1, 1, 0, 0, 2, 2)), ("edge", None, (0, 0, 1, 1, 0, 0, 2, 2)),
    ("constant", 1.5, (0, 0, 1, 1, 0, 0, 2, 2)), ("constant", None, (0, 0, -1, 1, 0, 0, 2, -1))])
def test_pads_the_conv_cannot_absorb_are_kept(mode, value, pads):
    """Reflect/edge pads and negative (cropping) pads keep the stock lowering; a
    non-zero constant is not the conv's zero padding: none is folded, and all still
    match ONNX Runtime."""
    model = pad_conv_model(mode=mode, value=value, pads=pads)
    mod = from_onnx(model)
    assert ("nn.pad" in _ops(mod)) == (mode == "constant" and min(pads) >= 0)
    new, stats = rw.rewrite_module(mod, rw.RULES)
    assert stats.applied["fold/pad-into-conv"] == 0
    assert_close(_run_stock(new, FEEDS), ort_run(model, FEEDS))


def transpose_sandwich_model(shared=False):
    """NCHW -> NHWC -> (Mul c, Relu, Sigmoid) -> NCHW, as layout-converting exporters
    write it; with ``shared`` the Relu output is a second graph output."""
    c = numpy_helper.from_array(RNG.uniform(0.5, 2, (1, 1, 6)).astype(np.float32), "c")
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Mul", ["t", "c"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["s"]),
             helper.make_node("Transpose", ["s"], ["y"], perm=[0, 3, 1, 2])]
    outs = [helper.make_tensor_value_info("y", F, [2, 6, 5, 4])]
    if shared:
        outs.append(helper.make_tensor_value_info("r", F, [2, 5, 4, 6]))
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 6, 5, 4])], outs, [c])


def test_transpose_pair_cancels_through_elementwise_ops():
    model = transpose_sandwich_model()
    mod = from_onnx(model)
    new, stats = rw.rewrite_module(mod, rw.RULES)
    assert stats.applied["layout/transpose-through-elementwise"] == 1
    assert "permute_dims" not in _ops(new)
    before, after = module_cost(mod), module_cost(new)
    assert after.flops == before.flops and after.bytes < before.bytes
    feeds = {"x": RNG.standard_normal((2, 6, 5, 4)).astype(np.float32)}
    assert_close(_run_stock(new, feeds), ort_run(model, feeds))


def test_transpose_not_moved_past_a_shared_intermediate():
    mod = from_onnx(transpose_sandwich_model(shared=True))
    _, stats = rw.rewrite_module(mod, rw.RULES)
    assert stats.applied["layout/transpose-through-elementwise"] == 0


def mlp_model():
    """Nothing to rewrite: MatMul -> Add(bias) -> Relu -> MatMul."""
    w1 = numpy_helper.from_array(RNG.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(RNG.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(RNG.standard_normal((32, 8)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [4, 16])],
                      [helper.make_tensor_value_info("y", F, [4, 8])], [w1, b1, w2])


@pytest.mark.parametrize("make", [mlp_model, lambda: __import__("conftest").conv_relu_model(1)])
def test_imported_model_with_nothing_to_rewrite_is_structurally_unchanged(make):
    mod = from_onnx(make())
    new, stats = rw.rewrite_module(mod, rw.RULES)
    assert not stats.applied
    assert tvm_ffi.structural_equal(new, mod)
    assert tvm_ffi.structural_equal(rw.MathPropertyRewrite()(mod), mod)


def _two_partitions():
    a, b = (relax.Var(n, relax.TensorType([4, 8], "float32")) for n in "ab")
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            m = bb.emit(relax.op.multiply(a, b))
            s = bb.emit(relax.op.nn.softmax(m))  # no property: a partition point
            gv = bb.emit_output(relax.op.add(s, relax.op.multiply(s, b)))
        bb.emit_func_output(gv)
    return bb.get()


def test_partitions_split_at_ops_without_properties():
    mod = _two_partitions()
    assert len(Graph(mod["main"]).partitions()) == 2
    # a math-category rule never matches across the softmax; the same rewrite as a
    # simplification (matching anywhere) does
    lhs = op("nn.softmax", op("multiply", V("X"), V("Y")), bind="sm")
    rhs = op("nn.softmax", V("X"), attrs_from="sm")
    as_math = Rule("test/through-softmax", "associative", lhs, rhs)
    as_simpl = Rule("test/through-softmax", "identity", lhs, rhs)
    assert not rw.rewrite_module(mod, [as_math])[1].applied
    assert rw.rewrite_module(mod, [as_simpl])[1].applied


def test_cost_counts_flops_and_bytes():
    rule = next(r for r in rw.RULES if r.name == "layout/transpose-transpose")
    mod, _ = build_example(rule)  # two permutes of a 2x3x4 float32 tensor
    assert module_cost(mod) == Cost(flops=0, bytes=4 * 24 * 4, ops=2, heavy=0)
    new, stats = rw.rewrite_module(mod, [rule])
    assert module_cost(new) == Cost() and stats.after == Cost()
    mod = _two_partitions()
    c = module_cost(mod)
    # 3 elementwise ops of 32 elements + softmax (5 FLOPs/element); each elementwise
    # op moves 3 x 128 bytes, the softmax 2 x 128
    assert c == Cost(flops=3 * 32 + 5 * 32, bytes=3 * 384 + 256, ops=4, heavy=32)


def test_clip_bounds_fold_to_scalar_constants():
    """The importer writes Clip's bounds as where(isnan(c), ∓inf, c) over scalar
    constants: folded to rank-0 constants (a rank-1 result would change the type)."""
    lo, hi = (numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
              (("lo", 0.0), ("hi", 6.0)))
    model = make_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                       [helper.make_tensor_value_info("x", F, [2, 8])],
                       [helper.make_tensor_value_info("y", F, [2, 8])], [lo, hi])
    mod = from_onnx(model)
    new, stats = rw.rewrite_module(mod, rw.RULES)
    assert stats.applied["fold/constant-subgraph"] == 4
    assert not {"isnan", "where"} & set(_ops(new))
    feeds = {"x": RNG.uniform(-3, 9, (2, 8)).astype(np.float32)}
    assert_close(_run_stock(new, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("name,size", [("table34", 64), ("bn_pad_cnn", 16),
                                       ("layout_sandwich", 16)])
def test_generated_graphs_rewrite_idempotently_and_match_ort(name, size):
    """The benchmark's generated graphs (Table 3.4 rows, simplifications, layout
    sandwiches): fewer FLOPs or bytes, a fixed point after one run, equal to ORT."""
    model, feeds = GENERATED[name][0](size)
    mod = from_onnx(model)
    once, stats = rw.rewrite_module(mod, rw.RULES)
    assert stats.applied
    before, after = module_cost(mod), module_cost(once)
    assert after.flops <= before.flops and (before - after).positive()
    twice, again = rw.rewrite_module(once, rw.RULES)
    assert not again.applied and tvm_ffi.structural_equal(twice, once)
    vm = relax.VirtualMachine(tvm.compile(once, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(feeds[p.name]) for p in once["main"].params])
    got = [o.numpy() for o in out] if not hasattr(out, "numpy") else [out.numpy()]
    assert_close(got, ort_run(model, feeds))

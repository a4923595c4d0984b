"""SOD² (issue 17): models with symbolic dims compiled once, on the fast CPU kernels.

Each model here is compiled once with its symbolic dims kept (``specialize=False``) and
run at several sizes, every output against ONNX Runtime; the kernels it runs are the
blocked ones (``conv2d_nchwc``, ``depthwise_nchwc``, Winograd), not TVM's generic
``conv2d``. Also: ``shapes=`` naming a dim keeps it symbolic, reshapes to computed
targets and nearest upsampling import with symbolic dims, broadcasts of dims equal only
at run time keep their shape, and ``dim_bounds`` plans the memory once.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_cocopie.api import compile_model
from tvm_cocopie.errors import CocopieError, InputShapeError, ModelError
from tvm_cocopie.models import build
from tvm_cocopie.pipeline import PipelineOptions
from tvm_cocopie.target import cpu_info, host_target

RTOL = 1e-4  # float32 convs summed in another order than ORT's, relative to the output


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _conv_model(c, o, k, s, groups=1) -> onnx.ModelProto:
    rng = np.random.default_rng(k * 10 + s)
    w = (rng.standard_normal((o, c // groups, k, k)) * 0.2).astype(np.float32)
    b = (rng.standard_normal(o) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=groups, kernel_shape=[k, k],
                              pads=[k // 2] * 4, strides=[s, s]),
             helper.make_node("Relu", ["y"], ["z"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, "H", "W"])],
                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", o, "OH", "OW"])],
                  [("w", w), ("b", b)])


def _kernels(compiled, inputs) -> collections.Counter:
    """Kernel names and counts of one call (the VM's instrument)."""
    from tvm.relax import VMInstrumentReturnKind

    seen = collections.Counter()

    def instrument(func, symbol, before, ret, *args):
        if before:
            seen[str(symbol)] += 1
        return VMInstrumentReturnKind.NO_OP

    compiled.vm.set_instrument(instrument)
    try:
        compiled(**inputs)
    finally:
        compiled.vm.set_instrument(None)
    return seen


def _check(compiled, model, inputs):
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, inputs)
    out = compiled(**inputs)
    outs = out if isinstance(out, (list, tuple)) else [out]
    for got, want in zip(outs, ref):
        got = np.asarray(got)
        assert got.shape == want.shape
        scale = max(1.0, float(np.abs(want).max()))
        assert float(np.abs(got - want).max()) <= RTOL * scale


@pytest.mark.parametrize("c,o,k,s,groups", [
    (16, 32, 3, 1, 1), (32, 32, 3, 2, 1), (32, 64, 1, 1, 1), (64, 128, 1, 2, 1),
    (64, 64, 3, 1, 64), (24, 24, 5, 2, 24), (96, 24, 3, 1, 4), (64, 64, 3, 2, 8)])
def test_conv_with_symbolic_batch_height_width(c, o, k, s, groups):
    """One build of a conv over symbolic N, H, W runs at sizes its tiles do not divide
    (1x1, odd, long rows) on the blocked kernels; grouped convs on GSPC (96 -> 24 in 4
    groups: on vectors of output pixels; 8 groups of 8: in segments), as static ones."""
    model = _conv_model(c, o, k, s, groups)
    compiled = compile_model(model, None, specialize=False)
    rng = np.random.default_rng(0)
    for n, h, w in [(1, 17, 23), (2, 5, 64), (1, 1, 1), (1, 32, 7)]:
        _check(compiled, model, {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)})
    names = _kernels(compiled, {"x": np.ones((1, c, 9, 9), np.float32)})
    # groups of whole vectors (8 of 8 on AVX2) run on the blocked kernel, group by group
    whole = (c // groups) % cpu_info(host_target()).f32_lanes == 0
    kind = ("conv2d_nchwc" if groups == 1 else "depthwise_nchwc" if groups == c
            else "gspc_pixels" if (c, groups) == (96, 4)
            else "conv2d_nchwc" if whole else "conv2d_gspc")
    assert any(kind in name for name in names), names
    assert not any(name.startswith(("conv2d", "fused_conv2d_add")) and "nchwc" not in name
                   for name in names), names


def test_batch_symbolic_resnet_matches_its_static_build():
    """A batch-symbolic ResNet-18 runs the static build's kernels (Winograd included):
    outputs equal to the static build's at batch 1 and 2, which each compile for their
    batch."""
    dynamic = compile_model(build("resnet18", dynamic_batch=True, image_size=64), None,
                            specialize=False)
    names = _kernels(dynamic, {"input": np.ones((1, 3, 64, 64), np.float32)})
    assert any("winograd" in name for name in names), names
    assert not any("conv2d" in name and "nchwc" not in name for name in names), names
    rng = np.random.default_rng(1)
    for batch in (1, 2):
        static = compile_model(build("resnet18", batch=batch, image_size=64), None)
        x = rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(dynamic(input=x)), np.asarray(static(input=x)),
                                   rtol=1e-5, atol=1e-5)


def _reshape_model() -> onnx.ModelProto:
    """conv -> Reshape(y, Concat(Slice(Shape(y), 0, 2), [-1])) -> Transpose, as p2o and
    ``x.view(x.size(0), x.size(1), -1)`` write it."""
    w = (np.random.default_rng(3).standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Shape", ["y"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["s2"]),
        helper.make_node("Concat", ["s2", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["y", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["z"], perm=[0, 2, 1]),
    ]
    inits = [("w", w), ("zero", np.array([0], np.int64)), ("two", np.array([2], np.int64)),
             ("minus1", np.array([-1], np.int64))]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "H", "W"])],
                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, "HW", 8])], inits)


def test_reshape_to_a_computed_target_imports_with_symbolic_dims():
    """The computed target becomes the constant [0, 0, -1] (SOD²'s constant propagation:
    the reshape moves from value-determined to shape-determined) and the model runs at
    every size."""
    model = _reshape_model()
    compiled = compile_model(model, None, specialize=False)
    rng = np.random.default_rng(0)
    for h, w in [(3, 5), (16, 16), (1, 40)]:
        _check(compiled, model, {"x": rng.standard_normal((1, 4, h, w)).astype(np.float32)})


def _neck_model(mode: str = "nearest") -> onnx.ModelProto:
    """A detector neck in small: a stride-2 branch upsampled 2x (nearest) added to the
    input's own conv, then concatenated with it: the two dims are equal only for even
    sizes, which the model takes."""
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 1, 1)) * 0.2).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["d"], kernel_shape=[3, 3], pads=[1] * 4,
                         strides=[2, 2]),
        helper.make_node("Resize", ["d", "", "scales"], ["u"], mode=mode,
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Conv", ["x", "w2"], ["l"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["u", "l"], ["a"]),
        helper.make_node("Concat", ["a", "l"], ["z"], axis=1),
    ]
    inits = [("w1", w1), ("w2", w2), ("scales", np.array([1, 1, 2, 2], np.float32))]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "H", "W"])],
                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, "H", "W"])],
                  inits)


def test_upsample_and_broadcast_of_run_time_equal_dims():
    """Nearest 2x upsampling imports with symbolic dims, and the sum of the upsampled
    branch with the other one (``((H - 1) // 2 + 1) * 2`` against ``H`` rows) keeps a
    shape, so the convs after it stay on the blocked kernels; an odd size, where the
    two differ, stops with an error instead of a wrong answer."""
    model = _neck_model()
    compiled = compile_model(model, None, specialize=False)
    rng = np.random.default_rng(0)
    for h, w in [(8, 12), (32, 2), (2, 64)]:
        _check(compiled, model, {"x": rng.standard_normal((1, 8, h, w)).astype(np.float32)})
    with pytest.raises(Exception):  # noqa: B017 - TVM's VM raises its own error type
        compiled(x=rng.standard_normal((1, 8, 7, 8)).astype(np.float32))


def _two_level_neck_model(out_channels: int = 8) -> onnx.ModelProto:
    """PP-OCR det's neck in small: two stride-2 levels, the deeper one upsampled and
    added to the other (the add's dims become a new dim, bound at run time), that sum
    upsampled again and concatenated with a full-size branch, then a conv: the concat's
    operands are equal only through the new dim's binding."""
    rng = np.random.default_rng(6)
    w = {name: (rng.standard_normal(shape) * 0.2).astype(np.float32) for name, shape in
         (("w1", (8, 8, 3, 3)), ("w2", (8, 8, 3, 3)), ("w3", (8, 8, 1, 1)),
          ("w4", (out_channels, 16, 3, 3)))}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["d1"], kernel_shape=[3, 3], pads=[1] * 4,
                         strides=[2, 2]),
        helper.make_node("Conv", ["d1", "w2"], ["d2"], kernel_shape=[3, 3], pads=[1] * 4,
                         strides=[2, 2]),
        helper.make_node("Resize", ["d2", "", "scales"], ["u1"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Add", ["u1", "d1"], ["a"]),
        helper.make_node("Resize", ["a", "", "scales"], ["u2"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Conv", ["x", "w3"], ["l"], kernel_shape=[1, 1]),
        helper.make_node("Concat", ["u2", "l"], ["c"], axis=1),
        helper.make_node("Conv", ["c", "w4"], ["z"], kernel_shape=[3, 3], pads=[1] * 4),
    ]
    inits = [*w.items(), ("scales", np.array([1, 1, 2, 2], np.float32))]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "H", "W"])],
                  [helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                 [1, out_channels, "H", "W"])],
                  inits)


def test_dims_bound_at_run_time_do_not_hide_equal_shapes():
    """The new dim of a neck's sum is replaced by the expression it is bound to
    (``frontend.importer.inline_bound_dims``), so the concat two levels up still has a
    shape after the layout stage rebuilds it (PP-OCR det with symbolic H and W did not
    compile) and the conv after it runs on the blocked kernels; sizes that break the
    run-time equality still stop with an error."""
    model = _two_level_neck_model()
    compiled = compile_model(model, None, specialize=False,
                             options=PipelineOptions(divisible_dims=True))
    rng = np.random.default_rng(1)
    for h, w in [(16, 24), (8, 32)]:
        inputs = {"x": rng.standard_normal((1, 8, h, w)).astype(np.float32)}
        _check(compiled, model, inputs)
        assert not [k for k in _kernels(compiled, inputs) if "conv2d" in k and "nchwc" not in k]
    # its checks pass at multiples of 4 only: H and W are written as 4 times a new dim
    # (relay_passes.dynamic.divisibility), any other size refused with a clear error
    with pytest.raises(InputShapeError, match="H = 10 is not a multiple of 4"):
        compiled(x=rng.standard_normal((1, 8, 10, 16)).astype(np.float32))


def test_divisible_dims_are_found_and_can_be_switched_off():
    """The neck's checks pass at multiples of 4 in H and W: both become 4 times a new dim
    and no check is left; without ``divisible_dims`` the graph keeps its checks and the
    same numbers."""
    from tvm_cocopie.frontend.importer import from_onnx
    from tvm_cocopie.relay_passes.dynamic.divisibility import checks, divisible_dims, divisors

    model = _two_level_neck_model()
    mod = from_onnx(model)
    assert {v.name: m for v, m in divisors(mod["main"]).items()} == {"H": 4, "W": 4}
    assert checks(mod["main"]) and not checks(divisible_dims(mod)["main"])
    kept = compile_model(model, None, specialize=False,
                         options=PipelineOptions(divisible_dims=False))
    x = np.random.default_rng(2).standard_normal((1, 8, 12, 16)).astype(np.float32)
    _check(kept, model, {"x": x})
    with pytest.raises(Exception):  # noqa: B017 - the kept check fails in TVM's VM
        kept(x=np.zeros((1, 8, 10, 16), np.float32))


def test_resize_modes_that_need_sizes_are_refused_clearly():
    with pytest.raises(ModelError, match="symbolic dims supports nearest"):
        compile_model(_neck_model("linear"), None, specialize=False)


def test_shapes_may_name_a_dim_to_keep_it_symbolic():
    """``shapes`` fixes the batch and keeps H and W by name; a bad entry is refused."""
    model = _conv_model(8, 8, 3, 1)
    compiled = compile_model(model, None, shapes={"x": [1, 8, "H", "W"]}, specialize=False)
    rng = np.random.default_rng(2)
    for h, w in [(5, 9), (12, 3)]:
        _check(compiled, model, {"x": rng.standard_normal((1, 8, h, w)).astype(np.float32)})
    with pytest.raises(InputShapeError, match="identifier"):
        compile_model(model, None, shapes={"x": [1, 8, "2*h", "W"]}, specialize=False)
    with pytest.raises(InputShapeError, match="fixed at 8"):
        compile_model(model, None, shapes={"x": [1, "C", "H", "W"]}, specialize=False)


def test_dim_bounds_plan_the_memory_once():
    """With the width bounded, the intermediates' storages are allocated once per VM and
    each call's tensors are views into them: no allocation per call but the output's,
    the same results; a width above the bound is refused before the run."""
    model = _conv_model(8, 16, 3, 1)
    chain = onnx.ModelProto()
    chain.CopyFrom(model)
    w2 = (np.random.default_rng(9).standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32)
    chain.graph.initializer.append(numpy_helper.from_array(w2, "w2"))
    chain.graph.node.append(helper.make_node("Conv", ["z", "w2"], ["z2"], kernel_shape=[3, 3],
                                             pads=[1] * 4))
    chain.graph.node.append(helper.make_node("Relu", ["z2"], ["out"]))
    del chain.graph.output[:]
    chain.graph.output.append(
        helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 16, "OH", "OW"]))
    shapes = {"x": [1, 8, 16, "W"]}
    plain = compile_model(chain, None, shapes=shapes, specialize=False)
    bounded = compile_model(chain, None, shapes=shapes, specialize=False,
                            options={"dim_bounds": {"W": 64}})
    rng = np.random.default_rng(4)
    for w in (64, 10, 1, 10, 64):  # the views made again when the size changes
        x = {"x": rng.standard_normal((1, 8, 16, w)).astype(np.float32)}
        np.testing.assert_array_equal(np.asarray(bounded(**x)), np.asarray(plain(**x)))
    calls = _kernels(bounded, x)
    assert calls["vm.builtin.alloc_storage"] <= 1 and calls["vm.builtin.alloc_tensor"] <= 1
    # the views of a size are made by the scratch lookup, kept while the size stays: no
    # view, shape or null-value builtin per intermediate tensor and call
    assert "runtime.TVMTensorCreateView" not in calls, calls
    assert calls["vm.builtin.make_shape"] <= 3, calls  # the views' dims, the output's
    assert _kernels(plain, x)["vm.builtin.alloc_storage"] > 1
    with pytest.raises(InputShapeError, match="above the bound 64"):
        bounded(x=rng.standard_normal((1, 8, 16, 65)).astype(np.float32))


def test_dim_bounds_are_checked():
    with pytest.raises(CocopieError, match="positive"):
        compile_model(_conv_model(8, 8, 3, 1), None, specialize=False,
                      options={"dim_bounds": {"W": 0}})


def test_divisible_dims_with_a_wide_tile_conv_and_bounds():
    """42 output channels take the wide-tile conv (chunks of 2, outputs padded to whole
    tiles and sliced): over a width written as 4 times a quotient its slice inlines
    (TVM proved the padding covers ``(x - 1) // m + 1`` tiles, not ``(x + m - 1) // m``),
    the build matches ONNX Runtime, and with bounds the memory is planned once."""
    from tvm_cocopie.bench.runtime_stats import compiled_model_stats

    model = _two_level_neck_model(out_channels=42)
    compiled = compile_model(model, None, specialize=False, options=PipelineOptions(
        divisible_dims=True, dim_bounds={"H": 64, "W": 96}))
    rng = np.random.default_rng(4)
    for h, w in [(8, 12), (32, 96)]:
        inputs = {"x": rng.standard_normal((1, 8, h, w)).astype(np.float32)}
        _check(compiled, model, inputs)
        assert compiled_model_stats(compiled, inputs)["intermediate_allocations_per_run"] == 0


def test_period_of_the_checks():
    """Sizes that pass with period ``m``, every multiple included: ``m``; every size, none,
    or multiples failing: no divisor."""
    from tvm_cocopie.relay_passes.dynamic.divisibility import period

    assert period([k % 32 in (0, 29, 30, 31) for k in range(1, 257)]) == 32
    assert period([k % 4 == 0 for k in range(1, 257)]) == 4
    assert period([True] * 64) is None
    assert period([k % 4 == 1 for k in range(1, 257)]) is None


def _exported_functions(compiled) -> dict[str, str]:
    """``{symbol: its LLVM define line}`` of the kernels' packed wrappers."""
    ll = compiled.executable.mod.imports[0].inspect_source("ll")
    return {line.split("@", 1)[1].split("(", 1)[0]: line for line in ll.splitlines()
            if line.startswith("define") and "@__tvm_ffi_" in line}


def test_every_kernel_of_a_symbolic_model_keeps_noalias():
    """A symbolic model's module holds Relax's shape_func; without tirx.noalias on it,
    TVM's code generation dropped noalias from every kernel when shape_func came last in
    the module (here: one matmul kernel, which sorts before it; CRNN's kernels: 2-3x
    slower, every FMA's accumulator stored)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"]),
                    helper.make_node("Relu", ["y"], ["z"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["S", 64])],
                   [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["S", 32])], [("w", w)])
    compiled = compile_model(model, specialize=False)
    defines = _exported_functions(compiled)
    assert "__tvm_ffi_shape_func" in defines and max(defines) == "__tvm_ffi_shape_func"
    assert all("noalias" in line for line in defines.values()), defines
    x = rng.standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_allclose(compiled(x), np.maximum(x @ w, 0), rtol=RTOL, atol=1e-5)


def test_mark_noalias_only_where_no_two_pointers_can_alias():
    import tvm
    from tvm.script import tirx as T

    from tvm_cocopie.relay_passes.noalias import has_noalias, mark_noalias

    @T.prim_func(private=True)
    def one(h: T.Buffer((4,), "int64")):
        h[1] = h[0] * 2

    @T.prim_func(private=True)
    def two(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            b[i] = a[i] + 1.0

    @T.prim_func(private=True)
    def one_and_a_scalar(h: T.Buffer((4,), "int64"), n: T.int64):
        h[1] = h[0] * n

    mod = mark_noalias(tvm.IRModule({"one": one, "two": two, "scalar": one_and_a_scalar}))
    assert has_noalias(mod["one"]) and has_noalias(mod["scalar"])
    assert not has_noalias(mod["two"])  # its author promised nothing: left as it is


def _rows_model(n: int) -> onnx.ModelProto:
    """LayerNormalization then Softmax over a last axis of ``n`` with symbolic rows
    ("S" tokens): an encoder's LN and a recognizer's classifier softmax."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1,
                              epsilon=1e-5),
             helper.make_node("Softmax", ["ln"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "g"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    graph = helper.make_graph(
        nodes, "rows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["S", n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["S", n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


def test_row_kernels_with_symbolic_rows_are_the_static_ones():
    """A layer norm and a softmax over a static last axis with a run-time row count
    take the row kernels a static build takes (LN imported as one op, the softmax's
    reductions in whole vectors and a tail): decomposed, the LN was 3 kernels, and the
    softmax TOPI's scalar row maximum (PP-OCR rec's 6625 classes: 3.4x static)."""
    from tvm_cocopie.frontend.importer import from_onnx
    from tvm_cocopie.pipeline import run_until
    from tvm_cocopie.target import host_target

    model = _rows_model(100)
    mod = from_onnx(model)
    assert "R.nn.layer_norm" in mod["main"].script()
    legal = run_until(mod, host_target(2), "legalize")
    names = [gv.name_hint for gv, f in legal.functions_items() if hasattr(f, "body")]
    softmax = [legal[n] for n in names if "softmax" in n]
    assert softmax and "softmax_maxelem_body" in softmax[0].script()
    compiled = compile_model(model, specialize=False)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for rows in (1, 7, 40):
        x = np.random.default_rng(rows).standard_normal((rows, 100)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(compiled(x)), session.run(None, {"x": x})[0],
                                   rtol=1e-4, atol=1e-5)

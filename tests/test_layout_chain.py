"""The blocked layout through whole graphs of the zoo's newer families: channel splits
and concats (YOLO's C2f), nearest upsampling (its neck), channel shuffles (ShuffleNetV2),
a BiLSTM's stacked outputs (a CRNN), and the bisection that keeps one conv in NCHW
when TVM's ConvertLayout fails on a graph, instead of dropping the layout everywhere."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
import tvm
from conftest import avx2_defect
from tvm import relax

from tvm_cocopie.api import compile_model
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.models.workloads import get_workload
from tvm_cocopie.pipeline import run_until
from tvm_cocopie.relay_passes.layout import layout_transforms, shape_ops
from tvm_cocopie.target import host_target


def _layout_stage(name: str, size: int = 64) -> tvm.IRModule:
    wl = get_workload(name, image_size=size)
    return run_until(from_onnx(wl.model, shapes=wl.shapes), host_target(2), "layout")


def _convs(mod: tvm.IRModule) -> tuple[int, int]:
    """(blocked convs, all convs) in ``main``."""
    blocked = total = 0
    for binding in mod["main"].body.blocks[0].bindings:
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                value.op.name == "relax.nn.conv2d":
            total += 1
            blocked += str(value.attrs.data_layout).endswith("c")
    return blocked, total


# (model, most layout transforms): the graph's input and outputs (YOLO's three head
# outputs; its one-channel DFL conv reads its NCHW softmax as it comes; the CRNN's gray
# stem reads NCHW and writes blocks), a ShuffleNet's 16 shuffles (each one permuting
# kernel) and two of its stage changes of channel block (2c to 4c, 4c to 8c: one
# re-blocking transform each for the depthwise conv; the 1x1 convs read the old block)
@pytest.mark.parametrize("name,most", [("yolo_detector", 4), ("crnn_large_vocab", 1),
                                       ("shufflenetv2", 20), ("mobilenetv3_small", 2)])
def test_blocked_layout_runs_through_the_graph(name, most):
    mod = _layout_stage(name)
    blocked, total = _convs(mod)
    assert blocked >= total - 1, f"{blocked} of {total} convs blocked"  # an RGB/gray stem may not
    assert 0 < layout_transforms(mod) <= most


@pytest.mark.parametrize("name,most", [("ppocr_det", 4), ("ppocr_rec", 4)])
def test_real_paddle_exports_stay_blocked(name, most):
    """PP-OCR's hard-swish scales and offsets are ``(1,)``-shaped constants: brought to a
    scalar, the broadcast no longer returns each feature map to NCHW (64 transforms each
    before)."""
    wl = get_workload(name)
    mod = run_until(from_onnx(wl.model, shapes=wl.shapes), host_target(2), "layout")
    assert layout_transforms(mod) <= most


def test_a_failing_conversion_keeps_one_conv_nchw_not_the_whole_graph(monkeypatch, caplog):
    """With the split rewrite off, TVM's ConvertLayout fails on YOLO's C2f split: the
    bisection finds the conv that triggers it and converts all the others."""
    monkeypatch.setattr(shape_ops, "REWRITES", {"relax.stack": shape_ops.REWRITES["relax.stack"]})
    with caplog.at_level(logging.WARNING):
        mod = _layout_stage("yolo_detector")
    blocked, total = _convs(mod)
    assert "stays NCHW" in caplog.text
    assert total - 12 <= blocked < total


def _concat_head_module(rng) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """Two 24-channel 1x1 convs, concatenated, a 48-channel 1x1 conv, ReLU and a
    one-channel head: on a 16-lane target the concat is in 8-channel blocks and the
    48-channel conv's own block is 16; the head has one output channel."""
    from tvm.relax import op as R

    weights = [rng.standard_normal(shape).astype("float32") * 0.2
               for shape in ((24, 24, 1, 1), (24, 24, 1, 1), (48, 48, 1, 1), (1, 48, 1, 1))]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 24, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = [relax.const(v) for v in weights]
            a = bb.emit(R.nn.conv2d(x, w[0]))
            b = bb.emit(R.nn.relu(R.nn.conv2d(x, w[1])))
            c = bb.emit(R.concat([a, b], axis=1))
            d = bb.emit(R.nn.relu(R.nn.conv2d(c, w[2])))
            out = bb.emit_output(R.nn.conv2d(d, w[3]))
        bb.emit_func_output(out)
    return bb.get(), weights


def _conv1x1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0])


def test_convs_read_their_producers_channel_block_and_heads_stay_blocked(caplog):
    """TVM's ConvertLayout cannot move a tensor from 8- to 16-channel blocks ("Invalid
    layout axis 16b"): the 48-channel conv after a concat of 8-channel blocks reads them
    as they are (it stayed NCHW, with a transform on each side, before), and the
    one-channel head reads blocked input and writes NCHW (it stayed NCHW, behind an
    unblocking transform). The numbers are numpy's."""
    rng = np.random.default_rng(0)
    mod, w = _concat_head_module(rng)
    with caplog.at_level(logging.WARNING):
        laid = run_until(mod, host_target(2), "layout")
    assert "stays NCHW" not in caplog.text
    blocked, total = _convs(laid)
    assert blocked == total == 4
    assert layout_transforms(laid) == 1  # the input's; the head writes the output in NCHW
    x = rng.standard_normal((1, 24, 8, 8)).astype("float32")
    c = np.concatenate([_conv1x1(x, w[0]), np.maximum(_conv1x1(x, w[1]), 0)], axis=1)
    want = _conv1x1(np.maximum(_conv1x1(c, w[2]), 0), w[3])
    got = compile_model(mod, target=host_target(2))(x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def _reblock_module(block_in: int, block_out: int, depthwise: bool) -> tvm.IRModule:
    """``x`` in blocks of ``block_in`` unblocked and blocked again by ``block_out`` (as
    ConvertLayout and the sink pass leave it) for a 1x1 conv, and a depthwise conv if
    asked (its input and output blocks are one: it cannot read ``x``'s)."""
    from tvm.relax import op as R

    from tvm_cocopie.relay_passes.layout import reblock

    channels = 48
    rng = np.random.default_rng(1)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels // block_in, 6, 6, block_in), "float32"))
    blocked = f"NCHW{block_out}c"
    with bb.function("main", [x]):
        with bb.dataflow():
            u = bb.emit(R.layout_transform(x, reblock._unblock_map(block_in)))
            t = bb.emit(R.layout_transform(u, reblock._block_map(block_out)))
            w = relax.const(rng.standard_normal((channels, channels, 1, 1)).astype("float32"))
            outs = [bb.emit(R.nn.conv2d(t, w, data_layout=blocked, out_layout=blocked))]
            if depthwise:
                t2 = bb.emit(R.layout_transform(u, reblock._block_map(block_out)))
                dw = relax.const(rng.standard_normal((channels, 1, 3, 3)).astype("float32"))
                outs.append(bb.emit(R.nn.conv2d(t2, dw, padding=1, groups=channels,
                                                data_layout=blocked, out_layout=blocked)))
            out = bb.emit_output(relax.Tuple(outs) if depthwise else outs[0])
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("depthwise", [pytest.param(False, marks=avx2_defect(
    "a lone 1x1 conv keeps one layout transform instead of reading x in its 8-channel "
    "blocks")), True])
def test_a_tensor_moved_between_channel_blocks_through_nchw(depthwise):
    """Alone, the 1x1 conv reads ``x`` in its own 8-channel blocks (no transform); beside
    a depthwise conv, which cannot, the two transforms are one re-blocking transform.
    The outputs are the same as before the rewrite."""
    from tvm_cocopie.relay_passes.layout import reblocked_conv_inputs

    mod = _reblock_module(8, 16, depthwise)
    target = host_target(2)
    with tvm.target.Target(target):
        new = reblocked_conv_inputs(target)(mod)
    # as in the layout stage: the dead copies dropped, the transform of each reader one
    new = relax.transform.EliminateCommonSubexpr()(relax.transform.DeadCodeElimination()(new))
    convs = [b.value for b in new["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
    assert layout_transforms(new) == (1 if depthwise else 0)
    assert [str(c.attrs.data_layout) for c in convs] == \
        (["NCHW16c", "NCHW16c"] if depthwise else ["NCHW8c"])
    x = np.random.default_rng(2).standard_normal((1, 6, 6, 6, 8)).astype("float32")
    want, got = (compile_model(m, target=target, adaptive_threads=False)(x) for m in (mod, new))
    for a, b in zip(got if depthwise else [got], want if depthwise else [want]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def _conv_then_match_cast() -> tvm.IRModule:
    """conv -> add -> match_cast to a shape equal only at run time -> relu (PP-OCR det's
    neck with symbolic H and W has such casts before its concat)."""
    bb = relax.BlockBuilder()
    h, w = tvm.tirx.Var("H", "int64"), tvm.tirx.Var("W", "int64")
    x = relax.Var("x", relax.TensorType((1, 16, h, w), "float32"))
    weight = np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype(np.float32)
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(weight), padding=[1, 1, 1, 1]))
            a = bb.emit(relax.op.add(c, c))
            cast = bb.match_cast(a, relax.TensorType((1, 16, (h + 3) // 4 * 4, w), "float32"))
            out = bb.emit_output(relax.op.nn.relu(cast))
        bb.emit_func_output(out)
    return bb.get()


def test_a_match_cast_does_not_keep_its_conv_in_nchw(caplog):
    """TVM's ConvertLayout failed on the cast of a blocked tensor, so the blocked layout
    kept the conv NCHW (with a warning); the cast now reads its input through an
    identity without a layout rule, removed right after the conversion."""
    mod = _conv_then_match_cast()
    with caplog.at_level(logging.WARNING):
        out = run_until(mod, host_target(), "layout")
    assert "stays NCHW" not in caplog.text
    convs = [b.value for b in out["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
    assert convs and str(convs[0].attrs.data_layout) != "NCHW"
    assert "stop_lift_params" not in out.script()
    compiled = compile_model(mod, specialize=False)
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 5)).astype(np.float32)
    ref = compile_model(mod, options={"layout": False}, specialize=False)(x)
    np.testing.assert_allclose(compiled(x), ref, rtol=1e-4, atol=1e-4)


def _symbolic_fpn_neck() -> onnx.ModelProto:
    """x -> conv -> c1; c1 -> stride-2 conv -> nearest 2x upsample -> + c1 -> conv, with
    symbolic H and W: the sum's operands are equal in shape only at run time (even sizes),
    so the import reads one through a ``match_cast`` (a detector neck's top-down path)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)

    def weight(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2,
                                       name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Resize", ["c2", "", "scales"], ["up"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Add", ["up", "c1"], ["s"]),
        helper.make_node("Conv", ["s", "w3"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = [weight("w1", (16, 16, 3, 3)), weight("w2", (16, 16, 3, 3)),
             weight("w3", (16, 16, 3, 3)),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    graph = helper.make_graph(
        nodes, "fpn_neck", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                          [1, 16, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, "H", "W"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_a_symbolic_neck_stays_blocked_through_its_cast_and_upsampling():
    """The match_cast of a blocked level, the add it feeds and the upsampling ``take``
    after it are moved into the blocked layout (with symbolic dims ConvertLayout left them
    NCHW: PP-OCR det's neck ran 6 feature-map transforms per call its static build does
    not have); only the graph's input and output are transformed; numbers = ORT."""
    import onnxruntime as ort

    model = _symbolic_fpn_neck()
    mod = run_until(from_onnx(model), host_target(2), "layout")
    assert "R.match_cast" in mod.script()  # the case this test is about
    assert layout_transforms(mod) == 2, mod.script()
    compiled = compile_model(model, specialize=False)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for h, w in ((16, 24), (32, 10)):
        x = np.random.default_rng(h).standard_normal((1, 16, h, w)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(compiled(x)), session.run(None, {"x": x})[0],
                                   rtol=1e-4, atol=1e-4)

"""The conv-chain schedule (schedules/cpu/conv_chain.py): a depthwise conv and the 1x1
conv after it in one nest over output rows, a 1x1 conv and the depthwise conv after it
chunk by chunk, against the same fused function left unscheduled (TVM's plain loops) on
random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from conftest import allocated_elements, make_model
from onnx import TensorProto, helper
from tvm import relax

from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.pipeline import run_until
from tvm_cocopie.relay_passes.fusion.apply import fuse_blocks
from tvm_cocopie.relay_passes.fusion.plan import ECG, Block
from tvm_cocopie.schedules.cpu.conv_chain import ConvChain
from tvm_cocopie.target import host_target


def _weigher(rng):
    """``weight(name, shape)``: an initializer of standard-normal values x 0.2."""
    def weight(name, shape):
        values = (rng.standard_normal(int(np.prod(shape))) * 0.2).astype(np.float32)
        return helper.make_tensor(name, TensorProto.FLOAT, shape, values.tolist())
    return weight


def _relu6_bounds() -> list:
    """The ``lo`` and ``hi`` initializers of a ReLU6 written as ``Clip``."""
    return [helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]),
            helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])]


def _dw_pw_model(out_ch: int, expanded: int, size: int):
    rng = np.random.default_rng(0)

    weight = _weigher(rng)

    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["a"], group=expanded,
                              pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["r"]),
             helper.make_node("Conv", ["r", "wp", "bp"], ["y"])]
    inits = [weight("wd", [expanded, 1, 3, 3]), weight("bd", [expanded]),
             weight("wp", [out_ch, expanded, 1, 1]), weight("bp", [out_ch]),
             *_relu6_bounds()]
    return make_model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, expanded, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_ch, size, size])],
        initializers=inits)


def _fused_pair(model):
    """The depthwise conv, its epilogue, the 1x1 conv and its bias as one PrimFunc."""
    mod = run_until(from_onnx(model), host_target(), "legalize")
    group = [n for n in ECG.of(mod).nodes if not n.kernel.startswith("te_layout")]
    fused = relax.transform.FuseTIR()(fuse_blocks(mod, [Block(group, group[-1].kind)]))
    (func,) = [f for gv, f in fused.functions_items()
               if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint.startswith("fused")]
    return func.with_attr("global_symbol", "main")


def _run(func, args):
    lib = tvm.compile(tvm.IRModule({"main": func}), target=host_target())
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def _chain_schedule_matches_plain_loops(func):
    """``func`` scheduled by the conv-chain rule, checked against its plain loops on
    random inputs; the schedule."""
    target = host_target()
    with target:
        sch = ConvChain().apply(func, target, False)
    assert sch is not None
    rng = np.random.default_rng(1)
    args = [rng.standard_normal([int(d) for d in p.shape]).astype("float32")
            for p in func.params]
    ref = _run(func, [a.copy() for a in args])
    got = _run(sch.mod["main"], [a.copy() for a in args])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    return sch


@pytest.mark.parametrize("out_ch, expanded, size", [(32, 96, 28), (16, 96, 56)])
def test_depthwise_then_pointwise_in_one_nest(out_ch, expanded, size):
    _chain_schedule_matches_plain_loops(_fused_pair(_dw_pw_model(out_ch, expanded, size)))


def _pw_dw_model(cin: int, expanded: int, size: int, stride: int):
    """An inverted residual's expansion: 1x1 conv, ReLU6, depthwise 3x3, ReLU6."""
    rng = np.random.default_rng(2)

    weight = _weigher(rng)

    nodes = [helper.make_node("Conv", ["x", "wp", "bp"], ["a"]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["r"]),
             helper.make_node("Conv", ["r", "wd", "bd"], ["b"], group=expanded,
                              pads=[1, 1, 1, 1], strides=[stride, stride]),
             helper.make_node("Clip", ["b", "lo", "hi"], ["y"])]
    inits = [weight("wp", [expanded, cin, 1, 1]), weight("bp", [expanded]),
             weight("wd", [expanded, 1, 3, 3]), weight("bd", [expanded]),
             *_relu6_bounds()]
    out = (size - 1) // stride + 1
    return make_model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, expanded, out, out])],
        initializers=inits)


@pytest.mark.parametrize("cin, expanded, size, stride", [(16, 96, 14, 1), (24, 48, 15, 2),
                                                         (32, 64, 7, 1),
                                                         # 8-channel chunks, a wide
                                                         # first conv (AVX-512)
                                                         (24, 72, 28, 1), (40, 200, 14, 1)])
def test_pointwise_then_depthwise_chunk_by_chunk(cin, expanded, size, stride):
    """The expansion conv computed one channel chunk at a time, every pixel, right before
    the depthwise conv of that chunk (odd sizes: flattened and padded pixel tiles)."""
    sch = _chain_schedule_matches_plain_loops(_fused_pair(_pw_dw_model(cin, expanded, size,
                                                                      stride)))
    text = sch.mod.script()
    assert "T.parallel" in text and text.count("T.vectorized") >= 3


def test_a_conv_pair_it_cannot_nest_is_left_to_the_next_rule():
    """A 3x3 second conv reads a window of the first: not this rule's."""
    model = _dw_pw_model(16, 32, 14)
    for node in model.graph.node:
        if node.input[1] == "wp":
            node.attribute.append(helper.make_attribute("pads", [1, 1, 1, 1]))
    for init in model.graph.initializer:
        if init.name == "wp":
            values = np.random.default_rng(0).standard_normal(16 * 32 * 9).astype(np.float32)
            init.CopyFrom(helper.make_tensor("wp", TensorProto.FLOAT, [16, 32, 3, 3],
                                             values.tolist()))
    func = _fused_pair(model)
    target = host_target()
    with target:
        assert ConvChain().apply(func, target, False) is None


def _inverted_residual_model(cin: int, expanded: int, cout: int, size: int, stride: int):
    """MobileNetV2's block: 1x1 expansion, ReLU6, depthwise 3x3, ReLU6, 1x1 projection
    (and the residual add when the shapes allow it)."""
    rng = np.random.default_rng(3)

    weight = _weigher(rng)

    residual = stride == 1 and cin == cout
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["a"]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["r"]),
             helper.make_node("Conv", ["r", "wd", "bd"], ["b"], group=expanded,
                              pads=[1, 1, 1, 1], strides=[stride, stride]),
             helper.make_node("Clip", ["b", "lo", "hi"], ["s"]),
             helper.make_node("Conv", ["s", "wp", "bp"], ["p" if residual else "y"])]
    if residual:
        nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
    inits = [weight("we", [expanded, cin, 1, 1]), weight("be", [expanded]),
             weight("wd", [expanded, 1, 3, 3]), weight("bd", [expanded]),
             weight("wp", [cout, expanded, 1, 1]), weight("bp", [cout]),
             *_relu6_bounds()]
    out = (size - 1) // stride + 1
    return make_model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, out, out])],
        initializers=inits)


@pytest.mark.parametrize("cin, expanded, cout, size, stride", [
    (32, 192, 32, 28, 1),   # MobileNetV2's 28x28 blocks (residual)
    (32, 192, 64, 28, 2),   # the stride-2 block into 14x14
    (64, 384, 64, 14, 1),   # 14x14, 24 chunks
    (24, 144, 24, 56, 1),   # 56x56: the projection tiles rows, not flattened pixels
    (16, 96, 24, 15, 1),    # odd size, 6 chunks
])
def test_inverted_residual_block_in_one_kernel(cin, expanded, cout, size, stride):
    """The three convs of an inverted residual block in one kernel: over row bands when
    the projection tiles rows (the expansion computed with the depthwise conv's halo),
    else chunk by chunk with the projection's reduction over the chunks split among the
    cores (partial sums added after), the expanded tensor never written whole."""
    sch = _chain_schedule_matches_plain_loops(
        _fused_pair(_inverted_residual_model(cin, expanded, cout, size, stride)))
    assert sch.mod.script().count("T.vectorized") >= 4
    sizes = allocated_elements(sch.mod)
    # the expanded tensor is never whole (the partial sums of the split reduction are
    # the projection's result, once per part)
    assert all(n < expanded * size * size // 2 for name, n in sizes.items()
               if not name.endswith("_rf"))


@pytest.mark.parametrize("channels, cout, size, stride", [(144, 32, 56, 2), (192, 64, 14, 1)])
def test_depthwise_then_flattened_pointwise_split_over_chunks(channels, cout, size, stride):
    """A depthwise conv and a 1x1 conv over flattened pixels (small maps): chunk by chunk,
    the 1x1 conv's reduction split among the cores (9 chunks: 3 parts)."""
    model = _dw_pw_model(cout, channels, size)
    if stride > 1:
        for node in model.graph.node:
            if node.input[1] == "wd":
                node.attribute.append(helper.make_attribute("strides", [stride, stride]))
        out = (size - 1) // stride + 1
        model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = out
        model.graph.output[0].type.tensor_type.shape.dim[3].dim_value = out
    _chain_schedule_matches_plain_loops(_fused_pair(model))


def test_two_windowed_convs_are_refused_quietly_by_the_conv_rules(caplog):
    """Two 3x3 convs in one PrimFunc (a DNNFusion candidate of ResNet's basic block: a
    direct conv, then a Winograd one) are no conv rule's: each returns ``None`` without
    failing (they logged a schedule error on every such candidate), the fallback takes
    it."""
    import logging

    from tvm_cocopie.schedules.cpu.conv2d_nchwc import Conv2dNCHWc
    from tvm_cocopie.schedules.cpu.fallback import Fallback
    from tvm_cocopie.schedules.cpu.winograd import Winograd

    rng = np.random.default_rng(4)
    weight = _weigher(rng)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [weight("w1", [128, 64, 3, 3]), weight("b1", [128]),
             weight("w2", [128, 128, 3, 3]), weight("b2", [128])]
    func = _fused_pair(make_model(
        nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 28, 28])],
        initializers=inits))
    text = func.script()
    assert "winograd" in text and '"kind": "conv"' in text  # a direct conv, a Winograd one
    target = host_target()
    with target, caplog.at_level(logging.WARNING):
        for rule in (ConvChain(), Conv2dNCHWc(), Winograd()):
            assert rule.apply(func, target, False) is None, rule.name
        assert Fallback().apply(func, target, False) is not None
    assert not [r for r in caplog.records if "could not schedule" in r.getMessage()]

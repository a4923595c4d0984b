"""The built-in model zoo: every model builds, checks, is deterministic and runs sanely."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tvm_cocopie import models
from tvm_cocopie.bench.gspc import model_macs
from tvm_cocopie.errors import ModelError
from tvm_cocopie.models.graph_builder import GraphBuilder

#: Small but topologically complete versions of each model, to keep the file fast.
SMALL: dict[str, dict] = {
    "resnet18": {"image_size": 32},
    "resnet34": {"image_size": 32},
    "resnet34_g2": {"image_size": 32},
    "resnet34_g4": {"image_size": 32},
    "resnet34_g8": {"image_size": 32},
    "resnet34_g16": {"image_size": 32},
    "resnet34_gN": {"image_size": 32},
    "resnet50": {"image_size": 32, "num_classes": 100},
    "resnext50_32x4d": {"image_size": 32, "num_classes": 100},
    "mobilenetv2": {"image_size": 64},
    "mobilenetv2_s": {"image_size": 32},
    "mobilenetv2_g2": {"image_size": 32},
    "mobilenetv2_g4": {"image_size": 32},
    "mobilenetv2_g8": {"image_size": 32},
    "mobilenetv2_g16": {"image_size": 32},
    "vgg16": {"image_size": 32, "classifier_width": 128},
    "wrn40_2": {},
    "wrn40_2_g2": {"image_size": 16},
    "wrn40_2_g4": {"image_size": 16},
    "wrn40_2_g8": {"image_size": 16},
    "wrn40_2_g16": {"image_size": 16},
    "wrn40_2_gN": {},
    "bert_encoder": {"num_layers": 2, "seq": 64},
    "crnn": {"image_size": 32, "hidden": 32},
    "kws_gru": {"frames": 16, "hidden": 32},
    "mobilenetv3_large": {"image_size": 64},
    "mobilenetv3_small": {"image_size": 64},
    "efficientnet_b0": {"image_size": 64},
    "shufflenetv2": {"image_size": 64},
    "yolo_detector": {"image_size": 64, "num_classes": 20},
    "vit_tiny": {"image_size": 32, "depth": 2},
    "crnn_large_vocab": {"image_size": 32, "hidden": 32},
}

WRN_GROUPS = {"wrn40_2_g2": 2, "wrn40_2_g4": 4, "wrn40_2_g8": 8, "wrn40_2_g16": 16,
              "wrn40_2_gN": "N"}


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _expected_output_shape(name: str, kwargs: dict) -> tuple[int, ...]:
    if name == "bert_encoder":
        return (1, kwargs.get("seq", 128), 256)
    if name == "crnn":
        return (1, kwargs["image_size"] // 4, 37)
    if name == "crnn_large_vocab":
        return (1, kwargs["image_size"] // 4, 6625)
    if name == "yolo_detector":
        size = kwargs["image_size"]
        anchors = sum((size // stride) ** 2 for stride in (8, 16, 32))
        return (1, 4 + kwargs["num_classes"], anchors)
    if name == "kws_gru":
        return (1, 12)
    return (1, kwargs.get("num_classes", 10 if name.startswith("wrn") else 1000))


def test_every_zoo_model_has_a_small_config():
    assert set(SMALL) == set(models.ZOO) == set(models.list_models())
    assert models.DEFAULT_MODEL in models.ZOO


@pytest.mark.parametrize("name", sorted(SMALL))
def test_model_builds_checks_is_deterministic_and_runs(name):
    kwargs = SMALL[name]
    model = models.build(name, **kwargs)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version <= 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert models.build(name, **kwargs).SerializeToString() == model.SerializeToString()

    feeds = models.sample_inputs(model, seed=1)
    (out,) = _session(model).run(None, feeds)
    assert out.shape == _expected_output_shape(name, kwargs)
    assert out.dtype == np.float32
    assert np.isfinite(out).all()
    # sane magnitude: neither blown up nor collapsed
    assert 0.05 < float(out.std()) < 50, out.std()
    assert float(np.abs(out).max()) < 1e3


def test_cnn_interface():
    model = models.build("resnet18", image_size=32)
    (inp,) = model.graph.input
    (out,) = model.graph.output
    assert inp.name == "input" and out.name == "output"
    assert inp.type.tensor_type.elem_type == TensorProto.FLOAT
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim] == [1, 3, 32, 32]


def test_seed_changes_weights():
    a = models.build("wrn40_2_gN", image_size=8, seed=0)
    b = models.build("wrn40_2_gN", image_size=8, seed=1)
    assert a.SerializeToString() != b.SerializeToString()


def _rms_by_op(model: onnx.ModelProto, op_types: set[str]) -> dict[str, list[float]]:
    """Run ``model`` with every output of the given op types exposed; RMS per op type."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    nodes = [n for n in model.graph.node if n.op_type in op_types]
    for node in nodes:
        exposed.graph.output.append(helper.make_empty_tensor_value_info(node.output[0]))
    results = _session(exposed).run([n.output[0] for n in nodes],
                                    models.sample_inputs(model, seed=2))
    rms: dict[str, list[float]] = {op: [] for op in op_types}
    for node, value in zip(nodes, results):
        rms[node.op_type].append(float(np.sqrt(np.mean(np.square(value, dtype=np.float64)))))
    return rms


@pytest.mark.parametrize("name,kwargs", [
    ("resnet50", {"image_size": 64}),
    ("wrn40_2", {}),
])
def test_activations_stay_order_one_through_deep_nets(name, kwargs):
    rms = _rms_by_op(models.build(name, **kwargs), {"BatchNormalization", "Add"})
    assert 0.2 < min(rms["BatchNormalization"]) and max(rms["BatchNormalization"]) < 5, rms
    assert max(rms["Add"]) < 20, rms["Add"]


@pytest.mark.parametrize("name", sorted(WRN_GROUPS))
def test_grouped_wrn_has_grouped_plus_pointwise_convs(name):
    g = WRN_GROUPS[name]
    model = models.build(name, image_size=8)
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    producers = {n.output[0]: n for n in model.graph.node}
    consumers = {i: n for n in model.graph.node for i in n.input}
    grouped = [n for n in convs if helper.get_node_attr_value(n, "group") > 1]
    # stem + 18 blocks x 2 x (grouped + pointwise) + 3 shortcuts
    assert len(convs) == 1 + 18 * 2 * 2 + 3
    assert len(grouped) == 36
    for conv in grouped:
        cin_w = weights[conv.input[1]]  # [cin, cin/groups, 3, 3]
        groups = helper.get_node_attr_value(conv, "group")
        cin = cin_w[0]
        assert cin_w[2:] == [3, 3]
        assert groups == (cin if g == "N" else g)
        assert cin_w[1] == cin // groups
        # grouped -> BN -> ReLU -> pointwise 1x1
        bn = consumers[conv.output[0]]
        relu = consumers[bn.output[0]]
        pw = consumers[relu.output[0]]
        assert (bn.op_type, relu.op_type, pw.op_type) == ("BatchNormalization", "Relu", "Conv")
        assert weights[pw.input[1]][1:] == [cin, 1, 1]
        assert helper.get_node_attr_value(pw, "group") == 1
    stem = producers[convs[0].output[0]]
    assert weights[stem.input[1]] == [16, 3, 3, 3]


def test_standard_wrn_has_no_grouped_conv():
    model = models.build("wrn40_2", image_size=8)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == 40
    assert all(helper.get_node_attr_value(n, "group") == 1 for n in convs)


def test_wrn_group_fallback_uses_largest_divisor():
    from tvm_cocopie.models.grouped import conv_groups
    assert conv_groups(32, 32, 8) == 8
    assert conv_groups(24, 24, 16) == 12
    assert conv_groups(48, 40, 16) == 8
    assert conv_groups(32, 64, "N") == 32


#: Gibson's thesis, Tables 5.3 and 5.4: (parameters in millions, GMACs at 224 px)
THESIS_VARIANTS = {
    "resnet34": (21.79, 3.67), "resnet34_g2": (13.22, 2.25), "resnet34_g4": (8.14, 1.39),
    "resnet34_g8": (5.60, 0.97), "resnet34_g16": (4.34, 0.75), "resnet34_gN": (3.13, 0.56),
    "mobilenetv2_s": (44.05, 5.56), "mobilenetv2_g2": (23.75, 2.92),
    "mobilenetv2_g4": (13.59, 1.60), "mobilenetv2_g8": (8.52, 0.95),
    "mobilenetv2_g16": (5.98, 0.62), "mobilenetv2": (3.50, 0.31),
}


@pytest.mark.parametrize("name", sorted(THESIS_VARIANTS))
def test_grouped_variants_reproduce_the_thesis_tables(name):
    """Parameters (BN scale and shift included, as PyTorch counts them) within 0.5% of the
    table, MACs within 15M (the table counts 1-11M more in every row)."""
    params, gmacs = THESIS_VARIANTS[name]
    small = models.build(name, image_size=32)
    assert _parameter_count(small) / 1e6 == pytest.approx(params, rel=5e-3)
    full = models.build(name)
    assert model_macs(full) / 1e9 == pytest.approx(gmacs, abs=0.015)


@pytest.mark.parametrize("name,groups", [("resnet34_g4", 4), ("resnet34_gN", "N")])
def test_grouped_resnet34_has_grouped_plus_pointwise_convs(name, groups):
    model = models.build(name, image_size=32)
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    grouped = [n for n in convs if helper.get_node_attr_value(n, "group") > 1]
    assert len(grouped) == 2 * 16  # two per basic block
    consumers = {i: n for n in model.graph.node for i in n.input}
    for conv in grouped:
        cin = weights[conv.input[1]][0]
        assert helper.get_node_attr_value(conv, "group") == (cin if groups == "N" else groups)
        bn = consumers[conv.output[0]]
        pw = consumers[consumers[bn.output[0]].output[0]]
        assert weights[pw.input[1]][1:] == [cin, 1, 1]


def test_mobilenetv2_variants_change_only_the_3x3_groups():
    base = models.build("mobilenetv2", image_size=32)
    for name, groups in (("mobilenetv2_g4", 4), ("mobilenetv2_s", 1)):
        model = models.build(name, image_size=32)
        assert _ops(model) == _ops(base)
        three = [helper.get_node_attr_value(n, "group") for n in model.graph.node
                 if n.op_type == "Conv" and n.name.endswith(".dw.conv")]
        assert len(three) == 17 and set(three) == {groups}


def test_resnext_uses_32_groups():
    model = models.build("resnext50_32x4d", image_size=32)
    groups = [helper.get_node_attr_value(n, "group") for n in model.graph.node
              if n.op_type == "Conv"]
    assert groups.count(32) == 16


def test_mobilenetv2_uses_depthwise_and_relu6():
    model = models.build("mobilenetv2", image_size=32)
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    dw = [n for n in model.graph.node if n.op_type == "Conv"
          and helper.get_node_attr_value(n, "group") > 1]
    assert len(dw) == 17
    assert all(weights[n.input[1]][1] == 1 for n in dw)
    assert sum(n.op_type == "Clip" for n in model.graph.node) == 35


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _parameter_count(model: onnx.ModelProto) -> int:
    """Elements of the float weight tensors: what PyTorch counts as parameters (no BN
    running statistics, shape constants or shared scalars)."""
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer
               if t.data_type == TensorProto.FLOAT and t.dims
               and not t.name.endswith(("running_mean", "running_var")))


def _depthwise_kernels(model: onnx.ModelProto) -> list[int]:
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    return [weights[n.input[1]][2] for n in model.graph.node if n.op_type == "Conv"
            and helper.get_node_attr_value(n, "group") > 1]


@pytest.mark.parametrize("name,blocks,se,params", [
    ("mobilenetv3_large", 15, 8, 5_483_032),
    ("mobilenetv3_small", 11, 9, 2_542_856),
])
def test_mobilenetv3_hardswish_se_and_5x5_depthwise(name, blocks, se, params):
    model = models.build(name, image_size=32)
    ops = _ops(model)
    kernels = _depthwise_kernels(model)
    assert len(kernels) == blocks and {3, 5} == set(kernels)
    assert ops.count("HardSigmoid") == se
    assert ops.count("GlobalAveragePool") == se + 1
    assert "HardSwish" in ops and "Relu" in ops
    # torchvision's parameter count (BN running statistics are buffers, not parameters)
    counted = _parameter_count(model)
    assert counted == params


def test_efficientnet_b0_mbconv_swish_se():
    model = models.build("efficientnet_b0", image_size=32)
    ops = _ops(model)
    kernels = _depthwise_kernels(model)
    assert len(kernels) == 16 and kernels.count(5) == 9
    # swish after stem, head and every expansion/depthwise conv, plus in each SE
    assert ops.count("Sigmoid") == ops.count("Mul") == 2 + 15 + 16 + 2 * 16
    counted = _parameter_count(model)
    assert counted == 5_288_548  # torchvision's efficientnet_b0


def test_shufflenetv2_split_concat_and_shuffle():
    model = models.build("shufflenetv2", image_size=32)
    ops = _ops(model)
    assert ops.count("Split") == 13 and ops.count("Concat") == 16
    shuffles = [n for n in model.graph.node if n.op_type == "Transpose"]
    assert len(shuffles) == 16
    assert all(helper.get_node_attr_value(n, "perm") == [0, 2, 1, 3, 4] for n in shuffles)
    assert "ReduceMean" in ops
    counted = _parameter_count(model)
    assert counted == 2_278_604  # torchvision's shufflenet_v2_x1_0


def test_yolo_detector_topology_and_sizes():
    model = models.build("yolo_detector", image_size=64)
    ops = _ops(model)
    pools = [n for n in model.graph.node if n.op_type == "MaxPool"]
    assert len(pools) == 3  # SPPF
    assert all(helper.get_node_attr_value(n, "kernel_shape") == [5, 5] for n in pools)
    resizes = [n for n in model.graph.node if n.op_type == "Resize"]
    assert len(resizes) == 2
    assert all(helper.get_node_attr_value(n, "mode") == b"nearest" for n in resizes)
    assert ops.count("Softmax") == 1 and ops.count("Split") >= 8
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    heads = [weights[n.input[1]][0] for n in model.graph.node
             if n.op_type == "Conv" and n.name.endswith(".2")]
    assert heads == [64, 80] * 3  # box bins and classes at strides 8, 16, 32

    def dims(m: onnx.ModelProto) -> list[int]:
        return [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]

    assert dims(model) == [1, 84, 84]
    large = models.build("yolo_detector", image_size=640)
    assert dims(large) == [1, 84, 8400]
    # YOLOv8n's 3,157,200 parameters, plus constants: anchors and strides (3 x 8400
    # floats) and the two Resize nodes' scales (2 x 4)
    assert _parameter_count(large) - 3 * 8400 - 2 * 4 == 3_157_200
    with pytest.raises(ModelError):
        models.build("yolo_detector", image_size=100)


def test_vit_tiny_depth_and_ops():
    model = models.build("vit_tiny", image_size=32, depth=3)
    ops = _ops(model)
    assert ops.count("LayerNormalization") == 2 * 3 + 1
    assert ops.count("Erf") == ops.count("Softmax") == 3
    assert {"Expand", "Concat", "Split", "Squeeze", "Gather", "Gemm"} <= set(ops)
    full = models.build("vit_tiny")
    assert _ops(full).count("Softmax") == 12
    assert _parameter_count(full) == 5_717_416  # DeiT-tiny
    dynamic = models.build("vit_tiny", image_size=32, depth=1, dynamic_batch=True)
    assert "Shape" in _ops(dynamic)
    (out,) = _session(dynamic).run(None, models.sample_inputs(
        dynamic, shapes={"input": (2, 3, 32, 32)}))
    assert out.shape == (2, 1000)


def test_crnn_large_vocab_head():
    model = models.build("crnn_large_vocab", image_size=32, hidden=32)
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    assert weights["head.weight"] == [64, 6625]
    assert sum(n.op_type == "LSTM" for n in model.graph.node) == 2
    assert model.graph.name == "crnn_large_vocab"


def test_bert_ops_and_interface():
    model = models.build("bert_encoder", num_layers=1, seq=16)
    ops = {n.op_type for n in model.graph.node}
    assert {"Gather", "LayerNormalization", "Erf", "Softmax", "MatMul", "Reshape",
            "Transpose"} <= ops
    (inp,) = model.graph.input
    assert inp.name == "input_ids" and inp.type.tensor_type.elem_type == TensorProto.INT64


def test_dynamic_batch():
    model = models.build("resnet18", image_size=32, dynamic_batch=True)
    dim0 = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim0.dim_param == "N"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "N"
    feeds = models.sample_inputs(model, shapes={"input": (3, 3, 32, 32)})
    (out,) = _session(model).run(None, feeds)
    assert out.shape == (3, 1000)
    # the default fills a symbolic dim with 1
    assert models.sample_inputs(model)["input"].shape == (1, 3, 32, 32)

    bert = models.build("bert_encoder", num_layers=1, seq=8, dynamic_batch=True)
    feeds = models.sample_inputs(bert, shapes={"input_ids": (2, 8)})
    (out,) = _session(bert).run(None, feeds)
    assert out.shape == (2, 8, 256)


def test_static_batch():
    model = models.build("wrn40_2", image_size=8, batch=2)
    feeds = models.sample_inputs(model)
    assert feeds["input"].shape == (2, 3, 8, 8)
    (out,) = _session(model).run(None, feeds)
    assert out.shape == (2, 10)


def test_sample_inputs_reads_vocab_from_embedding():
    model = models.build("bert_encoder", num_layers=1, seq=256, vocab=7)
    ids = models.sample_inputs(model)["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (1, 256)
    assert ids.min() >= 0 and ids.max() == 6
    again = models.sample_inputs(model)["input_ids"]
    np.testing.assert_array_equal(ids, again)


def test_sample_inputs_rejects_unknown_shape_names():
    model = models.build("wrn40_2", image_size=8)
    with pytest.raises(ModelError, match="nope"):
        models.sample_inputs(model, shapes={"nope": (1,)})


def test_unknown_model_name_lists_known_names():
    with pytest.raises(ModelError) as info:
        models.build("resnet1000")
    for name in models.list_models():
        assert name in str(info.value)


def test_bad_arguments_raise_model_error():
    with pytest.raises(ModelError):
        models.build("resnet18", colour="blue")
    with pytest.raises(ModelError):
        models.build("vgg16", image_size=50)


def test_save_writes_ir_10(tmp_path):
    model = models.build("wrn40_2_g16", image_size=8)
    newer = onnx.ModelProto()
    newer.CopyFrom(model)
    newer.ir_version = 14
    path = models.save(newer, tmp_path / "sub" / "m.onnx")
    loaded = onnx.load(path)
    assert loaded.ir_version == 10
    assert newer.ir_version == 14  # the caller's model is untouched
    _session(loaded)


def test_builder_reference_values_match_onnxruntime():
    """The numpy forward pass that calibrates BN agrees with onnxruntime op by op."""
    gb = GraphBuilder("ops", seed=3)
    x = gb.input("input", ["N", 8, 11, 11])  # calibrated on a batch of 16
    y = gb.conv(x, 12, 3, 2, groups=4, bias=True)
    y = gb.relu6(gb.batchnorm(y))
    y = gb.add(y, gb.conv(gb.maxpool(x, 3, 2, 1), 12, 1, 1, pad=0))
    y = gb.conv(y, 12, 3, 1, groups=12, dilation=2)
    y = gb.avgpool(y, 3, 1, 1)
    z = gb.transpose(gb.reshape(y, [0, 12, -1]), (0, 2, 1))  # [1, 36, 12]
    z = gb.gelu(gb.layernorm(gb.linear(z, 16)))
    z = gb.softmax(gb.scale(gb.matmul(z, gb.transpose(z, (0, 2, 1))), 0.25))
    flat = gb.gemm(gb.flatten(gb.global_avgpool(y)), 5)
    gb.output(z, "attention")
    gb.output(flat, "logits")
    model = gb.model()
    onnx.checker.check_model(model, full_check=True)
    want = dict(zip(["attention", "logits"],
                    _session(model).run(None, {"input": gb.values["input"]})))
    for name, value in want.items():
        np.testing.assert_allclose(gb.values[name], value, rtol=1e-4, atol=1e-5)


def test_builder_reference_values_of_the_newer_ops_match_onnxruntime():
    """HardSwish, HardSigmoid, SiLU, Resize, Split, Concat, ReduceMean, Squeeze, Gather."""
    gb = GraphBuilder("ops2", seed=4)
    x = gb.input("input", ["N", 6, 8, 8])
    a, b = gb.split(gb.scale(x, 4.0), [2, 4], axis=1)
    y = gb.concat([gb.hardswish(a), gb.hardsigmoid(b)], axis=1)
    y = gb.maxpool(gb.upsample_nearest(gb.silu(y), 2), 5, 1, 2)
    y = gb.sub(y, gb.global_avgpool(y))
    m = gb.squeeze(gb.reshape(gb.reduce_mean(y, [2, 3], keepdims=True), [0, 1, 6]), [1])
    g = gb.gather(gb.transpose(gb.reshape(y, [0, 6, -1]), (0, 2, 1)), 3, axis=1)
    gb.output(y, "upsampled")
    gb.output(m, "mean")
    gb.output(g, "row")
    model = gb.model()
    onnx.checker.check_model(model, full_check=True)
    got = _session(model).run(None, {"input": gb.values["input"]})
    for name, value in zip(["upsampled", "mean", "row"], got):
        assert gb.values[name].shape == value.shape
        np.testing.assert_allclose(gb.values[name], value, rtol=1e-5, atol=1e-5)

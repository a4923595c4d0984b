"""LSTM, GRU and RNN through tvm-cocopie's importer, against ONNX Runtime.

ONNX's backend suite has only a dozen recurrent cases (default attributes, one
direction each); these cover the combinations real models use: every direction,
both layouts, initial states, per-entry sequence lengths, peepholes, clip,
``linear_before_reset``, ``input_forget`` and non-default activations.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

from tvm_cocopie.frontend.backend import TvmCocopieBackend

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def recurrent_model(op, direction="forward", layout=0, with_bias=True, with_lens=False,
                    with_init=False, peepholes=False, opset=14, seed=0, weights_as_inputs=False,
                    **attrs):
    """A one-node model; returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    x_shape = [SEQ, BATCH, INPUT] if layout == 0 else [BATCH, SEQ, INPUT]
    state_shape = [dirs, BATCH, HIDDEN] if layout == 0 else [BATCH, dirs, HIDDEN]
    tensors = {
        "W": rng.uniform(-0.5, 0.5, (dirs, gates * HIDDEN, INPUT)).astype(np.float32),
        "R": rng.uniform(-0.5, 0.5, (dirs, gates * HIDDEN, HIDDEN)).astype(np.float32),
    }
    names = ["X", "W", "R"]
    if with_bias:
        tensors["B"] = rng.uniform(-0.5, 0.5, (dirs, 2 * gates * HIDDEN)).astype(np.float32)
    names.append("B" if with_bias else "")
    if with_lens:
        tensors["L"] = np.array([SEQ, 2, 4][:BATCH], dtype=np.int32)
    names.append("L" if with_lens else "")
    if with_init:
        tensors["H0"] = rng.standard_normal(state_shape).astype(np.float32)
        if op == "LSTM":
            tensors["C0"] = rng.standard_normal(state_shape).astype(np.float32)
    names.append("H0" if with_init else "")
    if op == "LSTM":
        names.append("C0" if with_init else "")
        if peepholes:
            tensors["P"] = rng.uniform(-0.5, 0.5, (dirs, 3 * HIDDEN)).astype(np.float32)
        names.append("P" if peepholes else "")
    while names and not names[-1]:
        names.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=HIDDEN, direction=direction,
                            name=f"{op.lower()}0", **({"layout": layout} if layout else {}),
                            **attrs)
    x = rng.standard_normal(x_shape).astype(np.float32)
    feeds = {"X": x}
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    inits = []
    for name, value in tensors.items():
        if weights_as_inputs or name == "L":
            feeds[name] = value
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
        else:
            inits.append(numpy_helper.from_array(value, name))
    y_shape = [SEQ, dirs, BATCH, HIDDEN] if layout == 0 else [BATCH, SEQ, dirs, HIDDEN]
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)]
    outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state_shape) for n in outputs[1:]]
    graph = helper.make_graph([node], "rnn", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model, feeds


def _time_major(model, feeds):
    """The layout-0 twin of a batch-first model (ONNX Runtime only runs layout 0)."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    node = twin.graph.node[0]
    kept = [a for a in node.attribute if a.name != "layout"]
    del node.attribute[:]
    node.attribute.extend(kept)
    swap = {"X": (1, 0, 2), "H0": (1, 0, 2), "C0": (1, 0, 2)}
    feeds = {k: np.ascontiguousarray(v.transpose(swap[k])) if k in swap else v
             for k, v in feeds.items()}
    for init in twin.graph.initializer:
        if init.name in swap:
            init.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(init).transpose(swap[init.name]).copy(), init.name))
    for value in list(twin.graph.input) + list(twin.graph.output):
        dims = value.type.tensor_type.shape.dim
        sizes = [d.dim_value for d in dims]
        order = {"X": (1, 0, 2), "Y": (1, 2, 0, 3)}.get(value.name, (1, 0, 2))
        if value.name in ("X", "Y", "Y_h", "Y_c", "H0", "C0"):
            for d, k in zip(dims, order):
                d.dim_value = sizes[k]
    return twin, feeds


def reference(model, feeds):
    layout = next((a.i for a in model.graph.node[0].attribute if a.name == "layout"), 0)
    if not layout:
        return ort_run(model, feeds)
    twin, twin_feeds = _time_major(model, feeds)
    outs = ort_run(twin, twin_feeds)
    names = [o.name for o in model.graph.output]
    return [o.transpose(2, 0, 1, 3) if n == "Y" else o.transpose(1, 0, 2)
            for n, o in zip(names, outs)]


def check(model, feeds):
    expected = reference(model, feeds)
    rep = TvmCocopieBackend.prepare(model)
    actual = list(rep.run([feeds[i.name] for i in model.graph.input
                           if i.name not in {t.name for t in model.graph.initializer}]))
    assert_close(actual, expected, rel_tol=1e-4)


CASES = [
    # op, direction, layout, lens, init, extra
    ("LSTM", "forward", 0, False, False, {}),
    ("LSTM", "reverse", 0, True, True, {}),
    ("LSTM", "bidirectional", 0, True, True, {"peepholes": True}),
    ("LSTM", "bidirectional", 1, False, True, {}),
    ("LSTM", "forward", 1, True, False, {"peepholes": True, "clip": 0.7}),
    ("LSTM", "reverse", 0, False, False, {"input_forget": 1}),
    ("GRU", "forward", 0, True, True, {}),
    ("GRU", "reverse", 1, True, False, {"linear_before_reset": 1}),
    ("GRU", "bidirectional", 0, True, True, {"linear_before_reset": 1}),
    ("GRU", "bidirectional", 1, False, False, {"clip": 0.5}),
    ("RNN", "forward", 0, True, True, {}),
    ("RNN", "bidirectional", 1, True, True, {}),
    ("RNN", "reverse", 0, False, False, {"activations": ["Relu"]}),
]


@pytest.mark.parametrize("op,direction,layout,lens,init,extra", CASES,
                         ids=[f"{c[0]}-{c[1]}-layout{c[2]}-lens{int(c[3])}-init{int(c[4])}"
                              + ("-" + "-".join(c[5]) if c[5] else "") for c in CASES])
def test_recurrent_matches_onnxruntime(op, direction, layout, lens, init, extra):
    extra = dict(extra)
    peepholes = extra.pop("peepholes", False)
    model, feeds = recurrent_model(op, direction, layout, with_lens=lens, with_init=init,
                                   peepholes=peepholes, **extra)
    check(model, feeds)


def test_weights_given_at_run_time():
    """W, R, B as graph inputs (not initializers), as in ONNX's own cases."""
    model, feeds = recurrent_model("LSTM", "bidirectional", with_lens=True, with_init=True,
                                   weights_as_inputs=True)
    check(model, feeds)


def test_activation_alphas_are_consumed_in_order():
    model, feeds = recurrent_model(
        "GRU", "bidirectional",
        activations=["HardSigmoid", "LeakyRelu", "Sigmoid", "ScaledTanh"],
        activation_alpha=[0.3, 0.05, 0.9], activation_beta=[0.4, 1.1])
    check(model, feeds)


def test_lstm_without_optional_outputs():
    """Only Y_h requested: the node's Y output is the empty name."""
    model, feeds = recurrent_model("LSTM", "forward", with_lens=True)
    node = model.graph.node[0]
    node.output[0] = ""
    node.output[2] = ""
    del model.graph.output[0]
    del model.graph.output[1]
    check(model, feeds)

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
                    seq=SEQ, batch=BATCH, hidden=HIDDEN, input_size=INPUT, lens_value=None,
                    **attrs):
    """A one-node model; returns (model, feeds). ``lens_value`` (with ``with_lens``): the
    ``sequence_lens``, default ``[seq, 2, 4]``; an initializer unless ``weights_as_inputs``."""
    SEQ, BATCH, HIDDEN, INPUT = seq, batch, hidden, input_size
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
        tensors["L"] = np.array(lens_value if lens_value is not None else [SEQ, 2, 4][:BATCH],
                                dtype=np.int32)
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
        if weights_as_inputs or (name == "L" and lens_value is None):
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


# --- the loop kernel (one PrimFunc per layer) against the unrolled path and ORT -----


def loop_kernel_calls(model) -> int:
    """``call_tir``s of a recurrent loop kernel in the imported model's ``main``."""
    from tvm import relax

    from tvm_cocopie.frontend.importer import from_onnx

    mod = from_onnx(model)
    calls = []

    def visit(expr):
        if (isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_tir"
                and expr.args[0].name_hint.endswith("_loop")):
            calls.append(expr)

    relax.analysis.post_order_visit(mod["main"], visit)
    return len(calls)


def run_model(model, feeds, pipeline=None):
    rep = TvmCocopieBackend.prepare(model, pipeline=pipeline)
    inits = {t.name for t in model.graph.initializer}
    return list(rep.run([feeds[i.name] for i in model.graph.input if i.name not in inits]))


def unrolled_outputs(model, feeds, monkeypatch):
    from tvm_cocopie.frontend.ops import recurrent

    with monkeypatch.context() as patch:
        patch.setattr(recurrent, "USE_LOOP_KERNEL", False)
        assert loop_kernel_calls(model) == 0
        return run_model(model, feeds)


#: op, direction, layout, batch, init, steps, hidden, GRU's linear_before_reset: every op x
#: direction x layout, batch 1 and 3, with and without initial states, T from 1 to 40,
#: hidden sizes with a vector tail (6), one register tile of columns (8 x 4 = 32),
#: several tiles with padding (20 x 4 = 80 = 3 tiles of 32), both GRU variants.
LOOP_CASES = [
    ("LSTM", "forward", 0, 1, False, 1, 6, 0),
    ("LSTM", "forward", 1, 3, True, 40, 20, 0),
    ("LSTM", "reverse", 0, 3, True, 7, 8, 0),
    ("LSTM", "reverse", 1, 1, False, 16, 6, 0),
    ("LSTM", "bidirectional", 0, 1, True, 40, 20, 0),
    ("LSTM", "bidirectional", 1, 3, False, 2, 6, 0),
    ("GRU", "forward", 0, 3, False, 40, 6, 0),
    ("GRU", "forward", 1, 1, True, 1, 20, 1),
    ("GRU", "forward", 0, 1, True, 13, 20, 0),
    ("GRU", "reverse", 0, 1, True, 9, 6, 1),
    ("GRU", "reverse", 1, 3, False, 5, 20, 0),
    ("GRU", "bidirectional", 0, 3, True, 12, 8, 0),
    ("GRU", "bidirectional", 0, 3, True, 12, 8, 1),
    ("GRU", "bidirectional", 1, 1, False, 40, 6, 1),
    ("RNN", "bidirectional", 0, 3, True, 6, 6, 0),
    ("RNN", "reverse", 1, 1, False, 3, 20, 0),
]


@pytest.mark.parametrize("op,direction,layout,batch,init,steps,hidden,lbr", LOOP_CASES,
                         ids=[f"{c[0]}-{c[1]}-layout{c[2]}-b{c[3]}-init{int(c[4])}-T{c[5]}"
                              f"-H{c[6]}" + ("-lbr" if c[7] else "") for c in LOOP_CASES])
def test_loop_kernel_matches_unrolled_and_onnxruntime(op, direction, layout, batch, init, steps,
                                                      hidden, lbr, monkeypatch):
    extra = {"linear_before_reset": 1} if lbr else {}
    model, feeds = recurrent_model(op, direction, layout, with_init=init, seq=steps,
                                   batch=batch, hidden=hidden, input_size=5, seed=steps, **extra)
    assert loop_kernel_calls(model) == 1
    expected = reference(model, feeds)
    actual = run_model(model, feeds)
    assert_close(actual, expected, rel_tol=1e-4)
    assert_close(actual, unrolled_outputs(model, feeds, monkeypatch), rel_tol=1e-4)


@pytest.mark.parametrize("op,extra", [("LSTM", {}), ("GRU", {"linear_before_reset": 1}),
                                      ("GRU", {})])
def test_loop_kernel_through_the_cocopie_pipeline(op, extra):
    model, feeds = recurrent_model(op, "bidirectional", 1, with_init=True, seq=11, batch=2,
                                   hidden=12, **extra)
    assert loop_kernel_calls(model) == 1
    assert_close(run_model(model, feeds, pipeline="cocopie"), reference(model, feeds),
                 rel_tol=1e-4)


def test_loop_kernel_weights_given_at_run_time():
    """W, R, B, initial states as graph inputs: the packing runs as Relax ops."""
    for op, extra in [("LSTM", {}), ("GRU", {"linear_before_reset": 1})]:
        model, feeds = recurrent_model(op, "bidirectional", with_init=True, seq=6, hidden=10,
                                       weights_as_inputs=True, **extra)
        assert loop_kernel_calls(model) == 1
        check(model, feeds)


def test_loop_kernel_peepholes_and_full_length_sequence_lens():
    """Peepholes are in the kernel; constant ``sequence_lens`` all equal to T are no
    lengths at all."""
    model, feeds = recurrent_model("LSTM", "bidirectional", with_init=True, peepholes=True,
                                   with_lens=True, lens_value=[SEQ] * BATCH)
    assert loop_kernel_calls(model) == 1
    check(model, feeds)


@pytest.mark.parametrize("kwargs", [
    {"with_lens": True},  # lengths known only at run time
    {"with_lens": True, "lens_value": [SEQ, 2, SEQ]},  # constant, not all full
    {"clip": 0.7},
    {"input_forget": 1},
    {"activations": ["Sigmoid", "Tanh", "Relu"]},
], ids=["lens-input", "lens-partial", "clip", "input_forget", "activations"])
def test_uncommon_cases_stay_unrolled(kwargs):
    model, feeds = recurrent_model("LSTM", "forward", with_init=True, **kwargs)
    assert loop_kernel_calls(model) == 0
    check(model, feeds)

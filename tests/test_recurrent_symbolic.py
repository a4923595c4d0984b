"""Recurrent layers with a symbolic sequence length (issue 17, SOD² thesis chapter 5):
compiled once, run at any length, as one loop kernel per layer (not unrolled).

Each model is compiled a single time with its time dim left symbolic
(``specialize=False``, so no call recompiles for its concrete shape) and run at several
lengths, 1 included, against ONNX Runtime. Tolerance: ``REL_TOL = 1e-5`` of the largest
reference value. The loop kernel computes in float32 with TOPI's polynomial
``exp``/``tanh`` (within a few ulp of libm) and sums the GEMV in another order than ONNX
Runtime's MLAS; the gates are contractions (|sigmoid'|, |tanh'| <= 1, weights in
[-0.5, 0.5]), so the difference stays near float32 rounding at every length (measured
here: at most 3e-7 of the largest output over 11 steps, 1.7e-6 over the CRNN's 25 steps
of two layers and its convs). A wrong step order, direction or state carry is off by ~0.1.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from conftest import assert_close, ort_run
from onnx import TensorProto, numpy_helper
from test_onnx_recurrent import recurrent_model, reference
from test_recurrent_loop import _build, _pack, _reference

import tvm_cocopie
from tvm_cocopie.bench.runtime_stats import call_stats, vm_call_counts
from tvm_cocopie.errors import ModelError
from tvm_cocopie.models.crnn import crnn
from tvm_cocopie.topi.cpu import recurrent as rk

REL_TOL = 1e-5
LENGTHS = (1, 4, 11)
#: The time dim of ``X``/``Y`` (``layout`` 0, 1) and its name in the models.
TIME_AXIS = {0: 0, 1: 1}
TIME = "T"
#: Names of the loop kernels in a compiled module (``bb.add_func`` numbers duplicates).
LOOP_KERNEL = re.compile(r"(lstm|gru|rnn)_loop\d*")


def _symbolic_time(model: onnx.ModelProto, layout: int = 0) -> onnx.ModelProto:
    """``model`` with the time dim of ``X`` and ``Y`` made the symbolic ``T``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in list(out.graph.input) + list(out.graph.output):
        if value.name in ("X", "Y"):
            dim = value.type.tensor_type.shape.dim[TIME_AXIS[layout]]
            dim.Clear()
            dim.dim_param = TIME
    onnx.checker.check_model(out)
    return out


def _loop_calls(compiled, feeds) -> tuple[int, int]:
    """Calls of recurrent loop kernels and of all kernels in one run on ``feeds``."""
    counts = vm_call_counts(compiled.executable, [feeds[n] for n in compiled.input_names])
    loops = sum(n for name, n in counts.items() if LOOP_KERNEL.fullmatch(name))
    return loops, call_stats(counts)["kernel_calls_per_run"]


CASES = [
    # op, direction, extra arguments of recurrent_model
    ("LSTM", "forward", {}),
    ("LSTM", "reverse", {"with_init": True}),
    ("LSTM", "bidirectional", {"with_init": True, "peepholes": True}),
    ("LSTM", "bidirectional", {"with_init": True, "layout": 1}),
    ("LSTM", "bidirectional", {"weights_as_inputs": True, "with_init": True}),
    ("GRU", "forward", {"with_init": True}),
    ("GRU", "bidirectional", {"linear_before_reset": 1}),
    ("GRU", "reverse", {"with_init": True, "linear_before_reset": 1, "layout": 1}),
    ("RNN", "forward", {"with_init": True}),
    ("RNN", "bidirectional", {}),
]


def _case_id(case) -> str:
    op, direction, extra = case
    return "-".join([op, direction] + [f"{k}={v}" for k, v in sorted(extra.items())])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_one_build_runs_every_length(case):
    """The same weights (``recurrent_model`` draws them before ``X``, from one seed)
    at each length: the symbolic build against ONNX Runtime on the model of that
    length; one loop kernel call per run whatever the length."""
    op, direction, extra = case
    layout = extra.get("layout", 0)
    model, _ = recurrent_model(op, direction, **extra)
    compiled = tvm_cocopie.compile(_symbolic_time(model, layout), None, specialize=False)
    kernels = set()
    for steps in LENGTHS:
        static, feeds = recurrent_model(op, direction, seq=steps, seed=0, **extra)
        actual = compiled(**feeds)
        assert_close(list(actual), reference(static, feeds), rel_tol=REL_TOL)
        loops, calls = _loop_calls(compiled, feeds)
        assert loops == 1, f"{loops} loop kernel calls at T={steps}"
        kernels.add(calls)
    assert len(kernels) == 1, f"kernel calls per run vary with the length: {kernels}"


def test_output_keeps_the_symbolic_length():
    mod = tvm_cocopie.from_onnx(_symbolic_time(recurrent_model("GRU", "bidirectional")[0]))
    y = mod["main"].ret_ty.fields[0]
    assert isinstance(y.shape.values[0], tvm.tirx.Var) and y.shape.values[0].name == TIME
    assert [int(v) for v in y.shape.values[1:]] == [2, 3, 6]


@pytest.mark.parametrize("cell,lbr", [("lstm", False), ("gru", True), ("rnn", False)])
def test_kernel_takes_a_symbolic_extent(cell, lbr):
    """The kernel alone, its length an int64 expression no parameter binds (``W // 4``,
    as a CRNN's is): the PrimFunc reads its own length from ``XW``'s shape."""
    width = tvm.tirx.Var("W", "int64")
    spec = rk.LoopSpec(cell, width // 4, 3, 10, (False, True), init_h=True,
                       linear_before_reset=lbr)
    assert spec.output_shapes()[0][0].same_as(spec.steps)
    lib = _build(rk.recurrent_loop(spec))
    for steps in (1, 6):
        fixed = rk.LoopSpec(cell, steps, 3, 10, (False, True), init_h=True,
                            linear_before_reset=lbr)
        rng = np.random.default_rng(steps)
        gh = fixed.gates * fixed.hidden
        xw = rng.uniform(-1, 1, (steps, fixed.batch, 2 * gh)).astype("float32")
        rt = rng.uniform(-0.5, 0.5, (2, fixed.hidden, gh)).astype("float32")
        ins = {"xw": xw}
        for k, (first, gates) in enumerate(fixed.weight_groups()):
            ins[f"rt{k}"] = _pack(rt[:, :, first * fixed.hidden:(first + gates) * fixed.hidden])
        for name, shape in fixed.input_shapes():
            ins.setdefault(name, rng.uniform(-1, 1, shape).astype("float32"))
        args = [tvm.runtime.tensor(ins[n]) for n, _ in fixed.input_shapes()]
        outs = [tvm.runtime.tensor(np.zeros(s, "float32")) for s in fixed.output_shapes()]
        lib["main"](*args, *outs)
        assert_close([o.numpy() for o in outs], _reference(fixed, xw, rt, ins), rel_tol=REL_TOL)


def _double(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` in float64 (ONNX's recurrent ops allow it; the loop kernel does not)."""
    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        if value.dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(value.astype(np.float64), init.name))
    for value in list(model.graph.input) + list(model.graph.output):
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    return model


REFUSED = [
    # op, recurrent_model arguments, what the message names
    ("LSTM", {"with_lens": True, "lens_value": [5, 5, 5]}, "sequence_lens"),
    ("LSTM", {"input_forget": 1}, "input_forget"),
    ("GRU", {"clip": 0.5}, "clip"),
    ("RNN", {"activations": ["Relu"]}, "activations ['Relu']"),
    ("GRU", {"dtype": "float64"}, "float64"),
]


@pytest.mark.parametrize("op,extra,named", REFUSED, ids=[r[2] for r in REFUSED])
def test_what_the_kernel_lacks_is_refused_clearly(op, extra, named):
    """Symbolic length outside the loop kernel: no unrolling possible, so a ModelError
    naming the node, the unsupported feature and the fix, raised at import."""
    extra = dict(extra)
    double = extra.pop("dtype", None) == "float64"
    model = _symbolic_time(recurrent_model(op, **extra)[0])
    if double:
        model = _double(model)
    with pytest.raises(ModelError) as err:
        tvm_cocopie.compile(model, None, specialize=False)
    message = str(err.value)
    for part in (f"node '{op.lower()}0'", "symbolic sequence length T", named, "shapes={"):
        assert part in message, message


def test_symbolic_batch_and_length_is_refused():
    model = _symbolic_time(recurrent_model("LSTM")[0])
    for value in list(model.graph.input) + list(model.graph.output):
        if value.name in ("X", "Y", "Y_h", "Y_c"):
            value.type.tensor_type.shape.dim[{"X": 1, "Y": 2}.get(value.name, 1)].dim_param = "N"
    with pytest.raises(ModelError, match="symbolic batch size \\(N\\)"):
        tvm_cocopie.from_onnx(model)


def _crnn_any_width() -> onnx.ModelProto:
    """The zoo CRNN (5 convs, 2 BiLSTM) with a symbolic line width ``W``: its
    map-to-sequence Reshape reads the width (``-1``) instead of the built-in 8 steps,
    so the LSTMs' length is ``W // 4`` after the pools."""
    model = crnn(image_size=32, hidden=16)
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape")
    for init in model.graph.initializer:
        if init.name == reshape.input[1]:
            shape = numpy_helper.to_array(init).copy()
            shape[-1] = -1
            init.CopyFrom(numpy_helper.from_array(shape, init.name))
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "W"
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_param = TIME
    onnx.checker.check_model(model)
    return model


def test_crnn_with_symbolic_width():
    """conv -> reshape/transpose -> 2 BiLSTM -> linear, one build for widths 4 (one
    step), 32 and 100 (25 steps; not a multiple of 4, the pools floor it)."""
    model = _crnn_any_width()
    compiled = tvm_cocopie.compile(model, None, specialize=False)
    rng = np.random.default_rng(0)
    kernels = set()
    for width, steps in ((4, 1), (32, 8), (100, 25)):
        feeds = {"input": rng.standard_normal((1, 1, 32, width)).astype("float32")}
        expected = ort_run(model, feeds)
        assert expected[0].shape == (1, steps, 37)
        assert_close(compiled(**feeds), expected, rel_tol=REL_TOL)
        loops, calls = _loop_calls(compiled, feeds)
        assert loops == 2, f"{loops} loop kernel calls at width {width}"
        kernels.add(calls)
    assert len(kernels) == 1, kernels

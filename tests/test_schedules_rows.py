"""The row-reduction rule: softmax, layer norm (fused op and the decomposed chain ONNX
exporters write) and reductions over the last axis become one parallel loop over rows,
match float64 numpy at every row length (multiples of the vector width and not), and
leave what is not row-wise to the fallback."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from test_kernels_common import (
    TARGET,
    assert_allclose,
    build_graph,
    prim_funcs,
    run,
    scheduled,
    tensor_var,
)
from tvm import relax, tirx
from tvm.relax import op as R

from tvm_cocopie.schedules import Fallback, RowReduction
from tvm_cocopie.schedules.base import root_blocks

rng = np.random.default_rng(1)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * gamma \
        + beta


def _decomposed_layer_norm(bb, x, gamma, beta):
    """ReduceMean, Sub, Mul (square), ReduceMean, Add eps, Sqrt, Div, Mul, Add: the graph
    exporters before opset 17 write."""
    mu = bb.emit(R.mean(x, axis=[-1], keepdims=True))
    d = bb.emit(R.subtract(x, mu))
    var = bb.emit(R.mean(R.multiply(d, d), axis=[-1], keepdims=True))
    std = bb.emit(R.sqrt(R.add(var, relax.const(1e-5, "float32"))))
    return bb.emit(R.add(R.multiply(R.divide(d, std), relax.const(gamma)), relax.const(beta)))


# row lengths: a multiple of the vector width (vectorized partial sums), a prime (scalar
# reduction, vector part + tail for the element-wise passes), shorter than two vectors
LENGTHS = (64, 197, 12)


def _graphs(n):
    gamma = rng.standard_normal(n).astype("float32")
    beta = rng.standard_normal(n).astype("float32")
    return {
        "softmax": (lambda bb, x: bb.emit(R.nn.softmax(x)), _softmax),
        "log-softmax": (lambda bb, x: bb.emit(R.nn.log_softmax(x)),
                        lambda x: np.log(_softmax(x))),
        "layer-norm-op": (lambda bb, x: bb.emit(R.nn.layer_norm(
            x, relax.const(gamma), relax.const(beta), axes=[-1])),
            lambda x: _layer_norm(x, gamma, beta)),
        "layer-norm-decomposed": (lambda bb, x: _decomposed_layer_norm(bb, x, gamma, beta),
                                  lambda x: _layer_norm(x, gamma, beta)),
        "mean-last-axis": (lambda bb, x: bb.emit(R.mean(x, axis=[-1])), lambda x: x.mean(-1)),
        "sum-last-two-axes": (lambda bb, x: bb.emit(R.sum(x, axis=[-2, -1])),
                              lambda x: x.sum((-2, -1))),
    }


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", sorted(_graphs(8)))
def test_row_kernels_match_numpy(name, n):
    body, ref = _graphs(n)[name]
    shape = (2, 3, 5, n)
    x = tensor_var("x", shape)
    data = (rng.standard_normal(shape) * 3).astype("float32")
    mod = build_graph([x], body)
    assert "rows" in _rule_names(mod).values()  # the rule took its kernel(s)
    assert_allclose(run(mod, [data]), ref(data.astype(np.float64)))


def _rule_names(mod) -> dict:
    funcs = prim_funcs(scheduled(mod, schedule=False))
    names = {}
    for name, func in funcs.items():
        with TARGET:
            names[name] = "rows" if RowReduction().apply(func, TARGET, False) else "other"
    return names


def test_softmax_and_layer_norm_are_one_parallel_row_loop():
    x = tensor_var("x", (4, 128, 64))
    gamma = rng.standard_normal(64).astype("float32")
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.softmax(R.nn.layer_norm(
        x, relax.const(gamma), relax.const(gamma), axes=[-1]))))
    funcs = prim_funcs(scheduled(mod, schedule=False))
    assert funcs
    for name, func in funcs.items():
        with TARGET:
            sch = RowReduction().apply(func, TARGET, False)
        assert sch is not None, name
        roots = root_blocks(sch)
        loops = [sch.get(lp) for lp in sch.get_loops(roots[0])]
        assert len(roots) == 1 or all(  # every block under the one row loop
            sch.get(sch.get_loops(b)[0]).same_as(loops[0]) for b in roots)
        assert loops[0].kind == tirx.ForKind.PARALLEL, name
        assert "T.vectorized" in sch.mod["main"].script(), name


def test_reductions_across_rows_are_left_to_the_fallback():
    """A softmax over channels (axis 1 of NCHW), a column sum, a pooling: their
    reductions do not run along the innermost axis."""
    x = tensor_var("x", (2, 16, 9, 9))
    for body in (lambda bb, x: bb.emit(R.nn.softmax(x, axis=1)),
                 lambda bb, x: bb.emit(R.sum(x, axis=[0])),
                 lambda bb, x: bb.emit(R.nn.max_pool2d(x, [3, 3], [2, 2]))):
        names = _rule_names(build_graph([x], body))
        assert set(names.values()) == {"other"}, names


def test_row_kernel_faster_than_the_fallback():
    """ViT-tiny's attention softmax (3 heads, 197 tokens): the row schedule at least as
    fast as the generic one (measured 2x on this machine, 3.4x at 128 tokens)."""
    x = tensor_var("x", (1, 3, 197, 197))
    func = next(iter(prim_funcs(scheduled(build_graph([x], lambda bb, x: bb.emit(
        R.nn.softmax(x))), schedule=False)).values())).with_attr("global_symbol", "main")
    data = [tvm.runtime.tensor(rng.standard_normal((1, 3, 197, 197)).astype("float32")),
            tvm.runtime.tensor(np.zeros((1, 3, 197, 197), "float32"))]
    times = {}
    for rule in (RowReduction(), Fallback()):
        with TARGET:
            sch = rule.apply(func, TARGET, False)
        lib = tvm.compile(sch.mod, target=TARGET)
        timer = lib.mod.time_evaluator("main", tvm.cpu(), number=20, repeat=5)
        times[rule.name] = timer(*data).median
    assert times["row_reduction"] < 1.1 * times["fallback"], times


def test_log_softmax_takes_the_fast_exponential():
    """A language-model or CTC head's log-softmax: TOPI's ``exp`` went to libm per lane
    (64 x 32000: 9.4 ms); the row kernel uses ``fast_exp`` and matches numpy."""
    x = tensor_var("x", (48, 1000))
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.log_softmax(x)))
    text = "".join(f.script() for f in prim_funcs(scheduled(mod)).values())
    assert "T.exp(" not in text
    assert "T.parallel" in text
    data = rng.standard_normal((48, 1000)).astype("float32") * 4
    assert_allclose(run(mod, [data]), np.log(_softmax(data.astype(np.float64))))


@pytest.mark.parametrize("shape", [(1, 16, 64, 64), (2, 8, 33, 40)])
def test_instance_norm_statistics_once_per_channel(shape):
    """InstanceNormalization as ONNX imports it (mean and variance over H and W, then the
    element-wise chain): the rows are the (image, channel) pairs, so each statistic is
    computed once per channel, not once per image row (64 x 128 x 128 ran 128x the work:
    6.2 ms)."""
    n, c = shape[:2]
    gamma = rng.standard_normal((c, 1, 1)).astype("float32")
    beta = rng.standard_normal((c, 1, 1)).astype("float32")
    x = tensor_var("x", shape)

    def body(bb, x):
        mu = bb.emit(R.mean(x, axis=[2, 3], keepdims=True))
        var = bb.emit(R.variance(x, axis=[2, 3], keepdims=True))
        std = bb.emit(R.sqrt(R.add(var, relax.const(1e-5, "float32"))))
        y = bb.emit(R.divide(R.subtract(x, mu), std))
        return bb.emit(R.add(R.multiply(y, relax.const(gamma)), relax.const(beta)))

    mod = build_graph([x], body)
    texts = [f.script() for f in prim_funcs(scheduled(mod)).values()]
    reducing = [t for t in texts if "_red" in t]  # the statistics with their consumers
    assert reducing
    for text in reducing:  # the outermost loop: one iteration per (image, channel)
        first = next(line for line in text.splitlines() if line.strip().startswith("for "))
        assert f"T.int64({n * c}))" in first, first
    data = rng.standard_normal(shape).astype("float32") * 2 + 1
    d = data.astype(np.float64)
    mu, var = d.mean((2, 3), keepdims=True), d.var((2, 3), keepdims=True)
    assert_allclose(run(mod, [data]), (d - mu) / np.sqrt(var + 1e-5) * gamma + beta)


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min", "variance"])
@pytest.mark.parametrize("n,keepdims", [(37, True), (3199, False), (40, True)])
def test_reductions_over_rows_not_whole_vectors(kind, n, keepdims):
    """Reductions over a last axis that is not whole vectors reduce the vectors in lanes
    and the tail after them (``fast_math.row_statistic``), in parallel over the rows, and
    match float64 numpy."""
    op = {"sum": R.sum, "mean": R.mean, "max": R.max, "min": R.min, "variance": R.variance}
    x = tensor_var("x", (64, n))
    mod = build_graph([x], lambda bb, x: bb.emit(op[kind](x, axis=[-1], keepdims=keepdims)))
    text = "".join(f.script() for f in prim_funcs(scheduled(mod)).values())
    assert "T.vectorized" in text
    assert ("T.parallel" in text) == (n > 1000)  # parallel from enough work (a variance's
    # last block writes one value per row: counted by its rows' length)
    data = rng.standard_normal((64, n)).astype("float32") + 0.5
    ref = getattr(np, {"variance": "var"}.get(kind, kind))(data.astype(np.float64), axis=-1,
                                                            keepdims=keepdims)
    assert_allclose(run(mod, [data]), ref)

"""A Transformer encoder whose sequence length is symbolic (issue 17, SOD²: compiled once,
as fast as static) runs on the packed matmul and row kernels at every length.

The zoo's BERT-style encoder has a static length and a position table of that many rows;
:func:`encoder_any_length` turns it into the graph exporters write for a run-time length:
``position_ids[:, :Shape(input_ids)[1]]`` (Shape, Gather, Unsqueeze, Slice) gathers the
rows of the table, and the head reshapes infer the length (``-1``). Compiled once with
``specialize=False`` and run at several lengths against ONNX Runtime.

Tolerance: ``REL_TOL = 1e-5`` of the largest reference value. The kernels sum float32
products (K <= 256) in another order than ONNX Runtime's MLAS and use polynomial exp/erf
(within a few ulp); every sublayer ends in a LayerNorm, so errors do not grow with depth.
Measured here: at most 2.7e-6 absolute on outputs of magnitude ~4 (7e-7 relative). What the
symbolic kernels could get wrong is far larger: a padded key column left in the softmax
or a wrong position row moves outputs by ~1e-2 to 1 (the embeddings are N(0, 0.02) and
LayerNorm scales their differences to O(1)).
"""

from __future__ import annotations

import math
import re

import numpy as np
import onnx
import pytest
import tvm
from conftest import assert_close, ort_run
from onnx import helper, numpy_helper
from test_kernels_common import (
    TARGET,
    assert_allclose,
    build_graph,
    prim_funcs,
    run,
    scheduled,
    tensor_var,
)
from tvm import relax, te, tirx
from tvm.relax import op as R

import tvm_cocopie
from tvm_cocopie.bench.runtime_stats import vm_call_counts
from tvm_cocopie.models.bert import bert_encoder
from tvm_cocopie.schedules import RowReduction
from tvm_cocopie.schedules.base import root_blocks
from tvm_cocopie.schedules.versions import versioned
from tvm_cocopie.target import cpu_info

REL_TOL = 1e-5
LENGTHS = (1, 5, 13, 64)  # one token, lengths off the vector width (8) and the tile (4)
SEQ = "S"
#: a kernel of TVM's generic matmul legalization (``matmul2``, ``fused_matmul1_add3``),
#: not our packed product (``matmul_packed*``) or its column slice (``matmul_columns``)
GENERIC_MATMUL = re.compile(r"(^|_)matmul\d*(?!_packed|_columns)(_|$)")

rng = np.random.default_rng(17)


def encoder_any_length(**sizes) -> onnx.ModelProto:
    """The zoo encoder (``bert_encoder(**sizes)``) with a symbolic sequence length ``S``,
    up to the rows of its position table (its static ``seq``)."""
    model = bert_encoder(**sizes)
    graph = model.graph
    seq = graph.input[0].type.tensor_type.shape.dim[1].dim_value
    inits = {init.name: init for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Reshape":  # [0, seq, heads, dim] / [0, seq, hidden]: infer it
            init = inits[node.input[1]]
            target = numpy_helper.to_array(init).copy()
            assert target[1] == seq
            target[1] = -1
            init.CopyFrom(numpy_helper.from_array(target, init.name))
    table = next(name for name in inits if "position_embeddings" in name)
    ids = graph.input[0].name
    graph.initializer.extend([
        numpy_helper.from_array(np.arange(seq, dtype=np.int64)[None], "position_ids"),
        numpy_helper.from_array(np.array(1, np.int64), "seq_axis"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ])
    exported = [
        helper.make_node("Shape", [ids], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "seq_axis"], ["seq_len"], axis=0),
        helper.make_node("Unsqueeze", ["seq_len", "zero"], ["seq_end"]),
        helper.make_node("Slice", ["position_ids", "zero", "seq_end", "one"], ["positions"]),
        helper.make_node("Gather", [table, "positions"], ["position_rows"], axis=0),
    ]
    for node in graph.node:  # the Add of word and position embeddings
        for i, name in enumerate(node.input):
            if name == table:
                node.input[i] = "position_rows"
    nodes = exported + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    for value in (graph.input[0], graph.output[0]):
        dim = value.type.tensor_type.shape.dim[1]
        dim.Clear()
        dim.dim_param = SEQ
    onnx.checker.check_model(model, full_check=True)
    return model


def _kernels(compiled, ids) -> dict:
    counts = vm_call_counts(compiled.executable, [ids])
    return {name: n for name, n in counts.items()
            if not name.startswith(("vm.builtin.", "tvm_cocopie.vm."))}


def test_encoder_compiled_once_runs_every_length():
    """2 layers, hidden 64, 4 heads: one symbolic build against ONNX Runtime at lengths
    1, 5, 13, 64; every projection and FFN matmul on the packed kernel at every length,
    none on TVM's generic one, and softmax(Q K^T) V one attention kernel (S symbolic)."""
    model = encoder_any_length(num_layers=2, hidden=64, heads=4, ffn=256, seq=64, vocab=100)
    compiled = tvm_cocopie.compile(model, None, specialize=False)
    assert [spec.shape for spec in compiled.inputs] == [(1, SEQ)]
    calls = set()
    for length in LENGTHS:
        ids = rng.integers(0, 100, (1, length)).astype(np.int64)
        expected = ort_run(model, {"input_ids": ids})
        assert expected[0].shape == (1, length, 64)
        assert_close([compiled(input_ids=ids)], expected, rel_tol=REL_TOL)
        kernels = _kernels(compiled, ids)
        generic = sorted(name for name in kernels if GENERIC_MATMUL.search(name))
        assert not generic, f"generic matmul kernels at S={length}: {generic}"
        packed = sum(n for name, n in kernels.items() if "matmul_packed" in name)
        assert packed == 2 * 6, (length, kernels)  # per layer: Q, K, V, out, 2 FFN
        # and the attention chain as one kernel over the run-time sequence
        assert sum(n for name, n in kernels.items() if "attention" in name) == 2, kernels
        calls.add(tuple(sorted(kernels.items())))
    assert len(calls) == 1, "the kernels called change with the length"


def test_generic_matmul_pattern():
    for name in ("matmul2", "fused_matmul1_multiply2", "matmul"):
        assert GENERIC_MATMUL.search(name), name
    for name in ("matmul_packed1", "fused_matmul_packed3_add5", "fused_matmul_columns_multiply2",
                 "fused_transpose1_rhs_pack"):
        assert not GENERIC_MATMUL.search(name), name


# --- symbolic-M matmuls against numpy -----------------------------------------------------

def _var(name: str) -> tirx.Var:
    return tirx.Var(name, "int64")


def _uses_packed_kernel(mod) -> None:
    texts = [f.script() for f in prim_funcs(scheduled(mod)).values()]
    assert any("cocopie.matmul" in t for t in texts)
    assert not any(GENERIC_MATMUL.search(name) for name in prim_funcs(scheduled(mod)))


@pytest.mark.parametrize("m", [1, 5, 64])
def test_symbolic_rows_with_constant_weight_bias_gelu(m):
    """``(M, K) @ (K, N)``, M symbolic, with a bias + GELU epilogue (rows padded to whole
    register tiles, the epilogue written for the real rows only)."""
    k, n = 48, 40
    w = rng.standard_normal((k, n)).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    x = tensor_var("x", (_var("M"), k))
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.gelu(R.add(R.matmul(x, relax.const(w)),
                                                                  relax.const(b)))))
    _uses_packed_kernel(mod)
    data = rng.standard_normal((m, k)).astype("float32")
    y = data.astype(np.float64) @ w + b
    assert_allclose(run(mod, [data]), 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2))))


@pytest.mark.parametrize("batch,m", [(1, 1), (3, 7), (2, 16)])
def test_symbolic_batch_and_rows_shared_weight(batch, m):
    k, n = 32, 24
    w = rng.standard_normal((k, n)).astype("float32")
    x = tensor_var("x", (_var("B"), _var("M"), k))
    mod = build_graph([x], lambda bb, x: bb.emit(R.matmul(x, relax.const(w))))
    _uses_packed_kernel(mod)
    data = rng.standard_normal((batch, m, k)).astype("float32")
    assert_allclose(run(mod, [data]), data.astype(np.float64) @ w)


@pytest.mark.parametrize("steps", [1, 9])
def test_symbolic_time_major_rows(steps):
    """``(T, 1, K)``: the symbolic time dim becomes the product's rows."""
    k, n = 64, 40
    w = rng.standard_normal((k, n)).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    x = tensor_var("x", (_var("T"), 1, k))
    mod = build_graph([x], lambda bb, x: bb.emit(R.add(R.matmul(x, relax.const(w)),
                                                       relax.const(b))))
    _uses_packed_kernel(mod)
    data = rng.standard_normal((steps, 1, k)).astype("float32")
    assert_allclose(run(mod, [data]), data.astype(np.float64) @ w + b)


@pytest.mark.parametrize("s", [1, 6, 19, 45])
def test_attention_products_with_symbolic_sequence(s):
    """``softmax(Q K^T / 4) V`` with heads ``(H, S, D)`` and S symbolic: one attention
    kernel (:mod:`tvm_cocopie.topi.cpu.attention`) over run-time query rows and key
    columns (padded to whole register tiles, the padded columns masked out of the row
    maximum and sum), K^T read through the permutation; = numpy at lengths below one
    register tile, between tiles and above."""
    h, d = 3, 16
    seq = _var("S")
    q, k, v = (tensor_var(name, (h, seq, d)) for name in "qkv")

    def body(bb, q, k, v):
        scores = bb.emit(R.multiply(R.matmul(q, R.permute_dims(k, [0, 2, 1])),
                                    relax.const(0.25, "float32")))
        return bb.emit(R.matmul(R.nn.softmax(scores), v))

    mod = build_graph([q, k, v], body)
    funcs = prim_funcs(scheduled(mod)).values()
    kernels = [f for f in funcs if "attn_scores" in f.script()]
    assert len(kernels) == 1 and not any("cocopie.matmul" in f.script() for f in funcs)
    assert "T.parallel" in kernels[0].script()  # scheduled by the attention rule
    qs, ks, vs = (rng.standard_normal((h, s, d)).astype("float32") for _ in range(3))
    scores = qs.astype(np.float64) @ ks.transpose(0, 2, 1) * 0.25
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    assert_allclose(run(mod, [qs, ks, vs]), p @ vs)


# --- row kernels with symbolic extents ------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 8, 37])
def test_softmax_over_symbolic_rows_is_one_vectorized_row_loop(n):
    """Softmax over a symbolic number of rows of symbolic length: the row rule takes it
    (one loop over rows, parallel in the version for many rows, whole vectors and a scalar
    tail), every length matches numpy, a row shorter than a vector included (its vector
    body never runs: the reductions start from their init)."""
    x = tensor_var("x", (2, _var("R"), _var("N")))
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.softmax(x)))
    (func,) = prim_funcs(scheduled(mod, schedule=False)).values()
    with TARGET:
        sch = RowReduction().apply(func, TARGET, False)
    assert sch is not None
    # two versions (parallel for many rows, serial for few), each one loop over rows
    versions = root_blocks(sch)
    assert [sch.get(b).name_hint for b in versions] == ["version_0", "version_1"]
    text = sch.mod["main"].script()
    assert text.count("T.parallel") == 1
    assert "T.vectorized" in text and "pragma_loop_partition_hint" in text
    data = (rng.standard_normal((2, 3, n)) * 3).astype("float32")
    e = np.exp(data - data.max(-1, keepdims=True))
    assert_allclose(run(mod, [data]), e / e.sum(-1, keepdims=True))


def test_layer_norm_over_symbolic_rows():
    hidden = 64
    gamma = rng.standard_normal(hidden).astype("float32")
    beta = rng.standard_normal(hidden).astype("float32")
    x = tensor_var("x", (1, _var("S"), hidden))
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.layer_norm(
        x, relax.const(gamma), relax.const(beta), axes=[-1])))
    for func in prim_funcs(scheduled(mod, schedule=False)).values():
        with TARGET:
            assert RowReduction().apply(func, TARGET, False) is not None
    for s in (1, 11):
        data = rng.standard_normal((1, s, hidden)).astype("float32")
        mu = data.mean(-1, keepdims=True)
        ref = (data - mu) / np.sqrt(data.var(-1, keepdims=True) + 1e-5) * gamma + beta
        assert_allclose(run(mod, [data]), ref)


def test_elementwise_kernel_over_symbolic_columns_is_vectorized():
    """The fallback vectorizes a symbolic innermost loop (whole vectors, a scalar tail)."""
    x = tensor_var("x", (4, _var("N")))
    mod = build_graph([x], lambda bb, x: bb.emit(R.multiply(R.exp(x), x)))
    text = "\n".join(f.script() for f in prim_funcs(scheduled(mod)).values())
    assert "T.vectorized" in text and "pragma_loop_partition_hint" in text
    for n in (3, 8, 21):
        data = rng.standard_normal((4, n)).astype("float32")
        assert_allclose(run(mod, [data]), np.exp(data.astype(np.float64)) * data)


def test_symbolic_kernel_carries_a_serial_version():
    """A kernel with a symbolic extent holds two versions: parallel from
    ``MIN_PARALLEL_WORK`` iterations on (512 rows of 256 here), serial below, as a static
    build of each size would be; both compute the same."""
    x = tensor_var("x", (_var("R"), 256))
    mod = build_graph([x], lambda bb, x: bb.emit(R.add(R.exp(x), x)))
    (text,) = [f.script() for f in prim_funcs(scheduled(mod)).values()]
    assert "version_0" in text and "version_1" in text and text.count("T.parallel") == 1
    for rows in (2, 600):
        data = rng.standard_normal((rows, 256)).astype("float32")
        assert_allclose(run(mod, [data]), np.exp(data.astype(np.float64)) + data)


def test_no_version_for_sizes_where_every_tensor_is_empty():
    """A second version that would run only where a buffer has no elements (``W < 4``
    for ``W // 4`` rows) is not made: TIR's simplifier, knowing that branch's bounds,
    folded the reshape's ``// (W // 4)`` into a division by zero and the build failed
    (the CRNN through DNNFusion). The kernel = numpy."""
    width = _var("W")
    rows = width // 4
    a = te.placeholder((rows, 256), "float32", "A")
    # the index arithmetic of a reshape over run-time rows (the identity here)
    b = te.compute((rows, 256), lambda i, j: a[(j * rows + i) % rows,
                                               (j * rows + i) // rows] + 1.0, name="B")
    func = te.create_prim_func([a, b, width])
    sch = versioned(func, lambda s, first: s, width >= 4)
    assert "version_1" not in sch.mod["main"].script()
    lib = tvm.tirx.build(sch.mod, target=tvm.target.Target(TARGET))
    data = rng.standard_normal((3, 256)).astype("float32")
    out = tvm.runtime.empty((3, 256), "float32")
    lib["main"](tvm.runtime.tensor(data), out, 12)
    assert_allclose(out.numpy(), data.astype(np.float64) + 1)


@pytest.mark.parametrize("m", [3, 32])
def test_symbolic_rows_parallel_over_row_tiles_and_column_panels(m):
    """A projection over run-time rows: its parallel loop runs over row tiles x column
    panels (the panels' index the fused one modulo a constant), not over row tiles
    alone (32 tokens in 13-row tiles were 3 tasks for 2 cores: 1.45x the static time);
    the bias epilogue still at the register tile; = numpy."""
    k, n = 256, 256
    w = rng.standard_normal((k, n)).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    x = tensor_var("x", (_var("S"), k))
    mod = build_graph([x], lambda bb, x: bb.emit(R.add(R.matmul(x, relax.const(w)),
                                                       relax.const(b))))
    (func,) = [f for f in prim_funcs(scheduled(mod)).values()
               if "cocopie.matmul" in f.script()]
    # the parallel version (for many rows): row tiles x the panels of two vectors'
    # columns (8 of 32 on AVX-512, 16 of 16 on AVX2)
    panels = n // (2 * cpu_info(TARGET).f32_lanes)
    extents = re.findall(r"T\.parallel\((.*)\):", func.script())
    assert extents and all("S" in e and e.endswith(f"* T.int64({panels})")
                           for e in extents), extents
    data = rng.standard_normal((m, k)).astype("float32")
    assert_allclose(run(mod, [data]), data.astype(np.float64) @ w + b)

"""SOD²'s analysis (``tvm_cocopie.relay_passes.dynamic``): operator classes, the RDP
lattice, forward/backward propagation with constant propagation, and the pass.

Every graph here has shapes known by construction; the tests assert RDP finds each dim
the construction fixes, classes operators as Table 5.2 does, and never claims a dim it
cannot know: its claims are evaluated at random input sizes and compared with the
shapes ONNX Runtime (or TVM's VM, for graphs written in Relax) actually produces.
"""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import onnx
import pytest
import tvm
import tvm_ffi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from tvm import relax, tirx

from tvm_cocopie.errors import CompilationError
from tvm_cocopie.frontend import from_onnx
from tvm_cocopie.models.graph_builder import GraphBuilder
from tvm_cocopie.models.resnet import resnet18
from tvm_cocopie.relay_passes.dynamic import (
    ATTR,
    DimKind,
    Knowledge,
    OpClass,
    RankDimensionPropagation,
    TransferKind,
    analyze,
    classify,
)
from tvm_cocopie.relay_passes.dynamic.lattice import NAC, UNDEF, known, meet

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
SETTINGS = settings(max_examples=6, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------------ helpers
def model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(m)
    return m


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def f32(name, shape, seed=0):
    return numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def rdp(m):
    return analyze(from_onnx(m))["main"]


def outputs(result):
    out = result.output
    return list(out.fields) if out.what == "tuple" else [out]


def text(a) -> list[str]:
    return [str(d) for d in a.dims]


def kinds(a) -> list[DimKind]:
    return [d.kind for d in a.dims]


def inputs_of(m, sizes, ints=None) -> dict:
    """Random feeds for ``m``'s inputs, symbolic dims taken from ``sizes``."""
    rng = np.random.default_rng(0)
    feeds = {}
    for value in m.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else sizes[d.dim_param]
                for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == I64:
            feeds[value.name] = (ints or {}).get(value.name, np.zeros(dims, np.int64))
        else:
            feeds[value.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def ort_shapes(m, feeds) -> list[tuple]:
    import onnxruntime as ort

    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return [tuple(o.shape) for o in sess.run(None, feeds)]


def assert_claims(result, shapes, sizes) -> int:
    """Every dim RDP claims determined equals the real one at ``sizes``; returns how
    many dims were checked."""
    claims = outputs(result)
    assert len(claims) == len(shapes)
    checked = 0
    for claim, shape in zip(claims, shapes):
        if claim.dims is None:
            continue
        assert claim.rank == len(shape), (claim, shape)
        for d, real in zip(claim.dims, shape):
            value = d.at(sizes)
            if d.determined:
                assert value == real, f"claimed {d} = {value} at {sizes}, real {real}"
                checked += 1
    return checked


def check_ort(m, result, sizes, ints=None) -> int:
    return assert_claims(result, ort_shapes(m, inputs_of(m, sizes, ints)), sizes)


# ------------------------------------------------------------------------ lattice
def test_lattice_meet_and_levels():
    n = tirx.Var("n", "int64")
    four = known(4)
    assert meet(UNDEF, four).same(four) and meet(four, UNDEF).same(four)
    assert meet(four, known(4)).same(four)
    assert meet(four, known(8)).kind == DimKind.UNKNOWN
    assert not NAC.determined and four.determined and four.value == 4
    from tvm_cocopie.relay_passes.dynamic.lattice import Dim
    expr = Dim(DimKind.EXPR, n * 4)
    assert str(expr) == "n * 4" and expr.at({"n": 3}) == 12 and expr.at({}) is None


# ------------------------------------------------------------------------ classes
def _call(expr, *params):
    bb = relax.BlockBuilder()
    with bb.function("f", list(params)):
        out = bb.emit(expr)
        bb.emit_func_output(out)
    return bb.get()["f"].body.blocks[0].bindings[0].value


def test_classes_follow_relax_semantics():
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    t = relax.Var("t", relax.TensorType([2], "int64"))
    s = relax.Var("s", relax.ShapeType(ndim=2))
    m = tirx.Var("m", "int64")
    cases = [
        (relax.op.add(x, x), OpClass.ISDOS, TransferKind.BROADCAST),
        (relax.op.nn.relu(x), OpClass.ISDOS, TransferKind.SHAPE_PRESERVING),
        (relax.op.nn.softmax(x), OpClass.ISDOS, TransferKind.SHAPE_PRESERVING),
        (relax.op.clip(x, m, 6), OpClass.ISDOS, TransferKind.SHAPE_PRESERVING),
        (relax.op.matmul(x, relax.const(np.zeros((4, 2), "float32"))), OpClass.ISDOS,
         TransferKind.MATMUL),
        (relax.op.shape_of(x), OpClass.ISDO, TransferKind.OTHER),
        (relax.op.broadcast_to(relax.const(0.0), relax.ShapeExpr([n, 4])), OpClass.ISDO, None),
        (relax.op.reshape(x, relax.ShapeExpr([2, n * 2])), OpClass.ISDOS, TransferKind.RESHAPE),
        (relax.op.reshape(x, s), OpClass.ISVDOS, TransferKind.RESHAPE),
        (relax.op.tensor_to_shape(t), OpClass.ISVDOS, None),
        (relax.op.arange(0, m, 1), OpClass.ISVDOS, None),
        (relax.op.arange(0, 8, 2), OpClass.ISDO, None),
        (relax.op.nonzero(x), OpClass.EDO, None),
        (relax.op.unique(x), OpClass.EDO, None),
    ]
    for expr, want, kind in cases:
        params = [v for v in (x, t, s) if v in relax.analysis.free_vars(expr)]
        call = _call(expr, *params) if params else relax.BlockBuilder().normalize(expr)
        got = classify(call, Knowledge([n]))  # n: an input dim, m: a run-time value
        assert got.op_class == want, (expr, got)
        if kind is not None:
            assert got.kind == kind, (expr, got)
    # an opaque packed call: never assumed static
    packed = relax.call_pure_packed("my_kernel", x, ty_args=relax.TensorType([n, 4], "float32"))
    assert classify(_call(packed, x)).op_class == OpClass.EDO


def test_call_tir_class_follows_its_output_type():
    m = from_onnx(model([helper.make_node("Tile", ["x", "reps"], ["t"]),
                         helper.make_node("Tile", ["x", "rc"], ["u"])],
                        [("x", F32, ["N", 4]), ("reps", I64, [2])],
                        [("t", F32, ["A", "B"]), ("u", F32, ["C", 12])], [i64("rc", [2, 3])]))
    r = analyze(m)["main"]
    tiles = {b.op.split(":")[1]: b for b in r.bindings.values() if (b.op or "").startswith(
        "call_tir")}
    assert tiles["tile"].after == OpClass.ISDOS and text(tiles["tile"].abs) == ["N * 2", "12"]
    dyn = tiles["dyn_tile"]  # repeats from a model input: value-determined
    assert dyn.before == dyn.after == OpClass.ISVDOS
    assert all(d.kind == DimKind.UNKNOWN for d in dyn.abs.dims)


# ---------------------------------------------------------------- shape arithmetic
def _shape_piece(name, data, axis, nodes):
    nodes += [helper.make_node("Shape", [data], [f"{name}.s"]),
              helper.make_node("Gather", [f"{name}.s", f"ax{axis}"], [f"{name}.g"], axis=0)]
    return f"{name}.g"


def reshape_chain_model():
    """``Shape -> Gather -> Mul -> Concat -> Reshape`` as exporters write ``x.view(N, -1)``
    by hand, then two more reshapes."""
    nodes = []
    n = _shape_piece("n", "x", 0, nodes)
    s = _shape_piece("s", "x", 1, nodes)
    c = _shape_piece("c", "x", 2, nodes)
    nodes += [
        helper.make_node("Mul", [s, c], ["sc"]),
        helper.make_node("Unsqueeze", [n, "axes0"], ["n1"]),
        helper.make_node("Unsqueeze", ["sc", "axes0"], ["sc1"]),
        helper.make_node("Concat", ["n1", "sc1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y1"]),
        helper.make_node("Reshape", ["y1", "flat4"], ["y2"]),
        helper.make_node("Reshape", ["y1", "split2"], ["y3"]),
    ]
    inits = [i64("ax0", 0), i64("ax1", 1), i64("ax2", 2), i64("axes0", [0]),
             i64("flat4", [-1, 4]), i64("split2", [0, 2, -1])]
    return model(nodes, [("x", F32, ["N", "S", 4])],
                 [("y1", F32, ["N", "S4"]), ("y2", F32, ["NS", 4]), ("y3", F32, ["N", 2, "S2"])],
                 inits)


def test_reshape_chain_dims():
    m = reshape_chain_model()
    r = rdp(m)
    y1, y2, y3 = outputs(r)
    assert text(y1) == ["N", "S * 4"] and kinds(y1) == [DimKind.SYMBOLIC, DimKind.EXPR]
    assert text(y2) == ["N * S", "4"]
    assert text(y3) == ["N", "2", "S * 2"]
    assert r.dim_counts()["unknown"] == 0
    assert check_ort(m, r, {"N": 3, "S": 5}) == 7


@SETTINGS
@given(st.integers(1, 9), st.integers(1, 17))
def test_reshape_chain_claims_hold_at_random_sizes(n, s):
    assert check_ort(REGISTRY["reshape_chain"][0], REGISTRY["reshape_chain"][1],
                     {"N": n, "S": s}) == 7


def range_model():
    """``Range(0, Shape(ids)[1])`` position ids, as exporters write them: the importer
    leaves the length a run-time variable, RDP's constant propagation resolves it."""
    nodes = [helper.make_node("Shape", ["ids"], ["s"]),
             helper.make_node("Gather", ["s", "ax1"], ["seq"], axis=0),
             helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),
             helper.make_node("Gather", ["table", "pos"], ["pe"], axis=0)]
    return model(nodes, [("ids", I64, ["B", "S"])], [("pe", F32, ["S", 8]), ("pos", I64, ["S"])],
                 [i64("ax1", 1), i64("zero", 0), i64("one", 1), f32("table", [64, 8])])


def test_range_constant_propagation_moves_classes():
    m = range_model()
    r = rdp(m)
    assert r.substitutions == {"range_len_0": "S"}
    pe, pos = outputs(r)
    assert text(pe) == ["S", "8"] and text(pos) == ["S"]
    arange = next(b for b in r.bindings.values() if b.op == "relax.arange")
    assert (arange.before, arange.after) == (OpClass.ISVDOS, OpClass.ISDO)
    to_shape = next(b for b in r.bindings.values() if b.op == "relax.tensor_to_shape")
    assert to_shape.moved and to_shape.after == OpClass.ISDO
    assert r.class_counts(after=True)["ISVDOS"] == 0 < r.class_counts(after=False)["ISVDOS"]
    assert check_ort(m, r, {"B": 2, "S": 11}) == 3


def embedding_model(max_pos=64, hidden=16):
    """BERT's embeddings as exported: the position-id buffer sliced to the sequence length
    through a ``[1]``-shaped Gather, which the importer turns into ``scatter_elements``
    and a ``dynamic_strided_slice``: Relax knows nothing of the shapes after it."""
    nodes = [helper.make_node("Shape", ["ids"], ["s"]),
             helper.make_node("Gather", ["s", "ax1"], ["seq"], axis=0),
             helper.make_node("Slice", ["buffer", "zero", "seq", "ax1"], ["pos"]),
             helper.make_node("Gather", ["words", "ids"], ["we"], axis=0),
             helper.make_node("Gather", ["positions", "pos"], ["pe"], axis=0),
             helper.make_node("Add", ["we", "pe"], ["e"]),
             helper.make_node("LayerNormalization", ["e", "g", "b"], ["y"], axis=-1)]
    inits = [i64("ax1", [1]), i64("zero", [0]), i64("buffer", np.arange(max_pos)[None]),
             f32("words", [50, hidden]), f32("positions", [max_pos, hidden], 1),
             f32("g", [hidden], 2), f32("b", [hidden], 3)]
    return model(nodes, [("ids", I64, ["B", "S"])], [("y", F32, ["B", "S", hidden])], inits)


def test_dynamic_slice_resolved_where_relax_gives_up():
    m = embedding_model()
    mod = from_onnx(m)
    relax_unknown = sum(
        1 for b in mod["main"].body.blocks[0].bindings
        if isinstance(b.var.ty, relax.TensorType) and b.var.ty.shape is None)
    assert relax_unknown >= 10  # everything after the slice
    r = analyze(mod)["main"]
    assert text(outputs(r)[0]) == ["B", "S", "16"]
    assert r.dim_counts()["unknown"] == 0 and r.dim_counts()["unknown_rank"] == 0
    sliced = next(b for b in r.bindings.values() if b.op == "relax.dynamic_strided_slice")
    assert (sliced.before, sliced.after) == (OpClass.ISVDOS, OpClass.ISDOS)
    assert text(sliced.abs) == ["1", "T.min(S, 64)"]  # the slice clamps at the buffer


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 64))
def test_dynamic_slice_claims_hold_at_random_sizes(b, s):
    m, r = REGISTRY["embedding"]
    assert check_ort(m, r, {"B": b, "S": s}) == 3


# -------------------------------------------------------------------- broadcasting
def broadcast_models():
    bias = model([helper.make_node("Add", ["x", "bias"], ["y"])],
                 [("x", F32, ["N", "D"])], [("y", F32, ["N", 4])], [f32("bias", [4])])
    scaled = model([helper.make_node("Mul", ["x", "s"], ["t"]),
                    helper.make_node("MatMul", ["t", "w"], ["y"])],
                   [("x", F32, ["N", "D"]), ("s", F32, ["N", 1])], [("y", F32, ["N", 10])],
                   [f32("w", [64, 10])])
    pair = model([helper.make_node("Add", ["x", "z"], ["t"]),
                  helper.make_node("MatMul", ["t", "w"], ["y"])],
                 [("x", F32, ["N", "D"]), ("z", F32, ["N", "E"])],
                 [("t", F32, ["N", 16]), ("y", F32, ["N", 8])], [f32("w", [16, 8])])
    return bias, scaled, pair


def test_broadcast_symbolic_meets_constant():
    bias, scaled, pair = broadcast_models()
    # D against a constant 4: the output is 4 whatever D (1 or 4); D itself stays symbolic
    r = rdp(bias)
    assert text(outputs(r)[0]) == ["N", "4"]
    assert r.params["x"].dims[1].kind == DimKind.SYMBOLIC and "D" not in r.substitutions
    for d in (1, 4):
        assert check_ort(bias, r, {"N": 3, "D": d}) == 2
    # backward: the matmul needs 64 columns, through the row scale x's D must be 64
    r = rdp(scaled)
    assert r.substitutions == {"D": "64"}
    assert text(r.params["x"]) == ["N", "64"]
    assert check_ort(scaled, r, {"N": 5, "D": 64}) == 2
    # D against E: the sum's dim is max(D, E) forward, 16 once the matmul's constraint
    # comes back; D and E stay symbolic (each may be 1)
    r = rdp(pair)
    t, y = outputs(r)
    assert text(t) == ["N", "16"] and text(y) == ["N", "8"]
    assert not r.substitutions and r.constraints == ["T.max(D, E) == 16"]
    for d, e in ((1, 16), (16, 1), (16, 16)):
        assert check_ort(pair, r, {"N": 2, "D": d, "E": e}) == 4


# ------------------------------------------------------------------ concat / matmul
def test_concat_equates_other_dims_and_sums_the_axis():
    m = model([helper.make_node("Concat", ["x", "y"], ["rows"], axis=0),
               helper.make_node("Concat", ["a", "b"], ["cols"], axis=1)],
              [("x", F32, ["N", "C"]), ("y", F32, ["M", 4]), ("a", F32, ["N", 3]),
               ("b", F32, ["N", "E"])],
              [("rows", F32, ["R", 4]), ("cols", F32, ["N", "W"])])
    r = rdp(m)
    rows, cols = outputs(r)
    assert r.substitutions == {"C": "4"}
    assert text(rows) == ["N + M", "4"] and text(cols) == ["N", "E + 3"]
    assert check_ort(m, r, {"N": 2, "M": 7, "C": 4, "E": 5}) == 4


def test_matmul_inner_dims_and_batches():
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"]),
               helper.make_node("MatMul", ["q", "k"], ["s"])],
              [("x", F32, ["B", "S", "K"]), ("q", F32, ["B", 4, "S", 8]),
               ("k", F32, ["B", 4, 8, "S"])],
              [("y", F32, ["B", "S", 32]), ("s", F32, ["B", 4, "S", "S"])], [f32("w", [64, 32])])
    r = rdp(m)
    assert r.substitutions == {"K": "64"}
    y, s = outputs(r)
    assert text(y) == ["B", "S", "32"] and text(s) == ["B", "4", "S", "S"]
    assert check_ort(m, r, {"B": 2, "S": 9, "K": 64}) == 7


# ---------------------------------------------------------- value / execution decided
def test_where_nonzero_and_value_determined_shapes():
    m = model([helper.make_node("Greater", ["x", "zero"], ["gt"]),
               helper.make_node("Where", ["gt", "x", "zero"], ["w"]),
               helper.make_node("NonZero", ["x"], ["nz"]),
               helper.make_node("Transpose", ["nz"], ["nzt"]),
               helper.make_node("Tile", ["x", "reps"], ["t"])],
              [("x", F32, ["N", 4]), ("reps", I64, [2])],
              [("w", F32, ["N", 4]), ("nz", I64, [2, "K"]), ("nzt", I64, ["K", 2]),
               ("t", F32, ["A", "B"])],
              [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    r = rdp(m)
    w, nz, nzt, t = outputs(r)
    assert text(w) == ["N", "4"]
    where = next(b for b in r.bindings.values() if b.op == "relax.where")
    assert where.after == OpClass.ISDOS  # the shape is the broadcast of its inputs
    nonzero = next(b for b in r.bindings.values() if "nonzero" in (b.op or ""))
    assert nonzero.before == nonzero.after == OpClass.EDO
    assert nz.dims[0].value == 2 and nz.dims[1].kind == DimKind.UNKNOWN
    # the transpose carries the same unknown: equal sizes stay known to be equal
    assert nzt.dims[0].same(nz.dims[1]) and nzt.dims[1].value == 2
    assert all(d.kind == DimKind.UNKNOWN for d in t.dims)  # tile by run-time repeats
    for n in (1, 3, 6):
        assert check_ort(m, r, {"N": n}, {"reps": np.array([2, 3], np.int64)}) == 4


# ----------------------------------------------------- Relax-level shape arithmetic
def shape_arith_module(consumers: bool = True):
    """Shape arithmetic Relax's inference does not follow (``tensor_to_shape``), and a
    reshape by a model input's values, pinned down by its consumers (without them, the
    module compiles: TVM legalizes no concat of tensors without a shape)."""
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 12], "float32"))
    t = relax.Var("t", relax.TensorType([3], "int64"))
    z = relax.Var("z", relax.TensorType([n, 3, 4], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, t, z]):
        with bb.dataflow():
            s = bb.emit(relax.op.shape_to_tensor(relax.op.shape_of(x)))
            s = bb.emit(relax.op.multiply(s, relax.const(np.array([2, 1]), "int64")))
            s = bb.emit(relax.op.floor_divide(s, relax.const(np.array([1, 2]), "int64")))
            y = bb.emit(relax.op.reshape(x, bb.emit(relax.op.tensor_to_shape(s))))
            u = bb.emit(relax.op.reshape(x, bb.emit(relax.op.tensor_to_shape(t))))
            outs = [y, u]
            if consumers:
                outs.append(bb.emit(relax.op.concat([u, z], axis=0)))
                outs.append(bb.emit(relax.op.matmul(u, relax.const(np.ones((4, 5), "float32")))))
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()


def test_relax_shape_arithmetic_and_element_count():
    mod = shape_arith_module()
    reshapes = [b.var.ty for b in mod["main"].body.blocks[0].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.reshape"]
    assert len(reshapes) == 2  # Relax says R.Tensor(lv4) / R.Tensor(lv6): no dims
    assert not any(isinstance(ty.shape, relax.ShapeExpr) for ty in reshapes)
    r = analyze(mod)["main"]
    y, u, c, mm = outputs(r)
    assert text(y) == ["n * 2", "6"]
    # u = reshape(x, t): t's values are unknown, but the concat needs u[1:] == (3, 4)
    # and then x's element count gives u[0]
    assert text(u) == ["n", "3", "4"] and text(c) == ["n * 2", "3", "4"]
    assert text(mm) == ["n", "3", "5"]
    reshape = [b for b in r.bindings.values() if b.op == "relax.reshape"]
    assert [(b.before, b.after) for b in reshape] == [(OpClass.ISVDOS, OpClass.ISDOS)] * 2


def test_relax_claims_hold_when_run():
    mod = shape_arith_module(consumers=False)
    r = analyze(mod)["main"]
    assert [d.kind for d in outputs(r)[1].dims] == [DimKind.UNKNOWN] * 3
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for n in (3, 6):
        x = np.zeros((n, 12), np.float32)
        t = np.array([n, 3, 4], np.int64)
        z = np.zeros((n, 3, 4), np.float32)
        res = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(t), tvm.runtime.tensor(z))
        shapes = [tuple(o.numpy().shape) for o in res]
        assert assert_claims(r, shapes, {"n": n}) == 2


def test_if_merges_what_both_branches_agree_on():
    n = tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 4], "float32"))
    c = relax.Var("c", relax.TensorType([], "bool"))
    bb = relax.BlockBuilder()

    def branch(*exprs):
        vs = [relax.Var(f"b{i}", bb.normalize(e).ty) for i, e in enumerate(exprs)]
        out = relax.Var("res", relax.TupleType([v.ty for v in vs]))
        bindings = [relax.VarBinding(v, bb.normalize(e)) for v, e in zip(vs, exprs)]
        bindings.append(relax.VarBinding(out, relax.Tuple(vs)))
        return relax.SeqExpr([relax.BindingBlock(bindings)], out)

    then = branch(relax.op.nn.relu(x), relax.op.reshape(x, relax.ShapeExpr([4, n])))
    other = branch(relax.op.negative(x), relax.op.nn.relu(x))
    cond = bb.normalize(relax.If(c, then, other))
    y = relax.Var("y", cond.ty)  # Relax: the branches' common type
    body = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(y, cond)])], y)
    r = analyze(relax.Function([x, c], body, y.ty))["main"]
    same, differs = r["y"].abs.fields
    assert text(same) == ["n", "4"]
    assert [d.kind for d in differs.dims] == [DimKind.UNKNOWN] * 2  # (4, n) or (n, 4)
    assert r["y"].after == OpClass.EDO


def test_an_impossible_program_is_reported(caplog):
    # K must be 64 for the matmul and 32 for the concat: no input runs
    m = model([helper.make_node("MatMul", ["x", "w"], ["p"]),
               helper.make_node("Concat", ["x", "y"], ["z"], axis=0)],
              [("x", F32, ["N", "K"]), ("y", F32, ["M", 32])],
              [("p", F32, ["N", 8]), ("z", F32, ["R", 32])], [f32("w", [64, 8])])
    with caplog.at_level(logging.WARNING):
        r = rdp(m)
    assert r.conflicts and "cannot hold" in caplog.text


# --------------------------------------------------------------------- whole models
def _i(gb, values, kind="const"):
    return gb.const(np.array(values, dtype=np.int64), kind)


def _dim(gb, x, axis):
    """``Unsqueeze(Gather(Shape(x), axis))``: one piece of a computed shape."""
    v = gb.values[x]
    s = gb.node("Shape", [x], np.array(v.shape, np.int64), kind="shape")
    d = gb.node("Gather", [s, _i(gb, axis, "index")], np.array(v.shape[axis]), kind="dim",
                axis=0)
    return gb.node("Unsqueeze", [d, _i(gb, [0], "axes")], np.array([v.shape[axis]]),
                   kind="unsqueeze")


def _reshape(gb, x, pieces, concrete):
    shape = gb.node("Concat", pieces, np.concatenate([gb.values[p] for p in pieces]),
                    kind="target", axis=0)
    return gb.node("Reshape", [x, shape], gb.values[x].reshape(concrete), kind="reshape")


def bert_symbolic(layers=2, hidden=32, heads=4, ffn=64, vocab=50, max_pos=64):
    """A BERT-style encoder with symbolic batch and sequence, written as exporters write
    it: position ids sliced to ``Shape(ids)[1]``, heads split and merged by reshapes to
    shapes computed from ``Shape``."""
    gb = GraphBuilder("bert_symbolic", 0)
    hd = hidden // heads
    ids = gb.input("input_ids", ["B", "S"], I64, high=vocab)
    seq = _dim(gb, ids, 1)
    pos = gb.node("Slice", [_i(gb, np.arange(max_pos)[None], "position_ids"),
                            _i(gb, [0], "zero"), seq, _i(gb, [1], "axis")],
                  np.arange(gb.values[ids].shape[1])[None], kind="positions")
    x = gb.add(gb.embedding(ids, vocab, hidden), gb.embedding(pos, max_pos, hidden, kind="pos"))
    x = gb.layernorm(x)
    scores = None
    for _ in range(layers):
        def split(t):
            b, s = gb.values[t].shape[:2]
            return _reshape(gb, t, [_dim(gb, t, 0), _dim(gb, t, 1), _i(gb, [heads, hd])],
                            (b, s, heads, hd))
        q = gb.transpose(split(gb.linear(x, hidden, kind="q")), (0, 2, 1, 3))
        k = gb.transpose(split(gb.linear(x, hidden, kind="k")), (0, 2, 3, 1))
        v = gb.transpose(split(gb.linear(x, hidden, kind="v")), (0, 2, 1, 3))
        scores = gb.softmax(gb.div(gb.matmul(q, k), math.sqrt(hd)))
        ctx = gb.transpose(gb.matmul(scores, v), (0, 2, 1, 3))
        b, s = gb.values[ctx].shape[:2]
        ctx = _reshape(gb, ctx, [_dim(gb, ctx, 0), _dim(gb, ctx, 1), _i(gb, [hidden])],
                       (b, s, hidden))
        x = gb.layernorm(gb.add(gb.linear(ctx, hidden, kind="o"), x))
        h = gb.linear(gb.gelu(gb.linear(x, ffn, kind="ffn1")), hidden, kind="ffn2")
        x = gb.layernorm(gb.add(h, x))
    gb.outputs.append(helper.make_tensor_value_info(x, F32, ["B", "S", hidden]))
    gb.outputs.append(helper.make_tensor_value_info(scores, F32, ["B", heads, "S", "S"]))
    return gb.model()


def test_bert_symbolic_sequence():
    _, r = REGISTRY["bert"]
    hidden, scores = outputs(r)
    assert text(hidden) == ["B", "S", "32"] and text(scores) == ["B", "4", "S", "S"]
    counts = r.dim_counts()
    assert counts["unknown"] == counts["unknown_rank"] == 0
    assert r.class_counts()["EDO"] == r.class_counts()["ISVDOS"] == 0
    # every dim is a constant or B / S themselves
    names = {str(d) for b in r.bindings.values() if b.abs.what == "tensor" and b.abs.dims
             for d in b.abs.dims if d.kind != DimKind.KNOWN}
    assert names <= {"B", "S"}, names


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 64))
def test_bert_claims_hold_at_random_sizes(b, s):
    m, r = REGISTRY["bert"]
    ids = np.random.default_rng(s).integers(0, 50, (b, s)).astype(np.int64)
    assert check_ort(m, r, {"B": b, "S": s}, {"input_ids": ids}) == 7


def test_resnet_dynamic_batch():
    m, r = REGISTRY["resnet"]
    assert text(outputs(r)[0]) == ["N", "10"]
    counts = r.dim_counts()
    assert counts["unknown"] == counts["expr"] == 0
    for b in r.bindings.values():
        if b.abs.what == "tensor" and b.abs.rank == 4:  # activations: N x C x H x W
            assert b.abs.dims[0].kind == DimKind.SYMBOLIC and all(
                d.kind == DimKind.KNOWN for d in b.abs.dims[1:]), b
    assert r.class_counts() == r.class_counts(after=False)
    assert r.class_counts()["EDO"] == r.class_counts()["ISVDOS"] == 0
    for n in (1, 3):
        assert check_ort(m, r, {"N": n}) == 2


# ----------------------------------------------------------------------- the pass
def test_pass_leaves_the_program_alone():
    mod = from_onnx(range_model())
    before = mod["main"]
    p = RankDimensionPropagation()
    after = tvm.transform.Sequential([p])(mod)["main"]
    assert tvm_ffi.structural_equal(before.body, after.body)
    assert tvm_ffi.structural_equal(before.params, after.params)
    summary = json.loads(str(after.attrs[ATTR]))
    assert summary["moved"] == len(p.results["main"].moved()) > 0
    assert summary["classes_after"]["ISVDOS"] == 0
    plain = RankDimensionPropagation(attach=False)(mod)
    assert tvm_ffi.structural_equal(plain["main"], before)
    assert "main" in plain and set(RankDimensionPropagation(attach=False).results) == set()


def test_report_logs_and_serializes(caplog):
    r = rdp(range_model())
    with caplog.at_level(logging.DEBUG, logger="tvm_cocopie.relay_passes.dynamic"):
        text_ = r.describe()
    assert "range_len_0 = S" in caplog.text and "moved" in text_
    data = json.loads(r.to_json())
    assert data["summary"]["dims"]["unknown"] == 0
    assert data["bindings"]["gv"]["fields"][0]["dims"] == [["symbolic", "S"], ["known", "8"]]
    assert data["bindings"]["lv10"] == {
        "op": "relax.arange", "before": "ISVDOS", "after": "ISDO", "kind": "other",
        "what": "tensor", "rank": 1, "dims": [["symbolic", "S"]], "value": None,
        "fields": None}


def test_bad_input_is_a_clear_error():
    with pytest.raises(CompilationError, match="Relax IRModule"):
        analyze("model.onnx")
    prim_only = tvm.IRModule({"f": tirx.PrimFunc([], tirx.Evaluate(0))})
    with pytest.raises(CompilationError, match="no Relax function"):
        analyze(prim_only)


# ------------------------------------------------------------------ shared models
BUILDERS = {
    "reshape_chain": reshape_chain_model,
    "embedding": embedding_model,
    "bert": bert_symbolic,
    "resnet": lambda: resnet18(dynamic_batch=True, image_size=32, num_classes=10),
}


class _Registry(dict):
    """Models and their RDP results, built once per session on first use."""

    def __missing__(self, key):
        m = BUILDERS[key]()
        self[key] = (m, rdp(m))
        return self[key]


REGISTRY = _Registry()

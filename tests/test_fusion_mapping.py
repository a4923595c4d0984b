"""DNNFusion's mapping types derived from TIR, and the fusion-opportunity table."""

from __future__ import annotations

from collections import Counter

import pytest
import tvm
from conftest import make_model
from onnx import TensorProto, helper, numpy_helper
from tvm import te, topi

from tvm_cocopie.errors import ModelFetchError
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.models import list_models
from tvm_cocopie.models.workloads import REAL_WORKLOADS, get_workload
from tvm_cocopie.pipeline import PipelineOptions, run_until
from tvm_cocopie.relay_passes.fusion import mapping
from tvm_cocopie.relay_passes.fusion.mapping import MappingType, classify, name_type
from tvm_cocopie.relay_passes.fusion.table import COLOR, FUSED_TYPE, Color, opportunity
from tvm_cocopie.target import host_target

O2O, O2M, M2M = MappingType.ONE_TO_ONE, MappingType.ONE_TO_MANY, MappingType.MANY_TO_MANY
REORG, SHUF = MappingType.REORGANIZE, MappingType.SHUFFLE

A = te.placeholder((2, 8, 6, 6), name="A")
B = te.placeholder((1, 8, 1, 1), name="B")
W = te.placeholder((4, 8, 3, 3), name="W")
IDX = te.placeholder((3,), "int32", name="I")

#: name -> (compute, expected type): TOPI's computes, classified from their TIR alone
COMPUTES = {
    "elementwise": (lambda: te.compute(A.shape, lambda *i: A(*i) * A(*i)), O2O),
    "relu": (lambda: topi.nn.relu(A), O2O),
    "broadcast_add": (lambda: topi.add(A, B), O2M),
    "expand": (lambda: topi.broadcast_to(B, (2, 8, 6, 6)), O2M),
    "conv2d": (lambda: topi.nn.conv2d_nchw(A, W, 1, 1, 1), M2M),
    "max_pool": (lambda: topi.nn.pool2d(A, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max"), M2M),
    "softmax": (lambda: topi.nn.softmax(A, axis=1), M2M),
    "reduce_sum": (lambda: topi.sum(A, axis=1), M2M),
    "reshape": (lambda: topi.reshape(A, (16, 36)), REORG),
    "flatten": (lambda: topi.nn.flatten(A), REORG),
    "squeeze": (lambda: topi.squeeze(topi.reshape(A, (2, 8, 1, 36)), axis=[2]), REORG),
    "transpose": (lambda: topi.transpose(A, (0, 2, 3, 1)), SHUF),
    "depth_to_space": (lambda: topi.nn.depth_to_space(A, 2), SHUF),
    "space_to_depth": (lambda: topi.nn.space_to_depth(A, 2), SHUF),
    "slice": (lambda: topi.strided_slice(A, [0, 2, 1, 1], [2, 6, 5, 5]), O2O),
    "strided_slice": (lambda: topi.strided_slice(A, [0, 0, 0, 0], [2, 8, 6, 6], [1, 2, 2, 2]),
                      O2O),
    "concat": (lambda: topi.concatenate([A, A], axis=1), O2O),
    "pad": (lambda: topi.nn.pad(A, [0, 0, 1, 1], [0, 0, 1, 1]), O2O),
    "gather": (lambda: topi.take(A, IDX, axis=1), O2M),
    "resize": (lambda: topi.image.resize2d(A, (0.0, 0.0, 0.0, 0.0), (12, 12),
                                           method="nearest_neighbor"), O2M),
}


def _prim_func(out) -> tvm.tirx.PrimFunc:
    ins = []

    def collect(t):
        for x in t.op.input_tensors:
            if isinstance(x.op, te.PlaceholderOp):
                if not any(x.same_as(y) for y in ins):
                    ins.append(x)
            else:
                collect(x)

    collect(out)
    return te.create_prim_func(ins + [out])


@pytest.mark.parametrize("name", sorted(COMPUTES))
def test_topi_computes_classify_themselves(name):
    make, expected = COMPUTES[name]
    assert classify(_prim_func(make())) == expected


def test_domains_too_large_to_enumerate_are_decided_symbolically(monkeypatch):
    """Above :data:`mapping.MAX_ENUMERATED` points the read maps go to detect_iter_map:
    the same answers on these (it may call an exotic bijection One-to-Many)."""
    monkeypatch.setattr(mapping, "MAX_ENUMERATED", 1)
    for name in ("elementwise", "broadcast_add", "reshape", "transpose", "conv2d", "gather"):
        make, expected = COMPUTES[name]
        assert classify(_prim_func(make())) == expected, name


def test_a_symbolic_batch_classifies():
    n = tvm.tirx.Var("n", "int64")
    x = te.placeholder((n, 8, 6), name="x")
    assert classify(_prim_func(topi.transpose(x, (0, 2, 1)))) == SHUF
    assert classify(_prim_func(topi.nn.relu(x))) == O2O
    assert classify(_prim_func(topi.reshape(x, (n, 48)))) == REORG


def _legalized_funcs(model, shapes=None) -> dict:
    """The PrimFuncs of ``model`` after the cocopie pipeline's legalize stage (one per
    operator, our computes where we have them, before fusion)."""
    mod = from_onnx(model, shapes=shapes)
    mod = run_until(mod, host_target(), "legalize")
    return {gv.name_hint: f for gv, f in mod.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.slow
@pytest.mark.parametrize("name", list_models())
def test_every_operator_of_the_zoo_classifies(name):
    wl = get_workload(name, image_size=None if name.startswith("wrn") else 32)
    funcs = _legalized_funcs(wl.model, wl.shapes)
    types = {n: classify(f) for n, f in funcs.items()}
    assert funcs and not [n for n, t in types.items() if t is None], types
    # every CNN and the encoder have a Many-to-Many anchor and One-to-One epilogues
    assert M2M in types.values()


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("name", REAL_WORKLOADS)
def test_every_operator_of_ppocr_classifies(name):
    try:
        wl = get_workload(name)
    except ModelFetchError as err:
        pytest.skip(f"the package registry cannot be reached to fetch rapidocr: {err}")
    types = {n: classify(f) for n, f in _legalized_funcs(wl.model, wl.shapes).items()}
    assert types and None not in types.values(), types
    assert Counter(types.values())[M2M] > 0


def _single_op(op_type, x_shape, y_shape, inits=(), **attrs):
    inputs = ["x"] + [t.name for t in inits]
    node = helper.make_node(op_type, inputs, ["y"], **attrs)
    return make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)


def _const(name, array):
    return numpy_helper.from_array(array, name)


def _stock_types(model) -> set:
    """Mapping types of the operator's PrimFuncs under TVM's own legalization."""
    mod = run_until(from_onnx(model), host_target(), "legalize",
                    PipelineOptions(rewrite=False, layout=False, custom_legalize=False))
    return {classify(f) for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


#: (ONNX op, model, TIR type, why the TIR and the thesis' name table disagree or None)
CROSS_CHECK = [
    ("Relu", lambda: _single_op("Relu", [1, 4, 6, 6], [1, 4, 6, 6]), O2O, None),
    ("Transpose", lambda: _single_op("Transpose", [1, 4, 6, 6], [1, 6, 6, 4], perm=[0, 2, 3, 1]), SHUF, None),
    ("Reshape", lambda: _single_op("Reshape", [1, 4, 6, 6], [1, 144],
                                            [_const("s", _np_i64([1, 144]))]),
     REORG, None),
    ("DepthToSpace", lambda: _single_op("DepthToSpace", [1, 8, 3, 3], [1, 2, 6, 6],
                                                      blocksize=2), SHUF, None),
    ("Concat", lambda: _concat_model(), O2O, None),
    ("Gather", lambda: _single_op("Gather", [1, 4, 6, 6], [1, 2, 6, 6],
                                  [_const("i", _np_i64([0, 2]))], axis=1), O2M, None),
    ("Add", lambda: _single_op("Add", [1, 4, 6, 6], [1, 4, 6, 6],
                                                [_const("b", _np_f32((1, 4, 1, 1)))]), O2M,
     ("the thesis lists Add as One-to-One; a broadcast Add reads each bias element for many "
      "outputs, so its TIR is One-to-Many (the thesis puts broadcast element-wise ops there)")),
    ("BatchNormalization", lambda: _bn_model(), O2M,
     ("inference batch norm is a per-channel scale and shift: broadcast reads, One-to-Many "
      "in TIR where the thesis lists it One-to-One")),
]


def _np_i64(values):
    import numpy as np

    return np.array(values, dtype=np.int64)


def _np_f32(shape):
    import numpy as np

    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _concat_model():
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=1)
    return make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])])


def _bn_model():
    import numpy as np

    c = 4
    inits = [_const("s", _np_f32((c,))), _const("b", _np_f32((c,))), _const("m", _np_f32((c,))),
             _const("v", np.abs(_np_f32((c,))) + 1)]
    return _single_op("BatchNormalization", [1, c, 6, 6], [1, c, 6, 6], inits)


@pytest.mark.parametrize("op, make, tir_type, why", CROSS_CHECK, ids=[c[0] for c in CROSS_CHECK])
def test_tir_types_against_the_thesis_name_table(op, make, tir_type, why):
    """The name table is a cross-check only: where it disagrees, the TIR is right and
    ``why`` says why; where it agrees, the TIR found it without the name."""
    types = _stock_types(make())
    assert max(types) == tir_type, types
    if why is None:
        assert name_type(op) == tir_type
    else:
        assert name_type(op) != tir_type and why


def test_the_table_has_23_fusable_cells_and_two_red():
    assert len(FUSED_TYPE) == 25
    red = {pair for pair, color in COLOR.items() if color is Color.RED}
    assert red == {(O2M, M2M), (M2M, M2M)}
    assert all(FUSED_TYPE[p] is None for p in red)
    assert sum(1 for c in COLOR.values() if c is not Color.RED) == 23


def test_one_to_one_is_the_identity_of_the_table_and_always_green():
    for t in MappingType:
        assert opportunity(O2O, t).fused == t and opportunity(t, O2O).fused == t
        assert opportunity(O2O, t).color is Color.GREEN is opportunity(t, O2O).color


def test_yellow_cells_are_the_thesis_profiled_ones():
    yellow = {pair for pair, color in COLOR.items() if color is Color.YELLOW}
    moves = (REORG, SHUF)
    expected = ({(m, t) for m in moves for t in (O2M, M2M)} | {(t, m) for m in moves
                                                                for t in (O2M, M2M)}
                | {(M2M, O2M), (O2M, O2M)})
    assert yellow == expected
    assert all(opportunity(a, b).color is Color.GREEN for a in moves for b in moves)


def test_a_fused_type_is_never_simpler_than_its_parts_except_reshapes_of_shuffles():
    """Fusing keeps the more complex type; the thesis' one exception: a Shuffle followed
    by a Reorganize is a Reorganize (the reshape absorbs the permutation's index map)."""
    for (a, b), fused in FUSED_TYPE.items():
        if fused is None or (a, b) == (SHUF, REORG):
            continue
        assert fused >= max(a, b) or {a, b} <= {REORG, SHUF}, (a, b, fused)


# ----------------------------------------------------------------- the plan, applied


def _plan(model, shapes=None):
    from tvm_cocopie.relay_passes.fusion.plan import ECG, explore

    mod = run_until(from_onnx(model, shapes=shapes), host_target(), "legalize")
    return explore(ECG.of(mod))


def test_conv_bias_relu_is_one_block_and_constants_do_not_broadcast():
    """The bias add reads a per-channel constant: One-to-One in the model (as in the
    thesis), so conv (M-M) + add + relu fuse green; the kernel alone is One-to-Many."""
    from conftest import conv_relu_model

    blocks = _plan(conv_relu_model(batch=1), {"x": [1, 3, 16, 16]})
    fused = [b for b in blocks if len(b.nodes) > 1]
    assert [[n.kernel for n in b.nodes] for b in fused] == [["conv2d_nchwc", "add", "relu"]]
    assert fused[0].kind == M2M


def test_red_pairs_never_share_a_block():
    """conv -> conv and conv -> pool chains: a Many-to-Many op never joins a block that
    already holds one (the two red cells), whatever the seeds."""
    from tvm_cocopie.models.graph_builder import GraphBuilder

    gb = GraphBuilder("convs", seed=0)
    x = gb.input("x", [1, 4, 12, 12])
    y = gb.relu(gb.conv(x, 8, 3, pad=1))
    y = gb.relu(gb.conv(y, 8, 3, pad=1))
    gb.output(gb.maxpool(y, 2, 2))
    blocks = _plan(gb.model())
    for b in blocks:
        assert sum(1 for n in b.nodes if n.kind == M2M) <= 1, [n.kernel for n in b.nodes]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2", "bert_encoder"])
def test_dnnfusion_builds_match_onnxruntime(name):
    from conftest import assert_close, ort_run

    import tvm_cocopie

    wl = get_workload(name, image_size=32)
    compiled = tvm_cocopie.compile(wl.model, shapes=wl.shapes,
                                   options=PipelineOptions(fusion="dnnfusion"))
    assert_close(compiled(**wl.inputs), ort_run(wl.model, wl.inputs))


def test_an_unknown_fusion_method_is_named():
    from conftest import conv_relu_model

    import tvm_cocopie
    from tvm_cocopie.errors import CompilationError

    with pytest.raises(CompilationError, match="fusion method 'fuseall'.*stock, dnnfusion"):
        tvm_cocopie.compile(conv_relu_model(), shapes={"x": [1, 3, 16, 16]},
                            options=PipelineOptions(fusion="fuseall"))

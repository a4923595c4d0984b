"""ONNX graphs generated to hold the patterns rewriting is for (DNNFusion §3.3).

- :func:`table34_model`: the rows of the thesis' Table 3.4 (seeds/004 §3.3), one
  output per row, on m x n tensors;
- :func:`bn_pad_cnn_model`: the simplifications a user expects (Pad before Conv,
  BatchNorm after it, division by a constant, transpose and reshape chains);
- :func:`layout_sandwich_model`: transposes around elementwise ops, as converters of
  NHWC models write them.

Each returns ``(onnx.ModelProto, {input name: array})``; the benchmark
(``scripts/bench_rewrite.py``) and the tests check them against ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def table34_model(size: int = 64):
    """An ONNX graph holding the rows of Table 3.4 (m x n tensors, m = n = size)."""
    f = TensorProto.FLOAT
    n = helper.make_node
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        n("Abs", ["b_in"], ["B"]),
        # Recip(A) ⊙ Recip(A⊙B)
        n("Reciprocal", ["A"], ["rA"]), n("Mul", ["A", "B"], ["AB"]),
        n("Reciprocal", ["AB"], ["rAB"]), n("Mul", ["rA", "rAB"], ["y1"]),
        # (A⊙√B)⊙(√B⊙C)
        n("Sqrt", ["B"], ["sB"]), n("Mul", ["A", "sB"], ["AsB"]), n("Mul", ["sB", "C"], ["sBC"]),
        n("Mul", ["AsB", "sBC"], ["y2"]),
        # Abs(A)⊙B⊙Abs(C)
        n("Abs", ["A"], ["aA"]), n("Abs", ["C"], ["aC"]), n("Mul", ["aA", "B"], ["aAB"]),
        n("Mul", ["aAB", "aC"], ["y3"]),
        # (A⊙ReduceSum(B))⊙(ReduceSum(B)⊙C)
        n("ReduceSum", ["B", "axes"], ["rsB"], keepdims=1), n("Mul", ["A", "rsB"], ["ArsB"]),
        n("Mul", ["rsB", "C"], ["rsBC"]), n("Mul", ["ArsB", "rsBC"], ["y4"]),
        # A⊙C + A⊙B
        n("Mul", ["A", "C"], ["AC"]), n("Mul", ["A", "B"], ["AB2"]),
        n("Add", ["AC", "AB2"], ["y5"]),
        # Square(A+B) - (A+B)⊙C
        n("Add", ["A", "B"], ["S"]), n("Mul", ["S", "S"], ["S2"]), n("Mul", ["S", "C"], ["SC"]),
        n("Sub", ["S2", "SC"], ["y6"]),
        # A + A⊙B (Table 3.4 note §: no FLOP gain, A loaded once)
        n("Mul", ["A", "C"], ["AC8"]), n("Add", ["A", "AC8"], ["y8"]),
        # ReduceProd(Exp(A)). ReduceSum(BitShift(I)) is left to the rule table: ONNX
        # BitShift takes unsigned ints only, and ONNX Runtime has no unsigned ReduceSum.
        n("Exp", ["A"], ["eA"]), n("ReduceProd", ["eA"], ["y7"], axes=[1], keepdims=1),
    ]
    shape = [size, size]
    inputs = [helper.make_tensor_value_info(k, f, shape) for k in ("A", "b_in", "C")]
    outs = [helper.make_tensor_value_info(f"y{i}", f, None) for i in range(1, 9)]
    graph = helper.make_graph(nodes, "table34", inputs, outs, [axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    model = onnx.shape_inference.infer_shapes(model)
    rng = np.random.default_rng(0)
    feeds = {k: rng.uniform(0.5, 1.5, shape).astype(np.float32) for k in ("A", "b_in", "C")}
    feeds["A"] = (feeds["A"] / size).astype(np.float32)  # keep ReduceProd(Exp) finite
    return model, feeds


def bn_pad_cnn_model(size: int = 56):
    """A small CNN with the simplifications a user expects: Pad before Conv, BN after,
    a division by a constant, a double transpose and a reshape chain."""
    rng = np.random.default_rng(0)

    def w(name, *shape, pos=False):
        arr = rng.uniform(0.5, 1.5, shape) if pos else rng.standard_normal(shape) * 0.2
        return numpy_helper.from_array(arr.astype(np.float32), name)

    n = helper.make_node
    inits = [w("W1", 32, 3, 3, 3), w("W2", 32, 32, 3, 3), w("g1", 32, pos=True), w("b1", 32),
             w("m1", 32), w("v1", 32, pos=True), w("g2", 32, pos=True), w("b2", 32), w("m2", 32),
             w("v2", 32, pos=True),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array(4.0, np.float32), "four"),
             numpy_helper.from_array(np.array([1, 32, -1], np.int64), "shp1"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shp2")]
    nodes = [
        n("Pad", ["x", "pads"], ["xp"]), n("Conv", ["xp", "W1"], ["c1"]),
        n("BatchNormalization", ["c1", "g1", "b1", "m1", "v1"], ["n1"]),
        n("Relu", ["n1"], ["r1"]), n("Div", ["r1", "four"], ["d1"]),
        n("Conv", ["d1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c2", "g2", "b2", "m2", "v2"], ["n2"]),
        n("Relu", ["n2"], ["r2"]),
        n("Transpose", ["r2"], ["t1"], perm=[0, 2, 3, 1]),
        n("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]),
        n("Reshape", ["t2", "shp1"], ["q1"]), n("Reshape", ["q1", "shp2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "bn_pad_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    model = onnx.shape_inference.infer_shapes(model)
    return model, {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def layout_sandwich_model(size: int = 56):
    """What layout-converting exporters write (TF/Keras models in NHWC converted to
    NCHW ONNX): Conv -> Transpose(NHWC) -> per-channel scale and bias, Relu ->
    Transpose(NCHW) -> Conv, twice. Transposes cancel through the
    elementwise ops only with layout/transpose-through-elementwise."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    ch = 32

    def arr(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32),
                                       name)

    inits = [arr("W0", ch, 3, 3, 3), arr("W1", ch, ch, 3, 3), arr("W2", ch, ch, 1, 1),
             arr("s1", ch), arr("b1", ch), arr("s2", ch), arr("b2", ch)]
    nodes = [n("Conv", ["x", "W0"], ["c0"], pads=[1, 1, 1, 1])]
    cur = "c0"
    for i, w in ((1, "W1"), (2, "W2")):
        nodes += [
            n("Transpose", [cur], [f"t{i}"], perm=[0, 2, 3, 1]),
            n("Mul", [f"t{i}", f"s{i}"], [f"m{i}"]), n("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            n("Relu", [f"a{i}"], [f"r{i}"]),
            n("Transpose", [f"r{i}"], [f"u{i}"], perm=[0, 3, 1, 2]),
            n("Conv", [f"u{i}", w], [f"c{i}"], pads=[1, 1, 1, 1] if i == 1 else [0, 0, 0, 0]),
        ]
        cur = f"c{i}"
    graph = helper.make_graph(
        nodes, "layout_sandwich",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(cur, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    model = onnx.shape_inference.infer_shapes(model)
    return model, {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


#: name -> (builder, default size)
GENERATED = {"table34": (table34_model, 512), "bn_pad_cnn": (bn_pad_cnn_model, 112),
             "layout_sandwich": (layout_sandwich_model, 112)}

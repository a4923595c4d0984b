"""Folding constants into weights: BatchNorm into conv/dense, scales, pads, constant
subgraphs (the simplifications DNNFusion's rewriting assumes done, §3.3).

TVM's ONNX importer keeps ``BatchNormalization`` as ``relax.nn.batch_norm`` (a tuple;
the output is item 0) and conv weights as Relax constants, so inference-time BN is
``y = (x - m) * g / sqrt(v + eps) + b = x * s + t`` with ``s = g / sqrt(v + eps)``,
``t = b - m * s``; folded into a preceding conv it scales the conv's output channels
(axis 0 of OIHW weights) and adds a bias. Folded weights are computed in float64 and
stored in the weight's dtype.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from ...exprs import is_constant, op_name
from .consts import evaluate
from .rule import Example, Rule, is_float, scalar
from .terms import C, Match, V, add, make_const, mul, op, tgi

X = V("X")
BN_ARGS = (C("g"), C("b"), C("m"), C("v"))


def _bn_affine(m: Match) -> tuple[np.ndarray, np.ndarray, int]:
    attrs = m.call("bn").attrs
    g, b, mean, var = (m.np(k).astype(np.float64) for k in ("g", "b", "m", "v"))
    s = (g if attrs.scale else 1.0) / np.sqrt(var + float(attrs.epsilon))
    t = (b if attrs.center else 0.0) - mean * s
    return s, t, int(attrs.axis)


def _bcast(vec: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    axis = axis % ndim
    return vec.reshape([-1] + [1] * (ndim - 1 - axis))


def _inference_bn(m: Match) -> bool:
    return not bool(m.call("bn").attrs.training)


def _nchw_conv(m: Match) -> bool:
    a = m.call("conv").attrs
    return (a.data_layout == "NCHW" and a.kernel_layout == "OIHW"
            and (a.out_layout in ("", "NCHW")) and not a.out_dtype)


def _bn_on_channels(m: Match) -> bool:
    return int(m.call("bn").attrs.axis) % 4 == 1


def _bn_on_last(m: Match) -> bool:
    return int(m.call("bn").attrs.axis) % m.root.ty.ndim == m.root.ty.ndim - 1


def _weight_2d(m: Match) -> bool:
    return m.np("W").ndim == 2


def _conv(m: Match, weight: np.ndarray) -> relax.Expr:
    call = m.call("conv")
    return relax.Call(call.op, [m["X"], make_const(weight, m.dtype("W"))], call.attrs)


def _matmul(m: Match, weight: np.ndarray) -> relax.Expr:
    call = m.call("mm")
    return relax.Call(call.op, [m["X"], make_const(weight, m.dtype("W"))], call.attrs)


def bn_to_affine(m: Match) -> relax.Expr:
    """Inference batch norm as ``x * s + t`` with constant per-channel ``s`` and ``t``."""
    s, t, axis = _bn_affine(m)
    ndim = m.root.ty.ndim
    dt = m.dtype()
    return relax.op.add(relax.op.multiply(m["X"], make_const(_bcast(s, axis, ndim), dt)),
                        make_const(_bcast(t, axis, ndim), dt))


def bn_into_conv(m: Match) -> relax.Expr:
    """A batch norm after a conv folded into the conv's weights and a bias."""
    s, t, _ = _bn_affine(m)
    w = m.np("W").astype(np.float64) * s.reshape(-1, 1, 1, 1)
    bias = t.reshape(1, -1, 1, 1)
    if "B" in m.env:
        bias = bias + m.np("B").astype(np.float64) * s.reshape(-1, 1, 1)
    return relax.op.add(_conv(m, w), make_const(bias, m.dtype()))


def bn_into_dense(m: Match) -> relax.Expr:
    """A batch norm after a matmul folded into its weights and a bias."""
    s, t, _ = _bn_affine(m)
    w = m.np("W").astype(np.float64) * s.reshape(1, -1)
    bias = t
    if "B" in m.env:
        bias = bias + m.np("B").astype(np.float64) * s
    return relax.op.add(_matmul(m, w), make_const(bias, m.dtype()))


def _channel_scale(m: Match, name: str, channels: int) -> np.ndarray | None:
    """``name`` as a per-output-channel vector for NCHW (shapes (C,1,1), (1,C,1,1),
    scalars), or None."""
    arr = m.np(name).astype(np.float64)
    if arr.size == 1:
        return np.full(channels, arr.reshape(()))
    shape = list(arr.shape)
    while len(shape) < 4:
        shape.insert(0, 1)
    if shape[0] == 1 and shape[2] == 1 and shape[3] == 1 and shape[1] == channels:
        return arr.reshape(channels)
    return None


def _col_scale(m: Match, name: str, cols: int) -> np.ndarray | None:
    arr = m.np(name).astype(np.float64)
    if arr.size == 1:
        return np.full(cols, arr.reshape(()))
    if arr.shape[-1] == cols and arr.size == cols:
        return arr.reshape(cols)
    return None


def scale_into_conv(m: Match) -> relax.Expr | None:
    """A per-channel scale after a conv folded into its weights (``None`` if ``S`` is not per
    output channel)."""
    w = m.np("W").astype(np.float64)
    s = _channel_scale(m, "S", w.shape[0])
    if s is None:
        return None
    conv = _conv(m, w * s.reshape(-1, 1, 1, 1))
    if "B" in m.env:
        b = m.np("B").astype(np.float64) * _bcast(s, 1, m.np("B").ndim) \
            if m.np("B").ndim >= 3 else m.np("B") * s.reshape(-1, 1, 1)
        return relax.op.add(conv, make_const(b, m.dtype()))
    return conv


def scale_into_matmul(m: Match) -> relax.Expr | None:
    """A per-column scale after a matmul folded into its weights (``None`` if ``S`` is not per
    column)."""
    w = m.np("W").astype(np.float64)
    s = _col_scale(m, "S", w.shape[-1])
    if s is None:
        return None
    mm = _matmul(m, w * s.reshape(1, -1))
    if "B" in m.env:
        return relax.op.add(mm, make_const(m.np("B").astype(np.float64) * s, m.dtype()))
    return mm


def scaled_input_matmul(m: Match) -> relax.Expr:
    """``(X * s) @ W`` with a scalar ``s`` as ``X @ (s * W)``."""
    return _matmul(m, m.np("W").astype(np.float64) * float(m.np("S").reshape(())))


def matmul_chain(m: Match) -> relax.Expr:
    """``(X @ W1) @ W2`` with constant weights as ``X @ (W1 @ W2)``."""
    w = m.np("W1").astype(np.float64) @ m.np("W2").astype(np.float64)
    call = m.call("mm")
    return relax.Call(call.op, [m["X"], make_const(w, m.dtype("W1"))], call.attrs)


def pad_into_conv(m: Match) -> relax.Expr | None:
    """A zero constant pad before a conv folded into the conv's padding (``None`` when it cannot
    be)."""
    pad = m.call("pad")
    if str(pad.attrs.pad_mode) != "constant" or float(pad.attrs.pad_value) != 0.0:
        return None
    width = [int(v) for v in pad.attrs.pad_width]
    if len(width) != 8 or any(width[:4]):
        return None
    conv = m.call("conv")
    p = [int(v) for v in conv.attrs.padding]
    top, left, bottom, right = p if len(p) == 4 else (p[0], p[1], p[0], p[1])
    new_pad = [top + width[4], left + width[6], bottom + width[5], right + width[7]]
    a = conv.attrs
    return relax.op.nn.conv2d(m["X"], m["W"], strides=a.strides, padding=new_pad,
                              dilation=a.dilation, groups=int(a.groups),
                              data_layout=a.data_layout, kernel_layout=a.kernel_layout,
                              out_layout=a.out_layout or None,
                              out_dtype=a.out_dtype or None)


def _const_call_matches(graph, var):
    value = graph.defs.get(var)
    if not isinstance(value, relax.Call) or op_name(value) is None or not value.args:
        return
    if all(is_constant(a) for a in value.args):
        arr = evaluate(value)
        if arr is not None:  # kept in the match: fold_constant does not evaluate again
            yield Match(var, env={"value": value, "folded": arr}, graph=graph,
                        ops=[op_name(value)])


def fold_constant(m: Match) -> relax.Expr:
    """The match's folded constant value as a Relax constant of the root's dtype."""
    return make_const(m["folded"], str(m.root.ty.dtype))


def _conv_ops(**kw):
    return {"conv": lambda x, w: relax.op.nn.conv2d(x, w, padding=1, **kw),
            "bn": lambda *a: relax.op.nn.batch_norm(*a, axis=1, training=False),
            "pad": lambda x: relax.op.nn.pad(x, [0, 0, 0, 0, 1, 1, 2, 2])}


_CONV_LEAVES = {"X": ("in", (1, 3, 8, 8)), "W": ("c", (4, 3, 3, 3)), "g": ("c", (4,)),
                "b": ("c", (4,)), "m": ("c", (4,)), "v": ("c_pos", (4,)),
                "B": ("c", (1, 4, 1, 1)), "S": ("c", (1, 4, 1, 1))}
_DENSE_LEAVES = {"X": ("in", (4, 16)), "W": ("c", (16, 8)), "g": ("c", (8,)),
                 "b": ("c", (8,)), "m": ("c", (8,)), "v": ("c_pos", (8,)), "B": ("c", (8,)),
                 "S": ("c", (8,)), "W1": ("c", (16, 4)), "W2": ("c", (4, 8))}
_BN_ON_CONV = tgi(op("nn.batch_norm", op("nn.conv2d", X, C("W"), bind="conv"), *BN_ARGS,
                    bind="bn"), 0)
_BN = Example(leaves=_CONV_LEAVES, ops=_conv_ops())
_DENSE = Example(leaves=_DENSE_LEAVES,
                 ops={"bn": lambda *a: relax.op.nn.batch_norm(*a, axis=1, training=False)})

RULES = [
    Rule("fold/constant-subgraph", "folding", None, fold_constant, (),
         "an operator over constants only is evaluated at compile time",
         Example(lhs=mul(C("A"), C("B")), leaves={"A": "c", "B": "c"}),
         match_fn=_const_call_matches, roots=("*",)),
    Rule("fold/bn-into-conv", "folding",
         tgi(op("nn.batch_norm", op("nn.conv2d", X, C("W"), bind="conv"), *BN_ARGS, bind="bn"),
             0),
         bn_into_conv, (is_float(), _inference_bn, _nchw_conv, _bn_on_channels),
         "BN(conv(X, W)) = conv(X, W⊙s) + t", _BN),
    Rule("fold/bn-into-conv-bias", "folding",
         tgi(op("nn.batch_norm", add(op("nn.conv2d", X, C("W"), bind="conv"), C("B")),
                *BN_ARGS, bind="bn"), 0),
         bn_into_conv, (is_float(), _inference_bn, _nchw_conv, _bn_on_channels),
         "BN(conv(X, W) + B) = conv(X, W⊙s) + (B⊙s + t)", _BN),
    Rule("fold/bn-into-dense", "folding",
         tgi(op("nn.batch_norm", op("matmul", X, C("W"), bind="mm"), *BN_ARGS, bind="bn"), 0),
         bn_into_dense, (is_float(), _inference_bn, _weight_2d, _bn_on_last),
         "BN(X·W) = X·(W⊙s) + t (BN over the output features)", _DENSE),
    Rule("fold/bn-into-dense-bias", "folding",
         tgi(op("nn.batch_norm", add(op("matmul", X, C("W"), bind="mm"), C("B")), *BN_ARGS,
                bind="bn"), 0),
         bn_into_dense, (is_float(), _inference_bn, _weight_2d, _bn_on_last),
         "BN(X·W + B) = X·(W⊙s) + (B⊙s + t)", _DENSE),
    Rule("fold/bn-to-affine", "folding",
         tgi(op("nn.batch_norm", X, *BN_ARGS, bind="bn"), 0), bn_to_affine,
         (is_float(), _inference_bn),
         "inference BN = X⊙s + t with s = g/√(v+eps), t = b - m⊙s",
         Example(leaves=_CONV_LEAVES, ops=_conv_ops(), flops=(13824 + 4 * 256, 13824 + 2 * 256),
                 lhs=_BN_ON_CONV),
         Example(leaves=_CONV_LEAVES, lhs=_BN_ON_CONV,
                 ops={"bn": lambda *a: relax.op.nn.batch_norm(*a, axis=1, training=True)})),
    Rule("fold/scale-into-conv", "folding",
         mul(op("nn.conv2d", X, C("W"), bind="conv"), C("S")), scale_into_conv,
         (is_float(), _nchw_conv), "conv(X, W)⊙s = conv(X, W⊙s) for s per output channel",
         _BN, Example(leaves={**_CONV_LEAVES, "S": ("c", (1, 4, 8, 8))}, ops=_conv_ops())),
    Rule("fold/scale-into-conv-bias", "folding",
         mul(add(op("nn.conv2d", X, C("W"), bind="conv"), C("B")), C("S")), scale_into_conv,
         (is_float(), _nchw_conv), "(conv(X, W) + B)⊙s = conv(X, W⊙s) + B⊙s", _BN),
    Rule("fold/scale-into-matmul", "folding",
         mul(op("matmul", X, C("W"), bind="mm"), C("S")), scale_into_matmul,
         (is_float(), _weight_2d), "(X·W)⊙s = X·(W⊙s) for s per output column", _DENSE),
    Rule("fold/scale-into-matmul-bias", "folding",
         mul(add(op("matmul", X, C("W"), bind="mm"), C("B")), C("S")), scale_into_matmul,
         (is_float(), _weight_2d), "(X·W + B)⊙s = X·(W⊙s) + B⊙s", _DENSE),
    Rule("fold/scaled-input-matmul", "folding",
         op("matmul", mul(X, C("S")), C("W"), bind="mm"), scaled_input_matmul,
         (is_float(), scalar("S")), "(X⊙s)·W = X·(s⊙W) for a scalar s",
         Example(leaves={**_DENSE_LEAVES, "S": "s"})),
    Rule("fold/matmul-chain", "folding",
         op("matmul", op("matmul", X, C("W1")), C("W2"), bind="mm"), matmul_chain,
         (is_float(),), "(X·W1)·W2 = X·(W1·W2) when that is cheaper",
         Example(leaves={**_DENSE_LEAVES, "W1": ("c", (16, 32)), "W2": ("c", (32, 8))}),
         Example(leaves=_DENSE_LEAVES)),
    Rule("fold/pad-into-conv", "folding",
         op("nn.conv2d", op("nn.pad", X, bind="pad"), C("W"), bind="conv"), pad_into_conv,
         (is_float(), _nchw_conv), "conv(pad0(X)) = conv(X) with the padding added",
         _BN),
]

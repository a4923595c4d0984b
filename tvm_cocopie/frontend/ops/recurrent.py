"""Recurrent operators: ``RNN``, ``GRU`` and ``LSTM`` (ONNX opsets 7, 14 and 22).

Spec: https://onnx.ai/onnx/operators/onnx__LSTM.html (and ``onnx__GRU``,
``onnx__RNN``). All directions (``forward``, ``reverse``, ``bidirectional``), both
layouts (``layout=0``: ``X[seq, batch, input]``; ``layout=1``: batch first), initial
states, ``sequence_lens``, peepholes (``P``), ``clip``, ``input_forget``,
``linear_before_reset`` and the activation list with its alphas and betas.

In the common case (float32, static sizes, the default activations, no ``clip``, no
``input_forget``, no ``sequence_lens`` or a constant one equal to the sequence length
everywhere) a layer is one batched input-projection matmul ``X @ W^T + bias`` over all
steps and directions, then one loop kernel (:mod:`tvm_cocopie.topi.cpu.recurrent`)
that walks the time steps, its directions in parallel (a CRNN at 64 px: 268 kernel
calls per inference unrolled, 18 so). Every other case is unrolled over the (static)
sequence length, and that path stays the reference: the same input projection per
direction, then per step ``H @ R^T`` and the gates. With ``sequence_lens``, step ``t``
of batch entry ``b`` only updates the state when ``t < sequence_lens[b]`` and writes
zeros to ``Y`` otherwise, so ``Y_h``/``Y_c`` hold each entry's last valid state. A reverse
direction walks ``t`` from the end down, and the same mask makes entry ``b`` start
at its own ``sequence_lens[b] - 1``, as the spec asks.

A symbolic sequence length (a recognizer's, which follows its image width; SOD²,
thesis chapter 5) takes the loop kernel too: its time loop reads the length at run
time, so the layer compiles once for every length, and ``Y`` keeps the symbolic dim.
Such a layer outside the common case cannot be unrolled and raises a ``ModelError``
that names what the loop kernel lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ...errors import ModelError
from ...topi.cpu import recurrent as loop_kernel
from .common import attr_str, attr_strs, const_value, dtype_of, is_empty, scalar, shape_of
from .registry import register

#: Whether the common case becomes one loop kernel per layer (``False``: always unroll,
#: the reference path; tests switch it).
USE_LOOP_KERNEL = True

#: Default alpha/beta of each activation (those of the ONNX op of the same name).
_ACTIVATION_DEFAULTS = {
    "relu": (), "tanh": (), "sigmoid": (), "softsign": (), "softplus": (),
    "affine": (1.0, 0.0), "leakyrelu": (0.01,), "thresholdedrelu": (1.0,),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0,),
}


def activation_functions(attr: dict, names: list[str], dtype: str) -> list:
    """Callables for ``names``, consuming ``activation_alpha``/``_beta`` in order."""
    alphas = list(attr.get("activation_alpha", ()))
    betas = list(attr.get("activation_beta", ()))
    funcs = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATION_DEFAULTS:
            raise ModelError(f"unknown recurrent activation {name!r}; the ONNX spec lists "
                             f"{sorted(_ACTIVATION_DEFAULTS)}")
        defaults = _ACTIVATION_DEFAULTS[key]
        alpha = beta = None
        if len(defaults) >= 1:
            alpha = alphas.pop(0) if alphas else defaults[0]
        if len(defaults) >= 2:
            beta = betas.pop(0) if betas else defaults[1]
        funcs.append(_activation(key, alpha, beta, dtype))
    return funcs


def _activation(key: str, alpha, beta, dtype: str):
    op = relax.op

    def c(v):
        return scalar(v, dtype)

    table = {
        "relu": lambda x: op.nn.relu(x),
        "tanh": lambda x: op.tanh(x),
        "sigmoid": lambda x: op.sigmoid(x),
        "softsign": lambda x: op.divide(x, op.add(op.abs(x), c(1.0))),
        "softplus": lambda x: op.log(op.add(op.exp(x), c(1.0))),
        "affine": lambda x: op.add(op.multiply(x, c(alpha)), c(beta)),
        "leakyrelu": lambda x: op.where(op.less(x, c(0.0)), op.multiply(x, c(alpha)), x),
        "thresholdedrelu": lambda x: op.where(op.greater(x, c(alpha)), x, c(0.0)),
        "scaledtanh": lambda x: op.multiply(op.tanh(op.multiply(x, c(beta))), c(alpha)),
        "hardsigmoid": lambda x: op.clip(op.add(op.multiply(x, c(alpha)), c(beta)), 0.0, 1.0),
        "elu": lambda x: op.where(op.less(x, c(0.0)),
                                  op.multiply(op.subtract(op.exp(x), c(1.0)), c(alpha)), x),
    }
    return table[key]


@dataclass
class _Spec:
    """What differs between RNN, GRU and LSTM."""

    gates: int  # gate blocks in W/R: 1, 3, 4
    activations: tuple[str, ...]  # defaults, per direction
    states: int  # 1 (H) or 2 (H, C)


class _Recurrent(OnnxOpConverter):
    spec: _Spec

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr)

    @classmethod
    def _impl_v14(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr)

    @classmethod
    def _convert(cls, bb, inputs, attr):
        op = relax.op
        x, w, r = inputs[0], inputs[1], inputs[2]
        bias = None if is_empty(inputs[3]) else inputs[3]
        lens = None if is_empty(inputs[4]) else inputs[4]
        init_h = None if is_empty(inputs[5]) else inputs[5]
        init_c = None if cls.spec.states < 2 or is_empty(inputs[6]) else inputs[6]
        peep = None if cls.spec.states < 2 or is_empty(inputs[7]) else inputs[7]
        layout = int(attr.get("layout", 0))
        direction = attr_str(attr, "direction", "forward")
        dirs = {"forward": ["forward"], "reverse": ["reverse"],
                "bidirectional": ["forward", "reverse"]}.get(direction)
        if dirs is None:
            raise ModelError(f"unknown direction {direction!r}")
        dtype = dtype_of(x)
        if layout == 1:  # batch-first: work time-major, transpose back at the end
            x = bb.emit(op.permute_dims(x, [1, 0, 2]))
            init_h = None if init_h is None else bb.emit(op.permute_dims(init_h, [1, 0, 2]))
            init_c = None if init_c is None else bb.emit(op.permute_dims(init_c, [1, 0, 2]))
        shape = shape_of(x)
        hidden = shape_of(w)[1] // cls.spec.gates
        if "hidden_size" in attr and int(attr["hidden_size"]) != hidden:
            raise ModelError(f"hidden_size={attr['hidden_size']} but W holds {hidden} per gate")
        names = attr_strs(attr, "activations") or list(cls.spec.activations) * len(dirs)
        funcs = activation_functions(attr, names, dtype)
        refusal = cls._loop_refusal(attr, names, dirs, dtype, shape, hidden, lens)
        if not isinstance(shape[0], int):
            cls._check_symbolic(shape[0], refusal)
        if refusal is None:
            y, y_h, y_c = cls._loop(bb, x, w, r, bias, init_h, init_c, peep, dirs, hidden, attr)
        else:
            y, y_h, y_c = cls._unrolled(bb, x, w, r, bias, lens, init_h, init_c, peep, dirs,
                                        hidden, funcs, attr)
        if layout == 1:
            y = op.permute_dims(y, [2, 0, 1, 3])
            y_h = op.permute_dims(y_h, [1, 0, 2])
            y_c = None if y_c is None else op.permute_dims(y_c, [1, 0, 2])
        outs = [y, y_h, y_c][: 1 + cls.spec.states]
        return relax.Tuple([bb.emit(o) for o in outs])

    @classmethod
    def _check_symbolic(cls, steps, refusal: str | None) -> None:
        """A symbolic sequence length cannot be unrolled: only the loop kernel, whose
        time loop takes its extent at run time, compiles it (SOD², chapter 5)."""
        if refusal is None:
            return
        raise ModelError(
            f"{cls.__name__} with symbolic sequence length {_dim_text(steps)}: {refusal}, "
            "and unrolling needs a static length; fix the length with shapes={...}")

    @classmethod
    def _loop_refusal(cls, attr, names, dirs, dtype, shape, hidden, lens) -> str | None:
        """Why the layer is not the common case the loop kernel implements (``None``
        when it is); the reason ends up in the error of a symbolic-length layer."""
        lacks = "the loop kernel does not support "
        if not USE_LOOP_KERNEL:
            return "the loop kernel is switched off (USE_LOOP_KERNEL)"
        if dtype != "float32":
            return f"{lacks}{dtype} (float32 only)"
        if not isinstance(shape[1], int) or not isinstance(hidden, int):
            return f"{lacks}a symbolic batch size ({_dim_text(shape[1])})"
        defaults = [a.lower() for a in cls.spec.activations] * len(dirs)
        if [n.lower() for n in names] != defaults:
            return f"{lacks}activations {names} (only {', '.join(cls.spec.activations)})"
        if attr.get("clip") is not None:
            return f"{lacks}clip"
        if int(attr.get("input_forget", 0)):
            return f"{lacks}input_forget"
        if lens is not None:  # only lengths that are all the full sequence
            value = const_value(lens)
            if not isinstance(shape[0], int) or value is None or not np.all(value == shape[0]):
                return f"{lacks}sequence_lens"
        return None

    @classmethod
    def _loop(cls, bb, x, w, r, bias, init_h, init_c, peep, dirs, hidden, attr):
        """One input-projection matmul for all steps and directions, then the loop
        kernel; returns ``Y[T, D, B, H]``, ``Y_h``, ``Y_c`` (``None`` but for LSTM)."""
        op = relax.op
        steps, batch = shape_of(x)[:2]
        n_dirs, gh = len(dirs), cls.spec.gates * hidden
        inputs = shape_of(w)[2]
        spec = loop_kernel.LoopSpec(
            cell=cls.__name__.lower(), steps=steps, batch=batch, hidden=hidden,
            reverse=tuple(name == "reverse" for name in dirs),
            init_h=init_h is not None, init_c=init_c is not None, peepholes=peep is not None,
            linear_before_reset=bool(int(attr.get("linear_before_reset", 0))))
        wt = _folded(bb, w, lambda a: a.reshape(n_dirs * gh, inputs).T,
                     lambda e: op.permute_dims(op.reshape(e, [n_dirs * gh, inputs]), [1, 0]))
        xw = bb.emit(op.matmul(x, wt))  # [steps, batch, dirs * gates * hidden]
        rbh = None
        if bias is not None:
            xb, rbh = cls._loop_biases(bb, bias, n_dirs, hidden, spec)
            xw = bb.emit(op.add(xw, xb))
        args = {"xw": xw, "h0": init_h, "c0": init_c, "p": peep}
        for k, (first, gates) in enumerate(spec.weight_groups()):
            args[f"rt{k}"] = _packed_weights(bb, r, first * hidden, gates * hidden, hidden)
        if spec.cell == "gru" and spec.linear_before_reset:
            args["rbh"] = rbh if rbh is not None else relax.const(
                np.zeros((n_dirs, hidden), "float32"))
        out_ty = [relax.TensorType(list(s), "float32") for s in spec.output_shapes()]
        func = loop_kernel.recurrent_loop(spec)
        gv = bb.add_func(func, f"{spec.cell}_loop")
        call = bb.emit(relax.call_tir(gv, [args[n] for n, _ in spec.input_shapes()], out_ty))
        outs = [bb.emit(relax.TupleGetItem(call, i)) for i in range(len(out_ty))]
        return outs[0], outs[1], outs[2] if len(outs) > 2 else None

    @classmethod
    def _loop_biases(cls, bb, bias, n_dirs, hidden, spec):
        """``Wb + Rb`` as ``[D * G * H]`` for the input projection, and GRU's ``Rbh``
        ``[D, H]`` when ``linear_before_reset`` keeps it inside ``r * (...)``."""
        gh = spec.gates * hidden
        split = spec.cell == "gru" and spec.linear_before_reset
        keep = np.ones(gh, "float32")
        if split:
            keep[2 * hidden:] = 0.0

        def xb_np(a):
            b = a.reshape(n_dirs, 2, gh)
            return (b[:, 0] + b[:, 1] * keep).reshape(-1)

        def xb_relax(e):
            op = relax.op
            wb = op.strided_slice(e, [1], [0], [gh])
            rb = op.strided_slice(e, [1], [gh], [2 * gh])
            return op.reshape(op.add(wb, op.multiply(rb, relax.const(keep))), [n_dirs * gh])

        xb = _folded(bb, bias, xb_np, xb_relax)
        if not split:
            return xb, None
        rbh = _folded(bb, bias, lambda a: a[:, gh + 2 * hidden:],
                      lambda e: relax.op.strided_slice(e, [1], [gh + 2 * hidden], [2 * gh]))
        return xb, rbh

    @classmethod
    def _unrolled(cls, bb, x, w, r, bias, lens, init_h, init_c, peep, dirs, hidden, funcs,
                  attr):
        """The reference path: every time step its own matmul and gate ops."""
        op = relax.op
        dtype = dtype_of(x)
        shape = shape_of(x)
        steps = shape[0]
        per_dir = len(cls.spec.activations)
        clip = attr.get("clip")
        mask_lens = None
        if lens is not None:
            mask_lens = bb.emit(op.expand_dims(op.astype(lens, "int64"), 1))  # [batch, 1]
        zeros = bb.emit(op.zeros((shape[1], hidden), dtype))
        ys, hs, cs = [], [], []
        for d, name in enumerate(dirs):
            state = {
                "h": zeros if init_h is None else bb.emit(op.take(init_h, relax.const(d), 0)),
                "c": zeros if init_c is None else bb.emit(op.take(init_c, relax.const(d), 0)),
            }
            weights = cls._direction_weights(bb, w, r, bias, peep, d, hidden, dtype)
            xw = bb.emit(op.matmul(x, weights["wt"]))  # [steps, batch, gates*hidden]
            if weights.get("xb") is not None:
                xw = bb.emit(op.add(xw, weights["xb"]))
            act = funcs[d * per_dir:(d + 1) * per_dir]
            order = range(steps) if name == "forward" else range(steps - 1, -1, -1)
            outputs = [None] * steps
            for t in order:
                xt = bb.emit(op.take(xw, relax.const(t), 0))
                new = cls._step(bb, xt, state, weights, act, clip, attr, dtype)
                if mask_lens is not None:
                    live = bb.emit(op.less(scalar(t, "int64"), mask_lens))
                    outputs[t] = bb.emit(op.where(live, new["h"], zeros))
                    new = {k: bb.emit(op.where(live, v, state[k])) for k, v in new.items()}
                else:
                    outputs[t] = new["h"]
                state.update(new)
            ys.append(bb.emit(op.stack(outputs, 0)))  # [steps, batch, hidden]
            hs.append(state["h"])
            cs.append(state["c"])
        y = bb.emit(op.stack(ys, 1))  # [steps, dirs, batch, hidden]
        y_h = bb.emit(op.stack(hs, 0))  # [dirs, batch, hidden]
        y_c = bb.emit(op.stack(cs, 0))
        return y, y_h, y_c

    @classmethod
    def _direction_weights(cls, bb, w, r, bias, peep, d, hidden, dtype) -> dict:
        op = relax.op
        gh = cls.spec.gates * hidden
        wd = bb.emit(op.take(w, relax.const(d), 0))  # [gates*hidden, input]
        rd = bb.emit(op.take(r, relax.const(d), 0))  # [gates*hidden, hidden]
        out = {"wt": bb.emit(op.permute_dims(wd, [1, 0])), "r": rd, "rt": None}
        if bias is not None:
            bd = bb.emit(op.take(bias, relax.const(d), 0))
            out["wb"] = bb.emit(op.strided_slice(bd, [0], [0], [gh]))
            out["rb"] = bb.emit(op.strided_slice(bd, [0], [gh], [2 * gh]))
        cls._fold_bias(bb, out)
        if peep is not None:
            pd = bb.emit(op.take(peep, relax.const(d), 0))
            out["p"] = [bb.emit(op.strided_slice(pd, [0], [k * hidden], [(k + 1) * hidden]))
                        for k in range(3)]  # i, o, f
        return out

    @classmethod
    def _fold_bias(cls, bb, weights) -> None:
        """Put both biases into the input projection (RNN, LSTM); GRU overrides."""
        weights["rt"] = bb.emit(relax.op.permute_dims(weights["r"], [1, 0]))
        if "wb" in weights:
            weights["xb"] = bb.emit(relax.op.add(weights["wb"], weights["rb"]))

    @staticmethod
    def _clip(x, clip, dtype):
        if clip is None:
            return x
        return relax.op.clip(x, -float(clip), float(clip))

    @classmethod
    def _step(cls, bb, xt, state, weights, act, clip, attr, dtype) -> dict:
        raise NotImplementedError


@register("RNN")
class RNN(_Recurrent):
    """``Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)``; default ``f`` is Tanh."""

    spec = _Spec(gates=1, activations=("Tanh",), states=1)

    @classmethod
    def _step(cls, bb, xt, state, weights, act, clip, attr, dtype):
        pre = relax.op.add(xt, relax.op.matmul(state["h"], weights["rt"]))
        return {"h": bb.emit(act[0](cls._clip(pre, clip, dtype)))}


@register("GRU")
class GRU(_Recurrent):
    """Gates ``z, r, h`` (in that order in W, R, B); ``linear_before_reset`` chooses
    whether ``r`` multiplies ``H @ Rh^T + Rbh`` or ``H`` before the product."""

    spec = _Spec(gates=3, activations=("Sigmoid", "Tanh"), states=1)

    @classmethod
    def _fold_bias(cls, bb, weights) -> None:
        op = relax.op
        rd = weights["r"]
        hidden = shape_of(rd)[1]
        weights["rt_zr"] = bb.emit(op.permute_dims(
            op.strided_slice(rd, [0], [0], [2 * hidden]), [1, 0]))
        weights["rt_h"] = bb.emit(op.permute_dims(
            op.strided_slice(rd, [0], [2 * hidden], [3 * hidden]), [1, 0]))
        if "wb" in weights:
            rb = weights["rb"]
            weights["rb_zr"] = bb.emit(op.strided_slice(rb, [0], [0], [2 * hidden]))
            weights["rb_h"] = bb.emit(op.strided_slice(rb, [0], [2 * hidden], [3 * hidden]))
            weights["xb"] = weights["wb"]

    @classmethod
    def _step(cls, bb, xt, state, weights, act, clip, attr, dtype):
        op = relax.op
        h = state["h"]
        hidden = shape_of(weights["rt_h"])[0]
        x_zr = op.strided_slice(xt, [1], [0], [2 * hidden])
        x_h = op.strided_slice(xt, [1], [2 * hidden], [3 * hidden])
        zr = op.add(x_zr, op.matmul(h, weights["rt_zr"]))
        if "rb_zr" in weights:
            zr = op.add(zr, weights["rb_zr"])
        zr = bb.emit(act[0](cls._clip(zr, clip, dtype)))
        z = bb.emit(op.strided_slice(zr, [1], [0], [hidden]))
        rg = bb.emit(op.strided_slice(zr, [1], [hidden], [2 * hidden]))
        if int(attr.get("linear_before_reset", 0)):
            hr = op.matmul(h, weights["rt_h"])
            if "rb_h" in weights:
                hr = op.add(hr, weights["rb_h"])
            pre = op.add(x_h, op.multiply(rg, hr))
        else:
            pre = op.add(x_h, op.matmul(op.multiply(rg, h), weights["rt_h"]))
            if "rb_h" in weights:
                pre = op.add(pre, weights["rb_h"])
        cand = bb.emit(act[1](cls._clip(pre, clip, dtype)))
        one = scalar(1.0, dtype)
        new_h = op.add(op.multiply(op.subtract(one, z), cand), op.multiply(z, h))
        return {"h": bb.emit(new_h)}


@register("LSTM")
class LSTM(_Recurrent):
    """Gates ``i, o, f, c`` in W, R, B; peepholes ``P = [Pi, Po, Pf]``;
    ``input_forget`` couples the gates as ``f = 1 - i``."""

    spec = _Spec(gates=4, activations=("Sigmoid", "Tanh", "Tanh"), states=2)

    @classmethod
    def _step(cls, bb, xt, state, weights, act, clip, attr, dtype):
        op = relax.op
        h, c = state["h"], state["c"]
        hidden = shape_of(weights["rt"])[0]
        gates = bb.emit(op.add(xt, op.matmul(h, weights["rt"])))

        def gate(k):
            return op.strided_slice(gates, [1], [k * hidden], [(k + 1) * hidden])

        i, o, f, g = gate(0), gate(1), gate(2), gate(3)
        peep = weights.get("p")
        if peep is not None:
            i = op.add(i, op.multiply(peep[0], c))
            f = op.add(f, op.multiply(peep[2], c))
        i = bb.emit(act[0](cls._clip(i, clip, dtype)))
        if int(attr.get("input_forget", 0)):
            f = bb.emit(op.subtract(scalar(1.0, dtype), i))
        else:
            f = bb.emit(act[0](cls._clip(f, clip, dtype)))
        g = bb.emit(act[1](cls._clip(g, clip, dtype)))
        new_c = bb.emit(op.add(op.multiply(f, c), op.multiply(i, g)))
        if peep is not None:
            o = op.add(o, op.multiply(peep[1], new_c))
        o = bb.emit(act[0](cls._clip(o, clip, dtype)))
        new_h = bb.emit(op.multiply(o, act[2](new_c)))
        return {"h": new_h, "c": new_c}


def _dim_text(dim) -> str:
    """A shape dim as a user wrote it: a var's name (TVM prints ``T`` as ``T_1``),
    int64 constants without their ``T.int64(...)``."""
    if isinstance(dim, tvm.tirx.Var):
        return dim.name
    return re.sub(r"T\.int64\((-?\d+)\)", r"\1", str(dim))


def _folded(bb, expr, np_fn, relax_fn) -> relax.Expr:
    """``np_fn`` of ``expr``'s value as a constant when it is one, else ``relax_fn``'s
    ops (weights given at run time)."""
    value = const_value(expr)
    if value is not None:
        return relax.const(np.ascontiguousarray(np_fn(value)))
    return bb.emit(relax_fn(expr))


def _packed_weights(bb, r, start: int, columns: int, hidden: int) -> relax.Expr:
    """Rows ``start:start+columns`` of ``R[D, G*H, H]`` transposed and packed for the
    loop kernel's GEMV: ``[D, NJ, H, JT]``, columns zero-padded to ``NJ * JT``."""
    jt = loop_kernel.column_tile(columns)
    tiles = -(-columns // jt)
    pad = tiles * jt - columns

    def np_fn(a):
        rt = a[:, start:start + columns, :].transpose(0, 2, 1)  # [D, H, columns]
        rt = np.pad(rt, [(0, 0), (0, 0), (0, pad)])
        return rt.reshape(a.shape[0], hidden, tiles, jt).transpose(0, 2, 1, 3)

    def relax_fn(e):
        op = relax.op
        rt = op.permute_dims(op.strided_slice(e, [1], [start], [start + columns]), [0, 2, 1])
        if pad:
            rt = op.nn.pad(rt, [0, 0, 0, 0, 0, pad])
        dirs = shape_of(e)[0]
        return op.permute_dims(op.reshape(rt, [dirs, hidden, tiles, jt]), [0, 2, 1, 3])

    return _folded(bb, r, np_fn, relax_fn)

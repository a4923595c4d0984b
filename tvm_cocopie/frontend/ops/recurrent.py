"""Recurrent operators: ``RNN``, ``GRU`` and ``LSTM`` (ONNX opsets 7, 14 and 22).

Spec: https://onnx.ai/onnx/operators/onnx__LSTM.html (and ``onnx__GRU``,
``onnx__RNN``). All directions (``forward``, ``reverse``, ``bidirectional``), both
layouts (``layout=0``: ``X[seq, batch, input]``; ``layout=1``: batch first), initial
states, ``sequence_lens``, peepholes (``P``), ``clip``, ``input_forget``,
``linear_before_reset`` and the activation list with its alphas and betas.

The recurrence is unrolled over the (static) sequence length. The input projection
``X @ W^T + bias`` of all time steps is one batched matmul; each step then adds
``H @ R^T`` and applies the gates. With ``sequence_lens``, step ``t`` of batch
entry ``b`` only updates the state when ``t < sequence_lens[b]`` and writes zeros to
``Y`` otherwise, so ``Y_h``/``Y_c`` hold each entry's last valid state. A reverse
direction walks ``t`` from the end down, and the same mask makes entry ``b`` start
at its own ``sequence_lens[b] - 1``, as the spec asks.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ...errors import ModelError
from .common import attr_str, attr_strs, dtype_of, is_empty, scalar, shape_of
from .registry import register

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
        steps = shape[0]
        if not isinstance(steps, int):
            raise ModelError(
                f"{cls.__name__} needs a static sequence length to unroll, got {steps}: "
                "fix the input shape with shapes={...}")
        hidden = shape_of(w)[1] // cls.spec.gates
        if "hidden_size" in attr and int(attr["hidden_size"]) != hidden:
            raise ModelError(f"hidden_size={attr['hidden_size']} but W holds {hidden} per gate")
        names = attr_strs(attr, "activations") or list(cls.spec.activations) * len(dirs)
        per_dir = len(cls.spec.activations)
        funcs = activation_functions(attr, names, dtype)
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
        if layout == 1:
            y = op.permute_dims(y, [2, 0, 1, 3])
            y_h = op.permute_dims(y_h, [1, 0, 2])
            y_c = op.permute_dims(y_c, [1, 0, 2])
        outs = [y, y_h, y_c][: 1 + cls.spec.states]
        return relax.Tuple([bb.emit(o) for o in outs])

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

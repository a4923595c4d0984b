"""Transformer operators of opsets 23-25: ``Attention``, ``RotaryEmbedding``,
``RMSNormalization``.

Specs: https://onnx.ai/onnx/operators/onnx__Attention.html,
``onnx__RotaryEmbedding``, ``onnx__RMSNormalization``.

``Attention`` (23; 24 adds ``nonpad_kv_seqlen``; 25 adds sliding windows) is built
from Relax matmul/softmax: 3-D inputs are split into heads; ``Q`` and ``K`` are each
scaled by ``sqrt(scale)``; a past KV cache is concatenated in front of ``K``/``V``
(and returned as ``present_*``); grouped-query attention repeats each KV head
``q_heads / kv_heads`` times. All masks become one additive bias: a boolean mask,
the causal frontier (bottom-right aligned, ``key <= query + offset`` with the offset
of a past or external cache), the window bounds and the padding of
``nonpad_kv_seqlen`` select between the float mask (or 0) and ``-inf``. A query row
whose bias is ``-inf`` everywhere attends nothing and yields zeros, as the spec
asks, instead of NaN.

The contrib ``com.microsoft.Attention`` (same op name, ``num_heads`` attribute) keeps
TVM's stock converter.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend as stock

from ...errors import ModelError
from .common import attr_str, dtype_of, filled, is_empty, rank_of, scalar, shape_of
from .registry import register


def _heads_first(bb, x, heads: int):
    """``[B, S, heads*D]`` -> ``[B, heads, S, D]``."""
    b, s, _ = shape_of(x)
    x = bb.emit(relax.op.reshape(x, [b, s, heads, -1]))
    return bb.emit(relax.op.permute_dims(x, [0, 2, 1, 3]))


@register("Attention")
class Attention(stock.Attention):
    """ONNX ``Attention`` (opset 23+); ``com.microsoft.Attention`` stays stock."""

    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        if "num_heads" in attr:  # the contrib op of the same name
            return stock.Attention._impl_v1(bb, inputs, attr, params)
        op = relax.op
        q, k, v = inputs[0], inputs[1], inputs[2]
        mask = None if is_empty(inputs[3]) else inputs[3]
        past_k = None if is_empty(inputs[4]) else inputs[4]
        past_v = None if is_empty(inputs[5]) else inputs[5]
        nonpad = None if is_empty(inputs[6]) else inputs[6]
        out_dtype = dtype_of(q)
        # half-precision attention is computed in float32 and rounded once at the end
        dtype = "float32" if out_dtype in ("float16", "bfloat16") else out_dtype
        three_d = rank_of(q) == 3
        if three_d:
            q_heads, kv_heads = attr.get("q_num_heads"), attr.get("kv_num_heads")
            if not q_heads or not kv_heads:
                raise ModelError("3-D Attention needs q_num_heads and kv_num_heads")
            q = _heads_first(bb, q, int(q_heads))
            k = _heads_first(bb, k, int(kv_heads))
            v = _heads_first(bb, v, int(kv_heads))
        q_heads, head = shape_of(q)[1], shape_of(q)[3]
        scale = attr.get("scale")
        scale = 1.0 / np.sqrt(head) if scale is None else float(scale)
        root = scalar(np.sqrt(scale), dtype)
        if past_k is not None:
            k = bb.emit(op.concat([past_k, k], axis=2))
            v = bb.emit(op.concat([past_v, v], axis=2))
        present_k, present_v = k, v
        if dtype != out_dtype:
            q, k, v = (bb.emit(op.astype(t, dtype)) for t in (q, k, v))
            if mask is not None and dtype_of(mask) != "bool":
                mask = bb.emit(op.astype(mask, dtype))
        q_len, kv_len = shape_of(q)[2], shape_of(k)[2]
        bias = cls._bias(bb, attr, mask, nonpad, q_len, kv_len,
                         past_len=shape_of(past_k)[2] if past_k is not None else 0, dtype=dtype)
        kv_heads = shape_of(k)[1]
        if q_heads != kv_heads:
            k = bb.emit(op.repeat(k, q_heads // kv_heads, axis=1))
            v = bb.emit(op.repeat(v, q_heads // kv_heads, axis=1))
        qk = bb.emit(op.matmul(op.multiply(q, root),
                               op.permute_dims(op.multiply(k, root), [0, 1, 3, 2])))
        softcap = float(attr.get("softcap", 0.0))
        if softcap > 0:
            cap = scalar(softcap, dtype)
            qk = bb.emit(op.multiply(op.tanh(op.divide(qk, cap)), cap))
        scores = qk if bias is None else bb.emit(op.add(qk, bias))
        mode = int(attr.get("qk_matmul_output_mode", 0))
        precision = attr.get("softmax_precision")
        logits = scores
        if precision is not None:
            logits = bb.emit(op.astype(scores, stock.get_type(int(precision))))
        probs = bb.emit(op.nn.softmax(logits, axis=-1))
        if bias is not None:  # rows with no attendable key: zeros, not NaN
            # (TVM's max starts from the lowest finite value, so test "any key open")
            open_keys = bb.emit(op.astype(op.not_equal(bias, scalar(-np.inf, dtype)), "int32"))
            dead = bb.emit(op.equal(op.max(open_keys, axis=-1, keepdims=True),
                                    scalar(0, "int32")))
            probs = bb.emit(op.where(dead, scalar(0, dtype_of(probs)), probs))
        probs = bb.emit(op.astype(probs, dtype)) if precision is not None else probs
        y = bb.emit(op.matmul(probs, v))
        if three_d:
            b, _, s, _ = shape_of(y)
            y = bb.emit(op.permute_dims(y, [0, 2, 1, 3]))
            y = bb.emit(op.reshape(y, [b, s, -1]))
        qk_out = {0: qk, 1: qk, 2: scores, 3: probs}.get(mode, qk)
        if dtype != out_dtype:
            y, qk_out = (bb.emit(op.astype(t, out_dtype)) for t in (y, qk_out))
        return relax.Tuple([y, present_k, present_v, qk_out])

    _impl_v24 = _impl_v23
    _impl_v25 = _impl_v23

    @classmethod
    def _bias(cls, bb, attr, mask, nonpad, q_len, kv_len, past_len, dtype):
        """The additive attention bias, or ``None`` when nothing is masked."""
        op = relax.op
        allowed, additive = None, None

        def both(a, b):
            return b if a is None else bb.emit(op.logical_and(a, b))

        if mask is not None:
            mshape = shape_of(mask)
            pad = kv_len - mshape[-1]
            is_bool = dtype_of(mask) == "bool"
            if pad > 0:  # a short mask is padded with "not attended"
                tail = filled([*mshape[:-1], pad], False if is_bool else -np.inf, dtype_of(mask))
                mask = bb.emit(op.concat([mask, tail], axis=-1))
            if is_bool:
                allowed = mask
            else:
                additive = mask
        causal = int(attr.get("is_causal", 0))
        left = int(attr.get("left_window_size", -1))
        right = int(attr.get("right_window_size", -1))
        if causal or left >= 0 or right >= 0:
            rows = bb.emit(op.reshape(op.arange(0, q_len, dtype="int64"), [q_len, 1]))
            cols = bb.emit(op.reshape(op.arange(0, kv_len, dtype="int64"), [1, kv_len]))
            if nonpad is not None and past_len == 0:  # external cache: per-batch offset
                offset = bb.emit(op.subtract(op.astype(nonpad, "int64"), scalar(q_len, "int64")))
                offset = bb.emit(op.reshape(offset, [-1, 1, 1, 1]))
            else:
                offset = scalar(past_len, "int64")
            pos = bb.emit(op.add(rows, offset))  # absolute query position
            if causal:
                allowed = both(allowed, op.less_equal(cols, pos))
            if left >= 0:
                allowed = both(allowed, op.less_equal(op.subtract(pos, cols),
                                                      scalar(left, "int64")))
            if right >= 0:
                allowed = both(allowed, op.less_equal(op.subtract(cols, pos),
                                                      scalar(right, "int64")))
        if nonpad is not None:
            cols = bb.emit(op.reshape(op.arange(0, kv_len, dtype="int64"), [1, 1, 1, kv_len]))
            lens = bb.emit(op.astype(nonpad, "int64"))
            valid = op.less(cols, bb.emit(op.reshape(lens, [-1, 1, 1, 1])))
            allowed = both(allowed, valid)
        if allowed is None:
            return additive
        keep = additive if additive is not None else scalar(0, dtype)
        return bb.emit(op.where(allowed, op.astype(keep, dtype), scalar(-np.inf, dtype)))


@register("RotaryEmbedding")
class RotaryEmbedding(stock.OnnxOpConverter):
    """Rotary position embedding (RoPE): pairs of features are rotated by the angle
    whose cosine and sine the caches hold, for each token's position. Pairs are the
    two halves of the rotated part, or neighbours with ``interleaved=1``; only the
    first ``rotary_embedding_dim`` features rotate."""

    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        op = relax.op
        x, cos, sin = inputs[0], inputs[1], inputs[2]
        positions = None if is_empty(inputs[3]) else inputs[3]
        three_d = rank_of(x) == 3
        if three_d:
            heads = int(attr.get("num_heads", 0))
            if not heads:
                raise ModelError("3-D RotaryEmbedding needs num_heads")
            b, s, _ = shape_of(x)
            tokens = bb.emit(op.reshape(x, [b, s, heads, -1]))
        else:
            tokens = bb.emit(op.permute_dims(x, [0, 2, 1, 3]))  # [B, S, H, D]
        head = shape_of(tokens)[3]
        dim = int(attr.get("rotary_embedding_dim", 0)) or head
        half = dim // 2
        if positions is not None:
            cos = bb.emit(op.take(cos, positions, axis=0))
            sin = bb.emit(op.take(sin, positions, axis=0))
        cos = bb.emit(op.expand_dims(cos, 2))  # [B, S, 1, dim/2]
        sin = bb.emit(op.expand_dims(sin, 2))
        rot = bb.emit(op.strided_slice(tokens, [3], [0], [dim])) if dim < head else tokens
        if int(attr.get("interleaved", 0)):
            x1 = bb.emit(op.strided_slice(rot, [3], [0], [dim], [2]))
            x2 = bb.emit(op.strided_slice(rot, [3], [1], [dim], [2]))
        else:
            x1 = bb.emit(op.strided_slice(rot, [3], [0], [half]))
            x2 = bb.emit(op.strided_slice(rot, [3], [half], [dim]))
        real = bb.emit(op.subtract(op.multiply(cos, x1), op.multiply(sin, x2)))
        imag = bb.emit(op.add(op.multiply(sin, x1), op.multiply(cos, x2)))
        if int(attr.get("interleaved", 0)):
            pairs = bb.emit(op.stack([real, imag], axis=4))
            rotated = bb.emit(op.reshape(pairs, [*shape_of(rot)[:3], dim]))
        else:
            rotated = bb.emit(op.concat([real, imag], axis=3))
        if dim < head:
            rest = bb.emit(op.strided_slice(tokens, [3], [dim], [head]))
            rotated = bb.emit(op.concat([rotated, rest], axis=3))
        if three_d:
            return op.reshape(rotated, shape_of(x))
        return op.permute_dims(rotated, [0, 2, 1, 3])


@register("CausalConvWithState")
class CausalConvWithState(stock.OnnxOpConverter):
    """Depthwise causal 1-D convolution over ``concat(past_state, input)`` (opset 27);
    ``present_state`` keeps the last ``k - 1`` positions. Taps are unrolled: the
    kernel is short (Mamba and Gated DeltaNet use 4)."""

    @classmethod
    def _impl_v27(cls, bb, inputs, attr, params):
        op = relax.op
        x, w = inputs[0], inputs[1]
        bias = None if is_empty(inputs[2]) else inputs[2]
        past = None if is_empty(inputs[3]) else inputs[3]
        dtype = dtype_of(x)
        work = "float32" if dtype in ("float16", "bfloat16") else dtype
        b, c, length = shape_of(x)
        k = shape_of(w)[2]
        if past is None:
            past = bb.emit(op.zeros([b, c, k - 1], dtype))
        padded = bb.emit(op.concat([past, x], axis=2))
        wide = padded if work == dtype else bb.emit(op.astype(padded, work))
        taps = bb.emit(op.astype(op.reshape(w, [1, c, k]), work) if work != dtype
                       else op.reshape(w, [1, c, k]))
        acc = None
        for j in range(k):
            term = op.multiply(op.strided_slice(wide, [2], [j], [j + length]),
                               op.strided_slice(taps, [2], [j], [j + 1]))
            acc = bb.emit(term if acc is None else op.add(acc, term))
        if bias is not None:
            acc = bb.emit(op.add(acc, op.reshape(op.astype(bias, work), [1, c, 1])))
        out = bb.emit(op.astype(acc, dtype)) if work != dtype else acc
        if attr_str(attr, "activation", "none") in ("silu", "swish"):
            wide_out = bb.emit(op.astype(out, work)) if work != dtype else out
            out = bb.emit(op.multiply(wide_out, op.sigmoid(wide_out)))
            out = bb.emit(op.astype(out, dtype)) if work != dtype else out
        present = bb.emit(op.strided_slice(padded, [2], [length], [length + k - 1]))
        return relax.Tuple([out, present])


@register("LinearAttention")
class LinearAttention(stock.OnnxOpConverter):
    """Recurrent linear attention (opset 27), unrolled over the sequence in float32.

    The state ``S[B, H_kv, d_k, d_v]`` is updated per token by the ``update_rule``
    (``linear``: ``S += k v^T``; ``gated``: decays by ``exp(g)`` first; ``delta``:
    writes ``beta * (v - S^T k)`` instead of ``v``; ``gated_delta``: both) and read
    as ``scale * q^T S``, each KV head serving ``q_heads / kv_heads`` query heads."""

    @classmethod
    def _impl_v27(cls, bb, inputs, attr, params):
        op = relax.op
        q, k, v = inputs[0], inputs[1], inputs[2]
        past = None if is_empty(inputs[3]) else inputs[3]
        decay = None if is_empty(inputs[4]) else inputs[4]
        beta = None if is_empty(inputs[5]) else inputs[5]
        rule = attr_str(attr, "update_rule", "gated_delta")
        q_heads, kv_heads = int(attr["q_num_heads"]), int(attr["kv_num_heads"])
        dtype = dtype_of(q)
        f32 = "float32"
        b, steps, _ = shape_of(q)
        d_k = shape_of(q)[2] // q_heads
        d_v = shape_of(v)[2] // kv_heads
        group = q_heads // kv_heads
        scale = float(attr.get("scale", 0.0)) or 1.0 / np.sqrt(d_k)

        def heads(x, n):  # [B, T, n*D] -> [B, T, n, D] in float32
            return bb.emit(op.reshape(bb.emit(op.astype(x, f32)), [b, steps, n, -1]))

        q4, k4, v4 = heads(q, q_heads), heads(k, kv_heads), heads(v, kv_heads)
        g4 = heads(decay, kv_heads) if decay is not None else None  # last dim d_k or 1
        beta4 = None
        if beta is not None:
            beta4 = bb.emit(op.reshape(bb.emit(op.astype(beta, f32)),
                                       [b, steps, shape_of(beta)[2], 1]))
        state = (bb.emit(op.astype(past, f32)) if past is not None
                 else bb.emit(op.zeros([b, kv_heads, d_k, d_v], f32)))
        outs = []
        for t in range(steps):
            def at(x, t=t):
                return bb.emit(op.squeeze(op.strided_slice(x, [1], [t], [t + 1]), [1]))

            k_t, v_t, q_t = at(k4), at(v4), at(q4)  # [B, H, D]
            if rule in ("gated", "gated_delta"):
                state = bb.emit(op.multiply(state, op.expand_dims(op.exp(at(g4)), 3)))
            if rule in ("delta", "gated_delta"):
                recalled = bb.emit(op.sum(op.multiply(state, op.expand_dims(k_t, 3)), [2]))
                v_t = bb.emit(op.multiply(at(beta4), op.subtract(v_t, recalled)))
            state = bb.emit(op.add(state, op.multiply(op.expand_dims(k_t, 3),
                                                      op.expand_dims(v_t, 2))))
            read = state if group == 1 else bb.emit(op.repeat(state, group, axis=1))
            o_t = bb.emit(op.sum(op.multiply(read, op.expand_dims(q_t, 3)), [2]))
            outs.append(bb.emit(op.multiply(o_t, scalar(scale, f32))))  # [B, Hq, d_v]
        out = bb.emit(op.stack(outs, axis=1))  # [B, T, Hq, d_v]
        out = bb.emit(op.astype(op.reshape(out, [b, steps, q_heads * d_v]), dtype))
        present = op.astype(state, dtype_of(past) if past is not None else dtype)
        return relax.Tuple([out, bb.emit(present)])

"""A BERT-style Transformer encoder, written the way exporters write it at opset 17.

Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL 2019; Vaswani et al., "Attention Is All You Need", NeurIPS
2017. Input ``input_ids`` (int64, ``[batch, seq]``); word embedding (Gather) plus a
learned position embedding, LayerNormalization; then ``num_layers`` post-LN layers of
multi-head self-attention (Q/K/V MatMul + Add, Reshape + Transpose to heads, Q K^T
MatMul scaled by ``1/sqrt(head_dim)``, Softmax, MatMul with V, Transpose + Reshape
back, output projection, residual + LayerNorm) and a GELU feed-forward network
(residual + LayerNorm). The output ``output`` holds the hidden states, float32
``[batch, seq, hidden]``. There is no attention mask, token-type embedding or pooler.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from .graph_builder import GraphBuilder, batch_dim


def _self_attention(gb: GraphBuilder, x: str, seq: int, hidden: int, heads: int) -> str:
    head_dim = hidden // heads

    def split_heads(t: str, perm: tuple[int, ...]) -> str:
        return gb.transpose(gb.reshape(t, [0, seq, heads, head_dim]), perm)

    q = split_heads(gb.linear(x, hidden, kind="query"), (0, 2, 1, 3))  # [B, h, S, d]
    k = split_heads(gb.linear(x, hidden, kind="key"), (0, 2, 3, 1))  # [B, h, d, S]
    v = split_heads(gb.linear(x, hidden, kind="value"), (0, 2, 1, 3))  # [B, h, S, d]
    scores = gb.div(gb.matmul(q, k), math.sqrt(head_dim))
    context = gb.matmul(gb.softmax(scores, axis=-1), v)  # [B, h, S, d]
    context = gb.reshape(gb.transpose(context, (0, 2, 1, 3)), [0, seq, hidden])
    return gb.linear(context, hidden, kind="output.dense")


def bert_encoder(*, batch: int = 1, seed: int = 0, num_layers: int = 4, hidden: int = 256,
                 heads: int = 4, ffn: int = 1024, seq: int = 128, vocab: int = 1000,
                 eps: float = 1e-12, dynamic_batch: bool = False) -> onnx.ModelProto:
    """A BERT-style encoder; the defaults give 4 layers, hidden 256, 4 heads, FFN 1024.

    ``seq`` is static; the position table has ``seq`` rows (what constant folding
    leaves of BERT's position-id Gather). Embeddings are N(0, 0.02), BERT's init.
    """
    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")
    gb = GraphBuilder("bert_encoder", seed)
    ids = gb.input("input_ids", [batch_dim(batch, dynamic_batch), seq], TensorProto.INT64,
                   high=vocab)
    with gb.scope("embeddings"):
        x = gb.embedding(ids, vocab, hidden, kind="word_embeddings")
        table = (gb.rng.standard_normal((seq, hidden)) * 0.02).astype(np.float32)
        positions = gb.const(table, "position_embeddings.weight")
        x = gb.layernorm(gb.add(x, positions), eps=eps, kind="LayerNorm")
    for i in range(num_layers):
        with gb.scope(f"encoder.layer.{i}"):
            with gb.scope("attention"):
                a = _self_attention(gb, x, seq, hidden, heads)
                x = gb.layernorm(gb.add(a, x), eps=eps, kind="output.LayerNorm")
            h = gb.gelu(gb.linear(x, ffn, kind="intermediate.dense"))
            h = gb.linear(h, hidden, kind="output.dense")
            x = gb.layernorm(gb.add(h, x), eps=eps, kind="output.LayerNorm")
    gb.output(x)
    return gb.model(f"bert_encoder: {num_layers} layers, hidden {hidden}, {heads} heads, "
                    f"FFN {ffn}, seq {seq}, vocab {vocab}; random weights (seed {seed})")

"""A DeiT-tiny-style Vision Transformer.

Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image
Recognition at Scale", ICLR 2021; Touvron et al., "Training data-efficient image
transformers & distillation through attention" (DeiT), ICML 2021, Table 1 (DeiT-Ti:
192 dims, 3 heads, 12 blocks, MLP ratio 4). The graph is written the way the PyTorch
exporter writes a timm ``VisionTransformer`` at opset 17:

- patch embedding: a 16x16/16 conv with bias, ``Reshape [N, D, P]`` and ``Transpose``
  to ``[N, P, D]`` tokens;
- a learned class token (``Expand`` to the batch, ``Concat`` in front of the patches)
  and a learned position embedding (``Add``), both N(0, 0.02);
- ``depth`` pre-norm blocks: ``x + attn(LN(x))`` and ``x + mlp(LN(x))``. Attention is
  one fused QKV linear, ``Reshape [N, T, 3, H, d]``, ``Transpose (2, 0, 3, 1, 4)``,
  ``Split`` + ``Squeeze`` into q, k and v, ``q k^T`` scaled by ``1/sqrt(d)``,
  ``Softmax``, ``@ v``, ``Transpose`` + ``Reshape`` back and an output projection; the
  MLP is Linear (4D), exact GELU (``Erf`` form), Linear (D);
- a final LayerNormalization (eps 1e-6 as in timm), the class token (``Gather`` index
  0 of the token axis) and a linear head (``Gemm``).

With ``dynamic_batch`` the class token's ``Expand`` takes its batch from ``Shape``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from .graph_builder import GraphBuilder, batch_dim

#: LayerNorm epsilon of timm's ViT.
LN_EPS = 1e-6


def self_attention(gb: GraphBuilder, x: str, heads: int) -> str:
    """Multi-head self-attention over ``x [N, T, D]`` as timm writes it: one QKV
    linear, heads split by Reshape + Transpose, scaled scores, softmax, the output
    projection."""
    _, tokens, dim = gb.values[x].shape
    head_dim = dim // heads
    qkv = gb.linear(x, 3 * dim, kind="qkv")
    qkv = gb.transpose(gb.reshape(qkv, [0, tokens, 3, heads, head_dim]), (2, 0, 3, 1, 4))
    q, k, v = (gb.squeeze(t, [0]) for t in gb.split(qkv, [1, 1, 1], axis=0))  # [N, H, T, d]
    q = gb.scale(q, 1.0 / math.sqrt(head_dim))
    scores = gb.matmul(q, gb.transpose(k, (0, 1, 3, 2)))
    context = gb.matmul(gb.softmax(scores, axis=-1), v)
    context = gb.reshape(gb.transpose(context, (0, 2, 1, 3)), [0, tokens, dim])
    return gb.linear(context, dim, kind="proj")


def _class_token(gb: GraphBuilder, tokens: str, dim: int, dynamic: bool) -> str:
    """``cls_token.expand(N, -1, -1)``: ``Expand`` of a ``[1, 1, D]`` parameter."""
    table = (gb.rng.standard_normal((1, 1, dim)) * 0.02).astype(np.float32)
    cls = gb.const(table, "cls_token")
    if dynamic:
        name = gb.fresh("shape")
        gb.nodes.append(helper.make_node("Shape", [tokens], [name], name=name, start=0, end=1))
        gb.values[name] = np.array(gb.values[tokens].shape[:1], dtype=np.int64)
        shape = gb.concat([name, gb.const(np.array([1, 1], dtype=np.int64), "ones")], axis=0)
    else:
        shape = gb.const(np.array([gb.batch, 1, 1], dtype=np.int64), "expand_shape")
    calib_batch = gb.values[tokens].shape[0]
    value = np.broadcast_to(table, (calib_batch, 1, dim)).copy()
    return gb.node("Expand", [cls, shape], value, kind="expand")


def vit_tiny(*, batch: int = 1, seed: int = 0, image_size: int = 224, num_classes: int = 1000,
             depth: int = 12, dim: int = 192, heads: int = 3, patch: int = 16,
             mlp_ratio: int = 4, dynamic_batch: bool = False) -> onnx.ModelProto:
    """DeiT-tiny: ``depth`` blocks of width ``dim`` with ``heads`` heads on 16x16 patches."""
    if image_size % patch:
        raise ValueError(f"vit_tiny needs an image size divisible by {patch}, got {image_size}")
    if dim % heads:
        raise ValueError(f"dim={dim} must be a multiple of heads={heads}")
    gb = GraphBuilder("vit_tiny", seed)
    x = gb.input("input", [batch_dim(batch, dynamic_batch), 3, image_size, image_size])
    patches = (image_size // patch) ** 2
    with gb.scope("patch_embed"):
        x = gb.conv(x, dim, patch, patch, pad=0, bias=True, kind="proj")
        x = gb.transpose(gb.reshape(x, [0, dim, patches]), (0, 2, 1))  # [N, P, D]
    cls = _class_token(gb, x, dim, dynamic_batch)
    x = gb.concat([cls, x], axis=1)
    pos = (gb.rng.standard_normal((1, patches + 1, dim)) * 0.02).astype(np.float32)
    x = gb.add(x, gb.const(pos, "pos_embed"))
    for i in range(depth):
        with gb.scope(f"blocks.{i}"):
            h = gb.layernorm(x, eps=LN_EPS, kind="norm1")
            with gb.scope("attn"):
                x = gb.add(x, self_attention(gb, h, heads))
            h = gb.layernorm(x, eps=LN_EPS, kind="norm2")
            with gb.scope("mlp"):
                h = gb.gelu(gb.linear(h, mlp_ratio * dim, kind="fc1"))
                h = gb.linear(h, dim, kind="fc2")
            x = gb.add(x, h)
    x = gb.gather(gb.layernorm(x, eps=LN_EPS, kind="norm"), 0, axis=1)  # class token
    gb.output(gb.gemm(x, num_classes, kind="head"))
    return gb.model(f"vit_tiny: DeiT-tiny topology, {depth} blocks, dim {dim}, {heads} heads, "
                    f"{image_size}x{image_size}; random weights (seed {seed})")

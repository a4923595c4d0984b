"""``TfIdfVectorizer`` on integer tokens: n-gram counts as compares and sums.

Spec: https://onnx.ai/onnx/operators/onnx__TfIdfVectorizer.html (opset 9). The
pool of n-grams, their output columns and the weights are attributes, so the whole
vocabulary is a compile-time constant. For every gram length ``n`` in
``[min_gram_length, max_gram_length]`` and skip ``s`` in ``[0, max_skip_count]``
(unigrams once, they have no skip), the ``n`` strided slices of the token row
``X[:, k*(s+1) : k*(s+1) + W]`` (``W`` windows) are stacked to ``[B, W, n]``,
compared with the pool's ``n``-grams ``[G, n]``, and the all-equal windows summed:
``[B, G]`` counts. A 0/1 ``[G, columns]`` matrix built from ``ngram_indexes``
scatters them to their output columns (a pool n-gram is numbered by its position
over the whole pool). Per n-gram, ``TF`` keeps the count, ``IDF`` gives its
``weight`` (1 without weights) where the count is non-zero, ``TFIDF`` ``count *
weight``: the spec's "i-th weight is the weight of the i-th n-gram in pool", which
ONNX Runtime follows (ONNX's Python reference indexes the weights by output column
instead; the two agree when ``ngram_indexes`` is the identity).
String pools need string tensors and are not supported.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ...errors import UnsupportedOperatorError
from ...exprs import static_shape
from .common import attr_str, const
from .registry import register


def pool_grams(pool: list[int], starts: list[int]) -> list[tuple[int, np.ndarray, int]]:
    """``(n, grams [G, n], first id)`` per gram length; ids count over the whole pool."""
    out, first = [], 0
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(pool)
        n = i + 1
        grams = np.asarray(pool[start:end], dtype=np.int64).reshape(-1, n)
        out.append((n, grams, first))
        first += len(grams)
    return out


@register("TfIdfVectorizer")
class TfIdfVectorizer(OnnxOpConverter):
    """Integer-token n-gram counts (see the module docstring)."""

    @classmethod
    def _impl_v9(cls, bb, inputs, attr, params):
        x = inputs[0]
        if attr.get("pool_strings"):
            raise UnsupportedOperatorError(
                "TfIdfVectorizer with pool_strings needs string tensors, which TVM lacks; "
                "map the strings to integer ids before the model and use pool_int64s")
        shape = static_shape(x)
        if shape is None or len(shape) not in (1, 2):
            raise UnsupportedOperatorError(
                f"TfIdfVectorizer needs a static [C] or [B, C] input, got shape {shape}")
        rows = x if len(shape) == 2 else relax.op.expand_dims(x, 0)
        batch, length = (shape if len(shape) == 2 else [1, shape[0]])
        rows = relax.op.astype(rows, "int64")
        lo, hi = int(attr["min_gram_length"]), int(attr["max_gram_length"])
        max_skip = int(attr.get("max_skip_count", 0))
        indexes = list(attr["ngram_indexes"])
        columns = max(indexes) + 1
        mode = attr_str(attr, "mode", "TF")
        weights = list(attr.get("weights", ()))
        counts = []
        for n, grams, first in pool_grams(list(attr["pool_int64s"]), list(attr["ngram_counts"])):
            if not lo <= n <= hi or not len(grams):
                continue
            total = None
            for skip in range(max_skip + 1 if n > 1 else 1):
                windows = length - (n - 1) * (skip + 1)
                if windows <= 0:
                    continue
                parts = [relax.op.strided_slice(rows, [1], [k * (skip + 1)],
                                                [k * (skip + 1) + windows])
                         for k in range(n)]
                stacked = relax.op.stack(parts, axis=2)  # [B, W, n]
                equal = relax.op.equal(relax.op.expand_dims(stacked, 2), const(grams))
                hits = relax.op.astype(relax.op.min(relax.op.astype(equal, "int32"), axis=3),
                                       "float32")  # [B, W, G]
                found = relax.op.sum(hits, axis=1)  # [B, G]
                total = found if total is None else relax.op.add(total, found)
            if total is None:
                continue
            total = cls._weigh(total, mode, weights[first:first + len(grams)] if weights else None)
            scatter = np.zeros((len(grams), columns), np.float32)
            scatter[np.arange(len(grams)), indexes[first:first + len(grams)]] = 1.0
            counts.append(relax.op.matmul(total, const(scatter)))
        result = relax.op.zeros([batch, columns], "float32")
        for c in counts:
            result = relax.op.add(result, c)
        if len(shape) == 1:
            result = relax.op.reshape(result, [columns])
        return result

    @staticmethod
    def _weigh(counts, mode: str, weights):
        """Per pool n-gram: TF keeps counts, IDF 0/1 (times weight), TFIDF count * weight."""
        if mode == "IDF":
            counts = relax.op.astype(relax.op.greater(counts, const(np.float32(0))), "float32")
        elif mode != "TFIDF":
            return counts
        if weights is None:
            return counts
        return relax.op.multiply(counts, const(np.asarray(weights, np.float32)))

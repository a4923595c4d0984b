"""Row locality: which dimensions of an input a kernel reads at its own output position.

DNNFusion's table (:mod:`.table`) never fuses a Many-to-Many consumer after a
One-to-Many or Many-to-Many producer: in general the consumer reads each produced
element many times, and a fused kernel would recompute it each time. The table decides
on types alone. Many real pairs are safe all the same, because the consumer reads its
producer only along its own *rows*:

- a layer norm's second ``mean`` reads ``(x - mean)^2`` at the row it writes (the
  reduction runs inside the row);
- a softmax reads the scores of a ``Q K^T`` matmul at its own row, and the ``P V``
  matmul reads the softmax at its own row;
- a 1x1 convolution after a depthwise one reads it at its own pixel (all channels).

Computed row by row, a fused kernel of such a pair computes every element of the
producer exactly once, and the row (a few KiB) stays in cache between the two. This
module finds those rows in the TIR, like :mod:`.mapping`, not by operator name:

- :func:`row_map` follows a PrimFunc's blocks from its output back to one input and
  gives ``{input dim: output dim}`` for the input dimensions every read indexes with the
  very iterator that indexes that output dimension (through intermediate buffers:
  padding, packing); extent-1 reduction iterators (a 1x1 window) count as constants;
- :func:`compose` chains such maps through the nodes of a fusion block;
- :func:`slice_bytes` is what one row of the input holds (the non-row dimensions): a
  row must fit the working-set budget for the fused kernel to keep it in cache.

The plan (:mod:`.plan`) turns a red pair into a yellow one (fuse if measured faster)
when the consumer block reads the producer block row-locally within the budget.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from .mapping import load_buffer, loads_in, param_buffer, stores_in, tir_blocks, vars_in

#: a row of the producer up to this size stays in a core's cache (L2) inside a fused kernel
ROW_BUDGET_BYTES = 128 * 1024
#: a producer's whole result up to this size is computed once at the root of a fused
#: kernel and stays in L1 for a consumer that reads all of it (a pooled vector feeding
#: the 1x1 convs of a squeeze-and-excitation block or a classifier's matmul)
WHOLE_BUDGET_BYTES = 16 * 1024


def row_map(func: tirx.PrimFunc, param_index: int) -> dict[int, int]:
    """``{dim of input param_index: dim of the output}`` for the input dimensions that
    every read of the input indexes with exactly the coordinate of that output dimension
    (empty: the input is not read row-locally, or the function has no blocks).

    Each buffer's indices are expressed in the output's coordinates, from the output
    back through the blocks (a flattened pixel ``y * W + x`` read as ``p // W`` and
    ``p % W`` comes back to ``y`` and ``x``); an index that still holds another
    iterator (a reduction, a window) is not a row dimension.
    """
    params = list(func.params)
    if param_index >= len(params) - 1:
        return {}
    source, output = param_buffer(func, params[param_index]), param_buffer(func, params[-1])
    blocks = tir_blocks(func)
    if not blocks:
        return {}
    coords = [tirx.Var(f"o{d}", "int64") for d in range(len(output.shape))]
    # buffer -> its indices in output coordinates (None where not expressible)
    exprs: list = [(output, list(coords))]
    for block in reversed(blocks):
        for store in stores_in(block.body):
            known = _lookup(exprs, store.buffer)
            if known is None:
                continue  # a buffer that does not reach the output
            analyzer = Analyzer()
            for var, extent in zip(coords, output.shape):
                analyzer.bind(var, tvm.ir.Range.from_min_extent(0, extent))
            bound = set()
            for iv in block.iter_vars:
                if isinstance(iv.dom.extent, tirx.IntImm) and int(iv.dom.extent) == 1:
                    analyzer.bind(iv.var, iv.dom.min)
                    bound.add(iv.var)
            for index, expr in zip(store.indices, known):
                if isinstance(index, tirx.Var) and expr is not None and index not in bound:
                    analyzer.bind(index, expr)
                    bound.add(index)
            for load in loads_in(store.value):
                found = [_in_coords(analyzer.simplify(i), coords) for i in load.indices]
                _merge(exprs, load_buffer(load), found)
    found = _lookup(exprs, source) or []
    return {f: d for f, expr in enumerate(found) for d, c in enumerate(coords)
            if expr is not None and expr.same_as(c)}


def _in_coords(expr, coords: list):
    """``expr`` if it depends on the output coordinates only, else ``None``."""
    return expr if vars_in(expr) <= set(coords) else None


def _same_buffer(a, b) -> bool:
    return a.same_as(b) or a.data.same_as(b.data)


def _lookup(exprs: list, buf):
    for key, value in exprs:
        if _same_buffer(key, buf):
            return value
    return None


def _merge(exprs: list, buf, found: list) -> None:
    """Keep, for ``buf``, only the indices every read agrees on."""
    for i, (key, value) in enumerate(exprs):
        if _same_buffer(key, buf):
            exprs[i] = (key, [a if a is not None and b is not None
                              and tvm_ffi.structural_equal(a, b) else None
                              for a, b in zip(value, found)])
            return
    exprs.append((buf, found))


def compose(outer: dict[int, int], inner: dict[int, int]) -> dict[int, int]:
    """``inner`` (source dim -> middle dim) followed by ``outer`` (middle dim -> final
    dim): source dim -> final dim, where both are defined."""
    return {s: outer[m] for s, m in inner.items() if m in outer}


def intersect(first: dict | None, second: dict) -> dict:
    """The dims two paths agree on (``first`` ``None``: no path yet)."""
    if first is None:
        return dict(second)
    return {s: d for s, d in first.items() if second.get(s) == d}


def slice_bytes(shape, dtype: str, rows: dict[int, int]) -> int | None:
    """Bytes of one row: the dims not in ``rows`` (``None`` if one is symbolic)."""
    if shape is None:
        return None
    rest = [int(d) for i, d in enumerate(shape) if i not in rows]
    return int(np.prod(rest, dtype=np.int64)) * np.dtype(dtype).itemsize

"""DNNFusion's mapping types, derived from an operator's TIR (seed 004, §3.2; 001 §2.2).

DNNFusion classifies every operator by how its output elements map to its input
elements: One-to-One (element-wise), One-to-Many (broadcast, gather, resize),
Many-to-Many (convolution, matmul, pooling, reductions), Reorganize (reshape: the
same elements in the same order, another shape) and Shuffle (transpose, depth-to-space:
the same elements, another order). The fusion table and plan (:mod:`.table`) work on
these types.

Here the type comes from the legalized PrimFunc, not from the operator's name, so our
own TOPI computes and any new operator classify themselves:

- a block with a reduction iterator is Many-to-Many;
- otherwise each buffer read of a block is compared with the block's write, using the
  block's iteration domain: an index that depends on loaded data (a gather), or an
  output dimension the read does not depend on (a broadcast), or a read map that is
  not injective (a resize) makes it One-to-Many; reads whose every index is the write's
  index at the same position, shifted or strided (identity, slice, pad, concat), are
  One-to-One; a bijective read map (``tvm.sym.detect_iter_map``) that keeps the
  row-major element order is Reorganize, one that changes it Shuffle;
- a function takes the most complex type of its blocks, and a block that of its reads,
  in DNNFusion's order One-to-One < Reorganize < Shuffle < One-to-Many < Many-to-Many.

:data:`OP_NAME_TYPES` is the thesis' table by operator name, kept only as a
cross-check (:func:`name_type`); the tests show where the two disagree and why.
"""

from __future__ import annotations

import enum
import logging

import numpy as np
import tvm
from tvm import tirx
from tvm.sym import Analyzer
from tvm.sym.iter_affine_map import detect_iter_map
from tvm_ffi import Object

log = logging.getLogger(__name__)

#: block iterator kinds (``IterVar.iter_type``)
_DATA_PAR, _REDUCE = 0, 2


class MappingType(enum.IntEnum):
    """DNNFusion's mapping types, in its order of complexity (a fused or multi-input
    operator takes the largest of its parts)."""

    ONE_TO_ONE = 0
    REORGANIZE = 1
    SHUFFLE = 2
    ONE_TO_MANY = 3
    MANY_TO_MANY = 4

    @property
    def short(self) -> str:
        """The thesis' abbreviation: ``1-1``, ``Reorg``, ``Shuffle``, ``1-M``, ``M-M``."""
        return {0: "1-1", 1: "Reorg", 2: "Shuffle", 3: "1-M", 4: "M-M"}[int(self)]


#: The thesis' examples by operator (ONNX names; DIGEST.md), as a cross-check only.
OP_NAME_TYPES = {
    **{op: MappingType.ONE_TO_ONE for op in (
        "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Cast",
        "BatchNormalization", "Clip", "Concat", "Slice", "Split", "HardSigmoid", "HardSwish",
        "LeakyRelu", "Neg", "Abs", "Pad", "Erf", "Pow")},
    **{op: MappingType.ONE_TO_MANY for op in ("Expand", "Gather", "Resize", "Upsample")},
    **{op: MappingType.MANY_TO_MANY for op in (
        "Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool",
        "GlobalAveragePool", "ReduceMean", "ReduceSum", "ReduceMax", "Softmax",
        "InstanceNormalization", "LayerNormalization")},
    **{op: MappingType.REORGANIZE for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze")},
    **{op: MappingType.SHUFFLE for op in ("Transpose", "DepthToSpace", "SpaceToDepth")},
}


def name_type(op_type: str) -> MappingType | None:
    """The thesis' mapping type of ONNX operator ``op_type`` (``None`` if it lists none)."""
    return OP_NAME_TYPES.get(op_type)


# ------------------------------------------------------------------------ TIR walking

_EXPR_FIELDS = ("a", "b", "value", "args", "indices", "condition", "true_value",
                "false_value", "base", "stride", "body", "vectors")


def _children(node) -> list:
    out = []
    for field in _EXPR_FIELDS:
        child = getattr(node, field, None)
        if child is None:
            continue
        if isinstance(child, Object):
            if type(child).__name__ in ("Array", "List"):
                out.extend(c for c in child if isinstance(c, Object))
            else:
                out.append(child)
        elif isinstance(child, (list, tuple)):
            out.extend(c for c in child if isinstance(c, Object))
    return out


def _is_load(node) -> bool:
    return type(node).__name__ in ("BufferLoad", "TensorLoad")


def load_buffer(load):
    """The buffer a load reads (``TensorLoad.source`` in TVM 0.27, ``BufferLoad.buffer`` before)."""
    return getattr(load, "buffer", None) or load.source


def param_buffer(func: tirx.PrimFunc, param):
    """A parameter's buffer (TVM 0.27 PrimFuncs take buffers; older ones, handles)."""
    return param if hasattr(param, "shape") else func.buffer_map[param]


def loads_in(expr) -> list:
    """Every buffer load in ``expr``, outermost first (loads inside indices included)."""
    found, stack = [], [expr]
    while stack:
        node = stack.pop()
        if _is_load(node):
            found.append(node)
        stack.extend(reversed(_children(node)))
    return found


def vars_in(expr) -> set:
    found, stack = set(), [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, tirx.Var):
            found.add(node)
        stack.extend(_children(node))
    return found


def tir_blocks(func: tirx.PrimFunc) -> list:
    """The non-root blocks of ``func``."""
    found, stack = [], [func.body]
    while stack:
        stmt = stack.pop()
        kind = type(stmt).__name__
        if kind == "SBlockRealize":
            stack.append(stmt.block)
            continue
        if kind == "SBlock" and stmt.name_hint != "root":
            found.append(stmt)
            continue
        if kind == "SeqStmt":
            stack.extend(reversed(list(stmt.seq)))
            continue
        for field in ("body", "then_case", "else_case", "block"):
            child = getattr(stmt, field, None)
            if isinstance(child, tirx.Stmt):
                stack.append(child)
    return found


def stores_in(stmt) -> list:
    found, stack = [], [stmt]
    while stack:
        node = stack.pop()
        kind = type(node).__name__
        if kind in ("BufferStore", "TensorStore"):
            found.append(node)
        elif kind == "SeqStmt":
            stack.extend(node.seq)
        else:
            for field in ("body", "then_case", "else_case"):
                child = getattr(node, field, None)
                if isinstance(child, tirx.Stmt):
                    stack.append(child)
    return found


# ------------------------------------------------------------------- classification

#: iteration domains up to this many points are enumerated exactly (numpy); larger ones
#: are decided symbolically (``detect_iter_map``), which may call a bijection 1-M
MAX_ENUMERATED = 1 << 22

_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide,
    "FloorMod": np.mod, "Min": np.minimum, "Max": np.maximum,
    "Div": lambda a, b: np.trunc(a / b).astype(np.int64),
    "Mod": lambda a, b: np.fmod(a, b),
}


class _NotIndexArithmetic(Exception):
    """An index expression the evaluator does not follow (it stays symbolic)."""


def _evaluate(expr, env: dict):
    """``expr`` (integer index arithmetic of block variables) on numpy arrays ``env``."""
    if isinstance(expr, tirx.Var):
        if expr not in env:
            raise _NotIndexArithmetic(f"free variable {expr}")
        return env[expr]
    if isinstance(expr, tirx.IntImm):
        return np.int64(int(expr.value))
    kind = type(expr).__name__
    if kind in _BINARY:
        return _BINARY[kind](_evaluate(expr.a, env), _evaluate(expr.b, env))
    if kind == "Cast":
        return _evaluate(expr.value, env)
    raise _NotIndexArithmetic(kind)


#: the value a symbolic extent (a dynamic batch, sequence or width) takes when the
#: read maps are enumerated: the type of an operator does not depend on it
SYMBOLIC_PROBE = 5


def _domain(dom: dict, exprs: list):
    """``({var: flat array over every point of the box dom}, {var: its own range})``,
    symbolic extents (and any other free variable of ``exprs``) set to
    :data:`SYMBOLIC_PROBE`; ``None`` when the box has more than :data:`MAX_ENUMERATED`
    points."""
    free = set()
    for e in [*exprs, *(r.min for r in dom.values()), *(r.extent for r in dom.values())]:
        free |= vars_in(e)
    env = {v: np.int64(SYMBOLIC_PROBE) for v in free if v not in dom}
    bounds = [(int(_evaluate(r.min, env)), int(_evaluate(r.extent, env))) for r in dom.values()]
    if int(np.prod([e for _, e in bounds], dtype=np.int64)) > MAX_ENUMERATED:
        return None
    grids = np.indices([e for _, e in bounds], dtype=np.int64).reshape(len(bounds), -1)
    points = {v: grids[i] + lo for i, (v, (lo, _)) in enumerate(zip(dom, bounds))}
    ranges = {v: np.arange(lo, lo + e, dtype=np.int64) for v, (lo, e) in zip(dom, bounds)}
    return {**env, **points}, {**env, **ranges}


def _linear_np(indices: list, shape, points: dict) -> np.ndarray:
    offset, stride = 0, 1
    for idx, dim in reversed(list(zip(indices, shape))):
        offset = offset + np.asarray(idx, dtype=np.int64) * stride
        stride = stride * int(_evaluate(dim, points))
    return offset


def _same_position(indices, write_idx, ranges: dict) -> bool:
    """Each read index is the write index at its position, shifted and/or strided
    (``w``, ``w + c``, ``s * w + c``): identity, slice, pad, concat."""
    if len(indices) != len(write_idx):
        return False
    for r, w in zip(indices, write_idx):
        if isinstance(w, tirx.IntImm):
            if not isinstance(r, tirx.IntImm):
                return False
            continue
        if not isinstance(w, tirx.Var) or vars_in(r) - {w}:
            return False
        # r depends on w alone: evaluate it along w's range
        steps = np.diff(np.broadcast_to(_evaluate(r, ranges), ranges[w].shape))
        if steps.size and not (np.all(steps == steps[0]) and steps[0] > 0):
            return False
    return True


def _read_type(load, write_idx, write_shape, dom: dict, analyzer: Analyzer) -> MappingType:
    indices = list(load.indices)
    if any(loads_in(i) for i in indices):
        return MappingType.ONE_TO_MANY  # gather: the index is data
    spatial = {v for v, r in dom.items() if not (isinstance(r.extent, tirx.IntImm)
                                                   and int(r.extent) == 1)}
    used = set().union(*(vars_in(i) for i in indices)) if indices else set()
    if spatial - used:
        return MappingType.ONE_TO_MANY  # an output dimension the read ignores: broadcast
    shapes = [*load_buffer(load).shape, *write_shape]
    try:
        domain = _domain(dom, [*indices, *write_idx, *shapes])
        if domain is not None:
            return _enumerated_type(indices, load_buffer(load).shape, write_idx, write_shape,
                                    *domain)
    except _NotIndexArithmetic as err:
        log.debug("index map not enumerated (%s): decided symbolically", err)
    return _symbolic_type(indices, load_buffer(load).shape, write_idx, write_shape, dom, analyzer)


def _enumerated_type(indices, read_shape, write_idx, write_shape, points,
                     ranges) -> MappingType:
    """The read map evaluated at every point of the block's domain: exact."""
    if _same_position(indices, write_idx, ranges):
        return MappingType.ONE_TO_ONE
    n = max(np.size(v) for v in points.values())
    read = np.broadcast_to(
        _linear_np([_evaluate(i, points) for i in indices], read_shape, points), (n,))
    write = np.broadcast_to(
        _linear_np([_evaluate(i, points) for i in write_idx], write_shape, points), (n,))
    order = slice(None) if np.all(np.diff(write) > 0) else np.argsort(write, kind="stable")
    if np.all(np.diff(read[order]) > 0):
        return MappingType.REORGANIZE  # injective, in the same row-major order: a reshape
    if not np.all(np.diff(np.sort(read)) > 0):
        return MappingType.ONE_TO_MANY  # not injective: several outputs read one input
    return MappingType.SHUFFLE


def _symbolic_type(indices, read_shape, write_idx, write_shape, dom, analyzer) -> MappingType:
    """For domains too large (or symbolic) to enumerate: ``detect_iter_map``."""
    iters = {v: tvm.ir.Range.from_min_extent(r.min, r.extent) for v, r in dom.items()}
    if all(isinstance(r, tirx.Var) and r.same_as(w) for r, w in zip(indices, write_idx)) \
            and len(indices) == len(write_idx):
        return MappingType.ONE_TO_ONE
    mapped = detect_iter_map(indices, iters, check_level="bijective", analyzer=analyzer)
    if len(mapped.indices) == 0:
        return MappingType.ONE_TO_MANY
    same_order = analyzer.can_prove_equal(_linear(indices, read_shape, analyzer),
                                          _linear(write_idx, write_shape, analyzer))
    return MappingType.REORGANIZE if same_order else MappingType.SHUFFLE


def _linear(indices, shape, analyzer: Analyzer):
    """Row-major offset of ``indices`` in a buffer of ``shape``, symbolically."""
    offset, stride = tirx.const(0, "int64"), tirx.const(1, "int64")
    for idx, dim in reversed(list(zip(indices, shape))):
        offset = offset + tirx.Cast("int64", idx) * stride
        stride = stride * tirx.Cast("int64", dim)
    return analyzer.simplify(offset)


def block_type(block, constants: tuple = ()) -> MappingType:
    """The mapping type of one TIR block (see the module docstring); reads of the
    buffers in ``constants`` (a model's parameters) do not count."""
    if any(int(iv.iter_type) == _REDUCE for iv in block.iter_vars):
        return MappingType.MANY_TO_MANY
    if any(int(iv.iter_type) != _DATA_PAR for iv in block.iter_vars):
        return MappingType.MANY_TO_MANY  # opaque or ordered iterators: no element map
    if not block.iter_vars:
        return MappingType.MANY_TO_MANY  # an opaque block (hand-written loops): no element map
    dom = {iv.var: iv.dom for iv in block.iter_vars}
    analyzer = Analyzer()
    for var, rng in dom.items():
        analyzer.bind(var, tvm.ir.Range.from_min_extent(rng.min, rng.extent))
    kind = MappingType.ONE_TO_ONE
    for store in stores_in(block.body):
        write_idx, write_shape = list(store.indices), list(store.buffer.shape)
        for load in loads_in(store.value):
            if any(load_buffer(load).same_as(c) for c in constants):
                continue
            kind = max(kind, _read_type(load, write_idx, write_shape, dom, analyzer))
    return kind


def classify(func: tirx.PrimFunc, constant_params: tuple = ()) -> MappingType | None:
    """The mapping type of a PrimFunc: the most complex of its blocks' (``None`` for a
    function with no block, e.g. an extern call, which DNNFusion cannot look into).

    ``constant_params``: positions of parameters a model passes constants to (weights,
    a bias, batch-norm statistics). As in the thesis, where a bias add or a batch norm
    is One-to-One, only the data's element map counts: reading a per-channel constant
    for many outputs does not make the operator One-to-Many.
    """
    if func.attrs is not None and bool(func.attrs.get("tirx.is_scheduled", False)):
        # written as it runs (the recurrent loop kernel): a whole computation, not an
        # element map to fuse with its neighbours
        return MappingType.MANY_TO_MANY
    blocks = tir_blocks(func)
    if not blocks:
        return None
    constants = tuple(func.params[i] for i in constant_params)
    return max(block_type(b, constants) for b in blocks)

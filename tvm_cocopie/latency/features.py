"""Features of a scheduled kernel: what the latency model reads instead of running it.

:func:`kernel_features` turns one scheduled PrimFunc (as the ``schedule`` stage of the
cocopie pipeline leaves it, or a point of a design space) into a fixed-length vector,
named by :data:`FEATURE_NAMES`:

* MetaSchedule's per-store features (``PerStoreFeature``: 164 per buffer store, the
  arithmetic per kind, the access pattern and reuse per buffer, the loop structure
  around the store), summarized over the kernel's stores by their mean and maximum and
  the row of the main store, so that kernels with any number of stores compare;
* what that extractor leaves out (:func:`loop_features`): the arithmetic of the whole
  kernel (floating-point operations times the iterations around them), the bytes it
  reads and writes through its parameters and the bytes of its intermediate buffers per
  storage scope, the loop structure after tiling (parallel extent, vector width,
  unrolled body, serial iterations around the innermost block, depth, how evenly the
  parallel iterations fill the cores, the work and bytes of one parallel task), the
  arithmetic intensity; and the operations that execute once compiled
  (:class:`_ExecutedOps`: hoisted out of the loops they do not depend on, repeated
  subexpressions once, constants folded), which the loop nest's count overstates up to
  100x (EfficientNet's squeeze-excite kernels: 54 million operations written, half a
  million run; a Winograd transform's constant matrices picked by ``select``);
* the kernel's class (:func:`class_features`): counts of the operator families its
  blocks compute (convolution, depthwise, Winograd, matmul, pooling, reductions, ...),
  read from block names and the ``cocopie.*`` annotations our rules leave;
* the machine: cores and single-precision vector lanes of the target;
* the context of the measurement: ``standalone`` 1 for a kernel timed alone with its
  caches flushed (design-space samples, fusion candidates), 0 for its time inside a
  whole model (:data:`IN_MODEL`, :data:`STANDALONE`).

Symbolic extents have no value at compile time: :func:`loop_features` takes their
values (``dims``, ``{var name: value}``); :func:`kernel_features` (MetaSchedule's
extractor needs concrete shapes) refuses a symbolic kernel with a clear error.
"""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from ..errors import CocopieError
from ..metaschedule import tune_context
from ..target import cpu_info, parse_target

#: Bumped whenever the features change: a model trained on other features is refused.
FEATURE_VERSION = 3  # 2: the dominant store's row; parallel balance, work per task;
# 3: the operations that execute (hoisted, common subexpressions once, constants folded)

#: Values of the ``standalone`` feature
IN_MODEL, STANDALONE = 0.0, 1.0

_MS_WIDTH = 164  # PerStoreFeature without the workload embedding
_CLASSES = (
    ("conv", ("conv",)),
    ("depthwise", ("depthwise", "dw_")),
    ("winograd", ("winograd", "wino")),
    ("pattern", ("pattern", "fkw")),
    ("grouped", ("group", "gspc")),
    ("matmul", ("matmul", "dense", "gemm", "packed")),
    ("pool", ("pool",)),
    ("reduce", ("sum", "mean", "max_red", "reduce", "red_")),
    ("softmax", ("softmax",)),
    ("norm", ("norm",)),
    ("layout", ("layout", "transpose", "pack", "unpack")),
    ("concat", ("concat",)),
    ("resize", ("resize", "upsampl")),
    ("gather", ("take", "gather", "index")),
    ("transcendental", ("exp", "tanh", "sigmoid", "erf", "log", "sqrt")),
    ("elementwise", ("add", "multiply", "subtract", "divide", "maximum", "minimum", "relu",
                     "clip", "cast", "compute")),
    ("recurrent", ("lstm", "gru", "rnn", "recurr")),
)
_LOOP_NAMES = (
    "flops_log2", "float_ops_per_iter", "iterations_log2", "input_bytes_log2",
    "output_bytes_log2", "io_bytes_log2", "global_scratch_bytes_log2",
    "local_bytes_log2", "intensity_log2", "parallel_extent", "parallel_extent_log2",
    "vector_lanes", "unrolled_log2", "serial_inner_log2", "loop_depth", "loops",
    "blocks", "params", "reduction_blocks", "stores", "if_branches",
    "parallel_balance", "flops_per_task_log2", "bytes_per_task_log2",
    "exec_flops_log2", "exec_intensity_log2",
)
_MACHINE_NAMES = ("cores", "f32_lanes")


_MS_SUMMARIES = ("mean", "max", "main")


def _ms_names() -> list[str]:
    return [f"ms_{agg}_{i}" for agg in _MS_SUMMARIES for i in range(_MS_WIDTH)]


#: The names of :func:`kernel_features`' vector, in order
FEATURE_NAMES: tuple[str, ...] = (
    *_ms_names(), *_LOOP_NAMES, *(f"class_{name}" for name, _ in _CLASSES),
    *_MACHINE_NAMES, "standalone")


def feature_schema() -> str:
    """A short digest of the feature layout (version and names): stored with data and
    models, compared when either is read."""
    text = f"{FEATURE_VERSION}:" + ",".join(FEATURE_NAMES)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class FeatureError(CocopieError):
    """A kernel whose features cannot be computed (a symbolic extent with no value)."""


def _log2(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _int(expr, dims: dict, what: str, loops: dict | None = None) -> int:
    """The integer value of ``expr`` (an extent or a buffer dim) under ``dims``; an
    extent that depends on enclosing loop variables (``loops``: ``{var: extent}``, a
    tile clamped at the edge) is taken at its largest."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tvm.tirx.IntImm):
        return int(expr.value)
    analyzer = tvm.sym.Analyzer()
    free = []
    for var in tvm.tirx.analysis.undefined_vars(expr, []):
        if var.name in dims:
            analyzer.bind(var, tvm.tirx.const(int(dims[var.name]), _dtype(var)))
        elif loops and var in loops:
            analyzer.bind(var, tvm.ir.Range(0, loops[var]))
        else:
            free.append(var)
    value = analyzer.simplify(expr)
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    if not free:
        bound = analyzer.const_int_bound(value)
        if bound.max_value < (1 << 62):
            return int(bound.max_value)
    raise FeatureError(
        f"{what} {expr} is symbolic: give its dims a value (dims={{name: size}}, "
        "or compile the model at concrete input shapes) to predict its latency")


_FLOAT_OPS = {"Add", "Sub", "Mul", "Div", "FloorDiv", "Max", "Min", "Call", "Select"}


_LOADS = ("BufferLoad", "TensorLoad")  # TVM 0.27 names a buffer load TensorLoad


def _operands(node) -> list:
    """The subexpressions of a TIR expression: a load's indices, an operation's
    operands, a call's arguments."""
    if type(node).__name__ in _LOADS:
        return list(node.indices)
    out = []
    for name in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(node, name, None)
        if isinstance(child, tvm.ir.expr.Expr):
            out.append(child)
    args = getattr(node, "args", None)
    if args is not None:
        out.extend(a for a in args if isinstance(a, tvm.ir.expr.Expr))
    return out


def _float_ops(expr) -> int:
    """Floating-point operations in ``expr`` (a store's value)."""
    count, stack = 0, [expr]
    while stack:
        node = stack.pop()
        if type(node).__name__ in _FLOAT_OPS and _dtype(node).startswith("float"):
            count += 1
        stack.extend(_operands(node))
    return count


class _ExecutedOps:
    """The floating-point operations of one store's value that execute once compiled:
    each distinct subexpression counted once (LLVM merges the copies an inlined
    activation repeats: a fast sigmoid spells its clamped input out 20 times), at the
    iterations of the loops it depends on (a value that does not change over an inner
    serial loop is computed outside it, as an squeeze-excite's sigmoid per channel over
    a whole map), a subexpression of constants and unrolled loop variables only not
    at all (folded: a Winograd transform's matrix entries picked by ``select``).

    ``stack``: the enclosing loops ``(kind, extent)``, outermost first; ``deps``:
    ``{loop or block variable: positions in stack it depends on}``."""

    def __init__(self, stack: list, deps: dict):
        self.stack, self.deps = stack, deps
        self.seen: dict = {}
        self.total = 0.0

    def iterations(self, positions: frozenset, loads: bool) -> float:
        unrolled = int(tvm.tirx.ForKind.UNROLLED)
        vectorized = int(tvm.tirx.ForKind.VECTORIZED)
        if not loads and all(self.stack[p][0] == unrolled for p in positions):
            return 0.0
        serial = [p for p in positions if self.stack[p][0] != vectorized]
        deepest = max(serial, default=-1)
        n = 1.0
        for p, (kind, extent) in enumerate(self.stack):
            if p <= deepest or (kind == vectorized and p in positions):
                n *= extent
        return n

    def visit(self, node) -> tuple[frozenset, bool]:
        """``(loop positions node depends on, whether it loads)``; adds its ops."""
        key = None
        if isinstance(node, tvm.ir.expr.Expr) and not isinstance(
                node, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
            key = tvm_ffi.structural_hash(node)
            if key in self.seen:
                return self.seen[key]
        kind = type(node).__name__
        if isinstance(node, tvm.tirx.Var):
            found = (self.deps.get(node, frozenset()), False)
        else:
            positions: set = set()
            loads = kind in _LOADS
            for child in _operands(node):
                p, c = self.visit(child)
                positions |= p
                loads = loads or c
            found = (frozenset(positions), loads)
            if kind in _FLOAT_OPS and _dtype(node).startswith("float"):
                self.total += self.iterations(*found)
        if key is not None:
            self.seen[key] = found
        return found


def _dtype(expr) -> str:
    """The dtype of a TIR expression (TVM 0.27 keeps it as the expression's ``ty``)."""
    ty = getattr(expr, "ty", None)
    return str(ty if ty is not None else getattr(expr, "dtype", ""))


def _buffer_bytes(buf, dims: dict, what: str) -> int:
    n = 1
    for d in buf.shape:
        n *= _int(d, dims, what)
    return n * max(1, tvm.runtime.DataType(str(buf.dtype)).bits // 8)


class _Walk:
    """One pass over a kernel's body, the loop stack kept."""

    def __init__(self, dims: dict):
        self.dims = dims
        self.flops = 0.0
        self.iterations = 0.0
        self.ops_per_iter = 0
        self.parallel = 1
        self.lanes = 1
        self.unrolled = 1
        self.serial_inner = 1.0
        self.depth = 0
        self.loops = 0
        self.blocks = 0
        self.reduction_blocks = 0
        self.stores = 0
        self.branches = 0
        self.scopes: dict[str, int] = {}
        self.names: list[str] = []
        self.loop_vars: dict = {}  # enclosing loop variable -> extent
        self.exec_flops = 0.0
        self.deps: dict = {}  # loop / block variable -> positions of the loops it follows

    def _depends(self, expr) -> frozenset:
        """The loop positions ``expr`` (a block variable's binding) depends on."""
        out: set = set()
        for var in tvm.tirx.analysis.undefined_vars(expr, []):
            out |= self.deps.get(var, frozenset())
        return frozenset(out)

    def visit(self, stmt, stack: list) -> None:
        kind = type(stmt).__name__
        if kind == "For":
            extent = _int(stmt.extent, self.dims, f"loop {stmt.loop_var.name}'s extent",
                          self.loop_vars)
            self.loops += 1
            self.loop_vars[stmt.loop_var] = max(1, extent)
            self.deps[stmt.loop_var] = frozenset([len(stack)])
            self.visit(stmt.body, [*stack, (int(stmt.kind), extent)])
            del self.loop_vars[stmt.loop_var]
        elif kind == "SeqStmt":
            for s in stmt.seq:
                self.visit(s, stack)
        elif kind == "SBlockRealize":
            for iv, value in zip(stmt.block.iter_vars, stmt.iter_values):
                self.deps[iv.var] = self._depends(value)
            self.visit(stmt.block, stack)
        elif kind == "SBlock":
            self.blocks += 1
            self.names.append(str(stmt.name_hint))
            self.names.extend(str(k) for k in stmt.annotations)
            if any(int(iv.iter_type) == 2 for iv in stmt.iter_vars):  # CommReduce
                self.reduction_blocks += 1
            for buf in stmt.alloc_buffers:
                scope = str(buf.scope())
                self.scopes[scope] = self.scopes.get(scope, 0) + _buffer_bytes(
                    buf, self.dims, f"buffer {buf.name}'s shape")
            if stmt.init is not None:
                self.visit(stmt.init, stack)
            self.visit(stmt.body, stack)
        elif kind == "BufferStore":
            self.stores += 1
            iters = 1.0
            for _, extent in stack:
                iters *= extent
            ops = _float_ops(stmt.value)
            self.flops += ops * iters
            executed = _ExecutedOps(stack, self.deps)
            executed.visit(stmt.value)
            self.exec_flops += executed.total
            self.ops_per_iter = max(self.ops_per_iter, ops)
            self.iterations += iters
            self.depth = max(self.depth, len(stack))
            par = 1
            inner = 1.0
            for loop_kind, extent in stack:
                if loop_kind == int(tvm.tirx.ForKind.PARALLEL):
                    par *= extent
            self.parallel = max(self.parallel, par)
            for loop_kind, extent in reversed(stack):
                if loop_kind == int(tvm.tirx.ForKind.VECTORIZED):
                    self.lanes = max(self.lanes, extent)
                elif loop_kind == int(tvm.tirx.ForKind.UNROLLED):
                    self.unrolled = max(self.unrolled, extent)
                elif loop_kind == int(tvm.tirx.ForKind.PARALLEL):
                    break
                else:
                    inner *= extent
            self.serial_inner = max(self.serial_inner, inner)
        elif kind == "IfThenElse":
            self.branches += 1
            self.visit(stmt.then_case, stack)
            if stmt.else_case is not None:
                self.visit(stmt.else_case, stack)
        elif hasattr(stmt, "body"):
            if kind in ("Allocate", "DeclBuffer") and hasattr(stmt, "buffer"):
                buf = stmt.buffer
                scope = str(buf.scope())
                self.scopes[scope] = self.scopes.get(scope, 0) + _buffer_bytes(
                    buf, self.dims, f"buffer {buf.name}'s shape")
            self.visit(stmt.body, stack)


def loop_features(func: tvm.tirx.PrimFunc, dims: dict | None = None, cores: int = 1
                  ) -> tuple[list, list]:
    """The loop, arithmetic and memory features of ``func`` (:data:`FEATURE_NAMES`
    from ``flops_log2`` on) on ``cores`` cores, and the names its blocks and
    annotations carry."""
    dims = dict(dims or {})
    walk = _Walk(dims)
    walk.visit(func.body, [])
    buffers = [p for p in func.params if hasattr(p, "shape")]  # TVM 0.27: buffer params
    sizes = [_buffer_bytes(b, dims, f"parameter {b.name}'s shape") for b in buffers]
    out_bytes = sizes[-1] if sizes else 0
    in_bytes = sum(sizes[:-1])
    io = in_bytes + out_bytes
    scratch = sum(v for k, v in walk.scopes.items() if k in ("global", ""))
    local = sum(v for k, v in walk.scopes.items() if k not in ("global", ""))
    values = [
        _log2(walk.flops), float(walk.ops_per_iter), _log2(walk.iterations),
        _log2(in_bytes), _log2(out_bytes), _log2(io), _log2(scratch), _log2(local),
        math.log2((walk.flops + 1.0) / (io + 1.0)), float(walk.parallel),
        _log2(walk.parallel), float(walk.lanes), _log2(walk.unrolled),
        _log2(walk.serial_inner), float(walk.depth), float(walk.loops),
        float(walk.blocks), float(len(buffers)), float(walk.reduction_blocks),
        float(walk.stores), float(walk.branches)]
    # how evenly the parallel loop's iterations fill the cores, and the work of one
    cores = max(1, int(cores or 1))
    par = max(1, walk.parallel)
    values += [par / (math.ceil(par / cores) * cores), _log2(walk.flops / par),
               _log2(io / par), _log2(walk.exec_flops),
               math.log2((walk.exec_flops + 1.0) / (io + 1.0))]
    return values, walk.names


def class_features(names: list[str]) -> list[float]:
    """Counts of each operator family of :data:`_CLASSES` among block names."""
    lowered = [re.sub(r"\d+", "", n.lower()) for n in names]
    return [float(sum(any(key in n for key in keys) for n in lowered)) for _, keys in _CLASSES]


def ms_features(func: tvm.tirx.PrimFunc, target) -> list[float]:
    """MetaSchedule's per-store features of ``func``: mean and maximum over its stores,
    and the row of its main store (the most floating-point multiply-adds, adds and
    multiplies); zeros for a kernel without a store MetaSchedule sees."""
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    context = tune_context(mod, target, None)
    candidate = ms.MeasureCandidate(tvm.s_tir.Schedule(mod),
                                    ms.arg_info.ArgInfo.from_prim_func(func))
    table = ms.feature_extractor.PerStoreFeature(extract_workload=False).extract_from(
        context, [candidate])[0].numpy()
    if table.size == 0:
        return [0.0] * (len(_MS_SUMMARIES) * _MS_WIDTH)
    table = table[:, :_MS_WIDTH]
    main = table[int(np.argmax(table[:, :3].sum(axis=1)))]  # float mad, add/sub, mul
    return [*table.mean(axis=0).tolist(), *table.max(axis=0).tolist(), *main.tolist()]


def kernel_features(func: tvm.tirx.PrimFunc, target=None, standalone: bool = False
                    ) -> np.ndarray:
    """The feature vector (:data:`FEATURE_NAMES`) of the scheduled kernel ``func`` on
    ``target`` (a JSON dict, a Target, ``None``: this host). ``standalone``: the
    latency to predict is of the kernel timed alone, caches flushed (else: inside a
    model). A kernel with a symbolic shape is refused (:class:`FeatureError`): compile
    the model at concrete shapes to predict it."""
    target = parse_target(target)
    info = cpu_info(target)
    loops, names = loop_features(func, cores=info.num_cores)
    machine = [float(info.num_cores), float(info.f32_lanes)]
    vector = [*ms_features(func, target), *loops, *class_features(names), *machine,
              STANDALONE if standalone else IN_MODEL]
    return np.asarray(vector, dtype=np.float32)

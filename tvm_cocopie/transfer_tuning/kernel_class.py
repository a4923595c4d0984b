"""Kernel classes (thesis §6.2.2, Table 6.2).

A *kernel* is one fused PrimFunc given to the auto-scheduler; a *kernel class* is
the set of kernels computing the same sequence of operations whatever their shapes
(e.g. pad → conv2d → add → relu). Schedules only transfer within a class.

:func:`class_key` is a structural key that ignores shapes: for every block, in
program order, its op name (without numeric suffixes), its iterator kinds
(spatial/reduction), the depth of its loop nest, whether it has an init, and the
skeleton of the value it stores (operators and calls, with every load and constant a
leaf). :func:`extract_kernels` takes a model's kernels from the cocopie pipeline up
to the fusion stage; :func:`class_report` gives the per-model table of §6.2.4
(classes, kernel counts, share of untuned time).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field

import tvm

from ..frontend.importer import from_onnx
from ..pipeline import run_until
from ..target import parse_target

log = logging.getLogger(__name__)

_SUFFIX = re.compile(r"(_\d+|\d+)$")
_VAR_PREFIX = re.compile(r"^lv\d*_")
_LEAVES = {"BufferLoad": "load", "IntImm": "c", "FloatImm": "c", "Var": "v", "StringImm": "s"}
_CHILDREN = ("a", "b", "value", "condition", "true_value", "false_value", "args")


def _op_name(name: str) -> str:
    name = _VAR_PREFIX.sub("", name)
    prev = None
    while prev != name:
        prev, name = name, _SUFFIX.sub("", name)
    return name or prev


def _expr_skeleton(expr) -> str:
    kind = type(expr).__name__
    if kind in _LEAVES:
        return _LEAVES[kind]
    if kind == "Call":
        parts = [_expr_skeleton(a) for a in expr.args]
        return f"{getattr(expr.op, 'name', 'call')}({','.join(parts)})"
    parts = []
    for attr in _CHILDREN:
        child = getattr(expr, attr, None)
        if child is None or attr == "args":
            continue
        if isinstance(child, tvm.ir.expr.Expr):
            parts.append(_expr_skeleton(child))
    return f"{kind}({','.join(parts)})" if parts else kind


@dataclass
class BlockInfo:
    """One block of a kernel as its class sees it: op name, iterator kinds, loop depth, whether it
    has an init, its value's shape-free skeleton."""
    name: str
    iter_kinds: str
    depth: int
    has_init: bool
    value: str

    def key(self) -> str:
        """The block's part of a class key."""
        return f"{_op_name(self.name)}[{self.iter_kinds}|d{self.depth}|{'i' if self.has_init else ''}]={self.value}"


def blocks_of(func: tvm.tirx.PrimFunc) -> list[BlockInfo]:
    """The blocks of ``func`` in program order (the root block excluded)."""
    found: list[BlockInfo] = []

    def visit(stmt, depth):
        kind = type(stmt).__name__
        if kind == "SBlockRealize":
            visit(stmt.block, depth)
        elif kind == "SBlock":
            if stmt.name_hint != "root":
                kinds = "".join("R" if int(iv.iter_type) == 2 else "S" for iv in stmt.iter_vars)
                body = stmt.body
                value = _expr_skeleton(body.value) if type(body).__name__ == "BufferStore" else type(body).__name__
                found.append(BlockInfo(stmt.name_hint, kinds, depth, stmt.init is not None, value))
            else:
                visit(stmt.body, depth)
        elif kind == "For":
            visit(stmt.body, depth + 1)
        elif kind == "SeqStmt":
            for s in stmt.seq:
                visit(s, depth)
        else:
            for attr in ("body", "then_case", "else_case", "block"):
                child = getattr(stmt, attr, None)
                if isinstance(child, tvm.ir.Node) and not isinstance(child, tvm.ir.expr.Expr):
                    visit(child, depth)

    visit(func.body, 0)
    return found


def kernel_func(kernel) -> tvm.tirx.PrimFunc:
    """The PrimFunc of a kernel: ``kernel`` itself, or the (first) PrimFunc of a module."""
    if isinstance(kernel, tvm.IRModule):
        funcs = [f for _, f in kernel.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
        return funcs[0]
    return kernel


def class_key(kernel) -> str:
    """Shape-independent structural key of a kernel (PrimFunc or one-function IRModule)."""
    text = ";".join(b.key() for b in blocks_of(kernel_func(kernel)))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def class_label(kernel) -> str:
    """A readable name of the kernel's class: its op sequence, e.g. ``pad>conv2d>add>relu``."""
    return ">".join(_op_name(b.name) for b in blocks_of(kernel_func(kernel)))


def anchor_block(kernel) -> str | None:
    """Name of the block with the most reduction work (first reduction block), if any."""
    for b in blocks_of(kernel_func(kernel)):
        if "R" in b.iter_kinds:
            return b.name
    return None


def shape_distance(a, b) -> float:
    """How far apart two kernels' buffer shapes are: Σ |log(extent ratio)| (inf: other ranks).

    Transfer tries the schedules of the nearest kernels of a class first (§6.2.3
    transfers every pair; a cap on candidates keeps the nearest).
    """
    import math

    pa, pb = kernel_func(a).params, kernel_func(b).params  # buffers on TVM 0.27
    shapes_a = [[int(d) if isinstance(d, tvm.tirx.IntImm) else 1 for d in buf.shape] for buf in pa]
    shapes_b = [[int(d) if isinstance(d, tvm.tirx.IntImm) else 1 for d in buf.shape] for buf in pb]
    if [len(s) for s in shapes_a] != [len(s) for s in shapes_b]:
        return math.inf
    return sum(abs(math.log(max(x, 1) / max(y, 1)))
               for sa, sb in zip(shapes_a, shapes_b) for x, y in zip(sa, sb))


@dataclass
class Kernel:
    """One distinct kernel of a model: its workload module and how often it runs."""

    name: str
    mod: tvm.IRModule
    weight: int
    key: str = ""
    label: str = ""
    untuned_secs: float | None = None

    def __post_init__(self):
        self.key = self.key or class_key(self.mod)
        self.label = self.label or class_label(self.mod)


def extract_kernels(model, target, shapes=None, options=None) -> list[Kernel]:
    """The distinct fused kernels of ``model`` as the cocopie pipeline builds them.

    ``model``: ONNX path/proto or a Relax IRModule. Runs the pipeline stages before
    ``schedule``, then MetaSchedule's task extraction (deduplicated structurally, with
    the call count as weight); the modules are exactly what ``MetaScheduleApplyDatabase``
    looks up, so records committed for them are applied by the pipeline.
    """
    from tvm.s_tir import meta_schedule as ms


    target = parse_target(target)
    mod = model if isinstance(model, tvm.IRModule) else from_onnx(model, shapes=shapes)
    mod = run_until(mod, target, "fusion", options)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    return [Kernel(t.task_name, t.dispatched[0], int(t.weight)) for t in tasks]


@dataclass
class ClassRow:
    """One row of the class report: a class, its label, kernels, calls and share of the untuned
    time."""
    key: str
    label: str
    kernels: list = field(default_factory=list)
    calls: int = 0
    untuned_secs: float = 0.0
    share: float = 0.0


def class_report(kernels: list[Kernel]) -> list[ClassRow]:
    """Table 6.2 for one model: one row per class, largest share of untuned time first.

    The share P_c uses ``Kernel.untuned_secs * weight``; kernels without a time count
    by call count instead (and the shares then are shares of calls).
    """
    rows: dict[str, ClassRow] = {}
    for k in kernels:
        row = rows.setdefault(k.key, ClassRow(k.key, k.label))
        row.kernels.append(k.name)
        row.calls += k.weight
        row.untuned_secs += (k.untuned_secs or 0.0) * k.weight
    timed = all(k.untuned_secs is not None for k in kernels)
    total = sum(r.untuned_secs for r in rows.values()) if timed else sum(r.calls for r in rows.values())
    for r in rows.values():
        r.share = (r.untuned_secs if timed else r.calls) / total if total else 0.0
    return sorted(rows.values(), key=lambda r: -r.share)


def format_class_report(rows: list[ClassRow]) -> str:
    """Rows as a text table (class, kernels, calls, share of untuned time, ops)."""
    lines = [f"{'class':<13}{'kernels':>8}{'calls':>7}{'share':>8}  ops"]
    for r in rows:
        lines.append(f"{r.key:<13}{len(r.kernels):>8}{r.calls:>7}{100 * r.share:>7.1f}%  {r.label}")
    return "\n".join(lines)


def group_by_class(items, key=lambda x: x.key) -> dict[str, list]:
    """``items`` grouped by ``key`` (their class key by default), in first-seen order."""
    groups: dict[str, list] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return dict(groups)

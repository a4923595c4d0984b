"""DNNFusion's extended computational graph and fusion-plan exploration (seed 004, §3.4).

The graph (:class:`ECG`) has a node per ``call_tir`` of a legalized ``main``: its
kernel, its mapping type (:mod:`.mapping`, from the kernel's TIR), the bytes of the
intermediate result it writes, its producers and consumers among the nodes, and
whether something other than a node (the function's result, a tuple, a non-kernel
binding) reads it.

:func:`explore` follows the thesis' plan exploration: the seed is the unfused
One-to-One node with the smallest intermediate result; the block grows through its
successors, then its predecessors, a node at a time, while the fusion-opportunity
table (:mod:`.table`) allows it: red stops, green fuses, yellow asks ``decide`` (a
latency comparison; without one, yellow pairs stay apart); then the next seed. A block
keeps one output (every other intermediate result stays inside it) and at most
``max_ops`` operators (the working-set budget). Nodes no block takes stay alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ...exprs import is_constant, static_shape
from .mapping import MappingType, classify
from .table import Color, opportunity

log = logging.getLogger(__name__)

#: a yellow pair's decision: ``decide(block nodes, candidate node, fused type) -> fuse?``
#: (:class:`.apply.DNNFusion` binds the module a ``MeasuredDecision`` also takes)
Decide = Callable[[list, "Node", MappingType], bool]


@dataclass(eq=False)
class Node:
    """One kernel call of the graph."""

    index: int  # binding position in main's dataflow block
    var: relax.Var
    kernel: str  # the PrimFunc's name
    kind: MappingType
    out_bytes: int  # size of its result (0 if symbolic)
    producers: list = field(default_factory=list)  # nodes whose results it reads
    consumers: list = field(default_factory=list)  # nodes that read its result
    escapes: bool = False  # read by something that is not a node


@dataclass
class ECG:
    """The extended computational graph of a legalized ``main`` (its kernel calls)."""

    nodes: list

    @classmethod
    def of(cls, mod: tvm.IRModule) -> ECG:
        """The graph of ``mod["main"]``'s dataflow block(s)."""
        call_tir = tvm.ir.Op.get("relax.call_tir")
        nodes, by_var = [], {}
        main = mod["main"]
        index = 0
        for block in main.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                    gv, args = value.args[0], list(value.args[1].fields)
                    constants = tuple(i for i, a in enumerate(args) if is_constant(a))
                    kind = classify(mod[gv], constants)
                    node = Node(index, binding.var, gv.name_hint,
                                kind if kind is not None else MappingType.MANY_TO_MANY,
                                _bytes(binding.var))
                    for arg in args:
                        producer = by_var.get(arg)
                        if producer is not None and producer not in node.producers:
                            node.producers.append(producer)
                            producer.consumers.append(node)
                    nodes.append(node)
                    by_var[binding.var] = node
                else:
                    _mark_escapes(value, by_var)
                index += 1
        _mark_escapes(main.body.body, by_var)
        return cls(nodes)


def _bytes(var) -> int:
    shape = static_shape(var)
    if shape is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(str(var.ty.dtype)).itemsize


def _mark_escapes(expr, by_var: dict) -> None:
    """Every node whose result ``expr`` reads is read outside the kernels."""
    def visit(e):
        node = by_var.get(e)
        if node is not None:
            node.escapes = True

    relax.analysis.post_order_visit(expr, visit)


@dataclass
class Block:
    """A fusion block: its nodes in program order, its output node and mapping type."""

    nodes: list
    kind: MappingType

    @property
    def output(self) -> Node:
        """The node whose result leaves the block (the last in program order)."""
        return max(self.nodes, key=lambda n: n.index)


def explore(graph: ECG, decide: Decide | None = None, max_ops: int = 16) -> list[Block]:
    """DNNFusion's plan: the blocks of ``graph`` (blocks of one node included), in
    program order of their outputs."""
    owner: dict = {}
    blocks: list[Block] = []
    while True:
        seeds = [n for n in graph.nodes
                 if n not in owner and n.kind == MappingType.ONE_TO_ONE]
        if not seeds:
            break
        seed = min(seeds, key=lambda n: (n.out_bytes, n.index))
        block = Block([seed], seed.kind)
        owner[seed] = block
        _grow(block, owner, decide, max_ops)
        blocks.append(block)
    for node in graph.nodes:
        if node not in owner:
            owner[node] = Block([node], node.kind)
            blocks.append(owner[node])
    for block in blocks:
        block.nodes.sort(key=lambda n: n.index)
    return sorted(blocks, key=lambda b: b.output.index)


#: block types that only move or map elements: such a block is an epilogue waiting for
#: its producer
_LIGHT = (MappingType.ONE_TO_ONE, MappingType.REORGANIZE, MappingType.SHUFFLE)


def _grow(block: Block, owner: dict, decide: Decide | None, max_ops: int) -> None:
    """Successors first, then predecessors, until neither adds a node.

    One refinement of the thesis' order: while the block holds only One-to-One,
    Reorganize and Shuffle ops, it first tries to join its producer, as that
    producer's epilogue. Grown forward first, a bias + activation chain would become
    the prologue of the next convolution or matmul, which reads each of its elements
    many times (recomputing the chain) and gets no fused epilogue of its own; the
    producer's epilogue computes each element once. For the same reason a block
    holding a Many-to-Many or One-to-Many op takes a One-to-One predecessor as its
    prologue only once no other block can take it as an epilogue (its producers are
    placed); Reorganize and Shuffle predecessors join as index remapping.
    """
    grew = True
    while grew and len(block.nodes) < max_ops:
        if block.kind in _LIGHT:
            grew = (_add_predecessor(block, owner, decide)
                    or _add_successor(block, owner, decide, max_ops))
        else:
            grew = (_add_successor(block, owner, decide, max_ops)
                    or _add_predecessor(block, owner, decide))


def _fuse(block: Block, first: MappingType, second: MappingType, candidate: Node,
          decide: Decide | None) -> bool:
    """Whether the table (and, for yellow, ``decide``) lets ``candidate`` join."""
    cell = opportunity(first, second)
    if cell.color is Color.RED:
        return False
    if cell.color is Color.YELLOW and not (decide and decide(block.nodes, candidate,
                                                             cell.fused)):
        return False
    block.nodes.append(candidate)
    block.kind = cell.fused
    return True


def _add_successor(block: Block, owner: dict, decide: Decide | None,
                   max_ops: int = 16) -> bool:
    out = block.output
    if out.escapes:
        return False  # the block's result must stay its only output
    if len(out.consumers) > 1:
        return _add_diamond(block, owner, max_ops)
    succ = out.consumers[0]
    if succ in owner:
        return False
    if _fuse(block, block.kind, succ.kind, succ, decide):
        owner[succ] = block
        return True
    return False


def _add_diamond(block: Block, owner: dict, max_ops: int) -> bool:
    """Several consumers read the block's result: take the nodes that follow it, in
    program order, up to the first point where the block has one output again (the
    join of a diamond: GELU's ``x * erf(x)``, a residual branch). Every node reachable
    from the block up to that point joins, so the block stays convex; only green cells
    (no measurement of a partial block with several outputs), nothing another block
    owns, at most ``max_ops`` nodes."""
    members = set(block.nodes)
    region, kind = [], block.kind
    reach = set(block.output.consumers)
    while reach and len(members) + len(region) < max_ops:
        node = min(reach, key=lambda n: n.index)
        reach.discard(node)
        cell = opportunity(kind, node.kind)
        if node in owner or cell.color is not Color.GREEN:
            return False
        kind = cell.fused
        region.append(node)
        inside = members | set(region)
        outputs = [n for n in inside if n.escapes or set(n.consumers) - inside]
        if outputs == [node]:
            for n in region:
                owner[n] = block
            block.nodes.extend(region)
            block.kind = kind
            return True
        reach |= {c for n in outputs for c in n.consumers if c not in inside}
    return False


def _add_predecessor(block: Block, owner: dict, decide: Decide | None) -> bool:
    members = set(block.nodes)
    for node in sorted(block.nodes, key=lambda n: -n.index):
        for pred in node.producers:
            if pred in owner or pred.escapes or set(pred.consumers) - members:
                continue  # its result is read elsewhere too: it cannot become internal
            if (block.kind not in _LIGHT and pred.kind is MappingType.ONE_TO_ONE
                    and any(p not in owner for p in pred.producers)):
                continue  # it can still be its producer's epilogue (computed once)
            if _fuse(block, pred.kind, block.kind, pred, decide):
                owner[pred] = block
                return True
    return False

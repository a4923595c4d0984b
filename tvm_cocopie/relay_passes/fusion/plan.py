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
grows with one output (every other intermediate result stays inside it) and at most
``max_ops`` operators (the working-set budget). Nodes no block takes stay alone. Blocks
are then joined (:func:`merge_blocks`), and a block whose result others read too joins
the block that reads it row by row, keeping that result as a second output
(:func:`merge_shared`: a transformer's residual stream).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import tvm
import tvm_ffi
from tvm import relax

from ...exprs import is_constant, static_shape, tensor_bytes
from . import locality
from .mapping import MappingType, classify
from .table import Color, opportunity

log = logging.getLogger(__name__)

#: a PrimFunc attribute: the kernel is a whole computation with its own schedule rule
#: (the one-kernel attention): DNNFusion leaves it a block of its own
ALONE = "cocopie_alone"

#: a yellow pair's decision: ``decide(block nodes, candidate node, fused type) -> fuse?``
#: (:class:`.apply.DNNFusion` binds the module a ``MeasuredDecision`` also takes)
Decide = Callable[[list, "Node", MappingType], bool]
#: two blocks' merge: ``merge(first block's nodes, second block's nodes) -> fuse?``
#: (:meth:`.profiler.MeasuredDecision.merge`: the fused block against the two)
Merge = Callable[[list, list], bool]


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
    alone: bool = False  # never fused (its PrimFunc carries :data:`ALONE`)
    #: producer node -> {its result's dim: this node's result dim} for the dims this node
    #: reads at its own position (:func:`.locality.row_map`)
    row_maps: dict = field(default_factory=dict)


@dataclass
class ECG:
    """The extended computational graph of a legalized ``main`` (its kernel calls)."""

    nodes: list

    @classmethod
    def of(cls, mod: tvm.IRModule, types: TypeStore | None = None) -> ECG:
        """The graph of ``mod["main"]``'s dataflow block(s); the kernels' mapping types
        looked up in ``types`` (the profiling database) and derived only where missing."""
        call_tir = tvm.ir.Op.get("relax.call_tir")
        nodes, by_var, rows_cache = [], {}, {}
        main = mod["main"]
        kinds = _mapping_types(mod, types)
        index = 0
        for block in main.body.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                    gv, args = value.args[0], list(value.args[1].fields)
                    kind = kinds[(gv.name_hint, _constant_args(args))]
                    node = Node(index, binding.var, gv.name_hint,
                                kind if kind is not None else MappingType.MANY_TO_MANY,
                                tensor_bytes(binding.var.ty))
                    attrs = mod[gv].attrs
                    node.alone = bool(attrs is not None and attrs.get(ALONE, False))
                    for position, arg in enumerate(args):
                        producer = by_var.get(arg)
                        if producer is None:
                            continue
                        if producer not in node.producers:
                            node.producers.append(producer)
                            producer.consumers.append(node)
                        key = (gv.name_hint, position)
                        if key not in rows_cache:
                            rows_cache[key] = locality.row_map(mod[gv], position)
                        rows = rows_cache[key]
                        node.row_maps[producer] = locality.intersect(
                            node.row_maps.get(producer), rows)
                    nodes.append(node)
                    by_var[binding.var] = node
                else:
                    _mark_escapes(value, by_var)
                index += 1
        _mark_escapes(main.body.body, by_var)
        return cls(nodes)


class TypeStore(Protocol):
    """Where kernels' mapping types are remembered (:class:`.database.ProfileDB`)."""

    def mapping_types(self, keys) -> dict[str, int]: ...

    def put_mapping_types(self, types: dict[str, int]) -> None: ...


#: version of the mapping-type derivation in stored keys: bump it when
#: :func:`.mapping.classify` changes what it returns, so stored types are derived anew
MAPPING_VERSION = 1


def mapping_key(func: tvm.tirx.PrimFunc, constants: tuple) -> str:
    """The key of a kernel's mapping type: its structure (structural hash, stable across
    processes) and the positions of its constant arguments."""
    consts = ",".join(str(i) for i in constants)
    return f"v{MAPPING_VERSION}:{tvm_ffi.structural_hash(func):x}:{consts}"


def _constant_args(args) -> tuple:
    return tuple(i for i, a in enumerate(args) if is_constant(a))


def _mapping_types(mod: tvm.IRModule, store: TypeStore | None) -> dict:
    """``{(kernel name, constant positions): MappingType or None}`` for every kernel call
    of ``main``: from ``store`` where it holds them, else derived and stored."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    wanted = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                gv = value.args[0]
                wanted.setdefault((gv.name_hint, _constant_args(value.args[1].fields)), gv)
    keys = {item: mapping_key(mod[gv], item[1]) for item, gv in wanted.items()} \
        if store is not None else {}
    stored = store.mapping_types(set(keys.values())) if store is not None else {}
    kinds, new = {}, {}
    for item, gv in wanted.items():
        code = stored.get(keys.get(item))
        if code is not None:
            kinds[item] = None if code < 0 else MappingType(code)
            continue
        kinds[item] = classify(mod[gv], item[1])
        if item in keys:
            new[keys[item]] = -1 if kinds[item] is None else int(kinds[item])
    if new:
        store.put_mapping_types(new)
    return kinds


def _mark_escapes(expr, by_var: dict) -> None:
    """Every node whose result ``expr`` reads is read outside the kernels."""
    def visit(e):
        node = by_var.get(e)
        if node is not None:
            node.escapes = True

    relax.analysis.post_order_visit(expr, visit)


@dataclass(eq=False)
class Block:
    """A fusion block: its nodes in program order, its output node and mapping type."""

    nodes: list
    kind: MappingType

    @property
    def output(self) -> Node:
        """The node whose result leaves the block (the last in program order)."""
        return max(self.nodes, key=lambda n: n.index)

    @property
    def outputs(self) -> list[Node]:
        """The nodes whose results leave the block, in program order: :attr:`output`
        and those kept as further outputs (:func:`merge_shared`)."""
        return leaving(self.nodes)


def leaving(nodes: list) -> list[Node]:
    """The nodes of ``nodes`` whose results something outside them reads, in program
    order, the last node always (a block's outputs)."""
    members = set(nodes)
    last = max(nodes, key=lambda n: n.index)
    return sorted((n for n in nodes if n is last or n.escapes or set(n.consumers) - members),
                  key=lambda n: n.index)


def placement(nodes: list) -> Node | None:
    """The node of ``nodes`` at whose binding their fused kernel can be called, or
    ``None``: the last one when only its result leaves them; else the first one after
    every result they read from outside, if that comes before every outside reader of
    a result leaving them (a further output's readers may come before the last node:
    a side head bound before the layer norm that also reads the residual)."""
    out = leaving(nodes)
    if len(out) == 1:
        return out[0]
    members = set(nodes)
    inputs = max((p.index for n in nodes for p in n.producers if p not in members),
                 default=-1)
    at = min((n for n in nodes if n.index > inputs), key=lambda n: n.index, default=None)
    if at is None:
        return None
    for node in out[:-1]:
        if node.escapes and node.index < at.index:
            return None  # read by a binding that is not a kernel, somewhere after it
        if any(c.index <= at.index for c in node.consumers if c not in members):
            return None
    return at


def placeable(nodes: list) -> bool:
    """Whether the nodes, fused into one kernel, can be called where every reader of
    its results comes after it (:func:`placement`)."""
    return placement(nodes) is not None


def explore(graph: ECG, decide: Decide | None = None, max_ops: int = 16,
            merge: Merge | None = None,
            row_budget: int = locality.ROW_BUDGET_BYTES,
            whole_budget: int = locality.WHOLE_BUDGET_BYTES) -> list[Block]:
    """DNNFusion's plan: the blocks of ``graph`` (blocks of one node included), in
    program order of their outputs.

    Kernels marked :data:`ALONE` are blocks of their own. Seeds are the thesis'
    One-to-One nodes first, smallest result first; then, where
    nodes are left, the moves (Reorganize, Shuffle) and the rest, so that a chain of
    reshapes and transposes, or a reduction and the transpose after it, also gets its
    block. Then :func:`merge_blocks` joins neighbouring blocks (``merge`` settles the
    pairs that need a measurement; ``row_budget`` bounds a row, ``whole_budget`` a
    producer's whole result, :mod:`.locality`).
    """
    owner: dict = {}
    blocks: list[Block] = []
    for node in graph.nodes:
        if node.alone:
            owner[node] = Block([node], node.kind)
            blocks.append(owner[node])
    while True:
        seeds = [n for n in graph.nodes if n not in owner]
        if not seeds:
            break
        seed = min(seeds, key=lambda n: (n.kind != MappingType.ONE_TO_ONE,
                                         n.kind not in _MOVES, n.out_bytes, n.index))
        block = Block([seed], seed.kind)
        owner[seed] = block
        _grow(block, owner, decide, max_ops)
        blocks.append(block)
    for block in blocks:
        block.nodes.sort(key=lambda n: n.index)
    blocks = merge_blocks(blocks, merge, max_ops, row_budget, whole_budget)
    blocks = merge_shared(blocks, merge, max_ops, row_budget)
    return sorted(blocks, key=lambda b: b.output.index)


_MOVES = (MappingType.REORGANIZE, MappingType.SHUFFLE)


def block_rows(nodes: list, source: Node) -> dict[int, int]:
    """``{dim of source's result: dim of the block's result}``: the dims along which the
    block of ``nodes`` (one output, the last) reads ``source`` (a node outside it) at its
    own position, composed through the block's nodes (:mod:`.locality`)."""
    members = set(nodes)
    out = max(nodes, key=lambda n: n.index)
    to_out: dict = {out: {d: d for d in range(_rank(out))}}
    for node in sorted(nodes, key=lambda n: -n.index):
        mine = to_out.get(node, {})
        for producer in node.producers:
            if producer in members or producer is source:
                rows = locality.compose(mine, node.row_maps.get(producer, {}))
                to_out[producer] = locality.intersect(to_out.get(producer), rows)
    return to_out.get(source, {})


def _rank(node: Node) -> int:
    shape = node.var.ty.shape if hasattr(node.var.ty, "shape") else None
    return len(shape) if shape is not None else 0


def row_local(nodes: list, source: Node, budget: int = locality.ROW_BUDGET_BYTES) -> bool:
    """Whether the block of ``nodes`` reads ``source`` row by row, a row within
    ``budget`` bytes: fused, each element of ``source`` is computed once."""
    rows = block_rows(nodes, source)
    if not rows:
        return False
    size = locality.slice_bytes(static_shape(source.var), str(source.var.ty.dtype), rows)
    return size is not None and 0 < size <= budget


def merge_blocks(blocks: list, merge: Merge | None, max_ops: int = 16,
                 row_budget: int = locality.ROW_BUDGET_BYTES,
                 whole_budget: int = locality.WHOLE_BUDGET_BYTES) -> list:
    """Join a block into the block that reads its whole result, while one qualifies.

    The pair's cell of the table over the two blocks' types decides: green joins; a
    yellow one joins if ``merge`` says the fused block is faster than the two; a red one
    (a Many-to-Many block reading another Many-to-Many or One-to-Many block) is
    reconsidered as yellow when the consumer reads the producer row-locally
    (:func:`row_local`: a layer norm's two reductions, a softmax after a matmul, a 1x1
    conv after a depthwise one), because then the fused kernel, computed row by row,
    computes every element once, or when the producer's whole result is at most
    ``whole_budget`` bytes (a pooled vector feeding a squeeze-and-excitation block's
    1x1 convs or a classifier's matmul), computed once at the fused kernel's root. The
    joined block has one output again (the first block's result was read only by the
    second), so it stays convex.
    """
    blocks = list(blocks)
    rejected: set = set()
    while True:
        owner = {n: b for b in blocks for n in b.nodes}
        joined = False
        for first in sorted(blocks, key=lambda b: b.output.index):
            out = first.output
            if out.escapes or not out.consumers:
                continue
            targets = {owner[c] for c in out.consumers}
            if len(targets) != 1:
                continue
            second = targets.pop()
            if any(n.alone for n in (*first.nodes, *second.nodes)):
                continue
            key = (tuple(n.index for n in first.nodes), tuple(n.index for n in second.nodes))
            if key in rejected or len(first.nodes) + len(second.nodes) > max_ops:
                continue
            if not placeable([*first.nodes, *second.nodes]):
                continue  # a further output of one would be read before the joined call
            cell = opportunity(first.kind, second.kind)
            kind = cell.fused
            if cell.color is not Color.GREEN:
                if cell.color is Color.RED:
                    if not (0 < out.out_bytes <= whole_budget
                            or row_local(second.nodes, out, row_budget)):
                        rejected.add(key)
                        continue
                    kind = MappingType.MANY_TO_MANY
                if merge is None or not merge(first.nodes, second.nodes):
                    rejected.add(key)
                    continue
            second.nodes = sorted([*first.nodes, *second.nodes], key=lambda n: n.index)
            second.kind = kind
            blocks.remove(first)
            joined = True
            break
        if not joined:
            return blocks


#: the most results a block keeps (:func:`merge_shared`)
MAX_OUTPUTS = 2


def merge_shared(blocks: list, merge: Merge | None, max_ops: int = 16,
                 row_budget: int = locality.ROW_BUDGET_BYTES) -> list:
    """Join a block whose result several blocks read into one of them that reads it row
    by row, the result kept as a further output of the joined block.

    A transformer's residual stream: the sum of a projection and the residual is read
    by the next layer norm (row-locally, then the MLP's first matmul) and by the next
    residual add; joined, the row tile computes its rows of the sum, writes them (they
    are an output) and normalizes them while they are in L1, one kernel where there
    were two (ViT's projection + residual and layer norm + MLP, BERT's layer norm and
    the next layer's QKV projection). Only when ``merge`` measures the joined block
    faster than the two, every other reader of the result comes after the joined
    kernel's call (:func:`placement`; then the joined block is convex: no path leaves
    it and comes back), and a block keeps at most :data:`MAX_OUTPUTS` results.
    """
    blocks = list(blocks)
    rejected: set = set()
    while merge is not None:
        owner = {n: b for b in blocks for n in b.nodes}
        joined = False
        for first in sorted(blocks, key=lambda b: b.output.index):
            out = first.output
            targets = {owner[c] for c in out.consumers}
            if out.escapes or len(targets) < 2 or len(first.outputs) > 1:
                continue
            for second in sorted(targets, key=lambda b: b.output.index):
                nodes = [*first.nodes, *second.nodes]
                key = (tuple(n.index for n in first.nodes),
                       tuple(n.index for n in second.nodes))
                if (key in rejected or len(nodes) > max_ops
                        or any(n.alone for n in nodes)
                        or len(leaving(nodes)) > MAX_OUTPUTS or not placeable(nodes)
                        or not row_local(second.nodes, out, row_budget)):
                    continue
                if not merge(first.nodes, second.nodes):
                    rejected.add(key)
                    continue
                cell = opportunity(first.kind, second.kind)
                second.nodes = sorted(nodes, key=lambda n: n.index)
                second.kind = (MappingType.MANY_TO_MANY if cell.color is Color.RED
                               else cell.fused)
                blocks.remove(first)
                joined = True
                break
            if joined:
                break
        if not joined:
            break
    return blocks


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

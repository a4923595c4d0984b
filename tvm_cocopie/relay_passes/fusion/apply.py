"""A fusion plan applied: each block of kernel calls becomes one fused kernel.

Every block of two or more calls (:func:`.plan.explore`) is moved into a private Relax
function marked ``Primitive`` (its outside inputs, constants included, as parameters;
its output as the result, a tuple when the block keeps several), ``main`` calls that
function where the plan places it (:func:`.plan.placement`: where the block's output was
bound, unless it keeps several), and TVM's ``FuseTIR`` merges each such function's
kernels into one PrimFunc.
That is the form stock ``FuseOps`` produces, so the schedule stage and the VM lowering
take it unchanged.

:class:`DNNFusion` is the whole ``fusion`` stage as one module pass.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from .locality import ROW_BUDGET_BYTES, WHOLE_BUDGET_BYTES
from .mapping import MappingType, stores_in, tir_blocks
from .plan import ECG, Block, Decide, Node, TypeStore, explore, placement
from .regions import fuse_tir

log = logging.getLogger(__name__)


def _block_inputs(block: Block, bindings: dict) -> list:
    """The values the block reads from outside it, in first-use order."""
    inside = {n.var for n in block.nodes}
    seen, out = set(), []
    for node in block.nodes:
        for arg in bindings[node.var].args[1].fields:
            if arg in inside or (isinstance(arg, relax.Var) and arg in seen):
                continue
            if is_scalar_arg(arg):  # a symbolic dim or a number: kept
                continue  # in the body (the dims come in as the function's shape)
            if isinstance(arg, relax.Var):
                seen.add(arg)
            out.append(arg)
    return out


def is_scalar_arg(arg) -> bool:
    """Whether a kernel call's argument is a scalar (a symbolic dim, or a number), not a
    tensor: it stays in a fused function's body, the dims it uses passed as a shape."""
    return isinstance(getattr(arg, "ty", None), tvm.ir.PrimType)



def _shape_dims(ty) -> list:
    shape = getattr(ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None and isinstance(ty, relax.TupleType):
        return [d for field in ty.fields for d in _shape_dims(field)]
    return list(values or [])


def undefined_dims(block: Block, bindings: dict, inputs: list) -> list:
    """The symbolic variables the block's calls use (in their argument and result
    shapes) that no input's shape defines, a dim of its own (a shape such as
    ``(W - 1) // 4 + 1`` uses ``W`` without defining it): a fused function without them
    loses its result's shape (PP-OCR rec, the CRNN and the encoder with symbolic dims
    did not build)."""
    defined = {d for arg in inputs for d in _shape_dims(getattr(arg, "ty", None))
               if isinstance(d, tvm.tirx.Var)}
    used: dict = {}
    for node in block.nodes:
        call = bindings[node.var]
        dims = [a for a in call.args[1].fields if is_scalar_arg(a)]
        for ty in [getattr(a, "ty", None) for a in call.args[1].fields] + [call.ty_args[0]]:
            dims += _shape_dims(ty)
        for dim in dims:
            for var in tvm.tirx.analysis.undefined_vars(dim, []):
                used.setdefault(str(var.name), var)
    names = {str(v.name) for v in defined}
    return [var for name, var in sorted(used.items()) if name not in names]


def call_tir_again(call: relax.Call, args: list) -> relax.Call:
    """The kernel call ``call`` on other arguments (its output type kept; a kernel with
    several outputs, such as ``split``, takes its output types as a list)."""
    out_ty = call.ty_args[0]
    if isinstance(out_ty, relax.TupleType):
        out_ty = list(out_ty.fields)
    # a kernel taking symbolic dims as scalars keeps them (its call's ``tir_vars``)
    new = relax.call_tir(call.args[0], args, out_ty)
    if len(call.args) > 2:
        new = relax.Call(new.op, [*new.args, call.args[2]], new.attrs, new.ty_args)
    return new


def shared_moves(mod: tvm.IRModule, graph: ECG) -> list[Node]:
    """The nodes of ``mod``'s graph that only move elements (a slice, a transpose, a
    reshape: every value they store is a load) and whose result several kernels read,
    nothing else: each reader can take a copy of its own as index remapping (YOLO's
    C2f split: each half read by the next conv and by the concat)."""
    return [n for n in graph.nodes
            if len(n.consumers) > 1 and not n.escapes and not n.alone
            and n.kind in (MappingType.ONE_TO_ONE, MappingType.REORGANIZE,
                           MappingType.SHUFFLE)
            and moves_only(mod[n.kernel])]


def moves_only(func) -> bool:
    """Whether every value the PrimFunc ``func`` stores is loaded from a buffer."""
    if not isinstance(func, tvm.tirx.PrimFunc):
        return False
    stores = [st for block in tir_blocks(func) for st in stores_in(block.body)]
    return bool(stores) and all(type(st.value).__name__ in ("BufferLoad", "TensorLoad")
                                for st in stores)


def duplicate_moves(mod: tvm.IRModule, nodes: list[Node]) -> tvm.IRModule:
    """``mod`` with each of ``nodes`` (:func:`shared_moves`) computed once per consumer:
    the first consumer keeps the call, every other gets a copy bound right before it."""
    if not nodes:
        return mod
    main = mod["main"]
    copied: dict = {}  # a consumer's var -> the moves it reads a copy of
    for node in nodes:
        for consumer in node.consumers[1:]:
            copied.setdefault(consumer.var, []).append(node.var)
    calls = {b.var: b.value for blk in main.body.blocks for b in blk.bindings}

    def rewrite(binding):
        if binding.var not in copied:
            return [binding]
        copies = {var: type(var)(f"{var.name}_copy", var.ty)  # a DataflowVar stays one
                  for var in copied[binding.var]}
        call = binding.value
        args = [copies.get(a, a) for a in call.args[1].fields]
        return [*(relax.VarBinding(copy, calls[var]) for var, copy in copies.items()),
                relax.VarBinding(binding.var, call_tir_again(call, args))]

    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out["main"] = _rebound(main, rewrite)
    return out


def fuse_blocks(mod: tvm.IRModule, blocks: list[Block], least: int = 2) -> tvm.IRModule:
    """``mod`` with every block of ``least`` (two) or more calls in a ``Primitive``
    function (``FuseTIR`` still to run; a block of one call so made becomes its kernel
    specialized to the call's shapes)."""
    main = mod["main"]
    bindings = {b.var: b.value for blk in main.body.blocks for b in blk.bindings}
    fused = [b for b in blocks if len(b.nodes) >= least]
    if not fused:
        return mod
    # each block's call where its plan places it (the last node, unless it keeps further
    # outputs: :func:`.plan.placement`)
    places = {b.output.var: placement(b.nodes) for b in fused}
    hidden = {n.var for b in fused for n in b.nodes if n is not places[b.output.var]}
    bb = relax.BlockBuilder(mod)
    calls = {}
    for block in fused:
        inputs = _block_inputs(block, bindings)
        params = [relax.Var(f"p{i}", arg.ty) for i, arg in enumerate(inputs)]
        env = dict(zip(inputs, params))
        dims = undefined_dims(block, bindings, inputs)
        if dims:  # symbolic dims the inputs' shapes do not define: passed as a shape
            inputs = [*inputs, relax.ShapeExpr(dims)]
            params = [*params, relax.Var("tir_vars", relax.ShapeType(dims))]
        name = "fused_" + "_".join(n.kernel for n in block.nodes)[:120]
        leaving = [n.var for n in block.outputs]
        with bb.function(name, params, attrs={"Primitive": True}, private=True):
            with bb.dataflow():
                for node in block.nodes:
                    call = bindings[node.var]
                    args = [env.get(a, a) for a in call.args[1].fields]
                    new = call_tir_again(call, args)
                    env[node.var] = (bb.emit_output(new) if node.var in leaving
                                     else bb.emit(new))
            # the builder's own GlobalVar: an identical function is shared, one of the same
            # name but another body (other inputs) is renamed, so a look-up by name would
            # call the first with the second's arguments; several outputs: a tuple
            result = (env[block.output.var] if len(leaving) == 1
                      else relax.Tuple([env[var] for var in leaving]))
            gvar = bb.emit_func_output(result)
        calls[places[block.output.var].var] = (gvar, inputs, leaving)
    new_main = _rewrite_main(main, hidden, calls)
    out = bb.get()
    out["main"] = new_main
    log.info("DNNFusion: %d calls fused into %d kernels", sum(len(b.nodes) for b in fused),
             len(fused))
    return out


def _rewrite_main(main: relax.Function, hidden: set, calls: dict) -> relax.Function:
    """``main`` with each block's calls replaced by one call of its fused function,
    bound where ``calls`` (by the var of the binding it replaces) places it (a block of
    several outputs: their vars bound to the fields of the call's tuple, right after it;
    :func:`.plan.placement` saw that nothing reads them before)."""
    def rewrite(binding):
        if binding.var in calls:
            gv, inputs, leaving = calls[binding.var]
            if len(leaving) == 1:
                return [relax.VarBinding(binding.var, relax.Call(gv, inputs))]
            both = type(binding.var)(f"{binding.var.name}_outputs",
                                     relax.TupleType([v.ty for v in leaving]))
            return [relax.VarBinding(both, relax.Call(gv, inputs)),
                    *(relax.VarBinding(var, relax.TupleGetItem(both, i))
                      for i, var in enumerate(leaving))]
        if binding.var in hidden:
            return []
        return [binding]
    return _rebound(main, rewrite)


def _rebound(main: relax.Function, rewrite) -> relax.Function:
    """``main`` with each binding replaced by the bindings ``rewrite(binding)`` gives."""
    new_blocks = []
    for blk in main.body.blocks:
        bindings = [new for binding in blk.bindings for new in rewrite(binding)]
        new_blocks.append(relax.DataflowBlock(bindings) if isinstance(
            blk, relax.DataflowBlock) else relax.BindingBlock(bindings))
    body = relax.SeqExpr(new_blocks, main.body.body)
    return relax.Function(main.params, body, main.ret_ty if hasattr(main, "ret_ty") else None,
                          main.is_pure, main.attrs, main.span)


def _stranded(moves: list[Node], planned: tvm.IRModule, blocks: list) -> list[Node]:
    """The ``moves`` of which a copy in ``planned`` (or the call itself) is a block of
    its own in ``blocks`` (the copies share the move's call)."""
    values = {b.var: b.value for blk in planned["main"].body.blocks for b in blk.bindings}
    alone = [values[n.var] for b in blocks if len(b.nodes) == 1 for n in b.nodes]
    return [m for m in moves if any(values[m.var].same_as(call) for call in alone)]


@tvm.transform.module_pass(opt_level=0, name="DNNFusion")
class DNNFusion:
    """The ``fusion`` stage by DNNFusion's plan (:mod:`.plan`), then ``FuseTIR``.

    ``DNNFusion(decide=None, max_ops=16, row_budget=..., whole_budget=..., types=None)``:
    ``decide(mod, nodes, candidate, fused_type)`` settles yellow pairs
    (:class:`.profiler.MeasuredDecision`; none: they stay apart) and, if it has a
    ``merge(mod, first, second)`` method, the joins of two blocks
    (:func:`.plan.merge_blocks`); ``max_ops`` bounds a block, ``row_budget`` a row read
    row-locally, ``whole_budget`` a producer's whole result read by a red consumer
    (:mod:`.locality`); ``types`` remembers the kernels' mapping types
    (:class:`.database.ProfileDB`: derived from the TIR once). After it ran, ``blocks``
    holds the plan of the last module it fused.
    """

    def __init__(self, decide: Decide | None = None, max_ops: int = 16,
                 row_budget: int = ROW_BUDGET_BYTES, whole_budget: int = WHOLE_BUDGET_BYTES,
                 types: TypeStore | None = None):
        self.decide = decide
        self.types = types
        self.max_ops = max_ops
        self.row_budget = row_budget
        self.whole_budget = whole_budget
        self.blocks: list[Block] = []

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        """Plan and fuse ``main``'s kernel calls; the fused module."""
        if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
            return mod
        decide = merge = None
        current = [mod]  # the module planned (with its moves copied)
        if self.decide is not None:
            def decide(nodes, candidate, fused_type):
                return self.decide(current[0], nodes, candidate, fused_type)
            if hasattr(self.decide, "merge"):
                def merge(first, second):
                    return self.decide.merge(current[0], first, second)
        # a move read by several kernels is copied into each, where every copy then joins
        # its reader's block; a move one of whose copies would stay a kernel of its own
        # is not copied (the plan is made again without it)
        moves = shared_moves(mod, ECG.of(mod, self.types))
        while True:
            planned = current[0] = duplicate_moves(mod, moves)
            graph = ECG.of(planned, self.types)
            self.blocks = explore(graph, decide, self.max_ops, merge,
                                  self.row_budget, self.whole_budget)
            stranded = _stranded(moves, planned, self.blocks)
            if not stranded:
                break
            moves = [m for m in moves if m not in stranded]
        if moves:
            log.info("DNNFusion: %d moves read by several kernels copied into each",
                     len(moves))
        return fuse_tir(fuse_blocks(planned, self.blocks))

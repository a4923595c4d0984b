"""GCD²'s global selection as a Relax pass: the Hexagon branch of the cocopie pipeline.

Seed 004, §4.4: layout and instruction are chosen for the whole graph before any
operator is compiled. For a Hexagon target, ``tvm.compile(mod, target,
relax_pipeline="cocopie")`` runs :class:`HexagonSelect` in the pipeline's ``layout``
stage:

1. it reads the model's int8 network from Relax operators (the form
   :mod:`.relax_graph` describes, writes and reads);
2. it runs the global selection (:func:`.executor.choose_plans`: cost model, chain DP);
3. it replaces the chain by ``call_tir`` to the HVX-layout TE computes of
   :mod:`tvm_cocopie.topi.int8.hvx` for the chosen variants, the layout transforms
   between them, and the packed weights as constants -- the calls and buffers of the
   static executor's program (:func:`.executor.compile_network`), with its aliases as
   ``reshape`` (views).

The pipeline's ``schedule`` stage then turns each compute into its HVX kernel
(:class:`tvm_cocopie.schedules.hexagon.int8.HexagonInt8`);
:func:`.relax_graph.program_of` reads the result back into a runner program.
"""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from ..errors import TargetError
from ..exprs import static_shape
from .executor.program import choose_plans, compile_network
from .relax_graph import read_network

log = logging.getLogger(__name__)


def check_target(target) -> None:
    """A Hexagon target must have 128-byte HVX (V66 or later) for GCD²'s kernels."""
    mattr = [str(a) for a in (target.attrs.get("mattr") or [])]
    if "+hvx-length128b" not in mattr or not any(a.startswith("+hvxv6") for a in mattr):
        raise TargetError(
            f"the Hexagon pipeline needs 128-byte HVX: mattr {mattr} lacks '+hvxv66' and/or "
            "'+hvx-length128b'. Use tvm_cocopie.target.HEXAGON_V66."
        )


def rewrite(mod, plan: dict | None = None, local: bool = False):
    """``mod`` with ``main``'s int8 conv chain replaced by the selected HVX-layout calls.

    ``plan`` (layer name -> variant) overrides the selection; ``local`` picks each
    layer's cheapest variant alone instead of GCD²'s global selection.
    """
    net = read_network(mod)
    if plan is None:
        plan = choose_plans(net, local=local)
    prog = compile_network(net, plan, schedule=False)
    log.info("Hexagon selection: %s", plan)
    param = mod["main"].params[0]
    x = relax.Var(param.name, param.ty)
    bb = relax.BlockBuilder()

    def storage(name):
        while name in prog.aliases:
            name = prog.aliases[name]
        return name

    env = {"image": x}
    with bb.function("main", [x]):
        with bb.dataflow():
            for i, (fname, args) in enumerate(prog.calls):
                func = prog.funcs[fname]
                gv = bb.add_func(func.without_attr("global_symbol"), fname)
                ins = []
                for arg, buf in zip(args[:-1], func.params[:-1]):
                    shape = tuple(int(d) for d in buf.shape)
                    if arg in prog.inputs and arg != "image":
                        value = prog.inputs[arg].reshape(shape)  # relax.const makes int64 int32
                        ins.append(relax.const(value, str(value.dtype)))
                        continue
                    v = env[storage(arg)]
                    if tuple(static_shape(v)) != shape:
                        v = bb.emit(relax.op.reshape(v, shape))
                    ins.append(v)
                out = func.params[-1]
                out_ty = relax.TensorType([int(d) for d in out.shape], str(out.dtype))
                call = relax.call_tir(gv, ins, out_ty)
                last = i == len(prog.calls) - 1
                env[storage(args[-1])] = bb.emit_output(call) if last else bb.emit(call)
        bb.emit_func_output(env[storage(prog.output)])
    new = bb.get()
    for gv, func in mod.functions_items():
        if gv.name_hint != "main":
            new[gv] = func
    return new


class HexagonSelect:
    """The Relax module pass of the pipeline's ``layout`` stage (see the module doc)."""

    def __new__(cls, local: bool = False):
        @tvm.transform.module_pass(opt_level=0, name="HexagonSelect")
        def _select(mod, _ctx):
            return rewrite(mod, local=local)

        return _select

"""GCD²'s global selection as a Relax pass: the Hexagon branch of the cocopie pipeline.

Seed 004, §4.4: layout and instruction are chosen for the whole graph before any
operator is compiled. For a Hexagon target, ``tvm.compile(mod, target,
relax_pipeline="cocopie")`` runs :class:`HexagonSelect` in the pipeline's ``layout``
stage:

1. it reads the model's int8 convolution chain from Relax operators
   (:func:`relax_module` writes that form): per layer ``nn.conv2d`` (NHWC, HWIO,
   uint8 x int8 -> int32, dense or depthwise), ``add`` of an int32 bias, and the
   requantization of :class:`~tvm_cocopie.topi.int8_compute.Requant` as ``astype
   int64``, ``multiply``, ``add``, ``right_shift``, ``add``, ``clip(0, 255)``,
   ``astype uint8``;
2. it runs the global selection (:func:`.executor.choose_plans`: cost model, chain DP);
3. it replaces the chain by ``call_tir`` to the HVX-layout TE computes of
   :mod:`tvm_cocopie.topi.int8_hvx` for the chosen variants, the layout transforms
   between them, and the packed weights as constants -- the calls and buffers of the
   static executor's program (:func:`.executor.compile_network`), with its aliases as
   ``reshape`` (views).

The pipeline's ``schedule`` stage then turns each compute into its HVX kernel
(:class:`tvm_cocopie.schedules.hexagon_int8.HexagonInt8`). :func:`program_of` reads a
compiled module back into a runner program, so tests run exactly those PrimFuncs
under ``qemu-hexagon``.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import TargetError, UnsupportedOperatorError
from ..topi.int8_compute import Requant
from .executor import QLayer, QNetwork, choose_plans, compile_network
from .networks import Layer

log = logging.getLogger(__name__)

#: The requantization as Relax operators after the conv and its bias ``add``.
REQUANT_OPS = ("astype", "multiply", "add", "right_shift", "add", "clip", "astype")


# ------------------------------------------------------------------ the Relax form


def _const(value, dtype):
    from tvm import relax

    value = np.asarray(value, dtype=dtype)
    return relax.const(value, dtype) if value.ndim == 0 else relax.const(value)


def emit_qconv(bb, x, q: QLayer):
    """Emit one quantized layer of ``q`` on ``x`` (NHWC uint8); returns the uint8 var."""
    from tvm import relax

    lay = q.layer
    w = q.weights if lay.op == "conv" else q.weights[:, :, None, :]
    acc = bb.emit(
        relax.op.nn.conv2d(
            x, _const(w, "int8"), strides=lay.s, padding=lay.p,
            groups=1 if lay.op == "conv" else lay.c,
            data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32",
        )
    )
    acc = bb.emit(relax.op.add(acc, _const(q.bias, "int32")))
    rq = q.rq
    y = bb.emit(relax.op.astype(acc, "int64"))
    y = bb.emit(relax.op.multiply(y, _const(rq.multiplier, "int64")))
    y = bb.emit(relax.op.add(y, _const(1 << (rq.shift - 1), "int64")))
    y = bb.emit(relax.op.right_shift(y, _const(rq.shift, "int64")))
    y = bb.emit(relax.op.add(y, _const(rq.zero_point, "int64")))
    y = bb.emit(relax.op.clip(y, 0, 255))
    return relax.op.astype(y, "uint8")


def relax_module(net: QNetwork):
    """The quantized chain ``net`` as a Relax module ``main(image: uint8 NHWC)``."""
    from tvm import relax

    first = net.layers[0].layer
    x = relax.Var("image", relax.TensorType((1, first.h, first.w, first.c), "uint8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            cur = x
            for i, q in enumerate(net.layers):
                expr = emit_qconv(bb, cur, q)
                cur = bb.emit_output(expr) if i == len(net.layers) - 1 else bb.emit(expr)
        bb.emit_func_output(cur)
    return bb.get()


# ------------------------------------------------------------------ reading it back


def _op_name(expr) -> str:
    from tvm import relax

    if isinstance(expr, relax.Call) and hasattr(expr.op, "name"):
        return str(expr.op.name).removeprefix("relax.")
    return type(expr).__name__


def _scalar(expr, what: str) -> int:

    if not isinstance(expr, _constant_type()) or _array(expr).size != 1:
        raise UnsupportedOperatorError(f"{what} must be a scalar constant, got {expr}")
    return int(_array(expr).reshape(()))


def _shape(var) -> tuple:
    return tuple(int(d) for d in var.ty.shape)


class _Chain:
    """Walks the bindings of ``main`` from its input, one consumer at a time."""

    def __init__(self, func):
        from tvm import relax

        self.values, self.users, self.order = {}, {}, []
        for block in func.body.blocks:
            for b in block.bindings:
                if not isinstance(b, relax.VarBinding):
                    raise UnsupportedOperatorError(f"{b.var.name}: a match_cast binding")
                self.values[b.var] = b.value
                self.order.append(b.var)
                for arg in getattr(b.value, "args", []):
                    if isinstance(arg, relax.Var):
                        self.users.setdefault(arg, []).append(b.var)
        self.used = set()

    def next(self, cur, op: str):
        users = self.users.get(cur, [])
        if len(users) != 1:
            raise UnsupportedOperatorError(
                f"{cur.name} is read {len(users)} times; the Hexagon pipeline compiles "
                "int8 conv chains (no branches or residual adds yet)"
            )
        var = users[0]
        call = self.values[var]
        if _op_name(call) != op:
            raise UnsupportedOperatorError(
                f"{var.name} = {_op_name(call)}(...) where the int8 conv pattern "
                f"expects {op} (conv2d, add bias, then {', '.join(REQUANT_OPS)})",
                {_op_name(call): 1},
            )
        self.used.add(var)
        return var, call


def _layer(chain: _Chain, cur, index: int):
    """``(QLayer, output var)`` of the quantized conv reading ``cur``."""
    var, conv = chain.next(cur, "nn.conv2d")
    a = conv.attrs
    name = f"{var.name}_{index}"
    n, h, w, c = _shape(cur)
    weights = conv.args[1]
    problems = []
    if str(a.data_layout) != "NHWC" or str(a.kernel_layout) != "HWIO":
        problems.append(f"layouts {a.data_layout}/{a.kernel_layout} (need NHWC/HWIO)")
    if str(a.out_dtype) != "int32" or str(cur.ty.dtype) != "uint8":
        problems.append(f"dtypes {cur.ty.dtype} -> {a.out_dtype} (need uint8 -> int32)")
    if not isinstance(weights, _constant_type()) or str(_array(weights).dtype) != "int8":
        problems.append("weights that are not an int8 constant")
    pads, strides = [int(p) for p in a.padding], [int(s) for s in a.strides]
    if len(set(pads)) != 1 or len(set(strides)) != 1 or any(int(d) != 1 for d in a.dilation):
        problems.append(f"padding {pads}, strides {strides}, dilation {list(a.dilation)}")
    if n != 1:
        problems.append(f"batch {n}")
    if problems:
        raise UnsupportedOperatorError(
            f"{var.name}: conv2d with {'; '.join(problems)} is not supported on Hexagon"
        )
    wt = _array(weights)
    kh, kw, ci, o = wt.shape
    groups = int(a.groups)
    if kh != kw or not (groups == 1 or (groups == c == o and ci == 1)):
        raise UnsupportedOperatorError(
            f"{var.name}: a {kh}x{kw} conv with {groups} groups; Hexagon runs square "
            "dense or depthwise convolutions"
        )
    op = "conv" if groups == 1 else "dwconv"
    lay = Layer(name, op, (), h, w, c, o, kh, strides[0], pads[0])
    var, add = chain.next(var, "add")
    bias = add.args[1]
    if not isinstance(bias, _constant_type()) or _array(bias).shape != (o,):
        raise UnsupportedOperatorError(f"{var.name}: the bias must be an int32 [{o}] constant")
    rq_args = []
    for op_name in REQUANT_OPS:
        var, call = chain.next(var, op_name)
        if op_name in ("multiply", "add", "right_shift"):
            rq_args.append(_scalar(call.args[1], f"{var.name}'s {op_name} operand"))
        elif op_name == "clip":
            bounds = [int(v.value) for v in call.args[1:]]
            if bounds != [0, 255]:
                raise UnsupportedOperatorError(f"{var.name}: clip{bounds}, need [0, 255]")
    m, rounding, shift, zp = rq_args
    if rounding != 1 << (shift - 1):
        raise UnsupportedOperatorError(
            f"{var.name}: rounding constant {rounding} is not 2**(shift-1) = {1 << (shift - 1)}"
        )
    weights_np = wt if op == "conv" else wt[:, :, 0, :]
    rq = Requant(m, shift, zp)
    return QLayer(lay, weights_np, _array(bias).astype(np.int32), rq), var


def _constant_type():
    import tvm

    return tvm.ir.GenericConst


def _array(const) -> np.ndarray:
    return const.value.numpy()


def read_network(func) -> QNetwork:
    """The quantized conv chain of a Relax function written as :func:`relax_module` does."""
    if len(func.params) != 1:
        raise UnsupportedOperatorError(
            f"main takes {len(func.params)} inputs; the Hexagon pipeline compiles one image input"
        )
    chain = _Chain(func)
    cur = func.params[0]
    layers = []
    out = func.body.body
    while not cur.same_as(out) and chain.users.get(cur):
        q, cur = _layer(chain, cur, len(layers))
        layers.append(q)
    left = [v for v in chain.order if v not in chain.used]
    if left or not cur.same_as(out) or not layers:
        ops = {}
        for v in left:
            ops[_op_name(chain.values[v])] = ops.get(_op_name(chain.values[v]), 0) + 1
        raise UnsupportedOperatorError(
            f"the Hexagon pipeline compiles int8 conv chains; not compiled: {ops or 'no conv'}",
            ops,
        )
    return QNetwork(layers, None, 1.0, 1.0)


# ------------------------------------------------------------------ the pass


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
    from tvm import relax

    net = read_network(mod["main"])
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
                        ins.append(relax.const(prog.inputs[arg].reshape(shape)))
                        continue
                    v = env[storage(arg)]
                    if _shape(v) != shape:
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
        import tvm

        @tvm.transform.module_pass(opt_level=0, name="HexagonSelect")
        def _select(mod, _ctx):
            return rewrite(mod, local=local)

        return _select


# ------------------------------------------------------------------ back to a program


def program_of(mod) -> tuple:
    """``(funcs, calls, inputs, output, aliases)`` of a rewritten (and possibly
    scheduled) module: the PrimFuncs ``main`` calls, in order, constants as inputs, and
    each reshape as an alias of its source (give :func:`.executor.plan_memory`'s
    offsets to :func:`.runner.run`)."""
    from tvm import relax

    mod = relax.transform.RewriteDataflowReshape()(mod)  # legalized reshapes are views
    func = mod["main"]
    names, inputs, funcs, calls, aliases = {func.params[0]: "image"}, {}, {}, [], {}

    def name_of(expr):
        if isinstance(expr, _constant_type()):
            key = f"const{len(inputs)}"
            inputs[key] = _array(expr)
            return key
        return names[expr]

    for block in func.body.blocks:
        for b in block.bindings:
            value = b.value
            op = _op_name(value)
            if op == "reshape":
                names[b.var] = b.var.name
                aliases[b.var.name] = names[value.args[0]]
            elif op == "call_tir":
                gv, args = value.args[0], value.args[1]
                names[b.var] = b.var.name
                funcs[gv.name_hint] = mod[gv]
                calls.append((gv.name_hint, [name_of(a) for a in args.fields] + [b.var.name]))
            else:
                raise UnsupportedOperatorError(f"{b.var.name}: {op} in a rewritten module")
    return funcs, calls, inputs, names[func.body.body], aliases

"""Small graphs generated from a rule's :class:`~.rule.Example`, for tests and the
benchmark: the rule's left side with inputs and constants of the requested kinds."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .rule import Example, Rule
from .terms import Term, get_op

#: default attribute-carrying builders, by op name
DEFAULT_OPS = {
    "sum": lambda x: relax.op.sum(x, axis=[1]),
    "prod": lambda x: relax.op.prod(x, axis=[1]),
    "mean": lambda x: relax.op.mean(x, axis=[1]),
    "max": lambda x: relax.op.max(x, axis=[1]),
    "min": lambda x: relax.op.min(x, axis=[1]),
    "nn.max_pool2d": lambda x: relax.op.nn.max_pool2d(x, 2, 2),
    "nn.avg_pool2d": lambda x: relax.op.nn.avg_pool2d(x, 2, 2),
    "permute_dims": lambda x: relax.op.permute_dims(x),
}

_SCALARS = {"s": None, "s_pos": (0.5, 2.0), "s_neg": (-2.0, -0.5), "s_huge": 3e38,
            "s_neghuge": -3e38, "s_tiny": 1e-39, "s_shift": 3}


def _value(kind: str, shape, dtype: str, rng) -> np.ndarray:
    if kind == "int":
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    if kind in ("in", "c", "nonneg", "s"):
        return rng.standard_normal(shape).astype(dtype)
    if kind in ("in_pos", "c_pos", "s_pos"):
        return rng.uniform(0.5, 2.0, size=shape).astype(dtype)
    if kind in ("c_neg", "s_neg"):
        return rng.uniform(-2.0, -0.5, size=shape).astype(dtype)
    if kind in _SCALARS:
        return np.full(shape, _SCALARS[kind], dtype=dtype)
    raise ValueError(f"unknown leaf kind {kind!r}")


def _spec(ex: Example, name: str, consts=()):
    spec = ex.leaves.get(name, "c" if name in consts else "in")
    if isinstance(spec, str):
        shape = () if spec.startswith("s") else ex.shape
        return spec, shape, ex.dtype
    kind, shape = spec[0], tuple(spec[1])
    return kind, shape, spec[2] if len(spec) > 2 else ex.dtype


def build_example(rule: Rule, example: Example | None = None, seed: int = 0):
    """``(IRModule, {input name: array})`` with ``rule``'s left side as ``main``."""
    ex = example or rule.example
    rng = np.random.default_rng(seed)
    lhs = ex.lhs if ex.lhs is not None else rule.lhs
    if lhs is None:  # custom matcher: a single op on X, built by Example.ops
        lhs = Term("op", next(iter(ex.ops)), rule.root_ops()[0], (Term("var", "X"),))
    names = sorted(set(ex.leaves) | ({t.name for t in lhs.leaves() if t.name and not t.name.startswith("_")}
                                     if isinstance(lhs, Term) else set()))
    consts = {t.name for t in lhs.leaves() if t.kind == "const"} if isinstance(lhs, Term) else ()
    params, inputs, env = [], {}, {}
    pre = []
    for name in names:
        kind, shape, dtype = _spec(ex, name, consts)
        arr = _value(kind, shape, dtype, rng)
        if kind.startswith(("in", "nonneg", "int")):
            var = relax.Var(name, relax.TensorType(list(shape), dtype))
            params.append(var)
            inputs[name] = arr
            env[name] = var
            if kind == "nonneg":
                pre.append(name)
        else:
            env[name] = relax.const(arr, dtype)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            for name in pre:
                env[name] = bb.emit(relax.op.abs(env[name]))
            if callable(lhs) and not isinstance(lhs, Term):
                out = bb.emit(lhs(env))
            else:
                out = _emit(bb, lhs, env, ex, {}, np.dtype(ex.dtype))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get(), inputs


def _op_fn(name: str):
    """``relax.op.nn.conv2d`` for ``"nn.conv2d"``: the builder with default attributes."""
    fn = relax.op
    for part in name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            return None
    return fn


def _emit(bb, t: Term, env, ex: Example, memo, dtype):
    if t in memo:
        return memo[t]
    if t.kind in ("var", "const"):
        if t.name == "_":
            raise ValueError("wildcard leaves need an Example.ops builder for their op")
        return env[t.name]
    if t.kind == "value":
        return relax.const(np.asarray(t.value, dtype=dtype), str(dtype))
    if t.kind == "tgi":
        inner = _emit(bb, t.args[0], env, ex, memo, dtype)
        out = bb.emit(relax.TupleGetItem(inner, t.index))
        memo[t] = out
        return out
    args = [_emit(bb, a, env, ex, memo, dtype) for a in t.args
            if not (a.kind == "var" and (a.name or "").startswith("_"))
            and not (a.kind == "var" and a.name == "shape")]
    maker = ex.ops.get(t.name) or ex.ops.get(t.op) or DEFAULT_OPS.get(t.op) or _op_fn(t.op)
    call = maker(*args) if maker is not None else relax.Call(get_op(t.op), args)
    out = bb.emit(call)
    memo[t] = out
    return out


def run(mod: tvm.IRModule, inputs: dict, target="llvm") -> list[np.ndarray]:
    """Build ``mod`` with the stock pipeline and run ``main`` on ``inputs``."""
    ex = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    params = [p.name for p in mod["main"].params]
    out = vm["main"](*[tvm.runtime.tensor(inputs[n]) for n in params])
    outs = out if isinstance(out, (list, tuple)) or hasattr(out, "__len__") and \
        not hasattr(out, "numpy") else [out]
    return [o.numpy() for o in outs]

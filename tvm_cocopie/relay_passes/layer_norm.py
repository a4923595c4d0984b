"""Layer norms written out op by op, recognized as one ``nn.layer_norm``.

ONNX exporters before opset 17 (PyTorch's, Paddle's: PP-OCR's recognizer neck) write a
layer norm over the last axis as ``ReduceMean``, ``Sub``, ``Pow``, ``ReduceMean``,
``Add``, ``Sqrt``, ``Div``, ``Mul``, ``Add``. Imported so, it is nine operators that
fusion makes two or three kernels of, and DNNFusion cannot take it as a matmul's row
prologue (its statistics are not one pass over the row). The chain::

    d = x - mean(x, axis=-1, keepdims)
    v = mean(d ** 2  or  d * d, axis=-1, keepdims)
    y = d / sqrt(v + eps)  or  d * rsqrt(v + eps)
    [y * gamma] [+ beta]

becomes ``nn.layer_norm(x, gamma, beta, axes=[-1], epsilon=eps)`` (``gamma`` ones and
``beta`` zeros where the chain has none), the same arithmetic (TVM's layer norm takes the
mean, then the mean of the squared deviations), legalized as the one row kernel
(:func:`~tvm_cocopie.topi.cpu.fast_math.row_layer_norm`). Taken when ``x`` is float32
with a static last axis (the others may be symbolic), ``eps`` a scalar constant, ``gamma`` and ``beta`` constants of
that axis' length (or broadcasting to it), and every intermediate read only by the
chain; otherwise the ops stay as they are.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax

from ..exprs import batched_shape, const_np, float_scalar, is_constant, op_name, var_uses

log = logging.getLogger(__name__)


def _row_mean(call, rank: int) -> bool:
    """Whether ``call`` is a ``mean`` over the last axis, keeping it."""
    if op_name(call) != "mean" or not bool(call.attrs.keepdims):
        return False
    axes = [int(a) for a in (call.attrs.axis or [])]
    return len(axes) == 1 and axes[0] in (-1, rank - 1)


def _row_vector(expr, n: int) -> np.ndarray | None:
    """A constant that broadcasts along the last axis only (shape ``[n]``, or ones
    before it), as a float32 vector of length ``n``."""
    if not is_constant(expr):
        return None
    value = const_np(expr)
    if value.dtype != np.float32 or not value.shape or value.shape[-1] != n \
            or any(d != 1 for d in value.shape[:-1]):
        return None
    return np.ascontiguousarray(value.reshape(n))


class _Chains:
    """The layer-norm chains of one function: ``{var of the chain's last binding:
    (x, gamma, beta, eps)}``."""

    def __init__(self, func: relax.Function):
        self.values: dict = {}
        self.users: dict = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                self.values[binding.var] = binding.value
                if isinstance(binding.value, relax.Call):
                    for arg in binding.value.args:
                        if isinstance(arg, relax.Var):
                            self.users.setdefault(arg, []).append(binding.var)
        self.uses = var_uses(func)
        self.found: dict = {}
        for var in self.values:
            chain = self._chain(var)
            if chain is not None:
                self.found[chain[0]] = chain[1:]

    def _call(self, var, name: str):
        """The ``name`` call ``var`` is bound to, if read once (by the chain)."""
        value = self.values.get(var) if isinstance(var, relax.Var) else None
        if op_name(value) != name or self.uses.get(var, 0) != 1:
            return None
        return value

    def _inverse_deviation(self, var):
        """``(the root's op, v, eps)`` of ``sqrt(v + eps)`` (or ``rsqrt``) bound to
        ``var``, the normalization's divisor (``rsqrt``: its factor), or ``None``."""
        for name in ("sqrt", "rsqrt"):
            root = self._call(var, name)
            if root is None:
                continue
            plus = self._call(root.args[0], "add")
            if plus is None:
                return None
            v, eps = plus.args
            if float_scalar(eps) is None:
                v, eps = eps, v
            if float_scalar(eps) is None:
                return None
            return name, v, float_scalar(eps)
        return None

    def _chain(self, var):
        """``(last var, x, gamma, beta, eps)`` of the chain whose normalization is
        bound to ``var``, or ``None``."""
        value = self.values[var]
        name = op_name(value)
        if name not in ("divide", "multiply"):
            return None
        d, r = value.args
        inverse = self._inverse_deviation(r)
        if inverse is None and name == "multiply":
            d, r = r, d
            inverse = self._inverse_deviation(r)
        if inverse is None or (inverse[0] == "sqrt") != (name == "divide"):
            return None
        _, v, eps = inverse
        centre = self.values.get(d) if isinstance(d, relax.Var) else None
        if op_name(centre) != "subtract":
            return None
        x, m = centre.args
        rank = int(getattr(x.ty, "ndim", -1))
        shape = batched_shape(x, tuple(range(rank - 1))) if rank >= 1 else None
        if shape is None or str(x.ty.dtype) != "float32" or not isinstance(shape[-1], int):
            return None  # leading dims may be symbolic (a run-time sequence), not the row
        n = shape[-1]
        mean = self._call(m, "mean")
        if mean is None or not _row_mean(mean, rank) or not mean.args[0].same_as(x):
            return None
        variance = self._call(v, "mean")
        if variance is None or not _row_mean(variance, rank):
            return None
        square = self.values.get(variance.args[0])
        if self.uses.get(variance.args[0], 0) != 1:
            return None
        if op_name(square) == "power" and float_scalar(square.args[1]) == 2.0 \
                and square.args[0].same_as(d):
            reads = 2  # d is read by the square and the normalization
        elif op_name(square) == "multiply" and square.args[0].same_as(d) \
                and square.args[1].same_as(d):
            reads = 3  # twice by d * d
        else:
            return None
        if self.uses.get(d, 0) != reads or self.uses.get(var, 0) < 1:
            return None
        last, gamma, beta = var, None, None
        scaled = self._next(last, "multiply")
        if scaled is not None:
            gamma = _row_vector(self._other(scaled, last), n)
            if gamma is not None:
                last = scaled
        shifted = self._next(last, "add")
        if shifted is not None:
            beta = _row_vector(self._other(shifted, last), n)
            if beta is not None:
                last = shifted
        ones = np.ones(n, np.float32) if gamma is None else gamma
        zeros = np.zeros(n, np.float32) if beta is None else beta
        return last, x, ones, zeros, eps

    def _next(self, var, name: str):
        """The var of the one binding reading ``var``, if it is a ``name`` call."""
        users = self.users.get(var, [])
        if self.uses.get(var, 0) != 1 or len(users) != 1:
            return None
        return users[0] if op_name(self.values[users[0]]) == name else None

    def _other(self, var, operand):
        """The argument of ``var``'s binary call that is not ``operand``."""
        a, b = self.values[var].args
        return b if a.same_as(operand) else a


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.chains: dict = {}
        self.count = 0

    def visit_var_binding_(self, binding):
        chain = self.chains.get(binding.var)
        if chain is None:
            super().visit_var_binding_(binding)
            return
        x, gamma, beta, eps = chain
        call = relax.op.nn.layer_norm(x, relax.const(gamma), relax.const(beta), axes=[-1],
                                      epsilon=eps)
        self.count += 1
        super().visit_var_binding_(relax.VarBinding(binding.var, call))

    def run(self, func: relax.Function) -> relax.Function:
        self.chains = _Chains(func).found
        return self.visit_expr(func)


@tvm.transform.module_pass(opt_level=0, name="DecomposedLayerNorms")
def decomposed_layer_norms(mod: tvm.IRModule, _ctx=None) -> tvm.IRModule:
    """The module docstring's chains as ``nn.layer_norm`` calls in every Relax function
    of ``mod`` (the replaced ops dropped as dead code)."""
    rewriter = _Rewriter(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.run(func))
    if not rewriter.count:
        return mod
    log.debug("%d layer norms written out op by op as nn.layer_norm", rewriter.count)
    return relax.transform.DeadCodeElimination()(rewriter.builder_.get())

"""Scaled dot-product attention chains given one kernel.

``matmul(softmax(matmul(q [* c], kt) [* c | / c], axis=-1), v)`` (the form ONNX exporters
write for BERT, ViT and the OCR recognizers' transformer blocks) becomes one call of the
attention kernel (:mod:`tvm_cocopie.topi.cpu.attention`): the scores and probabilities
never leave the cache, the softmax's row reductions run on the rows just computed.
A ``q``, ``kt`` or ``v`` made by view ops used only there (``permute_dims``, ``squeeze``
of unit axes, ``reshape``, a part of a ``split``: the heads split off a projection, ``K``
transposed, a fused QKV projection's parts) is read through by the kernel instead of
copied, and a ``permute_dims`` of its result (the heads merged
back) is written by the kernel's store. The
chain is taken when the scores and probabilities have no other use, shapes are
float32 with equal batch dims (no broadcast), static but for the sequence lengths (S and
T may be symbolic: an encoder over a run-time sequence), the scale is a positive scalar constant,
the key length is at least two vectors and the value width whole vectors; otherwise it
is left to the separate kernels. It runs at the start of the ``legalize`` stage; a
following ``DeadCodeElimination`` drops the replaced bindings.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import relax

from ..exprs import batched_shape, float_scalar, is_constant, op_name, var_uses
from ..target import cpu_info
from ..topi.cpu.attention import View, attention, attention_tile
from .fusion.plan import ALONE

log = logging.getLogger(__name__)

#: the kernel's ``op_pattern``: opaque to stock fusion (its schedule is the kernel's own;
#: DNNFusion is told by :data:`~.fusion.plan.ALONE`)
OPAQUE = 8


def _dims(expr) -> list | None:
    """The shape of ``expr``: ints, and TIR expressions for symbolic dims (a sequence of
    run-time length); ``None`` without a shape."""
    ndim = getattr(getattr(expr, "ty", None), "ndim", -1)
    return batched_shape(expr, tuple(range(ndim))) if ndim >= 0 else None


def _same(a, b) -> bool:
    """Two dims (ints or TIR expressions) are equal for every size."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) or isinstance(b, int):
        return False
    return bool(tvm_ffi.structural_equal(a, b))


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


@relax.expr_functor.mutator
class _AttentionRewriter(relax.PyExprMutator):
    def __init__(self, mod, lanes: int):
        super().__init__(mod)
        self.lanes = lanes
        self.uses: dict = {}
        self.count = 0
        #: the kernel calls made: (call, (sources, views, scale, tile, out_axes))
        self.made: list = []

    def _value(self, var):
        """The value ``var`` is bound to, if it is a binding of this function."""
        try:
            return self.lookup_binding(var)
        except Exception:  # noqa: BLE001 - not a binding of this function
            return None

    def _single_use_value(self, var):
        """The value ``var`` is bound to, if it is a binding of this function read once."""
        if not isinstance(var, relax.Var) or self.uses.get(var, 0) != 1:
            return None
        return self._value(var)

    def _bound(self, var, name: str):
        """The call ``var`` is bound to if it is a ``name`` call with one use."""
        value = self._single_use_value(var)
        return value if value is not None and op_name(value) == name else None

    def _scores(self, var):
        """``(q, kt, scale)`` of the scores ``var`` (a matmul, maybe scaled)."""
        mm = self._bound(var, "matmul")
        if mm is not None:
            return mm.args[0], mm.args[1], 1.0
        for name in ("multiply", "divide"):
            call = self._bound(var, name)
            if call is None:
                continue
            lhs, rhs = call.args
            c = float_scalar(rhs)
            if c is None and name == "multiply":
                lhs, c = rhs, float_scalar(lhs)
            mm = self._bound(lhs, "matmul")
            if c is None or mm is None or c <= 0:
                return None
            return mm.args[0], mm.args[1], c if name == "multiply" else 1.0 / c
        return None

    def _scaled(self, var):
        """``(x, c)`` when ``var`` is ``x * c`` (single use, positive scalar constant)."""
        call = self._bound(var, "multiply")
        if call is None:
            return None
        for x, c in (call.args, call.args[::-1]):
            value = float_scalar(c)
            if value is not None and value > 0 and not is_constant(x):
                return x, value
        return None

    def _view(self, var):
        """``(x, View)``: the operand ``var`` read through the view ops it is made by
        (single-use ``permute_dims``, ``squeeze`` of unit axes, ``reshape``, a part of a
        ``split``) from ``x``, with no copy kernel; ``(var, None)`` when none."""
        shape = _dims(var)
        steps, source = [], var
        while True:
            step = self._view_step(source)
            if step is None:
                break
            source, entry = step
            steps.append(entry)
        if not steps or shape is None:
            return var, None
        # a symbolic dim must be a plain variable of the tensor read (the kernel maps the
        # view's dims to its own variables by name): else the operand is copied
        source_dims = _dims(source) or []
        names = {str(n.name) for n in source_dims if isinstance(n, tvm.tirx.Var)}
        dims = [*shape, *(n for kind, *rest in steps if kind == "reshape" for n in rest[0])]
        if any(not isinstance(n, int) and not (isinstance(n, tvm.tirx.Var)
                                               and str(n.name) in names) for n in dims):
            return var, None
        return source, View(tuple(shape), tuple(steps))

    def _view_step(self, var):
        """``(input, step)`` for a view op ``var`` is bound to (see :class:`View`)."""
        perm = self._bound(var, "permute_dims")
        if perm is not None and _dims(perm.args[0]) is not None:
            rank = len(_dims(perm.args[0]))
            axes = perm.attrs.axes
            axes = tuple(range(rank))[::-1] if axes is None else tuple(int(a) for a in axes)
            return perm.args[0], ("permute", axes)
        sq = self._bound(var, "squeeze")
        if sq is not None and sq.attrs.axis is not None and _dims(sq.args[0]):
            shape = _dims(sq.args[0])
            axes = tuple(int(a) % len(shape) for a in sq.attrs.axis)
            if all(_same(shape[a], 1) for a in axes):
                return sq.args[0], ("squeeze", axes)
        rs = self._bound(var, "reshape")
        if rs is not None and _dims(rs.args[0]) is not None:
            return rs.args[0], ("reshape", tuple(_dims(rs.args[0])))
        return self._split_part(var)

    def _split_part(self, var):
        """``(input, ("offset", axis, begin, extent))`` for ``var = split(input, ...)[k]``."""
        item = self._single_use_value(var)
        if not isinstance(item, relax.TupleGetItem):
            return None
        split = self._value(item.tuple_value)
        if split is None or op_name(split) != "split":
            return None
        shape = _dims(split.args[0])
        if shape is None:
            return None
        axis = int(split.attrs.axis) % len(shape)
        if not isinstance(shape[axis], int):
            return None
        sections = split.attrs.indices_or_sections
        if isinstance(sections, tvm.tirx.IntImm | int):
            begin = item.index * (shape[axis] // int(sections))
        else:
            bounds = [0, *(int(i) for i in sections)]
            begin = bounds[item.index]
        return split.args[0], ("offset", axis, begin, shape[axis])

    def visit_call_(self, call):
        new = super().visit_call_(call)
        name = op_name(new)
        replacement = None
        if name == "matmul":
            replacement = self._attention(new)
        elif name == "permute_dims":
            replacement = self._permuted_result(new)
        return new if replacement is None else replacement

    def _permuted_result(self, call):
        """A single-use attention result permuted: the kernel again, storing permuted."""
        bound = self._single_use_value(call.args[0])
        made = next((m for c, m in self.made if bound is not None and c.same_as(bound)), None)
        if made is None or made[-1] is not None or call.attrs.axes is None:
            return None
        axes = [int(a) for a in call.attrs.axes]
        if axes[-1] != len(axes) - 1:
            return None  # the value width stays innermost: the store's vectors
        return self._emit(*made[:-1], axes)

    def _emit(self, sources, views, scale, tile, out_axes=None):
        out = self.builder_.call_te(
            lambda a, b, c: attention(a, b, c, scale, tile, views, out_axes), *sources,
            primfunc_name_hint="attention",
            primfunc_attrs={"op_pattern": OPAQUE, ALONE: True, "attention_rows": tile.rows,
                            "attention_cols": tile.cols})
        self.made.append((out, (sources, views, scale, tile, out_axes)))
        return out

    def _attention(self, call):
        probs, v = call.args
        sm = self._bound(probs, "nn.softmax")
        if sm is None:
            return None
        found = self._scores(sm.args[0])
        if found is None:
            return None
        q, kt, scale = found
        pre = self._scaled(q)  # ViT scales q before the product: fold it into the kernel
        if pre is not None:
            q, scale = pre[0], scale * pre[1]
        # S and T may be symbolic (an encoder over a run-time sequence); the batch and
        # head dims, the head width D and the value width E are static
        shapes = [_dims(x) for x in (q, kt, v)]
        if any(s is None or len(s) < 3 for s in shapes):
            return None
        qs, ks, vs = shapes
        rank = len(qs)
        if int(sm.attrs.axis) not in (-1, rank - 1) or len(ks) != rank or len(vs) != rank:
            return None
        fixed = [*qs[:-2], qs[-1], vs[-1]]
        if not all(isinstance(n, int) for n in fixed):
            return None
        if not (_same_dims(qs[:-2], ks[:-2]) and _same_dims(qs[:-2], vs[:-2])) or \
                not _same(qs[-1], ks[-2]) or not _same(ks[-1], vs[-2]):
            return None
        if any(str(x.ty.dtype) != "float32" for x in (q, kt, v)):
            return None
        t, e = ks[-1], vs[-1]
        if (isinstance(t, int) and t < 2 * self.lanes) or e % self.lanes:
            return None
        sources, views = zip(*(self._view(x) for x in (q, kt, v)), strict=True)
        tile = attention_tile(self.lanes)
        self.count += 1
        return self._emit(sources, views, scale, tile)

    def run(self, func: relax.Function) -> relax.Function:
        self.uses = var_uses(func)
        return self.visit_expr(func)


def attention_kernels(target: tvm.target.Target) -> tvm.transform.Pass:
    """The pass of the module doc for a CPU ``target``."""
    lanes = cpu_info(target).f32_lanes

    @tvm.transform.module_pass(opt_level=0, name="AttentionKernels")
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        rewriter = _AttentionRewriter(mod, lanes)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.run(func))
        if not rewriter.count:
            return mod
        log.debug("%d attention chains as one kernel", rewriter.count)
        out = rewriter.builder_.get()
        return relax.transform.DeadCodeElimination()(out)

    return _pass

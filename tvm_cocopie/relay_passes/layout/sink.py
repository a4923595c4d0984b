"""Move ``where``, channel slices and concats into the blocked layout where
``ConvertLayout`` left them outside.

TVM 0.27 has no layout-inference rule for ``where``, and its rule for
``strided_slice`` returns a channel slice to NCHW, so ``ConvertLayout`` returns their
operands to NCHW and the results back to NCHW[x]c: feature-map ``layout_transform``
kernels around every ``where`` (the exact ``log1p`` of Softplus/Mish) and every
channel split (YOLO's C2f and CSP blocks, ShuffleNet), and the ``concat`` after the
slices then runs in NCHW as well; nearest upsampling, imported as ``take`` along H
and W (which has no layout rule), leaves it before a neck's ``concat``. With ``U`` the unblocking transform and ``T`` its
inverse, the transforms commute with these operators::

    w = where(U(c), U(a), s)               wb = where(c, a, s)
    y = T(w)                   ==>         y  = wb
    v = strided_slice(U(x), C, b, e)       vb = strided_slice(x, C/k, b/k, e/k)
    z = concat((U(x1), U(x2)), C)          zb = concat((x1, x2), C/k)
    u = take(U(x), idx, H or W)            ub = take(x, idx, H or W)
    s = shuffle(U(x))                      sb = P(x)  (one transform: the permutation)
    m = match_cast(U(x), (N, C, h, w))     mb = match_cast(x, (N, C/k, h, w, k))
    a = add(U(x1), U(x2)) (and the other   ab = add(x1, x2)
        same-shape element-wise binaries)

when every non-scalar operand is ``U`` of a tensor blocked by the same ``k`` and the
channel bounds are multiples of ``k`` (spatial dims may be symbolic: with symbolic H and
W a detector's neck casts each upsampled level to its neighbour's shape, and
``ConvertLayout`` left the cast, the add after it and the next upsampling in NCHW: six
feature-map transforms a call in PP-OCR det that its static build does not have); the results chain (a slice feeding a concat),
and a remaining use in the original layout gets ``U(result)`` instead. Runs after
``ConvertLayout``; dead-code elimination then drops the transforms no one reads.
Not covered: a ``where`` whose consumers ``ConvertLayout`` already placed in NCHW
(ELU before a global pool keeps one transform out of the blocked layout there).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax, tirx

from ...exprs import op_name

_WHERE = "where"
#: operators sunk as where is: same-shape element-wise ones (no broadcast: one blocked
#: shape, or scalars)
_ELEMENTWISE = (_WHERE, "add", "subtract", "multiply", "divide",
                "maximum", "minimum")
_SLICE = "strided_slice"
_CONCAT = "concat"
_TAKE = "take"
_RESHAPE = "reshape"
_PERMUTE = "permute_dims"
_TRANSFORM = "layout_transform"


def _is_op(expr, name: str) -> bool:
    return op_name(expr) == name


def _scalar(expr) -> bool:
    ty = getattr(expr, "ty", None)
    return isinstance(ty, relax.TensorType) and ty.ndim == 0


def _shape(expr):
    return _type_shape(getattr(expr, "ty", None))


def _type_shape(ty):
    shape = getattr(ty, "shape", None)
    if shape is None or not isinstance(shape, relax.ShapeExpr):
        return None
    # a symbolic dim (a detector's H and W, SOD²) stays an expression: the rewrites only
    # do arithmetic on the channel axes, and compare the others with _same_dims
    return [int(d) if isinstance(d, tirx.IntImm) else d for d in shape.values]


def _same_dims(a, b) -> bool:
    """Two shapes of :func:`_shape` are equal, dim by dim (symbolic ones structurally)."""
    return len(a) == len(b) and all(
        x == y if isinstance(x, int) and isinstance(y, int)
        else tvm_ffi.structural_equal(tirx.const(x, "int64") if isinstance(x, int) else x,
                                     tirx.const(y, "int64") if isinstance(y, int) else y)
        for x, y in zip(a, b))


@relax.expr_functor.mutator
class _Sink(relax.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.unblocks = {}  # var bound to U(blocked) -> (blocked, U, blocked shape)
        self.values = {}  # var -> the value it was bound to in the input
        self.sunk = {}  # var of a sunk operator -> (its blocked result, T)

    def visit_var_binding_(self, binding):
        value = binding.value
        self.values[binding.var] = value
        if _is_op(value, _TRANSFORM) and value.attrs.pad_value is None:
            hit = self.sunk.get(value.args[0])
            if hit is not None and value.attrs.index_map.is_equivalent_to(hit[1]):
                self.set_var_remap(binding.var, hit[0])  # T(U(wb)) is wb
                return
            self._note_unblock(binding.var, value)
        if isinstance(value, relax.Var):  # an alias: it is what it names
            for known in (self.unblocks, self.sunk):
                if value in known:
                    known[binding.var] = known[value]
        method = _SINKS.get(op_name(value))
        if method is not None and isinstance(binding.var, relax.DataflowVar):
            sunk = getattr(self, method)(value)
            if sunk is not None:
                self._bind_sunk(binding.var, *sunk)
                return
        super().visit_var_binding_(binding)

    def visit_match_cast_(self, binding):
        self.values[binding.var] = binding.value
        sunk = (self.sink_match_cast(binding)
                if isinstance(binding.var, relax.DataflowVar) else None)
        if sunk is None:
            super().visit_match_cast_(binding)
        else:
            self._bind_sunk(binding.var, *sunk)

    def _bind_sunk(self, var, blocked, unblock) -> None:
        """``var`` (of the input) is now ``U(blocked)``: bound so, and remembered for the
        operators after it and for a transform back (``T(U(b))`` is ``b``)."""
        shape = _shape(blocked)
        unblocked = self.builder_.emit(relax.op.layout_transform(blocked, unblock))
        self.set_var_remap(var, unblocked)
        self.sunk[var] = (blocked, unblock.inverse(shape))
        self.unblocks[var] = (blocked, unblock, shape)

    def _note_unblock(self, var, value):
        blocked = value.args[0]
        shape = _shape(blocked)
        if isinstance(blocked, relax.Var) and shape is not None and len(shape) > len(
                _shape(value) or shape):
            self.unblocks[var] = (blocked, value.attrs.index_map, shape)

    def _blocked(self, arg):
        """``(blocked tensor, U, blocked shape)`` if ``arg`` is ``U(blocked)``."""
        if isinstance(arg, relax.Var) and arg in self.unblocks:
            blocked, unblock, shape = self.unblocks[arg]
            return self.visit_expr(blocked), unblock, shape
        return None

    def sink_elementwise(self, call):
        """``(the operator over the blocked operands, U)`` for ``where`` and the binary
        element-wise operators whose operands are ``U`` of tensors of one blocked shape
        (or scalars), or ``None``. With symbolic dims an add of two pyramid levels reads
        one through a ``match_cast`` (:meth:`sink_match_cast`), which ``ConvertLayout``
        leaves in NCHW, and the add with it."""
        sources = []
        for arg in call.args:
            src = None if _scalar(arg) else self._blocked(arg)
            if src is None and not _scalar(arg):
                return None
            sources.append(src)
        found = [src for src in sources if src is not None]
        if not found or not _same_blocking(found, same_shape=True):
            return None
        args = [self.visit_expr(arg) if src is None else src[0]
                for arg, src in zip(call.args, sources)]
        make = getattr(relax.op, op_name(call))
        return self.builder_.emit(make(*args)), found[0][1]

    def sink_match_cast(self, binding):
        """``match_cast(U(x), (N, C, h, w))`` as ``U(match_cast(x, (N, C/k, h, w, k)))``:
        the cast of a symbolic model (two shapes equal at run time only) checks the same
        dims in the blocked layout; ``None`` where it cannot."""
        src = self._blocked(binding.value)
        target = _type_shape(binding.ty)
        if src is None or target is None or len(target) != 4 or len(src[2]) != 5:
            return None
        blocked, unblock, shape = src
        block, channels = shape[-1], target[1]
        if not isinstance(block, int) or not isinstance(channels, int) or \
                channels % block or not _same_dims([shape[1]], [channels // block]):
            return None
        ty = relax.TensorType([target[0], channels // block, target[2], target[3], block],
                              binding.ty.dtype)
        return self.builder_.match_cast(blocked, ty), unblock

    def sink_slice(self, call):
        """A block-aligned channel slice of ``U(x)`` as a slice of ``x``, or ``None``."""
        src = self._blocked(call.args[0])
        axes, begin, end = (_tuple_ints(a) for a in call.args[1:4])
        strides = _tuple_ints(call.args[4]) if len(call.args) > 4 else [1]
        if src is None or axes != [1] or strides != [1] or not begin or not end:
            return None
        blocked, unblock, shape = src
        block = shape[-1]
        if not isinstance(block, int) or not isinstance(shape[1], int):
            return None
        begin, end = begin[0], end[0]
        channels = shape[1] * block
        end = min(end, channels)
        if len(shape) != 5 or begin % block or end % block or not 0 <= begin < end:
            return None
        return self.builder_.emit(relax.op.strided_slice(
            blocked, axes=[1], begin=[begin // block], end=[end // block])), unblock

    def sink_concat(self, call):
        """A channel concat of ``U(x_i)`` as a concat of the ``x_i``, or ``None``."""
        fields = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else None
        if fields is None or int(call.attrs.axis) not in (1, -3):
            return None
        sources = [self._blocked(f) for f in fields]
        if any(src is None for src in sources) or not _same_blocking(sources):
            return None
        if any(len(src[2]) != 5 for src in sources):
            return None
        return self.builder_.emit(relax.op.concat([src[0] for src in sources], axis=1)), \
            sources[0][1]

    def sink_take(self, call):
        """A gather along H or W of ``U(x)`` (nearest upsampling) as the same gather of
        ``x`` (the spatial axes keep their place in NCHW[x]c), or ``None``."""
        src = self._blocked(call.args[0])
        axis = int(call.attrs.axis) if call.attrs.axis is not None else None
        if src is None or axis is None or len(src[2]) != 5:
            return None
        axis = axis + 4 if axis < 0 else axis
        if axis not in (2, 3) or getattr(call.args[1], "ty", None) is None or \
                call.args[1].ty.ndim != 1:
            return None
        mode = str(call.attrs.mode) if hasattr(call.attrs, "mode") else "fast"
        return self.builder_.emit(relax.op.take(src[0], self.visit_expr(call.args[1]),
                                                axis=axis, mode=mode)), src[1]

    def sink_channel_shuffle(self, call):
        """ShuffleNet's channel shuffle of ``U(x)``, ``reshape (N, g, C/g, H, W)``,
        ``permute (0, 2, 1, 3, 4)``, ``reshape (N, C, H, W)``, as one transform of ``x``
        to the shuffled blocked tensor: channel ``c = i C/g + j`` goes to ``j g + i``."""
        out = _shape(call)
        permuted = call.args[0]
        perm = self.values.get(permuted)
        if out is None or len(out) != 4 or not _is_op(perm, _PERMUTE):
            return None
        if [int(a) for a in perm.attrs.axes] != [0, 2, 1, 3, 4]:
            return None
        grouped = self.values.get(perm.args[0])
        if not _is_op(grouped, _RESHAPE):
            return None
        split = _shape(grouped)
        src = self._blocked(grouped.args[0])
        if src is None or split is None or len(split) != 5 or len(src[2]) != 5:
            return None
        blocked, unblock, shape = src
        n, groups, per_group, h, w = split
        block = shape[-1]
        if not _same_dims([n, groups * per_group, h, w], out) or \
                not _same_dims([shape[1] * block], [out[1]]):
            return None

        def shuffle(b, cb, y, x, ci):
            c = cb * block + ci
            target = (c % per_group) * groups + c // per_group
            return b, target // block, y, x, target % block

        index_map = tirx.IndexMap.from_func(shuffle, ndim=5)
        return self.builder_.emit(relax.op.layout_transform(blocked, index_map)), unblock


def _tuple_ints(expr) -> list[int] | None:
    """The ints of a Relax tuple of ``PrimValue`` s (a slice's axes and bounds)."""
    try:
        return [int(f.value.value if hasattr(f.value, "value") else f.value)
                for f in expr.fields]
    except (AttributeError, TypeError, ValueError):
        return None


def _same_blocking(sources, same_shape: bool = False) -> bool:
    """The tensors are blocked alike: same ``U``, same block (same shape if asked)."""
    _, unblock, shape = sources[0]
    for _, other, other_shape in sources[1:]:
        if not other.is_equivalent_to(unblock) or not _same_dims(other_shape[-1:], shape[-1:]) or \
                len(other_shape) != len(shape) or (
                    same_shape and not _same_dims(other_shape, shape)):
            return False
    return True


#: operator -> the method of :class:`_Sink` that moves it inside the blocked layout
_SINKS = {
    **{name: "sink_elementwise" for name in _ELEMENTWISE},
    _SLICE: "sink_slice",
    _CONCAT: "sink_concat",
    _TAKE: "sink_take",
    _RESHAPE: "sink_channel_shuffle",
}


@tvm.transform.module_pass(opt_level=0, name="SinkLayoutTransforms")
def sink_layout_transforms(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Apply the rewrite of the module docstring to every Relax function of ``mod``."""
    sink = _Sink(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            sink.builder_.update_func(gvar, sink.visit_expr(func))
    return sink.builder_.get()

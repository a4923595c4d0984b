"""SOD²'s operator classes by shape dynamism (seed 004 §5.3, Table 5.2), for Relax calls.

The thesis sorts operators by what decides their output:

* **ISDO**, *Input Shape Determined Output*: shape *and values* follow from the input
  shapes (and constants): ``Shape``, ``ConstantOfShape``, ``EyeLike``;
* **ISDOS**, *Input Shape Determined Output Shape*: the shape follows from the input
  shapes, the values from the input values: ``Conv``, ``Add``, ``MatMul``, ``Concat``;
* **ISVDOS**, *Input Shape & Value Determined Output Shape*: the shape also reads some
  input *values*: ``Reshape`` by a computed shape, ``Range``, ``Expand``, ``Tile``;
* **EDO**, *Execution Determined Output*: the shape is known only once the output
  exists: ``NonZero``, ``Unique``, ``NonMaxSuppression``, ``If``.

The class of a call is derived from Relax's own semantics where it can be:

* a Relax call receives every value that can decide its output shape as a ``Shape``
  or ``PrimExpr`` argument (its type inference must see them), so a call with such an
  argument that is not known at compile time is ISVDOS -- when that argument does
  decide the shape, which :func:`shape_args` asks Relax's type inference by replacing
  the argument with a fresh one (``clip``'s bounds do not, ``arange``'s do);
* ``call_tir`` / ``call_dps_packed`` kernels write into an output the caller
  allocates: ISDOS when the output type is known at compile time, ISVDOS when it reads
  run-time variables;
* any other operator is ISDOS when Relax infers a complete output shape from input
  shapes alone (:func:`infers_shape`, probed with fresh symbolic dims).

Tables only where Relax cannot tell: the operators that read a *tensor's* values into
a shape (:data:`VALUE_READING`), the execution-determined ones (:data:`EXECUTION`),
ISDO's value generators (:data:`SHAPE_VALUED`, :data:`VALUE_GENERATORS`) and the
broadcasting family (Relax leaves ``N`` against ``M`` unknown, yet ``Add`` is
ISDOS). An operator none of this explains is EDO: never assumed static.

The thesis notes that constants move an operator to a less dynamic class (an
``Upsample`` with constant scales is ISDOS): :func:`classify` takes what is known
(:class:`Knowledge`), so RDP classifies each call twice, before and after its
constant propagation (:mod:`.rdp`).

:class:`TransferKind` names the shape rule a call follows (elementwise and
shape-preserving, broadcast, matmul, ...), which picks RDP's backward transfer: the
thesis has 16 ``Update`` transfer functions but does not list them.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax, tirx

log = logging.getLogger(__name__)


class OpClass(enum.IntEnum):
    """Table 5.2's classes, least dynamic first."""

    ISDO = 0
    ISDOS = 1
    ISVDOS = 2
    EDO = 3

    @property
    def title(self) -> str:
        """The thesis' name of the class."""
        return {0: "Input Shape Determined Output",
                1: "Input Shape Determined Output Shape",
                2: "Input Shape & Value Determined Output Shape",
                3: "Execution Determined Output"}[int(self)]


class TransferKind(enum.Enum):
    """The shape rule of a call, which RDP's backward transfer follows."""

    SHAPE_PRESERVING = "shape-preserving"  # unary elementwise, softmax, norms, casts
    BROADCAST = "broadcast"  # n-ary elementwise with numpy broadcasting
    MATMUL = "matmul"
    CONCAT = "concat"
    RESHAPE = "reshape"
    PERMUTE = "permute"
    CONV = "conv"
    OTHER = "other"


#: operators whose output shape exists only after they ran (Table 5.2's EDO row;
#: Relax's NMS ops return padded buffers plus a count: the count is execution-decided)
EXECUTION = frozenset({
    "relax.nonzero", "relax.unique", "relax.vision.all_class_non_max_suppression",
    "relax.vision.non_max_suppression", "relax.vision.get_valid_counts",
})

#: calls into code Relax cannot see: packed functions, closures (conservatively EDO)
OPAQUE = frozenset({
    "relax.call_pure_packed", "relax.call_inplace_packed", "relax.call_builtin_with_ctx",
    "relax.invoke_closure", "relax.invoke_pure_closure", "relax.call_py_func",
    "relax.make_closure",
})

#: destination-passing calls: the caller allocates the output by ``ty_args``
DPS = frozenset({
    "relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad",
    "relax.call_dps_packed", "relax.dist.call_tir_local_view",
})

#: operators that read *tensor* arguments' values into their output shape: op ->
#: those arguments (Relax's inference cannot see values, so this is a table)
VALUE_READING = {
    "relax.tensor_to_shape": (0,),
    "relax.dynamic_strided_slice": (1, 2, 3),
}

#: operators whose output values follow from their input's shape alone (ISDO)
SHAPE_VALUED = frozenset({
    "relax.shape_of", "relax.zeros_like", "relax.ones_like", "relax.size",
    "relax.inspect.tensor_ndim", "relax.inspect.tensor_shape_i",
})

#: operators whose output values follow from their shape/prim arguments and the
#: tensor arguments listed here: ISDO once those are known (the thesis puts
#: ConstantOfShape there)
VALUE_GENERATORS = {
    "relax.broadcast_to": (0,), "relax.full": (1,), "relax.full_like": (1,),
    "relax.arange": (), "relax.zeros": (), "relax.ones": (), "relax.eye": (),
    "relax.eye_like": (), "relax.hamming_window": (),
}

BROADCAST = frozenset("relax." + n for n in (
    "add", "subtract", "multiply", "divide", "floor_divide", "floor_mod", "mod", "power",
    "maximum", "minimum", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "atan2", "log_add_exp",
    "where", "ewise_fma",
))

_KINDS = {
    "relax.matmul": TransferKind.MATMUL,
    "relax.concat": TransferKind.CONCAT,
    "relax.reshape": TransferKind.RESHAPE,
    "relax.permute_dims": TransferKind.PERMUTE,
    "relax.nn.conv1d": TransferKind.CONV,
    "relax.nn.conv2d": TransferKind.CONV,
    "relax.nn.conv3d": TransferKind.CONV,
    **dict.fromkeys(BROADCAST, TransferKind.BROADCAST),
}


def op_name(call) -> str | None:
    """``"relax.add"`` for a call of a registered operator, else ``None``."""
    if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op):
        return str(call.op.name)
    return None


def op_label(call) -> str:
    """A readable name for what ``call`` runs: the operator, ``call_tir:<kernel>``,
    ``call:<function>`` or ``extern:<symbol>``."""
    name = op_name(call)
    if name in DPS or name == "relax.call_pure_packed":
        callee = call.args[0]
        target = getattr(callee, "name_hint", None) or getattr(callee, "global_symbol", "?")
        return f"{name.removeprefix('relax.')}:{target}"
    if name is not None:
        return name
    if isinstance(call.op, tvm.ir.GlobalVar):
        return f"call:{call.op.name_hint}"
    if isinstance(call.op, relax.ExternFunc):
        return f"extern:{call.op.global_symbol}"
    return "call:<closure>"


@dataclass(frozen=True)
class Classification:
    """A call's class and why."""

    op_class: OpClass
    kind: TransferKind
    reason: str


class Knowledge:
    """What :func:`classify` may treat as known at compile time.

    This base class knows what the IR states by itself: literal constants, and
    ``Shape`` / ``PrimExpr`` values written over the function's symbolic constants
    (``inputs``), which the ONNX importer's own folding leaves behind. RDP's
    :class:`~.rdp.RDPKnowledge` adds what constant propagation proved.
    """

    def __init__(self, inputs=()):
        self.inputs = list(inputs)

    def dim_known(self, expr) -> bool:
        """Whether the dimension ``expr`` is fixed by the input shapes."""
        return all(any(v.same_as(u) for u in self.inputs)
                   for v in tirx.analysis.undefined_vars(expr))

    def value_known(self, expr) -> bool:
        """Whether the value of the argument ``expr`` is fixed by the input shapes."""
        if isinstance(expr, tvm.ir.expr.Constant):
            return True
        if isinstance(expr, relax.ShapeExpr):
            return all(self.dim_known(v) for v in expr.values)
        if isinstance(expr, relax.Tuple):
            return all(self.value_known(f) for f in expr.fields)
        if tvm.ir.expr.is_prim_expr(expr):
            return self.dim_known(expr)
        ty = getattr(expr, "ty", None)
        if isinstance(ty, relax.ShapeType) and ty.values is not None:
            return all(self.dim_known(v) for v in ty.values)
        return False


def is_value_type(ty) -> bool:
    """Whether a value of type ``ty`` carries values into types: a ``Shape``, a
    ``PrimExpr``, or a tuple of those."""
    if isinstance(ty, (relax.ShapeType, tvm.ir.PrimType)):
        return True
    return isinstance(ty, relax.TupleType) and len(ty.fields) > 0 and all(
        is_value_type(f) for f in ty.fields)


def _fresh_like(expr):
    """A stand-in for a value argument with the same type and no known value."""
    ty = expr.ty
    if isinstance(ty, relax.ShapeType):
        return relax.Var("probe_shape", relax.ShapeType(ndim=ty.ndim))
    if isinstance(ty, tvm.ir.PrimType):
        return tirx.Var("probe_value", str(ty.dtype))
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_fresh_like(f) for f in expr.fields])
    return relax.Var("probe_tuple", ty)


def infer_type(call, args):
    """The type Relax infers for ``call`` with ``args`` instead of its own (``None`` if
    inference refuses them)."""
    probe = relax.Call(call.op, args, call.attrs, call.ty_args)
    try:
        return relax.BlockBuilder().normalize(probe).ty
    except (RuntimeError, ValueError, TypeError, AttributeError) as err:
        log.debug("type inference refused a probe of %s: %s", op_label(call), err)
        return None


#: probe answers per operator and attributes (the same for every call of them)
_SHAPE_ARG_CACHE: dict = {}
_PRESERVING_CACHE: dict = {}


def _key(call) -> tuple:
    return (op_name(call), str(call.attrs) if call.attrs is not None else "")


def shape_args(call) -> tuple[int, ...]:
    """Indices of ``call``'s ``Shape``/``PrimExpr`` arguments that decide its output
    type, asked of Relax's type inference (cached per operator and attributes)."""
    return _shape_args(_key(call), call)


def _shape_args(key, call):
    found = _SHAPE_ARG_CACHE.get(key)
    if found is None:
        found = []
        for i, arg in enumerate(call.args):
            if not is_value_type(arg.ty):
                continue
            args = list(call.args)
            args[i] = _fresh_like(arg)
            out = infer_type(call, args)
            if out is None or not tvm_ffi.structural_equal(out, call.ty):
                found.append(i)
        found = tuple(found)
        _SHAPE_ARG_CACHE[key] = found
    return found


def _fresh_tensor(arg, tag: str):
    ty = arg.ty
    if not isinstance(ty, relax.TensorType) or ty.ndim < 0:
        return None
    dims = [tirx.Var(f"{tag}{j}", "int64") for j in range(ty.ndim)]
    return relax.Var(tag, relax.TensorType(dims, ty.dtype))


def _complete(ty) -> bool:
    if isinstance(ty, relax.TupleType):
        return all(_complete(f) for f in ty.fields)
    return isinstance(ty, relax.TensorType) and ty.shape is not None and isinstance(
        ty.shape, relax.ShapeExpr)


def infers_shape(call) -> bool:
    """Whether Relax infers ``call``'s complete output shape from its tensor arguments'
    shapes alone: on the call as it is when those shapes are complete, else probed with
    fresh symbolic dims for every tensor argument."""
    tensors = [a for a in call.args if isinstance(a.ty, relax.TensorType)]
    if all(_complete(a.ty) for a in tensors):
        return _complete(call.ty)
    args = []
    for i, arg in enumerate(call.args):
        fresh = _fresh_tensor(arg, f"p{i}_") if isinstance(arg.ty, relax.TensorType) else arg
        if fresh is None:
            return False
        args.append(fresh)
    out = infer_type(call, args)
    return out is not None and _complete(out)


def shape_preserving(call) -> bool:
    """Whether ``call``'s output has its first argument's shape, whatever that shape:
    Relax's inference asked with fresh symbolic dims for that argument."""
    if not call.args or not isinstance(call.args[0].ty, relax.TensorType):
        return False
    return _preserving(_key(call) + (call.args[0].ty.ndim,), call)


def _preserving(key, call) -> bool:
    found = _PRESERVING_CACHE.get(key)
    if found is None:
        fresh = _fresh_tensor(call.args[0], "q")
        found = False
        if fresh is not None:
            out = infer_type(call, [fresh, *call.args[1:]])
            found = (isinstance(out, relax.TensorType) and out.shape is not None
                     and tvm_ffi.structural_equal(out.shape, fresh.ty.shape))
        _PRESERVING_CACHE[key] = found
    return found


def transfer_kind(call) -> TransferKind:
    """The shape rule ``call`` follows (:class:`TransferKind`)."""
    name = op_name(call)
    kind = _KINDS.get(name)
    if kind is not None:
        return kind
    if name is not None and name not in EXECUTION | OPAQUE | DPS and shape_preserving(call):
        return TransferKind.SHAPE_PRESERVING
    return TransferKind.OTHER


def _dps_class(call, known: Knowledge) -> tuple[OpClass, str]:
    dims = []
    for ty in call.ty_args:
        for t in (ty.fields if isinstance(ty, relax.TupleType) else [ty]):
            if not isinstance(t, relax.TensorType) or not isinstance(t.shape, relax.ShapeExpr):
                return OpClass.EDO, "output type without a shape"
            dims.extend(t.shape.values)
    extra = call.args[2:] if len(call.args) > 2 else []
    if all(known.dim_known(d) for d in dims) and all(known.value_known(a) for a in extra):
        return OpClass.ISDOS, "kernel output type fixed by the input shapes"
    return OpClass.ISVDOS, "kernel output type reads run-time values"


def _generated_known(call, known: Knowledge) -> bool:
    """Whether every input of a value generator's output values is known."""
    inputs = [a for a in call.args if is_value_type(a.ty)]
    inputs += [call.args[i] for i in VALUE_GENERATORS[op_name(call)] if i < len(call.args)]
    return all(known.value_known(a) for a in inputs)


def classify(call, known: Knowledge | None = None) -> Classification:
    """The class of the Relax call ``call`` given what is ``known`` (default: what the
    IR states by itself, :class:`Knowledge` with no symbolic constants)."""
    known = known or Knowledge()
    name = op_name(call)
    kind = transfer_kind(call)
    if name is None:
        return Classification(OpClass.EDO, kind, "a call into another function")
    if name in EXECUTION or name in OPAQUE:
        return Classification(OpClass.EDO, kind, "output decided by execution")
    if name in DPS:
        op_class, why = _dps_class(call, known)
        return Classification(op_class, kind, why)
    reading = [call.args[i] for i in VALUE_READING.get(name, ()) if i < len(call.args)]
    deciding = [call.args[i] for i in shape_args(call)]
    if any(not known.value_known(a) for a in reading + deciding):
        return Classification(OpClass.ISVDOS, kind, "output shape reads argument values")
    if name in SHAPE_VALUED:
        return Classification(OpClass.ISDO, kind, "output values from input shapes")
    if name in VALUE_GENERATORS and _generated_known(call, known):
        return Classification(OpClass.ISDO, kind, "output values from known arguments")
    if reading or deciding or kind != TransferKind.OTHER or infers_shape(call):
        return Classification(OpClass.ISDOS, kind, "output shape from input shapes")
    log.debug("%s: unknown shape behaviour, classed EDO", name)
    return Classification(OpClass.EDO, kind, "unknown operator: conservatively EDO")

"""Small helpers on Relax and TIR expressions, shared by the frontend, the graph passes,
the computes and the schedule rules.

One home for each: reading a constant's value, an operator's declared output dtype, a static shape, a list of ints, a
buffer load, a function's parameter dims, a module with some functions replaced.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax


def op_name(expr) -> str | None:
    """``"multiply"`` for a call of the Relax operator ``relax.multiply``; ``None`` for
    anything else."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return str(expr.op.name).removeprefix("relax.")
    return None


def ints(values) -> list[int] | None:
    """``values`` (ints, ``IntImm`` s, numpy integers) as a list of Python ints; ``None`` stays ``None``."""
    return None if values is None else [int(v) for v in values]


def declared_out_dtype(attrs) -> str | None:
    """An operator's ``out_dtype`` attribute as a dtype string, ``None`` when unset (TVM
    prints an unset one as ``""``, ``"void"`` or ``"None"``): what a rewrite passes on to
    the operator it emits instead."""
    out_dtype = str(attrs.out_dtype or "")
    return None if out_dtype in ("", "void", "None") else out_dtype


def is_constant(expr) -> bool:
    """Whether ``expr`` is a Relax constant holding a tensor (weights, folded values)."""
    return isinstance(expr, tvm.ir.expr.Constant) and isinstance(
        getattr(expr, "value", None), tvm.runtime.Tensor)


def const_np(expr) -> np.ndarray:
    """A constant's value, read-only: a view of TVM's buffer where DLPack allows it
    (weights are not copied to be read), else a copy."""
    try:
        arr = np.from_dlpack(expr.value)
    except (TypeError, ValueError, RuntimeError, BufferError):  # dtypes numpy lacks
        return expr.value.numpy()
    arr.flags.writeable = False
    return arr


def float_scalar(expr) -> float | None:
    """The value of a one-element float32 constant (a scale, an epsilon), else ``None``."""
    if not is_constant(expr):
        return None
    value = const_np(expr)
    if value.size != 1 or value.dtype != np.float32:
        return None
    return float(value.reshape(()))


def tensor_bytes(ty) -> int:
    """Bytes of a tensor of Relax type ``ty`` with a static shape; 0 for a symbolic one or
    anything that is not a tensor (a tuple)."""
    values = getattr(getattr(ty, "shape", None), "values", None)
    if values is None or not hasattr(ty, "dtype") or not all(
            isinstance(v, (int, tvm.tirx.IntImm)) for v in values):
        return 0
    return int(np.prod([int(v) for v in values], dtype=np.int64)) * \
        np.dtype(str(ty.dtype)).itemsize


def static_shape(expr) -> list[int] | None:
    """The static shape of a Relax tensor expression, or ``None`` if it has no shape or
    any dim is symbolic."""
    return batched_shape(expr, ())


def batched_shape(expr, symbolic: tuple[int, ...] = (0,)) -> list | None:
    """The shape of a Relax tensor expression whose dims are static except perhaps those
    at the indices ``symbolic`` (a batch, a conv's rows and columns): ints, those others
    an ``int`` or a TIR integer expression; ``None`` if it has no shape or another dim is
    symbolic. The CPU kernels plan their tiles for one size (per image, and for a
    symbolic row or column at a planning size), so the symbolic dims only become the
    extents of their outer loops."""
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None:
        return None
    try:
        values = list(shape.values) if hasattr(shape, "values") else list(shape)
    except TypeError:
        return None
    out = []
    for i, v in enumerate(values):
        if isinstance(v, (int, tvm.tirx.IntImm)):
            out.append(int(v))
        elif i in symbolic and isinstance(v, tvm.ir.expr.Expr) and str(v.ty).startswith("int"):
            out.append(v)
        else:
            return None
    return out


def is_load(expr) -> bool:
    """Whether the TIR expression ``expr`` reads one element of a buffer (``TensorLoad``
    in TVM 0.27, ``BufferLoad`` before)."""
    return type(expr).__name__ in ("TensorLoad", "BufferLoad")


def f32(value: float) -> tvm.tirx.PrimExpr:
    """A float32 TIR constant."""
    return tvm.tirx.const(value, "float32")


def builder_store(buf, value, *idx) -> None:
    """``buf[idx] = value`` inside an IRBuilder program (the kernels written directly as
    TIR: the recurrent loop, the pattern-sparse conv)."""
    from tvm.script.ir_builder import tirx as T

    T.buffer_store(buf, value, list(idx))


def stack_tile(shape, dtype: str = "float32"):
    """A register tile (accumulators) for an IRBuilder kernel, in a stack slot of the
    enclosing function or parallel task. A ``local`` buffer becomes a
    ``TVMBackendAllocWorkspace`` block in TVM 0.27's lowering, which LLVM cannot tell
    apart from the kernel's other workspace blocks: it then stores every accumulator
    after each update of the reduction loop. A stack slot that never escapes is
    promoted to registers."""
    import numpy as np
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    slot = T.Bind(tirx.call_intrin("handle", "tirx.tvm_stack_alloca", "shape",
                                   -(-nbytes // 8)))  # in int64 elements
    return T.decl_buffer(tuple(shape), dtype, data=slot)



def param_dim_names(func: relax.Function) -> set[str]:
    """Names of the symbolic variables in the shapes of ``func``'s parameters (the dims
    a call defines; a ``match_cast`` in the body may define more)."""
    names = set()
    for param in func.params:
        shape = getattr(getattr(param, "ty", None), "shape", None)
        if isinstance(shape, relax.ShapeExpr):
            for dim in shape.values:
                names.update(v.name for v in tvm.tirx.analysis.undefined_vars(dim))
    return names


def with_functions(mod: tvm.IRModule, updates: dict) -> tvm.IRModule:
    """A copy of ``mod`` with the functions of ``updates`` (``{GlobalVar: function}``)
    in place of its own; ``mod`` itself if there are none."""
    if not updates:
        return mod
    mod = mod.clone() if hasattr(mod, "clone") else tvm.IRModule(mod.functions)
    for gv, func in updates.items():
        mod[gv] = func
    return mod


def var_uses(func) -> dict:
    """``{Relax var: how many times ``func``'s body reads it}``."""
    from tvm import relax

    uses: dict = {}

    def visit(expr):
        if isinstance(expr, relax.Var):
            uses[expr] = uses.get(expr, 0) + 1

    relax.analysis.post_order_visit(func.body, visit)
    return uses

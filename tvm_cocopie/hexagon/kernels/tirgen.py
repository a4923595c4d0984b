"""Writing HVX kernels as TIR from Python: register-resident accumulators, unrolled blocks.

GCD²'s kernels (seed 004, §4.3) keep a block of output vectors in registers across
the reduction loop. Two TVM 0.27 behaviours decide how that must be written:

- a TVMScript assignment ``v = expr`` makes a one-element *buffer*, and buffers of
  scope ``local`` or of 1 KiB and more are placed in ``__TVMBackendAllocWorkspace``
  memory, where LLVM can no longer keep them in registers;
- buffers of scope ``global`` under 1 KiB become stack slots that LLVM promotes to
  registers.

So kernels here are generated with TVM's IR builder from Python: one small buffer per
accumulator vector (Python lists of buffers, blocks unrolled in Python), ``Bind`` for
values loaded once and used many times.
"""

import contextlib

from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as T

#: Alignment promised for kernel parameters (the harness aligns to 256 bytes).
ALIGN = 128

__all__ = ["T", "bind", "kernel", "ramp", "vec_buffer", "vload", "vstore"]


def ramp(start, lanes: int):
    """The ``lanes`` consecutive indices from ``start`` (a TIR ramp)."""
    return T.ramp(start, 1, lanes)


@contextlib.contextmanager
def kernel(name: str, params):
    """Build a PrimFunc named ``name``; ``params`` is a list of ``(name, shape, dtype)``.

    Yields ``(buffers, result)``: the parameter buffers in order, and a one-element
    list that holds the finished PrimFunc after the ``with`` block.
    """
    result = []
    with IRBuilder() as builder, T.prim_func():
        T.func_name(name)
        T.func_attr({"tirx.noalias": True})
        bufs = [T.arg(p, T.buffer(tuple(shape), dtype, align=ALIGN)) for p, shape, dtype in params]
        yield bufs, result
    result.append(builder.get())


def vec_buffer(name: str, lanes: int = 32, dtype: str = "int32"):
    """A register-sized scratch buffer (stack, promotable to a vector register)."""
    buf = T.alloc_buffer((lanes,), dtype, scope="global")
    IRBuilder.name(name, buf)
    return buf


def vload(buf, lanes: int = 32, start=0):
    """``buf[start : start + lanes]`` of a flat buffer as one vector value."""
    return buf[ramp(start, lanes)]


def vstore(buf, value, lanes: int = 32, start=0):
    """Store the vector ``value`` into ``buf`` at ``lanes`` consecutive elements from ``start``."""
    T.buffer_store(buf, value, [ramp(start, lanes)])


def bind(value):
    """Evaluate ``value`` once into an immutable variable (no memory)."""
    return T.Bind(value)

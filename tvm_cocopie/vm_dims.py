"""Quotients of input dims, computed at run time: the runtime half of
:mod:`tvm_cocopie.relay_passes.dynamic.divisibility`.

That pass writes a dim a model takes only in multiples of ``m`` (a detector's height,
``H = 32 * H_q``) through a new symbolic dim, the quotient, defined at the function's
start by one call of :data:`DIM_QUOTIENTS`, the packed function registered here (at
``import tvm_cocopie``). The call gets the dims, their divisors and their names, and
returns the quotients; a dim that is not a multiple stops the call with an error that
names it (the model could not have run at that size: its feature maps would not line
up). The quotient comes from a call, not from a shape expression, so that TVM's
``CanonicalizeBindings`` cannot replace it by ``H // 32`` again.

A library exported from a build that used the pass needs ``import tvm_cocopie`` in the
process that loads it, as for :mod:`tvm_cocopie.vm_scratch`.
"""

from __future__ import annotations

import tvm_ffi

from .errors import InputShapeError

#: The packed function: ``(dims shape, divisors shape, names) -> quotients shape``.
DIM_QUOTIENTS = "tvm_cocopie.vm.dim_quotients"


def quotients(dims, divisors, names: str) -> list[int]:
    """``dims // divisors``, each dim checked to be a multiple of its divisor."""
    labels = names.split(",")
    out = []
    for name, dim, div in zip(labels, dims, divisors):
        dim, div = int(dim), int(div)
        if dim % div:
            raise InputShapeError(
                f"input dim {name} = {dim} is not a multiple of {div}, which "
                f"this model needs (its feature maps at 1/{div} scale must line up): pad "
                f"the input to a multiple of {div}")
        out.append(dim // div)
    return out


@tvm_ffi.register_global_func(DIM_QUOTIENTS)
def dim_quotients(dims, divisors, names):
    """The registered form of :func:`quotients`: a shape of the quotients."""
    return tvm_ffi.Shape(quotients(dims, divisors, str(names)))

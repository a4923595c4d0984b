"""Every PrimFunc of a built module marked ``tirx.noalias`` where that is sound.

TVM 0.27's LLVM code generation emits ``noalias`` on the pointers of a module's functions
(the packed wrappers and their ``*_compute_`` bodies, which then stay apart from the
wrappers) as the *last* PrimFunc it generates says: observed, when the module's last
function by name lacks ``tirx.noalias``, no function of the module gets it (a
``te_layout_transform`` sorting after it hid the defect in most models). LLVM
then cannot keep a register tile's accumulators in registers across the reduction
loop (a store may alias the loaded weights), so every FMA of a matmul or conv is
followed by a store of its accumulator. Measured (CRNN with a symbolic width, AVX-512,
2 threads): its classifier matmul 2.0-2.9 ms against 0.8-0.98 ms with ``noalias``, the
model 1.6-2.0x its static build.

The PrimFunc without the attribute is the ``shape_func`` that Relax's ``VMShapeLower``
writes for a model with symbolic shapes (shape arithmetic on the VM's shape heap);
every kernel the cocopie pipeline legalizes and schedules has ``tirx.noalias``.
:func:`mark_noalias` (the ``lower`` stage's last pass) sets it on PrimFuncs with at most
one pointer parameter, where no two of its pointers can alias; a PrimFunc with several
pointers and no attribute is left as it is (its author did not promise distinct
buffers) and logged, since it costs the whole module its ``noalias``.
"""

from __future__ import annotations

import logging

import tvm

log = logging.getLogger(__name__)

#: the PrimFunc attribute TVM's code generation reads
NOALIAS = "tirx.noalias"


def _pointers(func: tvm.tirx.PrimFunc) -> int:
    """How many parameters of ``func`` are pointers (buffers or handles)."""
    return sum(1 for p in func.params
               if not isinstance(p.ty, tvm.ir.PrimType))  # a buffer or a pointer


def has_noalias(func: tvm.tirx.PrimFunc) -> bool:
    """Whether ``func`` carries a true ``tirx.noalias``."""
    return bool(func.attrs is not None and func.attrs.get(NOALIAS, False))


@tvm.transform.module_pass(opt_level=0, name="MarkNoAlias")
def mark_noalias(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """``mod`` with ``tirx.noalias`` on each PrimFunc of at most one pointer parameter
    that lacks it (module docstring)."""
    updates = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or has_noalias(func):
            continue
        if _pointers(func) <= 1:
            updates[gv] = func.with_attr(NOALIAS, True)
        else:
            log.info("PrimFunc %s has no tirx.noalias: TVM's LLVM code generation may then "
                     "emit no noalias for any function of the module", gv.name_hint)
    if not updates:
        return mod
    mod = mod.clone()
    for gv, func in updates.items():
        mod.update_func(gv, func)
    return mod


__all__ = ["NOALIAS", "has_noalias", "mark_noalias"]

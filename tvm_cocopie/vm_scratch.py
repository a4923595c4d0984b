"""Scratch memory kept per ``relax.VirtualMachine``: the runtime half of
:mod:`tvm_cocopie.relay_passes.static_memory`.

That pass replaces the statically planned intermediates of a function by the items
of one tuple, which the function gets at its start from one call of
:data:`CACHED_SCRATCH`, the packed function registered here (at ``import
tvm_cocopie``). The call's arguments are the function itself, as the calling VM's
closure of it, and the plan (:func:`plan_text`: storage sizes, tensors placed in
them). The first call allocates the plan (host memory, every tensor a view at the
start of its storage) and keeps it; later calls return the kept tuple. So the intermediates
are allocated once per VM, not once per inference.

Keying, and who may share: the key is the closure the VM passes, one object per VM
instance and function (a VM makes its own function table when it starts), so two VMs
over one executable, in one thread or two, never share scratch. One VM runs one call
at a time (it keeps its call frames in itself; ``CompiledModel`` documents the same),
and the pass skips functions that a Relax function calls or refers to, so a cached
buffer is never in use twice at once. What a function returns is never scratch: the
memory plan leaves outputs out, so they are fresh tensors every call.

Lifetime: an entry holds a reference to its closure, so a closure's address stays
unique while its entry lives; once the VM is gone the entry's reference is the last
one, and the next new entry drops it (:func:`release_dead`).

The memory is host memory (``tvm.cpu(0)``): the pass runs for CPU targets only. A
library exported from a build that used the pass needs ``import tvm_cocopie`` in the
process that loads it (``PipelineOptions(static_memory=False)`` builds without it).
The VM is not passed to the call: a ``void*`` argument costs a Python callback about
2 us to convert, the rest of the call about 0.5 us.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import threading
from collections.abc import Sequence

import tvm_ffi

from .errors import InputShapeError

log = logging.getLogger(__name__)

#: The packed function the static-memory pass calls: ``(closure, plan text) -> tuple``.
CACHED_SCRATCH = "tvm_cocopie.vm.cached_scratch"
_lock = threading.Lock()
#: closure address -> [the closure, the tuple of tensors, the dims of the views last
#: made (or None), the tuple with those views]
_entries: dict[int, list] = {}


def plan_text(storages: Sequence[int], tensors: Sequence[tuple[int, Sequence[int], str]],
              views: Sequence[tuple[int, int, str]] = ()) -> str:
    """The plan :data:`CACHED_SCRATCH` allocates: storage sizes in bytes, and tensors as
    ``(storage index, shape, dtype)`` (each at the start of its storage), in the order of
    the tuple; then ``views`` of symbolic shape, ``(tensor index, rank, dtype)``: views
    at the start of that tensor's storage, their shapes given per call (the call's third
    argument: every view's dims in a row), appended to the tuple."""
    spec = {"storages": [int(n) for n in storages],
            "tensors": [[int(s), [int(d) for d in shape], str(dtype)]
                        for s, shape, dtype in tensors]}
    if views:
        spec["views"] = [[int(t), int(rank), str(dtype)] for t, rank, dtype in views]
    return json.dumps(spec, separators=(",", ":"))


def allocate(plan: str):
    """The tensors of ``plan`` (:func:`plan_text`), views into new host storages, as an
    FFI array (returned to the VM as it is, with no conversion per call)."""
    import tvm

    spec = json.loads(plan)
    storages = [tvm.runtime.empty((max(size, 1),), "uint8", tvm.cpu(0))
                for size in spec["storages"]]
    # kernels take tensors whose byte_offset is 0: the plan places tensors at offset 0
    return tvm_ffi.convert([storages[storage]._create_view(tuple(shape), dtype)
                            for storage, shape, dtype in spec["tensors"]])


def _strong_refs(obj) -> int:
    """The strong reference count of an FFI object: the low 32 bits of the first word of
    its header (``TVMFFIObject.combined_ref_count`` in tvm_ffi's C ABI)."""
    return ctypes.c_uint32.from_address(obj.__chandle__()).value


def release_dead() -> int:
    """Drop the scratch of VMs that no longer exist; returns how many entries went."""
    with _lock:
        dead = [key for key, entry in _entries.items() if _strong_refs(entry[0]) <= 1]
        for key in dead:
            del _entries[key]
    return len(dead)


def live_entries() -> int:
    """How many (VM, function) scratch tuples are kept (those of VMs gone since the last
    new entry included)."""
    return len(_entries)


def with_views(scratch, plan: str, dims: Sequence[int]):
    """``scratch`` and, after it, the views of ``plan`` (:func:`plan_text`) at ``dims``
    (each view's dims in a row): one call's tuple. A view larger than its storage (an
    input dim above the build's ``dim_bounds``) raises."""
    spec = json.loads(plan)
    items = list(scratch)
    at = 0
    for tensor, rank, dtype in spec["views"]:
        shape = tuple(int(d) for d in dims[at:at + rank])
        at += rank
        base = scratch[tensor]
        need = math.prod(shape) * tvm_ffi.dtype(dtype).itemsize
        have = math.prod(base.shape) * tvm_ffi.dtype(str(base.dtype)).itemsize
        if need > have:
            raise InputShapeError(
                f"an intermediate tensor of shape {list(shape)} ({dtype}) needs {need} bytes "
                f"and the memory plan has {have}: an input dim is above the dim_bounds the "
                "model was compiled with; compile with larger PipelineOptions(dim_bounds=...)")
        items.append(base._create_view(shape, dtype))
    return tvm_ffi.convert(items)


@tvm_ffi.register_global_func(CACHED_SCRATCH)
def cached_scratch(closure, plan: str, dims=None):
    """The scratch of ``closure`` (a function of the calling VM): ``plan`` allocated at
    the first call, the same tensors at every later one. ``dims`` (a shape tuple): the
    plan's views are made at these dims and appended, kept until a call with other dims
    (a model with symbolic dims run at one size makes its views once, not 4 VM calls per
    intermediate tensor and call)."""
    key = closure.__chandle__()
    entry = _entries.get(key)
    if entry is None:
        scratch = allocate(plan)
        released = release_dead()
        entry = [closure, scratch, None, None]
        with _lock:
            _entries[key] = entry
        log.debug("scratch of %d tensors allocated for a VM (%d kept, %d released)",
                  len(scratch), len(_entries), released)
    if dims is None:
        return entry[1]
    dims = tuple(dims)
    if entry[2] != dims:
        entry[3] = with_views(entry[1], plan, dims)
        entry[2] = dims
    return entry[3]

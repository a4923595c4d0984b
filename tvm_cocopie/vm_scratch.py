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
import threading
from collections.abc import Sequence

import tvm_ffi

log = logging.getLogger(__name__)

#: The packed function the static-memory pass calls: ``(closure, plan text) -> tuple``.
CACHED_SCRATCH = "tvm_cocopie.vm.cached_scratch"
_lock = threading.Lock()
#: closure address -> (the closure, the tuple of tensors)
_entries: dict[int, tuple[object, object]] = {}


def plan_text(storages: Sequence[int], tensors: Sequence[tuple[int, Sequence[int], str]]) -> str:
    """The plan :data:`CACHED_SCRATCH` allocates: storage sizes in bytes, and tensors as
    ``(storage index, shape, dtype)`` (each at the start of its storage), in the order of
    the tuple."""
    return json.dumps({"storages": [int(n) for n in storages],
                       "tensors": [[int(s), [int(d) for d in shape], str(dtype)]
                                   for s, shape, dtype in tensors]},
                      separators=(",", ":"))


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
        dead = [key for key, (closure, _) in _entries.items() if _strong_refs(closure) <= 1]
        for key in dead:
            del _entries[key]
    return len(dead)


def live_entries() -> int:
    """How many (VM, function) scratch tuples are kept (those of VMs gone since the last
    new entry included)."""
    return len(_entries)


@tvm_ffi.register_global_func(CACHED_SCRATCH)
def cached_scratch(closure, plan: str):
    """The scratch of ``closure`` (a function of the calling VM): ``plan`` allocated at
    the first call, the same tensors at every later one."""
    key = closure.__chandle__()
    entry = _entries.get(key)
    if entry is not None:
        return entry[1]
    scratch = allocate(plan)
    released = release_dead()
    with _lock:
        _entries[key] = (closure, scratch)
    log.debug("scratch of %d tensors allocated for a VM (%d kept, %d released)",
              len(scratch), len(_entries), released)
    return scratch

"""What a compiled model does per inference, beyond its time: VM calls and layout changes.

Two counts the e2e benchmark records beside each cocopie latency:

* :func:`vm_call_counts` runs the executable on a fresh ``relax.VirtualMachine`` with an
  instrument that counts every VM ``Call`` instruction by function name, and keeps the
  counts of a run after the first (the first may set up what later runs reuse).
  :func:`call_stats` turns them into ``allocations_per_run`` (``vm.builtin.alloc_tensor``
  and ``vm.builtin.alloc_storage``), ``vm_calls_per_run`` (all calls) and
  ``kernel_calls_per_run`` (calls that are not ``vm.builtin.*``: the compiled kernels and
  any packed functions they call out to). The instrumented VM is thrown away, so the
  instrument never slows a timed run.
* :func:`layout_transform_count`: the ``relax.layout_transform`` calls on tensors left in
  the model after the cocopie pipeline's layout stage, each a kernel per inference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import tvm
from tvm import relax

from ..frontend.importer import from_onnx
from ..pipeline import PipelineOptions, run_until
from ..relay_passes.layout import layout_transforms

#: The VM builtins that allocate (a storage block, or a tensor inside one).
ALLOCATIONS = ("vm.builtin.alloc_tensor", "vm.builtin.alloc_storage")
#: The prefix of the VM's own builtins; any other call is a kernel.
BUILTIN_PREFIX = "vm.builtin."


def vm_call_counts(executable, inputs: Sequence[np.ndarray], device=None,
                   func: str = "main", runs: int = 2) -> Counter:
    """``{function name: calls}`` in the last of ``runs`` calls of ``func`` on a fresh VM
    over ``executable``, fed ``inputs`` (the default, 2, counts a run after the first)."""
    device = device or tvm.cpu(0)
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(np.asarray(a), device) for a in inputs]
    counts: Counter = Counter()

    def instrument(_func, symbol, before_run, _ret, *_args):
        if before_run:
            counts[str(symbol)] += 1
        return 0  # VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    try:
        for _ in range(max(1, runs)):
            counts.clear()
            vm[func](*args)
    finally:
        vm.set_instrument(None)
    return counts


def call_stats(counts: Mapping[str, int]) -> dict:
    """``allocations_per_run``, ``vm_calls_per_run`` and ``kernel_calls_per_run`` of
    :func:`vm_call_counts`' result."""
    return {
        "allocations_per_run": sum(counts.get(name, 0) for name in ALLOCATIONS),
        "vm_calls_per_run": sum(counts.values()),
        "kernel_calls_per_run": sum(n for name, n in counts.items()
                                    if not name.startswith(BUILTIN_PREFIX)),
    }


def compiled_model_stats(compiled, inputs: Mapping[str, np.ndarray]) -> dict:
    """:func:`call_stats` of a :class:`~tvm_cocopie.api.CompiledModel` run on ``inputs``
    (``{name: array}``), on a VM of its own."""
    args = [inputs[name] for name in compiled.input_names]
    return call_stats(vm_call_counts(compiled.executable, args, compiled.device))


def layout_transform_count(model, target, shapes: Mapping[str, Sequence[int]] | None = None,
                           options: PipelineOptions | None = None) -> int:
    """``relax.layout_transform`` calls on tensors in ``main`` after the cocopie
    pipeline's layout stage, for the ONNX ``model`` (or a Relax ``IRModule``) at
    ``shapes`` on ``target``."""
    mod = model if isinstance(model, tvm.IRModule) else from_onnx(model, shapes=shapes)
    return layout_transforms(run_until(mod, target, "layout", options))

"""What a compiled model does per inference, beyond its time: VM calls and layout changes.

Two counts the e2e benchmark records beside each cocopie latency:

* :func:`vm_call_counts` runs the executable on a fresh ``relax.VirtualMachine`` with an
  instrument that counts every VM ``Call`` instruction by function name, and keeps the
  counts of a run after the first (the first may set up what later runs reuse).
  :func:`call_stats` turns them into ``allocations_per_run`` (``vm.builtin.alloc_tensor``
  and ``vm.builtin.alloc_storage``), ``vm_calls_per_run`` (all calls) and
  ``kernel_calls_per_run`` (calls that are not the VM runtime's: neither ``vm.builtin.*``
  nor the scratch lookup of :mod:`tvm_cocopie.vm_scratch`; the compiled kernels and any
  packed functions they call out to). The instrumented VM is thrown away, so the
  instrument never slows a timed run. :func:`run_stats` adds the split of the
  allocations into ``output_allocations_per_run`` (what the call returns) and
  ``intermediate_allocations_per_run``. With the static memory of
  :mod:`tvm_cocopie.relay_passes.static_memory`, a static-shape model's allocations
  per run are its outputs' (a storage and a tensor each: outputs are fresh every call).
* :func:`layout_transform_count`: the ``relax.layout_transform`` calls on tensors left in
  the model after the cocopie pipeline's layout stage, each a kernel per inference.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..frontend.importer import from_onnx
from ..pipeline import PipelineOptions, run_until
from ..relay_passes.layout import layout_transforms
from ..vm_scratch import CACHED_SCRATCH

#: The VM builtins that allocate (a storage block, or a tensor inside one).
ALLOCATIONS = ("vm.builtin.alloc_tensor", "vm.builtin.alloc_storage")
#: The prefix of the VM's own builtins
BUILTIN_PREFIX = "vm.builtin."
#: Calls of the VM runtime (TVM's builtins, our scratch lookup); any other is a kernel
RUNTIME_CALLS = (BUILTIN_PREFIX, CACHED_SCRATCH)


def _profile(executable, inputs: Sequence[np.ndarray], device, func: str,
             runs: int) -> tuple[Counter, int]:
    """The call counts of the last of ``runs`` calls on a fresh VM, and how many of that
    call's allocations made what it returned."""
    device = device or tvm.cpu(0)
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(np.asarray(a), device) for a in inputs]
    counts: Counter = Counter()
    made: list = []  # (allocation, its result, its first argument), held: no reuse

    def instrument(_func, symbol, before_run, ret, *call_args):
        if before_run:
            counts[str(symbol)] += 1
        elif str(symbol) in ALLOCATIONS:
            made.append((str(symbol), ret, call_args[0] if call_args else None))
        return 0  # VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    try:
        for _ in range(max(1, runs)):
            counts.clear()
            made.clear()
            out = vm[func](*args)
    finally:
        vm.set_instrument(None)
    return counts, _output_allocations(made, out)


def _tensors(value) -> list:
    if isinstance(value, tvm.runtime.Tensor):
        return [value]
    if isinstance(value, (list, tuple, tvm_ffi.Array)):
        return [t for item in value for t in _tensors(item)]
    return []


def _output_allocations(made: list, out) -> int:
    """The tensors (and their storages) among ``made`` whose memory ``out`` returns."""
    returned = {t.data_ptr() for t in _tensors(out)}
    tensors = [storage for name, result, storage in made
               if name == "vm.builtin.alloc_tensor" and result.data_ptr() in returned]
    storages = {result.__chandle__() for name, result, _ in made
                if name == "vm.builtin.alloc_storage"}
    return len(tensors) + len({s.__chandle__() for s in tensors} & storages)


def vm_call_counts(executable, inputs: Sequence[np.ndarray], device=None,
                   func: str = "main", runs: int = 2) -> Counter:
    """``{function name: calls}`` in the last of ``runs`` calls of ``func`` on a fresh VM
    over ``executable``, fed ``inputs`` (the default, 2, counts a run after the first)."""
    return _profile(executable, inputs, device, func, runs)[0]


def call_stats(counts: Mapping[str, int]) -> dict:
    """``allocations_per_run``, ``vm_calls_per_run`` and ``kernel_calls_per_run`` of
    :func:`vm_call_counts`' result."""
    return {
        "allocations_per_run": sum(counts.get(name, 0) for name in ALLOCATIONS),
        "vm_calls_per_run": sum(counts.values()),
        "kernel_calls_per_run": sum(n for name, n in counts.items()
                                    if not name.startswith(RUNTIME_CALLS)),
    }


def run_stats(executable, inputs: Sequence[np.ndarray], device=None,
              func: str = "main") -> dict:
    """:func:`call_stats` of a run after the first, plus its allocations split in
    ``output_allocations_per_run`` (the storages and tensors of what ``func`` returns,
    fresh every call by design) and ``intermediate_allocations_per_run`` (the rest)."""
    counts, outputs = _profile(executable, inputs, device, func, 2)
    stats = call_stats(counts)
    stats["output_allocations_per_run"] = outputs
    stats["intermediate_allocations_per_run"] = stats["allocations_per_run"] - outputs
    return stats


def compiled_model_stats(compiled, inputs: Mapping[str, np.ndarray]) -> dict:
    """:func:`run_stats` of a :class:`~tvm_cocopie.api.CompiledModel` run on ``inputs``
    (``{name: array}``), on a VM of its own."""
    args = [inputs[name] for name in compiled.input_names]
    return run_stats(compiled.executable, args, compiled.device)


def layout_transform_count(model, target, shapes: Mapping[str, Sequence[int]] | None = None,
                           options: PipelineOptions | None = None) -> int:
    """``relax.layout_transform`` calls on tensors in ``main`` after the cocopie
    pipeline's layout stage, for the ONNX ``model`` (or a Relax ``IRModule``) at
    ``shapes`` on ``target``."""
    mod = model if isinstance(model, tvm.IRModule) else from_onnx(model, shapes=shapes)
    return layout_transforms(run_until(mod, target, "layout", options))


def random_inputs(compiled, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for ``compiled`` (a :class:`~tvm_cocopie.api.CompiledModel`): uniform
    floats, zeros for integer inputs (ids and indices stay in range)."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in compiled.inputs:
        shape = [d if isinstance(d, int) else 1 for d in spec.shape]
        if np.issubdtype(np.dtype(spec.dtype), np.floating):
            out[spec.name] = rng.uniform(-1, 1, shape).astype(spec.dtype)
        else:
            out[spec.name] = np.zeros(shape, spec.dtype)
    return out


def kernel_times(compiled, inputs: dict, rounds: int = 10, names=None) -> dict[str, float]:
    """Median seconds per call of each kernel inside the model, over ``rounds`` runs.

    ``names``: the kernels to report (default: every function the VM calls).
    The first run is a warm-up and is not counted.
    """
    from tvm.relax import VMInstrumentReturnKind

    wanted = set(names) if names is not None else None
    started: dict[str, float] = {}
    calls: dict[str, list[float]] = defaultdict(list)
    counting = [False]

    def instrument(func, symbol, before_run, ret_value, *args):
        name = str(symbol)
        if wanted is None or name in wanted:
            if before_run:
                started[name] = time.perf_counter()
            elif counting[0] and name in started:
                calls[name].append(time.perf_counter() - started.pop(name))
        return VMInstrumentReturnKind.NO_OP

    compiled.vm.set_instrument(instrument)
    compiled(**inputs)
    counting[0] = True
    for _ in range(rounds):
        compiled(**inputs)
    return {name: float(np.median(times)) for name, times in calls.items()}

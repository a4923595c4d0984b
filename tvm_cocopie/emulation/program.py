"""A freestanding program of kernel calls, as the harness runs it under QEMU: its kernels, buffers, input and output bytes (Hexagon and aarch64 alike)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..errors import ToolchainError
from . import harness

log = logging.getLogger(__name__)


def _symbol(name, func) -> str | None:
    if name is not None:
        return str(name)
    attrs = func.attrs
    if attrs is not None and "global_symbol" in attrs:
        return str(attrs["global_symbol"])
    return None


def normalize_module(funcs):
    """An IRModule of PrimFuncs keyed by their global symbols, from any of the usual forms.

    Accepts a PrimFunc, a list of PrimFuncs, a dict name -> PrimFunc, or an IRModule.
    Dict keys and module names win over a function's own ``global_symbol``.
    """
    import tvm

    if isinstance(funcs, tvm.IRModule):
        items = [(gv.name_hint, f) for gv, f in funcs.functions.items()]
    elif isinstance(funcs, dict):
        items = list(funcs.items())
    elif isinstance(funcs, (list, tuple)):
        items = [(None, f) for f in funcs]
    else:
        items = [(None, funcs)]
    table = {}
    for name, func in items:
        if not isinstance(func, tvm.tirx.PrimFunc):
            raise TypeError(f"the Hexagon runner builds PrimFuncs only, got {type(func).__name__}")
        sym = _symbol(name, func)
        if sym is None:
            raise ValueError("a PrimFunc without a name: give it a global_symbol or pass a dict")
        table[sym] = func.with_attr("global_symbol", sym)
    return tvm.IRModule(table)


def _param_buffers(func) -> list:
    specs = []
    for param in func.params:
        # TVM 0.27 passes buffers as parameters directly (no buffer_map).
        if not hasattr(param, "shape"):
            raise ValueError(f"parameter {param} is not a buffer; the harness passes tensors only")
        shape = []
        for dim in param.shape:
            if not hasattr(dim, "value"):
                raise ValueError(f"buffer {param.name} has a symbolic dimension {dim}")
            shape.append(int(dim.value))
        specs.append((tuple(shape), str(param.dtype)))
    return specs


def program_spec(
    mod, calls, inputs, outputs, workspace_bytes=64 << 20, offsets=None
) -> harness.ProgramSpec:
    """Infer every buffer's shape and dtype from the kernels' signatures."""
    buffers: dict = {}
    call_specs = []
    for call in calls:
        func_name, args = (call.func, call.args) if isinstance(call, harness.CallSpec) else call
        if func_name not in _names(mod):
            raise ValueError(f"call to {func_name!r}: no such kernel in {_names(mod)}")
        params = _param_buffers(mod[func_name])
        if len(params) != len(args):
            raise ValueError(f"{func_name} takes {len(params)} tensors, the call gives {len(args)}")
        for arg, (shape, dtype) in zip(args, params):
            spec = harness.BufferSpec(str(arg), shape, dtype)
            if buffers.setdefault(spec.name, spec) != spec:
                raise ValueError(
                    f"buffer {arg!r} is {buffers[spec.name]} in one call and {spec} in another"
                )
        call_specs.append(harness.CallSpec(str(func_name), tuple(str(a) for a in args)))
    for name in list(inputs) + list(outputs):
        if name not in buffers:
            raise ValueError(f"{name!r} is not an argument of any call")
    placed = None
    if offsets is not None:
        missing = [n for n in buffers if n not in offsets]
        if missing:
            raise ValueError(f"the memory plan places no buffer {missing}")
        placed = tuple(int(offsets[n]) for n in buffers)
    return harness.ProgramSpec(
        tuple(buffers.values()),
        tuple(inputs),
        tuple(outputs),
        tuple(call_specs),
        workspace_bytes,
        placed,
    )


def ffi_include() -> str:
    """The include directory of the ``apache-tvm-ffi`` wheel (its C headers, for the harness)."""
    import tvm_ffi.libinfo

    return tvm_ffi.libinfo.find_include_path()


def input_bytes(spec: harness.ProgramSpec, inputs: dict) -> bytes:
    """The bytes of the program's input file: ``spec``'s input buffers from ``inputs`` (name ->
    array), in order, each in the buffer's dtype and shape."""
    missing = [n for n in spec.inputs if n not in inputs]
    if missing:
        raise ValueError(f"missing inputs {missing}")
    parts = []
    for name in spec.inputs:
        buf = spec.buffer(name)
        arr = np.asarray(inputs[name])
        if tuple(arr.shape) != tuple(buf.shape):
            raise ValueError(f"input {name!r} has shape {arr.shape}, the kernel wants {buf.shape}")
        if arr.dtype != np.dtype(buf.dtype):
            raise ValueError(f"input {name!r} is {arr.dtype}, the kernel wants {buf.dtype}")
        parts.append(np.ascontiguousarray(arr).tobytes())
    return b"".join(parts)


def read_outputs(spec: harness.ProgramSpec, path: Path) -> dict:
    """The program's outputs from its output file at ``path``: ``{name: array}`` in the buffers'
    dtypes and shapes."""
    data = path.read_bytes()
    out, pos = {}, 0
    for name in spec.outputs:
        buf = spec.buffer(name)
        chunk = data[pos : pos + buf.nbytes]
        if len(chunk) != buf.nbytes:
            raise ToolchainError(f"outputs.bin is short: {len(data)} bytes")
        out[name] = np.frombuffer(chunk, dtype=buf.dtype).reshape(buf.shape).copy()
        pos += buf.nbytes
    return out


def _names(mod) -> list:
    return sorted(str(g.name_hint) for g in mod.functions)

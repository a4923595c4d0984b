"""``tvm_cocopie.compile``: from an ONNX model (or a Relax module) to a callable.

The convenience entry point. It imports the model with :mod:`.frontend`, compiles it
with ``tvm.compile`` through the ``cocopie`` pipeline (or any other registered
pipeline, e.g. ``"default"`` for stock TVM), and returns a :class:`CompiledModel`
that takes and returns numpy arrays and exposes the VM and the library for export.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from .errors import CompilationError, InputShapeError, ModelError, TargetError, last_line
from .frontend.importer import from_onnx as _import_float
from .frontend.model import graph_inputs, load_model
from .pipeline import PipelineOptions, cocopie_pipeline, register_pipeline
from .target import is_host, parse_target
from .threads import ThreadGovernor, configured_threads, ensure_thread_pool
from .tir_pipeline import tir_pipeline_for

log = logging.getLogger(__name__)

#: Concrete input shapes a model with symbolic dims compiles a build of its own for
MAX_SPECIALIZATIONS = 4


@dataclass(frozen=True)
class InputSpec:
    """One input of a compiled model: its ONNX name, shape (ints or dim names) and dtype."""

    name: str
    shape: tuple
    dtype: str


def _input_specs(mod: tvm.IRModule, names: Sequence[str] | None) -> list[InputSpec]:
    params = mod["main"].params
    specs = []
    for i, param in enumerate(params):
        ty = param.ty  # the Relax type (struct info) of the parameter
        dims = getattr(ty, "shape", None)
        shape = tuple(
            int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in (dims or [])
        )
        name = names[i] if names and i < len(names) else str(param.name)
        specs.append(InputSpec(name, shape, str(ty.dtype)))
    return specs


class CompiledModel:
    """A compiled model: call it with numpy arrays, get numpy arrays back.

    ``model(x)``, ``model(x, y)`` or ``model(input=x)``; one output comes back as an
    array, several as a list. ``.vm`` is the ``relax.VirtualMachine``,
    ``.executable`` the built library (``export_library`` writes a ``.so``).
    ``.governor`` (with ``adaptive_threads``) picks the thread count of each call from
    measured latency (:class:`~tvm_cocopie.threads.ThreadGovernor`): on a machine
    where another process holds a core, one thread instead of a fork-join that waits
    for the preempted worker.

    A model with symbolic input dims built with a ``specializer`` (see
    :func:`compile_model`'s ``specialize``) compiles itself again for the concrete
    shapes of a call the first time it sees them, and runs that build for every later
    call of those shapes (``.specializations``, at most :data:`MAX_SPECIALIZATIONS`;
    past that, calls run the symbolic build). The symbolic build stays ``.vm`` /
    ``.executable``.

    One call at a time: inputs of static shape are staged in tensors the model keeps
    (compile one model per thread to call from several threads at once).
    """

    def __init__(self, executable, inputs: list[InputSpec], target: tvm.target.Target,
                 pipeline: str, compile_seconds: float, adaptive_threads: bool = True,
                 specializer=None, dim_bounds: Mapping[str, int] | None = None):
        self.specializations: dict[tuple, CompiledModel] = {}
        #: upper bounds of symbolic dims the memory plan was made for (checked per call)
        self.dim_bounds = dict(dim_bounds or {})
        self._specializer = specializer
        self._staged = None  # per input: (its tensor, a numpy view of it) or None
        self.executable = executable
        self.inputs = inputs
        self.target = target
        self.pipeline = pipeline
        self.compile_seconds = compile_seconds
        ensure_thread_pool(target.attrs.get("num-cores"))
        self.device = tvm.cpu(0)
        self.vm = relax.VirtualMachine(executable, self.device)
        self._main = self.vm["main"]
        cores = int(target.attrs.get("num-cores") or 0) or configured_threads()
        self.governor = ThreadGovernor(cores) if adaptive_threads and cores > 1 else None

    @property
    def input_names(self) -> list[str]:
        """The model's input names, in call order."""
        return [spec.name for spec in self.inputs]

    def _arrange(self, args: Sequence, kwargs: Mapping) -> list[np.ndarray]:
        if args and kwargs:
            raise InputShapeError("pass inputs either by position or by name, not both")
        if kwargs:
            unknown = set(kwargs) - set(self.input_names)
            if unknown:
                raise InputShapeError(
                    f"unknown input(s) {sorted(unknown)}; the model takes {self.input_names}"
                )
            missing = [n for n in self.input_names if n not in kwargs]
            if missing:
                raise InputShapeError(f"missing input(s) {missing}; the model takes {self.input_names}")
            args = [kwargs[n] for n in self.input_names]
        if len(args) == 1 and isinstance(args[0], Mapping):
            return self._arrange((), args[0])
        if len(args) != len(self.inputs):
            raise InputShapeError(
                f"the model takes {len(self.inputs)} input(s) {self.input_names}, got {len(args)}"
            )
        arrays = [self._check(spec, value) for spec, value in zip(self.inputs, args)]
        self._check_bounds(arrays)
        return arrays

    def _check_bounds(self, arrays: list[np.ndarray]) -> None:
        """A symbolic dim above the bound its memory plan was made for is refused before
        the run (the plan's views would not fit)."""
        if not self.dim_bounds:
            return
        for spec, arr in zip(self.inputs, arrays):
            for name, got in zip(spec.shape, arr.shape):
                bound = self.dim_bounds.get(name) if isinstance(name, str) else None
                if bound is not None and got > bound:
                    raise InputShapeError(
                        f"input {spec.name!r} has {name} = {got}, above the bound {bound} the "
                        f"memory plan was made for (PipelineOptions(dim_bounds=...)): compile "
                        f"with a larger bound for {name}")

    @staticmethod
    def _check(spec: InputSpec, value: Any) -> np.ndarray:
        if isinstance(value, (bool, int, float)) and not spec.shape:
            # a Python number for a scalar (0-d) input, e.g. 16000 for an int64 sample rate
            value = _python_scalar(spec, value)
        arr = np.asarray(value)
        if arr.dtype != np.dtype(spec.dtype):
            raise InputShapeError(
                f"input {spec.name!r} has dtype {arr.dtype}, the model wants {spec.dtype}: "
                f"convert it with .astype(np.{spec.dtype})"
            )
        if len(arr.shape) != len(spec.shape) or any(
            isinstance(want, int) and want != got for want, got in zip(spec.shape, arr.shape)
        ):
            raise InputShapeError(
                f"input {spec.name!r} has shape {list(arr.shape)}, the model was compiled for "
                f"{list(spec.shape)}. Recompile with shapes={{{spec.name!r}: [...]}} to change it."
            )
        # not np.ascontiguousarray: it returns at least 1-d, and the VM checks the rank of
        # a 0-d (scalar) input ("expect Tensor with ndim 0 but get 1")
        return arr if arr.flags.c_contiguous else arr.copy(order="C")

    def __call__(self, *args, **kwargs):
        arrays = self._arrange(args, kwargs)
        special = self._specialized(arrays)
        return special._run(arrays) if special is not None else self._run(arrays)

    def _specialized(self, arrays: list[np.ndarray]) -> CompiledModel | None:
        """The build for these inputs' shapes (compiled on first sight), or ``None``: run
        this one."""
        if self._specializer is None:
            return None
        key = tuple(a.shape for a in arrays)
        model = self.specializations.get(key)
        if model is None and len(self.specializations) < MAX_SPECIALIZATIONS:
            shapes = {spec.name: list(a.shape) for spec, a in zip(self.inputs, arrays)
                      if any(isinstance(d, str) for d in spec.shape)}
            log.info("specializing for input shapes %s (a compile, then cached)", shapes)
            model = self.specializations[key] = self._specializer(shapes)
        elif model is None and len(self.specializations) == MAX_SPECIALIZATIONS:
            log.warning("more than %d input shapes: %s and later new shapes run the "
                        "symbolic build (generic kernels)", MAX_SPECIALIZATIONS, list(key))
            self.specializations[key] = None  # warned once; this key runs symbolic
        return model

    def _input_tensors(self, arrays: list[np.ndarray]) -> list:
        """The VM's input tensors holding ``arrays``: for an input of static shape a tensor
        of the model's own, filled through its numpy view (1.4 us for Silero's 576 samples,
        where ``tvm.runtime.tensor`` takes 68 us: on a 0.3 ms model, the inputs and outputs
        cost more than the kernels); for symbolic dims a new tensor."""
        if self._staged is None:
            self._staged = [_staging(spec, self.device) for spec in self.inputs]
        tensors = []
        for staged, arr in zip(self._staged, arrays):
            if staged is None:
                tensors.append(tvm.runtime.tensor(arr, self.device))
            else:
                np.copyto(staged[1], arr)
                tensors.append(staged[0])
        return tensors

    def _run(self, arrays: list[np.ndarray]):
        tensors = self._input_tensors(arrays)
        if self.governor is None:
            return _to_numpy(self._main(*tensors))
        self.governor.before_call()
        start = time.perf_counter()
        result = self._main(*tensors)
        self.governor.after_call(time.perf_counter() - start)
        return _to_numpy(result)

    def export_library(self, path: str | os.PathLike) -> Path:
        """Write the compiled library (``.so``), loadable with ``tvm.runtime.load_module``
        (a build with static memory, the default, runs in a process that imported
        ``tvm_cocopie``: see :mod:`tvm_cocopie.vm_scratch`)."""
        path = Path(path)
        if not is_host(self.target):
            raise TargetError(
                f"exporting a shared library for {self.target.attrs['mtriple']} needs that "
                "platform's linker; "
                "write the object with executable.mod.write_to_file('x.o') instead"
            )
        self.executable.export_library(str(path))
        return path


def _python_scalar(spec: InputSpec, value: float) -> np.ndarray:
    """``value`` as the 0-d array of ``spec``'s dtype, if that keeps its value."""
    dtype = np.dtype(spec.dtype)
    try:
        arr = np.asarray(value, dtype=dtype)
    except (OverflowError, ValueError):
        arr = None
    if arr is None or (dtype.kind in "biu" and arr.item() != value):
        raise InputShapeError(
            f"input {spec.name!r} is a {spec.dtype} scalar; {value!r} does not fit it")
    return arr



def _staging(spec: InputSpec, device) -> tuple | None:
    """A tensor of the input's static shape and a writable numpy view of it, or ``None``
    (symbolic dims, or a dtype numpy cannot view)."""
    if any(isinstance(d, str) for d in spec.shape):
        return None
    tensor = tvm.runtime.empty(spec.shape, spec.dtype, device)
    try:
        view = np.from_dlpack(tensor)
    except (TypeError, ValueError, RuntimeError, BufferError):
        return None
    return (tensor, view) if view.flags.writeable else None


def _to_numpy(value):
    """A VM result as numpy: a tensor (0-d included) as an array of its shape (a copy:
    ``np.from_dlpack(...).copy()`` takes 2 us where ``Tensor.numpy()`` takes 22), a scalar
    the VM returns as a Python number (a Relax ``PrimValue``) as a 0-d array, a shape as
    an int64 array, a tuple as a list."""
    if isinstance(value, tvm.runtime.Tensor):
        try:
            return np.from_dlpack(value).copy()
        except (TypeError, ValueError, RuntimeError, BufferError):  # dtypes numpy lacks
            return value.numpy()
    if isinstance(value, tvm.runtime.ShapeTuple):
        return np.array(list(value), dtype=np.int64)
    if isinstance(value, (bool, int, float, np.generic)):
        return np.asarray(value)
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("Array", "List"):
        return [_to_numpy(v) for v in value]
    return value


def from_onnx(
    model,
    shapes: Mapping[str, Sequence[int]] | None = None,
    keep_params_in_input: bool = False,
    check: bool = True,
    *,
    int8: bool = False,
) -> tvm.IRModule:
    """The ONNX front door: ``model`` (path, bytes or ``ModelProto``) as a Relax module.

    By default TVM's importer behind the project's checks and converters
    (:func:`tvm_cocopie.frontend.importer.from_onnx`: ``shapes``, ``keep_params_in_input``
    and ``check`` as there); a quantized file then becomes float arithmetic, which the CPU
    pipeline compiles.

    ``int8=True`` reads a quantized file (QDQ, as ``onnxruntime.quantization.quantize_static``
    or :func:`tvm_cocopie.ptq.quantize_onnx` write it, or QOperator) with its integers into
    the int8 Relax form the Hexagon pipeline selects and schedules
    (:mod:`tvm_cocopie.hexagon.relax_graph`; ``tvm.compile(mod, HEXAGON_V66,
    relax_pipeline="cocopie")``): ``main(image)`` takes the input quantized, NHWC uint8,
    and returns the output's integers; ``main``'s attributes ``input_scale``,
    ``input_zero_point``, ``output_scale`` and ``output_zero_point`` say what they stand for
    (a model with a token embedding takes the gathered rows: read it with
    :func:`tvm_cocopie.hexagon.relax_graph.quantized_module`, whose network holds the table).
    ``shapes`` fixes a symbolic input height and width there (``{"x": [1, 3, 224, 224]}``).
    A float file is refused with the way to quantize it."""
    if not int8:
        return _import_float(model, shapes=shapes, keep_params_in_input=keep_params_in_input,
                             check=check)
    from .hexagon.executor.qonnx import is_quantized
    from .hexagon.relax_graph import quantized_module

    if keep_params_in_input:
        raise CompilationError("the int8 form keeps its weights as constants: "
                               "keep_params_in_input applies to the float import only")
    proto = load_model(model, check=check)
    if not is_quantized(proto):
        raise ModelError(
            "int8=True reads a quantized model (QDQ or QOperator), and this one has no "
            "QuantizeLinear / DequantizeLinear or QLinear operator: quantize it first with "
            "tvm_cocopie.ptq.quantize_onnx(model, 'model_qdq.onnx') (calibrated on sample "
            "inputs), or run it with `tvm-cocopie hexagon run MODEL.onnx`, which does")
    image_size = None
    if shapes:
        dims = [list(d) for d in shapes.values()]
        if len(dims) != 1 or len(dims[0]) != 4:
            raise InputShapeError(
                f"shapes={dict(shapes)}: the int8 form takes one NCHW image input; give its "
                "[1, C, H, W]")
        image_size = (int(dims[0][2]), int(dims[0][3]))
    mod, net = quantized_module(proto, image_size)
    attrs = {"input_scale": float(net.input_scale), "input_zero_point": int(net.input_zero_point),
             "output_scale": float(net.output_scale),
             "output_zero_point": int(net.output_zero_point)}
    main = mod["main"]
    for key, value in attrs.items():
        main = main.with_attr(key, value)
    mod["main"] = main
    return mod


def compile_model(
    model,
    target=None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    pipeline: str = "cocopie",
    options: PipelineOptions | Mapping | None = None,
    adaptive_threads: bool = True,
    specialize: bool = True,
) -> CompiledModel:
    """Compile ``model`` for ``target`` and return a :class:`CompiledModel`.

    ``model``: an ONNX path, serialized bytes, an ``onnx.ModelProto``, or a Relax
    ``IRModule`` with a ``main`` function. ``target``: a dict, JSON text or
    ``Target`` (default: this machine). ``pipeline``: ``"cocopie"`` (default) or any
    registered Relax pipeline name (``"default"`` is stock TVM). ``options``: switches
    of the cocopie pipeline (:class:`~tvm_cocopie.pipeline.PipelineOptions`).
    ``adaptive_threads``: let the model choose its thread count per call from measured
    latency (:class:`~tvm_cocopie.threads.ThreadGovernor`); ``False`` keeps the pool's.
    ``specialize``: an ONNX model whose inputs keep symbolic dims (not fixed by
    ``shapes``) is compiled with them, and again for the concrete shapes of each of its
    first :data:`MAX_SPECIALIZATIONS` input shapes, on the first call that has them.
    ``False`` runs every call on the symbolic build, compiled once (SOD²): the fast
    kernels take symbolic batches, heights, widths and sequence lengths (ResNet-18 with a
    symbolic batch: 37 ms a call against 36 for its static build, 918 ms before they
    did); ``PipelineOptions(dim_bounds=...)`` plans its memory once for the bounds.
    """
    tgt = parse_target(target)
    register_pipeline()
    if isinstance(model, tvm.IRModule):
        if not any(str(gv.name_hint) == "main" for gv in model.get_global_vars()):
            raise CompilationError("the IRModule has no 'main' function to compile")
        mod, names = model, None
    else:
        proto = load_model(model)  # read the file once, for the import and the input names
        mod = _import_float(proto, shapes=shapes, check=False)  # checked by load_model
        names = list(graph_inputs(proto))
    inputs = _input_specs(mod, names)
    if pipeline == "cocopie":
        if isinstance(options, Mapping):
            options = PipelineOptions(**options)
        relax_pipeline = cocopie_pipeline(**vars(options or PipelineOptions()))
        tir_pipeline = tir_pipeline_for(tgt)
    else:
        if options:
            raise CompilationError("options only apply to the cocopie pipeline")
        relax_pipeline, tir_pipeline = pipeline, "default"
    start = time.perf_counter()
    try:
        executable = tvm.compile(mod, target=tgt, relax_pipeline=relax_pipeline,
                                 tir_pipeline=tir_pipeline)
    except TargetError:
        raise
    except Exception as err:
        raise CompilationError(
            f"TVM failed to build the model with pipeline {pipeline!r}: {last_line(err)}"
        ) from err
    seconds = time.perf_counter() - start
    log.info("compiled with %s for %s in %.1fs", pipeline, tgt.export().get("mcpu"), seconds)
    specializer = None
    if specialize and names is not None and any(
            isinstance(d, str) for spec in inputs for d in spec.shape):
        def specializer(concrete: dict) -> CompiledModel:
            return compile_model(proto, tgt, {**(shapes or {}), **concrete}, pipeline, options,
                                 adaptive_threads, specialize=False)
    bounds = options.dim_bounds if isinstance(options, PipelineOptions) else None
    return CompiledModel(executable, inputs, tgt, pipeline, seconds, adaptive_threads,
                         specializer, bounds)

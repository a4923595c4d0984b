"""tvm-cocopie as an ONNX backend (``onnx.backend.base.Backend``).

ONNX's conformance runner, ``onnx.backend.test.BackendTest``, drives a backend
through ``prepare(model, device)`` and ``rep.run(inputs)``; this module implements
both with :func:`tvm_cocopie.frontend.importer.from_onnx` (the extended importer) and
``tvm.compile``, so the whole ONNX backend suite runs against tvm-cocopie::

    import onnx.backend.test
    from tvm_cocopie.frontend.backend import TvmCocopieBackend
    globals().update(onnx.backend.test.BackendTest(TvmCocopieBackend, __name__).test_cases)

Inputs and outputs follow the ONNX graph: tensors are numpy arrays, sequences are
lists of arrays, an empty optional is ``None``. Outputs are converted to the
element type the graph declares (a Relax shape or a scalar comes back as an array).

Shape-determining inputs. Relax needs ranks, reduction axes, target shapes, pad
widths and the like at compile time. When such an operand (``Reshape``'s shape,
``Reduce*``'s axes, ``Slice``'s starts, ``Resize``'s sizes, ... see
:data:`SHAPE_OPERANDS`) is a graph *input* rather than an initializer, the backend
compiles on the first ``run`` with those inputs' values bound as constants, and
keeps one build per distinct set of values (a value-specializing JIT, as TVM has no
dynamic-rank tensors). Every other input stays a runtime argument.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ..errors import InputShapeError, ModelError
from ..pipeline import register_pipeline
from ..target import host_target, parse_target
from ..tir_pipeline import tir_pipeline_for
from .importer import from_onnx
from .model import load_model

log = logging.getLogger(__name__)

#: The Relax pipeline the backend builds with unless ``prepare(pipeline=...)`` names one.
DEFAULT_PIPELINE = "default"

#: Operands (input positions) Relax needs at compile time: they decide an output's
#: shape or rank (or the stock converter requires a constant), per ONNX op.
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "OneHot": (1, 2),
    "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3), "Squeeze": (1,), "Unsqueeze": (1,),
    "Split": (1,), "TopK": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "Range": (0, 1, 2), "CenterCropPad": (1,), "Col2Im": (1, 2), "CumSum": (1,),
    "CumProd": (1,), "Trilu": (1,), "AffineGrid": (1,), "MaxUnpool": (2,),
    "NonMaxSuppression": (2, 3, 4), "DFT": (1, 2), "STFT": (1, 3), "HannWindow": (0,),
    "HammingWindow": (0,), "BlackmanWindow": (0,), "MelWeightMatrix": (0, 1, 2, 3, 4),
    "Compress": (1,), "SplitToSequence": (1,), "Bernoulli": (), "ReduceSum": (1,),
    "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,), "Loop": (0, 1),
}


def shape_operand_inputs(proto: onnx.ModelProto) -> list[str]:
    """Graph inputs that decide a shape operand (see :data:`SHAPE_OPERANDS`).

    An input feeding such an operand directly counts; so does an integer or scalar
    input that reaches one through other nodes (``Sub``, ``Concat``, ...: the shape arithmetic of
    exported and function-expanded graphs). The walk stops at ``Shape``/``Size``,
    which depend on static shapes only.
    """
    inits = {t.name for t in proto.graph.initializer}
    int_types = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
    inputs = {v.name: v.type.tensor_type for v in proto.graph.input if v.name not in inits}
    producers: dict[str, onnx.NodeProto] = {}
    found: dict[str, None] = {}
    seen: set[str] = set()

    def trace(name: str, direct: bool) -> None:
        if not name or name in seen:
            return
        seen.add(name)
        if name in inputs:
            ttype = inputs[name]
            scalar = ttype.HasField("shape") and not ttype.shape.dim
            if direct or ttype.elem_type in int_types or scalar:
                found.setdefault(name, None)
            return
        node = producers.get(name)
        if node is None or node.op_type in ("Shape", "Size"):
            return
        for upstream in node.input:
            trace(upstream, False)

    def visit(graph):
        for node in graph.node:
            for out in node.output:
                producers[out] = node
        for node in graph.node:
            for index in SHAPE_OPERANDS.get(node.op_type, ()):
                if index < len(node.input):
                    seen.discard(node.input[index])
                    trace(node.input[index], True)
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs):
                    visit(sub)

    visit(proto.graph)
    return list(found)


def bind_inputs(proto: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``proto`` whose inputs in ``values`` are initializers with those values."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    kept = [v for v in out.graph.input if v.name not in values]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    out.graph.initializer.extend(
        onnx.numpy_helper.from_array(np.asarray(v), name) for name, v in values.items())
    return out


def default_target(threads: int | None = None):
    """This host as a target, ``threads`` cores (default 1: the suite runs cases serially)."""
    return host_target(threads or 1)


def _declared_output_types(proto: onnx.ModelProto) -> list[onnx.TypeProto]:
    return [out.type for out in proto.graph.output]


def _graph_input_names(proto: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in proto.graph.initializer}
    return [v.name for v in proto.graph.input if v.name not in inits]


def to_tvm_value(value: Any, device):
    """A numpy array, list (sequence) or ``None`` (empty optional) as a VM argument."""
    import tvm

    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [to_tvm_value(v, device) for v in value]
    arr = np.asarray(value)
    if not arr.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
        arr = arr.copy(order="C")
    return tvm.runtime.tensor(arr, device)


def to_numpy(value: Any, type_proto: onnx.TypeProto | None = None) -> Any:
    """Convert a VM result to what ONNX's runner expects for ``type_proto``."""
    import tvm

    which = type_proto.WhichOneof("value") if type_proto is not None else None
    if which == "optional_type":
        return None if value is None else to_numpy(value, type_proto.optional_type.elem_type)
    if which == "sequence_type":
        elem = type_proto.sequence_type.elem_type
        if isinstance(value, tvm.runtime.Tensor):
            value = [value]
        return [to_numpy(v, elem) for v in value]
    dtype = None
    if which == "tensor_type" and type_proto.tensor_type.elem_type:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(type_proto.tensor_type.elem_type)
    if isinstance(value, tvm.runtime.Tensor):
        arr = value.numpy()
    elif isinstance(value, tvm.runtime.ShapeTuple):
        arr = np.array(list(value), dtype=np.int64)
    elif isinstance(value, (bool, int, float, np.generic)):
        arr = np.array(value)
    elif isinstance(value, (list, tuple)) or type(value).__name__ in ("Array", "List"):
        return [to_numpy(v, None) for v in value]
    else:
        raise ModelError(f"cannot convert a {type(value).__name__} model output to numpy")
    if dtype is not None and arr.dtype != dtype and dtype != np.dtype(object):
        arr = arr.astype(dtype)
    return arr


class TvmCocopieRep(BackendRep):
    """A compiled model: ``run(inputs)`` returns one numpy value per graph output."""

    def __init__(self, executable, proto: onnx.ModelProto, device=None):
        import tvm
        from tvm import relax

        self.executable = executable
        self.device = device or tvm.cpu(0)
        self.vm = relax.VirtualMachine(executable, self.device)
        self.input_names = _graph_input_names(proto)
        self.output_types = _declared_output_types(proto)

    def _arrange(self, inputs) -> list:
        if isinstance(inputs, Mapping):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise InputShapeError(f"missing input(s) {missing}; the model takes "
                                      f"{self.input_names}")
            return [inputs[n] for n in self.input_names]
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.input_names):
            raise InputShapeError(f"the model takes {len(self.input_names)} input(s) "
                                  f"{self.input_names}, got {len(inputs)}")
        return inputs

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Run the compiled model on ``inputs`` (a list in graph order, or a name -> array
        mapping); the outputs as a tuple of numpy arrays."""
        args = [to_tvm_value(v, self.device) for v in self._arrange(inputs)]
        result = self.vm["main"](*args)
        if len(self.output_types) == 1:
            results = [result]
        else:
            results = list(result)
        return tuple(to_numpy(r, t) for r, t in zip(results, self.output_types))


class SpecializingRep(BackendRep):
    """Compiles at ``run`` with the shape-determining inputs bound to their values.

    One build per distinct set of those values; the other inputs stay arguments.
    """

    def __init__(self, proto: onnx.ModelProto, bound: Sequence[str], build):
        self.proto = proto
        self.input_names = _graph_input_names(proto)
        self.bound = [n for n in self.input_names if n in set(bound)]
        self._build = build
        self._reps: dict[tuple, TvmCocopieRep] = {}

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Compile the model for these values of its shape operands (cached per value) and run it;
        the outputs as a tuple."""
        if isinstance(inputs, Mapping):
            values = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) != len(self.input_names):
                raise InputShapeError(f"the model takes {len(self.input_names)} input(s) "
                                      f"{self.input_names}, got {len(inputs)}")
            values = dict(zip(self.input_names, inputs))
        bound = {n: np.asarray(values[n]) for n in self.bound}
        key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in bound.items())
        rep = self._reps.get(key)
        if rep is None:
            log.debug("building for shape operands %s", {n: v.tolist() for n, v in bound.items()})
            rep = self._reps[key] = self._build(bind_inputs(self.proto, bound))
        return rep.run([values[n] for n in rep.input_names])


class TvmCocopieBackend(Backend):
    """ONNX backend: import with tvm-cocopie's extended importer, build with TVM.

    ``prepare(model, device="CPU", pipeline=..., target=..., shapes=...)``: the
    pipeline defaults to the class attribute ``pipeline``, else ``"default"``; pass
    ``"cocopie"`` for the cocopie pipeline. A model whose shape-determining operands
    are graph inputs gets a :class:`SpecializingRep` (see the module docstring).
    """

    pipeline: str | None = None

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether ``device`` is one this backend runs on (CPU only)."""
        return str(device).upper().startswith("CPU")

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU",
                **kwargs: Any) -> TvmCocopieRep | SpecializingRep:
        """Check and compile ``model`` for ``device``; a rep whose ``run`` takes the inputs (a
        :class:`SpecializingRep` when shape operands are graph inputs)."""
        if not cls.supports_device(device):
            raise ModelError(f"tvm-cocopie's ONNX backend runs on CPU, not {device}")
        proto = load_model(model)
        bound = shape_operand_inputs(proto)

        def build(specialized: onnx.ModelProto) -> TvmCocopieRep:
            return cls._build(specialized, **kwargs)

        if bound:
            return SpecializingRep(proto, bound, build)
        return build(proto)

    @classmethod
    def _build(cls, proto: onnx.ModelProto, **kwargs: Any) -> TvmCocopieRep:
        import tvm

        pipeline = kwargs.get("pipeline") or cls.pipeline or DEFAULT_PIPELINE
        target = kwargs.get("target") or default_target()
        if pipeline == "cocopie":
            register_pipeline()
        # prepare() has checked the model (a specialized copy only binds inputs of it)
        mod = from_onnx(proto, shapes=kwargs.get("shapes"), check=False)
        if not isinstance(target, tvm.target.Target):
            target = parse_target(target)
        tir = tir_pipeline_for(target) if pipeline == "cocopie" else "default"
        executable = tvm.compile(mod, target=target, relax_pipeline=pipeline, tir_pipeline=tir)
        return TvmCocopieRep(executable, proto)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        """Prepare ``model`` and run it once on ``inputs``; the outputs."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info=None, **kwargs: Any) -> tuple[Any, ...]:
        """Run one node: wrap it in a one-node model and run that."""
        opset = int(kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))
        values = [np.asarray(v) for v in inputs]
        graph_inputs = [
            onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            for name, v in zip(node.input, values) if name
        ]
        if outputs_info:
            graph_outputs = [
                onnx.helper.make_tensor_value_info(
                    name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), list(shape))
                for name, (dt, shape) in zip(node.output, outputs_info)
            ]
        else:
            graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output]
        graph = onnx.helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs,
                                       graph_outputs)
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
        return cls.run_model(model, [v for v, n in zip(values, node.input) if n], device,
                             **kwargs)


prepare = TvmCocopieBackend.prepare
run_model = TvmCocopieBackend.run_model
run_node = TvmCocopieBackend.run_node
supports_device = TvmCocopieBackend.supports_device

"""ONNX import: read a model, check it, and hand it to TVM's Relax ONNX frontend.

TVM's own importer (``tvm.relax.frontend.onnx``) does the conversion, with the
converters of :mod:`tvm_cocopie.frontend.ops` laid over its stock map (operators it
lacks, fixes, newer opsets). This module puts a careful door in front of it: a malformed file, an input shape that
does not fit, or operators the importer lacks become
:mod:`tvm_cocopie.errors` exceptions that say what is wrong and what to do, and all
unsupported operators of a model are reported at once, with their opset and nodes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import ClassVar

import onnx
import tvm
import tvm_ffi

from ..errors import ModelError, UnsupportedOperatorError, last_line
from ..exprs import param_dim_names, with_functions
from .control_flow import fold_keeping_captures, simplify
from .folding import fold_constants
from .model import ModelLike, check_shapes, load_model, model_opset, static_shapes
from .ops.registry import converter_map

log = logging.getLogger(__name__)


#: Operators the stock importer handles outside its converter map.
_HANDLED_OUTSIDE_MAP = {"Constant", "If"}


def _iter_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _iter_nodes(sub)


def unsupported_operators(proto: onnx.ModelProto, convert_map: Mapping | None = None) -> dict:
    """Every operator of ``proto`` the importer cannot convert.

    Returns ``{(op_type, domain, opset): [node names]}``, subgraphs included.
    ``convert_map`` defaults to the extended map of :mod:`tvm_cocopie.frontend.ops`.
    """
    if convert_map is None:
        convert_map = converter_map()
    opsets = {e.domain or "ai.onnx": int(e.version) for e in proto.opset_import}
    missing: dict[tuple, list[str]] = {}
    for index, node in enumerate(_iter_nodes(proto.graph)):
        if node.op_type in convert_map or node.op_type in _HANDLED_OUTSIDE_MAP:
            continue
        domain = node.domain or "ai.onnx"
        key = (node.op_type, domain, opsets.get(domain, 0))
        missing.setdefault(key, []).append(node.name or f"#{index}")
    return missing


def from_onnx(
    model: ModelLike,
    shapes: Mapping[str, Sequence[int]] | None = None,
    keep_params_in_input: bool = False,
    check: bool = True,
) -> tvm.IRModule:
    """Import an ONNX model into a Relax ``IRModule`` with TVM's frontend.

    ``shapes`` fixes symbolic input dims (``{"x": [1, 3, 224, 224]}``); unset symbolic
    dims stay symbolic. Weights become constants unless ``keep_params_in_input``.
    Shape arithmetic that the fixed shapes make constant is folded first
    (:mod:`.folding`), which TVM's importer needs for models such as PP-OCR's;
    ``If``/``Loop``/``Scan`` known at compile time are resolved
    (:mod:`.control_flow`). Operators still unsupported after that are all
    reported at once. ``check=False`` skips ``onnx.checker`` for a ``ModelProto`` that
    :func:`load_model` has already checked.
    """
    proto = load_model(model, check=check)
    shapes = check_shapes(proto, shapes)

    proto = fold_keeping_captures(proto, lambda m: fold_constants(m, shapes)[0])
    proto = simplify(proto, lambda m: fold_constants(m)[0])  # constant If / Loop
    # after folding: an op whose inputs are all constants needs no converter
    missing = unsupported_operators(proto)
    if missing:
        lines = [
            f"  {op} (domain {domain}, opset {opset}): {len(nodes)} node(s), e.g. "
            + ", ".join(nodes[:3])
            for (op, domain, opset), nodes in sorted(missing.items())
        ]
        raise UnsupportedOperatorError(
            "TVM's ONNX frontend cannot import these operators of the model:\n"
            + "\n".join(lines)
            + "\nRe-export the model without them (a lower opset, or simplified with "
            "onnxsim), or file an issue naming them.",
            ops=missing,
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # checker warnings and renames are already handled
        try:
            # inputs with a symbolic dim kept by name have their dims in the folded proto
            mod = import_model(proto, shape_dict=static_shapes(shapes) or None,
                               keep_params_in_input=keep_params_in_input)
        except UnsupportedOperatorError:
            raise
        except Exception as err:
            raise ModelError(
                f"TVM's ONNX importer failed: {last_line(err)}. If an input has symbolic "
                "dims, fixing them with shapes={...} often helps."
            ) from err
    log.debug("imported ONNX model with %d nodes", len(proto.graph.node))
    return inline_bound_dims(mod)


def _importer_class():
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    class CocopieOnnxImporter(ONNXGraphImporter):
        """TVM's graph importer, converting each node with the extended map."""

        convert_map: ClassVar[dict] = {}

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            #: the dims :func:`unify_symbolic_dims` made in this import -> their input dims
            self.dim_origins: dict[str, frozenset] = {}

        def _check_for_unsupported_ops(self, graph):
            missing = sorted({n.op_type for n in graph.node if n.op_type not in self.convert_map
                              and n.op_type not in ("If", "Constant")})
            if missing:
                raise UnsupportedOperatorError(
                    "no converter for ONNX operator(s) " + ", ".join(missing),
                    ops={(op, "ai.onnx", self.opset): [] for op in missing},
                )

        def _convert_operator(self, op_name, inputs, attrs, opset):
            converter = self.convert_map.get(op_name)
            if converter is None:
                raise UnsupportedOperatorError(f"no converter for ONNX operator {op_name}")
            if op_name in BROADCAST_OPS or op_name == "Concat":
                inputs = unify_symbolic_dims(self.bb, inputs, self.dim_origins,
                                             attrs.get("axis")
                                             if op_name == "Concat" else None)
            try:
                result = converter.get_converter(opset)(
                    self.bb, inputs, attrs, [self._nodes, self._params]
                )
            except UnsupportedOperatorError:
                raise
            except Exception as err:
                node = attrs.get("tvm_custom", {}).get("name") or "(unnamed)"
                raise ModelError(
                    f"converting {op_name} node {node!r} (opset {opset}) failed: "
                    f"{last_line(err)}"
                ) from err
            from tvm import relax

            if isinstance(result, relax.Expr):
                result = self.bb.normalize(result)
            return result

    return CocopieOnnxImporter


#: ONNX elementwise operators with numpy broadcasting (:func:`broadcast_shape_kept`)
BROADCAST_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean",
                           "Where", "PRelu", "Equal", "Less", "Greater", "And", "Or"})


def unify_symbolic_dims(bb, inputs, origins: dict, concat_axis: int | None = None):
    """The operands of a broadcasting op (or a ``Concat`` along ``concat_axis``) with
    their symbolic dims made the same expression where the op needs them equal.

    A detector neck adds ``(H - 1) // 16 + 1`` rows to an upsampled
    ``((H - 1) // 32 + 1) * 2``: equal for the sizes the model takes (multiples of 32),
    not provably, and Relax would type the sum as a tensor of unknown shape, losing the
    shape of every later kernel (SOD²'s RDP would recover it as a constraint). Two
    broadcast dims that are not 1 must be equal; dims that are expressions of the same
    variables (:func:`_same_variables`) are taken to be that case, and the operands are
    ``match_cast`` to one new symbolic dim for each such axis: bound by the first cast, checked by the
    others at run time (a size that breaks it stops the model with an error, never a
    wrong answer). ``origins``: the import's record of the dims made so far (each one's
    input dims), filled here."""
    from tvm import relax

    shapes = []
    for arg in inputs:
        ty = getattr(arg, "ty", None) if isinstance(arg, relax.Expr) else None
        if not isinstance(ty, relax.TensorType) or ty.ndim <= 0:
            shapes.append(None)
        elif not isinstance(ty.shape, relax.ShapeExpr):
            return inputs
        else:
            shapes.append(list(ty.shape.values))
    known = [sh for sh in shapes if sh is not None]
    if len(known) < 2:
        return inputs
    rank = max(len(sh) for sh in known)
    if concat_axis is not None:
        if any(len(sh) != rank for sh in known):
            return inputs
        concat_axis = int(concat_axis) % rank
    target = {}
    for axis in range(rank):
        if axis == concat_axis:
            continue
        present = [sh[len(sh) - rank + axis] for sh in known if len(sh) - rank + axis >= 0]
        symbolic = [d for d in present if not isinstance(d, tvm.tirx.IntImm)]
        if any(isinstance(d, tvm.tirx.IntImm) and int(d) != 1 for d in present) or not symbolic:
            continue  # a static dim decides, or nothing to unify
        if any(not tvm_ffi.structural_equal(d, symbolic[0]) for d in symbolic) and \
                _same_variables(symbolic, origins):
            fresh = tvm.tirx.Var(f"d{axis}_{len(origins)}", "int64")
            origins[fresh.name] = _origins(symbolic[0], origins)
            target[axis] = fresh
    if not target:
        return inputs
    # every operand cast to the fresh dims: the first cast binds them at run time, the
    # others check against them (a cast to an existing var's simpler expression crashed
    # TVM 0.27's CanonicalizeBindings; fresh vars do not)
    order = sorted(range(len(inputs)), key=lambda i: -len(str(shapes[i])) if shapes[i] else 0)
    out = list(inputs)
    for i in order:
        arg, sh = inputs[i], shapes[i]
        if sh is None:
            continue
        dims = list(sh)
        for axis, dim in target.items():
            local = len(sh) - rank + axis
            if local >= 0 and not isinstance(dims[local], tvm.tirx.IntImm):
                dims[local] = dim
        if any(not tvm_ffi.structural_equal(a, b) for a, b in zip(dims, sh)):
            if not isinstance(arg, relax.Var):  # ConvertLayout reads a cast var's layout
                arg = bb.emit(arg)
            out[i] = bb.match_cast(arg, relax.TensorType(dims, arg.ty.dtype))
    return out


def inline_bound_dims(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each symbolic dim that a ``match_cast`` binds to an expression of
    dims already known replaced by that expression, in every Relax function.

    :func:`unify_symbolic_dims` binds a fresh dim with the first of its casts (a
    detector neck's ``d2_0`` := ``(H - 1) // 32 * 2 + 2``), and the shapes computed
    from it carry the fresh dim (an upsampling by 4 gives ``d2_0 * 4``). Relax re-infers
    shapes whenever a pass rebuilds a call (``ConvertLayout`` does), and its inference
    knows nothing of the cast: a concat of ``d2_0 * 4`` and ``(H - 1) // 32 * 8 + 8``
    rows, equal, got an unknown shape and stopped the build. With the dim replaced by
    what it is bound to, both are expressions of ``H`` and provably equal. The binding
    cast becomes trivial (TVM drops it); the checking casts stay and still stop a size
    that breaks them."""
    from tvm import relax

    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        bound = _bound_dims(func)
        if bound:
            updates[gv] = func.bind_symbolic_vars(bound)
    if not updates:
        return mod
    return relax.transform.Normalize()(with_functions(mod, updates))


def _bound_dims(func) -> dict:
    """``{dim: expression}`` for the dims ``func``'s casts bind from known dims."""
    from tvm import relax
    from tvm.sym import Analyzer

    known = param_dim_names(func)
    analyzer = Analyzer()
    bound: dict = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            if not isinstance(binding, relax.MatchCast):
                continue
            pattern = getattr(binding.ty, "shape", None)
            actual = getattr(binding.value.ty, "shape", None)
            if not (isinstance(pattern, relax.ShapeExpr) and isinstance(actual, relax.ShapeExpr)
                    and len(pattern.values) == len(actual.values)):
                continue
            for dim, value in zip(pattern.values, actual.values):
                if not isinstance(dim, tvm.tirx.Var) or dim.name in known:
                    continue
                value = analyzer.simplify(value)  # the dims bound so far substituted
                if all(v.name in known for v in tvm.tirx.analysis.undefined_vars(value)):
                    bound[dim] = value
                    analyzer.bind(dim, value)
                known.add(dim.name)
    return bound


def _origins(dim, origins: dict) -> frozenset:
    """The input dims (names) a symbolic dim is an expression of, through the vars that
    :func:`unify_symbolic_dims` made (``origins``: made var -> its input dims)."""
    names = set()
    for var in tvm.tirx.analysis.undefined_vars(dim):
        names |= origins.get(var.name, {var.name})
    return frozenset(names)


def _same_variables(dims, origins: dict) -> bool:
    """Whether the symbolic dims are expressions of the same input dims: sizes one input
    dim takes through different paths (a neck's ``H // 16`` rows and its upsampled
    ``(H // 32) * 2``). Dims of different variables (``D`` against ``E``) are left alone:
    broadcasting lets either be 1 at run time."""
    first = _origins(dims[0], origins)
    return all(_origins(d, origins) == first for d in dims[1:])



def _zero_sized_inputs(proto: onnx.ModelProto) -> dict[str, list[int]]:
    """Static shapes of inputs with a zero-sized dim (TVM's parser reads ``0`` as unknown)."""
    shapes = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else []
        if any(d.HasField("dim_value") and d.dim_value == 0 for d in dims) and all(
                d.HasField("dim_value") for d in dims):
            shapes[value.name] = [int(d.dim_value) for d in dims]
    return shapes


def import_model(
    proto: onnx.ModelProto,
    shape_dict: Mapping[str, Sequence[int]] | None = None,
    keep_params_in_input: bool = False,
    convert_map: Mapping[str, type] | None = None,
):
    """Import ``proto`` into a Relax ``IRModule`` with the extended converter map.

    Raises :class:`~tvm_cocopie.errors.ModelError` naming the op and node that
    failed to convert.
    """
    if proto.ir_version < 3:
        raise ModelError(f"ONNX IR version {proto.ir_version} is too old (3 or newer needed)")
    importer_cls = _importer_class()
    shapes = {**_zero_sized_inputs(proto), **dict(shape_dict or {})}
    importer = importer_cls(
        shapes, "float32", keep_params_in_input=keep_params_in_input,
        sanitize=True,
    )
    importer.convert_map = dict(convert_map) if convert_map is not None else converter_map()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):  # the stock importer prints on errors
            return importer.from_onnx(proto.graph, model_opset(proto))
    finally:
        if captured.getvalue():
            log.debug("importer output: %s", captured.getvalue().strip())

"""Control flow resolved at compile time: ``If`` with a known condition, ``Loop``
with a known trip count, and ``Scan`` (spec: https://onnx.ai/onnx/operators/onnx__If.html,
``onnx__Loop``, ``onnx__Scan``).

These are ONNX-to-ONNX rewrites run before the import (after constant folding made
conditions and trip counts constants, see :func:`simplify`): an ``If`` whose
condition is an initializer is replaced by the nodes of the branch it takes, so only
that branch is converted (function-expanded graphs guard shape-specific code behind
such ``If`` s, and the untaken branch often cannot be built for the given shapes).
A ``Loop`` with a constant trip count and a ``Scan`` over a static axis are unrolled
into straight-line nodes, renamed per iteration.

An ``If`` whose condition is known only at run time (Silero VAD's on its sample-rate
input) stays, and each branch is simplified as a model of its own: TVM's importer
converts branches without folding them, and its ``Pad`` needs constant pads. One of
its branches that cannot run at the given input shapes becomes a run-time check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ModelError

log = logging.getLogger(__name__)

#: Unroll at most this many loop iterations (graph size grows with the count).
MAX_UNROLL = 256
#: The run-time check of an ``If`` condition that replaces a branch which cannot run at
#: the given input shapes (``GUARD_OP(cond, value) -> value``, attributes ``expected``
#: and ``message``; converter: :class:`.ops.control.IfGuard`).
GUARD_DOMAIN = "ai.tvm_cocopie"
GUARD_OP = "IfGuard"


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _copy_nodes(graph: onnx.GraphProto, rename: Callable[[str], str]) -> list[onnx.NodeProto]:
    """The nodes of ``graph`` with every value name passed through ``rename``
    (nested subgraphs keep their own names but see renamed outer values)."""
    out = []
    for node in graph.node:
        clone = onnx.NodeProto()
        clone.CopyFrom(node)
        clone.input[:] = [rename(n) if n else n for n in node.input]
        clone.output[:] = [rename(n) if n else n for n in node.output]
        for attr in clone.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                _rename_free_inputs(sub, rename)
        if clone.name:
            clone.name = rename(clone.name)
        out.append(clone)
    return out


def _rename_free_inputs(graph: onnx.GraphProto, rename: Callable[[str], str]) -> None:
    """Rename the outer-scope values a nested subgraph reads."""
    local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        local.update(node.output)
    for node in graph.node:
        node.input[:] = [rename(n) if n and n not in local else n for n in node.input]
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                _rename_free_inputs(sub, lambda n: n if n in local else rename(n))


def _identity(src: str, dst: str) -> onnx.NodeProto:
    return helper.make_node("Identity", [src], [dst])


def _inline_if(node, consts, initializers) -> list[onnx.NodeProto] | None:
    cond = consts.get(node.input[0])
    if cond is None:
        return None
    branch_name = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
    branch = next(a.g for a in node.attribute if a.name == branch_name)
    initializers.extend(branch.initializer)
    nodes = _copy_nodes(branch, lambda n: n)
    nodes += [_identity(o.name, out) for o, out in zip(branch.output, node.output) if out]
    return nodes


def _unroll_loop(node, consts, initializers, tag, opset) -> list[onnx.NodeProto] | None:
    """``Loop`` with a constant trip count whose body keeps ``cond`` true or ignores it."""
    trip = consts.get(node.input[0]) if node.input[0] else None
    if trip is None or (len(node.input) > 1 and node.input[1] and node.input[1] not in consts):
        return None
    count = int(np.asarray(trip).reshape(-1)[0])
    if count > MAX_UNROLL:
        return None
    body = next(a.g for a in node.attribute if a.name == "body")
    n_carried = len(node.input) - 2
    n_scan = len(body.output) - 1 - n_carried
    if len(node.input) > 1 and node.input[1] and not bool(consts[node.input[1]].reshape(-1)[0]):
        count = 0
    # the body's condition output must be a constant true (or pass its input through)
    body_consts = _constants(body)
    cond_out = body.output[0].name
    identities = {n.output[0]: n.input[0] for n in body.node if n.op_type == "Identity"}
    while cond_out in identities:
        cond_out = identities[cond_out]
    passthrough = cond_out == body.input[1].name
    if not passthrough and not (cond_out in body_consts and bool(body_consts[cond_out].all())):
        return None
    initializers.extend(body.initializer)
    carried = list(node.input[2:])
    scans: list[list[str]] = [[] for _ in range(n_scan)]
    nodes: list[onnx.NodeProto] = []
    for i in range(count):
        prefix = f"{tag}_it{i}_"
        iter_name = prefix + "iter"
        initializers.append(numpy_helper.from_array(np.array(i, dtype=np.int64), iter_name))
        binding = {body.input[0].name: iter_name}
        if len(body.input) > 1:
            binding[body.input[1].name] = node.input[1] if node.input[1] else prefix + "cond"
            if not node.input[1]:
                initializers.append(numpy_helper.from_array(np.array(True), prefix + "cond"))
        for inp, value in zip(body.input[2:], carried):
            binding[inp.name] = value
        local = {t.name for t in body.initializer}
        for n in body.node:
            local.update(n.output)

        def rename(name, binding=binding, local=local, prefix=prefix):
            if name in binding:
                return binding[name]
            return prefix + name if name in local else name

        nodes += _copy_nodes(body, rename)
        outs = [rename(o.name) for o in body.output]
        carried = outs[1:1 + n_carried]
        for k in range(n_scan):
            scans[k].append(outs[1 + n_carried + k])
    final = list(node.output)
    for value, out in zip(carried if count else node.input[2:], final[:n_carried]):
        if out:
            nodes.append(_identity(value, out))
    for k, out in enumerate(final[n_carried:]):
        if not out:
            continue
        if not scans[k]:
            return None  # an empty scan output needs its element type and shape
        stacked = [f"{tag}_scan{k}_{i}" for i in range(len(scans[k]))]
        axes = f"{tag}_scan_axes"
        if opset >= 13 and axes not in {t.name for t in initializers}:
            initializers.append(numpy_helper.from_array(np.array([0], dtype=np.int64), axes))
        for src, dst in zip(scans[k], stacked):
            if opset >= 13:
                nodes.append(helper.make_node("Unsqueeze", [src, axes], [dst]))
            else:
                nodes.append(helper.make_node("Unsqueeze", [src], [dst], axes=[0]))
        nodes.append(helper.make_node("Concat", stacked, [out], axis=0))
    return nodes


def _stack(values, out, axis, tag, opset, initializers) -> list[onnx.NodeProto]:
    """Nodes stacking ``values`` along a new ``axis`` into ``out``."""
    nodes, parts = [], []
    axes_name = f"{tag}_axes{axis}"
    if opset >= 13 and axes_name not in {t.name for t in initializers}:
        initializers.append(numpy_helper.from_array(np.array([axis], dtype=np.int64), axes_name))
    for i, value in enumerate(values):
        part = f"{tag}_part{i}"
        if opset >= 13:
            nodes.append(helper.make_node("Unsqueeze", [value, axes_name], [part]))
        else:
            nodes.append(helper.make_node("Unsqueeze", [value], [part], axes=[axis]))
        parts.append(part)
    nodes.append(helper.make_node("Concat", parts, [out], axis=axis))
    return nodes


def _unroll_scan(node, shapes, initializers, tag, opset) -> list[onnx.NodeProto] | None:
    """``Scan`` (opset 9+) over a statically known sequence length."""
    if opset < 9:
        return None
    attrs = {a.name: a for a in node.attribute}
    body = attrs["body"].g
    n_scan = attrs["num_scan_inputs"].i
    n_state = len(node.input) - n_scan
    scan_inputs = list(node.input[n_state:])
    in_axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else [0] * n_scan
    in_dirs = (list(attrs["scan_input_directions"].ints) if "scan_input_directions" in attrs
               else [0] * n_scan)
    n_out_scan = len(body.output) - n_state
    out_axes = (list(attrs["scan_output_axes"].ints) if "scan_output_axes" in attrs
                else [0] * n_out_scan)
    out_dirs = (list(attrs["scan_output_directions"].ints)
                if "scan_output_directions" in attrs else [0] * n_out_scan)
    first = shapes.get(scan_inputs[0])
    if first is None:
        return None
    axis0 = in_axes[0] % len(first)
    steps = first[axis0]
    if not isinstance(steps, int) or steps > MAX_UNROLL:
        return None
    initializers.extend(body.initializer)
    local = {t.name for t in body.initializer}
    for n in body.node:
        local.update(n.output)
    nodes: list[onnx.NodeProto] = []
    states = list(node.input[:n_state])
    collected: list[list[str]] = [[] for _ in range(n_out_scan)]
    for i in range(steps):
        prefix = f"{tag}_it{i}_"
        binding = dict(zip((v.name for v in body.input[:n_state]), states))
        for j, (name, value) in enumerate(zip(body.input[n_state:], scan_inputs)):
            rank = len(shapes.get(value, first))
            index = steps - 1 - i if in_dirs[j] else i
            idx_name = f"{prefix}idx{j}"
            initializers.append(numpy_helper.from_array(np.array(index, dtype=np.int64),
                                                        idx_name))
            sliced = f"{prefix}slice{j}"
            nodes.append(helper.make_node("Gather", [value, idx_name], [sliced],
                                          axis=in_axes[j] % rank))
            binding[name.name] = sliced

        def rename(name, binding=binding, prefix=prefix):
            if name in binding:
                return binding[name]
            return prefix + name if name in local else name

        nodes += _copy_nodes(body, rename)
        outs = [rename(o.name) for o in body.output]
        states = outs[:n_state]
        for k in range(n_out_scan):
            collected[k].append(outs[n_state + k])
    for value, out in zip(states, node.output[:n_state]):
        if out:
            nodes.append(_identity(value, out))
    for k, out in enumerate(node.output[n_state:]):
        if not out:
            continue
        values = collected[k][::-1] if out_dirs[k] else collected[k]
        nodes += _stack(values, out, out_axes[k], f"{tag}_out{k}", opset, initializers)
    return nodes


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with ONNX's shape inference applied, or as it is if inference fails."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as err:  # noqa: BLE001 - shape inference is best effort here
        log.debug("shape inference failed: %s", err)
        return model


def _static_shapes(model: onnx.ModelProto) -> dict[str, list]:
    shapes = {}
    g = _inferred(model).graph
    for value in [*g.value_info, *g.input, *g.output]:
        ttype = value.type.tensor_type
        if ttype.HasField("shape"):
            shapes[value.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param
                                  for d in ttype.shape.dim]
    for init in g.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _rewrite(graph: onnx.GraphProto, counter: list[int], opset: int,
             shapes: dict | None = None) -> int:
    consts = _constants(graph)
    new_nodes: list[onnx.NodeProto] = []
    extra_inits: list[onnx.TensorProto] = []
    changed = 0
    for node in graph.node:
        replacement = None
        if node.domain in ("", "ai.onnx"):
            if node.op_type == "If":
                replacement = _inline_if(node, consts, extra_inits)
            elif node.op_type == "Loop":
                counter[0] += 1
                replacement = _unroll_loop(node, consts, extra_inits, f"__loop{counter[0]}",
                                           opset)
            elif node.op_type == "Scan" and shapes is not None:
                counter[0] += 1
                replacement = _unroll_scan(node, shapes, extra_inits, f"__scan{counter[0]}",
                                           opset)
        if replacement is None:
            new_nodes.append(node)
        else:
            new_nodes.extend(replacement)
            changed += 1
    if changed:
        del graph.node[:]
        graph.node.extend(new_nodes)
        graph.initializer.extend(extra_inits)
    return changed


def _free_names(sub: onnx.GraphProto) -> set[str]:
    """Outer values that ``sub`` (its nested subgraphs included) reads."""
    local = {v.name for v in sub.input} | {t.name for t in sub.initializer}
    for inner in sub.node:
        local.update(inner.output)
    names = {n for inner in sub.node for n in inner.input if n and n not in local}
    return names | (captured_names(sub) - local)


def captured_names(graph: onnx.GraphProto) -> set[str]:
    """Outer values that the subgraphs of ``graph``'s nodes read."""
    names: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs):
                names |= _free_names(sub)
    return names


def fold_keeping_captures(model: onnx.ModelProto,
                          fold: Callable[[onnx.ModelProto], onnx.ModelProto]) -> onnx.ModelProto:
    """Run ``fold`` without losing values only subgraphs read (a folder that counts
    uses in the main graph alone would drop them): they are graph outputs meanwhile."""
    names = captured_names(model.graph) - {o.name for o in model.graph.output}
    if not names:
        return fold(model)
    tmp = onnx.ModelProto()
    tmp.CopyFrom(model)
    tmp.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in sorted(names))
    out = fold(tmp)
    kept = [o for o in out.graph.output if o.name not in names]
    del out.graph.output[:]
    out.graph.output.extend(kept)
    return out


def simplify(model: onnx.ModelProto, fold: Callable[[onnx.ModelProto], onnx.ModelProto],
             max_rounds: int = 8, guard: bool = True) -> onnx.ModelProto:
    """Inline constant ``If`` s and unroll constant ``Loop`` s, folding in between;
    then simplify the branches of the ``If`` s whose condition is known only at run
    time (see :func:`_simplify_runtime_branches`; ``guard`` as there)."""
    counter = [0]
    opset = next((int(e.version) for e in model.opset_import if e.domain in ("", "ai.onnx")), 1)
    for _ in range(max_rounds):
        out = onnx.ModelProto()
        out.CopyFrom(model)
        try:
            has_scan = any(n.op_type == "Scan" for n in out.graph.node)
            changed = _rewrite(out.graph, counter, opset,
                               _static_shapes(out) if has_scan else None)
        except (StopIteration, KeyError, IndexError) as err:
            raise ModelError(f"malformed control-flow node: {err}") from None
        if not changed:
            break
        log.info("resolved %d control-flow node(s) at compile time", changed)
        model = fold_keeping_captures(out, fold)
    return _simplify_runtime_branches(model, fold, guard)


def _outer_values(model: onnx.ModelProto) -> tuple[dict, dict]:
    """The graph's value types (after shape inference) and its initializers."""
    g = _inferred(model).graph
    types = {v.name: v.type for v in [*g.value_info, *g.input, *g.output]
             if v.type.WhichOneof("value")}
    return types, {t.name: t for t in model.graph.initializer}


def _branch_as_model(model: onnx.ModelProto, branch: onnx.GraphProto, types: dict,
                     inits: dict) -> tuple[onnx.ModelProto, set[str], bool]:
    """``branch`` as a model of its own: the outer values it reads become its inputs
    (typed as in the outer graph) or, for initializers, its initializers. Returns the
    model, those names and whether all of them have a known type."""
    sub = onnx.ModelProto()
    sub.ir_version = model.ir_version
    sub.opset_import.extend(model.opset_import)
    sub.functions.extend(model.functions)
    sub.graph.CopyFrom(branch)
    free = _free_names(branch)
    for name in sorted(free):
        if name in inits:
            sub.graph.initializer.append(inits[name])
        elif name in types:
            sub.graph.input.append(helper.make_value_info(name, types[name]))
        else:
            sub.graph.input.append(helper.make_empty_tensor_value_info(name))
    return sub, free, free <= set(inits) | set(types)


def _shape_check(sub: onnx.ModelProto) -> tuple[bool | None, str, dict[str, float]]:
    """ONNX's strict shape inference over a branch model: whether the branch can run
    (``None``: inference itself could not tell), its first complaint, and the element
    counts of its tensor outputs (``inf`` when unknown)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(sub, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        return False, lines[0] if lines else "shape inference failed", {}
    except Exception as err:  # noqa: BLE001 - e.g. a model over protobuf's 2 GB
        log.debug("shape inference of a branch failed: %s", err)
        return None, "", {}
    sizes = {}
    for value in inferred.graph.output:
        if not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        known = value.type.tensor_type.HasField("shape") and all(
            d.HasField("dim_value") for d in dims)
        sizes[value.name] = float(np.prod([d.dim_value for d in dims])) if known else np.inf
    return True, "", sizes


def _guarded_branch(node: onnx.NodeProto, taken: str, reason: str, sizes: dict[str, float],
                    initializers: list) -> list[onnx.NodeProto]:
    """The nodes of ``node``'s branch ``taken``, one tensor output (the smallest, of
    ``sizes``) passed through a :data:`GUARD_OP` that raises at run time if the
    condition selects the other branch (which cannot run: ``reason``)."""
    branch = next(a.g for a in node.attribute if a.name == taken)
    other = "else_branch" if taken == "then_branch" else "then_branch"
    initializers.extend(branch.initializer)
    nodes = _copy_nodes(branch, lambda n: n)
    pairs = [(o.name, out) for o, out in zip(branch.output, node.output) if out]
    guarded = min((p for p in pairs if p[0] in sizes), key=lambda p: sizes[p[0]])[1]
    for src, out in pairs:
        if out != guarded:
            nodes.append(_identity(src, out))
            continue
        message = (f"the condition of If node {node.name!r} selected its {other}, which "
                   f"cannot run at the input shapes the model was compiled for ({reason})")
        nodes.append(helper.make_node(GUARD_OP, [node.input[0], src], [out],
                                      name=f"{node.name or 'If'}_guard", domain=GUARD_DOMAIN,
                                      expected=int(taken == "then_branch"), message=message))
    return nodes


def _simplify_runtime_branches(model: onnx.ModelProto,
                               fold: Callable[[onnx.ModelProto], onnx.ModelProto],
                               guard: bool) -> onnx.ModelProto:
    """Simplify each branch of the ``If`` s left in the graph (their condition is
    known only at run time) as a model of its own: compile-time values inside are
    folded (e.g. a ``Pad``'s pads computed from constants, which TVM's converter needs
    constant) and the branch's own compile-time ``If`` s and ``Loop`` s resolved.

    TVM's importer builds both branches of an ``If`` for the given input shapes. With
    ``guard`` (the main graph, whose nodes always run), an ``If`` whose one branch ONNX
    shape inference proves cannot run at those shapes (while the other can) becomes the
    other branch and a run-time check of the condition (:data:`GUARD_OP`): the model
    raises if the condition selects the branch that cannot run, as ONNX Runtime does.
    """
    if not any(n.op_type == "If" and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types, inits = _outer_values(out)
    nodes, extra_inits, simplified, guarded = [], [], 0, 0
    for node in out.graph.node:
        if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        checks = {}
        for attr in node.attribute:
            if attr.type != onnx.AttributeProto.GRAPH:
                continue
            sub, free, typed = _branch_as_model(out, attr.g, types, inits)
            sub = simplify(fold_keeping_captures(sub, fold), fold, guard=False)
            if guard:  # a value of unknown type makes strict inference fail anyway
                checks[attr.name] = _shape_check(sub) if typed else (None, "", {})
            branch = sub.graph
            del branch.input[:]  # the outer values stay the outer graph's
            kept = [t for t in branch.initializer if t.name not in free]
            del branch.initializer[:]
            branch.initializer.extend(kept)
            attr.g.CopyFrom(branch)
        simplified += 1
        verdicts = {runs for runs, _, _ in checks.values()}
        taken = next((name for name, (runs, _, sizes) in checks.items() if runs and sizes), None)
        if len(checks) == 2 and verdicts == {False, True} and taken:
            reason = next(reason for runs, reason, _ in checks.values() if not runs)
            log.warning("If node %r: its %s cannot run at the given input shapes (%s); "
                        "compiling the %s, with its condition checked at run time",
                        node.name, "else_branch" if taken == "then_branch" else "then_branch",
                        reason, taken)
            nodes += _guarded_branch(node, taken, reason, checks[taken][2], extra_inits)
            guarded += 1
        else:
            nodes.append(node)
    if guarded:
        del out.graph.node[:]
        out.graph.node.extend(nodes)
        out.graph.initializer.extend(extra_inits)
        if not any(e.domain == GUARD_DOMAIN for e in out.opset_import):
            out.opset_import.append(helper.make_opsetid(GUARD_DOMAIN, 1))
    log.info("simplified the branches of %d If node(s) whose condition is known only at "
             "run time", simplified)
    return out

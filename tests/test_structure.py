"""The package's import structure: floors that every import points down, no circles.

The folder tree reads as the data flow (see the README's layout section): low-level
modules that several wings share at the bottom, then computes, kernels, passes and
schedule rules, the pipeline, the compile API, and the tools over it all. Every
``tvm_cocopie`` import, at module level or inside a function, is read with ``ast``
and must go to a module on the same floor or a lower one; the modules importing
each other must form no circle; no private name crosses a module boundary.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tvm_cocopie"

#: module prefix -> floor; the longest matching prefix wins. A higher floor may import
#: a lower or the same floor, never a higher one.
FLOORS = {
    "tvm_cocopie.errors": 0,
    "tvm_cocopie.threads": 0,
    "tvm_cocopie.paths": 0,
    "tvm_cocopie.sqlite_file": 0,
    "tvm_cocopie.vm_scratch": 0,
    "tvm_cocopie.vm_dims": 0,
    "tvm_cocopie.exprs": 1,
    "tvm_cocopie.target": 1,
    "tvm_cocopie.bench.timing": 1,
    "tvm_cocopie.models": 2,
    "tvm_cocopie.pruning": 2,
    "tvm_cocopie.ptq": 2,
    "tvm_cocopie.onnx_file": 1,
    "tvm_cocopie.emulation": 2,
    "tvm_cocopie.metaschedule": 2,
    "tvm_cocopie.latency": 2,
    "tvm_cocopie.tir_stmt": 1,
    "tvm_cocopie.lane_shuffles": 1,
    "tvm_cocopie.kernel_knobs": 1,
    "tvm_cocopie.tir_pipeline": 2,
    "tvm_cocopie.frontend": 3,
    "tvm_cocopie.topi": 3,
    "tvm_cocopie.hexagon": 4,
    "tvm_cocopie.hexagon.kernels": 4,
    "tvm_cocopie.relay_passes": 5,
    "tvm_cocopie.hexagon.selection": 5,
    "tvm_cocopie.schedules": 6,
    "tvm_cocopie.hexagon.executor": 6,
    "tvm_cocopie.hexagon.relax_graph": 7,
    "tvm_cocopie.hexagon.select_stage": 7,
    "tvm_cocopie.pipeline": 8,
    "tvm_cocopie.api": 9,
    "tvm_cocopie.neon": 9,
    "tvm_cocopie.hexagon.tools": 9,
    "tvm_cocopie.frontend.backend": 10,
    "tvm_cocopie.hexagon.cli": 10,
    "tvm_cocopie.bench": 10,
    "tvm_cocopie.transfer_tuning": 11,
    "tvm_cocopie.cli": 12,
    "tvm_cocopie": 12,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int, list[str]]]:
    """``[(imported module, line, names taken)]`` for every import of the package in ``path``."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                stem = base[: len(base) - node.level + 1] if node.level > 1 else base
                mod = ".".join(stem + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [a.name for a in node.names]
            submodules = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in known]
            others = [n for n in names if f"{mod}.{n}" not in known]
            targets = [(s, []) for s in submodules] + ([(mod, others)] if others else [])
        else:
            continue
        for target, names in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append((target, node.lineno, names))
    return found


def _floor(module: str) -> int:
    prefix = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[prefix]


def _graph():
    mods = _modules()
    known = set(mods)
    return mods, {name: _imports(name, path, known) for name, path in mods.items()}


def test_every_module_has_a_floor():
    mods, _ = _graph()
    assert all(any(m == p or m.startswith(p + ".") for p in FLOORS) for m in mods)


def test_imports_point_down():
    mods, graph = _graph()
    upward = [
        f"{mods[name].relative_to(PACKAGE.parent)}:{line} imports {target} "
        f"(floor {_floor(name)} -> {_floor(target)})"
        for name, imports in graph.items()
        for target, line, _ in imports
        if _floor(target) > _floor(name)
    ]
    assert not upward, "imports from a lower floor to a higher one:\n" + "\n".join(upward)


def test_no_import_circle():
    _, graph = _graph()
    edges = {name: {t for t, _, _ in imports} for name, imports in graph.items()}
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_no_private_name_crosses_a_module():
    mods, graph = _graph()
    crossing = [
        f"{mods[name].relative_to(PACKAGE.parent)}:{line} takes {n} from {target}"
        for name, imports in graph.items()
        for target, line, names in imports
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not crossing, "private names imported across modules:\n" + "\n".join(crossing)


@pytest.mark.parametrize("source, ok", [
    ("from tvm_cocopie.pipeline import run_until\n", False),
    ("from ..errors import CocopieError\n", True),
])
def test_the_floor_check_catches_an_upward_import(tmp_path, source, ok):
    """A module on floor 3 (topi) importing the pipeline (floor 8) is caught."""
    path = tmp_path / "probe.py"
    path.write_text(source)
    mods = set(_modules())
    imports = _imports("tvm_cocopie.topi.probe", path, mods | {"tvm_cocopie.topi.probe"})
    assert imports
    assert all(_floor(t) <= _floor("tvm_cocopie.topi.probe") for t, _, _ in imports) == ok

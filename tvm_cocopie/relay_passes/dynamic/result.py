"""What RDP found in one function: per binding and in summary.

:class:`RDPResult` is what later stages read (fusion and memory planning under
symbolic shapes, SOD² §5.4.2-5.4.3): every binding's rank, per-dim lattice value
(:mod:`.lattice`) and operator class before and after constant propagation
(:mod:`.classes`), the substitutions RDP proved, and summary counts. It logs itself
(:meth:`RDPResult.describe`) and serializes to plain data (:meth:`RDPResult.to_dict`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass

from .classes import OpClass
from .lattice import Abs, DimKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BindingInfo:
    """One binding: ``op`` is what computes it (``None`` for aliases, tuples,
    constants), ``before``/``after`` its class by the IR alone and after RDP's constant
    propagation (``None`` when it is no operator call), ``kind`` the shape rule."""

    name: str
    op: str | None
    before: OpClass | None
    after: OpClass | None
    kind: str | None
    abs: Abs

    @property
    def rank(self) -> int | None:
        """The tensor's rank (a ``Shape``'s: its length; ``None`` if unknown or a
        tuple)."""
        if self.abs.what == "shape":
            return None if self.abs.value is None else len(self.abs.value)
        return self.abs.rank

    @property
    def dims(self):
        """The tensor's dims; a ``Shape``'s or scalar's: the values it holds."""
        if self.abs.what in ("shape", "prim"):
            return self.abs.value
        return self.abs.dims

    @property
    def moved(self) -> bool:
        """Whether constant propagation moved the call to a less dynamic class."""
        return self.before is not None and self.after is not None and self.after < self.before

    def to_dict(self) -> dict:
        """Plain data: op, classes, rank, dims as ``[kind, text]`` pairs."""
        return {
            "op": self.op,
            "before": None if self.before is None else self.before.name,
            "after": None if self.after is None else self.after.name,
            "kind": self.kind,
            "what": self.abs.what,
            "rank": self.rank,
            "dims": _dims(self.dims),
            "value": _dims(self.abs.value) if self.abs.what == "tensor" else None,
            "fields": [_abs_dict(f) for f in self.abs.fields] or None,
        }


def _dims(dims):
    return None if dims is None else [[d.kind.label, str(d)] for d in dims]


def _abs_dict(a: Abs) -> dict:
    return {"what": a.what, "rank": a.rank, "dims": _dims(a.dims),
            "fields": [_abs_dict(f) for f in a.fields] or None}


def _tensors(a: Abs):
    if a.what == "tuple":
        for f in a.fields:
            yield from _tensors(f)
    elif a.what == "tensor":
        yield a


class RDPResult:
    """RDP's findings for one function (see the module docstring)."""

    def __init__(self, function: str, bindings: list[BindingInfo], params: dict,
                 output: Abs, substitutions: dict, constraints: list[str], sweeps: int,
                 conflicts: list[str] = ()):
        self.function = function
        self.bindings = {b.name: b for b in bindings}
        self.params = params
        self.output = output
        self.substitutions = substitutions
        self.constraints = constraints
        self.sweeps = sweeps
        self.conflicts = list(conflicts)

    def __getitem__(self, name: str) -> BindingInfo:
        return self.bindings[name]

    def __contains__(self, name: str) -> bool:
        return name in self.bindings

    # ------------------------------------------------------------------ counts
    def class_counts(self, after: bool = True) -> dict[str, int]:
        """Calls per class (``ISDO``...``EDO``), after constant propagation or before."""
        counts = Counter((b.after if after else b.before) for b in self.bindings.values())
        return {c.name: counts.get(c, 0) for c in OpClass}

    def dim_counts(self) -> dict[str, int]:
        """Dims of the bound tensors per lattice level, and tensors of unknown rank."""
        counts = Counter()
        for b in self.bindings.values():
            for t in _tensors(b.abs):
                if t.dims is None:
                    counts["unknown_rank"] += 1
                    continue
                counts.update(d.kind.label for d in t.dims)
        keys = [k.label for k in DimKind if k != DimKind.UNDEF] + ["unknown_rank"]
        return {k: counts.get(k, 0) for k in keys}

    def moved(self) -> list[BindingInfo]:
        """The calls constant propagation moved to a less dynamic class."""
        return [b for b in self.bindings.values() if b.moved]

    def summary(self) -> dict:
        """The counts: classes before and after, dims per level, moved calls."""
        return {
            "function": self.function,
            "bindings": len(self.bindings),
            "classes_before": self.class_counts(after=False),
            "classes_after": self.class_counts(after=True),
            "dims": self.dim_counts(),
            "moved": len(self.moved()),
            "substitutions": len(self.substitutions),
            "constraints": len(self.constraints),
            "conflicts": len(self.conflicts),
            "sweeps": self.sweeps,
        }

    # --------------------------------------------------------------- reporting
    def to_dict(self) -> dict:
        """Plain data (JSON-ready): summary, substitutions, per-binding details."""
        return {
            "summary": self.summary(),
            "substitutions": dict(self.substitutions),
            "constraints": list(self.constraints),
            "conflicts": list(self.conflicts),
            "params": {k: _abs_dict(v) for k, v in self.params.items()},
            "output": _abs_dict(self.output),
            "bindings": {k: b.to_dict() for k, b in self.bindings.items()},
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), sort_keys=False)

    def describe(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> str:
        """Log the summary at ``level`` and each binding one level lower (DEBUG under
        INFO); return the text."""
        logger = logger or log
        s = self.summary()
        head = [
            f"RDP {self.function}: {s['bindings']} bindings, {s['sweeps']} sweeps",
            "  classes before: " + _counts(s["classes_before"]),
            "  classes after:  " + _counts(s["classes_after"]),
            "  dims: " + _counts(s["dims"]),
        ]
        if self.substitutions:
            head.append("  proved: " + ", ".join(f"{k} = {v}"
                                                for k, v in self.substitutions.items()))
        head += [f"  moved {b.name} ({b.op}): {b.before.name} -> {b.after.name}"
                 for b in self.moved()]
        lines = [f"  {b.name} = {b.op or '-'} [{b.after.name if b.after is not None else '-'}]"
                 f" {b.abs}" for b in self.bindings.values()]
        logger.log(level, "%s", "\n".join(head))
        logger.log(max(level - 10, logging.DEBUG), "%s", "\n".join(lines))
        return "\n".join(head + lines)


def _counts(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())

"""What a transfer-tuning run found: per kernel (:class:`KernelResult`) and for the
model (:class:`Report`: kernel sums, the source model's score, the second pass,
end-to-end times when measured), as a table and as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field


@dataclass
class KernelResult:
    """One kernel's outcome: its untuned and default times, the winner (``"untuned"``,
    ``"default"`` or a source schedule's id) and its time, the candidates tried and why
    the others were rejected (seconds; ``inf`` where it could not be timed)."""

    name: str
    label: str
    weight: int
    untuned_secs: float
    default_secs: float
    best: str
    best_secs: float
    candidates: int = 0
    rejected: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        """Untuned time over the winner's."""
        return self.untuned_secs / self.best_secs if self.best_secs else float("nan")


@dataclass
class Report:
    """What a transfer-tuning run found, per kernel and for the model."""

    kernels: list[KernelResult]
    source_model: str | None
    scores: dict
    seconds: float
    cache_hits: int
    database: str
    model: dict = field(default_factory=dict)
    #: kernels the second pass retried: standalone, in-model, in-model on default, kept
    second_pass: dict = field(default_factory=dict)
    #: transferred candidates the latency model's pre-screen left unmeasured
    prescreened: int = 0

    def totals(self) -> dict:
        """Weighted kernel sums; kernels that could not be timed standalone (e.g. a
        gather whose random indices fall out of bounds) are left out of all three."""
        tot = {"untuned": 0.0, "default": 0.0, "transfer": 0.0}
        for k in self.kernels:
            if not all(math.isfinite(t) for t in (k.untuned_secs, k.default_secs, k.best_secs)):
                continue
            tot["untuned"] += k.weight * k.untuned_secs
            tot["default"] += k.weight * k.default_secs
            tot["transfer"] += k.weight * k.best_secs
        return tot

    def as_dict(self) -> dict:
        """The report as JSON-ready data (``inf`` written as ``null``)."""
        d = {"source_model": self.source_model, "scores": self.scores, "seconds": self.seconds,
             "cache_hits": self.cache_hits, "database": self.database,
             "kernel_totals_secs": self.totals(), "model": self.model,
             "second_pass": self.second_pass, "prescreened": self.prescreened,
             "kernels": [asdict(k) | {"speedup": k.speedup} for k in self.kernels]}
        return json.loads(json.dumps(d, default=str).replace("Infinity", "null"))

    def table(self) -> str:
        """The report as a text table, a line per kernel, then the sums."""
        header = (f"{'kernel':<40}{'calls':>6}{'untuned ms':>12}{'default ms':>12}"
                  f"{'best ms':>10}{'speedup':>9}  source")
        lines = [header]
        for k in self.kernels:
            lines.append(f"{k.name[:39]:<40}{k.weight:>6}{1e3 * k.untuned_secs:>12.3f}"
                         f"{1e3 * k.default_secs:>12.3f}{1e3 * k.best_secs:>10.3f}"
                         f"{k.speedup:>8.2f}x  {k.best}")
        t = self.totals()
        lines.append(f"kernel sum: untuned {1e3 * t['untuned']:.3f} ms, default "
                     f"{1e3 * t['default']:.3f} ms, transfer-tuned {1e3 * t['transfer']:.3f} ms "
                     f"({t['untuned'] / t['transfer']:.2f}x over untuned, "
                     f"{t['default'] / t['transfer']:.2f}x over default)")
        if self.prescreened:
            lines.append(f"pre-screen: {self.prescreened} transferred candidates not measured "
                         "(predicted slower by the latency model)")
        for name, row in self.second_pass.items():
            lines.append(f"second pass: {name} ran {1e3 * row['in_model']:.3f} ms in the model "
                         f"(standalone {1e3 * row['standalone']:.3f} ms); on its default schedule "
                         f"{1e3 * (row['in_model_default'] or float('nan')):.3f} ms: "
                         f"{'kept' if row['kept'] else 'back to default'}")
        if self.model:
            m = self.model
            lines.append(f"model end to end: untuned {m['untuned_ms']:.3f} ms, default "
                         f"{m['default_ms']:.3f} ms, transfer-tuned {m['transfer_ms']:.3f} ms "
                         f"({m['speedup_over_untuned']:.2f}x over untuned, "
                         f"{m['speedup_over_default']:.2f}x over default)")
        return "\n".join(lines)

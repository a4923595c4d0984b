"""Math-property graph rewriting (DNNFusion, seeds/004 §3.3, Table 3.4) on Relax.

Rules are data (:class:`~.rule.Rule`: pattern, replacement, preconditions, a test
example), grouped in modules named for their idea:

- :mod:`.associative`, :mod:`.distributive`, :mod:`.commutative`: the three
  mathematical properties of the thesis (Table 3.4 rows, corrected where printed
  wrong, and their siblings);
- :mod:`.identity`, :mod:`.folding`, :mod:`.layout`: what an inference graph
  optimizer is expected to do besides (identities, BN/scale/pad folding into conv
  and dense, constant subgraphs, transpose/reshape/squeeze/slice chains).

:mod:`.engine` applies them greedily by cost (:mod:`.cost`: FLOPs, then bytes moved).

>>> from tvm_cocopie.relay_passes.rewriting import MathPropertyRewrite
>>> mod = MathPropertyRewrite()(mod)
"""

from __future__ import annotations

import logging

import tvm

from ...errors import CocopieError
from . import associative, commutative, distributive, folding, identity
from . import data_movement as layout
from .engine import RewriteStats, rewrite_module
from .rule import CATEGORIES, Rule

log = logging.getLogger(__name__)

#: every rule, in a stable order
RULES: tuple[Rule, ...] = tuple(
    associative.RULES + distributive.RULES + commutative.RULES + identity.RULES
    + folding.RULES + layout.RULES
)
EXCLUDED = commutative.EXCLUDED


def _check_unique(rules) -> None:
    names = [r.name for r in rules]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate rule names: {sorted(dup)}")
    bad = [r.name for r in rules if r.category not in CATEGORIES]
    if bad:
        raise ValueError(f"rules with unknown category: {bad}")


_check_unique(RULES)


def rules_by_category() -> dict[str, list[str]]:
    """``{category: [rule names]}`` over every rule."""
    out: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for r in RULES:
        out[r.category].append(r.name)
    return out


def get_rules(names=None, categories=None) -> tuple[Rule, ...]:
    """The rules with these names and/or in these categories (all by default)."""

    rules = RULES
    if categories is not None:
        unknown = set(categories) - set(CATEGORIES)
        if unknown:
            raise CocopieError(f"unknown rule categories {sorted(unknown)}; known: {CATEGORIES}")
        rules = tuple(r for r in rules if r.category in categories)
    if names is not None:
        known = {r.name for r in RULES}
        unknown = set(names) - known
        if unknown:
            raise CocopieError(f"unknown rewrite rules {sorted(unknown)}; see "
                               "tvm_cocopie.relay_passes.rewriting.RULES")
        rules = tuple(r for r in rules if r.name in names)
    return rules


@tvm.transform.module_pass(opt_level=0, name="MathPropertyRewrite")
class MathPropertyRewrite:
    """The rewrite-stage pass: apply ``rules`` (all by default) greedily to every Relax
    function, at most ``max_rounds`` rounds.

    ``MathPropertyRewrite(rules=None, max_rounds=200)`` is a ``tvm.transform.Pass``; after
    it ran, its ``stats`` attribute holds that run's :class:`RewriteStats` (``None``
    before). Each pass object keeps its own.
    """

    def __init__(self, rules=None, max_rounds: int = 200):
        self.rules = tuple(rules) if rules is not None else RULES
        self.max_rounds = max_rounds
        self.stats: RewriteStats | None = None

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        """Rewrite every Relax function of ``mod``; the new module (statistics kept in
        ``stats``)."""
        new_mod, stats = rewrite_module(mod, self.rules, self.max_rounds)
        self.stats = stats
        log.info("rewriting: %d rounds, %d rewrites, FLOPs %d -> %d", stats.rounds,
                 sum(stats.applied.values()), stats.before.flops, stats.after.flops)
        log.debug("rewrites applied: %s", dict(stats.applied))
        return new_mod

__all__ = ["EXCLUDED", "RULES", "MathPropertyRewrite", "RewriteStats", "Rule", "get_rules",
           "rewrite_module", "rules_by_category"]

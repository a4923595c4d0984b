"""Tunable knobs shared by the CPU rules (the "tunable" side of a dlight rule).

With ``tunable=True`` a rule samples its free choices instead of fixing them, so that
MetaSchedule searches them (``tvm-cocopie tune``) and transfer-tuning replays them on
another kernel of the same design space (thesis ch. 6): :func:`sample_unroll_budget`,
:func:`split_tile`, and :data:`SPACE_ANNOTATION` naming the space on the anchor block.
"""

from __future__ import annotations

from tvm import s_tir

from .base import const_extent

#: unroll budgets MetaSchedule chooses from (0: leave the reduction loops rolled)
UNROLL_CANDIDATES = (0, 16, 64, 512)


def sample_unroll_budget(sch: s_tir.Schedule, loop) -> None:
    """Annotate ``loop`` with a sampled auto-unroll budget (a tunable decision)."""
    budget = sch.sample_categorical(list(UNROLL_CANDIDATES),
                                    [1.0 / len(UNROLL_CANDIDATES)] * len(UNROLL_CANDIDATES))
    sch.annotate(loop, "pragma_auto_unroll_max_step", budget)
    sch.annotate(loop, "pragma_unroll_explicit", 1)


def split_tile(sch: s_tir.Schedule, loop, inner: int, max_inner: int, sample: bool):
    """Split ``loop`` by ``inner``, or by a sampled perfect tiling whose decision is it."""
    if not sample:
        return sch.split(loop, [None, inner])
    extent = const_extent(sch, loop)
    factors = sch.sample_perfect_tile(loop, 2, max(inner, max_inner), [extent // inner, inner])
    return sch.split(loop, factors)


#: annotation of a tunable anchor block: which design space of which rule it is in
#: (transfer-tuning replays another kernel's decisions in the same space) and what the
#: register budget check needs (:mod:`tvm_cocopie.transfer_tuning.space`)
SPACE_ANNOTATION = "cocopie.space"

"""Tile decisions adapted to another extent: how a schedule moves to a kernel of other shapes (thesis §6.2.1)."""

from __future__ import annotations

import logging
import math

from ..topi.cpu.tiling import divisors

log = logging.getLogger(__name__)


def adapt_tile(decision: list[int], extent: int, max_innermost: int = -1) -> list[int]:
    """A perfect tiling of ``extent`` into ``len(decision)`` factors close to ``decision``.

    >>> adapt_tile([7, 2, 4, 8], 64)      # 8 and 4 divide: keep; 2 too; outer = 1
    [1, 2, 4, 8]
    >>> adapt_tile([1, 1, 16, 3], 56)     # 3 does not divide 56: nearest divisor 2 ... 4
    [1, 2, 7, 4]
    """
    n = len(decision)
    inner: list[int] = []
    left = int(extent)
    for pos, factor in enumerate(reversed(decision[1:])):
        factor = max(1, int(factor))
        if left % factor:
            factor = min(divisors(left), key=lambda d: (abs(math.log(d / factor)), -d))
        if pos == 0 and max_innermost > 0 and factor > max_innermost:
            factor = max(d for d in divisors(left) if d <= max_innermost)
        inner.append(factor)
        left //= factor
    result = [left] + list(reversed(inner))
    assert len(result) == n and math.prod(result) == extent
    return result

"""DNNFusion's fusion-opportunity table (seed 004, §3.4, Table 3.2; DIGEST.md).

For a producer of mapping type *first* and a consumer of type *second*, the table gives
the mapping type of the fused operator and whether to fuse:

- **green**: always profitable (every pair with a One-to-One operator, and
  Reorganize/Shuffle with each other): fuse;
- **yellow**: may or may not pay (Reorganize/Shuffle with One-to-Many or Many-to-Many in
  either order, Many-to-Many followed by One-to-Many, One-to-Many followed by
  One-to-Many): fuse only if the fused block measures (or is predicted) faster than
  its parts;
- **red**: never fuse (One-to-Many or Many-to-Many followed by Many-to-Many: the
  consumer would recompute its producer's elements many times).

23 of the 25 cells are fusable, the thesis' 23 code-generation rules. The data is
:data:`FUSED_TYPE` and :data:`COLOR`; :func:`opportunity` reads them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .mapping import MappingType

O2O, O2M, M2M = MappingType.ONE_TO_ONE, MappingType.ONE_TO_MANY, MappingType.MANY_TO_MANY
REORG, SHUF = MappingType.REORGANIZE, MappingType.SHUFFLE


class Color(enum.Enum):
    """How a pair fuses: always, if profiling says so, or never."""

    GREEN = "green"
    YELLOW = "yellow"
    RED = "red"


#: (first, second) -> the fused operator's mapping type; ``None`` where the pair is red.
#: Rows are the producer, columns the consumer, as in the thesis' table.
FUSED_TYPE: dict[tuple[MappingType, MappingType], MappingType | None] = {
    (O2O, O2O): O2O, (O2O, O2M): O2M, (O2O, M2M): M2M, (O2O, REORG): REORG, (O2O, SHUF): SHUF,
    (O2M, O2O): O2M, (O2M, O2M): O2M, (O2M, M2M): None, (O2M, REORG): O2M, (O2M, SHUF): O2M,
    (M2M, O2O): M2M, (M2M, O2M): M2M, (M2M, M2M): None, (M2M, REORG): M2M, (M2M, SHUF): M2M,
    (REORG, O2O): REORG, (REORG, O2M): O2M, (REORG, M2M): M2M, (REORG, REORG): REORG,
    (REORG, SHUF): REORG,
    (SHUF, O2O): SHUF, (SHUF, O2M): O2M, (SHUF, M2M): M2M, (SHUF, REORG): REORG,
    (SHUF, SHUF): SHUF,
}

_MOVES = (REORG, SHUF)

#: (first, second) -> how the pair fuses.
COLOR: dict[tuple[MappingType, MappingType], Color] = {
    pair: (Color.RED if fused is None
           else Color.GREEN if O2O in pair or (pair[0] in _MOVES and pair[1] in _MOVES)
           else Color.YELLOW)
    for pair, fused in FUSED_TYPE.items()
}


@dataclass(frozen=True)
class Opportunity:
    """One cell of the table: the fused type (``None`` if red) and its color."""

    fused: MappingType | None
    color: Color

    @property
    def fusable(self) -> bool:
        """Whether the pair may fuse at all (green, or yellow when profiling agrees)."""
        return self.color is not Color.RED


def opportunity(first: MappingType, second: MappingType) -> Opportunity:
    """The table's cell for a producer of type ``first`` feeding a consumer of type
    ``second``."""
    pair = (MappingType(first), MappingType(second))
    return Opportunity(FUSED_TYPE[pair], COLOR[pair])

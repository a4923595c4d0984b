"""GCD²'s global layout and instruction selection (seed 004, §4.4.1-§4.4.2).

- :mod:`.costmodel` (coefficients in :mod:`.coefficients`): packets per kernel variant
  and layout transform, fitted on emulator counts (§4.4.1's ``Cost`` and ``TC``);
- :mod:`.search`: local choice, exhaustive search, Eq. 4.2's chain DP, an exact
  frontier DP on DAGs, and partitioning at desirable edges;
- :mod:`.networks`: layer graphs (ResNet-50, MobileNetV2) priced by the cost model;
- selection by estimated cycles (``CostModel.cycles()``) against selection by packets:
  :func:`tvm_cocopie.hexagon.tools.cycle_selection.cycles_vs_packets_selection`.
"""

from __future__ import annotations

from .search import (
    DEFAULT_CAP,
    Graph,
    Node,
    Selection,
    chain_select,
    desirable_edges,
    exhaustive_select,
    frontier_select,
    global_select,
    local_select,
    partition,
)

__all__ = ["DEFAULT_CAP", "Graph", "Node", "Selection", "chain_select", "desirable_edges",
           "exhaustive_select", "frontier_select", "global_select", "local_select", "partition"]

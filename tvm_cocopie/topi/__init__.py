"""TE compute definitions of tvm-cocopie and the legalization that uses them.

``legalize_overrides(target)`` maps Relax operator names (``"relax.nn.conv2d"``...) to
legalization functions ``f(bb, call) -> relax.Expr``; the cocopie pipeline hands them
to ``relax.transform.LegalizeOps(customize_legalize_map=...)`` so that our computes
replace TOPI's for the operators we implement. An empty map means TVM's own
legalization, unchanged.

Modules, one idea each:

- :mod:`.conv2d_nchwc`: blocked-layout direct convolution (dense and grouped), with
  compile-time weight packing and a padded, flattened-or-2-D spatial register tile;
- :mod:`.depthwise_nchwc`: depthwise convolution in the same layout;
- :mod:`.dense_packed`: matmul / dense / batch matmul with a packed right-hand side;
- :mod:`.tiling`: the untuned heuristics (layout block, register tiles) from SIMD width;
- :mod:`.legalize`: plans and Relax legalization functions using the above.
"""

from __future__ import annotations

import tvm

from ..target import cpu_info, is_hexagon
from .cpu.legalize import overrides


def legalize_overrides(target: tvm.target.Target) -> dict:
    """Relax op name -> legalize function for ``target`` (empty: TVM's own legalization)."""
    if target.kind.name != "llvm" or is_hexagon(target):
        return {}

    return overrides(cpu_info(target))

"""TE compute definitions of tvm-cocopie and the legalization that uses them.

``legalize_overrides(target)`` maps Relax operator names (``"relax.nn.conv2d"``...) to
legalization functions ``f(bb, call) -> relax.Expr``; the cocopie pipeline hands them
to ``relax.transform.LegalizeOps(customize_legalize_map=...)`` so that our computes
replace TOPI's for the operators we implement. An empty map means TVM's own
legalization, unchanged.

Subpackages:

- :mod:`.cpu`: the fp32 CPU computes (blocked-layout direct, grouped and depthwise
  convolution, packed matmul, fast math), their tiling heuristics and the
  legalization that uses them;
- :mod:`.int8`: the int8 computes of the Hexagon backend, their numpy references and
  GCD²'s HVX layouts.
"""

from __future__ import annotations

import tvm

from ..target import cpu_info, is_hexagon
from .cpu.legalize import overrides


def legalize_overrides(target: tvm.target.Target, winograd: str = "auto",
                       grouped: str = "gspc") -> dict:
    """Relax op name -> legalize function for ``target`` (empty: TVM's own legalization);
    ``winograd``: Winograd for 3x3 stride-1 convs (``auto``, ``off``, ``2``, ``4``);
    ``grouped``: the kernel of grouped convs whose groups do not fall on whole channel
    chunks (``gspc``, or ``blocked``: block-diagonal, the CPU layer's before GSPC)."""
    if target.kind.name != "llvm" or is_hexagon(target):
        return {}

    return overrides(cpu_info(target), winograd, grouped)

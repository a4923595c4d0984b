"""TE compute definitions of tvm-cocopie and the legalization that uses them.

``legalize_overrides(target)`` maps Relax operator names (``"relax.nn.conv2d"``...) to
legalization functions ``f(bb, call) -> relax.Expr``; the cocopie pipeline hands them
to ``relax.transform.LegalizeOps(customize_legalize_map=...)`` so that our computes
replace TOPI's for the operators we implement. An empty map means TVM's own
legalization, unchanged.
"""

from __future__ import annotations

import tvm


def legalize_overrides(target: tvm.target.Target, options) -> dict:
    """Relax op name -> legalize function for ``target``."""
    return {}

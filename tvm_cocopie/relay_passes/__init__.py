"""Graph-level passes of tvm-cocopie.

The product spec names this folder ``relay_passes``; Relay is gone from TVM 0.27 and
these passes work on Relax, its successor. Each pass is a ``tvm.transform.Pass`` with
its options as arguments, composable in a ``Sequential``.

Stages of the cocopie pipeline served from here (see :mod:`tvm_cocopie.pipeline`):

- ``rewrite``: math-property graph rewriting (DNNFusion, seeds/004 §3.3);
- ``layout``: data-layout choice before legalization;
- ``fusion``: operator-class fusion (DNNFusion §3.4). Until the DNNFusion plan lands,
  TVM's own ``FuseOps`` + ``FuseTIR``.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .layout import layout_passes_for
from .rewriting import MathPropertyRewrite


def rewrite_passes(target: tvm.target.Target) -> list:
    """Math-property rewriting passes for ``target``, run on the imported Relax graph."""
    return [MathPropertyRewrite()]


def layout_passes(target: tvm.target.Target) -> list:
    """Layout-choice passes for ``target``, run after rewriting and before legalization
    (empty for targets other than CPUs)."""
    return layout_passes_for(target)


def fusion_passes(target: tvm.target.Target) -> list:
    """Fusion passes for ``target``, run on legalized, pattern-annotated PrimFuncs."""
    return [relax.transform.FuseOps(), relax.transform.FuseTIR()]

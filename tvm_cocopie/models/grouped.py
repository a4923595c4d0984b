"""The G(g) grouped-convolution variants of Gibson's thesis, chapter 5 (GSPC).

Following Crowley et al.'s Moonshine ("Moonshine: Distilling with Cheap
Convolutions", NeurIPS 2018), a G(g) model replaces each standard 3x3 conv of its
blocks (``cin -> cout``) by a grouped 3x3 conv ``cin -> cin`` with ``g`` groups
(carrying the stride), BN + ReLU, and a pointwise 1x1 conv ``cin -> cout``; G(N) uses
``groups = cin``, a depthwise conv. WRN-40-2 and ResNet-34 take this form
(:mod:`.wrn`, :mod:`.resnet`); MobileNetV2's variants change its depthwise convs'
group count instead (:mod:`.mobilenet`). This module is the one home of the shared
pieces: the group count, the grouped + pointwise pair, and the variant names.
"""

from __future__ import annotations

import logging
import math

from .graph_builder import GraphBuilder

logger = logging.getLogger(__name__)

#: ``"N"`` as a group count: as many groups as input channels.
DEPTHWISE = "N"
#: the group counts of the thesis' variants, in its table order
VARIANT_GROUPS: tuple[int | str, ...] = (2, 4, 8, 16, DEPTHWISE)


def conv_groups(cin: int, cout: int, groups: int | str) -> int:
    """Groups for a G(g) conv: ``g`` (``cin`` for ``"N"``), else the largest divisor
    of ``gcd(cin, cout)`` not above it."""
    g = cin if groups == DEPTHWISE else int(groups)
    common = math.gcd(cin, cout)
    best = max(d for d in range(1, min(g, common) + 1) if common % d == 0)
    if best != g:
        logger.warning("G(%s) does not divide %d -> %d channels: using %d groups",
                       groups, cin, cout, best)
    return best


def grouped_pointwise(gb: GraphBuilder, x: str, cout: int, stride: int, groups: int | str,
                      kind: str) -> str:
    """Grouped 3x3 ``cin -> cin`` (``groups``, ``stride``), BN, ReLU, pointwise 1x1
    ``cin -> cout`` (no BN after it: the caller's block adds its own)."""
    cin = gb.channels(x)
    with gb.scope(kind):
        y = gb.conv(x, cin, 3, stride, groups=conv_groups(cin, cin, groups), kind="grouped")
        y = gb.relu(gb.batchnorm(y, kind="bn"))
        return gb.conv(y, cout, 1, 1, kind="pointwise")


def variant_name(base: str, groups: int | str | None) -> str:
    """``base`` for the standard model, ``base_g{g}`` for G(g)."""
    return base if groups is None else f"{base}_g{groups}"

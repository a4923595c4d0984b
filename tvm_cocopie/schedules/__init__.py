"""TIR schedule rules of tvm-cocopie, in the style of ``tvm.s_tir.dlight``.

A rule is a small class with ``apply(func, target, tunable)`` returning a
``tvm.s_tir.Schedule`` (or a list of them when ``tunable``) or ``None`` when it does
not apply; rules are tried in order and the first that applies wins.
``default_rules(target)`` is the ordered list the cocopie pipeline applies after
fusion.
"""

from __future__ import annotations

import tvm


def default_rules(target: tvm.target.Target, options) -> list:
    """The ordered schedule rules for ``target`` (empty: stock TVM's untouched loops)."""
    return []

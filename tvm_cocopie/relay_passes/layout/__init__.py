"""The ``layout`` stage: data-layout choice before legalization (CPU targets).

Passes, in the order :func:`layout_passes_for` runs them:

- :mod:`.lift`: element-wise TIR calls lifted back to Relax ops, so layout inference
  sees through them;
- :mod:`.subpixel`: transposed convs (1-D, 2-D) as convs + depth-to-space;
- :mod:`.conv1d`: 1-D convs as 2-D convs of height 1 (the blocked kernels take them);
- :mod:`.conv3d`: 3-D convs as 2-D convs over their output frames, the depth taps
  joined to the input channels;
- :mod:`.shape_ops`: ``stack`` and channel ``split``, which TVM's layout inference
  gets wrong, written as ``expand_dims``/``concat`` and slices;
- :mod:`.elementwise`: activations TVM's layout inference cannot carry (``clip`` of
  HardSwish/HardSigmoid, LeakyReLU, softplus) written in ops it can;
- :mod:`.blocked`: supported convolutions moved to NCHW[x]c, transforms cancelled
  between them by TVM's ``ConvertLayout``;
- :mod:`.sink`: ``where`` (no layout rule in TVM), block-aligned channel slices and
  their concatenation moved inside the blocked layout;
- :mod:`.reblock`: a tensor moved between two channel blocks through NCHW read by
  convs in its own block, or re-blocked in one transform;
- :mod:`.constants`: layout transforms of constants folded at compile time.

:mod:`.call_rewrite` is the call-replacing walk that ``lift``, ``subpixel``, ``conv1d``,
``conv3d``, ``elementwise`` and ``shape_ops`` share.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ...target import is_hexagon
from .blocked import blocked_layout, layout_transforms
from .constants import fold_layout_constants
from .conv1d import conv1d_as_conv2d
from .conv3d import conv3d_as_conv2d
from .elementwise import layout_carrying_elementwise
from .lift import lift_elementwise_tir
from .match_cast import guard_match_casts, release_match_casts
from .reblock import reblocked_conv_inputs
from .shape_ops import convertible_shape_ops
from .sink import sink_layout_transforms
from .subpixel import subpixel_conv_transpose

__all__ = ["blocked_layout", "layout_passes_for", "layout_transforms"]


def layout_passes_for(target: tvm.target.Target, grouped: str = "gspc") -> list:
    """Passes of the ``layout`` stage for ``target``: the list above for a CPU (llvm)
    target, empty for any other (Hexagon has its own selection stage); ``grouped``: the
    narrow-group conv kernel of the legalization."""
    if target.kind.name != "llvm" or is_hexagon(target):
        return []
    return [
        lift_elementwise_tir,
        subpixel_conv_transpose,
        conv1d_as_conv2d,
        conv3d_as_conv2d,
        relax.transform.DecomposeOpsForInference(),
        layout_carrying_elementwise,
        convertible_shape_ops,
        relax.transform.CanonicalizeBindings(),  # a slice's users read it, not a tuple item
        guard_match_casts,  # ConvertLayout fails on a cast of a blocked tensor
        blocked_layout(target, grouped),
        release_match_casts,
        relax.transform.Normalize(),
        sink_layout_transforms,
        reblocked_conv_inputs(target, grouped),
        relax.transform.DeadCodeElimination(),
        relax.transform.EliminateCommonSubexpr(),  # one transform per tensor, not per use
        fold_layout_constants,
    ]

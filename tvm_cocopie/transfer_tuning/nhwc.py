"""NHWC builds of a model: the layout of Ansor's x86 logs (the thesis' source logs, §6.3).

cocopie compiles convolutions in its blocked NCHW[x]c layout, whose kernels share no
class with the NHWC kernels of an Ansor log. To reuse such a log, the model is built
the way Ansor's was: the cocopie rewrite stage (batch norms folded into the convs,
so that a conv, its bias and its ReLU fuse into one kernel as in the log), then
Relax's ``ConvertLayout`` to NHWC data and HWIO weights, TVM's own TOPI computes
(:data:`NHWC_OPTIONS`: no blocked layout, no cocopie computes). The kernels then
carry TOPI's block names (``pad_temp``, ``conv2d_nhwc``, ``T_add``, ``compute``), which
the importer (:mod:`.ansor`) gives its rebuilt workloads too.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..frontend.importer import from_onnx
from ..pipeline import PipelineOptions, run_until
from ..target import parse_target

#: the stages after :func:`nhwc_module`: TVM's computes, fused, no layout change
NHWC_OPTIONS = PipelineOptions(rewrite=False, layout=False, custom_legalize=False)


def nhwc_module(model, target, shapes=None) -> tvm.IRModule:
    """``model`` (ONNX or Relax) rewritten by cocopie's graph rules and converted to NHWC/HWIO."""

    target = parse_target(target)
    mod = model if isinstance(model, tvm.IRModule) else from_onnx(model, shapes=shapes)
    mod = run_until(mod, target, "rewrite")
    with target:
        mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]})(mod)
        mod = relax.transform.Normalize()(mod)
    return mod

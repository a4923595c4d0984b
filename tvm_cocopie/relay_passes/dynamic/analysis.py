"""SOD²'s analysis as a Relax pass: RDP on every function, the program left as it is.

:class:`RankDimensionPropagation` is a ``tvm.transform`` module pass (composable in a
``Sequential``, like the other graph passes of :mod:`tvm_cocopie.relay_passes`) that
runs :func:`~.rdp.analyze_function` on each Relax function and keeps the
:class:`~.result.RDPResult` s on the pass object (``.results``), for the fusion and
memory-planning stages that will use them (SOD² §5.4.2-5.4.3). With ``attach=True`` it
also records each function's summary counts as the function attribute
:data:`ATTR` (JSON text); bindings, params and body are untouched.
"""

from __future__ import annotations

import json
import logging

import tvm
from tvm import relax

from ...errors import CompilationError, last_line
from .rdp import analyze_function
from .result import RDPResult

log = logging.getLogger(__name__)

#: the function attribute holding RDP's summary (JSON text) when attached
ATTR = "cocopie_rdp"


def analyze(mod, min_dim: int = 1) -> dict[str, RDPResult]:
    """RDP on every Relax function of ``mod`` (an ``IRModule``, or one
    ``relax.Function`` reported as ``"main"``): ``{name: RDPResult}``."""
    if isinstance(mod, relax.Function):
        return {"main": _analyze_one(mod, "main", min_dim)}
    if not isinstance(mod, tvm.IRModule):
        raise CompilationError(
            f"RDP needs a Relax IRModule or relax.Function, got {type(mod).__name__}; "
            "import the model first (tvm_cocopie.from_onnx)")
    results = {}
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            results[gv.name_hint] = _analyze_one(func, gv.name_hint, min_dim)
    if not results:
        raise CompilationError("RDP found no Relax function in the module (only PrimFuncs?)")
    return results


def _analyze_one(func, name: str, min_dim: int) -> RDPResult:
    try:
        return analyze_function(func, name, min_dim)
    except CompilationError:
        raise
    except (RuntimeError, ValueError) as err:
        raise CompilationError(
            f"RDP failed on Relax function {name!r}: {last_line(err)}. Normalize the module "
            "(relax.transform.Normalize) and check it is well formed") from err


@tvm.transform.module_pass(opt_level=0, name="RankDimensionPropagation")
class RankDimensionPropagation:
    """SOD²'s shape-dynamism analysis as a pass that does not change the program.

    ``RankDimensionPropagation(attach=True, min_dim=1, log_level=logging.DEBUG)``:
    ``attach`` records each function's summary under the attribute :data:`ATTR`;
    ``min_dim`` is the least value assumed for an input dimension; each result is
    :meth:`~.result.RDPResult.describe` d at ``log_level``. After it ran, ``results``
    maps function names to their :class:`~.result.RDPResult`.
    """

    def __init__(self, attach: bool = True, min_dim: int = 1, log_level: int = logging.DEBUG):
        self.attach = attach
        self.min_dim = min_dim
        self.log_level = log_level
        self.results: dict[str, RDPResult] = {}

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        """Analyse every Relax function; the module, with summaries attached if asked."""
        self.results = analyze(mod, self.min_dim)
        for result in self.results.values():
            if log.isEnabledFor(self.log_level):
                result.describe(log, self.log_level)
        if not self.attach:
            return mod
        mod = mod.clone()  # the caller's module stays as it was
        for gv, func in list(mod.functions_items()):
            result = self.results.get(gv.name_hint)
            if result is not None:
                mod[gv] = func.with_attr(ATTR, json.dumps(result.summary()))
        return mod

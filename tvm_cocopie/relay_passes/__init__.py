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

from ..errors import CompilationError
from ..latency import Dataset, LatencyModel
from ..target import is_hexagon
from .attention import attention_kernels
from .dynamic.divisibility import divisible_dims, restore_quotient_dims, simplify_shapes
from .fusion.apply import DNNFusion
from .fusion.database import ProfileDB
from .fusion.horizontal import horizontal_matmuls
from .fusion.patterns import op_patterns_from_mapping
from .fusion.profiler import MeasuredDecision
from .fusion.regions import fuse_tir
from .layer_norm import decomposed_layer_norms
from .layout import layout_passes_for
from .noalias import mark_noalias
from .pattern_sparse import pattern_sparse_convs
from .rewriting import MathPropertyRewrite


def rewrite_passes(target: tvm.target.Target) -> list:
    """Rewriting passes for ``target``, run on the imported Relax graph: layer norms
    written out op by op as one ``nn.layer_norm`` (:mod:`.layer_norm`), then the
    math-property rules."""
    return [decomposed_layer_norms, MathPropertyRewrite()]


def layout_passes(target: tvm.target.Target, grouped: str = "gspc",
                  divisible: bool = False) -> list:
    """Layout-choice passes for ``target``, run after rewriting and before legalization
    (empty for targets other than CPUs); ``grouped``: the narrow-group conv kernel the
    legalization uses (``PipelineOptions.grouped``); ``divisible``: symbolic dims a model
    takes only in multiples written as multiples first
    (:mod:`.dynamic.divisibility`, ``PipelineOptions.divisible_dims``)."""
    passes = layout_passes_for(target, grouped)
    if passes and divisible:
        return [divisible_dims, *passes, simplify_shapes]
    return passes


def restore_passes(divisible: bool = False) -> list:
    """Passes at the start of the ``lower`` stage: with ``divisible``
    (``PipelineOptions.divisible_dims``), the quotient dims written back as their dims
    divided, which the memory plan's bounds name (:mod:`.dynamic.divisibility`)."""
    return [restore_quotient_dims] if divisible else []


def codegen_passes() -> list:
    """Passes at the end of the ``lower`` stage, before TVM's code generation: every
    PrimFunc that soundly can marked ``tirx.noalias`` (:mod:`.noalias`: one function
    without it costs every kernel of the module its ``noalias``)."""
    return [mark_noalias]


def pattern_passes(target: tvm.target.Target) -> list:
    """Passes giving pattern-sparse constant-weight convs their kernel (PatDNN), run at the
    start of the ``legalize`` stage; empty for targets other than CPUs."""
    if target.kind.name != "llvm" or is_hexagon(target):
        return []
    return [pattern_sparse_convs(target)]


def attention_passes(target: tvm.target.Target) -> list:
    """Passes giving scaled dot-product attention chains one kernel, run at the start of
    the ``legalize`` stage; empty for targets other than CPUs."""
    if target.kind.name != "llvm" or is_hexagon(target):
        return []
    return [attention_kernels(target)]


def horizontal_passes(target: tvm.target.Target) -> list:
    """Horizontal fusion of parallel matmuls with constant weights
    (:mod:`.fusion.horizontal`), run at the start of the ``legalize`` stage, before the
    attention rewrite; empty for targets other than CPUs."""
    if target.kind.name != "llvm" or is_hexagon(target):
        return []
    return [horizontal_matmuls()]


#: the fusion methods of :func:`fusion_passes`
FUSION_METHODS = ("stock", "dnnfusion")


def fusion_passes(target: tvm.target.Target, method: str = "stock", rules=None,
                  database=None, latency_model=None, latency_dataset=None,
                  dim_bounds=None) -> list:
    """Fusion passes for ``target``, run on legalized, pattern-annotated PrimFuncs.

    ``method``: ``"stock"`` is TVM's ``FuseOps`` + ``FuseTIR`` (after
    :func:`.fusion.patterns.op_patterns_from_mapping`); ``"dnnfusion"``
    DNNFusion's plan (:class:`.fusion.apply.DNNFusion`), its yellow pairs measured
    with the schedule ``rules`` and remembered in the profiling database at
    ``database`` (default: the cache folder's), which also keeps the kernels' mapping
    types; without ``rules`` yellow pairs stay apart. ``latency_model``: a latency model file
    (:meth:`~tvm_cocopie.latency.LatencyModel.save`) for ``target``: yellow pairs the
    database does not hold are predicted by it instead of measured (a missing or
    unusable file raises :class:`~tvm_cocopie.latency.LatencyModelError`).
    ``latency_dataset``: a latency dataset file the measured candidates are also
    stored in (:class:`~tvm_cocopie.latency.Dataset`). ``dim_bounds``: the sizes
    DNNFusion measures a candidate with symbolic dims at (the others at
    :data:`.fusion.profiler.PLANNED_DIM`).
    """
    if method == "dnnfusion":
        decide = None
        db = ProfileDB(database)
        if rules:
            predictor = (LatencyModel.load(target, latency_model)
                         if latency_model is not None else None)
            dataset = Dataset(target, latency_dataset) if latency_dataset is not None else None
            decide = MeasuredDecision(target, rules, db, predictor=predictor,
                                      measure_missing=predictor is None, dataset=dataset,
                                      plan_dims=dim_bounds)
        return [DNNFusion(decide, types=db)]
    if method != "stock":
        raise CompilationError(
            f"unknown fusion method {method!r}: PipelineOptions(fusion=...) takes one of "
            f"{', '.join(FUSION_METHODS)}")
    # opaque only to TVM's pattern analysis (symbolic indices): marked injective first
    return [op_patterns_from_mapping, relax.transform.FuseOps(), fuse_tir]

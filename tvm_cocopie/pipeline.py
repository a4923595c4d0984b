"""The ``cocopie`` Relax pipeline: explicit stages where each optimization plugs in.

``tvm.compile(mod, target, relax_pipeline="cocopie")`` (after
:func:`tvm_cocopie.register`) runs, in order:

======== ==============================================================================
stage    what runs
======== ==============================================================================
dispatch TVM's library dispatch (sampling, sort/scan), as in the stock CPU pipeline
rewrite  math-property graph rewriting (DNNFusion §3.3) — :mod:`.relay_passes`
layout   data-layout choice — :mod:`.relay_passes`
legalize ``LegalizeOps`` with our TOPI computes overriding TVM's (:mod:`.topi`),
         ``AnnotateTIROpPattern``, ``FoldConstant`` (pre-packs constant weights)
fusion   operator fusion (DNNFusion §3.4; until then TVM's ``FuseOps``+``FuseTIR``)
schedule a MetaSchedule database if given, then our schedule rules (:mod:`.schedules`)
lower    TVM's dataflow lowering and VM finalization, with the static memory plan
         allocated once per VM instead of per call (:mod:`.relay_passes.static_memory`)
======== ==============================================================================

A stage with nothing registered does what stock TVM does. The stage functions take
the target and :class:`PipelineOptions`, so each optimization can be switched off.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from . import relay_passes, schedules, topi
from .errors import TargetError
from .hexagon.select_stage import HexagonSelect, check_target
from .relay_passes.static_memory import (
    bound_symbolic_dims,
    cache_static_allocations,
    keep_scratch_registers,
)
from .target import is_hexagon, is_host, parse_target
from .tir_pipeline import register_tir_pipeline

log = logging.getLogger(__name__)

PIPELINE_NAME = "cocopie"
STAGES = ("dispatch", "rewrite", "layout", "legalize", "fusion", "schedule", "lower")


@dataclass(frozen=True)
class PipelineOptions:
    """Switches of the cocopie pipeline; the defaults are what ``"cocopie"`` runs."""

    rewrite: bool = True
    layout: bool = True
    custom_legalize: bool = True
    #: Winograd for 3x3 stride-1 convs: ``"auto"`` (where measured faster), ``"off"``, or
    #: ``"2"`` / ``"4"`` to force F(2,3) / F(4,3) (:mod:`.topi.cpu.winograd`)
    winograd: str = "auto"
    #: grouped convs whose groups do not fall on whole channel chunks: ``"gspc"``
    #: (:mod:`.topi.cpu.gspc`, no zero weights) or ``"blocked"`` (several groups per
    #: vector, block-diagonal weights, no grouped Winograd: the CPU layer's kernels before
    #: GSPC)
    grouped: str = "gspc"
    #: 3x3 convs whose constant weights are pattern-sparse (PatDNN: a few kernel patterns,
    #: pruned connectivity) on the pattern kernel (:mod:`.relay_passes.pattern_sparse`)
    pattern_sparse: bool = True
    #: scaled dot-product attention chains (matmul, scale, softmax, matmul) as one kernel
    #: (:mod:`.relay_passes.attention`)
    attention: bool = True
    fuse: bool = True
    #: ``"stock"`` (TVM's FuseOps) or ``"dnnfusion"`` (:mod:`.relay_passes.fusion`)
    fusion: str = "stock"
    #: horizontal fusion: matmuls reading one input with constant weights joined into
    #: one (:mod:`.relay_passes.fusion.horizontal`); ``None``: with DNNFusion only
    horizontal: bool | None = None
    #: DNNFusion's profiling database (default: ``fusion.sqlite`` in the cache folder)
    fusion_db: str | None = None
    #: a latency model file (:mod:`.latency`) for the target: DNNFusion's yellow pairs
    #: that the profiling database does not hold are predicted by it, not measured
    latency_model: str | None = None
    #: a latency dataset file (:mod:`.latency`): DNNFusion's measured candidates are also
    #: stored there, to train the latency model
    latency_dataset: str | None = None
    schedule: bool = True
    #: a MetaSchedule work dir (database_*.json) whose records are applied first
    database: str | None = None
    #: allocate the static memory plan's intermediates once per VM, not per call
    #: (:mod:`.relay_passes.static_memory`; host targets only; a library exported with
    #: it needs ``import tvm_cocopie`` where it is loaded)
    static_memory: bool = True
    #: upper bounds of symbolic input dims by name (``{"W": 2048}``): the memory plan is
    #: made for them once, every smaller size a view into it (SOD²;
    #: :func:`.relay_passes.static_memory.bound_symbolic_dims`); none: storages of
    #: symbolic size are allocated per call
    dim_bounds: dict | None = None
    #: a symbolic dim the model takes only in multiples of ``m`` (a detector's height:
    #: its pyramid's maps must line up) is written as ``m`` times a new dim, so that its
    #: shapes are provably equal and the blocked layout runs through
    #: (:mod:`.relay_passes.dynamic.divisibility`); sizes off the multiples that the
    #: graph would still take (PP-OCR det: heights 29-31 mod 32) are then refused with an
    #: error asking for padding. Off by default: on PP-OCR det it removes the NCHW convs
    #: and their layout transforms but measured no faster end to end (1.40/1.33/1.32x the
    #: static builds against 1.44/1.33/1.30x without, same process)
    divisible_dims: bool = False

    def replace(self, **changes) -> PipelineOptions:
        """A copy with ``changes`` applied (the options are frozen)."""
        return dataclasses.replace(self, **changes)


def _legalize_stage(target, options: PipelineOptions) -> list:
    overrides = (topi.legalize_overrides(target, options.winograd, options.grouped)
                 if options.custom_legalize else {})
    patterns = (relay_passes.pattern_passes(target)
                if options.custom_legalize and options.pattern_sparse else [])
    attention = (relay_passes.attention_passes(target)
                 if options.custom_legalize and options.attention else [])
    horizontal = options.horizontal
    if horizontal is None:
        horizontal = options.fuse and options.fusion == "dnnfusion"
    return [
        *patterns,
        *(relay_passes.horizontal_passes(target) if horizontal else []),
        *attention,
        relax.transform.LegalizeOps(customize_legalize_map=overrides or None),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
    ]


def _schedule_stage(target, options: PipelineOptions) -> list:
    passes = []
    if options.database:
        passes.append(relax.transform.MetaScheduleApplyDatabase(options.database))
    if options.schedule:
        rules = schedules.default_rules(target)
        if rules:
            from tvm.s_tir.dlight import ApplyDefaultSchedule

            passes.append(ApplyDefaultSchedule(*rules))
    return passes


def _lower_stage(target, options: PipelineOptions) -> list:
    passes = [*relay_passes.restore_passes(options.divisible_dims),
              *cpu_generic.dataflow_lower_passes(target),
              *cpu_generic.finalize_passes(target)]
    codegen = relay_passes.codegen_passes()
    if not options.static_memory or not is_host(target):
        return passes + codegen  # the scratch is host memory, looked up by Python
    # after the memory plan, before outputs' allocations look like planned ones
    # (LowerAllocTensor); the kills KillAfterLastUse puts on the kept tensors dropped
    names = [p.info.name for p in passes]
    plan, kill = names.index("StaticPlanBlockMemory"), names.index("KillAfterLastUse")
    bound = [bound_symbolic_dims(options.dim_bounds)] if options.dim_bounds else []
    return [*bound, *passes[:plan + 1], cache_static_allocations,
            *passes[plan + 1:kill + 1], keep_scratch_registers, *passes[kill + 1:], *codegen]


_STAGE_BUILDERS = {
    "dispatch": lambda target, options: cpu_generic.library_dispatch_passes(target),
    "rewrite": lambda target, options: (
        relay_passes.rewrite_passes(target) if options.rewrite else []
    ),
    "layout": lambda target, options: (
        relay_passes.layout_passes(target, options.grouped, options.divisible_dims)
        if options.layout else []
    ),
    "legalize": _legalize_stage,
    "fusion": lambda target, options: (
        relay_passes.fusion_passes(target, options.fusion, schedules.default_rules(target),
                                   options.fusion_db, options.latency_model,
                                   options.latency_dataset, options.dim_bounds)
        if options.fuse else []
    ),
    "schedule": _schedule_stage,
    "lower": _lower_stage,
}


def _hexagon_builders(target) -> dict:
    """Hexagon (seed 004, GCD²): the ``layout`` stage is the global layout/instruction
    selection over the int8 graph (:mod:`.hexagon.select_stage`), which emits the
    computes the ``schedule`` stage turns into HVX kernels; no rewriting or fusion."""

    check_target(target)
    return {
        **_STAGE_BUILDERS,
        "dispatch": lambda target, options: [],
        "rewrite": lambda target, options: [],
        "layout": lambda target, options: [HexagonSelect(local=not options.layout)],
        "fusion": lambda target, options: [],
    }


def _has_8bit_tensors(mod: tvm.IRModule) -> bool:
    """Whether any Relax function of ``mod`` takes or makes an int8/uint8 tensor."""
    found = []

    def visit(expr):
        ty = getattr(expr, "ty", None)
        if isinstance(ty, relax.TensorType) and str(ty.dtype) in ("int8", "uint8"):
            found.append(expr)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
            if found:
                return True
    return False


def stage_passes(
    target, options: PipelineOptions | None = None, mod: tvm.IRModule | None = None
) -> list[tuple[str, list]]:
    """``[(stage name, [passes])]`` of the cocopie pipeline for ``target``.

    For a Hexagon target the GCD² stages apply to quantized graphs; a module with no
    8-bit tensor at all (a float model) gets the generic stages instead, as stock TVM
    would compile it (scalar/auto-vectorized code, no HVX kernel selection).
    """
    target = parse_target(target)
    options = options or PipelineOptions()
    builders = _STAGE_BUILDERS
    if is_hexagon(target):
        if mod is None or _has_8bit_tensors(mod):
            builders = _hexagon_builders(target)
        else:
            log.info("Hexagon target, no int8/uint8 tensor in the model: generic stages, "
                     "no HVX instruction/layout selection")
    return [(name, builders[name](target, options)) for name in STAGES]


def run_until(mod: tvm.IRModule, target, stage: str,
              options: PipelineOptions | None = None) -> tvm.IRModule:
    """``mod`` after the cocopie stages up to and including ``stage``, for ``target``.

    ``stage`` is one of :data:`STAGES`; ``"schedule"`` gives the scheduled PrimFuncs
    before VM lowering, ``"fusion"`` the fused, unscheduled ones. The passes run inside
    the target's context, as in ``tvm.compile``.
    """
    if stage not in STAGES:
        raise ValueError(f"unknown pipeline stage {stage!r}; the stages are {', '.join(STAGES)}")
    target = parse_target(target)
    with target:
        for name, passes in stage_passes(target, options, mod):
            for p in passes:
                mod = p(mod)
            if name == stage:
                break
    return mod


def cocopie_pipeline(**options) -> tvm.transform.Pass:
    """The registered pipeline factory: ``relax.get_pipeline("cocopie", **options)``.

    The target is the one ``tvm.compile`` enters (``Target.current()``).
    """
    opts = PipelineOptions(**options)

    @tvm.transform.module_pass(opt_level=0, name="CocopiePipeline")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        target = tvm.target.Target.current(allow_none=True)
        if target is None:
            raise TargetError(
                "the cocopie pipeline needs a target: call tvm.compile(mod, target=...)"
            )
        target = parse_target(target)
        with target:
            for name, passes in stage_passes(target, opts, mod):
                start = time.perf_counter()
                for p in passes:
                    mod = p(mod)
                log.debug("stage %s: %d passes, %.2fs", name, len(passes),
                          time.perf_counter() - start)
        return mod

    return _pipeline


def register_pipeline() -> bool:
    """Register ``cocopie`` in TVM's pipeline map; ``False`` if it already was. The TIR
    pipeline ``cocopie`` (:mod:`.tir_pipeline`) is registered with it."""
    from tvm.relax import pipeline as relax_pipeline

    register_tir_pipeline()
    current = relax_pipeline.PIPELINE_MAP.get(PIPELINE_NAME)
    if current is cocopie_pipeline:
        return False
    if current is not None:
        log.warning("replacing a foreign pipeline registered as %r", PIPELINE_NAME)
        relax_pipeline.PIPELINE_MAP[PIPELINE_NAME] = cocopie_pipeline
        return True
    relax_pipeline.register_pipeline(PIPELINE_NAME)(cocopie_pipeline)
    return True

"""cocopie's schedule rules as a MetaSchedule design space (the space both tuners search).

MetaSchedule's stock space (``PostOrderApply`` with its CPU rules) starts far below the
register-blocked kernels of :mod:`tvm_cocopie.schedules`: at the budgets a 2-core
machine affords, a random point of it is 4-100x slower than our default schedule.
Tuning therefore searches *our* rules' free choices instead, the way TVM's dlight
rules are tuned: :func:`design_spaces` calls the first rule that applies with
``tunable=True`` and gets one schedule per structural variant (padding placement x
loop order for convolutions, loop order for matmuls), each with ``SamplePerfectTile``
decisions for the register tile (output chunks, rows, columns) and a
``SampleCategorical`` unroll budget; the anchor block carries the variant's name
(``cocopie.space``). Kernels no rule tunes (element-wise chains, pooling...) get
their one fixed schedule.

Transfer-tuning (thesis §6.2.3) in this space replays a source kernel's *decisions* on
the target kernel's own design space of the same variant (:func:`replay_decisions`):
the instructions are the target's, so nothing shape-specific of the source (split
factors, flattened widths) leaks into it, and the tiles are adapted like any
``SamplePerfectTile`` decision (:func:`~.transfer.adapt_tile`).

:class:`RegisterBudget` is a post-processor rejecting sampled tiles whose accumulators
would not fit the vector register file (the rule of :mod:`tvm_cocopie.topi.cpu.tiling`),
so neither tuner spends trials on spilling tiles.
"""

from __future__ import annotations

import logging
import math

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from ..errors import last_line
from ..metaschedule import initialized_postprocs, postprocs_for
from ..schedules import default_rules
from ..schedules.tunable import SPACE_ANNOTATION
from ..target import cpu_info, parse_target
from ..topi.cpu import pattern_conv
from ..topi.cpu.tiling import vector_registers
from .kernel_class import kernel_func
from .tiles import adapt_tile

log = logging.getLogger(__name__)

SAMPLES = ("SamplePerfectTile", "SampleCategorical")


def as_main(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with its kernel named ``main`` (what the rules and traces look up)."""
    if "main" in [gv.name_hint for gv in mod.get_global_vars()]:
        return mod
    return tvm.IRModule({"main": kernel_func(mod)})


def design_spaces(mod: tvm.IRModule, target) -> list[Schedule]:
    """The design spaces of kernel ``mod`` under cocopie's rules (at least one schedule)."""

    target = parse_target(target)
    mod = as_main(mod)
    for rule in default_rules(target):
        result = rule.apply(mod["main"], target, True)
        if result is None:
            continue
        return list(result) if isinstance(result, (list, tuple)) else [result]
    return [Schedule(mod)]


def space_tag(trace) -> str | None:
    """The ``cocopie.space`` variant a trace was sampled from (None: not our space)."""
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and len(inst.attrs) and str(inst.attrs[0]) == SPACE_ANNOTATION:
            value = inst.inputs[1] if len(inst.inputs) > 1 else None
            return str(value.value) if hasattr(value, "value") else str(value)
    return None


def _tag_fields(tag: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in tag.split(";") if "=" in part)


def sampled(trace) -> list[tuple[str, object]]:
    """``[(instruction kind, decision)]`` of the sampling instructions, in order."""
    return [(inst.kind.name, trace.decisions.get(inst)) for inst in trace.insts
            if inst.kind.name in SAMPLES]


def tile_decisions(trace) -> list[list[int]]:
    """The decisions of every ``SamplePerfectTile`` in ``trace``."""
    return [[int(x) for x in d] for kind, d in sampled(trace)
            if kind == "SamplePerfectTile" and d is not None]


def fits_registers(tag: str, tiles: list[list[int]], registers: int) -> bool:
    """Whether the register tile of these decisions fits ``registers`` vector registers.

    The rule of :func:`tvm_cocopie.topi.cpu.tiling.conv_tile`: accumulators plus the weight
    vectors of one step plus one broadcast (depthwise: accumulators plus four; the
    pixel-vector GSPC: plus its broadcast weights and one input vector); a GSPC conv
    (``split`` segments) has ``split`` of each.
    """
    fields = _tag_fields(tag)
    inner = [t[-1] for t in tiles]
    if not inner:
        return True
    kind = fields.get("kind")
    if kind == "conv":
        split = int(fields.get("split", 1))
        return split * (math.prod(inner) + inner[0]) + 1 <= registers
    if kind in ("depthwise", "shift"):
        return math.prod(inner) + 4 <= registers
    if kind == "gspc_pixels":  # To x Yk x Xk accumulators, To broadcasts, one input vector
        # (stored from the registers: a tile's To channels must lie in one output chunk)
        in_chunk = fields.get("fused") != "1" or int(fields["ob"]) % inner[0] == 0
        return in_chunk and math.prod(inner) + inner[0] + 1 <= registers
    if kind == "matmul":
        nvec = int(fields.get("nvec", 1))
        return inner[0] * nvec + nvec + 1 <= registers
    return True


def registers_of(target) -> int:
    """Vector registers of ``target``'s CPU."""
    return vector_registers(cpu_info(parse_target(target)))


@derived_object
class RegisterBudget(ms.postproc.PyPostproc):
    """Rejects sampled register tiles that would spill (see :func:`fits_registers`)."""

    def __init__(self, registers: int = 16):
        self.registers = registers

    def _initialize_with_tune_context(self, context) -> None:
        if context.target is not None:
            self.registers = registers_of(context.target)

    def apply(self, sch: Schedule) -> bool:
        """Whether ``sch``'s register tile fits the budget (schedules outside cocopie's spaces
        pass)."""
        tag = space_tag(sch.trace)
        return tag is None or fits_registers(tag, tile_decisions(sch.trace), self.registers)

    def clone(self):
        """A copy of this post-processor."""
        return RegisterBudget(self.registers)


def postprocs(target) -> list:
    """MetaSchedule's CPU post-processors (generated kernels may loop to bounds read from
    their weights: :func:`~tvm_cocopie.metaschedule.postprocs_for`) plus
    :class:`RegisterBudget`."""
    return postprocs_for("llvm") + [RegisterBudget(registers_of(target))]


def alloc_arguments(device, args_info, alloc_repeat: int) -> list:
    """MetaSchedule's runner argument allocation (random tensors), except a pattern
    kernel's index arrays: valid FKW arrays of its shapes
    (:func:`~tvm_cocopie.topi.cpu.pattern_conv.measurement_fkw`; random ones indexed
    outside its weights). Runs in the runner's worker; pass it as a
    :class:`~tvm_cocopie.metaschedule.Measurer`'s ``f_alloc_argument``."""
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    repeated = default_alloc_argument(device, args_info, alloc_repeat)
    signature = [(str(info[1]), tuple(int(x) for x in info[2])) for info in args_info]
    arrays = pattern_conv.measurement_fkw(signature)
    if arrays is not None:
        for args in repeated:
            for k, array in enumerate(arrays, start=1):
                args[k] = tvm.runtime.tensor(array, device)
    return repeated


def space_generator(target):
    """A MetaSchedule ``ScheduleFn`` space generator over :func:`design_spaces`."""

    def generate(sch: Schedule):
        return design_spaces(sch.mod, target)

    return ms.space_generator.ScheduleFn(generate, sch_rules=[], postprocs=postprocs(target),
                                         mutator_probs="llvm")


def replay_decisions(source_trace, mod: tvm.IRModule, target):
    """Replay ``source_trace``'s decisions on ``mod``'s own design space of the same variant.

    Returns ``(schedule, None)`` or ``(None, reason)``. Tile decisions are adapted to
    the target's extents (:func:`~.transfer.adapt_tile`); categorical ones are kept.
    """

    tag = space_tag(source_trace)
    spaces = [s for s in design_spaces(mod, target) if space_tag(s.trace) == tag]
    if not spaces:
        return None, f"the kernel has no design space {tag!r}"
    src = sampled(source_trace)
    dst = spaces[0].trace
    if [k for k, _ in src] != [k for k, _ in sampled(dst)]:
        return None, "the design spaces sample different decisions"
    sch = Schedule(as_main(mod))
    queue = list(src)

    def provider(inst, inputs, attrs, decision):
        if inst.kind.name not in SAMPLES:
            return decision
        _, theirs = queue.pop(0)
        if theirs is None:
            return decision
        if inst.kind.name == "SamplePerfectTile":
            extent = sch.get(inputs[0]).extent
            if not isinstance(extent, tvm.tirx.IntImm):
                return decision
            return adapt_tile([int(x) for x in theirs], int(extent.value), int(attrs[1]))
        return theirs

    try:
        dst.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
        sch.enter_postproc()
        for proc in initialized_postprocs(mod, target) + [RegisterBudget(registers_of(target))]:
            if not proc.apply(sch):
                return None, f"post-processor {type(proc).__name__} rejected it"
    except Exception as err:  # noqa: BLE001 - every failure rejects the pair
        return None, f"decisions do not apply: {last_line(err)}"
    return sch, None

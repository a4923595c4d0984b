"""The pattern-sparse conv's register tile as a MetaSchedule decision.

The pattern kernel (:mod:`tvm_cocopie.topi.cpu.pattern_conv`) is generated whole, with
its tile in the code, and marked scheduled: the default schedule leaves it as the
pipeline generated it (:func:`~tvm_cocopie.topi.cpu.pattern_conv.default_knobs`). In
a design space (``tunable=True``: ``tvm-cocopie tune``, transfer-tuning, the sampler)
this rule samples the tile instead, one ``SampleCategorical`` over the grid's tiles that
fit the target's vector registers
(:func:`~tvm_cocopie.topi.cpu.pattern_conv.tile_choices`), written on the kernel's
block as its knob choice; the cocopie TIR pipeline generates the kernel with it
(:mod:`tvm_cocopie.kernel_knobs`). The decision is an index into the fixed
:data:`~tvm_cocopie.topi.cpu.pattern_conv.TILE_GRID`, so a record replays on another
pattern layer as the same tile.
"""

from __future__ import annotations

from tvm import s_tir

from ...kernel_knobs import KNOBS_ANNOTATION
from ...target import CpuInfo
from ...topi.cpu import pattern_conv as pc
from ...topi.cpu.tiling import vector_registers
from ..base import CpuRule
from ..tunable import SPACE_ANNOTATION


class PatternTiles(CpuRule):
    """Pattern-sparse convs: their register tile sampled (design spaces only)."""

    name = "pattern-tiles"
    takes_scheduled = True  # the generated kernels are marked scheduled

    def schedule(self, sch: s_tir.Schedule, info: CpuInfo, tunable: bool):
        """A design space sampling the tile, or ``None`` (not tuning, not a pattern
        kernel)."""
        spec = pc.spec_of(sch.mod["main"]) if tunable else None
        if spec is None:
            return None
        choices = pc.tile_choices(vector_registers(info))
        tile = (spec.knobs.rows, spec.knobs.vectors)
        current = pc.TILE_GRID.index(tile) if tile in pc.TILE_GRID else None
        choice = sch.sample_categorical(
            choices, [1.0 / len(choices)] * len(choices),
            decision=choices.index(current) if current in choices else None)
        block = sch.get_sblock(pc.kernel_block(spec))
        sch.annotate(block, KNOBS_ANNOTATION, choice)
        sch.annotate(block, SPACE_ANNOTATION, "kind=pattern")
        return [sch]


__all__ = ["PatternTiles"]

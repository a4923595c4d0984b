"""Arm NEON end to end: the cocopie pipeline for an aarch64 target, its kernels run under QEMU."""

from __future__ import annotations

import logging

import numpy as np
import tvm

from .emulation.aarch64 import build_and_run, program_from_main
from .pipeline import PipelineOptions, run_until
from .target import AARCH64_NEON, parse_target

log = logging.getLogger(__name__)



def run_relax(mod: tvm.IRModule, inputs: list, target=None,
              options: PipelineOptions | None = None) -> list[np.ndarray]:
    """Compile ``mod``'s ``main`` with the cocopie pipeline for aarch64 and run it in QEMU."""
    program = program_from_main(
        run_until(mod, parse_target(target or AARCH64_NEON), "schedule", options))
    log.info("aarch64 program: %d calls to %d kernels", len(program.calls),
             len(program.kernels.functions))
    return build_and_run(program, inputs, target)

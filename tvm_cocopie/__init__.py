"""tvm-cocopie: the CoCoPIE / XGen compiler optimizations as a plugin for stock Apache TVM.

Use::

    import tvm, tvm_cocopie
    print(tvm_cocopie.register())          # adds relax_pipeline="cocopie" to TVM
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})   # a Target: relax.build
    ex = tvm.compile(mod, target=target, relax_pipeline="cocopie")  # refuses a plain dict

or, from an ONNX file, ``tvm_cocopie.compile("model.onnx")(x)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

# threads notes the CPUs before TVM pins any; vm_scratch and vm_dims register the packed
# functions that builds made with static memory and with divisible dims call
# (relay_passes/static_memory.py, relay_passes/dynamic/divisibility.py)
from . import errors, threads, vm_dims, vm_scratch  # noqa: F401
from .errors import CocopieError

__version__ = "0.1.0"
__all__ = [
    "CocopieError",
    "CompiledModel",
    "PipelineOptions",
    "compile",
    "errors",
    "from_onnx",
    "register",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())

# TVM reads its thread count once, when its pool starts (on x86: half the logical CPUs,
# for good): from here on it starts on every physical core, unpinned, unless the user
# set TVM_NUM_THREADS / TVM_BIND_THREADS. Nothing starts here; register() starts it.
threads.configure_thread_pool(threads.usable_cores())


@dataclass
class RegistrationSummary:
    """What :func:`register` put into TVM, readable with ``print``."""

    pipeline: str
    newly_registered: bool
    stages: list = field(default_factory=list)  # [(stage, [pass names])]
    target: str = ""

    def __str__(self) -> str:
        state = "registered" if self.newly_registered else "already registered"
        lines = [
            f"tvm-cocopie {__version__}: relax pipeline {self.pipeline!r} {state}",
            f"  use: tvm.compile(mod, target, relax_pipeline={self.pipeline!r})",
            f"  stages for {self.target}:",
        ]
        for stage, names in self.stages:
            lines.append(f"    {stage:<9} {', '.join(names) if names else '(none)'}")
        return "\n".join(lines)


def register() -> RegistrationSummary:
    """Make stock TVM use tvm-cocopie: register the ``cocopie`` Relax pipeline, and start
    TVM's thread pool on every core this process may use.

    TVM on x86 would start its pool with half the logical CPUs, for good
    (:func:`~tvm_cocopie.threads.ensure_thread_pool`): call ``register()`` before
    running any TVM code. ``TVM_NUM_THREADS`` set by the user wins.

    Idempotent: a second call changes nothing and says so. Returns a summary of the
    pipeline's stages and the passes in each, for the host target.
    """
    from .pipeline import PIPELINE_NAME, register_pipeline, stage_passes
    from .target import host_target

    threads.ensure_thread_pool()
    new = register_pipeline()
    target = host_target()
    stages = [(name, [_pass_name(p) for p in passes]) for name, passes in stage_passes(target)]
    return RegistrationSummary(PIPELINE_NAME, new, stages, str(target.export()))


def _pass_name(p) -> str:
    info = getattr(p, "info", None)
    return str(info.name) if info is not None else type(p).__name__


def __getattr__(name):
    # Lazy re-exports keep `import tvm_cocopie` cheap and free of cycles.
    if name in ("compile", "CompiledModel"):
        from . import api as compiler

        return getattr(compiler, name if name != "compile" else "compile_model")
    if name == "from_onnx":
        from .api import from_onnx

        return from_onnx
    if name == "PipelineOptions":
        from .pipeline import PipelineOptions

        return PipelineOptions
    raise AttributeError(f"module 'tvm_cocopie' has no attribute {name!r}")

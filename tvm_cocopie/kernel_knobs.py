"""Generated kernels whose knobs a schedule chooses: how MetaSchedule tunes them.

Some kernels are written whole by a generator (the pattern-sparse conv of
:mod:`tvm_cocopie.topi.cpu.pattern_conv`): their register tile is part of the code,
and no schedule primitive can change it. MetaSchedule still searches their knobs:

- the generated PrimFunc names its generator in :data:`REALIZE_ATTR`
  (``"module:function"``) and carries what the generator needs to build it again;
- a design space (a schedule rule with ``tunable=True``) samples a knob choice with
  ``SampleCategorical`` and writes it on the kernel's block as the
  :data:`KNOBS_ANNOTATION` (an ``Annotate`` instruction: the trace, the database
  record and transfer-tuning's replay all keep it);
- :func:`realize_kernels`, the first pass of the cocopie TIR pipeline
  (:mod:`tvm_cocopie.tir_pipeline`), calls the generator of every such kernel with the
  choice it carries (or None), which returns the kernel built with those knobs (or
  None: keep it). A generator may also let the model carry a portable form of its
  kernel and generate the fast one only here (the pattern conv's lane transposes, which
  MetaSchedule's analyses cannot read). MetaSchedule's builder
  (:func:`tvm_cocopie.metaschedule.build_kernel`) and every cocopie build use that
  pipeline, so a candidate is timed, and a tuned model runs, as chosen.

The generator is imported by its name: this module and the TIR pipeline sit below the
kernel generators' floor and import none of them.
"""

from __future__ import annotations

import importlib
import logging

import tvm
from tvm import tirx
from tvm.s_tir.stmt import SBlock, SBlockRealize

from .errors import CompilationError
from .tir_stmt import prim_func_pass

log = logging.getLogger(__name__)

#: PrimFunc attribute: ``"module:function"`` of the generator that rebuilds the kernel
#: with a knob choice, ``function(func, choice or None) -> PrimFunc`` (None: keep it)
REALIZE_ATTR = "cocopie.realize"
#: block annotation: the knob choice a schedule made (an integer the generator reads)
KNOBS_ANNOTATION = "cocopie.knobs"


def knob_choice(func: tirx.PrimFunc) -> int | None:
    """The :data:`KNOBS_ANNOTATION` on one of ``func``'s outer blocks (the root block and
    the blocks directly inside it, where a generated kernel's block is), or None."""
    node = func.body
    for _ in range(3):
        if isinstance(node, SBlockRealize):
            node = node.block
        if not isinstance(node, SBlock):
            return None
        if KNOBS_ANNOTATION in node.annotations:
            return int(node.annotations[KNOBS_ANNOTATION])
        node = node.body
    return None


def generator(func: tirx.PrimFunc):
    """The generator function ``func`` names in :data:`REALIZE_ATTR`, or None."""
    if not is_generated(func):
        return None
    name = func.attrs[REALIZE_ATTR]
    module, _, function = str(name).partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as err:
        raise CompilationError(
            f"kernel generator {name!r} (the {REALIZE_ATTR} attribute of a kernel with "
            f"a {KNOBS_ANNOTATION} choice) cannot be loaded: {err}; the kernel was made by "
            "another version of tvm_cocopie: build it again from the model") from err


def is_generated(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` names a generator in :data:`REALIZE_ATTR`."""
    return func.attrs is not None and REALIZE_ATTR in func.attrs


def realize(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """``func`` rebuilt by its generator with the knob choice on its block (None: no
    choice, the generator's own), keeping the attributes the build gave it (its symbol);
    None if it has no generator or the generator keeps it as it is."""
    make = generator(func)
    if make is None:
        return None
    choice = knob_choice(func)
    new = make(func, choice)
    if new is None:
        return None
    for key, value in (func.attrs or {}).items():
        if key not in (new.attrs or {}):
            new = new.with_attr(key, value)
    log.debug("%s: generated with knob choice %s", func.attrs.get("global_symbol"), choice)
    return new


def realize_kernels() -> tvm.transform.Pass:
    """The pass: every PrimFunc with a generator, generated with its knob choice (module
    docstring)."""
    return prim_func_pass("RealizeKernelKnobs", lambda _name, func: realize(func))


__all__ = ["KNOBS_ANNOTATION", "REALIZE_ATTR", "generator", "is_generated", "knob_choice",
           "realize", "realize_kernels"]

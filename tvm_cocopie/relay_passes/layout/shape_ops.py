"""Shape operators TVM's ``ConvertLayout`` gets wrong, written in ones it handles.

Found on real graphs (TVM 0.27):

* ``stack``: its layout rule gives the result a layout of the inputs' rank, so the
  next operator indexes past it ("tvm::String index out of bounds" on the
  ``permute_dims`` after a BiLSTM's stacked time steps). That fails the whole pass,
  even with no layout asked for anywhere: a CRNN recognizer lost the blocked layout
  of all its convolutions. ``stack(xs, axis)`` = ``concat([expand_dims(x, axis)], axis)``.
* ``split`` of a blocked channel axis gives a zero-channel section ("the data channel
  size is 0" at the next conv: YOLO's C2f blocks split their channels in two).
  A channel ``split`` of a feature map becomes one ``strided_slice`` per section;
  :mod:`.sink` keeps block-aligned slices inside the blocked layout.
"""

from __future__ import annotations

import itertools

import tvm
from tvm import relax
from tvm.relax import op as R

from ...exprs import static_shape
from .call_rewrite import rewrite_table


def _stack(bb: relax.BlockBuilder, call):
    axis = int(call.attrs.axis) if call.attrs.axis is not None else 0
    items = call.args[0]
    if not isinstance(items, relax.Tuple):
        return None
    return R.concat([bb.emit(R.expand_dims(x, [axis])) for x in items.fields], axis=axis)


def _split(bb: relax.BlockBuilder, call):
    shape = static_shape(call.args[0])
    axis = int(call.attrs.axis)
    if shape is None or len(shape) != 4 or axis not in (1, -3):
        return None
    sections = call.attrs.indices_or_sections
    extent = shape[1]
    if hasattr(sections, "value") or isinstance(sections, int):
        count = int(getattr(sections, "value", sections))
        if count <= 0 or extent % count:
            return None
        bounds = [extent // count * i for i in range(count + 1)]
    else:
        bounds = [0, *(int(i) for i in sections), extent]
    if any(b > e for b, e in itertools.pairwise(bounds)):
        return None
    return relax.Tuple([bb.emit(R.strided_slice(call.args[0], axes=[1], begin=[b], end=[e]))
                        for b, e in itertools.pairwise(bounds)])


#: operator -> its rewrite (``None``: keep the call)
REWRITES = {
    "relax.stack": _stack,
    "relax.split": _split,
}


@tvm.transform.module_pass(opt_level=0, name="ConvertibleShapeOps")
def convertible_shape_ops(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Rewrite the operators of :data:`REWRITES` (module docstring)."""
    return rewrite_table(mod, REWRITES)

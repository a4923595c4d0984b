"""TVM's ``op_pattern`` from the mapping type where TVM's analysis calls an element-moving
kernel opaque (``relay_passes.fusion.patterns``): with symbolic dims a layout transform
is opaque to TVM, so ``FuseOps`` ran it alone; marked injective it fuses with its
neighbours, and the fused kernel computes the same numbers. Reductions stay opaque."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from tvm_cocopie.relay_passes import fusion_passes
from tvm_cocopie.relay_passes.fusion.patterns import INJECTIVE, OPAQUE, op_patterns_from_mapping
from tvm_cocopie.target import host_target


def _legalized(with_reduction: bool = False) -> tvm.IRModule:
    """``relu(layout_transform(x))`` (and a sum over the width) on ``x: (1, 32, H, W)``."""
    h, w = tirx.Var("H", "int64"), tirx.Var("W", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 32, h, w], "float32"))
    blocked = tirx.IndexMap.from_func(lambda n, c, i, j: (n, c // 16, i, j, c % 16), ndim=4)
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.layout_transform(x, blocked))
            y = bb.emit(relax.op.nn.relu(y))
            if with_reduction:
                y = bb.emit(relax.op.sum(y, axis=[3]))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    return relax.transform.AnnotateTIROpPattern()(mod)


def _patterns(mod) -> dict:
    return {gv.name_hint: int(f.attrs["op_pattern"]) for gv, f in mod.functions_items()
            if isinstance(f, tirx.PrimFunc)}


def test_symbolic_layout_transform_is_marked_injective_and_fuses():
    mod = _legalized()
    assert _patterns(mod)["te_layout_transform"] == OPAQUE  # TVM's analysis gives up
    assert _patterns(op_patterns_from_mapping(mod))["te_layout_transform"] == INJECTIVE
    target = host_target(2)
    with target:
        fused = tvm.transform.Sequential(fusion_passes(target, "stock"))(mod)
    kernels = [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)]
    assert len(kernels) == 1, kernels  # transform and relu in one kernel
    ex = tvm.compile(tvm.ir.transform.Sequential(
        [relax.transform.DeadCodeElimination()])(fused), target=target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x = np.random.default_rng(0).standard_normal((1, 32, 5, 7)).astype(np.float32)
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    want = np.maximum(x, 0).reshape(1, 2, 16, 5, 7).transpose(0, 1, 3, 4, 2)
    np.testing.assert_array_equal(got, want)


def test_reductions_stay_opaque_to_the_pass():
    mod = _legalized(with_reduction=True)
    before = _patterns(mod)
    after = _patterns(op_patterns_from_mapping(mod))
    assert after["sum"] == before["sum"] != INJECTIVE

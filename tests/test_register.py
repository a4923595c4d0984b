"""register(): the cocopie pipeline inside a stock tvm.compile."""

import numpy as np
import tvm
from conftest import assert_close, ort_run
from tvm import relax

import tvm_cocopie
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.pipeline import STAGES, PipelineOptions, cocopie_pipeline, run_until
from tvm_cocopie.target import host_target


def test_register_is_idempotent_and_readable():
    first = tvm_cocopie.register()
    second = tvm_cocopie.register()
    assert not second.newly_registered
    text = str(second)
    assert "relax_pipeline='cocopie'" in text
    for stage in STAGES:
        assert stage in text
    assert [s for s, _ in first.stages] == list(STAGES)
    assert relax.pipeline.PIPELINE_MAP["cocopie"] is cocopie_pipeline


def test_stock_tvm_compile_uses_the_registered_pipeline(tiny_model, tiny_input):
    tvm_cocopie.register()
    mod = from_onnx(tiny_model, shapes={"x": list(tiny_input.shape)})
    ex = tvm.compile(mod, target=host_target(), relax_pipeline="cocopie")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(tiny_input))
    ours = [out[0].numpy(), out[1].numpy()]
    assert_close(ours, ort_run(tiny_model, {"x": tiny_input}))


def test_pipeline_fuses_operators(tiny_model):
    """With fusion the conv and its ReLU become one PrimFunc; without, two."""
    mod = from_onnx(tiny_model, shapes={"x": [1, 3, 16, 16]})
    target = host_target()

    def n_prim_funcs(options):
        m = run_until(mod, target, "schedule", options)
        return sum(isinstance(f, tvm.tirx.PrimFunc) for _, f in m.functions_items())

    assert n_prim_funcs(PipelineOptions(fuse=False)) > n_prim_funcs(PipelineOptions())


def test_pipeline_needs_a_target(tiny_model):
    import pytest

    from tvm_cocopie.errors import TargetError

    mod = from_onnx(tiny_model, shapes={"x": [1, 3, 16, 16]})
    with pytest.raises(TargetError, match="needs a target"):
        cocopie_pipeline()(mod)


def test_options_switch_stages_off_and_still_match(tiny_model, tiny_input):
    opts = PipelineOptions(fuse=False, schedule=False)
    compiled = tvm_cocopie.compile(tiny_model, shapes={"x": [2, 3, 16, 16]}, options=opts)
    assert_close(compiled(tiny_input), ort_run(tiny_model, {"x": tiny_input}))
    assert np.isfinite(compiled(tiny_input)[0]).all()

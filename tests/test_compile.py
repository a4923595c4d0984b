"""tvm_cocopie.compile: ONNX path / ModelProto / IRModule in, numpy out."""

import numpy as np
import pytest
import tvm
from conftest import assert_close, conv_relu_model, ort_run
from tvm import relax

import tvm_cocopie
from tvm_cocopie.frontend.importer import from_onnx


def test_model_proto_and_path_and_bytes(tmp_path, tiny_model, tiny_input):
    ref = ort_run(tiny_model, {"x": tiny_input})
    path = tmp_path / "m.onnx"
    path.write_bytes(tiny_model.SerializeToString())
    for model in (tiny_model, path, str(path), tiny_model.SerializeToString()):
        compiled = tvm_cocopie.compile(model, shapes={"x": list(tiny_input.shape)})
        assert_close(compiled(tiny_input), ref)


def test_inputs_by_name_and_multiple_outputs(tiny_model, tiny_input):
    compiled = tvm_cocopie.compile(tiny_model, shapes={"x": list(tiny_input.shape)})
    by_pos = compiled(tiny_input)
    by_name = compiled(x=tiny_input)
    by_dict = compiled({"x": tiny_input})
    assert isinstance(by_pos, list) and len(by_pos) == 2
    for a, b, c in zip(by_pos, by_name, by_dict):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert compiled.input_names == ["x"]


def test_dynamic_batch_stays_dynamic(tiny_model):
    """Without shapes=, the symbolic batch dim is kept and any batch runs."""
    compiled = tvm_cocopie.compile(tiny_model)
    assert isinstance(compiled.inputs[0].shape[0], str)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
        assert_close(compiled(x), ort_run(tiny_model, {"x": x}))


def test_relax_module_input(tiny_model, tiny_input):
    mod = from_onnx(tiny_model, shapes={"x": list(tiny_input.shape)})
    compiled = tvm_cocopie.compile(mod)
    assert_close(compiled(tiny_input), ort_run(tiny_model, {"x": tiny_input}))


def test_stock_pipeline_by_name_matches_too(tiny_model, tiny_input):
    compiled = tvm_cocopie.compile(tiny_model, shapes={"x": list(tiny_input.shape)},
                                   pipeline="default")
    assert_close(compiled(tiny_input), ort_run(tiny_model, {"x": tiny_input}))


def test_export_and_reload(tmp_path, tiny_input):
    model = conv_relu_model(batch=2)
    compiled = tvm_cocopie.compile(model)
    lib_path = compiled.export_library(tmp_path / "model.so")
    lib = tvm.runtime.load_module(str(lib_path))
    vm = relax.VirtualMachine(lib, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(tiny_input))
    assert_close([out[0].numpy(), out[1].numpy()], ort_run(model, {"x": tiny_input}))


@pytest.mark.parametrize("name, marker", [("aarch64", "fmla"), ("hexagon", "memw")])
def test_cross_targets_build_native_code(tiny_model, name, marker):
    """Arm and Hexagon targets compile through the same pipeline (running them is the
    emulator's job): the object holds that ISA's instructions."""
    from tvm_cocopie.target import AARCH64_NEON, HEXAGON_V66

    target = {"aarch64": AARCH64_NEON, "hexagon": HEXAGON_V66}[name]
    mod = from_onnx(tiny_model, shapes={"x": [1, 3, 16, 16]})
    ex = tvm.compile(mod, target=tvm.target.Target(target), relax_pipeline="cocopie")
    asm = ex.mod.imports[0].inspect_source("asm")
    assert marker in asm


def test_options_only_for_cocopie(tiny_model):
    from tvm_cocopie.errors import CompilationError

    with pytest.raises(CompilationError, match="only apply"):
        tvm_cocopie.compile(tiny_model, pipeline="default", options={"fuse": False})


def _kernel_names(compiled) -> str:
    return compiled.executable.stats()


def test_symbolic_dims_specialize_per_shape(tiny_model):
    """Each concrete batch gets a build of its own, compiled on its first call and
    reused after; the symbolic build runs our NCHWc conv too (SOD²: a symbolic batch is
    the outer loop of the static kernel)."""
    compiled = tvm_cocopie.compile(tiny_model)
    for batch in (1, 3, 1):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
        assert_close(compiled(x), ort_run(tiny_model, {"x": x}))
    assert sorted(compiled.specializations) == [((1, 3, 16, 16),), ((3, 3, 16, 16),)]
    special = compiled.specializations[((3, 3, 16, 16),)]
    assert special.inputs[0].shape == (3, 3, 16, 16) and not special.specializations
    assert "nchwc" in _kernel_names(special) and "nchwc" in _kernel_names(compiled)


def test_specialization_is_bounded_and_optional(tiny_model, monkeypatch, caplog):
    import logging

    from tvm_cocopie import api

    monkeypatch.setattr(api, "MAX_SPECIALIZATIONS", 1)
    compiled = tvm_cocopie.compile(tiny_model)
    xs = [np.random.default_rng(b).standard_normal((b, 3, 16, 16)).astype(np.float32)
          for b in (1, 2, 2)]
    with caplog.at_level(logging.WARNING):
        for x in xs:
            assert_close(compiled(x), ort_run(tiny_model, {"x": x}))
    assert compiled.specializations[((2, 3, 16, 16),)] is None  # ran the symbolic build
    assert caplog.text.count("run the symbolic build") == 1
    plain = tvm_cocopie.compile(tiny_model, specialize=False)
    assert_close(plain(xs[0]), ort_run(tiny_model, {"x": xs[0]}))
    assert not plain.specializations


def test_inputs_staged_and_outputs_copied():
    """Static inputs go through tensors the model keeps (filled by a numpy copy), outputs
    come back as copies: a returned array never changes with the next call, even when the
    output is the input itself, and a caller's array is never written."""
    from conftest import make_model
    from onnx import TensorProto, helper

    model = make_model(
        [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("Neg", ["x"], ["neg"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("same", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("neg", TensorProto.FLOAT, [2, 3])])
    compiled = tvm_cocopie.compile(model)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = -np.ones((2, 3), np.float32)
    first = compiled(a)
    second = compiled(b)
    np.testing.assert_array_equal(first[0], a)
    np.testing.assert_array_equal(first[1], -a)
    np.testing.assert_array_equal(second[0], b)
    second[0][:] = 7  # the caller's copy
    np.testing.assert_array_equal(compiled(a)[0], a)
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32).reshape(2, 3))

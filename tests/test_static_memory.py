"""Static memory allocated once per VM (relay_passes/static_memory.py, vm_scratch.py):
after the first call a static-shape model allocates only its outputs, in a plain
relax.VirtualMachine as through CompiledModel; outputs still match ONNX Runtime and are
fresh every call; VMs over one executable never share scratch; symbolic shapes work."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading

import numpy as np
import pytest
import tvm
from conftest import assert_close, conv_relu_model, ort_run
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_cocopie import vm_scratch
from tvm_cocopie.api import compile_model
from tvm_cocopie.bench.runtime_stats import compiled_model_stats, vm_call_counts
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.models.workloads import get_workload
from tvm_cocopie.pipeline import PipelineOptions, cocopie_pipeline, run_until
from tvm_cocopie.relay_passes.static_memory import (
    cache_static_allocations,
    keep_scratch_registers,
)
from tvm_cocopie.target import host_target

TARGET = host_target(2)


def _outputs(value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [o for item in value for o in _outputs(item)]


@pytest.fixture(scope="module")
def cnn():
    wl = get_workload("mobilenetv2", image_size=32)
    return wl, compile_model(wl.model, TARGET, shapes=wl.shapes)


@pytest.fixture(scope="module")
def encoder():
    wl = get_workload("bert_encoder", num_layers=1, seq=32)
    return wl, compile_model(wl.model, TARGET, shapes=wl.shapes)


@pytest.mark.parametrize("which", ["cnn", "encoder"])
def test_no_intermediate_allocation_after_the_first_call(which, request):
    wl, compiled = request.getfixturevalue(which)
    stats = compiled_model_stats(compiled, wl.inputs)
    assert stats["intermediate_allocations_per_run"] == 0, stats
    # what is left is the one output: a storage and a tensor, fresh every call
    assert stats["allocations_per_run"] == stats["output_allocations_per_run"] == 2, stats
    args = [wl.inputs[n] for n in compiled.input_names]
    counts = vm_call_counts(compiled.executable, args)
    assert counts[vm_scratch.CACHED_SCRATCH] == 1, counts
    assert stats["kernel_calls_per_run"] == sum(
        n for name, n in counts.items()
        if not name.startswith("vm.builtin.") and name != vm_scratch.CACHED_SCRATCH)
    assert_close(compiled(**wl.inputs), ort_run(wl.model, wl.inputs))


def test_fewer_vm_calls_than_allocating_per_call(cnn):
    wl, compiled = cnn
    per_call = compile_model(wl.model, TARGET, shapes=wl.shapes,
                             options=PipelineOptions(static_memory=False))
    before = compiled_model_stats(per_call, wl.inputs)
    after = compiled_model_stats(compiled, wl.inputs)
    assert before["intermediate_allocations_per_run"] > 20, before
    assert after["kernel_calls_per_run"] == before["kernel_calls_per_run"]
    # per intermediate: a lookup in the kept tuple instead of storage, tensor and kills
    assert after["vm_calls_per_run"] < 0.75 * before["vm_calls_per_run"], (before, after)
    ref = ort_run(wl.model, wl.inputs)
    assert_close(per_call(**wl.inputs), ref)
    assert_close(compiled(**wl.inputs), ref)


def test_outputs_of_successive_calls_are_independent_in_a_plain_vm(cnn):
    wl, compiled = cnn
    vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
    (name,) = compiled.input_names
    x = wl.inputs[name]
    y = np.random.default_rng(1).standard_normal(x.shape).astype(x.dtype)
    first = vm["main"](tvm.runtime.tensor(x))
    kept = _outputs(first)
    second = vm["main"](tvm.runtime.tensor(y))
    # the first call's tensors are untouched by the second call, which differs
    for a, b in zip(_outputs(first), kept):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(_outputs(second)[0], kept[0])
    assert_close(kept, ort_run(wl.model, {name: x}))
    assert_close(_outputs(second), ort_run(wl.model, {name: y}))


def test_two_vms_over_one_executable_keep_their_own_scratch(cnn):
    wl, compiled = cnn
    (name,) = compiled.input_names
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(wl.inputs[name].shape).astype(np.float32) for _ in range(2)]
    refs = [ort_run(wl.model, {name: x}) for x in xs]
    vms = [relax.VirtualMachine(compiled.executable, tvm.cpu()) for _ in range(2)]
    results: dict = {}

    def run(i):
        for k in range(5):  # alternating inputs in two threads at once
            x = xs[(i + k) % 2]
            results[i, k] = (_outputs(vms[i]["main"](tvm.runtime.tensor(x))), (i + k) % 2)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out, which in results.values():
        assert_close(out, refs[which])
    assert vm_scratch.live_entries() >= 2
    # once the VMs are gone their scratch goes with the next new entry
    vms.clear()
    gc.collect()
    released = vm_scratch.release_dead()
    assert released >= 2


def test_symbolic_batch_still_runs():
    model = conv_relu_model(batch="N", size=8)
    compiled = compile_model(model, TARGET, specialize=False)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        assert_close(compiled(x), ort_run(model, {"x": x}))
        assert_close(compiled(x), ort_run(model, {"x": x}))


def test_switched_off_allocates_per_call():
    model = conv_relu_model(batch=1, size=8)
    compiled = compile_model(model, TARGET, shapes={"x": [1, 3, 8, 8]},
                             options=PipelineOptions(static_memory=False))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    counts = vm_call_counts(compiled.executable, [x])
    assert vm_scratch.CACHED_SCRATCH not in counts
    assert compiled_model_stats(compiled, {"x": x})["intermediate_allocations_per_run"] > 0
    assert_close(compiled(x), ort_run(model, {"x": x}))


def _planned(mod):
    """``mod`` lowered up to the memory plan, as the lower stage does it."""
    mod = run_until(mod, TARGET, "schedule")
    for p in [relax.transform.RewriteDataflowReshape(), relax.transform.ToNonDataflow(),
              relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite(),
              relax.transform.StaticPlanBlockMemory()]:
        mod = p(mod)
    return mod


def _calls(func, name) -> int:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and (
                (isinstance(expr.op, tvm.ir.Op) and str(expr.op.name) == name)
                or (isinstance(expr.op, relax.ExternFunc)
                    and str(expr.op.global_symbol) == name)):
            found.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return len(found)


def test_functions_other_functions_call_keep_their_allocations():
    """A function a Relax function calls could be in use twice at once (recursion):
    its memory stays per call; the caller's own plan is cached."""

    @I.ir_module
    class Module:
        @R.function
        def helper(x: R.Tensor((8, 8), "float32")) -> R.Tensor((8, 8), "float32"):
            a = R.add(x, x)
            b = R.multiply(a, a)
            return R.add(b, x)

        @R.function
        def main(x: R.Tensor((8, 8), "float32")) -> R.Tensor((8, 8), "float32"):
            a = R.add(x, x)
            b = R.multiply(a, a)
            c = Module.helper(b)
            return R.add(c, x)

    with TARGET:
        mod = cache_static_allocations(_planned(Module))
    assert _calls(mod["helper"], "relax.memory.alloc_storage") > 0
    assert _calls(mod["helper"], vm_scratch.CACHED_SCRATCH) == 0
    assert _calls(mod["main"], "relax.memory.alloc_storage") == 0
    assert _calls(mod["main"], vm_scratch.CACHED_SCRATCH) == 1
    # idempotent: main now refers to itself, and has no plan left
    tvm.ir.assert_structural_equal(cache_static_allocations(mod), mod)
    ex = tvm.compile(Module, TARGET, relax_pipeline=cocopie_pipeline())
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    b = (x + x) ** 2
    want = ((b + b) ** 2 + b) + x  # helper(b) + x
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for _ in range(2):
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), want, rtol=1e-5)


def test_no_kill_calls_on_the_kept_tensors():
    model = conv_relu_model(batch=1, size=8)
    mod = _planned(from_onnx(model, shapes={"x": [1, 3, 8, 8]}))
    with TARGET:
        mod = cache_static_allocations(mod)
        mod = relax.transform.LowerAllocTensor()(mod)
        mod = relax.transform.KillAfterLastUse()(mod)
        killed = _calls(mod["main"], "relax.memory.kill_tensor")
        mod = keep_scratch_registers(mod)
    assert _calls(mod["main"], "relax.memory.kill_tensor") < killed


def test_an_exported_library_runs_where_tvm_cocopie_is_imported(tmp_path):
    """The lookup is a packed function of tvm_cocopie: a VM over an exported library
    starts after ``import tvm_cocopie``, and without it TVM names what is missing."""
    model = conv_relu_model(batch=1, size=8)
    lib = compile_model(model, TARGET, shapes={"x": [1, 3, 8, 8]}).export_library(
        tmp_path / "model.so")
    code = (
        "import sys, numpy as np, tvm\n"
        "from tvm import relax\n"
        "if sys.argv[2] == 'import': import tvm_cocopie\n"
        "try:\n"
        "    vm = relax.VirtualMachine(tvm.runtime.load_module(sys.argv[1]), tvm.cpu())\n"
        "    out = vm['main'](tvm.runtime.tensor(np.ones((1, 3, 8, 8), 'float32')))\n"
        "    print('ran', out[0].shape)\n"
        "except Exception as err:\n"
        "    print('failed', err)\n")
    runs = {how: subprocess.run([sys.executable, "-c", code, str(lib), how], check=True,
                                text=True, capture_output=True, timeout=120).stdout
            for how in ("import", "none")}
    assert "ran (1, 8, 8, 8)" in runs["import"], runs
    assert "failed" in runs["none"] and vm_scratch.CACHED_SCRATCH in runs["none"], runs

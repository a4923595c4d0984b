"""The recurrent loop kernel (tvm_cocopie.topi.cpu.recurrent) on its own: its fast math
against TOPI's, its numbers against numpy, its code (vectorized, no libm calls), the
schedule stage leaving it alone, and what it saves in a CRNN."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from conftest import assert_close, ort_run
from tvm import relax, te, topi

from tvm_cocopie.frontend.ops import recurrent as converter
from tvm_cocopie.pipeline import run_until
from tvm_cocopie.target import host_target
from tvm_cocopie.topi.cpu import recurrent as rk

AVX2 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})


def _build(func):
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                       target=host_target())


def test_fast_math_is_topis_bit_for_bit():
    n = 4096
    x = te.placeholder((n,), "float32", name="x")
    outs = [topi.fast_exp(x), topi.fast_tanh(x),
            te.compute((n,), lambda i: rk.fast_exp(x[i]), name="e"),
            te.compute((n,), lambda i: rk.fast_tanh(x[i]), name="t")]
    lib = _build(te.create_prim_func([x, *outs]))
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.standard_normal(n - 6) * 20, [0, 100, -100, 1e-8, 88.7, -90]])
    args = [tvm.runtime.tensor(xs.astype("float32"))]
    args += [tvm.runtime.tensor(np.zeros(n, "float32")) for _ in outs]
    lib["main"](*args)
    got = [a.numpy() for a in args[1:]]
    np.testing.assert_array_equal(got[2], got[0])
    np.testing.assert_array_equal(got[3], got[1])


# --- numpy reference of the kernel's contract ----------------------------------------


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _pack(rt_cols: np.ndarray) -> np.ndarray:
    """``[D, H, C]`` -> the kernel's ``[D, NJ, H, JT]``."""
    d, h, c = rt_cols.shape
    jt = rk.column_tile(c)
    tiles = -(-c // jt)
    padded = np.pad(rt_cols, [(0, 0), (0, 0), (0, tiles * jt - c)])
    return np.ascontiguousarray(padded.reshape(d, h, tiles, jt).transpose(0, 2, 1, 3))


def _reference(spec: rk.LoopSpec, xw, rt, ins):
    """``Y, Y_h[, Y_c]`` in float64 from the kernel's inputs (``rt``: ``[D, H, G*H]``)."""
    d_n, s_n, b_n, h_n, g = spec.dirs, spec.steps, spec.batch, spec.hidden, spec.gates
    y = np.zeros((s_n, d_n, b_n, h_n))
    hs, cs = [], []
    for d in range(d_n):
        h = ins.get("h0", np.zeros((d_n, b_n, h_n)))[d].astype(np.float64)
        c = ins.get("c0", np.zeros((d_n, b_n, h_n)))[d].astype(np.float64)
        order = range(s_n - 1, -1, -1) if spec.reverse[d] else range(s_n)
        for t in order:
            x = xw[t, :, d * g * h_n:(d + 1) * g * h_n].astype(np.float64)
            part = [x[:, k * h_n:(k + 1) * h_n] for k in range(g)]
            r = rt[d].astype(np.float64)
            rk_ = [r[:, k * h_n:(k + 1) * h_n] for k in range(g)]
            if spec.cell == "lstm":
                p = ins.get("p", np.zeros((d_n, 3 * h_n)))[d]
                gi, go, gf, gc = (part[k] + h @ rk_[k] for k in range(4))
                i = _sigmoid(gi + p[:h_n] * c)
                f = _sigmoid(gf + p[2 * h_n:] * c)
                c = f * c + i * np.tanh(gc)
                h = _sigmoid(go + p[h_n:2 * h_n] * c) * np.tanh(c)
            elif spec.cell == "gru":
                z = _sigmoid(part[0] + h @ rk_[0])
                rg = _sigmoid(part[1] + h @ rk_[1])
                if spec.linear_before_reset:
                    cand = np.tanh(part[2] + rg * (h @ rk_[2] + ins["rbh"][d]))
                else:
                    cand = np.tanh(part[2] + (rg * h) @ rk_[2])
                h = (1 - z) * cand + z * h
            else:
                h = np.tanh(part[0] + h @ rk_[0])
            y[t, d] = h
        hs.append(h)
        cs.append(c)
    outs = [y, np.stack(hs)]
    return outs + ([np.stack(cs)] if spec.cell == "lstm" else [])


SPECS = [
    rk.LoopSpec("lstm", 9, 4, 12, (False, True), init_h=True, init_c=True, peepholes=True),
    rk.LoopSpec("lstm", 5, 5, 7, (True,), init_c=True),
    rk.LoopSpec("gru", 8, 4, 10, (False, True), init_h=True, linear_before_reset=True),
    rk.LoopSpec("gru", 6, 2, 9, (True,), init_h=True),
    rk.LoopSpec("rnn", 7, 6, 33, (False,), init_h=True),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.cell}-D{s.dirs}-B{s.batch}-H{s.hidden}")
def test_kernel_matches_numpy(spec):
    """Batch 4, 5, 6 and 2 take row tiles of 2, 1, 3 and 2 (the ONNX tests run 1 and 3)."""
    rng = np.random.default_rng(spec.steps)
    d_n, h_n, gh = spec.dirs, spec.hidden, spec.gates * spec.hidden
    xw = rng.uniform(-1, 1, (spec.steps, spec.batch, d_n * gh)).astype("float32")
    rt = rng.uniform(-0.5, 0.5, (d_n, h_n, gh)).astype("float32")
    ins = {"xw": xw}
    for k, (first, gates) in enumerate(spec.weight_groups()):
        ins[f"rt{k}"] = _pack(rt[:, :, first * h_n:(first + gates) * h_n])
    extra = {"rbh": (d_n, h_n), "h0": (d_n, spec.batch, h_n), "c0": (d_n, spec.batch, h_n),
             "p": (d_n, 3 * h_n)}
    for name, _ in spec.input_shapes():
        if name in extra:
            ins[name] = rng.uniform(-1, 1, extra[name]).astype("float32")
    lib = _build(rk.recurrent_loop(spec))
    args = [tvm.runtime.tensor(ins[n]) for n, _ in spec.input_shapes()]
    outs = [tvm.runtime.tensor(np.zeros(s, "float32")) for s in spec.output_shapes()]
    lib["main"](*args, *outs)
    assert_close([o.numpy() for o in outs], _reference(spec, xw, rt, ins), rel_tol=1e-5)


def test_kernel_code_is_vectorized_without_libm_calls():
    """The GEMV is broadcast + FMA on 256-bit vectors; exp/tanh are inline polynomials."""
    spec = rk.LoopSpec("lstm", 40, 1, 256, (False, True))
    func = rk.recurrent_loop(spec).with_attr("global_symbol", "main")
    asm = tvm.compile(tvm.IRModule({"main": func}), target=AVX2).mod.inspect_source("asm")
    assert re.search(r"vfmadd\d+ps\s+[^\n]*ymm", asm)
    assert re.search(r"vbroadcastss", asm)
    calls = set(re.findall(r"call\w*\s+(\S+)", asm))
    assert not [c for c in calls if re.search(r"exp|tanh", c)], calls


def test_schedule_stage_leaves_the_kernel_as_written():
    spec = rk.LoopSpec("gru", 4, 1, 16, (False,))
    func = rk.recurrent_loop(spec)
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(list(s), "float32")) for n, s in spec.input_shapes()]
    with bb.function("main", params):
        with bb.dataflow():
            gv = bb.add_func(func, "gru_loop")
            out_ty = [relax.TensorType(list(s), "float32") for s in spec.output_shapes()]
            out = bb.emit_output(relax.call_tir(gv, params, out_ty))
        bb.emit_func_output(out)
    mod = run_until(bb.get(), host_target(), "schedule")
    kernels = [f for gv, f in mod.functions_items() if gv.name_hint == "gru_loop"]
    assert len(kernels) == 1
    tvm.ir.assert_structural_equal(kernels[0].body, func.body)


def test_rules_and_design_spaces_leave_a_scheduled_kernel_alone(caplog):
    """Transfer-tuning's design spaces and the latency model's sampler ask every rule
    directly (not through dlight's ApplyDefaultSchedule, which skips scheduled
    functions): a kernel written already scheduled takes none, with no warning."""
    from tvm_cocopie.schedules import default_rules
    from tvm_cocopie.transfer_tuning.sampler import sample_schedules
    from tvm_cocopie.transfer_tuning.space import design_spaces

    func = rk.recurrent_loop(rk.LoopSpec("gru", 4, 1, 16, (False,)))
    mod = tvm.IRModule({"main": func})
    with caplog.at_level("WARNING"):
        assert all(rule.apply(func, host_target(), True) is None
                   for rule in default_rules(host_target()))
        spaces = design_spaces(mod, host_target())
        assert sample_schedules(mod, host_target(), 4) == []
    assert len(spaces) == 1
    tvm.ir.assert_structural_equal(spaces[0].mod["main"].body, func.body)
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text


@pytest.mark.slow
def test_crnn_runs_far_fewer_kernels(monkeypatch):
    """The zoo CRNN (two bidirectional LSTM layers, T=16 at 64 px): one kernel per layer
    instead of a few per step; outputs still those of ONNX Runtime."""
    import tvm_cocopie
    from tvm_cocopie.bench.runtime_stats import compiled_model_stats
    from tvm_cocopie.models.workloads import get_workload

    wl = get_workload("crnn", image_size=64)
    counts = {}
    for loop in (False, True):
        monkeypatch.setattr(converter, "USE_LOOP_KERNEL", loop)
        compiled = tvm_cocopie.compile(wl.model, shapes=wl.shapes)
        assert_close(compiled(**wl.inputs), ort_run(wl.model, wl.inputs))
        counts[loop] = compiled_model_stats(compiled, wl.inputs)["kernel_calls_per_run"]
    assert counts[True] * 5 < counts[False], counts

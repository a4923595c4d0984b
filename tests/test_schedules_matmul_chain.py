"""Matmuls chained over the same rows in one kernel (schedules/cpu/matmul_chain.py) and
DNNFusion's blocks that keep a result read elsewhere as a further output
(relay_passes/fusion/plan.merge_shared): a pre-norm transformer layer's projection +
residual, layer norm and MLP, fused with the DNNFusion decisions forced, against ONNX
Runtime."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from conftest import (
    LAYER_NORM_PROLOGUE_ON_AVX2,
    allocated_elements,
    make_model,
    ort_run,
)
from onnx import TensorProto, helper

import tvm_cocopie
from tvm_cocopie.bench.fusion import kernel_calls
from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.pipeline import PipelineOptions, run_until
from tvm_cocopie.relay_passes.fusion import profiler
from tvm_cocopie.relay_passes.fusion.mapping import param_buffer, tir_blocks
from tvm_cocopie.relay_passes.fusion.plan import ECG, explore, leaving, placeable, placement
from tvm_cocopie.schedules import default_rules
from tvm_cocopie.schedules.cpu.matmul_chain import chain_factor
from tvm_cocopie.target import host_target


def _const(rng, name, shape, scale=0.1):
    return helper.make_tensor(name, TensorProto.FLOAT, shape,
                              (rng.standard_normal(shape) * scale).astype(np.float32).ravel())


def _layer(rows: int, width: int = 64, hidden: int = 128, head_first: bool = True,
           head_reads_mlp: bool = False):
    """``r = x @ wp + bp + x``, a side head ``s = r @ ws + bs`` (before the MLP in program
    order when ``head_first``; plus the MLP's result with ``head_reads_mlp``), then
    ``y = relu(LN(r) @ w1 + b1) @ w2 + b2 + r``: the sum ``r`` is read by the layer norm
    and the MLP's residual add (one block, once the MLP is joined) and by the head
    (another block). Outputs ``y`` and ``s``."""
    rng = np.random.default_rng(4)
    head = [helper.make_node("MatMul", ["r", "ws"], ["sp"]),
            helper.make_node("Add", ["sp", "bs"], ["sb" if head_reads_mlp else "s"])]
    if head_reads_mlp:
        head.append(helper.make_node("Add", ["sb", "y"], ["s"]))
    mlp = [helper.make_node("LayerNormalization", ["r", "g", "beta"], ["n"], axis=-1,
                            epsilon=1e-6),
           helper.make_node("MatMul", ["n", "w1"], ["h"]),
           helper.make_node("Add", ["h", "b1"], ["hb"]),
           helper.make_node("Relu", ["hb"], ["a"]),
           helper.make_node("MatMul", ["a", "w2"], ["o"]),
           helper.make_node("Add", ["o", "b2"], ["ob"]),
           helper.make_node("Add", ["ob", "r"], ["y"])]
    nodes = [helper.make_node("MatMul", ["x", "wp"], ["p"]),
             helper.make_node("Add", ["p", "bp"], ["pb"]),
             helper.make_node("Add", ["pb", "x"], ["r"]),
             *(head + mlp if head_first else mlp + head)]
    inits = [_const(rng, "wp", [width, width]), _const(rng, "bp", [width]),
             _const(rng, "ws", [width, width]), _const(rng, "bs", [width]),
             _const(rng, "g", [width], 1.0), _const(rng, "beta", [width]),
             _const(rng, "w1", [width, hidden]), _const(rng, "b1", [hidden]),
             _const(rng, "w2", [hidden, width]), _const(rng, "b2", [width])]
    shape = [1, rows, width]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
                       helper.make_tensor_value_info("s", TensorProto.FLOAT, shape)],
                      initializers=inits, opset=17)


def _matmuls(group) -> int:
    return sum("matmul" in n.kernel for n in group)


def _fused(monkeypatch, tmp_path, model, most_matmuls: int):
    """``model`` up to the fusion stage, every candidate that builds and computes its
    parts' numbers taken, but no block of more than ``most_matmuls`` matmuls (so that
    the projection cannot join the whole MLP and stays a block of its own, read by two
    blocks): ``(fused module, options, target)``."""
    monkeypatch.setattr(profiler.MeasuredDecision, "_faster",
                        lambda self, entry: math.isfinite(entry.fused_us))
    merge = profiler.MeasuredDecision.merge

    def limited(self, mod, first, second):
        return _matmuls([*first, *second]) <= most_matmuls and merge(self, mod, first, second)

    monkeypatch.setattr(profiler.MeasuredDecision, "merge", limited)
    opts = PipelineOptions(fusion="dnnfusion", fusion_db=str(tmp_path / "db.sqlite"))
    target = tvm.target.Target(host_target())
    return run_until(from_onnx(model), target, "fusion", opts), opts, target


def test_a_result_read_by_two_blocks_stays_an_output_of_the_block_that_joins_it():
    """The plan: with the MLP joined, ``r`` is read by the MLP's block and by the head's;
    a merge that agrees joins the projection into the head's block (it reads ``r``
    row by row), ``r`` kept as that block's second output, the joined kernel called
    before the MLP (the head bound after it or not); a head that also reads the MLP's
    result would need its kernel after the MLP, which reads ``r``: not placeable (the
    two blocks would not be convex), the projection stays apart."""
    target = host_target()

    def joined(model):
        mod = run_until(from_onnx(model), target, "legalize")
        graph = ECG.of(mod)
        blocks = explore(graph, merge=lambda first, second: _matmuls([*first, *second]) <= 2)
        return [b for b in blocks if len(b.outputs) > 1]

    (block,) = joined(_layer(16))
    kernels = [n.kernel for n in block.nodes]
    assert _matmuls(block.nodes) == 2 and sum(k.startswith("add") for k in kernels) >= 3
    first, second = block.outputs
    assert first.out_bytes == second.out_bytes == 16 * 64 * 4
    assert placeable(block.nodes) and leaving(block.nodes) == block.outputs
    assert placement(block.nodes).index < min(
        c.index for c in first.consumers if c not in block.nodes)
    assert len(joined(_layer(16, head_first=False))) == 1
    assert joined(_layer(16, head_first=False, head_reads_mlp=True)) == []


def _assert_matches_onnx_runtime(model, opts, rows, seed=0, width=64):
    x = np.random.default_rng(seed).standard_normal([1, rows, width]).astype(np.float32)
    got = tvm_cocopie.compile(model, options=opts)(x=x)
    for g, w in zip(got, ort_run(model, {"x": x}), strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-4)


def _output_params(func) -> int:
    """The parameters of a fused PrimFunc that its blocks write (its results)."""
    written = {w.source.name for block in tir_blocks(func) for w in block.writes}
    return sum(param_buffer(func, p).name in written for p in func.params)


@pytest.mark.parametrize("rows", [pytest.param(37, marks=LAYER_NORM_PROLOGUE_ON_AVX2),
                                  pytest.param(197, marks=LAYER_NORM_PROLOGUE_ON_AVX2)])
def test_a_projection_and_its_head_fused_write_both_results_and_match_onnx_runtime(
        tmp_path, monkeypatch, rows):
    """Fused (forced, two matmuls a block at most), the projection + residual and the
    head are one kernel writing two results (``r`` and the head's); it and the MLP with
    its layer norm are scheduled by the matmul chain, no intermediate allocated whole
    (the head's and the MLP's operands per chain tile); the numbers are ONNX Runtime's,
    rows a multiple of the register tile or not (37)."""
    model = _layer(rows)
    fused, opts, target = _fused(monkeypatch, tmp_path, model, most_matmuls=2)
    calls = kernel_calls(fused)
    assert len(calls) == 2, [c.kernel for c in calls]
    rules = default_rules(target)
    for call in calls:
        func = fused[call.kernel]
        assert profiler.first_rule(func, target, rules).name == "matmul_chain", call.kernel
        scheduled = profiler.scheduled_primfunc(func, target, rules)
        sizes = allocated_elements(tvm.IRModule({"main": scheduled}))
        # the widest intermediate (the MLP's 128-wide activations) never whole
        assert all(n < rows * 128 for n in sizes.values()), (call.kernel, sizes)
    (head,) = [c.kernel for c in calls if "layer_norm" not in c.kernel]
    assert _output_params(fused[head]) == 2
    _assert_matches_onnx_runtime(model, opts, rows)


@pytest.mark.parametrize("rows, width, hidden", [
    pytest.param(197, 64, 128, marks=LAYER_NORM_PROLOGUE_ON_AVX2), (40, 120, 240)])
def test_a_whole_layer_is_one_chain_of_three_matmuls(tmp_path, monkeypatch, rows, width,
                                                     hidden):
    """Three matmuls a block allowed: projection, layer norm and MLP join into one
    kernel of three chained matmuls (the residual ``r`` read per chain tile by the last
    epilogue); rows not whole vectors too (PP-OCR rec's 120: the layer norm's body
    reduction over a row computed in the kernel stays a scalar chain, its lane partials
    came out of ``reverse_compute_at`` with 8 of 16 lanes); the numbers are ONNX
    Runtime's."""
    model = _layer(rows, width, hidden, head_first=False)
    fused, opts, target = _fused(monkeypatch, tmp_path, model, most_matmuls=3)
    names = [c.kernel for c in kernel_calls(fused)]
    chains = [k for k in names if k.count("matmul") == 3]
    assert len(chains) == 1, names
    rules = default_rules(target)
    assert profiler.first_rule(fused[chains[0]], target, rules).name == "matmul_chain"
    _assert_matches_onnx_runtime(model, opts, rows, seed=1, width=width)


def test_chain_factor_keeps_every_core_busy_within_the_tile_budget():
    """ViT-tiny's 18 register tiles of 11 rows on 2 cores: 192-wide intermediates take 9
    register tiles a chain tile (2 chain tiles, one a core); 768-wide ones 1 (2 would be
    9 chain tiles, one core idle in the last round: measured 590 against 547 us for the
    MLP; 3 are over the 96 KB budget); on 4 cores no count of tiles is a multiple of
    them, so the largest that fits; one register tile cannot be split."""
    assert chain_factor(18, 11, 192, 2) == 9
    assert chain_factor(18, 11, 768, 2) == 1
    assert chain_factor(18, 11, 192, 4) == 3
    assert chain_factor(1, 8, 64, 2) == 1

"""Shared helpers of the transfer-tuning tests: tiny ONNX models and a seeded database."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn(channels=(4, 8), size=12, seed=0, name="tiny", groups=1) -> onnx.ModelProto:
    """input [1, c0, size, size] -> conv3x3+relu -> conv3x3+relu (c1 channels, the second
    conv in ``groups`` groups)."""
    rng = np.random.default_rng(seed)
    c0, c1 = channels
    inits, nodes = [], []
    prev, cin = "input", c0
    for i, cout in enumerate((c1, c1)):
        g = groups if i == 1 else 1
        w = (rng.standard_normal((cout, cin // g, 3, 3)) * 0.3).astype("float32")
        b = (rng.standard_normal(cout) * 0.1).astype("float32")
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      group=g))
        out = "output" if i == 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [out]))
        prev, cin = out, cout
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c0, size, size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, c1, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def seed_database(model, target, work_dir: Path) -> Path:
    """A MetaSchedule database of ``model``'s kernels scheduled by cocopie's default rules.

    Stands in for a tuned model's log: real traces, no hour of tuning.
    """
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from tvm_cocopie.target import parse_target
    from tvm_cocopie.transfer_tuning.kernel_class import extract_kernels
    from tvm_cocopie.transfer_tuning.search import default_schedule

    target = parse_target(target)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(work_dir))
    for k in extract_kernels(model, target):
        mod = default_schedule(k.mod, target)
        if mod is None:
            continue
        sch = Schedule(k.mod)
        # replay through a schedule so that the trace belongs to the workload
        from tvm_cocopie.schedules import default_rules

        for rule in default_rules(target):
            s = rule.apply(k.mod["main"], target, False)
            if s is not None:
                sch = s
                break
        func = k.mod["main"]
        db.commit_tuning_record(ms.database.TuningRecord(
            sch.trace, db.commit_workload(k.mod), [1e-3], tvm.target.Target(target),
            ms.arg_info.ArgInfo.from_prim_func(func)))
    return work_dir


def matmul_relu(n: int, m: int, k: int):
    """A tiny kernel (IRModule): relu(A[n,k] @ B[k,m])."""
    import tvm
    from tvm import te

    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((n, m), lambda i, j: te.max(c[i, j], 0.0), name="D")
    func = te.create_prim_func([a, b, d]).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func.with_attr("tirx.noalias", True)})


def tile_matmul(mod, tiles=((2, 4, 8), (2, 4, 8)), k_tiles=(8, 8)):
    """A MetaSchedule-style trace: sampled perfect tiles, reorder, parallel, vectorize."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    ext = [int(sch.get(x).extent) for x in (i, j, k)]

    def deci(extent, inner):
        outer = extent
        for f in inner:
            outer //= f
        return [outer, *inner]

    i0, i1, i2 = sch.split(i, sch.sample_perfect_tile(i, 3, decision=deci(ext[0], tiles[0][1:])))
    j0, j1, j2 = sch.split(j, sch.sample_perfect_tile(j, 3, decision=deci(ext[1], tiles[1][1:])))
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, 2, decision=deci(ext[2], k_tiles[1:])))
    sch.reorder(i0, j0, i1, k0, j1, k1, i2, j2)
    sch.parallel(sch.fuse(i0, j0))
    sch.vectorize(j2)
    sch.reverse_compute_at(sch.get_sblock("D"), j1)
    return sch


def seed_matmul_database(mod, target, work_dir: Path, secs: float = 1e-3) -> Path:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(work_dir))
    sch = tile_matmul(mod)
    db.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, db.commit_workload(mod), [secs], tvm.target.Target(target),
        ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    return work_dir


#: block annotations that make :func:`crashing_build` segfault or hang in the builder worker
CRASH, HANG = "tt_test_segfault", "tt_test_hang"


def crashing_build(mod, target, params=None):
    """A MetaSchedule build function that really segfaults or hangs on marked candidates.

    Runs in the LocalBuilder's worker process: a candidate whose script carries the
    :data:`CRASH` annotation kills that process with SIGSEGV, one with :data:`HANG`
    sleeps past the builder's timeout; any other is built as usual.
    """
    import os
    import signal
    import time

    from tvm_cocopie.metaschedule import build_kernel

    text = mod.script()
    if CRASH in text:
        os.kill(os.getpid(), signal.SIGSEGV)
    if HANG in text:
        time.sleep(3600)
    return build_kernel(mod, target, params)


def annotated_matmul_trace(mod, key: str):
    """:func:`tile_matmul`'s trace plus a block annotation ``key`` (replayed on transfer)."""
    sch = tile_matmul(mod)
    sch.annotate(sch.get_sblock("C"), key, 1)
    return sch.trace

"""Small ``local`` buffers on the stack (the TIR pipeline ``cocopie``)."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm.script import tirx as T

from tvm_cocopie.target import parse_target
from tvm_cocopie.tir_pipeline import (
    STACK_LIMIT_BYTES,
    TIR_PIPELINE,
    register_tir_pipeline,
    tir_pipeline_for,
)

TARGET = {"kind": "llvm", "num-cores": 2}


def _kernel(acc_floats: int):
    """Per parallel task: a staged copy of the input (a workspace block) read in the
    accumulation loop, and an accumulator of ``acc_floats`` floats."""

    @T.prim_func
    def kernel(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 16), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for j in T.parallel(64):
            stage = T.alloc_buffer((64,), "float32", scope="global")
            acc = T.alloc_buffer((acc_floats,), "float32", scope="local")
            for k in range(64):
                stage[k] = A[j, k] * T.float32(0.5)
            for i in T.vectorized(16):
                acc[i] = T.float32(0.0)
            for k in range(j + 1):
                for i in T.vectorized(16):
                    acc[i] = acc[i] + stage[k] * A[k, i]
            for i in range(16, acc_floats):  # the whole buffer is used
                acc[i] = acc[i % 16] * T.float32(2.0)
            for i in T.vectorized(16):
                B[j, i] = acc[acc_floats - 16 + i]

    return kernel


def _build(func, pipeline):
    register_tir_pipeline()
    return tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(TARGET),
                       tir_pipeline=pipeline)


def _workspace_sizes(lib) -> list[int]:
    ir = lib.mod.inspect_source("ll")
    return [int(n) for n in re.findall(r"call ptr %\w+\(i32 1, i32 %\w+, i64 (\d+)", ir)]


def _run(lib, a):
    out = tvm.runtime.tensor(np.zeros((64, 16), "float32"))
    lib["main"](tvm.runtime.tensor(a), out)
    return out.numpy()


def test_a_small_local_buffer_is_an_aligned_stack_slot():
    a = np.random.default_rng(0).standard_normal((64, 64)).astype("float32")
    ours, stock = _build(_kernel(64), TIR_PIPELINE), _build(_kernel(64), "default")
    np.testing.assert_array_equal(_run(ours, a), _run(stock, a))
    assert _workspace_sizes(stock) == [64 * 4]  # TVM 0.27: the accumulator on the heap
    assert _workspace_sizes(ours) == []


def test_a_large_local_buffer_stays_a_workspace_block():
    floats = STACK_LIMIT_BYTES // 4 + 16
    lib = _build(_kernel(floats), TIR_PIPELINE)
    assert floats * 4 in _workspace_sizes(lib)


def test_hexagon_builds_keep_tvms_pipeline():
    assert tir_pipeline_for(parse_target(None)) == TIR_PIPELINE
    hexagon = parse_target({"kind": "llvm", "mtriple": "hexagon", "mcpu": "hexagonv66"})
    assert tir_pipeline_for(hexagon) == "default"

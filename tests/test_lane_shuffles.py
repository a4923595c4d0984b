"""The PermutedLoads TIR pass: a vector load whose lanes read a permutation of one
window becomes a contiguous load and a shuffle (same values); other gathers stay."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import s_tir, te, tirx
from tvm.sym import Analyzer

from tvm_cocopie import lane_shuffles
from tvm_cocopie.target import host_target
from tvm_cocopie.tir_pipeline import tir_pipeline_for


def _copy(index, n: int = 1024, lanes: int = 16):
    """A build of ``B[f] = A[index(f)]`` vectorized by ``lanes``, and its assembly."""
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda f: a[index(f)], name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    (loop,) = sch.get_loops(sch.get_sblock("B"))
    sch.vectorize(sch.split(loop, [None, lanes])[1])
    target = host_target()
    lib = tirx.build(sch.mod, target=target, pipeline=tir_pipeline_for(target))
    return lib, lib.inspect_source("asm")


def _run(lib, n: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    a = np.random.default_rng(0).standard_normal(n).astype("float32")
    out = tvm.runtime.empty((n,), "float32")
    lib(tvm.runtime.tensor(a), out)
    return a, out.numpy()


@pytest.mark.parametrize("k,t", [(2, 1), (4, 1), (4, 3), (8, 5)])
def test_rotation_inside_groups_is_one_load_and_a_shuffle(k, t):
    lib, asm = _copy(lambda f: tirx.Select(f % k + t < k, f + t, f + t - k))
    a, got = _run(lib)
    f = np.arange(a.size)
    np.testing.assert_array_equal(got, a[f - f % k + (f % k + t) % k])
    if "avx512f" in asm or "zmm" in asm:  # a 16-lane host: the shuffle is one instruction
        assert re.search(r"\bvperm(il)?ps\b", asm)
        assert not re.search(r"\bvpextrd\b", asm)  # no index taken out lane by lane


def test_a_gather_outside_one_window_is_left_alone():
    """Lanes that are no permutation of one window (some read twice, others never) are
    not turned into a vector load there (it would read elements the copy does not)."""
    b = tirx.decl_buffer((64,), "float32", name="A")
    spread = tirx.BufferLoad(b, [tirx.Ramp(0, 2, 16)])
    assert lane_shuffles.as_shuffle(spread, {}) is None  # a ramp: left to TVM
    v = tirx.Var("i", "int32")
    doubled = tirx.BufferLoad(b, [tirx.Broadcast(v, 16) + tirx.Ramp(0, 1, 16) * 2 % 16])
    assert lane_shuffles.as_shuffle(doubled, {}, Analyzer()) is None  # lanes 0, 2, .. 14 twice


def test_bound_variables_are_followed():
    """After TVM's common-subexpression elimination the index parts are bound variables;
    the lanes are read through them."""
    b = tirx.decl_buffer((256,), "float32", name="A")
    base, turn = tirx.Var("base", "int32"), tirx.Var("turn", "int32x16")
    x = tirx.Var("x", "int32")
    bound = {base: x * 16, turn: tirx.FloorMod(tirx.Ramp(0, 1, 16) + tirx.Broadcast(1, 16),
                                                  tirx.Broadcast(4, 16))}
    index = tirx.Broadcast(base, 16) + tirx.Ramp(0, 1, 16) // tirx.Broadcast(4, 16) \
        * tirx.Broadcast(4, 16) + turn
    shuffled = lane_shuffles.as_shuffle(tirx.BufferLoad(b, [index]), bound)
    assert isinstance(shuffled, tirx.Shuffle)
    assert [int(i) for i in shuffled.indices] == [(j // 4) * 4 + (j + 1) % 4 for j in range(16)]

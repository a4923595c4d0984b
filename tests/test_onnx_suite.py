"""ONNX's own backend test suite, run through tvm-cocopie's ONNX Backend.

The cases are ONNX's node cases (``onnx.backend.test.case.node``, 1884 in onnx
1.23: one operator each with reference inputs and outputs) and, in a full run, the
``light`` models. Each runs through :class:`tvm_cocopie.frontend.backend.TvmCocopieBackend`
and is compared with ONNX's own ``Runner.assert_similar_outputs`` (see
:mod:`tvm_cocopie.bench.conformance`). The cases tvm-cocopie fails are listed,
each with its reason, in :data:`tvm_cocopie.bench.known_failures.KNOWN_FAILURES`
(string, sequence/optional, training and random operators, ai.onnx.ml, sub-byte
and float8 types, ...).

What runs in ``make test``, and why. The whole suite costs about 25 CPU-minutes
(median 0.27 s a passing case, light models up to 100 s each) and the issue allows
~8 minutes of CI on this 2-core machine. So the normal run takes

- every listed known failure (they fail fast, median 5 ms: mostly at import), so
  that a fixed case is noticed and removed from the list; and
- a deterministic stratified subset of the other node cases: in every operator
  group (a case's primary operator, as ``scripts/bench_onnx_suite.py`` groups them)
  the ``ceil(SUBSET_FRACTION * n)`` cases that come first in the CRC-32 order of
  their names, so every operator is covered, the pick does not depend on the
  Python hash seed, and it stays stable when cases are added elsewhere.

``TVM_COCOPIE_ONNX_SUITE=full`` runs every node case and the nine light models
instead (about 15 min on 2 workers); ``scripts/bench_onnx_suite.py`` is the
measured full run, with stock TVM and ONNX Runtime side by side.

The staleness test fails in both directions: a listed case that now passes (remove
it from the list) and an unlisted case that fails (fix it, or list it with its
reason). Cases run in two isolated worker processes with a generous per-case
timeout, so a TVM crash costs one case, not the session. All cases are
deterministic: the random operators (Bernoulli, RandomUniformLike, training-mode
Dropout) are listed known failures, since they fail at import or comparison.

A test drives a handful of cases through ONNX's own runner,
``onnx.backend.test.BackendTest``, in this process.

The last tests hold the cocopie pipeline to the stock one (same importer): one case of each
class it once failed while the stock pipeline passed (bfloat16 constant stores, MaxPool
with Indices), plus targeted schedule tests of both root causes. The full comparison is
``scripts/bench_onnx_suite.py --pipeline cocopie`` (``summary.pipeline_regressions``).
"""

from __future__ import annotations

import math
import os
import unittest
import zlib
from collections import defaultdict

import numpy as np
import pytest
import tvm

from tvm_cocopie.bench.conformance import (
    case_ops,
    light_cases,
    node_cases,
    primary_op,
    run_isolated,
)
from tvm_cocopie.bench.known_failures import CATEGORIES, KNOWN_FAILURES

#: Share of each operator group's expected-passing cases the normal run takes.
SUBSET_FRACTION = 0.2
#: Seconds per case before it counts as failed (compiles take seconds; the machine is shared).
CASE_TIMEOUT = 600.0
FULL = os.environ.get("TVM_COCOPIE_ONNX_SUITE", "").lower() == "full"


def stratified_subset(cases, fraction: float = SUBSET_FRACTION) -> list:
    """Per primary operator, the first ``ceil(fraction * n)`` cases in CRC-32 order."""
    groups: dict[str, list] = defaultdict(list)
    for case in cases:
        groups[primary_op(case.name, case_ops(case.proto()))].append(case)
    picked = []
    for members in groups.values():
        members.sort(key=lambda c: (zlib.crc32(c.name.encode()), c.name))
        picked += members[:math.ceil(fraction * len(members))]
    return sorted(picked, key=lambda c: c.name)


@pytest.fixture(scope="module")
def all_node_cases():
    return node_cases()


@pytest.fixture(scope="module")
def suite_results(all_node_cases):
    """``{case: record}`` for the cases this run takes (see the module docstring)."""
    if FULL:
        selected = list(all_node_cases) + light_cases()
    else:
        listed = [c for c in all_node_cases if c.name in KNOWN_FAILURES]
        others = [c for c in all_node_cases if c.name not in KNOWN_FAILURES]
        selected = listed + stratified_subset(others)
    records = run_isolated(selected, ("cocopie",), jobs=2, timeout=CASE_TIMEOUT,
                           light_timeout=max(CASE_TIMEOUT, 1800.0))
    return {r["case"]: r for r in records}


def test_known_failures_name_real_cases_with_reasons(all_node_cases):
    from onnx.backend.test.loader import load_model_tests

    names = {c.name for c in all_node_cases} | {t.name for t in load_model_tests(kind="real")}
    unknown = sorted(set(KNOWN_FAILURES) - names)
    assert not unknown, f"KNOWN_FAILURES names cases ONNX does not have: {unknown}"
    for case, reason in KNOWN_FAILURES.items():
        category = reason.split(":", 1)[0]
        assert category in CATEGORIES, f"{case}: reason {reason!r} has no known category"
        assert len(reason) > len(category) + 10, f"{case}: the reason says too little"


def test_stratified_subset_is_deterministic_and_covers_every_operator(all_node_cases):
    others = [c for c in all_node_cases if c.name not in KNOWN_FAILURES]
    first = [c.name for c in stratified_subset(others)]
    assert first == [c.name for c in stratified_subset(list(reversed(others)))]
    ops = {primary_op(c.name, case_ops(c.proto())) for c in others}
    picked_ops = {primary_op(c.name, case_ops(c.proto()))
                  for c in stratified_subset(others)}
    assert picked_ops == ops
    assert len(first) < 0.3 * len(others)


def test_known_failures_list_is_not_stale(suite_results, all_node_cases):
    """Fails when a listed case passes or an unlisted case fails (both are listed)."""
    now_passing = sorted(c for c, r in suite_results.items()
                         if c in KNOWN_FAILURES and r["status"] == "pass")
    unexpected = sorted(f"{c} [{r['status']} at {r.get('stage')}]: {r.get('error', '')[:200]}"
                        for c, r in suite_results.items()
                        if c not in KNOWN_FAILURES and r["status"] != "pass")
    node_names = {c.name for c in all_node_cases}
    not_run = sorted(c for c in KNOWN_FAILURES if c not in suite_results
                     and (FULL or c in node_names))
    assert not not_run, f"listed cases that did not run: {not_run}"
    message = []
    if now_passing:
        message.append(f"{len(now_passing)} listed known failure(s) now pass; remove them "
                       "from tvm_cocopie/bench/known_failures.py:\n  "
                       + "\n  ".join(now_passing))
    if unexpected:
        message.append(f"{len(unexpected)} unlisted case(s) fail; fix them or list them with "
                       "a reason:\n  " + "\n  ".join(unexpected))
    assert not message, "\n".join(message)


def test_onnx_backend_test_runner_drives_the_backend():
    """ONNX's own ``BackendTest`` runner, in-process, on a few cases of different kinds."""
    import onnx.backend.test

    from tvm_cocopie.frontend.backend import TvmCocopieBackend

    cases = ("test_lstm_defaults", "test_reshape_reordered_all_dims", "test_relu",
             "test_qlinearmatmul_2D_uint8_float32", "test_reduce_sum_keepdims_example",
             "test_string_concat")  # the last is a known failure, marked xfail below
    backend_test = onnx.backend.test.BackendTest(TvmCocopieBackend, __name__)
    for name in cases:
        backend_test.include(f"^{name}_cpu$")
    backend_test.xfail("^test_string_concat_cpu$")
    suite = unittest.TestSuite()
    for test_class in backend_test.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(test_class))
    with open(os.devnull, "w") as sink:
        result = unittest.TextTestRunner(verbosity=0, stream=sink).run(suite)
    # BackendTest generates every suite case and skips those ``include`` leaves out
    assert result.testsRun - len(result.skipped) == len(cases)
    assert not result.failures and not result.errors, result.failures + result.errors
    assert not result.unexpectedSuccesses
    assert len(result.expectedFailures) == 1


# --------------------------------------------------------- the cocopie pipeline vs the stock one
#: Node cases of each class the cocopie pipeline failed while the stock ``default`` pipeline
#: (same importer) passed them (project issue 20); each class's root cause is fixed, and a
#: case of it runs through both pipelines here. The full comparison is
#: ``scripts/bench_onnx_suite.py --pipeline cocopie`` (``summary.pipeline_regressions``).
PIPELINE_REGRESSIONS = {
    # the fallback schedule vectorized the zero-init of a bfloat16 reduction (a constant
    # store), which TVM's bfloat16 storage legalization leaves as bfloat16x4 for a uint16
    # buffer: schedules.base.vector_safe_store keeps such stores scalar
    "bf16-constant-store": ("test_einsum_batch_matmul_bfloat16",
                            "test_attention_3d_causal_bf16_expanded"),
    # MaxPool with Indices is imported as one where(prev < x_k, x_k, prev) step per window
    # position; the fallback inlined the whole chain (each step reads the last twice: a
    # 2^25-node expression, compute_inline never returned): a block read twice stays
    # materialized past MAX_DUPLICATED_NODES
    "maxpool-indices-chain": ("test_maxpool_with_argmax_2d_precomputed_pads",),
    # RotaryEmbedding with a 3-D input fuses reshape, slices, products, a concatenation and
    # a reshape; the concatenation inlined into the last reshape came out of TVM's lowering
    # (32-bit narrowed indices) wrong for every other head, with garbage that varied from
    # run to run: schedules.cpu.fallback.is_concatenation keeps it materialized
    "concatenation-inline": ("test_rotary_embedding_3d_input",),
    # relay_passes/rewriting/identity.py's invertible() guard called np.finfo on bfloat16,
    # which numpy refuses ("not inexact"); ml_dtypes.finfo answers for bfloat16 and every
    # numpy float type alike
    "bf16-finfo": ("test_celu_bfloat16",),
}
#: Pipeline regressions whose root cause is outside this task's files: they must fail until
#: fixed there (strict xfail), then the case moves to PIPELINE_REGRESSIONS.
PIPELINE_REGRESSIONS_OPEN: dict[str, tuple[str, ...]] = {}
PIPELINE_CASE_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def pipeline_records():
    """``{(case, contender): record}``: the cases above through our importer with the cocopie
    pipeline (``cocopie``) and the stock one (``baseline``), in isolated workers."""
    names = [c for group in (PIPELINE_REGRESSIONS, PIPELINE_REGRESSIONS_OPEN)
             for cases in group.values() for c in cases]
    records = run_isolated(node_cases(names), ("cocopie", "baseline"), jobs=2,
                           timeout=PIPELINE_CASE_TIMEOUT, pipeline="cocopie")
    return {(r["case"], r["contender"]): r for r in records}


def _assert_both_pass(pipeline_records, case):
    baseline = pipeline_records[(case, "baseline")]
    assert baseline["status"] == "pass", f"the stock pipeline fails {case}: {baseline}"
    ours = pipeline_records[(case, "cocopie")]
    assert ours["status"] == "pass", (
        f"{case} passes through the stock pipeline, not through cocopie: {ours['status']} at "
        f"{ours.get('stage')}: {ours.get('error')}")


@pytest.mark.parametrize("case", [c for cases in PIPELINE_REGRESSIONS.values() for c in cases])
def test_cocopie_pipeline_passes_what_the_stock_pipeline_passes(pipeline_records, case):
    _assert_both_pass(pipeline_records, case)


def test_maxpool_indices_builds_as_fast_as_through_the_stock_pipeline(pipeline_records):
    """The chain no longer hangs: a few seconds, as through the stock pipeline."""
    case = PIPELINE_REGRESSIONS["maxpool-indices-chain"][0]
    ours, stock = pipeline_records[(case, "cocopie")], pipeline_records[(case, "baseline")]
    assert ours["seconds"] < max(60.0, 10 * stock["seconds"]), (ours, stock)


def _fallback_build(func):
    from tvm_cocopie.schedules import Fallback
    from tvm_cocopie.target import host_target

    target = host_target(2)
    sch = Fallback().apply(func, target, False)
    assert sch is not None
    return sch, tvm.compile(sch.mod, target=target)


def test_a_bfloat16_reduction_builds_with_a_scalar_init():
    """The fallback's vectorized bfloat16 reduction: its constant init stays scalar, the
    rest vectorized, and the result is numpy's (in bfloat16)."""
    import ml_dtypes
    from tvm import s_tir, te

    from tvm_cocopie.schedules.base import vector_safe_store

    a = te.placeholder((5, 2, 3), "bfloat16", name="a")
    b = te.placeholder((5, 3, 16), "bfloat16", name="b")
    k = te.reduce_axis((0, 3), name="k")
    c = te.compute((5, 2, 16), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="c")
    d = te.compute((5, 2, 16), lambda n, i, j: c[n, i, j] + a[n, i, 0], name="d")
    func = te.create_prim_func([a, b, d])
    plain = s_tir.Schedule(func)
    init = plain.get(plain.get_sblock("c")).init
    assert not vector_safe_store(init)  # bfloat16(0) into a bfloat16 buffer
    sch, lib = _fallback_build(func)
    assert "T.vectorized" in sch.mod.script()  # the element-wise add still is
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 2, 3)).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal((5, 3, 16)).astype(ml_dtypes.bfloat16)
    out = tvm.runtime.tensor(np.zeros((5, 2, 16), ml_dtypes.bfloat16))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    want = np.einsum("nik,nkj->nij", x.astype(np.float32), y.astype(np.float32))
    want += x[:, :, :1].astype(np.float32)
    np.testing.assert_allclose(out.numpy().astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_a_select_chain_reading_each_step_twice_builds_in_seconds():
    """``m_k = where(m_{k-1} < x_k, x_k, m_{k-1})`` with the index of the maximum alongside
    (what MaxPool with Indices imports to): 25 steps build in seconds and match numpy."""
    import time

    from tvm import te

    steps, n = 25, 64
    x = te.placeholder((steps, n), "float32", name="x")
    best = te.compute((n,), lambda i: x[0, i], name="m0")
    index = te.compute((n,), lambda i: tvm.tirx.const(0, "int64"), name="i0")
    def step(s, best, index):  # te.compute takes no default arguments: bind by closure
        greater = te.compute((n,), lambda i: best[i] < x[s, i], name=f"g{s}")
        return (te.compute((n,), lambda i: tvm.tirx.Select(greater[i], x[s, i], best[i]),
                           name=f"m{s}"),
                te.compute((n,), lambda i: tvm.tirx.Select(
                    greater[i], tvm.tirx.const(s, "int64"), index[i]), name=f"i{s}"))

    for s in range(1, steps):
        best, index = step(s, best, index)
    start = time.perf_counter()
    _, lib = _fallback_build(te.create_prim_func([x, best, index]))
    assert time.perf_counter() - start < 60
    data = np.random.default_rng(0).standard_normal((steps, n)).astype(np.float32)
    out_m = tvm.runtime.tensor(np.zeros(n, np.float32))
    out_i = tvm.runtime.tensor(np.zeros(n, np.int64))
    lib["main"](tvm.runtime.tensor(data), out_m, out_i)
    np.testing.assert_array_equal(out_m.numpy(), data.max(axis=0))
    np.testing.assert_array_equal(out_i.numpy(), data.argmax(axis=0))


def test_a_concatenation_stays_materialized_and_a_where_does_not():
    """A select between two buffers by position (a concatenation) is not inlined into its
    consumer; a select whose condition reads a buffer (ONNX ``Where``) still is."""
    from tvm import s_tir, te

    from tvm_cocopie.schedules.cpu.fallback import inline_spatial_chains, is_concatenation

    a = te.placeholder((2, 4), "float32", name="a")
    b = te.placeholder((2, 4), "float32", name="b")
    m = te.placeholder((2, 8), "bool", name="m")
    cat = te.compute((2, 8), lambda i, j: tvm.tirx.if_then_else(
        j >= 4, b[i, j - 4], a[i, j]), name="cat")
    where = te.compute((2, 8), lambda i, j: tvm.tirx.Select(m[i, j], cat[i, j], -cat[i, j]),
                       name="where")
    out = te.compute((2, 8), lambda i, j: where[i, j] * 2.0, name="out")
    sch = s_tir.Schedule(te.create_prim_func([a, b, m, out]))
    assert is_concatenation(sch, sch.get_sblock("cat"))
    assert not is_concatenation(sch, sch.get_sblock("where"))
    inline_spatial_chains(sch)
    names = {sch.get(blk).name_hint for blk in sch.get_child_blocks(sch.get_sblock("root"))}
    assert names == {"cat", "out"}

"""Packed matmul (dense, batched with shared weights, batch matmul of activations)
through the cocopie pipeline against numpy, with fused epilogues."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_kernels_common import TARGET, assert_allclose, build_graph, run, tensor_var
from tvm import relax
from tvm.relax import op as R


@pytest.mark.parametrize("m,k,n", [(1, 64, 10), (7, 33, 17), (64, 64, 48), (13, 128, 96),
                                   (128, 40, 8)])
def test_dense_with_constant_weight(m, k, n):
    rng = np.random.default_rng(m + k + n)
    w = rng.standard_normal((k, n)).astype("float32")
    x = tensor_var("x", (m, k))
    mod = build_graph([x], lambda bb, x: bb.emit(R.matmul(x, relax.const(w))))
    data = rng.standard_normal((m, k)).astype("float32")
    assert_allclose(run(mod, [data]), data.astype(np.float64) @ w)


def test_gemm_transposed_weight_bias_gelu():
    """ONNX Gemm(transB=1) + bias + GELU: permute of a constant, folded, then packed."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 36)).astype("float32")  # (N, K)
    b = rng.standard_normal((24,)).astype("float32")
    x = tensor_var("x", (10, 36))

    def body(bb, x):
        y = bb.emit(R.matmul(x, R.permute_dims(relax.const(w), [1, 0])))
        return bb.emit(R.nn.gelu(R.add(y, relax.const(b))))

    data = rng.standard_normal((10, 36)).astype("float32")
    y = data.astype(np.float64) @ w.T + b
    ref = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    assert_allclose(run(build_graph([x], body), [data]), ref)


def test_batched_input_shared_weight_with_residual():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((32, 32)).astype("float32")
    x = tensor_var("x", (2, 9, 32))
    mod = build_graph([x], lambda bb, x: bb.emit(R.add(R.matmul(x, relax.const(w)), x)))
    data = rng.standard_normal((2, 9, 32)).astype("float32")
    assert_allclose(run(mod, [data]), data.astype(np.float64) @ w + data)


@pytest.mark.parametrize("b,m,k,n", [(2, 16, 24, 16), (3, 5, 8, 19)])
def test_batch_matmul_of_activations(b, m, k, n):
    rng = np.random.default_rng(b * m)
    x, y = tensor_var("x", (b, m, k)), tensor_var("y", (b, k, n))
    mod = build_graph([x, y], lambda bb, x, y: bb.emit(R.nn.relu(R.matmul(x, y))))
    a = rng.standard_normal((b, m, k)).astype("float32")
    c = rng.standard_normal((b, k, n)).astype("float32")
    assert_allclose(run(mod, [a, c]), np.maximum(a.astype(np.float64) @ c, 0))


rng_b = np.random.default_rng(21)


@pytest.mark.parametrize("ashape,bshape", [((4, 3, 20, 16), (1, 3, 16, 24)),
                                           ((2, 20, 16), (3, 1, 16, 24)),
                                           ((20, 16), (3, 16, 24)),
                                           ((1, 3, 20, 16), (2, 3, 16, 24))])
def test_batch_matmul_with_broadcast_batch_dims(ashape, bshape):
    """Batch dims that differ by broadcasting (numpy's rules, ranks padded with ones): both
    operands broadcast to one batch shape, then the packed kernel (TVM's generic matmul
    took 19x ONNX Runtime's time)."""
    from test_kernels_common import prim_funcs, scheduled

    x, y = tensor_var("x", ashape), tensor_var("y", bshape)
    mod = build_graph([x, y], lambda bb, x, y: bb.emit(R.matmul(x, y)))
    assert any("cocopie.matmul" in f.script() for f in prim_funcs(scheduled(mod)).values())
    a = rng_b.standard_normal(ashape).astype("float32")
    b = rng_b.standard_normal(bshape).astype("float32")
    assert_allclose(run(mod, [a, b]), np.matmul(a.astype(np.float64), b))


def test_large_matmul_uses_the_packed_kernel():
    from test_kernels_common import prim_funcs, scheduled

    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 48)).astype("float32")
    x = tensor_var("x", (64, 64))
    mod = scheduled(build_graph([x], lambda bb, x: bb.emit(R.matmul(x, relax.const(w)))))
    (text,) = [f.script() for f in prim_funcs(mod).values()]
    assert "cocopie.matmul" in text and "T.vectorized" in text and "T.unroll" in text


@pytest.mark.parametrize("shape", [(13, 1, 64), (1, 1, 7, 64), (3, 1, 1, 64)])
def test_shared_weight_rows_from_one_batch_dim(shape):
    """Time-major ``(T, 1, K)`` activations: the batch dim becomes the product's rows
    (one product, not T of one row each), with a bias epilogue."""
    rng = np.random.default_rng(len(shape))
    w = rng.standard_normal((64, 40)).astype("float32")
    b = rng.standard_normal((40,)).astype("float32")
    x = tensor_var("x", shape)
    mod = build_graph([x], lambda bb, x: bb.emit(R.add(R.matmul(x, relax.const(w)),
                                                       relax.const(b))))
    data = rng.standard_normal(shape).astype("float32")
    assert_allclose(run(mod, [data]), data.astype(np.float64) @ w + b)


@pytest.mark.parametrize("m,k,n", [(20, 512, 288), (30, 1536, 160), (40, 2048, 200)])
def test_wide_gemm_cache_blocking(m, k, n):
    """B larger than the L2 budget: column panels outside the row tiles, and above the L1
    budget per panel a blocked reduction (accumulators of the whole panel kept locally),
    with an epilogue per panel; N not a multiple of the panel width."""
    from tvm_cocopie.target import cpu_info
    from tvm_cocopie.topi.cpu import tiling

    info = cpu_info(TARGET)
    tile = tiling.matmul_tile(m, n, info)
    blocking = tiling.matmul_blocking(m, n, k, tile)
    assert blocking.columns_outer
    assert (blocking.kb < k) == (4 * k * tile.nb > tiling.L2_BUDGET // 2)
    rng = np.random.default_rng(k)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    b = rng.standard_normal((n,)).astype("float32")
    x = tensor_var("x", (m, k))
    mod = build_graph([x], lambda bb, x: bb.emit(R.nn.relu(R.add(R.matmul(x, relax.const(w)),
                                                                 relax.const(b)))))
    data = rng.standard_normal((m, k)).astype("float32")
    assert_allclose(run(mod, [data]), np.maximum(data.astype(np.float64) @ w + b, 0))


@pytest.mark.parametrize("shape,k,n", [((1, 5, 5, 256), 256, 1040), ((1, 3, 5, 1536), 1536, 96)])
def test_shared_weight_over_a_map_streams_each_panel_once(shape, k, n):
    """A Linear layer over an NHWC map (ConvNeXt's MLP: several non-unit dims before K)
    with a B beyond the L2 budget: the panels of B go outermost for every batch's row
    tiles together (once per batch, B came from memory once per map row), with the
    blocked reduction when the panel exceeds the L1 budget, and a GELU epilogue."""
    from test_kernels_common import prim_funcs, scheduled

    rng = np.random.default_rng(k + n)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    b = rng.standard_normal((n,)).astype("float32")
    x = tensor_var("x", shape)

    def body(bb, x):
        return bb.emit(R.nn.gelu(R.add(R.matmul(x, relax.const(w)), relax.const(b))))

    text = "".join(f.script() for f in prim_funcs(scheduled(build_graph([x], body))).values())
    assert '"colout": 1' in text
    data = rng.standard_normal(shape).astype("float32")
    y = data.astype(np.float64) @ w + b
    ref = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    assert_allclose(run(build_graph([x], body), [data]), ref)


def test_matmul_with_a_permuting_epilogue_writes_every_output():
    """QKV projection + bias + reshape to heads + transpose (a DNNFusion block): the
    transposing epilogue cannot sit under the register tile (TVM bounded it wrongly there
    and most outputs were never written); every output is written, whatever the buffer
    held before."""
    import tvm
    from tvm import te

    from tvm_cocopie.relay_passes.fusion.profiler import ApplyDefaultSchedule
    from tvm_cocopie.schedules import default_rules
    from tvm_cocopie.target import cpu_info
    from tvm_cocopie.topi.cpu import dense_packed as dp
    from tvm_cocopie.topi.cpu.tiling import matmul_tile

    rows, k, n, heads, dim = 40, 120, 360, 8, 15
    tile = matmul_tile(rows, n, cpu_info(TARGET))
    a = te.placeholder((1, rows, k), name="a")
    packed = te.placeholder((-(-n // tile.nb), k, tile.nb), name="packed")
    bias = te.placeholder((n,), name="bias")
    mm = dp.matmul_packed(a, packed, n, tile)
    biased = te.compute(mm.shape, lambda b, i, j: mm[b, i, j] + bias[j], name="add")
    heads_of = te.compute((1, rows, 3, heads, dim),
                          lambda b, i, s, h, d: biased[b, i, s * heads * dim + h * dim + d],
                          name="reshape")
    out = te.compute((3, 1, heads, rows, dim),
                     lambda s, b, h, i, d: heads_of[b, i, s, h, d], name="transpose")
    func = te.create_prim_func([a, packed, bias, out]).with_attr("global_symbol", "main")
    mod = tvm.IRModule({"main": func})
    with TARGET:
        scheduled = ApplyDefaultSchedule(*default_rules(TARGET))(mod)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in p.shape]).astype("float32")
            for p in func.params[:-1]]
    outs = []
    for m in (mod, scheduled):
        lib = tvm.compile(m, target=TARGET)
        result = tvm.runtime.tensor(np.full([int(d) for d in out.shape], np.nan, "float32"))
        lib["main"](*[tvm.runtime.tensor(x) for x in args], result)
        outs.append(result.numpy())
    assert not np.isnan(outs[1]).any()
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)

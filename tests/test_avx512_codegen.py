"""AVX-512 targets: the rules pick 16-lane vectors and LLVM emits zmm FMAs.

This machine (an AMD EPYC, znver3) has AVX2 only, so AVX-512 code is generated and
inspected here, not run: the conv and matmul kernels are compiled for
``skylake-avx512`` and their assembly must do the FMAs of the micro-kernel on 512-bit
``zmm`` registers. On a host that has AVX-512 the same build also runs and is checked
against numpy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from test_kernels_common import assert_allclose, build_graph, conv2d_reference, tensor_var
from tvm import relax
from tvm.relax import op as R

import tvm_cocopie
from tvm_cocopie.pipeline import cocopie_pipeline
from tvm_cocopie.target import cpu_info, host_target, parse_target
from tvm_cocopie.topi.cpu.legalize import conv2d_plan, matmul_plan

AVX512_TARGET = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
rng = np.random.default_rng(7)
W_CONV = rng.standard_normal((64, 32, 3, 3)).astype("float32") / 17
W_DENSE = rng.standard_normal((96, 80)).astype("float32") / 10


def _graph():
    x = tensor_var("x", (1, 32, 14, 14))
    a = tensor_var("a", (24, 96))

    def body(bb, x, a):
        y = bb.emit(R.nn.relu(R.nn.conv2d(x, relax.const(W_CONV), padding=[1, 1, 1, 1])))
        z = bb.emit(R.matmul(a, relax.const(W_DENSE)))
        return bb.emit(relax.Tuple([y, z]))

    return build_graph([x, a], body)


def _calls(mod, op_name):
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == op_name:
            calls.append(expr)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return calls


def _host_has_avx512() -> bool:
    target = host_target()
    with target:
        return bool(tvm.target.codegen.llvm_cpu_has_features(["avx512f"], target))


def test_avx512_rules_pick_16_lanes():
    info = cpu_info(parse_target(AVX512_TARGET))
    assert (info.arch, info.vector_bits, info.f32_lanes) == ("x86", 512, 16)
    mod = _graph()
    (conv,) = _calls(mod, "relax.nn.conv2d")
    (mm,) = _calls(mod, "relax.matmul")
    plan = conv2d_plan(conv, info)
    assert (plan.tile.ib, plan.tile.ob) == (16, 16)
    assert matmul_plan(mm, info).tile.nb % 16 == 0


@pytest.fixture(scope="module")
def avx512_build():
    tvm_cocopie.register()
    return tvm.compile(_graph(), target=parse_target(AVX512_TARGET),
                       relax_pipeline=cocopie_pipeline())


def test_avx512_kernels_use_zmm_fmas(avx512_build):
    asm = "\n".join(m.inspect_source("asm") for m in avx512_build.mod.imports)
    fmas = re.findall(r"vfmadd\w*ps\s+[^\n]*", asm)
    zmm_fmas = [f for f in fmas if "zmm" in f]
    assert zmm_fmas, "no FMA on zmm registers in the AVX-512 build"
    assert len(zmm_fmas) >= len(fmas) // 2, f"{len(zmm_fmas)} of {len(fmas)} FMAs on zmm"


@pytest.mark.skipif(not _host_has_avx512(),
                    reason="host has no AVX-512: the zmm build is inspected, not run")
def test_avx512_build_runs_on_avx512_hosts(avx512_build):
    vm = relax.VirtualMachine(avx512_build, tvm.cpu())
    x = rng.standard_normal((1, 32, 14, 14)).astype("float32")
    a = rng.standard_normal((24, 96)).astype("float32")
    y, z = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(a))
    ref = np.maximum(conv2d_reference(x, W_CONV, padding=(1, 1, 1, 1)), 0)
    assert_allclose(y.numpy(), ref)
    assert_allclose(z.numpy(), a.astype(np.float64) @ W_DENSE)

"""A small ONNX conv net (BN, residual, ReLU/ReLU6/HardSwish, max pool, depthwise,
grouped, global pooling, Gemm) through ``tvm_cocopie.compile`` against ONNX Runtime,
and the kernel rules actually applied to it."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from conftest import assert_close, ort_run
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie


class _Net:
    """A tiny ONNX graph builder with deterministic weights."""

    def __init__(self, seed=0):
        self.nodes, self.inits, self.count = [], [], 0
        self.rng = np.random.default_rng(seed)

    def _name(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array):
        name = self._name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    def op(self, kind, *inputs, **attrs):
        out = self._name(kind.lower())
        self.nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, groups=1, bias=True):
        w = self.rng.standard_normal((cout, cin // groups, k, k)) / np.sqrt(cin // groups * k * k)
        ins = [x, self.const(w)] + ([self.const(self.rng.standard_normal(cout) * 0.1)] if bias else [])
        return self.op("Conv", *ins, kernel_shape=[k, k], strides=[stride] * 2,
                       pads=[k // 2] * 4, group=groups)

    def bn(self, x, c):
        stats = (1 + 0.1 * self.rng.standard_normal(c), 0.1 * self.rng.standard_normal(c),
                 0.1 * self.rng.standard_normal(c), 1 + 0.1 * self.rng.random(c))
        return self.op("BatchNormalization", x, *[self.const(s) for s in stats])

    def model(self, shape, out, out_shape):
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=10)
        onnx.checker.check_model(model)
        return model


def small_convnet(c=16, size=24, batch=1):
    g = _Net()
    y = g.op("Relu", g.bn(g.conv("x", 3, c, 3, bias=False), c))
    r = y
    z = g.op("Relu", g.bn(g.conv(y, c, c, 3, bias=False), c))
    y = g.op("Relu", g.op("Add", g.bn(g.conv(z, c, c, 3, bias=False), c), r))
    y = g.op("MaxPool", g.op("Relu", g.conv(y, c, 2 * c, 3, stride=2)), kernel_shape=[2, 2],
             strides=[2, 2])
    y = g.op("Clip", g.conv(y, 2 * c, 2 * c, 1), g.const(0.0), g.const(6.0))
    y = g.op("HardSwish", g.conv(y, 2 * c, 2 * c, 3, groups=2 * c))
    y = g.op("Relu", g.conv(y, 2 * c, 2 * c, 3, groups=4))
    y = g.op("Flatten", g.op("GlobalAveragePool", y))
    w = g.const(g.rng.standard_normal((10, 2 * c)) * 0.1)
    out = g.op("Gemm", y, w, g.const(g.rng.standard_normal(10)), transB=1)
    return g.model([batch, 3, size, size], out, [batch, 10])


@pytest.mark.parametrize("batch", [1, 2])
def test_small_convnet_matches_onnxruntime(batch):
    model = small_convnet(batch=batch)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 24, 24)).astype(np.float32)
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(x), ort_run(model, {"x": x}))


def test_every_conv_gets_the_register_tiled_schedule():
    from test_kernels_common import prim_funcs, scheduled

    from tvm_cocopie.frontend.importer import from_onnx

    mod = scheduled(from_onnx(small_convnet()))
    # blocked (nchwc) kernels, and GSPC's where a group is narrower than the vector (the
    # groups=4 conv's 8 channels per group on a 16-lane AVX-512 host)
    convs = [f.script() for name, f in prim_funcs(mod).items()
             if "nchwc" in name or "gspc" in name]
    assert len(convs) == 7  # every Conv of the net, stem and grouped ones included
    for text in convs:
        assert "T.vectorized" in text and "T.unroll" in text and "_local" in text


def test_thread_pool_defaults_leave_user_settings(monkeypatch):
    """``configure_thread_pool`` unpins the pool's workers unless the user chose."""
    from tvm_cocopie.threads import configure_thread_pool

    monkeypatch.delenv("TVM_BIND_THREADS", raising=False)
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    configure_thread_pool(3)
    assert (os.environ["TVM_BIND_THREADS"], os.environ["TVM_NUM_THREADS"]) == ("0", "3")
    monkeypatch.setenv("TVM_BIND_THREADS", "1")
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    configure_thread_pool(2)
    assert (os.environ["TVM_BIND_THREADS"], os.environ["TVM_NUM_THREADS"]) == ("1", "1")

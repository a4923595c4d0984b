"""Random networks for the latency model's training data: valid, deterministic, varied,
and compiled by the cocopie pipeline to what ONNX Runtime computes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tvm_cocopie import models
from tvm_cocopie.api import compile_model
from tvm_cocopie.errors import CocopieError
from tvm_cocopie.models.random_nets import (
    KINDS,
    is_random,
    network_by_name,
    network_name,
    random_network,
)


def test_same_seed_same_network_and_seeds_vary():
    assert random_network(7).SerializeToString() == random_network(7).SerializeToString()
    docs = set()
    ops = set()
    conv_ranks = set()
    for seed in range(18):
        m = random_network(seed)
        onnx.checker.check_model(m)
        assert m.ir_version <= 10
        # the kind follows the seed: image, sequence, signal in turn
        assert m.doc_string.startswith(f"random {KINDS[seed % len(KINDS)]} network")
        docs.add(m.doc_string)
        ops |= {n.op_type for n in m.graph.node}
        conv_ranks |= {len(a.ints) for n in m.graph.node if n.op_type == "Conv"
                       for a in n.attribute if a.name == "kernel_shape"}
    assert len(docs) == 18
    # the families the latency model needs to have seen, 1-D convolutions among them
    assert {"Conv", "BatchNormalization", "MatMul", "Softmax", "LayerNormalization",
            "Gemm", "ReduceMax"} <= ops
    assert ops & {"GRU", "LSTM"} and ops & {"MaxPool", "AveragePool"}
    assert conv_ranks == {1, 2}
    assert is_random("random_12") and not is_random("random_x") and not is_random("resnet18")
    assert is_random("random_deep_3") and not is_random("random_deep_")


def test_deep_networks_are_deeper_and_leave_the_shallow_ones_alone():
    shallow_nodes, deep_nodes = [], []
    for seed in range(6):
        shallow, deep = random_network(seed), random_network(seed, deep=True)
        onnx.checker.check_model(deep)
        assert deep.doc_string.startswith(f"random deep {KINDS[seed % len(KINDS)]} network")
        assert deep.graph.name == network_name(seed, deep=True) == f"random_deep_{seed}"
        assert network_by_name(f"random_deep_{seed}").SerializeToString() == \
            deep.SerializeToString()
        assert network_by_name(f"random_{seed}").SerializeToString() == \
            shallow.SerializeToString()
        shallow_nodes.append(len(shallow.graph.node))
        deep_nodes.append(len(deep.graph.node))
    assert np.median(deep_nodes) > 2 * np.median(shallow_nodes)
    with pytest.raises(CocopieError, match="random_deep_<seed>"):
        network_by_name("random_deep_x")


@pytest.mark.parametrize("seed,deep", [(3, False), (4, False), (5, False), (5, True)])
def test_random_network_compiles_to_what_ort_computes(seed, deep):  # one of each kind
    m = random_network(seed, deep=deep)
    feeds = models.sample_inputs(m)
    compiled = compile_model(m, adaptive_threads=False)
    out = compiled(**feeds)
    out = out[0] if isinstance(out, (list, tuple)) else out
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())

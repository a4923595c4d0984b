"""``tvm-cocopie hexagon run MODEL.onnx``: an ONNX CNN's leading conv chain on emulated HVX."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from tvm_cocopie.hexagon import cli
from tvm_cocopie.hexagon.executor import onnx_chain


@pytest.fixture(scope="module")
def mobilenet_path(tmp_path_factory):
    from tvm_cocopie import models

    path = tmp_path_factory.mktemp("hex") / "mobilenetv2.onnx"
    models.save(models.build("mobilenetv2", image_size=32), path)
    return path


def test_conv_chain_folds_batchnorm_and_reads_the_trunk_up_to_the_pool(mobilenet_path):
    import onnx

    layers, weights, stopped = onnx_chain.conv_chain(onnx.load(str(mobilenet_path)), 16)
    ops = [lay.op for lay in layers[1:]]
    assert ops[:3] == ["conv", "dwconv", "conv"]
    adds = [lay for lay in layers if lay.op == "add"]
    assert len(adds) == 10  # MobileNetV2's residual connections
    assert all(len(lay.inputs) == 2 for lay in adds)
    assert "GlobalAveragePool" in stopped
    w, b = weights[layers[1].name]
    assert w.shape == (3, 3, 3, 32) and b.shape == (32,) and np.abs(b).max() > 0


def _parser():
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers(dest="command"))
    return p


@pytest.mark.needs_toolchain
def test_hexagon_run_command(mobilenet_path, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = _parser().parse_args(
        [
            "hexagon",
            "run",
            str(mobilenet_path),
            "--image-size",
            "16",
            "--max-layers",
            "3",
            "--json",
            str(out),
        ]
    )
    assert args.func(args) == 0
    result = json.loads(out.read_text())
    assert result["exact"] and result["total_packets"] > 0
    assert len(result["layers"]) == 3
    assert "bit-exact vs numpy: True" in capsys.readouterr().out

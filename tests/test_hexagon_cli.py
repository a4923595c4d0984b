"""``tvm-cocopie hexagon run``: argument errors (whole-model runs: tests/test_hexagon_models.py)."""

from __future__ import annotations

import argparse

import pytest

from tvm_cocopie.errors import ModelError
from tvm_cocopie.hexagon import cli


def _parser():
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers(dest="command"))
    return p


@pytest.mark.needs_toolchain
def test_unreadable_model_is_a_model_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    args = _parser().parse_args(["hexagon", "run", str(bad)])
    with pytest.raises(ModelError, match="not a valid ONNX file"):
        args.func(args)


@pytest.mark.needs_toolchain
def test_image_size_of_a_fixed_size_model_is_refused(tmp_path):
    from tvm_cocopie import models

    path = tmp_path / "m.onnx"
    models.save(models.build("mobilenetv2", image_size=32), path)
    args = _parser().parse_args(["hexagon", "run", str(path), "--image-size", "16"])
    with pytest.raises(ModelError, match="fixed at 32x32"):
        args.func(args)


@pytest.mark.needs_toolchain
def test_image_size_sets_symbolic_height_and_width(tmp_path, capsys):
    import json

    import onnx
    from test_hexagon_models import _pool_resize_cnn

    model = _pool_resize_cnn()
    for vi in (model.graph.input[0], model.graph.output[0]):
        for k in (2, 3):
            vi.type.tensor_type.shape.dim[k].dim_param = "HW"[k - 2]
    path = tmp_path / "sym.onnx"
    onnx.save(model, path)
    out = tmp_path / "r.json"
    args = _parser().parse_args(["hexagon", "run", str(path), "--image-size", "8x12",
                                 "--calibration", "2", "--json", str(out)])
    assert args.func(args) == 0
    result = json.loads(out.read_text())
    assert result["exact"] and result["input"] == [1, 8, 12, 3]
    with pytest.raises(SystemExit):
        _parser().parse_args(["hexagon", "run", str(path), "--image-size", "8x"])
    capsys.readouterr()

"""The blocked layout through whole graphs of the zoo's newer families: channel splits
and concats (YOLO's C2f), nearest upsampling (its neck), channel shuffles (ShuffleNetV2),
a BiLSTM's stacked outputs (a CRNN), and the bisection that keeps one conv in NCHW
when TVM's ConvertLayout fails on a graph, instead of dropping the layout everywhere."""

from __future__ import annotations

import logging

import pytest
import tvm
from tvm import relax

from tvm_cocopie.frontend.importer import from_onnx
from tvm_cocopie.models.workloads import get_workload
from tvm_cocopie.pipeline import run_until
from tvm_cocopie.relay_passes.layout import layout_transforms, shape_ops
from tvm_cocopie.target import host_target


def _layout_stage(name: str, size: int = 64) -> tvm.IRModule:
    wl = get_workload(name, image_size=size)
    return run_until(from_onnx(wl.model, shapes=wl.shapes), host_target(2), "layout")


def _convs(mod: tvm.IRModule) -> tuple[int, int]:
    """(blocked convs, all convs) in ``main``."""
    blocked = total = 0
    for binding in mod["main"].body.blocks[0].bindings:
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                value.op.name == "relax.nn.conv2d":
            total += 1
            blocked += str(value.attrs.data_layout).endswith("c")
    return blocked, total


# (model, most layout transforms): the graph's input and outputs (YOLO's three head
# outputs; its one-channel DFL conv stays NCHW), a ShuffleNet's 16 shuffles (each one permuting
# kernel) and its stage changes of channel block (2c to 4c to 8c: out and in again)
@pytest.mark.parametrize("name,most", [("yolo_detector", 4), ("crnn_large_vocab", 2),
                                       ("shufflenetv2", 24), ("mobilenetv3_small", 2)])
def test_blocked_layout_runs_through_the_graph(name, most):
    mod = _layout_stage(name)
    blocked, total = _convs(mod)
    assert blocked >= total - 1, f"{blocked} of {total} convs blocked"  # an RGB/gray stem may not
    assert 0 < layout_transforms(mod) <= most


@pytest.mark.parametrize("name,most", [("ppocr_det", 6), ("ppocr_rec", 4)])
def test_real_paddle_exports_stay_blocked(name, most):
    """PP-OCR's hard-swish scales and offsets are ``(1,)``-shaped constants: brought to a
    scalar, the broadcast no longer returns each feature map to NCHW (64 transforms each
    before)."""
    wl = get_workload(name)
    mod = run_until(from_onnx(wl.model, shapes=wl.shapes), host_target(2), "layout")
    assert layout_transforms(mod) <= most


def test_a_failing_conversion_keeps_one_conv_nchw_not_the_whole_graph(monkeypatch, caplog):
    """With the split rewrite off, TVM's ConvertLayout fails on YOLO's C2f split: the
    bisection finds the conv that triggers it and converts all the others."""
    monkeypatch.setattr(shape_ops, "REWRITES", {"relax.stack": shape_ops.REWRITES["relax.stack"]})
    with caplog.at_level(logging.WARNING):
        mod = _layout_stage("yolo_detector")
    blocked, total = _convs(mod)
    assert "stays NCHW" in caplog.text
    assert total - 12 <= blocked < total

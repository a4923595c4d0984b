"""Transposed convolutions as a convolution plus a pixel shuffle
(``relay_passes/layout/subpixel.py``): every kernel, stride, padding, output padding and
group count against ONNX Runtime, on the blocked conv kernels."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import assert_close, make_model, ort_run
from onnx import TensorProto, helper, numpy_helper

import tvm_cocopie
from tvm_cocopie.relay_passes.layout.subpixel import phase_taps

rng = np.random.default_rng(11)


def _deconv_model(c=16, o=8, k=(4, 4), s=(2, 2), pads=(1, 1, 1, 1), out_pad=None, g=1,
                  size=(9, 10), bias=True):
    """ConvTranspose (+ bias) -> Relu."""
    w = (rng.standard_normal((c, o // g, *k)) / np.sqrt(c * np.prod(k))).astype("f4")
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal((o,)).astype("f4"), "b"))
        inputs.append("b")
    attrs = {"kernel_shape": list(k), "strides": list(s), "pads": list(pads), "group": g}
    if out_pad:
        attrs["output_padding"] = list(out_pad)
    nodes = [helper.make_node("ConvTranspose", inputs, ["c"], **attrs),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, c, *size])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", "C", *(f"S{i}" for i in range(len(size)))])], inits)
    return model, {"x": rng.standard_normal((1, c, *size)).astype("f4")}


CASES = {
    "4x4 stride 2 pad 1 (DCGAN, CenterNet)": {},
    "3x3 stride 2 pad 1 output padding 1": {"k": (3, 3), "out_pad": (1, 1)},
    "2x2 stride 2 (U-Net)": {"k": (2, 2), "pads": (0, 0, 0, 0)},
    "5x5 stride 2 pad 2 output padding 1": {"k": (5, 5), "pads": (2, 2, 2, 2), "out_pad": (1, 1)},
    "3x3 stride 1 pad 1": {"k": (3, 3), "s": (1, 1)},
    "8x8 stride 4 pad 2": {"k": (8, 8), "s": (4, 4), "pads": (2, 2, 2, 2)},
    "3x3 stride 3 asymmetric pads": {"k": (3, 3), "s": (3, 3), "pads": (0, 1, 2, 0)},
    "1x1 stride 2 (phases without taps)": {"k": (1, 1), "pads": (0, 0, 0, 0)},
    "stride (2, 1), kernel (4, 3)": {"k": (4, 3), "s": (2, 1), "pads": (1, 1, 1, 1)},
    "grouped": {"c": 16, "o": 8, "g": 4},
    "depthwise": {"c": 16, "o": 16, "g": 16},
    "pads larger than the kernel reach": {"k": (3, 3), "pads": (3, 2, 3, 2)},
    "no bias, three channels out": {"o": 3, "bias": False},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_transpose_2d_matches_onnxruntime(case):
    model, feeds = _deconv_model(**CASES[case])
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(**feeds), ort_run(model, feeds))
    stats = compiled.executable.stats()
    assert "conv2d_transpose" not in stats  # not TVM's zero-dilated lowering
    assert any(k in stats for k in ("conv2d_nchwc", "conv2d_gspc"))  # blocked or grouped


@pytest.mark.parametrize("k,s,pads,out_pad", [(4, 2, (1, 1), None), (3, 2, (1, 1), 1),
                                              (7, 3, (2, 3), None)])
def test_conv_transpose_1d_matches_onnxruntime(k, s, pads, out_pad):
    """Vocoders and TTS decoders upsample along time: a 1-D conv, then the 2-D kernels."""
    model, feeds = _deconv_model(c=12, o=8, k=(k,), s=(s,), pads=pads,
                                 out_pad=(out_pad,) if out_pad else None, size=(37,))
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(**feeds), ort_run(model, feeds))
    assert "conv2d_nchwc" in compiled.executable.stats()


@pytest.mark.parametrize("k,s,pads", [((2, 2, 2), (2, 2, 2), (0,) * 6),
                                      ((2, 4, 4), (2, 2, 2), (0, 1, 1, 0, 1, 1)),
                                      ((3, 3, 3), (1, 2, 2), (1, 1, 1, 1, 1, 1))])
def test_conv_transpose_3d_matches_onnxruntime(k, s, pads):
    """3-D U-Net decoders: a 3-D conv, which the frames rewrite then runs as 2-D ones."""
    model, feeds = _deconv_model(c=8, o=8, k=k, s=s, pads=pads, size=(4, 6, 5))
    compiled = tvm_cocopie.compile(model)
    assert_close(compiled(**feeds), ort_run(model, feeds))
    stats = compiled.executable.stats()
    assert "conv3d_transpose" not in stats and "conv2d_nchwc" in stats


@pytest.mark.parametrize("k,s,pad", [(4, 2, 1), (3, 2, 1), (5, 3, 0), (2, 2, 0), (3, 1, 2)])
def test_phase_taps_cover_every_kernel_tap_once(k, s, pad):
    """Each kernel tap belongs to exactly one phase, and a phase's taps are s apart."""
    _, taps = phase_taps(k, s, pad)
    used = sorted(t for phase in taps for _, t in phase)
    assert used == list(range(k))
    for phase in taps:
        assert all(b - a == s for (_, a), (_, b) in itertools.pairwise(phase))

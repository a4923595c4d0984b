"""Single operators against ONNX Runtime: the sweep that finds kernels far off its speed.

A model outside the zoo is only as fast as its slowest operator: one kernel left to a
generic lowering (a transposed conv dilating its input with zeros, a 3-D conv, an
``Einsum``, a matmul with broadcast batch dims) ran 5-270x ONNX Runtime's time and
decided the model's. Each case here is one ONNX operator at a shape real models use,
with deterministic inputs; :func:`measure_case` compiles it with the cocopie pipeline,
checks it against ONNX Runtime, times both in blocks (:func:`~.timing.interleaved_times`)
and times the cocopie kernels alone inside the VM (``kernels_ms``: a single operator's
call also pays for copying its input and output, which a model pays once), so
``kernels_over_ort`` is the figure to watch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..api import compile_model
from ..errors import CocopieError, last_line
from . import timing as bm
from .runtime_stats import kernel_times

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "op", [helper.make_tensor_value_info(n, t, s)
                                            for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


class CaseInputs:
    """Deterministic arrays for one case (weights scaled to keep outputs O(1))."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def x(self, *shape) -> np.ndarray:
        return self.rng.standard_normal(shape).astype(np.float32)

    def weight(self, *shape) -> np.ndarray:
        return (self.rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _single(op: str, shape, consts=(), opset: int = 17, **attrs):
    """A case of one operator on input ``x`` of ``shape`` with constant operands."""
    def build(data: CaseInputs):
        inits = [numpy_helper.from_array(np.asarray(v(data) if callable(v) else v), name)
                 for name, v in consts]
        node = helper.make_node(op, ["x", *(name for name, _ in consts)], ["y"], **attrs)
        return (_model([node], [("x", F, list(shape))], [("y", F)], inits, opset),
                {"x": data.x(*shape)})
    return build


def _resize(shape, mode: str, scales=None, sizes=None, **attrs):
    def build(data: CaseInputs):
        if scales is not None:
            inputs, inits = ["x", "", "s"], [numpy_helper.from_array(
                np.asarray(scales, np.float32), "s")]
        else:
            inputs, inits = ["x", "", "", "z"], [numpy_helper.from_array(
                np.asarray(sizes, np.int64), "z")]
        node = helper.make_node("Resize", inputs, ["y"], mode=mode, **attrs)
        return _model([node], [("x", F, list(shape))], [("y", F)], inits), {"x": data.x(*shape)}
    return build


def _binary(op: str, ashape, bshape, **attrs):
    def build(data: CaseInputs):
        node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
        return (_model([node], [("a", F, list(ashape)), ("b", F, list(bshape))], [("y", F)]),
                {"a": data.x(*ashape), "b": data.x(*bshape)})
    return build


def _instance_norm(data: CaseInputs):
    c = 64
    inits = [numpy_helper.from_array(np.ones(c, np.float32), "g"),
             numpy_helper.from_array(np.zeros(c, np.float32), "b")]
    node = helper.make_node("InstanceNormalization", ["x", "g", "b"], ["y"])
    return (_model([node], [("x", F, [1, c, 128, 128])], [("y", F)], inits),
            {"x": data.x(1, c, 128, 128)})


def _w(*shape):
    return lambda data: data.weight(*shape)


#: name -> builder ``(inputs) -> (model, feeds)``; the shapes are real models' (a GAN's or
#: CenterNet's deconvs, a U-Net's, video and volumetric convs, attention, LM heads...)
CASES: dict[str, Callable] = {
    "conv_transpose_4x4_s2": _single("ConvTranspose", (1, 128, 32, 32), [("w", _w(128, 64, 4, 4))],
                                     kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]),
    "conv_transpose_3x3_s2_outpad": _single(
        "ConvTranspose", (1, 128, 32, 32), [("w", _w(128, 64, 3, 3))], kernel_shape=[3, 3],
        strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    "conv_transpose_2x2_s2": _single("ConvTranspose", (1, 128, 32, 32), [("w", _w(128, 64, 2, 2))],
                                     kernel_shape=[2, 2], strides=[2, 2]),
    "conv_transpose_1d_4_s2": _single("ConvTranspose", (1, 256, 500), [("w", _w(256, 128, 4))],
                                      kernel_shape=[4], strides=[2], pads=[1, 1]),
    "conv_transpose_3d_2_s2": _single("ConvTranspose", (1, 64, 8, 28, 28),
                                      [("w", _w(64, 32, 2, 2, 2))], kernel_shape=[2, 2, 2],
                                      strides=[2, 2, 2]),
    "conv_transpose_depthwise": _single("ConvTranspose", (1, 64, 32, 32), [("w", _w(64, 1, 4, 4))],
                                        kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1],
                                        group=64),
    "conv3d_3x3x3": _single("Conv", (1, 32, 8, 56, 56), [("w", _w(64, 32, 3, 3, 3))],
                            kernel_shape=[3, 3, 3], pads=[1] * 6),
    "conv_dilated_3x3": _single("Conv", (1, 256, 64, 64), [("w", _w(256, 256, 3, 3))],
                                kernel_shape=[3, 3], pads=[4] * 4, dilations=[4, 4]),
    "conv_1x7": _single("Conv", (1, 192, 17, 17), [("w", _w(192, 192, 1, 7))],
                        kernel_shape=[1, 7], pads=[0, 3, 0, 3]),
    "conv_odd_channels": _single("Conv", (1, 37, 56, 56), [("w", _w(53, 37, 3, 3))],
                                 kernel_shape=[3, 3], pads=[1] * 4),
    "conv_1x1_large_input": _single("Conv", (1, 1024, 64, 64), [("w", _w(256, 1024, 1, 1))],
                                    kernel_shape=[1, 1]),
    "conv_groups_3": _single("Conv", (1, 96, 56, 56), [("w", _w(96, 32, 3, 3))],
                             kernel_shape=[3, 3], pads=[1] * 4, group=3),
    "maxpool3d": _single("MaxPool", (1, 64, 8, 56, 56), kernel_shape=[3, 3, 3],
                         strides=[2, 2, 2], pads=[1] * 6),
    "maxpool_ceil": _single("MaxPool", (1, 96, 55, 55), kernel_shape=[3, 3], strides=[2, 2],
                            ceil_mode=1),
    "resize_bilinear_x2": _resize((1, 64, 64, 64), "linear", scales=[1, 1, 2, 2]),
    "resize_bilinear_down": _resize((1, 3, 480, 640), "linear", sizes=[1, 3, 224, 224]),
    "resize_cubic_x2": _resize((1, 32, 64, 64), "cubic", scales=[1, 1, 2, 2]),
    "instance_norm": _instance_norm,
    "softmax_channels": _single("Softmax", (1, 1000, 64, 64), axis=1),
    "log_softmax_vocab": _single("LogSoftmax", (64, 32000), axis=-1),
    "reduce_mean_odd_row": _single("ReduceMean", (1, 256, 3199), axes=[2], keepdims=1),
    "einsum_attention": _binary("Einsum", (1, 8, 256, 64), (1, 8, 256, 64),
                                equation="bhqd,bhkd->bhqk"),
    "matmul_broadcast_batch": _binary("MatMul", (4, 12, 128, 64), (1, 12, 64, 128)),
    "matmul_4d_attention": _binary("MatMul", (1, 12, 197, 64), (1, 12, 64, 197)),
    "transpose_nchw_nhwc": _single("Transpose", (1, 256, 128, 128), perm=[0, 2, 3, 1]),
    "depth_to_space": _single("DepthToSpace", (1, 256, 64, 64), blocksize=2, mode="CRD"),
    "pad_reflect": _single("Pad", (1, 64, 128, 128),
                           [("p", np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64))],
                           mode="reflect"),
    "mish": _single("Mish", (1, 64, 128, 128), opset=18),
    "gemm_transposed_a": _single("Gemm", (512, 128), [("w", _w(512, 256))], transA=1),
}

#: a handful for ``--quick`` (one per family of fixes)
QUICK = ("conv_transpose_4x4_s2", "conv3d_3x3x3", "einsum_attention",
         "matmul_broadcast_batch", "instance_norm", "log_softmax_vocab")


def measure_case(name: str, target, threads: int, repeat: int = 5,
                 max_seconds: float | None = 20.0, seed: int = 0) -> dict:
    """One case's record: ``ort_ms``, ``cocopie_ms`` (whole calls, medians of blocks),
    ``kernels_ms`` (the cocopie kernels inside the VM), the ratios, ``max_abs_err`` against
    ONNX Runtime, the slowest kernels; ``error`` instead when the build or run fails."""
    if name not in CASES:
        raise CocopieError(f"unknown operator case {name!r}; known: {', '.join(CASES)}")
    model, feeds = CASES[name](CaseInputs(seed))
    rec: dict = {"case": name}
    try:
        session = bm.ort_session(model, threads, spinning=True)
        ref = session.run(None, feeds)
        start = time.perf_counter()
        compiled = compile_model(model, target)
        rec["compile_s"] = round(time.perf_counter() - start, 2)
        got = bm.output_list(compiled(**feeds))
        rec["max_abs_err"] = bm.max_abs_error(got, ref)
        rec["max_rel_err"] = bm.max_rel_error(got, ref)
        run_ort, run_ours = bm.ort_runner(session, feeds), (lambda: compiled(**feeds))
        number = bm.calls_for(run_ours)
        times = bm.interleaved_times({"ort": bm.repeated(run_ort, number),
                                      "cocopie": bm.repeated(run_ours, number)},
                                     repeat=repeat, max_seconds=max_seconds, block=4)
        rec["ort_ms"] = bm.median(times["ort"]) / number
        rec["cocopie_ms"] = bm.median(times["cocopie"]) / number
        kernels = {k: v for k, v in kernel_times(compiled, feeds, rounds=max(3, repeat)).items()
                   if not k.startswith("vm.")}
        rec["kernels_ms"] = 1e3 * sum(kernels.values())
        rec["slowest_kernels"] = {k: round(1e3 * v, 4) for k, v in
                                  sorted(kernels.items(), key=lambda kv: -kv[1])[:3]}
        rec["cocopie_over_ort"] = rec["cocopie_ms"] / rec["ort_ms"]
        rec["kernels_over_ort"] = rec["kernels_ms"] / rec["ort_ms"]
    except Exception as err:  # noqa: BLE001 - a failing case is recorded, the sweep goes on
        rec["error"] = last_line(err) or type(err).__name__
    return rec


def summarize(records: list[dict]) -> dict:
    """``geomean_kernels_over_ort``, ``worst_kernels_over_ort`` (and its case), the cases
    whose kernels take over twice ONNX Runtime's time, failures and the largest error."""
    ok = [r for r in records if "error" not in r]
    ratios = [r["kernels_over_ort"] for r in ok]
    worst = max(ok, key=lambda r: r["kernels_over_ort"], default=None)
    return {
        "cases": len(records),
        "failed": sorted(r["case"] for r in records if "error" in r),
        "geomean_kernels_over_ort": bm.geomean(ratios) if ratios else None,
        "geomean_cocopie_over_ort": bm.geomean([r["cocopie_over_ort"] for r in ok]) if ok else None,
        "worst_kernels_over_ort": worst["kernels_over_ort"] if worst else None,
        "worst_case": worst["case"] if worst else None,
        "over_2x_ort": sorted(r["case"] for r in ok if r["kernels_over_ort"] > 2.0),
        "max_rel_err": max((r["max_rel_err"] for r in ok), default=None),
    }


COLUMNS = [("case", "case", "{}"), ("ort_ms", "ORT ms", "{:.3f}"),
           ("cocopie_ms", "cocopie ms", "{:.3f}"), ("kernels_ms", "kernels ms", "{:.3f}"),
           ("kernels_over_ort", "kernels/ORT", "{:.2f}"),
           ("cocopie_over_ort", "call/ORT", "{:.2f}"), ("max_rel_err", "rel err", "{:.1e}")]

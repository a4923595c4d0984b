#!/usr/bin/env python
"""Kernel throughput: tvm-cocopie's conv and matmul kernels as a fraction of FP32 peak.

For each of ResNet-50's distinct 3x3 and 1x1 convolutions (batch 1, 224x224 input;
the stem 7x7 too) and two matmuls, we time, interleaved in one process:

* an FMA-bound peak kernel (a TIR kernel: per thread, 12 independent vector FMA
  chains held in registers; 2 flops x lanes x 12 per iteration), which measures
  what this machine gives right now (``fma_peak_gflops``);
* the op compiled by the cocopie pipeline as it runs inside a network: the conv in
  the blocked NCHW[x]c layout with its fused bias + ReLU epilogue, the matmul with
  its weights packed at compile time (``cocopie_gflops``);
* ONNX Runtime on an ONNX model of the same op doing the same work (Conv with bias
  and a Relu, which ORT fuses into its conv as we fuse it into ours; or MatMul with a
  constant B), same thread count, default optimizations (``ort_gflops``).

Both sides take their input and give their output in the layout they run in: ours
NCHW[x]c, as between two convs of a network (the transforms at a network's edges are
outside the kernel); ORT's single-node model NCHW, which its optimizer may reorder to
its own blocked layout inside the measured run, so its figure includes what a
one-op graph costs it there.

For the 3x3 stride-1 convs, two more builds of the same graph are timed alongside:
the direct conv (``PipelineOptions(winograd="off")``) and Winograd F(4,3) (``"4"``), as
``direct_ms`` and ``winograd_ms`` (``winograd_gflops`` counts the direct conv's
FLOPs: an effective rate), with ``winograd_over_direct_speed``; the ``cocopie``
column is the pipeline's own per-layer choice (``winograd_chosen``).

Each record gives GFLOP/s, the fraction of the peak measured alongside it, and the
ratio to ONNX Runtime. The summary gives, per class, the geometric mean of the
per-layer peak fractions: ``conv3x3_peak_fraction`` (3x3 convs with C >= 64),
``conv1x1_peak_fraction``, ``matmul_peak_fraction``, and ``fma_peak_gflops``.
Matmul shapes read M x N x K (128x1536x384: 128 tokens, 384 -> 1536 features).
``wide_gemm_*``: few rows against a large B (classifier heads, FFNs of short sequences).

Detector shapes (a YOLO-style network at 416 px): conv + bias + SiLU, ONNX Runtime's
model Conv, Sigmoid and Mul (``detector_conv_speed_over_ort``, its minimum), and max
pools (SPPF's 5x5 stride 1, 2x2 and 3x3 stride 2), ours in the blocked layout, ORT's
MaxPool node NCHW (``maxpool_speed_over_ort``; their "flops" are comparisons).

    python scripts/bench_kernels.py --quick --json bench_kernels.json
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from tvm_cocopie.threads import configure_thread_pool

#: (name, C, H=W, O, kernel, stride) — the distinct convs of ResNet-50 v1.5, batch 1
RESNET50_CONVS = [
    ("stem7x7", 3, 224, 64, 7, 2),
    ("l1.3x3", 64, 56, 64, 3, 1),
    ("l2.3x3s2", 128, 56, 128, 3, 2),
    ("l2.3x3", 128, 28, 128, 3, 1),
    ("l3.3x3s2", 256, 28, 256, 3, 2),
    ("l3.3x3", 256, 14, 256, 3, 1),
    ("l4.3x3s2", 512, 14, 512, 3, 2),
    ("l4.3x3", 512, 7, 512, 3, 1),
    ("l1.1x1a", 64, 56, 64, 1, 1),
    ("l1.1x1b", 64, 56, 256, 1, 1),
    ("l1.1x1c", 256, 56, 64, 1, 1),
    ("l2.1x1a", 256, 56, 128, 1, 1),
    ("l2.down", 256, 56, 512, 1, 2),
    ("l2.1x1b", 128, 28, 512, 1, 1),
    ("l2.1x1c", 512, 28, 128, 1, 1),
    ("l3.1x1a", 512, 28, 256, 1, 1),
    ("l3.down", 512, 28, 1024, 1, 2),
    ("l3.1x1b", 256, 14, 1024, 1, 1),
    ("l3.1x1c", 1024, 14, 256, 1, 1),
    ("l4.1x1a", 1024, 14, 512, 1, 1),
    ("l4.down", 1024, 14, 2048, 1, 2),
    ("l4.1x1b", 512, 7, 2048, 1, 1),
    ("l4.1x1c", 2048, 7, 512, 1, 1),
]
#: (name, C, H=W, O, kernel, stride, groups): not in the ResNet-50 summaries; the grouped
#: case is the one MetaSchedule reached 0.99 ms on (64 trials) where ORT runs 0.53 ms
OTHER_CONVS = [
    ("grouped.g8", 64, 56, 64, 3, 1, 8),
    ("depthwise", 144, 56, 144, 3, 1, 144),
]
QUICK_CONVS = ["l1.3x3", "l2.3x3s2", "l2.3x3", "l3.3x3", "l4.3x3", "l1.1x1b", "l1.1x1c",
               "l3.1x1c", "l4.down", "l4.1x1b"]
#: (name, M, N, K)
MATMULS = [("mm512", 512, 512, 512), ("mm128x1536x384", 128, 1536, 384)]
#: (name, M, N, K) wide GEMMs: few rows (tokens, time steps) against a large weight, as in
#: classifier and large-vocabulary recognizer heads and transformer FFNs
WIDE_MATMULS = [("head26x6625x512", 26, 6625, 512), ("head64x16384x512", 64, 16384, 512),
                ("head1x1000x1280", 1, 1000, 1280), ("ffn16x4096x1024", 16, 4096, 1024),
                ("head40x8192x2048", 40, 8192, 2048), ("ffn64x1024x4096", 64, 1024, 4096)]
QUICK_WIDE = ["head26x6625x512", "head64x16384x512", "ffn64x1024x4096"]
#: (name, C, H=W, O, kernel, stride): conv + bias + SiLU on a YOLO-style detector at a
#: 416x416 input (its stride-2 downsampling 3x3s, CSP 1x1s and 3x3s, the wide head 1x1)
DETECTOR_CONVS = [("det.3x3s2.208", 32, 208, 64, 3, 2), ("det.3x3s2.104", 64, 104, 128, 3, 2),
                  ("det.3x3s2.52", 128, 52, 256, 3, 2), ("det.3x3.104", 32, 104, 32, 3, 1),
                  ("det.3x3.52", 64, 52, 64, 3, 1), ("det.1x1.104", 128, 104, 64, 1, 1),
                  ("det.1x1.52", 256, 52, 128, 1, 1), ("det.1x1w.26", 256, 26, 512, 1, 1)]
QUICK_DETECTOR = ["det.3x3s2.208", "det.1x1.52"]
#: (name, C, H=W, kernel, stride, pad): max pools of detectors and classifiers (SPPF's
#: 5x5 stride 1 at 416 px, a tiny-YOLO 2x2 stride 2, the ResNet stem's 3x3 stride 2)
MAX_POOLS = [("pool.sppf5.13", 256, 13, 5, 1, 2), ("pool.sppf5.26", 128, 26, 5, 1, 2),
             ("pool.2x2s2.208", 32, 208, 2, 2, 0), ("pool.3x3s2.112", 64, 112, 3, 2, 1)]
QUICK_POOLS = ["pool.sppf5.13", "pool.3x3s2.112"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="10 convs, 2 detector convs, 2 pools, 5 matmuls (a few minutes)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per op")
    p.add_argument("--only", help="comma-separated op names")
    p.add_argument("--json", metavar="PATH", help="write results here (atomically)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


# ------------------------------------------------------------------ peak kernel


def build_peak(target, threads: int, lanes: int, chains: int = 12):
    """A TIR kernel of ``threads x chains`` independent vector FMA chains (registers only)."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def peak(buf: T.handle, iters: T.int32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(buf, (threads, chains, lanes), "float32")
        for t in T.parallel(threads):
            acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
            for j in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[j, v] = A[t, j, v]
            for _ in range(iters):
                for j in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[j, v] = acc[j, v] * T.float32(0.999) + T.float32(0.001)
            for j in T.unroll(chains):
                for v in T.vectorized(lanes):
                    A[t, j, v] = acc[j, v]

    lib = tvm.compile(tvm.IRModule({"main": peak}), target=target)
    return lib, 2 * threads * chains * lanes, (threads, chains, lanes)


class PeakMeter:
    """Measures the FMA peak (GFLOP/s) in ~20 ms bursts."""

    def __init__(self, target, threads, lanes):
        import numpy as np
        import tvm

        self.lib, self.flops_per_iter, shape = build_peak(target, threads, lanes)
        self.buf = tvm.runtime.tensor(np.ones(shape, "float32"))
        self.iters = 1 << 16
        self.timer = self.lib.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=1)
        while self._seconds() < 0.01:
            self.iters *= 2

    def _seconds(self) -> float:
        return self.timer(self.buf, self.iters).mean

    def gflops(self) -> float:
        return self.flops_per_iter * self.iters / self._seconds() / 1e9


# ---------------------------------------------------------------- contenders


def conv_contenders(spec, target, threads, info, act: str = "relu"):
    """``(cocopie timer, ort timer, flops, max abs err)`` for one conv + bias + ``act``
    (``"relu"`` or ``"silu"``)."""
    import numpy as np
    from tvm import relax
    from tvm.relax import op as R

    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.topi.cpu.tiling import channel_block

    _, c, hw, o, k, s, *rest = spec
    groups = rest[0] if rest else 1
    pad = k // 2
    oh = (hw + 2 * pad - k) // s + 1
    flops = 2 * c // groups * o * k * k * oh * oh
    rng = np.random.default_rng(c * o + k)
    w = (rng.standard_normal((o, c // groups, k, k)) / np.sqrt(c // groups * k * k)).astype("float32")
    b = rng.standard_normal(o).astype("float32")
    x = rng.standard_normal((1, c, hw, hw)).astype("float32")
    ib, ob = channel_block(c, info), channel_block(o, info)
    xb = np.ascontiguousarray(x.reshape(1, c // ib, ib, hw, hw).transpose(0, 1, 3, 4, 2))

    var = relax.Var("x", relax.TensorType([1, c // ib, hw, hw, ib], "float32"))
    bias = relax.const(np.ascontiguousarray(b.reshape(1, o // ob, ob, 1, 1).transpose(0, 1, 3, 4, 2)))
    bb = relax.BlockBuilder()
    with bb.function("main", [var]):
        with bb.dataflow():
            y = bb.emit(R.nn.conv2d(var, relax.const(w), strides=[s, s], padding=[pad] * 4,
                                    groups=groups, data_layout=f"NCHW{ib}c", kernel_layout="OIHW",
                                    out_layout=f"NCHW{ob}c"))
            z = R.add(y, bias)
            out = bb.emit_output(R.nn.relu(z) if act == "relu" else
                                 R.multiply(z, R.sigmoid(z)))
        bb.emit_func_output(out)
    tvm_timer, ours = _tvm_timer(bb.get(), target, [xb])

    onnx_model = _conv_relu_model(w, b, k, s, pad, hw, groups, act)
    sess = bm.ort_session(onnx_model, threads)
    ref = sess.run(None, {"x": x})[0]
    ours_nchw = ours.transpose(0, 1, 4, 2, 3).reshape(ref.shape)
    err = float(np.max(np.abs(ours_nchw - ref)))
    extra = {}
    if k == 3 and s == 1 and groups == 1 and act == "relu":  # direct and Winograd F(4,3)
        for key, mode in (("direct", "off"), ("winograd", "4")):
            timer, out = _tvm_timer(bb.get(), target, [xb], winograd=mode)
            out = out.transpose(0, 1, 4, 2, 3).reshape(ref.shape)
            extra[key] = (timer, float(np.max(np.abs(out - ref))))
    return tvm_timer, _ort_timer(sess, {"x": x}), flops, err, extra


def pool_contenders(spec, target, threads, info):
    """``(cocopie timer, ort timer, comparisons, max abs err)`` for one max pool, ours in
    the blocked layout (as between two convs of a network), ORT's MaxPool node NCHW."""
    import numpy as np
    from onnx import TensorProto, helper
    from tvm import relax
    from tvm.relax import op as R

    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.topi.cpu.tiling import channel_block

    _, c, hw, k, s, pad = spec
    oh = (hw + 2 * pad - k) // s + 1
    x = np.random.default_rng(c + hw).standard_normal((1, c, hw, hw)).astype("float32")
    ib = channel_block(c, info)
    xb = np.ascontiguousarray(x.reshape(1, c // ib, ib, hw, hw).transpose(0, 1, 3, 4, 2))
    var = relax.Var("x", relax.TensorType([1, c // ib, hw, hw, ib], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [var]):
        with bb.dataflow():
            out = bb.emit_output(R.nn.max_pool2d(var, [k, k], [s, s], [pad] * 4,
                                                 layout=f"NCHW{ib}c"))
        bb.emit_func_output(out)
    tvm_timer, ours = _tvm_timer(bb.get(), target, [xb])
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s],
                          pads=[pad] * 4)], "maxpool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, oh, oh])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    sess = bm.ort_session(model, threads)
    ref = sess.run(None, {"x": x})[0]
    err = float(np.max(np.abs(ours.transpose(0, 1, 4, 2, 3).reshape(ref.shape) - ref)))
    return tvm_timer, _ort_timer(sess, {"x": x}), c * oh * oh * k * k, err


def matmul_contenders(spec, target, threads):
    import numpy as np
    from tvm import relax
    from tvm.relax import op as R

    from tvm_cocopie.bench import timing as bm

    _, m, n, k = spec
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype("float32")
    bmat = (rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    var = relax.Var("a", relax.TensorType([m, k], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [var]):
        with bb.dataflow():
            out = bb.emit_output(R.matmul(var, relax.const(bmat)))
        bb.emit_func_output(out)
    tvm_timer, ours = _tvm_timer(bb.get(), target, [a])
    sess = bm.ort_session(_single_node_matmul(bmat, m), threads)
    ref = sess.run(None, {"a": a})[0]
    return tvm_timer, _ort_timer(sess, {"a": a}), 2 * m * n * k, float(np.max(np.abs(ours - ref)))


def _tvm_timer(mod, target, args, winograd="auto"):
    import tvm
    from tvm import relax

    from tvm_cocopie.pipeline import cocopie_pipeline

    ex = tvm.compile(mod, target=target, relax_pipeline=cocopie_pipeline(winograd=winograd))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    inputs = [tvm.runtime.tensor(a) for a in args]
    out = vm["main"](*inputs).numpy()
    once = vm.time_evaluator("main", tvm.cpu(), number=1, repeat=1)(*inputs).mean
    number = max(1, int(0.02 / max(once, 1e-6)))
    ev = vm.time_evaluator("main", tvm.cpu(), number=number, repeat=1)
    return (lambda: ev(*inputs).mean), out


def _winograd_chosen(spec, info) -> bool:
    """Whether the pipeline's own choice (``PipelineOptions.winograd``: auto) is Winograd."""
    from tvm_cocopie.topi.cpu import winograd as wg
    from tvm_cocopie.topi.cpu.conv2d_nchwc import ConvGeometry, ConvTile
    from tvm_cocopie.topi.cpu.tiling import channel_block

    _, c, hw, o, k, s, *rest = spec
    geo = ConvGeometry(1, c, hw, hw, o, k, k, (s, s), (k // 2,) * 4, (1, 1), rest[0] if rest else 1)
    tile = ConvTile(channel_block(c, info), channel_block(o, info), 1, 1, 1)
    return wg.choose(geo, tile, info, True) is not None


def _ort_timer(sess, feeds):
    sess.run(None, feeds)
    start = time.perf_counter()
    sess.run(None, feeds)
    number = max(1, int(0.02 / max(time.perf_counter() - start, 1e-6)))

    def timer():
        t0 = time.perf_counter()
        for _ in range(number):
            sess.run(None, feeds)
        return (time.perf_counter() - t0) / number

    return timer


def _conv_relu_model(w, b, k, s, pad, hw, groups=1, act="relu"):
    """Conv (with bias) + Relu (or SiLU, Sigmoid and Mul): the work of our conv kernel
    with its fused epilogue."""
    from onnx import TensorProto, helper, numpy_helper

    o = w.shape[0]
    oh = (hw + 2 * pad - k) // s + 1
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k],
                            strides=[s, s], pads=[pad] * 4, group=groups)
    nodes = [conv, helper.make_node("Relu", ["c"], ["y"])] if act == "relu" else [
        conv, helper.make_node("Sigmoid", ["c"], ["g"]), helper.make_node("Mul", ["c", "g"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[1] * groups, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, oh, oh])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _single_node_matmul(bmat, m):
    from onnx import TensorProto, helper, numpy_helper

    k, n = bmat.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(bmat, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


# ---------------------------------------------------------------------- main


def measure(peak: PeakMeter, cocopie, ort, flops: int, rounds: int, extra=None) -> dict:
    """Interleave peak / cocopie / ORT (and the ``extra`` ``{name: (timer, err)}`` builds)
    for ``rounds``; medians and fractions."""
    from tvm_cocopie.bench.timing import median

    extra = extra or {}
    peaks, ours, theirs = [], [], []
    others = {name: [] for name in extra}
    for _ in range(rounds):
        peaks.append(peak.gflops())
        ours.append(cocopie())
        for name, (timer, _) in extra.items():
            others[name].append(timer())
        theirs.append(ort())
    peaks.append(peak.gflops())
    local_peak = median(peaks)
    cocopie_s, ort_s = median(ours), median(theirs)
    more = {}
    for name, times in others.items():
        sec = median(times)
        more[f"{name}_ms"] = sec * 1e3
        more[f"{name}_gflops"] = flops / sec / 1e9
        more[f"{name}_max_abs_err"] = extra[name][1]
    if "winograd" in others and "direct" in others:
        more["winograd_over_direct_speed"] = more["direct_ms"] / more["winograd_ms"]
    return {**more, 
        "flops": flops,
        "peak_gflops": local_peak,
        "cocopie_ms": cocopie_s * 1e3,
        "cocopie_gflops": flops / cocopie_s / 1e9,
        "peak_fraction": flops / cocopie_s / 1e9 / local_peak,
        "ort_ms": ort_s * 1e3,
        "ort_gflops": flops / ort_s / 1e9,
        "ort_peak_fraction": flops / ort_s / 1e9 / local_peak,
        "cocopie_over_ort_speed": ort_s / cocopie_s,
        "_peaks": peaks,
    }


def summarize(records: list, all_peaks: list) -> dict:
    from tvm_cocopie.bench.timing import geomean, median

    def frac(pred, key="peak_fraction"):
        vals = [r[key] for r in records if pred(r)]
        return geomean(vals) if vals else None

    def is3x3(r):
        return r["kind"] == "conv" and r["kernel"] == 3 and r["in_channels"] >= 64

    def is1x1(r):
        return r["kind"] == "conv" and r["kernel"] == 1

    def ismm(r):
        return r["kind"] == "matmul"

    def iswide(r):
        return r["kind"] == "wide_matmul"

    def speed(kind):
        vals = [r["cocopie_over_ort_speed"] for r in records if r["kind"] == kind]
        return (geomean(vals) if vals else None), min(vals, default=None)

    summary = {
        "fma_peak_gflops": median(all_peaks) if all_peaks else None,
        "conv3x3_peak_fraction": frac(is3x3),
        "conv1x1_peak_fraction": frac(is1x1),
        "matmul_peak_fraction": frac(ismm),
        "wide_gemm_peak_fraction": frac(iswide),
        "wide_gemm_min_peak_fraction": min((r["peak_fraction"] for r in records if iswide(r)),
                                           default=None),
        "ort_wide_gemm_peak_fraction": frac(iswide, "ort_peak_fraction"),
        "conv3x3_min_peak_fraction": min((r["peak_fraction"] for r in records if is3x3(r)),
                                         default=None),
        "ort_conv3x3_peak_fraction": frac(is3x3, "ort_peak_fraction"),
        "ort_conv1x1_peak_fraction": frac(is1x1, "ort_peak_fraction"),
        "ort_matmul_peak_fraction": frac(ismm, "ort_peak_fraction"),
        "detector_conv_speed_over_ort": speed("detector_conv")[0],
        "detector_conv_min_speed_over_ort": speed("detector_conv")[1],
        "maxpool_speed_over_ort": speed("maxpool")[0],
        "maxpool_min_speed_over_ort": speed("maxpool")[1],
        "geomean_speed_over_ort": geomean(r["cocopie_over_ort_speed"] for r in records),
        "max_abs_err": max((r["max_abs_err"] for r in records), default=None),
        "winograd_over_direct_speed": {r["op"]: r["winograd_over_direct_speed"]
                                       for r in records if "winograd_over_direct_speed" in r},
        "winograd_max_abs_err": max((r["winograd_max_abs_err"] for r in records
                                     if "winograd_max_abs_err" in r), default=None),
        "aggregation": "geometric mean over layers of GFLOP/s / peak measured alongside",
    }
    return summary


def main(argv=None) -> int:
    args = parse_args(argv)
    configure_thread_pool(args.threads, override=True)  # before TVM's pool starts
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    import tvm_cocopie
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.target import cpu_info, host_target

    tvm_cocopie.register()
    target = host_target(args.threads)
    info = cpu_info(target)
    rounds = args.rounds or (7 if args.quick else 11)
    names = set(args.only.split(",")) if args.only else None
    convs = _chosen(RESNET50_CONVS + OTHER_CONVS, QUICK_CONVS + ["grouped.g8"], args, names)
    mms = [m for m in MATMULS if names is None or m[0] in names]
    mms += _chosen(WIDE_MATMULS, QUICK_WIDE, args, names)
    detector = _chosen(DETECTOR_CONVS, QUICK_DETECTOR, args, names)
    pools = _chosen(MAX_POOLS, QUICK_POOLS, args, names)
    peak = PeakMeter(target, args.threads, info.f32_lanes)
    records, all_peaks = [], []
    started = time.perf_counter()

    def save():
        if not args.json:
            return
        summary = summarize(records, all_peaks)
        summary.update(threads=args.threads, rounds=rounds, quick=args.quick,
                       seconds=round(time.perf_counter() - started, 1))
        bm.write_json_atomic(args.json, bm.bench_result("kernels", records, summary,
                                                        args.threads))

    for spec in convs:
        ours, ort, flops, err, extra = conv_contenders(spec, target, args.threads, info)
        rec = measure(peak, ours, ort, flops, rounds, extra)
        all_peaks += rec.pop("_peaks")
        name, c, hw, o, k, s, *rest = spec
        groups = rest[0] if rest else 1
        kind = "conv" if groups == 1 else "depthwise" if groups == c else "grouped_conv"
        records.append({"op": name, "kind": kind, "in_channels": c, "size": hw,
                        "out_channels": o, "kernel": k, "stride": s, "groups": groups,
                        "max_abs_err": err, "winograd_chosen": _winograd_chosen(spec, info),
                        **rec})
        _print(records[-1])
        save()
    for spec in detector:
        ours, ort, flops, err, _ = conv_contenders(spec, target, args.threads, info, "silu")
        rec = measure(peak, ours, ort, flops, rounds)
        all_peaks += rec.pop("_peaks")
        name, c, hw, o, k, s = spec
        records.append({"op": name, "kind": "detector_conv", "activation": "silu",
                        "in_channels": c, "size": hw, "out_channels": o, "kernel": k,
                        "stride": s, "groups": 1, "max_abs_err": err, **rec})
        _print(records[-1])
        save()
    for spec in pools:
        ours, ort, comparisons, err = pool_contenders(spec, target, args.threads, info)
        rec = measure(peak, ours, ort, comparisons, rounds)
        all_peaks += rec.pop("_peaks")
        name, c, hw, k, s, pad = spec
        records.append({"op": name, "kind": "maxpool", "channels": c, "size": hw,
                        "kernel": k, "stride": s, "pad": pad, "max_abs_err": err,
                        "flops_are": "comparisons", **rec})
        _print(records[-1])
        save()
    for spec in mms:
        ours, ort, flops, err = matmul_contenders(spec, target, args.threads)
        rec = measure(peak, ours, ort, flops, rounds)
        all_peaks += rec.pop("_peaks")
        name, m, n, k = spec
        kind = "wide_matmul" if spec in WIDE_MATMULS else "matmul"
        records.append({"op": name, "kind": kind, "m": m, "n": n, "k": k,
                        "max_abs_err": err, **rec})
        _print(records[-1])
        save()
    save()
    summary = summarize(records, all_peaks)
    print(f"FMA peak {summary['fma_peak_gflops']:.1f} GFLOP/s; peak fraction: "
          f"conv3x3 {_fmt(summary['conv3x3_peak_fraction'])}, "
          f"conv1x1 {_fmt(summary['conv1x1_peak_fraction'])}, "
          f"matmul {_fmt(summary['matmul_peak_fraction'])}, "
          f"wide GEMM {_fmt(summary['wide_gemm_peak_fraction'])} "
          f"(min {_fmt(summary['wide_gemm_min_peak_fraction'])}); speed vs ORT: detector "
          f"conv+SiLU {_fmt(summary['detector_conv_speed_over_ort'])} "
          f"(min {_fmt(summary['detector_conv_min_speed_over_ort'])}), max pool "
          f"{_fmt(summary['maxpool_speed_over_ort'])} "
          f"(min {_fmt(summary['maxpool_min_speed_over_ort'])}); "
          f"speed vs ORT (geomean) {_fmt(summary['geomean_speed_over_ort'])}")
    return 0


def _chosen(specs, quick: list, args, names) -> list:
    """The specs to run: those ``--only`` names, else all (the ``quick`` ones with
    ``--quick``)."""
    if names is not None:
        return [s for s in specs if s[0] in names]
    return [s for s in specs if not args.quick or s[0] in quick]


def _fmt(v):
    return "-" if v is None else f"{v:.2f}"


def _print(r):
    wino = ""
    if "winograd_ms" in r:
        wino = (f"  direct {r['direct_ms']:.3f} ms  winograd {r['winograd_ms']:.3f} ms "
                f"(x{r['winograd_over_direct_speed']:.2f}, err {r['winograd_max_abs_err']:.1e})")
    print(f"{r['op']:<16} {r['cocopie_gflops']:7.1f} GFLOP/s ({r['peak_fraction']:.2f} of "
          f"{r['peak_gflops']:.0f})  ORT {r['ort_gflops']:7.1f} ({r['ort_peak_fraction']:.2f})  "
          f"x{r['cocopie_over_ort_speed']:.2f}  err {r['max_abs_err']:.1e}{wino}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""Measure GCD²'s kernels and stock TVM's lowering of the same operators in packets.

Seed 004, ch. 4 reports latency normalized to ``vmpy`` (Table 4.2) and speedups over
TVM (§4.5). Under emulation we count executed VLIW packets (:mod:`tvm_cocopie.emulation.packets`): the same
number on every run and every machine. Each function here builds the kernel, runs it
on random data under ``qemu-hexagon``, checks the result bit for bit against the numpy
reference and returns a record (a plain dict, ready for JSON).

"Stock TVM" is the unscheduled TE compute of :mod:`tvm_cocopie.topi.int8.compute` compiled by
``tvm.compile`` for the same Hexagon target: TVM's default lowering, with LLVM's
auto-vectorizer as the only optimizer.
"""

import numpy as np

from ...emulation import hexagon as runner
from ...topi.int8 import compute as int8_compute
from ...topi.int8 import reference
from ...topi.int8.compute import Requant
from ..kernels import conv2d, depthwise, grouped, matmul
from ..kernels import transforms as layouts
from . import ms_runner, tvm_vrmpy


def _data(shape_x, shape_w, n_bias, seed, wmax=64):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, shape_x).astype("uint8")
    w = rng.integers(-wmax, wmax + 1, shape_w).astype("int8")
    b = rng.integers(-4000, 4000, n_bias).astype("int32")
    return x, w, b


def _requant(reduction: int) -> Requant:
    return Requant.from_scale(1.0 / (50 * reduction), zero_point=5)


def matmul_data_bytes(variant: str, m: int, k: int, n: int) -> int:
    """Bytes of ``A``, ``B`` and ``C`` with the layout's padding (Table 4.2, right half)."""
    layout = layouts.LAYOUT_OF[variant]
    kp, np_ = layout.padded(m, k)[1], layout.padded(m, n)[1]
    return layout.nbytes(m, k) + kp * np_ + layout.nbytes(m, n)


def _run(funcs, calls, inputs, outputs, timeout, asm_pass=None, cycles=False):
    return runner.run(funcs, calls, inputs, outputs, count_packets=True, timeout=timeout,
                      asm_pass=asm_pass, trace=bool(cycles))


def _cycles(res, cycles) -> dict:
    """The first call's estimated cycles and stalls (a traced run), else nothing.

    ``cycles`` is True (the default model) or ``{suffix: CycleModel}``: keys
    ``cycles<suffix>`` and ``stalls<suffix>`` per model."""
    if res.trace is None:
        return {}
    from ..vliw.cycles import CycleModel, trace_estimates

    models = cycles if isinstance(cycles, dict) else {"": CycleModel()}
    out = {}
    for suffix, model in models.items():
        est = trace_estimates(res, model)[0]
        out[f"cycles{suffix}"] = est.cycles
        out[f"stalls{suffix}"] = est.stalls
    return out


def gcd2_matmul(variant: str, m: int, k: int, n: int, seed: int = 0, timeout=None,
                asm_pass=None, cycles=False) -> dict:
    """Packets of the GCD² matmul kernel in ``variant`` (inputs already in its layout);
    ``asm_pass`` re-packs its assembly (:mod:`..vliw.repack`), ``cycles`` adds the
    cycle model's estimate (:mod:`..vliw.cycles`) of the traced run."""
    x, w, b = _data((m, k), (k, n), n, seed)
    rq = _requant(k)
    layout = layouts.LAYOUT_OF[variant]
    res = _run(
        {"mm": matmul.matmul(variant, m, k, n, rq)},
        [("mm", ["x", "w", "bias", "y"])],
        {
            "x": layout.pack(x),
            "w": layouts.pack_weights(w, variant),
            "bias": layouts.pad_bias(b, variant),
        },
        ["y"],
        timeout,
        asm_pass,
        cycles,
    )
    y = layout.unpack(res.outputs["y"], m, n)
    return {
        "op": "matmul",
        "impl": variant,
        "shape": [m, k, n],
        "packets": res.packets[0],
        "exact": bool(np.array_equal(y, reference.qmatmul(x, w, b, rq))),
        "data_bytes": matmul_data_bytes(variant, m, k, n),
        **_cycles(res, cycles),
    }


def stock_matmul(m: int, k: int, n: int, seed: int = 0, timeout=None) -> dict:
    """Packets of stock TVM's lowering of the same int8 matmul (row-major operands)."""
    x, w, b = _data((m, k), (k, n), n, seed)
    rq = _requant(k)
    res = _run(
        {"mm": int8_compute.qmatmul_func(m, k, n, rq)},
        [("mm", ["x", "w", "bias", "y"])],
        {"x": x, "w": w, "bias": b},
        ["y"],
        timeout,
    )
    return {
        "op": "matmul",
        "impl": "stock",
        "shape": [m, k, n],
        "packets": res.packets[0],
        "exact": bool(np.array_equal(res.outputs["y"], reference.qmatmul(x, w, b, rq))),
        "data_bytes": m * k + k * n + m * n,
    }


def gcd2_conv(variant: str, h, w_, c, o, kernel, stride, pad, dw=False, seed=0, timeout=None,
              asm_pass=None, cycles=False):
    """Packets of a GCD² (depthwise) convolution kernel in ``variant``'s layout;
    ``asm_pass``, ``cycles`` as for :func:`gcd2_matmul`."""
    geo = conv2d.GridGeometry(h, w_, kernel, stride, pad)
    wshape = (kernel, kernel, c) if dw else (kernel, kernel, c, o)
    x, w, b = _data((1, h, w_, c), wshape, c if dw else o, seed, wmax=127 if dw else 64)
    rq = _requant(kernel * kernel * (1 if dw else c))
    if dw:
        func = depthwise.depthwise_conv2d(variant, geo, c, rq)
        words = depthwise.pack_dw_weights(w, variant)
        ref = reference.qdepthwise_conv2d_nhwc(x, w, b, rq, stride, pad)
    else:
        func = conv2d.conv2d(variant, geo, c, o, rq)
        words = conv2d.pack_conv_weights(w, variant)
        ref = reference.qconv2d_nhwc(x, w, b, rq, stride, pad)
    res = _run(
        {"conv": func},
        [("conv", ["x", "w", "bias", "y"])],
        {
            "x": conv2d.pack_input(x, geo, variant),
            "w": words,
            "bias": layouts.pad_bias(b, variant),
        },
        ["y"],
        timeout,
        asm_pass,
        cycles,
    )
    y = conv2d.unpack_output(res.outputs["y"], geo, c if dw else o)
    return {
        "op": "dwconv2d" if dw else "conv2d",
        "impl": variant,
        "layout": layouts.LAYOUT_OF[variant].name,
        # depthwise has no channel reduction: every layout multiplies with vmpy
        "instruction": "vmpy" if dw else variant,
        "shape": [h, w_, c, o, kernel, stride, pad],
        "packets": res.packets[0],
        "exact": bool(np.array_equal(y, ref)),
        **_cycles(res, cycles),
    }


def gcd2_grouped_conv(h, w_, c, o, groups, kernel, stride, pad, seed=0, timeout=None,
                      cycles=False):
    """Packets of the grouped-conv HVX kernel (:mod:`..kernels.grouped`, ``vrmpy`` grids)."""
    geo = conv2d.GridGeometry(h, w_, kernel, stride, pad)
    x, w, b = _data((1, h, w_, c), (kernel, kernel, c // groups, o), o, seed, wmax=127)
    rq = _requant(kernel * kernel * c // groups)
    res = _run(
        {"gconv": grouped.grouped_conv2d(geo, c, o, groups, rq)},
        [("gconv", ["x", "w", "bias", "y"])],
        {
            "x": conv2d.pack_input(x, geo, "vrmpy"),
            "w": grouped.pack_grouped_weights(w, groups),
            "bias": layouts.pad_bias(b, "vrmpy"),
        },
        ["y"],
        timeout,
        cycles=cycles,
    )
    y = conv2d.unpack_output(res.outputs["y"], geo, o)
    return {
        "op": "gconv2d",
        "impl": "vrmpy",
        "shape": [h, w_, c, o, groups, kernel, stride, pad],
        "packets": res.packets[0],
        "exact": bool(np.array_equal(
            y, reference.qgroup_conv2d_nhwc(x, w, b, rq, groups, stride, pad))),
        **_cycles(res, cycles),
    }


def stock_conv(h, w_, c, o, kernel, stride, pad, dw=False, seed=0, timeout=None):
    """Packets of stock TVM's lowering of the same NHWC int8 (depthwise) convolution."""
    wshape = (kernel, kernel, c) if dw else (kernel, kernel, c, o)
    x, w, b = _data((1, h, w_, c), wshape, c if dw else o, seed, wmax=127 if dw else 64)
    rq = _requant(kernel * kernel * (1 if dw else c))
    func = int8_compute.qconv2d_func(h, w_, c, c if dw else o, kernel, stride, pad, rq, dw)
    res = _run(
        {"conv": func},
        [("conv", ["x", "w", "bias", "y"])],
        {"x": x, "w": w, "bias": b},
        ["y"],
        timeout,
    )
    if dw:
        ref = reference.qdepthwise_conv2d_nhwc(x, w, b, rq, stride, pad)
    else:
        ref = reference.qconv2d_nhwc(x, w, b, rq, stride, pad)
    return {
        "op": "dwconv2d" if dw else "conv2d",
        "impl": "stock",
        "shape": [h, w_, c, o, kernel, stride, pad],
        "packets": res.packets[0],
        "exact": bool(np.array_equal(res.outputs["y"], ref)),
    }


def layout_transform(src, dst, m: int, k: int, seed: int = 0, timeout=None,
                     cycles=False) -> dict:
    """Packets of converting an ``m x k`` uint8 matrix between layouts on the device;
    ``cycles`` as for :func:`gcd2_matmul`."""
    x = np.random.default_rng(seed).integers(0, 256, (m, k)).astype("uint8")

    def packed(layout):
        return x if layout is None else layout.pack(x)

    res = _run(
        {"convert": layouts.convert_func(src, dst, m, k)},
        [("convert", ["x", "y"])],
        {"x": packed(src)},
        ["y"],
        timeout,
        cycles=cycles,
    )
    return {
        "op": "layout_transform",
        "impl": f"{getattr(src, 'name', 'row-major')}->{getattr(dst, 'name', 'row-major')}",
        "shape": [m, k],
        "packets": res.packets[0],
        "exact": bool(np.array_equal(res.outputs["y"], packed(dst))),
        **_cycles(res, cycles),
    }


def tvm_vrmpy_conv(h, w_, c, o, kernel, stride, pad, seed=0, timeout=None) -> dict:
    """Packets of stock TVM's ``vrmpy`` tensor intrinsic tensorized into the same conv
    (:mod:`.tvm_vrmpy`, hand schedule)."""

    x, w, b = _data((1, h, w_, c), (kernel, kernel, c, o), o, seed)
    rq = _requant(kernel * kernel * c)
    res = _run(
        {"conv": tvm_vrmpy.conv_func(h, w_, c, o, kernel, stride, pad, rq)},
        [("conv", ["x", "w", "bias", "y"])],
        {"x": tvm_vrmpy.pad_input(x, pad), "w": tvm_vrmpy.pack_weights(w), "bias": b},
        ["y"],
        timeout,
    )
    ref = reference.qconv2d_nhwc(x, w, b, rq, stride, pad)
    return {
        "op": "conv2d",
        "impl": "tvm_vrmpy",
        "shape": [h, w_, c, o, kernel, stride, pad],
        "packets": res.packets[0],
        "exact": bool(np.array_equal(res.outputs["y"], ref)),
    }


def tvm_vrmpy_ms_conv(h, w_, c, o, kernel, stride, pad, trials, seed=0, timeout=None) -> dict:
    """Packets of the same conv with stock TVM's ``vrmpy`` intrinsic and a MetaSchedule
    search of ``trials`` candidates measured under QEMU (:mod:`.ms_runner`); the best
    schedule is rebuilt and run again here and checked against numpy."""

    x, w, b = _data((1, h, w_, c), (kernel, kernel, c, o), o, seed)
    rq = _requant(kernel * kernel * c)
    ref = reference.qconv2d_nhwc(x, w, b, rq, stride, pad)
    xp, wp = tvm_vrmpy.pad_input(x, pad), tvm_vrmpy.pack_weights(w)
    found = ms_runner.tune_vrmpy_conv(
        h, w_, c, o, kernel, stride, pad, rq, (xp, wp, b, ref), trials, timeout=timeout or 300.0
    )
    record = {
        "op": "conv2d",
        "impl": "tvm_vrmpy_ms",
        "shape": [h, w_, c, o, kernel, stride, pad],
        "ms_trials": found.trials,
        "ms_valid_trials": found.valid,
        "ms_search_s": round(found.seconds, 1),
        "ms_runner_packets": found.packets,
    }
    if found.func is None:
        return {**record, "packets": None, "exact": False}
    res = _run(
        {"conv": found.func},
        [("conv", ["x", "w", "bias", "y"])],
        {"x": xp, "w": wp, "bias": b},
        ["y"],
        timeout,
    )
    exact = bool(np.array_equal(res.outputs["y"], ref))
    return {**record, "packets": res.packets[0], "exact": exact}


def stock_network(net, timeout=None) -> dict:
    """Packets of stock TVM's lowering of a whole quantized network (an executor
    :class:`~tvm_cocopie.hexagon.executor.QNetwork`): every layer the unscheduled NHWC TE
    compute of :mod:`tvm_cocopie.topi.int8.compute` / :mod:`~tvm_cocopie.topi.int8.sequence`
    with the same integers (weights, folded bias, requantization, zero-point padding,
    tables), run in order as one program under ``qemu-hexagon`` and checked bit for bit
    against the numpy reference of the network.

    Returns ``{"packets", "packets_by_layer", "exact"}``."""
    from ..executor.nhwc import nhwc_layer, out_shape
    from ..executor.quantization import layer_sources, reference_forward

    funcs, calls, inputs = {}, [], {"image": net.image_q, **net.constants}
    tensors = {"input": "image", **{k: k for k in net.constants}}
    shapes = {"input": net.image_q.shape, **{k: v.shape for k, v in net.constants.items()}}
    prev = "input"
    for i, q in enumerate(net.layers):
        names = list(layer_sources(q.layer, prev))
        funcs[f"l{i}"], consts = nhwc_layer(q, [shapes[n] for n in names])
        for k, value in enumerate(consts):
            inputs[f"l{i}_c{k}"] = value
        calls.append((f"l{i}", [*(tensors[n] for n in names),
                                *(f"l{i}_c{k}" for k in range(len(consts))), f"t{i}"]))
        tensors[q.layer.name], shapes[q.layer.name] = f"t{i}", out_shape(q)
        prev = q.layer.name
    res = runner.run(funcs, calls, inputs, [tensors[prev]], count_packets=True, timeout=timeout)
    ref = reference_forward(net)
    return {
        "packets": int(sum(res.packets)),
        "packets_by_layer": {q.layer.name: int(n) for q, n in zip(net.layers, res.packets)},
        "exact": bool(np.array_equal(res.outputs[tensors[prev]], ref)),
    }


def pipeline_network(path, timeout=None) -> dict:
    """A quantized ONNX file through the front door's int8 form
    (:func:`~tvm_cocopie.hexagon.relax_graph.quantized_module`) and ``tvm.compile``'s cocopie
    pipeline for Hexagon (up to ``schedule``), the program run under ``qemu-hexagon`` on
    the executor's sample input (:func:`~tvm_cocopie.hexagon.executor.model.prepare`):
    ``{"output", "reference", "packets", "exact"}``, the output shaped like the numpy int8
    reference."""
    import tvm

    from ...pipeline import register_pipeline, run_until
    from ...target import HEXAGON_V66
    from ..executor.model import prepare
    from ..executor.quantization import reference_forward
    from ..relax_graph import quantized_module, run_program

    net, _, _, _ = prepare(path)
    register_pipeline()
    mod, _ = quantized_module(path)
    scheduled = run_until(mod, tvm.target.Target(HEXAGON_V66), "schedule")
    out, packets = run_program(scheduled, net.image_q, timeout, count_packets=True)
    ref = reference_forward(net)
    out = out.reshape(ref.shape)
    return {"output": out, "reference": ref, "packets": packets,
            "exact": bool(np.array_equal(out, ref))}

"""A user's ONNX model, float or quantized, run whole on emulated Hexagon (seed 004, §4.4.4).

:func:`run_model` is what ``tvm-cocopie hexagon run MODEL.onnx`` does:

1. a float model is quantized first (:func:`tvm_cocopie.ptq.quantize_onnx`: QDQ,
   calibrated on sample inputs); QDQ and QOperator files are taken as they are;
2. the quantized graph is read into the executor's int8 network
   (:func:`.qonnx.read_quantized`), every layer's plan chosen by GCD²'s global selection,
   and the network compiled into one program with one static memory plan
   (:func:`.program.compile_network`);
3. the program runs once under ``qemu-hexagon`` on an input image (a sample input not
   used for calibration, quantized on the host with the model's input scale and zero
   point and given NHWC), packets counted per call;
4. the output is compared bit for bit with the numpy int8 reference of the same network
   (:func:`.quantization.reference_forward`), and with ONNX Runtime running the quantized
   file on the same float input (:func:`ort_agreement`: difference in output steps).

``stock=True`` also runs stock TVM's lowering of the same network
(:func:`tvm_cocopie.hexagon.tools.measure.stock_network` -- passed in as ``stock_runner``
so that this module stays below the tools).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np

from ...errors import ModelError
from ...onnx_file import load_model
from ...ptq import calibration_inputs, image_nhwc, quantize_onnx
from . import qonnx
from .qonnx import to_nhwc
from .run import run_network

log = logging.getLogger(__name__)


def image_hw(image_size) -> tuple | None:
    """``(h, w)`` of an image size given as one number (square) or a pair."""
    if not image_size:
        return None
    if isinstance(image_size, int):
        return image_size, image_size
    h, w = image_size
    return int(h), int(w)


def _shapes(proto, image_size):
    hw = image_hw(image_size)
    if not hw:
        return None
    inits = {t.name for t in proto.graph.initializer}
    (inp,) = [i for i in proto.graph.input if i.name not in inits][:1] or [None]
    if inp is None:
        raise ModelError("the model has no input")
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    if len(dims) != 4:
        raise ModelError(f"input {inp.name} is not an NCHW image: dims {dims}")
    if dims[2] and dims[3] and (dims[2], dims[3]) != hw:
        raise ModelError(f"input {inp.name} is fixed at {dims[2]}x{dims[3]}; an image size "
                         "applies to models whose height and width are symbolic")
    return {inp.name: [1, dims[1] or 3, *hw]}


def _session(model):
    """An ONNX Runtime CPU session on one thread (a path or serialized bytes)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _steps(a: np.ndarray, b: np.ndarray, scale: float) -> dict:
    """``max_steps`` and ``mean_steps`` of ``|a - b|`` in units of ``scale``, and for
    vectors (a classifier's output) whether the arg-max agrees."""
    steps = np.abs(a.astype(np.float32) - b.astype(np.float32)) / np.float32(scale)
    out = {"max_steps": round(float(steps.max()), 3), "mean_steps": round(float(steps.mean()), 4)}
    return out, steps


def _argmax(out: dict, a: np.ndarray, b: np.ndarray) -> dict:
    if b.ndim == 2:
        out["argmax_agrees"] = bool(np.array_equal(a.argmax(-1), b.argmax(-1)))
    return out


def layer_agreement(quantized_path, net, sample: dict | None = None) -> dict:
    """Every layer of ``net`` given ONNX Runtime's own integer inputs, against ONNX
    Runtime's integer output of that layer: ``max_steps`` (largest difference), ``differ``
    (fraction of all elements that differ) and ``layers_differing``.

    This is the rounding tolerance stated per layer, free of propagation: with the same
    int8 inputs, ONNX Runtime (float requantization, ties to even) and the executor
    (15-bit fixed point, ties up) may differ by one step where a value falls within
    ~2**-15 of a half."""
    import onnx

    from .quantization import layer_sources, reference_step

    proto = onnx.load(str(quantized_path))
    names = {layer: entry[0] for layer, entry in net.tensor_names.items()}
    known = {o.name for o in proto.graph.output}
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(proto).graph.value_info}
    for name in names.values():
        if name not in known:
            proto.graph.output.append(typed.get(name) or onnx.helper.make_tensor_value_info(
                name, onnx.TensorProto.UINT8, None))
    sess = _session(proto.SerializeToString())
    feed = sample or {net.input_name: net.image.transpose(0, 3, 1, 2)}
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
    theirs = {layer: to_nhwc(outs[name], *net.tensor_names[layer][1:])
              for layer, name in names.items()}
    theirs["input"] = net.image_q.astype(np.int32)
    theirs.update({k: v.astype(np.int32) for k, v in net.constants.items()})
    worst, differ, total, layers = 0, 0, 0, 0
    prev = "input"
    for q in net.layers:
        srcs = layer_sources(q.layer, prev)
        prev = q.layer.name
        if q.layer.name not in theirs or any(s not in theirs for s in srcs):
            continue
        ins = [theirs[s].astype(np.uint8) for s in srcs]
        if q.layer.op in ("conv", "dwconv") and ins[0].shape[1:3] != (q.layer.h, q.layer.w):
            ins[0] = ins[0].reshape(1, q.layer.h, q.layer.w, -1)
        ours = reference_step(q, *ins).astype(np.int32)
        d = np.abs(ours - theirs[q.layer.name].reshape(ours.shape))
        worst = max(worst, int(d.max()))
        differ += int((d > 0).sum())
        total += d.size
        layers += bool(d.max())
    return {"max_steps": worst, "differ": round(differ / max(total, 1), 6),
            "layers_differing": layers, "layers": len(net.layers)}


def ort_agreement(quantized_path, net, sample: dict, output: np.ndarray) -> dict:
    """Our uint8 ``output`` against ONNX Runtime running the quantized file on ``sample``.

    Both are compared as the real numbers they stand for, in output steps (the output
    scale): ``max_steps`` and ``mean_steps`` of the difference, ``within_1`` the fraction
    of outputs within one step, and for a classifier (a vector output) whether the
    arg-max agrees; ``per_layer``: :func:`layer_agreement`. Why not zero: ONNX Runtime
    rounds half to even in float, the executor half up in fixed point (:mod:`.qonnx`);
    each layer differs by at most a step on a few elements, and such a step grows through
    the layers after it (more in a network of random weights, whose layers amplify).
    """
    (theirs,) = _session(str(quantized_path)).run(None, sample)[:1]
    ours = net.dequantize_output(output)  # NHWC
    ours = (ours.transpose(0, 3, 1, 2) if theirs.ndim == 4 else ours).reshape(theirs.shape)
    out, steps = _steps(ours, theirs, net.output_scale)
    out["within_1"] = round(float((steps <= 1.0 + 1e-3).mean()), 4)
    _argmax(out, ours, theirs)
    out["per_layer"] = layer_agreement(quantized_path, net, sample)
    return out


def quantization_error(float_proto, quantized_path, net, sample: dict) -> dict:
    """ONNX Runtime's quantized model against its float model on ``sample``, in output
    steps: the error quantization itself makes, the yardstick for :func:`ort_agreement`
    (a network of random weights amplifies small differences layer after layer)."""
    outs = [_session(m).run(None, sample)[0]
            for m in (float_proto.SerializeToString(), str(quantized_path))]
    return _argmax(_steps(outs[0], outs[1], net.output_scale)[0], outs[0], outs[1])


def prepare(model, *, image_size: int | None = None, calibration: int = 8, seed: int = 0,
            workdir=None, fmt: str = "qdq", per_channel: bool = False):
    """``(network, quantized path, input sample, float model or None)`` of ``model``: a
    float model quantized into ``workdir`` (default: a temporary folder; ``per_channel``:
    weight scales per output channel), a quantized one read as it is. The sample is a
    deterministic input not used for calibration."""
    proto = load_model(model, check=False)
    shapes = _shapes(proto, image_size)
    from_float = not qonnx.is_quantized(proto)
    float_proto = proto if from_float else None
    if from_float:
        samples = calibration_inputs(proto, calibration, seed, shapes)
        workdir = Path(workdir or tempfile.mkdtemp(prefix="cocopie_ptq_"))
        path = quantize_onnx(proto, workdir / "model_qdq.onnx", samples, fmt=fmt,
                             per_channel=per_channel)
        proto = load_model(path, check=False)
    else:
        if per_channel:
            log.warning("per_channel applies to float models; %s is already quantized and is "
                        "run as it is", model if not hasattr(model, "graph") else "the model")
        path = model if not hasattr(model, "graph") else None
        if path is None:
            workdir = Path(workdir or tempfile.mkdtemp(prefix="cocopie_q_"))
            path = workdir / "model_q.onnx"
            from ...models import save

            save(proto, path)
    net = qonnx.read_quantized(proto, image_hw(image_size))
    sample = calibration_inputs(proto, 1, seed + 10_000, shapes)[0]
    if net.embedding is not None:  # token ids inside the table the model gathers from
        ids = sample[net.input_name]
        rng = np.random.default_rng(seed + 10_000)
        sample[net.input_name] = rng.integers(0, len(net.embedding), ids.shape).astype(ids.dtype)
    net.image = sample[net.input_name] if net.embedding is not None else image_nhwc(sample)
    return net, Path(path), sample, float_proto


def run_model(model, *, image_size: int | None = None, calibration: int = 8, seed: int = 0,
              timeout: float | None = None, compare_ort: bool = True, stock_runner=None,
              workdir=None, fmt: str = "qdq", packing: str | None = None,
              per_channel: bool = False) -> dict:
    """Run ``model`` whole under ``qemu-hexagon`` (see the module doc); a JSON-ready dict:
    ``exact`` (bit for bit against numpy), packets total / per operator class / per
    role, the plan, memory, ONNX Runtime agreement, and stock TVM's packets if
    ``stock_runner`` (``net -> {"packets", "exact"}``) is given.

    ``packing`` (``"llvm"``, ``"sda"``, ``"soft_to_hard"``, ``"soft_to_none"``) re-packs
    the kernels' assembly as the last step of the build
    (:class:`tvm_cocopie.hexagon.vliw.repack.Repack`) and adds ``total_cycles``, the
    cycle model's estimate of the run. ``per_channel``: a float model's weights are
    quantized per output channel (:func:`tvm_cocopie.ptq.quantize_onnx`)."""
    net, path, sample, float_proto = prepare(model, image_size=image_size,
                                             calibration=calibration, seed=seed,
                                             workdir=workdir, fmt=fmt, per_channel=per_channel)
    from_float = float_proto is not None
    asm_pass = None
    if packing is not None:
        from ..vliw.repack import Repack

        asm_pass = Repack(packing)
    res = run_network(net, timeout=timeout, asm_pass=asm_pass, cycles=packing is not None)
    lay0 = net.layers[0].layer
    out = {
        "quantized_from_float": from_float,
        "per_channel_layers": sum(bool(getattr(q.rq, "per_channel", False))
                                  for q in net.layers),
        "quantized_model": str(path),
        "input": [1, lay0.h, lay0.w, lay0.c],
        "layers": len(net.layers),
        "layers_by_class": {k: sum(q.op_class == k for q in net.layers)
                            for k in sorted({q.op_class for q in net.layers})},
        "macs": int(sum(q.layer.macs for q in net.layers)),
        "exact": res.exact,
        "total_packets": res.total_packets,
        "packets_by_class": res.packets_by_class(),
        "packets_by_role": res.packets_by_role(),
        "plan": res.plan,
        "arena_bytes": res.arena_bytes,
        "separate_buffer_bytes": res.naive_bytes,
    }
    if packing is not None:
        out["packing"] = packing
        out["total_cycles"] = res.total_cycles
    if compare_ort:
        out["ort_agreement"] = ort_agreement(path, net, sample, res.output)
        if float_proto is not None:
            out["ort_quantized_vs_float"] = quantization_error(float_proto, path, net, sample)
    if stock_runner is not None:
        stock = stock_runner(net, timeout=timeout)
        out["stock_tvm_packets"] = stock["packets"]
        out["stock_tvm_exact"] = stock["exact"]
        out["packet_ratio_vs_tvm"] = round(stock["packets"] / max(res.total_packets, 1), 3)
    log.info("%s: %d layers, %d packets %s, exact=%s", path, len(net.layers),
             res.total_packets, res.packets_by_class(), res.exact)
    return out

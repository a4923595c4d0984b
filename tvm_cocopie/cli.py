"""The ``tvm-cocopie`` command line.

    tvm-cocopie demo [--model NAME] [--json PATH]
    tvm-cocopie compile MODEL.onnx --target JSON [--shape NAME=1,3,224,224] -o OUT.so
    tvm-cocopie run MODEL.onnx --input sr=16000 --input x=x.npy [--save OUT.npz]
    tvm-cocopie bench NAME [ARGS...]        # runs scripts/bench_NAME.py
    tvm-cocopie info                         # what register() puts into TVM
    tvm-cocopie predict MODEL.onnx [--measure] [--model-file PATH]   # latency model
    tvm-cocopie hexagon run MODEL.onnx       # int8 conv chain on emulated Hexagon HVX
    tvm-cocopie tune | transfer-tune ...     # MetaSchedule logs and their reuse

Errors from tvm-cocopie are printed as one readable line, exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from .errors import CocopieError
from .threads import configure_thread_pool, usable_cores

log = logging.getLogger("tvm_cocopie.cli")


def _parse_shape(text: str) -> tuple[str, list[int]]:
    name, sep, dims = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--shape wants NAME=D0,D1,..., got {text!r}")
    try:
        return name, [int(d) for d in dims.split(",") if d]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape dims must be integers: {text!r}") from None


def cmd_demo(args) -> int:
    """``tvm-cocopie demo``: compile a zoo model with stock TVM and cocopie, time both and ONNX
    Runtime, print the table; exit code."""
    from . import register
    from .bench.e2e import compare_workload, summarize, table
    from .bench.timing import bench_result, write_json_atomic
    from .models import DEFAULT_MODEL
    from .models.workloads import get_workload
    from .target import host_target

    print(register())
    name = args.model or DEFAULT_MODEL
    print(f"\nbuilding {name} (embedded zoo model, deterministic weights) ...")
    wl = get_workload(name, image_size=args.image_size)
    target = host_target(args.threads)
    print(f"compiling with stock TVM and with cocopie for {target.export()['mcpu']}, "
          f"then timing against ONNX Runtime ({args.threads} threads) ...")
    rec = compare_workload(wl, target, args.threads, repeat=args.repeat, max_seconds=30.0)
    print()
    print(table([rec]))
    print(f"\ncocopie is {1 / rec['cocopie_over_tvm']:.1f}x faster than stock TVM and "
          f"{rec['cocopie_over_ort']:.2f}x ONNX Runtime's latency; max abs error vs ONNX "
          f"Runtime {rec['max_abs_err']:.2e}")
    if args.json:
        write_json_atomic(args.json, bench_result("demo", [rec], summarize([rec]), args.threads))
    return 0


def cmd_compile(args) -> int:
    """``tvm-cocopie compile``: compile an ONNX file and export the library; exit code."""
    from .api import compile_model

    shapes = dict(args.shape or [])
    compiled = compile_model(args.model, target=args.target, shapes=shapes or None,
                             pipeline=args.pipeline)
    out = compiled.export_library(args.output)
    print(f"wrote {out} ({out.stat().st_size} bytes) in {compiled.compile_seconds:.1f}s; "
          f"load it with tvm.runtime.load_module and relax.VirtualMachine "
          f"(after import tvm_cocopie)")
    return 0


def _input_value(spec, text: str):
    """``--input`` text for ``spec``: an ``.npy`` path, or numbers (``16000``, ``1,2,3``) shaped
    as the input's static shape (a scalar input takes one number: a 0-d array)."""
    import numpy as np

    from .errors import InputShapeError

    if text.endswith(".npy"):
        return np.load(text)
    try:
        values = [float(v) if np.dtype(spec.dtype).kind == "f" else int(v)
                  for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputShapeError(f"--input {spec.name}= wants an .npy path or numbers, got "
                              f"{text!r}") from None
    if not all(isinstance(d, int) for d in spec.shape):
        raise InputShapeError(f"input {spec.name!r} has symbolic shape {list(spec.shape)}: "
                              "pass it as an .npy file")
    arr = np.array(values, dtype=spec.dtype)
    if arr.size != int(np.prod(spec.shape, dtype=np.int64)):
        raise InputShapeError(f"input {spec.name!r} has shape {list(spec.shape)}: "
                              f"{arr.size} number(s) do not fill it")
    return arr.reshape(spec.shape)


def cmd_run(args) -> int:
    """``tvm-cocopie run``: compile an ONNX file, run it once on the given inputs, print (and
    ``--save``) the outputs; exit code."""
    import numpy as np

    from .api import compile_model
    from .errors import InputShapeError
    from .frontend.model import load_model

    proto = load_model(args.model)
    # one call: a build specialized to its shapes would cost a second compile for nothing
    compiled = compile_model(proto, target=args.target, shapes=dict(args.shape or []) or None,
                             pipeline=args.pipeline, specialize=False)
    given = dict(np.load(args.inputs)) if args.inputs else {}
    for name, _, text in (item.partition("=") for item in args.input or []):
        spec = next((s for s in compiled.inputs if s.name == name), None)
        if spec is None:
            raise InputShapeError(f"unknown input {name!r}; the model takes "
                                  f"{compiled.input_names}")
        given[name] = _input_value(spec, text)
    result = compiled(**given)
    outputs = result if isinstance(result, list) else [result]
    names = [o.name for o in proto.graph.output] or [f"output_{i}" for i in range(len(outputs))]
    for name, value in zip(names, outputs):
        arr = np.asarray(value)
        print(f"{name}: shape {list(arr.shape)} {arr.dtype} = "
              f"{np.array2string(arr, threshold=20, precision=6)}")
    if args.save:
        np.savez(args.save, **{n: np.asarray(v) for n, v in zip(names, outputs)})
    return 0


def cmd_bench(args) -> int:
    """``tvm-cocopie bench NAME``: run ``scripts/bench_NAME.py`` with the remaining arguments; its
    exit code."""
    scripts = Path(__file__).resolve().parent.parent / "scripts"
    script = scripts / f"bench_{args.name}.py"
    if not script.is_file():
        known = sorted(p.stem[len("bench_"):] for p in scripts.glob("bench_*.py"))
        raise CocopieError(
            f"no benchmark named {args.name!r} (looked for {script}); known: {known}. "
            "Benchmarks ship with the source checkout, not the wheel."
        )
    return subprocess.call([sys.executable, str(script), *args.rest])


def cmd_info(args) -> int:
    """``tvm-cocopie info``: register the pipeline and print its stages for this host; exit code."""
    from . import register

    print(register())
    return 0


def _conv_input_shapes(model) -> dict:
    """``{conv output name: its input's static NCHW shape}`` from ONNX shape inference."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - knobs are optional: no shapes, no knobs
        return {}
    shapes = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.input]:
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in vi.type.tensor_type.shape.dim]
        if len(dims) == 4 and all(dims):
            shapes[vi.name] = dims
    return {n.output[0]: shapes.get(n.input[0]) for n in inferred.graph.node
            if n.op_type == "Conv"}


def cmd_prune(args) -> int:
    """``tvm-cocopie prune``: pattern + connectivity pruning of an ONNX model's 3x3 convs,
    with the layerwise representation as JSON (PatDNN); exit code."""
    import dataclasses

    import onnx

    from .errors import ModelError
    from .frontend.model import load_model
    from .pruning import prune_model
    from .target import cpu_info, parse_target
    from .topi.cpu.conv2d_nchwc import ConvGeometry
    from .topi.cpu.pattern_conv import default_knobs

    if args.connectivity < 1:
        raise ModelError(f"--connectivity {args.connectivity}: the rate is kernels before over "
                         "kernels after, 1 (none) or more (3.6 keeps 1 kernel in 3.6)")
    model = load_model(args.model)
    pruned, lr = prune_model(model, args.patterns, args.connectivity,
                             first_exempt=not args.prune_first)
    lanes = cpu_info(parse_target(None)).f32_lanes
    inputs = _conv_input_shapes(model)
    nodes = {n.name or n.output[0]: n for n in model.graph.node}
    for layer in lr.layers:
        node = nodes.get(layer.name)
        shape = inputs.get(node.output[0]) if node is not None else None
        if shape is None:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        geo = ConvGeometry(shape[0], shape[1], shape[2], shape[3], layer.shape[0], 3, 3,
                           tuple(attrs.get("strides", [1, 1])), (pads[0], pads[1], pads[2],
                                                                pads[3]), (1, 1), 1)
        knobs = default_knobs(geo, lanes)
        layer.knobs = {k: v for k, v in dataclasses.asdict(knobs).items()}
    onnx.save(pruned, args.output)
    lr_path = args.lr or str(Path(args.output).with_suffix(".lr.json"))
    lr.save(lr_path)
    kept = sum(layer.kernels for layer in lr.layers)
    total = sum(layer.shape[0] * layer.shape[1] for layer in lr.layers)
    print(f"pruned {len(lr.layers)} 3x3 convs to {args.patterns} patterns, "
          f"{total / max(kept, 1):.2f}x fewer kernels overall -> {args.output} (LR: {lr_path})")
    return 0


def prediction_report(prediction, measured: dict | None = None,
                      measured_ms: float | None = None) -> dict:
    """A model's predicted latency (a :class:`~tvm_cocopie.latency.ModelPrediction`) as
    JSON-ready data: per kernel (slowest first) its calls, predicted us per call, ms per
    inference and share of the kernels' time, and the total; with ``measured`` (``{kernel
    name: us per call in the model}``) and ``measured_ms`` (one inference) the measured
    values beside them and the relative errors (percent, signed: positive when the
    prediction is slower)."""
    kernel_us = sum(calls * us for _, calls, us in prediction.kernels) or 1.0
    kernels = []
    for name, calls, us in prediction.kernels:
        row = {"name": name, "calls": calls, "predicted_us": us,
               "predicted_ms": calls * us / 1000.0, "share_pct": 100.0 * calls * us / kernel_us}
        if measured is not None:
            got = measured.get(name)
            row["measured_us"] = got
            row["err_pct"] = 100.0 * (us - got) / got if got else None
        kernels.append(row)
    kernels.sort(key=lambda r: -r["predicted_ms"])
    report = {"predicted_ms": prediction.total_ms, "overhead_ms": prediction.overhead_ms,
              "vm_calls": prediction.vm_calls, "kernels": kernels}
    if measured_ms is not None:
        report["measured_ms"] = measured_ms
        report["err_pct"] = 100.0 * (prediction.total_ms - measured_ms) / measured_ms
    return report


def prediction_table(report: dict) -> str:
    """:func:`prediction_report` as a text table, a line per kernel, then the totals."""
    measured = "measured_ms" in report
    header = f"{'kernel':<48}{'calls':>6}{'pred us':>11}{'pred ms':>10}{'share':>8}"
    if measured:
        header += f"{'meas us':>11}{'error':>9}"
    lines = [header]
    for k in report["kernels"]:
        line = (f"{k['name'][:47]:<48}{k['calls']:>6}{k['predicted_us']:>11.1f}"
                f"{k['predicted_ms']:>10.3f}{k['share_pct']:>7.1f}%")
        if measured:
            got, err = k.get("measured_us"), k.get("err_pct")
            line += (f"{got:>11.1f}" if got is not None else f"{'-':>11}")
            line += (f"{err:>+8.1f}%" if err is not None else f"{'-':>9}")
        lines.append(line)
    lines.append(f"predicted total {report['predicted_ms']:.3f} ms ({report['vm_calls']} kernel "
                 f"calls; {report['overhead_ms']:+.3f} ms of it the calibration's factor on the "
                 "kernels' sum: VM calls and the quantile's bias)")
    if measured:
        lines.append(f"measured total {report['measured_ms']:.3f} ms: prediction off by "
                     f"{report['err_pct']:+.1f}%")
    return "\n".join(lines)


def cmd_predict(args) -> int:
    """``tvm-cocopie predict``: a model's latency predicted by the latency model, per kernel
    and in total (with ``--measure`` beside the measured times); exit code."""
    import json

    from .bench.latency import measured_kernels, model_prediction
    from .latency import LatencyModel
    from .paths import write_json_atomic
    from .target import parse_target

    target = parse_target(args.target)
    latency = LatencyModel.load(target, args.model_file)
    shapes = dict(args.shape or []) or None
    prediction = model_prediction(latency, args.model, target, shapes)
    measured, measured_ms = (measured_kernels(args.model, target, shapes) if args.measure
                             else (None, None))
    report = prediction_report(prediction, measured, measured_ms)
    print(prediction_table(report))
    if args.json:
        write_json_atomic(args.json, {"model": args.model, "target": json.loads(str(target)),
                                      **report})
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``tvm-cocopie`` argument parser with every subcommand (those of transfer-tuning and
    Hexagon included)."""
    parser = argparse.ArgumentParser(prog="tvm-cocopie", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="compile the embedded default model, compare with ORT")
    demo.add_argument("--model", help="zoo model name (default: resnet18)")
    demo.add_argument("--image-size", type=int, default=None)
    demo.add_argument("--threads", type=int, default=usable_cores())
    demo.add_argument("--repeat", type=int, default=5)
    demo.add_argument("--json", metavar="PATH")
    demo.set_defaults(func=cmd_demo)

    comp = sub.add_parser("compile", help="compile an ONNX model to a shared library")
    comp.add_argument("model", help="MODEL.onnx")
    comp.add_argument("--target", default=None, help='JSON dict, e.g. \'{"kind": "llvm"}\'')
    comp.add_argument("--shape", action="append", type=_parse_shape,
                      help="fix an input shape: NAME=1,3,224,224 (repeatable)")
    comp.add_argument("--pipeline", default="cocopie", help="cocopie (default) or default")
    comp.add_argument("-o", "--output", required=True, help="OUT.so")
    comp.set_defaults(func=cmd_compile)

    run = sub.add_parser("run", help="compile an ONNX model and run it once on given inputs")
    run.add_argument("model", help="MODEL.onnx")
    run.add_argument("--input", action="append", metavar="NAME=VALUE",
                     help="an input: an .npy path, or numbers (16000 for a scalar, 1,2,3,4 "
                          "for a static shape); repeatable")
    run.add_argument("--inputs", metavar="IN.npz", help="inputs by name from an .npz file")
    run.add_argument("--target", default=None, help='JSON dict, e.g. \'{"kind": "llvm"}\'')
    run.add_argument("--shape", action="append", type=_parse_shape,
                     help="fix an input shape: NAME=1,3,224,224 (repeatable)")
    run.add_argument("--pipeline", default="cocopie", help="cocopie (default) or default")
    run.add_argument("--save", metavar="OUT.npz", help="write the outputs, by name")
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="run scripts/bench_NAME.py with the given arguments")
    bench.add_argument("name", help="e2e, kernels, ...")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=cmd_bench)

    prune = sub.add_parser("prune", help="pattern + connectivity pruning of an ONNX model's "
                                         "3x3 convs (PatDNN), with its layerwise representation")
    prune.add_argument("model", help="MODEL.onnx")
    prune.add_argument("--patterns", type=int, default=8, help="pattern set size, 4 to 12")
    prune.add_argument("--connectivity", type=float, default=3.6,
                       help="kernels kept: 1 in this many (1: none removed)")
    prune.add_argument("--prune-first", action="store_true",
                       help="prune the first 3x3 conv's connectivity too (exempt by default)")
    prune.add_argument("-o", "--output", required=True, help="OUT.onnx")
    prune.add_argument("--lr", help="layerwise representation JSON (default: OUT.lr.json)")
    prune.set_defaults(func=cmd_prune)

    pred = sub.add_parser("predict", help="predict a model's latency with the latency model, "
                                          "per kernel (--measure: against measured times)")
    pred.add_argument("model", help="MODEL.onnx")
    pred.add_argument("--target", default=None, help='JSON dict, e.g. \'{"kind": "llvm"}\' '
                                                     "(default: this machine)")
    pred.add_argument("--shape", action="append", type=_parse_shape,
                      help="fix an input shape: NAME=1,3,224,224 (repeatable)")
    pred.add_argument("--model-file", default=None, metavar="PATH",
                      help="the latency model file (default: the target's in the cache "
                           "folder, as scripts/bench_latency_model.py saves it)")
    pred.add_argument("--measure", action="store_true",
                      help="also compile and run the model: measured us per kernel inside it "
                           "and ms per inference, and the prediction's errors")
    pred.add_argument("--json", metavar="PATH", help="write the table as JSON (atomically)")
    pred.set_defaults(func=cmd_predict)

    info = sub.add_parser("info", help="register and show the cocopie pipeline")
    info.set_defaults(func=cmd_info)
    _add_plugin_parsers(sub)
    return parser


#: Subcommands that live with their subsystem: (module, function adding the parsers).
PLUGIN_PARSERS = (
    ("tvm_cocopie.hexagon.cli", "add_parser"),  # hexagon run
    ("tvm_cocopie.transfer_tuning.cli", "add_parsers"),  # tune, transfer-tune
)


def _add_plugin_parsers(sub) -> None:
    import importlib

    for module_name, function in PLUGIN_PARSERS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue  # that subsystem's commands are not in this build
        getattr(module, function)(sub)


def main(argv=None) -> int:
    """Entry point of ``tvm-cocopie``: parse ``argv``, run the subcommand, report a
    :class:`~.errors.CocopieError` as one line; exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "threads", None):
        configure_thread_pool(args.threads)
    try:
        return args.func(args)
    except CocopieError as err:
        print(f"tvm-cocopie: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

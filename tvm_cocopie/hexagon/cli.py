"""``tvm-cocopie hexagon run MODEL.onnx``: a whole int8 model on emulated HVX.

Wire it with ``add_parser(subparsers)``. The command takes a float ONNX model (quantized
first with sample inputs, :mod:`tvm_cocopie.ptq`), a QDQ or a QOperator one, runs it whole
as one program under ``qemu-hexagon`` with GCD²'s global selection (seed 004, §4.4;
:mod:`.executor.model`), and reports packets per operator class, bit-exactness against
the numpy int8 reference and agreement with ONNX Runtime running the quantized file.
"""

from __future__ import annotations

import json
import logging

from ..emulation import toolchain
from ..errors import ToolchainError
from ..paths import write_json_atomic
from .executor.model import run_model

log = logging.getLogger(__name__)


def _image_size(text: str):
    """``N`` or ``HxW`` (argparse type)."""
    import argparse

    try:
        parts = [int(p) for p in text.lower().split("x")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--image-size wants N or HxW, got {text!r}") from None
    if len(parts) not in (1, 2) or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"--image-size wants N or HxW, got {text!r}")
    return parts[0] if len(parts) == 1 else tuple(parts)


def add_parser(subparsers):
    """Add ``hexagon`` (with ``run``) to an argparse ``subparsers`` object."""
    hexagon = subparsers.add_parser("hexagon", help="run int8 models on emulated Hexagon HVX")
    sub = hexagon.add_subparsers(dest="hexagon_command", required=True)
    run = sub.add_parser(
        "run", help="run a float, QDQ or QOperator ONNX model whole under qemu-hexagon")
    run.add_argument("model", help="ONNX file (one NCHW image input)")
    run.add_argument("--image-size", type=_image_size, default=None, metavar="N|HxW",
                     help="input size (48x192, or 224 for square), for models whose height "
                     "and width are symbolic")
    run.add_argument("--calibration", type=int, default=8,
                     help="sample inputs to calibrate a float model on (8)")
    run.add_argument("--seed", type=int, default=0, help="seed of the sample inputs")
    run.add_argument("--per-channel", action="store_true",
                     help="quantize a float model's weights per output channel (ONNX "
                     "Runtime's per_channel=True) instead of per tensor")
    run.add_argument("--save-quantized", metavar="DIR",
                     help="keep the QDQ file made from a float model in this folder")
    run.add_argument("--stock", action="store_true",
                     help="also run stock TVM's lowering of the same int8 model (slow)")
    run.add_argument("--no-ort", action="store_true", help="skip the ONNX Runtime comparison")
    run.add_argument("--packing", choices=("llvm", "sda", "soft_to_hard", "soft_to_none"),
                     help="re-pack the kernels' VLIW packets as the build's last step (SDA, "
                     "seed 004 §4.5) and report the cycle model's estimate")
    run.add_argument("--timeout", type=float, default=1800.0, help="emulator seconds")
    run.add_argument("--json", metavar="PATH", help="write the result here")
    run.set_defaults(func=cmd_run)
    return hexagon


def cmd_run(args) -> int:
    """``tvm-cocopie hexagon run MODEL.onnx``: run the whole model, check it; exit code."""
    if not toolchain.available():
        raise ToolchainError(
            f"missing {', '.join(toolchain.missing_tools())}; `make apt` installs them"
        )
    stock = None
    if args.stock:
        from .tools.measure import stock_network as stock
    result = run_model(args.model, image_size=args.image_size, calibration=args.calibration,
                       seed=args.seed, timeout=args.timeout, compare_ort=not args.no_ort,
                       stock_runner=stock, workdir=args.save_quantized,
                       packing=args.packing, per_channel=args.per_channel)
    result["model"] = str(args.model)
    by_class = ", ".join(f"{k} {v}" for k, v in sorted(result["packets_by_class"].items(),
                                                       key=lambda kv: -kv[1]))
    n_pc = result["per_channel_layers"]
    print(f"{result['layers']} layers {result['layers_by_class']}"
          f"{' (quantized from float)' if result['quantized_from_float'] else ''}"
          f"{f', {n_pc} requantized per channel' if n_pc else ''}; "
          f"{result['total_packets']} packets: {by_class}")
    if result.get("total_cycles") is not None:
        print(f"{result['packing']} packing: {result['total_cycles']} estimated cycles "
              f"(packets + stalls, hexagon.vliw.cycles)")
    print(f"bit-exact vs numpy: {result['exact']}")
    if "ort_agreement" in result:
        print(f"ONNX Runtime on the quantized file: {json.dumps(result['ort_agreement'])}")
    if "stock_tvm_packets" in result:
        print(f"stock TVM: {result['stock_tvm_packets']} packets "
              f"({result['packet_ratio_vs_tvm']}x ours)")
    if args.json:
        write_json_atomic(args.json, result)
    return 0 if result["exact"] else 1

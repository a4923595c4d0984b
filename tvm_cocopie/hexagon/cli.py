"""``tvm-cocopie hexagon run MODEL.onnx``: a model's int8 trunk on emulated HVX.

Wire it with ``add_parser(subparsers)``; the command reads the ONNX model
(:mod:`.executor.onnx_chain`), quantizes it per tensor (:mod:`.executor`), selects plans with
GCD²'s global selection over the cost model (seed 004, §4.4), runs the chain as one
program under ``qemu-hexagon`` and reports packets and bit-exactness against numpy.
"""

from __future__ import annotations

import json
import logging

from ..emulation import toolchain
from ..errors import ModelError, ToolchainError
from . import executor
from .executor import onnx_chain

log = logging.getLogger(__name__)


def add_parser(subparsers):
    """Add ``hexagon`` (with ``run``) to an argparse ``subparsers`` object."""
    hexagon = subparsers.add_parser("hexagon", help="run int8 models on emulated Hexagon HVX")
    sub = hexagon.add_subparsers(dest="hexagon_command", required=True)
    run = sub.add_parser("run", help="run an ONNX CNN's int8 trunk under qemu-hexagon")
    run.add_argument("model", help="ONNX file (NCHW input)")
    run.add_argument("--image-size", type=int, default=32, help="square input size (32)")
    run.add_argument("--max-layers", type=int, default=8, help="stop after this many convs")
    run.add_argument("--seed", type=int, default=0, help="seed of the input image")
    run.add_argument("--timeout", type=float, default=1800.0, help="emulator seconds")
    run.add_argument("--json", metavar="PATH", help="write the result here")
    run.set_defaults(func=cmd_run)
    return hexagon


def cmd_run(args) -> int:
    """``tvm-cocopie hexagon run MODEL.onnx``: quantize the model's int8-runnable trunk, run it
    under qemu-hexagon, check it bit for bit; exit code."""
    import onnx


    if not toolchain.available():
        raise ToolchainError(
            f"missing {', '.join(toolchain.missing_tools())}; `make apt` installs them"
        )
    try:
        model = onnx.load(args.model)
    except Exception as err:  # onnx raises several types for unreadable files
        raise ModelError(f"cannot read {args.model}: {err}") from err
    layers, weights, stopped = onnx_chain.conv_chain(model, args.image_size, args.max_layers)
    net = executor.quantize(layers, args.seed, weights)
    res = executor.run_network(net, timeout=args.timeout)
    result = {
        "model": str(args.model),
        "layers": [lay.name for lay in layers[1:]],
        "stopped": stopped,
        "plan": res.plan,
        "total_packets": res.total_packets,
        "packets_by_role": res.packets_by_role(),
        "arena_bytes": res.arena_bytes,
        "exact": res.exact,
    }
    print(
        f"{len(layers) - 1} layers ({stopped}); {res.total_packets} packets "
        f"{res.packets_by_role()}; bit-exact vs numpy: {res.exact}"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0 if res.exact else 1

"""``tvm-cocopie tune`` and ``tvm-cocopie transfer-tune`` (thesis ch. 6 as a tool).

    tvm-cocopie tune MODEL.onnx --trials N --log-dir DIR [--target JSON]
    tvm-cocopie transfer-tune MODEL.onnx --logs DIR [--ansor FILE ...] --target JSON --out DIR
        [--mode select|pool] [--rpc-tracker HOST:PORT --rpc-key KEY] [--budget-seconds S]
        [--prescreen LATENCY_MODEL.json [--prescreen-keep N]]

``tune`` runs MetaSchedule on the model's kernels (as the cocopie pipeline fuses
them) and leaves a database in DIR; ``transfer-tune`` reuses such databases (and
Ansor logs) for another model. Both are resumable: ``tune`` keeps what its
database already holds, ``transfer-tune`` never repeats a finished measurement in
``--out``. :func:`add_parsers` adds both to the main ``tvm-cocopie`` parser.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def _rpc(text: str | None, key: str | None):
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--rpc-tracker wants HOST:PORT, got {text!r}")
    if not key:
        raise argparse.ArgumentTypeError("--rpc-tracker needs --rpc-key (the devices' key)")
    return host, int(port), key


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants a whole number of 1 or more, got {text!r}")
    return value


def cmd_tune(args) -> int:
    """``tvm-cocopie tune``: MetaSchedule-tune a model's kernels into a work dir; exit code."""
    from ..target import parse_target

    target = parse_target(args.target) if args.target else None
    if target is None:
        from ..target import host_target

        target = host_target()
    from .tune import tune_model

    out = tune_model(args.model, target, args.log_dir, args.trials, population=args.population,
                     space=args.space)
    log.info("MetaSchedule database written to %s", out)
    print(f"tuned {args.model} with {args.trials} trials; database in {out}")
    return 0


def cmd_transfer_tune(args) -> int:
    """``tvm-cocopie transfer-tune``: read the logs, transfer-tune the model, write the database
    and report; exit code."""
    from ..errors import TuningLogError
    from ..target import parse_target
    from . import readers, search
    from .space import alloc_arguments

    target = parse_target(args.target)
    prescreen = None
    if args.prescreen:  # a missing or foreign model file fails before any work
        from ..latency import LatencyModel

        prescreen = LatencyModel.load(target, args.prescreen)
    records, summaries = [], []
    for root in args.logs or []:
        try:
            recs, summ = readers.read_logs(root, target)
        except TuningLogError as err:
            if not args.ansor:
                raise
            log.warning("%s", err)
            continue
        records += recs
        summaries.append(summ)
    for path in args.ansor or []:
        from . import ansor

        recs, summ = ansor.read_ansor_log(path, target, strict=not records)
        records += recs
        summaries.append(summ)
    if not records:
        raise TuningLogError("no usable tuning record in --logs/--ansor; nothing to transfer")
    records = readers.best_per_workload(records)  # each logged kernel's best schedule
    for s in summaries:
        print(s.explain())
    measurer = search.Measurer(target, rpc=_rpc(args.rpc_tracker, args.rpc_key),
                               f_alloc_argument=alloc_arguments)
    report = search.transfer_tune(args.model, records, target, args.out, mode=args.mode,
                                  measurer=measurer, budget_seconds=args.budget_seconds,
                                  progress=not args.quiet, max_candidates=args.max_candidates,
                                  second_pass=args.second_pass, prescreen=prescreen,
                                  prescreen_keep=args.prescreen_keep)
    if not args.no_model_check and not args.rpc_tracker:
        from ..bench.compare import measure_model
        from ..frontend.model import load_model
        from ..models import sample_inputs

        onnx_model = load_model(args.model)
        report.model = measure_model(args.model, target, args.out, sample_inputs(onnx_model),
                                            repeat=args.repeat)
        from ..paths import write_json_atomic

        write_json_atomic(Path(args.out) / search.REPORT_FILE, report.as_dict())
    print(report.table())
    print(f"database: {report.database} (apply with PipelineOptions(database=...) or "
          "relax.transform.MetaScheduleApplyDatabase)")
    return 0


def add_parsers(subparsers) -> None:
    """Add ``tune`` and ``transfer-tune`` to the ``tvm-cocopie`` subcommand parsers."""
    p = subparsers.add_parser("tune", help="MetaSchedule-tune a model's kernels into a log dir")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--trials", type=int, default=64, help="total MetaSchedule trials")
    p.add_argument("--log-dir", required=True, help="MetaSchedule work dir to write")
    p.add_argument("--target", default=None, help="target JSON (default: this machine)")
    p.add_argument("--population", type=int, default=512,
                   help="evolutionary search population (MetaSchedule's default 512)")
    p.add_argument("--space", choices=("cocopie", "stock"), default="cocopie",
                   help="search cocopie's rules' free choices (register tiles, loop order, "
                        "unroll; default) or MetaSchedule's own CPU rules")
    p.set_defaults(func=cmd_tune)

    p = subparsers.add_parser("transfer-tune",
                              help="reuse tuning logs of other models for this one (thesis ch. 6)")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--logs", action="append", default=[],
                   help="folder of MetaSchedule work dirs (repeatable)")
    p.add_argument("--ansor", action="append", default=[], help="legacy Ansor JSON-lines log (repeatable)")
    p.add_argument("--target", required=True, help='target JSON, e.g. {"kind": "llvm", "mcpu": "znver3"}')
    p.add_argument("--out", required=True, help="output dir: database, measurements, report.json")
    p.add_argument("--mode", choices=("select", "pool"), default="select",
                   help="one source model by score(T) (default) or all schedules")
    p.add_argument("--rpc-tracker", default=None, help="HOST:PORT of an RPC tracker")
    p.add_argument("--rpc-key", default=None, help="device key at the tracker")
    p.add_argument("--budget-seconds", type=float, default=None, help="stop trying candidates after S s")
    p.add_argument("--max-candidates", type=int, default=None,
                   help="transferred schedules measured per kernel, nearest source kernels first "
                        "(default: all)")
    p.add_argument("--prescreen", metavar="MODEL_FILE", default=None,
                   help="a latency model file for the target (scripts/bench_latency_model.py"
                        " --model-file): measure only the candidates it predicts fastest")
    p.add_argument("--prescreen-keep", type=_positive, default=3, metavar="N",
                   help="with --prescreen: candidates measured per kernel (default 3)")
    p.add_argument("--second-pass", action="store_true",
                   help="profile the tuned model and put kernels slower in it than predicted "
                        "back on their default schedule when that is faster there")
    p.add_argument("--repeat", type=int, default=10, help="end-to-end timing rounds")
    p.add_argument("--no-model-check", action="store_true", help="skip the end-to-end model timing")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_transfer_tune)

"""Legacy Ansor logs (v0.2-v0.6) as MetaSchedule records (thesis §6.3: Ansor was the source).

Ansor logs are JSON lines ``{"i": [[workload_key, target, ...], [[], steps]], "r":
[costs, error_no, ...], "v": version}``. The workload key names a compute DAG by a
hash and the shapes of its tensors; the DAG itself is not in the log. This importer
recognizes the DAG from the shapes:

* conv2d NHWC (data, HWIO weight, optional ``[1,1,1,C]`` bias, optional residual,
  output; stride and padding from the shapes) with ReLU;
* dense ``[M,K] x [N,K]`` with bias; ``matmul_add`` (named workload); global
  average pooling ``[N,H,W,C] -> [N,1,1,C]``;

rebuilds it as a PrimFunc (TE, block names as in TOPI) in the operation order Ansor's
``ComputeDAG`` has, and replays every transform step of the record on it
(:mod:`.ansor_steps`: SP, FSP, FFSP, RE, FU, AN, PR, CA, CI, CR, CHW, CHR, RF as
TIR schedule instructions, splits as ``sample_perfect_tile`` so that the tiles
transfer as §6.2.1 describes). A record with a step that does not fit, or whose
schedule does not build, is skipped as ``untranslatable``. Other targets, corrupt
lines and unknown DAGs are skipped and counted per reason.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import tvm
from tvm import te, topi

from ..errors import TuningLogError, last_line
from .ansor_steps import Untranslatable, dag_ops, replay
from .readers import ImportSummary, SourceRecord

log = logging.getLogger(__name__)

VERSIONS = ("v0.2", "v0.3", "v0.4", "v0.5", "v0.6")


class _Skip(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def _shapes(args: list) -> list[list[int]]:
    if all(isinstance(a, list) for a in args):
        return [[int(d) for d in a] for a in args]
    if all(isinstance(a, int) for a in args) and args and len(args) % 4 == 0:
        return [list(args[i:i + 4]) for i in range(0, len(args), 4)]
    raise _Skip("unknown_dag", f"cannot split arguments {args!r} into tensor shapes")


def _conv2d_nhwc(shapes):
    data, weight, *mid, out = shapes
    n, h, w, ci = data
    kh, kw, wci, co = weight
    if wci != ci or out[3] != co or out[0] != n:
        raise _Skip("unknown_dag", f"shapes {shapes} are not a NHWC conv2d")
    oh, ow = out[1], out[2]
    stride = max(1, round(h / oh))
    pad_h = max(0, ((oh - 1) * stride + kh - h + 1) // 2)
    pad_w = max(0, ((ow - 1) * stride + kw - w + 1) // 2)
    x = te.placeholder(data, name="data")
    k = te.placeholder(weight, name="weight")
    y = topi.nn.conv2d_nhwc(x, k, stride, (pad_h, pad_w), 1)
    if list(y.shape) != out and [int(d) for d in y.shape] != out:
        raise _Skip("unknown_dag", f"no stride/padding gives output {out} from {data}, {weight}")
    args = [x, k]
    for i, shp in enumerate(mid):
        t = te.placeholder(shp, name=f"in{i}")
        args.append(t)
        y = topi.add(y, t)
    y = topi.nn.relu(y)
    return args + [y], "conv2d_nhwc"


def _dense(shapes):
    (m, k), (n, k2), *rest = shapes
    if k != k2:
        raise _Skip("unknown_dag", f"shapes {shapes} are not a dense layer")
    x = te.placeholder((m, k), name="data")
    w = te.placeholder((n, k), name="weight")
    y = topi.nn.dense(x, w)
    args = [x, w]
    if len(rest) == 2:
        b = te.placeholder(rest[0], name="bias")
        args.append(b)
        y = topi.add(y, b)
    return args + [y], "T_matmul_NT"


def _matmul_add(n, m, k, dtype="float32"):
    a = te.placeholder((n, k), name="A", dtype=dtype)
    b = te.placeholder((k, m), name="B", dtype=dtype)
    c = te.placeholder((n, m), name="C", dtype=dtype)
    r = te.reduce_axis((0, k), name="k")
    mm = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="matmul")
    out = te.compute((n, m), lambda i, j: mm[i, j] + c[i, j], name="matmul_add")
    return [a, b, c, out], "matmul"


def _global_pool(shapes):
    (n, h, w, c), out = shapes[0], shapes[-1]
    if out != [n, 1, 1, c]:
        raise _Skip("unknown_dag", f"shapes {shapes} are not a global pooling")
    x = te.placeholder((n, h, w, c), name="data")
    y = topi.nn.global_pool(x, "avg", layout="NHWC")
    return [x, y], None


def recognize(workload_key: str):
    """``(te tensors, anchor op name)`` for an Ansor workload key, or raise ``_Skip``."""
    try:
        key = json.loads(workload_key)
    except ValueError as err:
        raise _Skip("corrupt_line", f"workload key is not JSON: {err}") from None
    if not isinstance(key, list) or not key or not isinstance(key[0], str):
        raise _Skip("corrupt_line", f"workload key {workload_key[:80]!r} has no name")
    name, args = key[0], key[1:]
    if name == "matmul_add" and len(args) >= 3:
        return _matmul_add(*args[:4])
    shapes = _shapes(args)
    ranks = [len(s) for s in shapes]
    if len(shapes) >= 3 and ranks[:2] == [4, 4] and ranks[-1] == 4:
        return _conv2d_nhwc(shapes)
    if len(shapes) >= 3 and ranks[:2] == [2, 2]:
        return _dense(shapes)
    if len(shapes) == 2 and ranks == [4, 4] and shapes[1][1:3] == [1, 1]:
        return _global_pool(shapes)
    raise _Skip("unknown_dag", f"no known DAG (conv2d/dense/matmul/pool) has tensors {shapes}")


def translate(workload: tvm.IRModule, tensors, steps):
    """A ``tvm.s_tir.Schedule`` of ``workload`` (the PrimFunc rebuilt from ``tensors``)
    with all ``steps`` replayed (:mod:`.ansor_steps`); raises ``_Skip("untranslatable")``
    for a step that does not fit."""
    from tvm.s_tir import Schedule

    sch = Schedule(workload)
    try:
        replay(sch, dag_ops([tensors[-1]]), steps)
    except Untranslatable as err:
        raise _Skip("untranslatable", str(err)) from None
    return sch


def _target_kind(text: str) -> str:
    return text.split()[0] if text else ""


def read_ansor_log(path: str | Path, target=None, strict: bool = True,
                   validate: bool = True) -> tuple[list[SourceRecord], ImportSummary]:
    """Import an Ansor JSON-lines log; returns MetaSchedule-ready records and a summary.

    Raises :class:`TuningLogError` when ``strict`` and nothing usable is left.
    """
    path = Path(path)
    if target is not None and not isinstance(target, tvm.target.Target):
        from ..target import parse_target

        target = parse_target(target)
    want = target.kind.name if target is not None else None
    summary = ImportSummary(source=str(path))
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as err:
        raise TuningLogError(f"cannot read Ansor log {path}: {err}") from err
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        summary.lines += 1
        where = f"{path.name}:{number}"
        try:
            rec = _import_line(line, want, summary, validate, target)
        except _Skip as skip:
            summary.skip(skip.reason, f"{where}: {skip}")
            continue
        rec.origin = f"{path}#{number}"
        rec.model = path.stem
        records.append(rec)
        summary.kept += 1
    if strict and not records:
        what = summary.explain() if summary.lines else "the file holds no record"
        raise TuningLogError(
            f"nothing usable in Ansor log {path}: {what}. Give a log tuned for "
            f"{want or 'this target'} (JSON lines with 'i', 'r' and 'v' keys, v0.2-v0.6), "
            "or a MetaSchedule work dir with --logs.")
    log.info("%s", summary.explain())
    return records, summary


def _import_line(line, want, summary, validate, target) -> SourceRecord:
    try:
        obj = json.loads(line)
        inp, res, version = obj["i"], obj["r"], obj.get("v", "")
        task, state = inp[0], inp[1]
        workload_key, target_text = task[0], task[1]
        steps = state[1]
        costs, error_no = res[0], res[1]
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise _Skip("corrupt_line", f"not an Ansor record ({type(err).__name__}: {err})") from None
    if version not in VERSIONS:
        raise _Skip("unknown_version", f"log version {version!r}, this reader knows {VERSIONS}")
    kind = _target_kind(str(target_text))
    if want is not None and kind != want:
        raise _Skip("foreign_target", f"tuned for {kind or '?'}, not {want}")
    if error_no != 0 or not costs or not all(isinstance(c, (int, float)) for c in costs):
        raise _Skip("failed_measurement", f"measurement error {error_no}")
    if not isinstance(steps, list) or not all(isinstance(s, list) and s for s in steps):
        raise _Skip("corrupt_line", "transform steps are malformed")
    tensors, _anchor = recognize(workload_key)
    workload = _unscheduled(tensors)
    try:
        sch = translate(workload, tensors, steps)
    except _Skip:
        raise
    except Exception as err:  # noqa: BLE001 - a step TIR refuses
        raise _Skip("untranslatable", last_line(err)) from None
    if validate and target is not None:
        try:
            tvm.compile(sch.mod, target=target)
        except Exception as err:  # noqa: BLE001
            raise _Skip("untranslatable", f"does not build: {last_line(err)}") from None
    summary.notes["steps_replayed"] += len(steps)
    return SourceRecord(workload, sch.trace, [float(c) for c in costs], target, "", "")


def _unscheduled(tensors) -> tvm.IRModule:
    func = te.create_prim_func(tensors).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func.with_attr("tirx.noalias", True)})

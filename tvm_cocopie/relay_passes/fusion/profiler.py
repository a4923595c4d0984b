"""Yellow pairs settled by measurement (seed 004, §3.4): fuse only what runs faster fused.

:class:`MeasuredDecision` is the ``decide`` of :func:`.plan.explore`. For a block and a
candidate it builds the fused kernel the way the pipeline would (the calls in a
``Primitive`` function, ``FuseTIR``), schedules it and each part with the schedule
rules it is given (the pipeline passes cocopie's own, so the measurement is of the code
that will run), times them on this machine and fuses if the fused kernel beats the sum
of the parts by ``margin``. Every measurement goes to the profiling database
(:mod:`.database`) keyed by the target, the kernels' structure and the shapes, so a
block seen once (in this model or another) is never measured again.

Before it is timed, the fused kernel is checked against its parts: both scheduled,
run on the same random inputs, compared. A candidate whose fused code computes other
numbers (a schedule that does not support the fused form), or that only the generic
schedule (the fallback) takes while one of its parts has a fast rule, is recorded as
infinitely slow and never fuses.

A candidate with a symbolic shape (SOD²: a run-time sequence, width or batch) is
measured at a planned size: ``main`` with each symbolic dim bound to ``plan_dims[name]``
(the user's ``dim_bounds``; else :data:`PLANNED_DIM`), each kernel timed as
``FuseTIR`` makes it for its call there (static shapes), and the decision holds for the symbolic kernel (the
database keys it by the planned shapes). Before, such a candidate stayed apart: a
dynamic model lost every yellow fusion.

With a latency model (``predictor``, :class:`~tvm_cocopie.latency.LatencyModel`) and
``measure_missing=False``, a candidate the database does not hold is decided by
prediction instead: the fused kernel and its parts, scheduled by the same rules, are
predicted standalone, and the same margin decides. A predicted fusion is still
checked against its parts before it is taken. Predictions are not written to the
profiling database (it holds measurements only). With ``measure_missing`` (the
default) and a latency ``dataset`` (:class:`~tvm_cocopie.latency.Dataset`), every
measured candidate also goes there, the fused kernel and each part as rows of kind
``fusion``, to train the latency model.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
from tvm.s_tir.dlight import ApplyDefaultSchedule

from ...errors import last_line
from ...exprs import param_dim_names, static_shape
from ...latency import Dataset, LatencyModel, Row, kernel_features
from ...tir_pipeline import tir_pipeline_for
from .apply import call_tir_again, fuse_blocks, is_scalar_arg
from .database import Entry, ProfileDB
from .mapping import param_buffer
from .plan import Block, Node, leaving
from .regions import fuse_tir

log = logging.getLogger(__name__)


class MeasuredDecision:
    """``decide(mod, nodes, candidate, fused_type) -> fuse?`` by measured latency.

    ``target``: where to measure; ``rules``: the dlight schedule rules that schedule
    kernels (the pipeline's own); ``db``: the profiling database (default file when
    ``None``); ``margin``: the fused kernel must be this fraction faster than its parts;
    the default, -0.02, lets it be 2% slower (within timing noise), because a fused kernel
    also saves a launch and writing and reading back an intermediate tensor, which
    timing each kernel alone, its inputs in cache, does not see.
    ``measured``, ``reused`` and ``predicted`` count candidates timed here, found in
    the database and decided by the latency model.
    ``flush_bytes``: caches flushed by this much before every timed call
    (:data:`FLUSH_BYTES`; 0 times each kernel hot, its inputs in cache).
    ``predictor``: a :class:`~tvm_cocopie.latency.LatencyModel`; with
    ``measure_missing=False`` a candidate not in the database is predicted (kept apart
    when there is no predictor), never measured. ``dataset``: a
    :class:`~tvm_cocopie.latency.Dataset` that every measured candidate is also stored
    in (kind ``fusion``, under ``source``).
    """

    def __init__(self, target, rules: list, db: ProfileDB | None = None, margin: float = -0.02,
                 min_repeat_ms: int = 5, flush_bytes: int | None = None,
                 predictor: LatencyModel | None = None, measure_missing: bool = True,
                 dataset: Dataset | None = None, source: str = "fusion",
                 plan_dims: dict | None = None):
        self.target = target
        self.plan_dims = {str(k): int(v) for k, v in (plan_dims or {}).items()}
        self._planned: tuple | None = None  # (module, its planned copy, var -> planned var)
        self.rules = list(rules)
        self.db = db if db is not None else ProfileDB()
        self.margin = margin
        self.min_repeat_ms = min_repeat_ms
        self.flush_bytes = FLUSH_BYTES if flush_bytes is None else int(flush_bytes)
        self.predictor = predictor
        self.measure_missing = measure_missing
        self.dataset = dataset
        self.source = source
        self.measured = 0
        self.reused = 0
        self.predicted = 0
        self._failed: set = set()  # candidates that could not be built or run, this run
        self._predictions: dict = {}  # candidate -> predicted Entry, this run

    def __call__(self, mod: tvm.IRModule, nodes: list, candidate, fused_type) -> bool:
        """Whether ``nodes`` + ``candidate`` fused beat each of their kernels alone."""
        group = sorted([*nodes, candidate], key=lambda n: n.index)
        return self._decide(mod, group, [[n] for n in group])

    def merge(self, mod: tvm.IRModule, first: list, second: list) -> bool:
        """Whether the blocks ``first`` and ``second`` fused into one beat the two
        fused blocks (:func:`.plan.merge_blocks`)."""
        group = sorted([*first, *second], key=lambda n: n.index)
        return self._decide(mod, group, [sorted(first, key=lambda n: n.index),
                                         sorted(second, key=lambda n: n.index)])

    def _decide(self, mod: tvm.IRModule, group: list, parts: list) -> bool:
        """Time ``group`` fused against the sum of ``parts`` (each fused alone; a part
        of one node is its kernel), through the database (a candidate it does not hold
        predicted instead, when not ``measure_missing``); fuse if faster by
        ``margin``."""
        out_at = [group.index(n) for n in leaving(group)]  # the results leaving the group
        shapes = [static_shape(n.var) for n in group]
        if any(s is None for s in shapes):  # symbolic: decided at the planned size
            planned = self._at_planned_size(mod)
            if planned is None:
                return False
            mod, renamed = planned
            group, parts = _renamed(group, renamed), [_renamed(p, renamed) for p in parts]
            shapes = [static_shape(n.var) for n in group]
            if any(s is None for s in shapes):
                return False
        bindings = {b.var: b.value for blk in mod["main"].body.blocks for b in blk.bindings}
        kernels = [bindings[n.var].args[0] for n in group]
        ops = [f"{tvm_ffi.structural_hash(mod[gv]) & 0xFFFFFFFFFFFF:x}" for gv in kernels]
        if any(len(p) > 1 for p in parts):  # a merge of blocks: the partition is in the key
            cuts = {p[-1].index for p in parts[:-1]}
            ops = [op + ("|" if n.index in cuts else "") for op, n in zip(ops, group)]
        if len(out_at) > 1:  # a further output (another kernel): marked in the key
            ops = [op + ("^" if i in out_at[:-1] else "") for i, op in enumerate(ops)]
        if self.flush_bytes:  # times taken with flushed caches are another measurement
            ops = [*ops, f"@flush={self.flush_bytes}"]
        entry = self.db.get(self.target, ops, shapes)
        name, key = "+".join(n.kernel for n in group), (tuple(ops), str(shapes))
        if entry is None and not self.measure_missing:
            entry = self._predicted(mod, group, parts, bindings, key, out_at)
            if entry is None:
                return False
        elif entry is None:
            if key in self._failed:
                return False
            funcs, times = [], []
            try:
                sub, fused_mod = self._candidate(mod, group, bindings, outputs=out_at)
                part_funcs = [self._part_func(mod, part, bindings) for part in parts]
                fused_func, fused_lib = _only_primfunc(fused_mod), None
                if self._loses_fast_schedule(fused_func, part_funcs):
                    log.info("fused candidate %s gets only the generic schedule where a "
                             "part has a fast one (kept apart, remembered)", name)
                elif (fused_lib := self._checked_build(sub, fused_mod)) is None:
                    log.warning("fused candidate %s computes other numbers than its parts "
                                "(kept apart, remembered)", name)
                if fused_lib is None:
                    fused, parts_us = math.inf, 0.0
                else:
                    funcs = [fused_func, *part_funcs]
                    libs = [fused_lib, *(build_scheduled(f, self.target, self.rules)
                                         for f in part_funcs)]
                    times = time_primfuncs(funcs, self.target, self.rules, self.min_repeat_ms,
                                           flush_bytes=self.flush_bytes, built=libs)
                    if abs(times[0] - sum(times[1:])) < CLOSE_CALL * sum(times[1:]):
                        # a close call: more rounds, each function its fastest of all
                        again = time_primfuncs(funcs, self.target, self.rules,
                                               self.min_repeat_ms, rounds=CLOSE_ROUNDS,
                                               flush_bytes=self.flush_bytes, built=libs)
                        times = [min(a, b) for a, b in zip(times, again)]
                    fused, parts_us = times[0], sum(times[1:])
            except Exception as err:  # noqa: BLE001 - a candidate that fails stays apart
                log.warning("fusion candidate %s not measured (kept apart): %s", name,
                            last_line(err))
                self._failed.add(key)
                return False
            entry = self.db.put(self.target, ops, shapes, Entry(fused, parts_us))
            self.measured += 1
            if self.dataset is not None and times:
                self._store_rows(group, parts, ops, funcs, times)
        else:
            self.reused += 1
        fuse = self._faster(entry)
        log.debug("yellow %s: fused %.1f us, parts %.1f us -> %s", name, entry.fused_us,
                  entry.parts_us, "fuse" if fuse else "apart")
        return fuse

    def _faster(self, entry: Entry) -> bool:
        """Whether ``entry``'s fused kernel beats its parts by ``margin``."""
        return entry.fused_us < (1.0 - self.margin) * entry.parts_us

    def _predicted(self, mod: tvm.IRModule, group: list, parts: list, bindings: dict,
                   key: tuple, out_at: list) -> Entry | None:
        """The candidate decided by the latency model: its predicted ``Entry`` (fused
        us, sum of the parts' us; a predicted fusion whose fused code computes other
        numbers than its parts: infinitely slow), remembered for this run only; ``None``
        (kept apart) without a predictor or when the kernels cannot be predicted."""
        if key in self._predictions:
            return self._predictions[key]
        name = "+".join(n.kernel for n in group)
        if self.predictor is None or key in self._failed:
            return None
        try:
            sub, fused_mod = self._candidate(mod, group, bindings, outputs=out_at)
            funcs = [_only_primfunc(fused_mod),
                     *(self._part_func(mod, part, bindings) for part in parts)]
            features = np.stack([self._features(f) for f in funcs])
            us = self.predictor.predict(features)
            entry = Entry(float(us[0]), float(sum(us[1:])))
            if self._faster(entry) and self._loses_fast_schedule(funcs[0], funcs[1:]):
                log.info("fused candidate %s gets only the generic schedule where a part "
                         "has a fast one (kept apart)", name)
                entry = Entry(math.inf, entry.parts_us)
            elif self._faster(entry) and self._checked_build(sub, fused_mod) is None:
                log.warning("fused candidate %s, predicted faster, computes other numbers "
                            "than its parts (kept apart)", name)
                entry = Entry(math.inf, entry.parts_us)
        except Exception as err:  # noqa: BLE001 - a candidate that fails stays apart
            log.warning("fusion candidate %s not predicted (kept apart): %s", name,
                        last_line(err))
            self._failed.add(key)
            return None
        self._predictions[key] = entry
        self.predicted += 1
        return entry

    def _loses_fast_schedule(self, fused: tvm.tirx.PrimFunc, parts: list) -> bool:
        """Whether the rules give ``fused`` only the generic schedule (the fallback)
        while one of ``parts`` gets a fast kernel of its own: such a fusion is never
        taken, whatever the timing says (issue 14: no fused kernel falls back where its
        parts had a fast schedule; a generic kernel that times about even on one
        shape loses on the next)."""
        rule = first_rule(fused, self.target, self.rules)
        if rule is None or not getattr(rule, "generic", False):
            return False
        for part in parts:
            rule = first_rule(part, self.target, self.rules)
            if rule is not None and not getattr(rule, "generic", False):
                return True
        return False

    def _features(self, func: tvm.tirx.PrimFunc):
        """The latency model's features of ``func`` scheduled by the rules, timed alone."""
        return kernel_features(scheduled_primfunc(func, self.target, self.rules), self.target,
                               standalone=True)

    def _store_rows(self, group: list, parts: list, ops: list, funcs: list,
                    times: list) -> None:
        """The measured fused kernel and its parts as latency-model rows (kind
        ``fusion``; a kernel whose features cannot be computed is left out, logged)."""
        flush = [op for op in ops if op.startswith("@")]
        hashes = [op.rstrip("|") for op in ops if not op.startswith("@")]
        index = {n.index: h for n, h in zip(group, hashes)}
        items = [("+".join(n.kernel for n in group), "+".join([*hashes, *flush]))]
        items += [("+".join(n.kernel for n in part),
                   "+".join([*(index[n.index] for n in part), *flush])) for part in parts]
        rows = []
        for (name, key), func, us in zip(items, funcs, times):
            if not math.isfinite(us):
                continue
            try:
                scheduled = scheduled_primfunc(func, self.target, self.rules)
                features = kernel_features(scheduled, self.target, standalone=True)
            except Exception as err:  # noqa: BLE001 - a row less, the decision stands
                log.warning("fusion kernel %s: no latency features (not stored): %s", name,
                            last_line(err))
                continue
            rows.append(Row(self.source, "fusion", key, name, features, float(us),
                            func=scheduled))
        self.dataset.put(rows)

    def _part_func(self, mod: tvm.IRModule, part: list, bindings: dict):
        """One part's PrimFunc: its kernel (specialized to its call's shapes where it
        has symbolic ones), or its nodes fused."""
        if len(part) == 1 and static_shape(part[0].var) is not None and _symbolic_kernel(
                mod[bindings[part[0].var].args[0]]):
            # a symbolic kernel called at the planned size: specialized by FuseTIR
            return _only_primfunc(self._candidate(mod, part, bindings, least=1)[1])
        if len(part) == 1:
            return mod[bindings[part[0].var].args[0]]
        return _only_primfunc(self._candidate(mod, part, bindings)[1])

    def _at_planned_size(self, mod: tvm.IRModule):
        """``(mod with main's symbolic dims bound to their planned sizes, its binding
        vars by the original ones)``, made once per module; ``None`` if it cannot be."""
        if self._planned is not None and self._planned[0] is mod:
            return self._planned[1:]
        main = mod["main"]
        names = {str(n) for n in param_dim_names(main)}  # the others follow from them
        try:
            planned = relax.transform.BindSymbolicVars(
                {n: self.plan_dims.get(n, PLANNED_DIM) for n in names}, "main")(mod)
            old = [b.var for blk in main.body.blocks for b in blk.bindings]
            new = [b.var for blk in planned["main"].body.blocks for b in blk.bindings]
            if len(old) != len(new):
                raise ValueError("binding the dims changed main's bindings")
        except Exception as err:  # noqa: BLE001 - symbolic candidates then stay apart
            log.warning("symbolic dims not bound to planned sizes (%s): symbolic fusion "
                        "candidates stay apart", last_line(err))
            self._planned = (mod, None, None)
            return None
        self._planned = (mod, planned, dict(zip(old, new)))
        return self._planned[1:]

    def _checked_build(self, sub: tvm.IRModule, fused: tvm.IRModule):
        """The fused kernel, scheduled and built, if it computes what its scheduled parts
        compute (random inputs; a schedule that miscompiles a fused block must not win),
        else ``None``. The fused kernel runs on an output filled with NaN: a schedule
        that leaves outputs unwritten (two did, under a concat and a transposing
        epilogue) fails here, where fresh zeroed memory could hide it."""
        lower = tvm.transform.Sequential([
            ApplyDefaultSchedule(*self.rules), *cpu_generic.dataflow_lower_passes(self.target),
            *cpu_generic.finalize_passes(self.target)])
        rng = np.random.default_rng(1)
        dev = tvm.cpu()
        args = [_random(static_shape(p), str(p.ty.dtype), rng) for p in sub["main"].params]
        with self.target:
            exe = tvm.compile(sub, target=self.target, relax_pipeline=lower,
                              tir_pipeline=tir_pipeline_for(self.target))
        vm = relax.VirtualMachine(exe, dev)
        result = vm["main"](*[tvm.runtime.tensor(a, dev) for a in args])
        refs = ([r.numpy() for r in result] if isinstance(result, (list, tuple))
                or type(result).__name__ == "Array" else [result.numpy()])
        ran = self._run_poisoned(fused, args)
        if ran is None:
            return None
        outs, lib = ran
        if [o.shape for o in outs] != [r.shape for r in refs]:
            return None
        for got, ref in zip(outs, refs):
            scale = float(np.nanmax(np.abs(ref), initial=0.0)) if ref.size else 0.0
            if not np.allclose(got, ref, rtol=1e-3, atol=1e-4 * max(scale, 1.0),
                               equal_nan=True):
                return None
        return lib

    def _run_poisoned(self, fused: tvm.IRModule, args: list):
        """Run the fused module's one kernel, scheduled, on ``args`` (the values of its
        ``main``'s parameters) with its outputs filled with NaN (zeros if not float):
        ``(the outputs, built kernel)``, or ``None`` if the module is not one kernel
        call."""
        main = fused["main"]
        calls = [b.value for blk in main.body.blocks for b in blk.bindings
                 if isinstance(b.value, relax.Call) and isinstance(b.value.args[0],
                                                                   tvm.ir.GlobalVar)]
        if len(calls) != 1:
            return None
        call = calls[0]
        func = fused[call.args[0]]
        params = list(main.params)
        inputs = []
        for arg in call.args[1].fields:
            if isinstance(arg, relax.Var):
                inputs.append(args[[p.same_as(arg) for p in params].index(True)])
            else:
                inputs.append(arg.data.numpy())
        outputs = []
        for p in func.params[len(inputs):]:
            buf = param_buffer(func, p)
            shape, dtype = [int(d) for d in buf.shape], str(buf.dtype)
            fill = np.nan if np.issubdtype(np.dtype(dtype), np.floating) else 0
            outputs.append(np.full(shape, fill, dtype))
        lib = build_scheduled(func, self.target, self.rules)
        dev = tvm.cpu()
        tensors = [tvm.runtime.tensor(a, dev) for a in (*inputs, *outputs)]
        lib["main"](*tensors)
        return [t.numpy() for t in tensors[len(inputs):]], lib

    def _candidate(self, mod: tvm.IRModule, group: list, bindings: dict, least: int = 2,
                   outputs: list | None = None):
        """The group's calls alone in a module (``sub``) and fused into one PrimFunc as
        the pipeline would fuse them (``fused``): ``(sub, fused)``. ``outputs``: the
        positions in ``group`` of the results leaving it (the last one's alone by
        default); several: ``sub`` returns them as a tuple, the kernel writes each."""
        outputs = outputs or [len(group) - 1]
        inside = {n.var for n in group}
        inputs, seen = [], set()
        for n in group:
            for arg in bindings[n.var].args[1].fields:
                if arg in inside or (isinstance(arg, relax.Var) and arg in seen):
                    continue
                if is_scalar_arg(arg):  # a (planned) dim: kept in the body
                    continue
                if isinstance(arg, relax.Var):
                    seen.add(arg)
                inputs.append(arg)
        params = [relax.Var(f"in{i}", a.ty) for i, a in enumerate(inputs)]
        env = dict(zip(inputs, params))
        sub = tvm.IRModule({gv: mod[gv] for gv in {bindings[n.var].args[0] for n in group}})
        bb = relax.BlockBuilder(sub)
        with bb.function("main", params):
            with bb.dataflow():
                for n in group:
                    call = bindings[n.var]
                    args = [env.get(a, a) for a in call.args[1].fields]
                    new = call_tir_again(call, args)
                    leaves = group.index(n) in outputs
                    env[n.var] = bb.emit_output(new) if leaves else bb.emit(new)
            results = [env[group[i].var] for i in outputs]
            bb.emit_func_output(results[0] if len(results) == 1 else relax.Tuple(results))
        sub = bb.get()
        main = sub["main"]
        vars_ = [b.var for blk in main.body.blocks for b in blk.bindings]
        nodes = [Node(i, v, n.kernel, n.kind, n.out_bytes, escapes=i in outputs)
                 for i, (v, n) in enumerate(zip(vars_, group))]
        fused = fuse_tir(fuse_blocks(sub, [Block(nodes, group[-1].kind)], least))
        return sub, fused


def first_rule(func: tvm.tirx.PrimFunc, target, rules: list):
    """The first rule of ``rules`` that schedules ``func`` for ``target`` (the one the
    pipeline's ``ApplyDefaultSchedule`` would take), or ``None``."""
    with target:
        for rule in rules:
            if rule.apply(func, target, False) is not None:
                return rule
    return None


#: the size a symbolic dim is measured at when no ``dim_bounds`` names it
PLANNED_DIM = 128


def _renamed(nodes: list, renamed: dict) -> list:
    """Copies of ``nodes`` bound to their vars in the planned module."""
    return [Node(n.index, renamed[n.var], n.kernel, n.kind, n.out_bytes) for n in nodes]


def _symbolic_kernel(func: tvm.tirx.PrimFunc) -> bool:
    """Whether a buffer parameter of ``func`` has a dim that is not a constant."""
    return any(not isinstance(d, tvm.tirx.IntImm)
               for p in func.params if isinstance(getattr(p, "ty", None), tvm.tirx.BufferType)
               for d in p.ty.shape)


def _only_primfunc(mod: tvm.IRModule) -> tvm.tirx.PrimFunc:
    prims = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    if len(prims) != 1:
        raise RuntimeError(f"fusing gave {len(prims)} kernels, not 1")
    return prims[0]


def _random(shape, dtype: str, rng) -> np.ndarray:
    """Standard-normal floats; integers zero (indices stay in bounds)."""
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)


def time_primfunc(func: tvm.tirx.PrimFunc, target, rules: list, min_repeat_ms: int = 5) -> float:
    """Microseconds of one call of ``func`` scheduled by ``rules`` on ``target`` (this
    machine), fastest of three rounds, on random inputs (integer inputs zero, so that
    indices stay in bounds)."""
    return time_primfuncs([func], target, rules, min_repeat_ms)[0]


#: Bytes of cache flushed before each call when a fusion candidate and its parts are
#: timed: more than the cores' L2 caches together, so that a kernel reads its inputs
#: from the last level or from memory, as inside a model where other layers ran in
#: between. Timed hot (inputs in L2, the same partition of the work on the same cores
#: as the previous call), a fused depthwise + projection at 28x28 lost to its parts
#: (201 vs 183 us); flushed, as in the model, it won (231 vs 273 us; znver1, 2 cores).
FLUSH_BYTES = 4 << 20


def scheduled_primfunc(func: tvm.tirx.PrimFunc, target, rules: list) -> tvm.tirx.PrimFunc:
    """``func`` (as ``main``) scheduled by ``rules`` for ``target``."""
    mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    with target:
        mod = ApplyDefaultSchedule(*rules)(mod)
    return mod["main"]


def build_scheduled(func: tvm.tirx.PrimFunc, target, rules: list):
    """``func`` scheduled by ``rules`` and built for ``target``: a module with ``main``."""
    mod = tvm.IRModule({"main": scheduled_primfunc(func, target, rules)})
    return tvm.compile(mod, target=target, tir_pipeline=tir_pipeline_for(target))


def time_primfuncs(funcs: list, target, rules: list, min_repeat_ms: int = 5,
                   rounds: int = 3, flush_bytes: int = 0, built: list | None = None
                   ) -> list[float]:
    """Microseconds of one call of each of ``funcs`` (as :func:`time_primfunc`), timed
    in turn, round after round, each the fastest of its rounds: a load that comes and
    goes (another process on a core) touches every function alike, and one quiet round
    is enough. ``flush_bytes``: flush that much cache before every call and take each
    round's median call (TVM's timer flushes before each repeat). ``built``: the first
    functions already built by :func:`build_scheduled` (not built again)."""
    dev = tvm.cpu()
    built = list(built or [])
    runs = []
    for i, func in enumerate(funcs):
        lib = built[i] if i < len(built) else build_scheduled(func, target, rules)
        rng = np.random.default_rng(0)
        args = []
        for p in func.params:
            buf = param_buffer(func, p)
            value = _random([int(d) for d in buf.shape], str(buf.dtype), rng)
            args.append(tvm.runtime.tensor(value, dev))
        if flush_bytes:
            timer = lib.mod.time_evaluator("main", dev, number=1, repeat=FLUSHED_CALLS,
                                           cache_flush_bytes=int(flush_bytes))
        else:
            timer = lib.mod.time_evaluator("main", dev, number=1, repeat=1,
                                           min_repeat_ms=min_repeat_ms)
        runs.append((timer, args))
    best = [math.inf] * len(funcs)
    for _ in range(rounds):
        for i, (timer, args) in enumerate(runs):
            best[i] = min(best[i], float(np.median(timer(*args).results)) * 1e6)
    return best


#: calls per round when timed with flushed caches (each after its own flush)
FLUSHED_CALLS = 9

#: a candidate whose fused kernel and parts time within this fraction of each other is
#: timed :data:`CLOSE_ROUNDS` more rounds before it is decided: three rounds decided
#: BERT's FFN2 + layer norm either way from one run to the next (329 vs 305 us, then
#: fused), so the kernel counts of a model changed between fresh databases
CLOSE_CALL = 0.1
CLOSE_ROUNDS = 6

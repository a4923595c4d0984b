#!/usr/bin/env python
"""Hexagon HVX int8 kernels in packets: GCD²'s Table 4.2 in our numbers, and stock TVM.

Under ``qemu-hexagon`` (V66, 128-byte HVX) every kernel runs on random data, is
checked bit for bit against numpy, and its executed VLIW packets are counted
(deterministic, so one run each). Reports:

- Table 4.2 (seed 004, ch. 4): MatMul M=K=N in {32, 64, 96, 128}: packets of the
  ``vmpa`` and ``vrmpy`` kernels normalized to ``vmpy``, the winner, and total data
  size with padding normalized to ``vmpy``, next to the thesis' numbers;
- stock TVM's default lowering of the same int8 matmul / conv for the same target
  against the best GCD² variant (``speedup = stock packets / ours``);
- convolutions (1x1, 3x3, 7x7/2, depthwise 3x3) in the three layouts;
- on-device layout transforms (the edge costs of GCD²'s layout selection).

- the first 8 unique convolutions of ResNet-50 in int8 (spatial size divided by
  ``--resnet-scale``: 4 by default, 8 with ``--quick``, because stock TVM's scalar code
  runs ~1.2 packets per MAC and the emulator ~10^5 packets/s; channels are kept):
  GCD² (the variant the cost model selects) against stock TVM's default lowering and
  against stock TVM's own ``vrmpy`` tensor intrinsic (``VRMPY_u8i8i32_INTRIN``)
  tensorized into the conv, the better of a hand schedule
  (:mod:`tvm_cocopie.hexagon.tools.tvm_vrmpy`) and a MetaSchedule search of ``--ms-trials``
  candidates per layer (budget: 16 by default, 4 with ``--quick`` on two layers; each
  candidate built and measured in packets under QEMU and checked against numpy by
  :mod:`tvm_cocopie.hexagon.tools.ms_runner`; finished layers are cached in ``--ms-cache``
  so a rerun resumes); MACs per packet against the HVX peak, for our kernels also at the
  layers' real sizes (224x224 input: ``peak_fraction``; at the scale:
  ``peak_fraction_at_scale``);
- GCD²'s global layout/instruction selection against local per-op choice on the
  int8 ResNet-50 and MobileNetV2 layer graphs (224x224, cost model), with search time;
- the static executor running int8 networks as one program each (MobileNetV2's first
  blocks, ResNet-50's stem, max pool and first two bottlenecks with residual adds),
  bit-exact against numpy, with the global plan against the local one, both measured;
- whole models (``--models``, ``--models-only``): zoo models quantized to QDQ and run whole
  (the executor), against stock TVM's lowering of the same int8 network, numpy and ONNX
  Runtime, and the same file through the front door (``tvm_cocopie.from_onnx(path,
  int8=True)``) and ``tvm.compile``'s cocopie pipeline (``tvm_compile_packets``,
  ``tvm_compile_exact``; ``models_exact`` needs both paths exact).

JSON (``--json PATH``): ``{"bench": "hexagon", "machine", "records", "summary"}``;
records ``{op, impl, shape, packets, exact, ...}``; summary keys ``table_4_2``,
``thesis_table_4_2``, ``speedup_vs_stock`` (per operator), ``geomean_speedup_vs_stock``,
``packet_ratio_vs_tvm`` (goal >= 3.4, seed 004 §4.5.2), ``packet_ratio_vs_tvm_vrmpy``
(goal >= 1.5, against the better of hand schedule and MetaSchedule; per layer
``tvm_vrmpy_hand_packets``, ``tvm_vrmpy_ms_packets``, ``ms_trials``, ``ms_search_s``), ``peak_fraction`` (goal >= 0.8; the real sizes) and
``peak_fraction_at_scale``, ``global_over_local``, ``selection_by_cycles`` (the same selections priced in estimated cycles), ``network``, ``all_exact``. With ``--packing sda`` the ResNet-50 convs are re-packed and ``peak_fraction_per_cycle`` added.

    python scripts/bench_hexagon.py --quick --json bench_hexagon.json
"""

import argparse
import logging
import sys

log = logging.getLogger("bench_hexagon")

#: seed 004, Table 4.2: latency and data size with padding, normalized to vmpy.
THESIS_TABLE_4_2 = {
    32: {
        "latency": {"vmpy": 1.00, "vmpa": 0.79, "vrmpy": 0.63},
        "data": {"vmpy": 1.00, "vmpa": 0.56, "vrmpy": 0.33},
    },
    64: {
        "latency": {"vmpy": 1.00, "vmpa": 0.69, "vrmpy": 0.76},
        "data": {"vmpy": 1.00, "vmpa": 0.60, "vrmpy": 0.60},
    },
    96: {
        "latency": {"vmpy": 1.00, "vmpa": 1.06, "vrmpy": 0.89},
        "data": {"vmpy": 1.00, "vmpa": 1.00, "vrmpy": 0.82},
    },
    128: {
        "latency": {"vmpy": 1.00, "vmpa": 1.10, "vrmpy": 1.23},
        "data": {"vmpy": 1.00, "vmpa": 1.00, "vrmpy": 1.00},
    },
}

VARIANTS = ("vmpy", "vmpa", "vrmpy")

# (H, W, C, O, kernel, stride, pad, depthwise): ResNet-50's Table 4.3 kinds, scaled so
# that stock TVM's scalar code finishes under the emulator in seconds.
QUICK_CONVS = [
    (14, 14, 32, 32, 1, 1, 0, False),
    (8, 8, 16, 16, 3, 1, 1, False),
]
FULL_CONVS = [
    (28, 28, 64, 64, 1, 1, 0, False),
    (14, 14, 64, 64, 3, 1, 1, False),
    (32, 32, 3, 32, 7, 2, 3, False),
    (28, 28, 32, 32, 3, 1, 1, True),
]


#: Peak int8 MACs per VLIW packet of one HVX context: two vector multiply resources
#: per packet (Hexagon V66 HVX Programmer's Reference Manual, 80-N2040-44, resource
#: model: slots 2 and 3 each hold one HVX multiply), each ``vrmpy`` 32 x 4 = 128 MACs.
HVX_PEAK_MACS_PER_PACKET = 256


#: Whole models of issue 21 (zoo names): GCD²'s CNNs and transformer (``--quick``: two).
WHOLE_MODELS = ("resnet50", "mobilenetv2", "mobilenetv3_small", "bert_encoder")
QUICK_MODELS = ("mobilenetv2", "mobilenetv3_small")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes 32 and 64, two small convs")
    p.add_argument("--sizes", help="comma-separated M=K=N sizes (default 32,64,96,128)")
    p.add_argument("--no-stock", action="store_true", help="skip stock TVM (slow to emulate)")
    p.add_argument("--no-conv", action="store_true", help="matmul only")
    p.add_argument("--resnet-scale", type=int, help="divide ResNet-50 spatial sizes (4; quick 8)")
    p.add_argument("--no-resnet", action="store_true", help="skip the ResNet-50 conv part")
    p.add_argument("--resnet-only", action="store_true", help="only the ResNet-50 conv part")
    p.add_argument("--packing", choices=("llvm", "sda", "soft_to_hard", "soft_to_none"),
                   help="re-pack our ResNet-50 conv kernels' packets (hexagon.vliw.repack) and "
                   "also report estimated cycles (hexagon.vliw.cycles) and the peak fraction "
                   "per cycle")
    p.add_argument(
        "--ms-trials", type=int, help="MetaSchedule trials per ResNet-50 layer (16; quick 4)"
    )
    p.add_argument("--ms-cache", help="per-layer MetaSchedule results (resume); default in cache")
    p.add_argument("--models", help="whole models, comma-separated zoo names (default: "
                   + ",".join(WHOLE_MODELS) + "; quick: " + ",".join(QUICK_MODELS)
                   + "); 'none' to skip")
    p.add_argument("--model-size", type=int, default=32,
                   help="input size of the whole models (32: the emulator runs stock TVM's "
                   "scalar code at ~2M packets/s)")
    p.add_argument("--models-only", action="store_true", help="only the whole models")
    p.add_argument("--seq", type=int, default=32,
                   help="sequence length of the BERT-style encoder (32; its default is 128)")
    p.add_argument("--model-cache", help="stock TVM packets per quantized model (resume); "
                   "default in the cache folder")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per emulated run")
    p.add_argument("--json", metavar="PATH", help="write results here")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def _measure(records, fn, *args, **kwargs):
    rec = fn(*args, **kwargs)
    log.info(
        "%-16s %-24s %-26s %10d packets %s",
        rec["op"],
        rec["impl"],
        rec["shape"],
        rec["packets"],
        "exact" if rec["exact"] else "MISMATCH",
    )
    records.append(rec)
    return rec


def table_4_2(records, sizes):
    rows = {}
    for s in sizes:
        recs = {r["impl"]: r for r in records if r["op"] == "matmul" and r["shape"] == [s] * 3}
        base = recs["vmpy"]
        lat = {v: recs[v]["packets"] / base["packets"] for v in VARIANTS}
        data = {v: recs[v]["data_bytes"] / base["data_bytes"] for v in VARIANTS}
        rows[s] = {
            "latency": {v: round(x, 3) for v, x in lat.items()},
            "data": {v: round(x, 3) for v, x in data.items()},
            "winner": min(VARIANTS, key=lambda v: lat[v]),
            "thesis_winner": min(VARIANTS, key=lambda v: THESIS_TABLE_4_2[s]["latency"][v])
            if s in THESIS_TABLE_4_2
            else None,
        }
    return rows


def stock_speedups(records):
    out = []
    keyed = {}
    for r in records:
        if r["op"] != "layout_transform":
            keyed.setdefault((r["op"], tuple(r["shape"])), {})[r["impl"]] = r
    for (op, shape), impls in keyed.items():
        if "stock" not in impls:
            continue
        ours = {k: v for k, v in impls.items() if k in VARIANTS}
        best = min(ours, key=lambda k: ours[k]["packets"])
        out.append(
            {
                "op": op,
                "shape": list(shape),
                "stock_packets": impls["stock"]["packets"],
                "best": best,
                "best_packets": ours[best]["packets"],
                "speedup": round(impls["stock"]["packets"] / ours[best]["packets"], 2),
            }
        )
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    log.setLevel(logging.INFO)
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.emulation import toolchain
    from tvm_cocopie.hexagon.tools import measure
    from tvm_cocopie.target import HEXAGON_V66
    from tvm_cocopie.topi.int8 import layouts

    if not toolchain.available():
        log.error("missing %s; `make apt` installs them", ", ".join(toolchain.missing_tools()))
        return 2
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else [32, 64]
        if args.quick
        else [32, 64, 96, 128]
    )
    convs = [] if args.no_conv else QUICK_CONVS if args.quick else FULL_CONVS
    t = {"timeout": args.timeout}
    records: list = []
    if args.resnet_only or args.models_only:
        sizes, convs = [], []
    for s in sizes:
        for v in VARIANTS:
            _measure(records, measure.gcd2_matmul, v, s, s, s, **t)
        if not args.no_stock:
            _measure(records, measure.stock_matmul, s, s, s, **t)
    for h, w, c, o, k, st, pad, dw in convs:
        for v in VARIANTS:
            _measure(records, measure.gcd2_conv, v, h, w, c, o, k, st, pad, dw, **t)
        if not args.no_stock:
            _measure(records, measure.stock_conv, h, w, c, o, k, st, pad, dw, **t)
    chain = [None, layouts.ONE_COLUMN, layouts.TWO_COLUMN, layouts.FOUR_COLUMN]
    for src in chain if sizes else []:
        m = sizes[0]
        for dst in chain:
            if src is not dst and (src is None or dst is None or not args.quick):
                _measure(records, measure.layout_transform, src, dst, m, m, **t)

    only = args.models_only
    resnet = {} if args.no_resnet or only else resnet_convs(records, args, t)
    selection_summary = {} if args.resnet_only or only else global_vs_local()
    network = {} if args.resnet_only or only else run_network(records, t, args.quick)
    names = ((QUICK_MODELS if args.quick else WHOLE_MODELS) if args.models is None else
             [] if args.models == "none" else args.models.split(","))
    models = whole_models(records, names, args, t) if names and not args.resnet_only else {}

    table = table_4_2(records, sizes)
    speedups = stock_speedups(records)
    summary = {
        "table_4_2": table,
        "thesis_table_4_2": {s: THESIS_TABLE_4_2[s] for s in sizes if s in THESIS_TABLE_4_2},
        "speedup_vs_stock": speedups,
        "geomean_speedup_vs_stock": round(bm.geomean(r["speedup"] for r in speedups), 2)
        if speedups
        else None,
        **resnet,
        "global_over_local": selection_summary,
        "selection_by_cycles": {} if args.resnet_only or only else _selection_by_cycles(),
        "network": network,
        **models,
        "all_exact": all(r["exact"] for r in records),
        "unit": "executed VLIW packets under qemu-hexagon (-singlestep -d exec,nochain)",
    }
    _report(table, speedups, summary)
    if args.json:
        result = bm.bench_result("hexagon", records, summary)
        result["machine"].update(_emulator_info(HEXAGON_V66))
        bm.write_json_atomic(args.json, result)
    return 0 if summary["all_exact"] else 1


def resnet_convs(records, args, t) -> dict:
    """ResNet-50's first 8 unique convs: GCD² vs stock TVM vs TVM's vrmpy intrinsic."""
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.hexagon.selection import costmodel
    from tvm_cocopie.hexagon.selection.networks import RESNET50_FIRST_CONVS as RESNET50_CONVS
    from tvm_cocopie.hexagon.tools import measure
    from tvm_cocopie.topi.int8.layouts import GridGeometry

    model = costmodel.CostModel.default()
    scale = args.resnet_scale or (8 if args.quick else 4)
    # --quick emulates stock TVM's scalar code on two of the layers only
    stock_layers = {1, 4} if args.quick else set(range(len(RESNET50_CONVS)))
    ms_layers = {1, 4} if args.quick else set(range(len(RESNET50_CONVS)))
    ms_trials = args.ms_trials or (4 if args.quick else 16)
    ms_cache = args.ms_cache or str(_default_ms_cache())
    layers = []
    for index, (h, w, c, o, k, s, p) in enumerate(RESNET50_CONVS):
        hs, ws = max(h // scale, k), max(w // scale, k)
        geo = GridGeometry(hs, ws, k, s, p)
        # 8-bit per-tensor weights reach |w| = 127: vmpa is not exact, not a candidate
        costs = {v: model.conv(v, geo, c, o) for v in ("vmpy", "vrmpy")}
        chosen = min(costs, key=costs.get)
        shape = (hs, ws, c, o, k, s, p)
        packing = {}
        if args.packing:
            from tvm_cocopie.hexagon.vliw.repack import Repack

            packing = {"asm_pass": Repack(args.packing), "cycles": True}
        ours = _measure(records, measure.gcd2_conv, chosen, *shape, **t, **packing)
        # our kernel also at the layer's real size (the scale is for stock TVM's scalar code)
        full_geo = GridGeometry(h, w, k, s, p)
        full_chosen = min(("vmpy", "vrmpy"), key=lambda v: model.conv(v, full_geo, c, o))
        full = ours if scale == 1 else _measure(records, measure.gcd2_conv, full_chosen,
                                                h, w, c, o, k, s, p, **t, **packing)
        vr = _measure(records, measure.tvm_vrmpy_conv, *shape, **t)
        ms_rec = None
        if index in ms_layers:
            ms_rec = _ms_search(records, ms_cache, shape, ms_trials, t)
        ms_packets = ms_rec["packets"] if ms_rec and ms_rec["exact"] else None
        best_vrmpy = min(p for p in (vr["packets"], ms_packets) if p is not None)
        stock = None
        if not args.no_stock and index in stock_layers:
            stock = _measure(records, measure.stock_conv, *shape, **t)
        macs = geo.out_h * geo.out_w * k * k * c * o
        layers.append(
            {
                "shape": list(shape),
                "full_shape": [h, w, c, o, k, s, p],
                "chosen": chosen,
                "predicted_packets": round(costs[chosen]),
                "packets": ours["packets"],
                "tvm_vrmpy_packets": best_vrmpy,
                "tvm_vrmpy_hand_packets": vr["packets"],
                "tvm_vrmpy_ms_packets": ms_packets,
                "ms_trials": ms_rec["ms_trials"] if ms_rec else None,
                "ms_search_s": ms_rec["ms_search_s"] if ms_rec else None,
                "stock_packets": stock["packets"] if stock else None,
                "macs": macs,
                "macs_per_packet": round(macs / ours["packets"], 1),
                "cycles": ours.get("cycles"),
                "full_chosen": full_chosen,
                "full_packets": full["packets"],
                "full_macs": full_geo.out_h * full_geo.out_w * k * k * c * o,
                "full_cycles": full.get("cycles"),
            }
        )
        layers[-1]["full_peak_fraction"] = round(
            layers[-1]["full_macs"] / full["packets"] / HVX_PEAK_MACS_PER_PACKET, 3)
    total = sum(r["packets"] for r in layers)
    macs = sum(r["macs"] for r in layers)
    full_total = sum(r["full_packets"] for r in layers)
    full_macs = sum(r["full_macs"] for r in layers)
    out = {
        "resnet50_convs": layers,
        "resnet50_spatial_scale": f"1/{scale}",
        "packet_ratio_vs_tvm_vrmpy": round(
            bm.geomean(r["tvm_vrmpy_packets"] / r["packets"] for r in layers), 2
        ),
        "packet_ratio_vs_tvm_vrmpy_total": round(
            sum(r["tvm_vrmpy_packets"] for r in layers) / total, 2
        ),
        "tvm_vrmpy_schedule": (
            "VRMPY_u8i8i32_INTRIN: per layer the better of a hand schedule and a MetaSchedule "
            f"search (MultiLevelTilingWithIntrin SRSRS, evolutionary, XGBoost cost model) of "
            f"{ms_trials} trials measured under QEMU, on layers {sorted(ms_layers)}"
        ),
        "ms_trials_budget": ms_trials,
        "ms_search_s_total": round(sum(r["ms_search_s"] or 0 for r in layers), 1),
        "ms_wins_layers": sum(
            1
            for r in layers
            if r["tvm_vrmpy_ms_packets"] and r["tvm_vrmpy_ms_packets"] < r["tvm_vrmpy_hand_packets"]
        ),
        "macs_per_packet": round(macs / total, 1),
        "hvx_peak_macs_per_packet": HVX_PEAK_MACS_PER_PACKET,
        # the layers at their real sizes (224x224 input); at the comparisons' scale beside
        "peak_fraction": round(full_macs / full_total / HVX_PEAK_MACS_PER_PACKET, 3),
        "peak_fraction_at_scale": round(macs / total / HVX_PEAK_MACS_PER_PACKET, 3),
        "packing": args.packing or "llvm (TVM's object, not re-assembled)",
        "goals": {"packet_ratio_vs_tvm": 3.4, "packet_ratio_vs_tvm_vrmpy": 1.5},
    }
    if args.packing:
        cycles = sum(r["cycles"] for r in layers)
        full_cycles = sum(r["full_cycles"] for r in layers)
        out["cycles_total"] = full_cycles
        out["peak_fraction_per_cycle"] = round(
            full_macs / full_cycles / HVX_PEAK_MACS_PER_PACKET, 3)
        out["peak_fraction_per_cycle_at_scale"] = round(
            macs / cycles / HVX_PEAK_MACS_PER_PACKET, 3)
    with_stock = [r for r in layers if r["stock_packets"]]
    if with_stock:
        out["packet_ratio_vs_tvm"] = round(
            bm.geomean(r["stock_packets"] / r["packets"] for r in with_stock), 2
        )
        out["packet_ratio_vs_tvm_total"] = round(
            sum(r["stock_packets"] for r in with_stock) / sum(r["packets"] for r in with_stock), 2
        )
        out["packet_ratio_vs_tvm_layers"] = len(with_stock)
    return out


def _default_ms_cache():
    from tvm_cocopie.emulation.hexagon import cache_root

    return cache_root().parent / "bench_hexagon_ms.json"


def _ms_search(records, cache_path, shape, trials, t) -> dict:
    """MetaSchedule one layer (or take it from the per-layer cache, written atomically)."""
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.hexagon.tools import measure

    key = f"{list(shape)}|trials={trials}|seed=0"
    rec = bm.read_result_cache(cache_path).get(key)
    if rec is None:
        rec = measure.tvm_vrmpy_ms_conv(*shape, trials, **t)
        if rec["exact"]:
            bm.store_result(cache_path, key, rec)
    else:
        rec = {**rec, "from_cache": True}
    log.info(
        "%-16s %-24s %-26s %10s packets %s (%d trials, %.0f s search)",
        rec["op"],
        rec["impl"],
        rec["shape"],
        rec["packets"],
        "exact" if rec["exact"] else "MISMATCH",
        rec["ms_trials"],
        rec["ms_search_s"],
    )
    records.append(rec)
    return rec


def _selection_by_cycles() -> dict:
    """Global/local selection priced in estimated cycles instead of packets (issue 19 item 4):
    plans that change, and ``global_over_local`` under both cost models."""
    from tvm_cocopie.hexagon.tools import cycle_selection

    return cycle_selection.cycles_vs_packets_selection()


def global_vs_local() -> dict:
    """Eq. 4.1 cost of local choice over GCD²'s global selection (cost model)."""
    from tvm_cocopie.hexagon import selection
    from tvm_cocopie.hexagon.selection import networks

    out = {}
    for name, layers in (
        ("resnet50", networks.resnet50_layers()),
        ("mobilenetv2", networks.mobilenetv2_layers()),
    ):
        for weights, ok in (("int8", False), ("int7", True)):
            graph = networks.selection_graph(layers, vmpa_ok=lambda lay, ok=ok: ok)
            loc = selection.local_select(graph)
            glo = selection.global_select(graph)
            exact = selection.frontier_select(graph)
            key = name if weights == "int8" else f"{name}_7bit_weights"
            # why local is (nearly) global: how far each operator's second-best plan is
            gaps = sorted(
                sorted(n.plans.values())[1] / min(n.plans.values())
                for n in graph.nodes
                if len(set(n.plans.values())) > 1
            )
            out[key] = {
                "ratio": round(loc.cost / glo.cost, 4),
                "local_op_packets": round(loc.op_cost(graph)),
                "global_op_packets": round(glo.op_cost(graph)),
                "second_best_over_best_min": round(gaps[0], 3),
                "second_best_over_best_median": round(gaps[len(gaps) // 2], 3),
                "ops_within_5pct_of_best": sum(g < 1.05 for g in gaps),
                "local_packets": round(loc.cost),
                "global_packets": round(glo.cost),
                "exact_dp_packets": round(exact.cost),
                "local_transform_packets": round(loc.transform_cost(graph)),
                "global_transform_packets": round(glo.transform_cost(graph)),
                "operators": len(graph.nodes),
                "partitions": glo.parts,
                "selection_seconds": round(glo.seconds, 4),
                "exact_dp_seconds": round(exact.seconds, 4),
                "local_plans_differing": sum(loc.plan[n] != glo.plan[n] for n in glo.plan),
            }
            log.info("selection %s: local/global %.4f", key, out[key]["ratio"])
    return out


#: Networks the static executor runs (32x32 input, int8), residual adds included.
NETWORKS = {
    "mobilenetv2_head": (
        "MobileNetV2 stem + first two inverted residual blocks",
        lambda executor: executor.mobilenetv2_head(32),
    ),
    "mobilenetv2_blocks": (
        "MobileNetV2 stem + first three inverted residuals (the third with its add)",
        lambda executor: executor.mobilenetv2_blocks(32),
    ),
    "resnet50_head": (
        "ResNet-50 stem, max pool, two bottlenecks with shortcuts and adds",
        lambda executor: executor.resnet50_head(32, 2),
    ),
}


def run_network(records, t, quick: bool = False) -> dict:
    """The static executor on whole int8 networks (32x32 input), bit-exact vs numpy;
    GCD²'s global plan against local per-op choice, both measured on the emulator."""
    from tvm_cocopie.hexagon import executor

    out = {}
    names = ["mobilenetv2_head", "resnet50_head"] if quick else list(NETWORKS)
    for name in names:
        title, layers = NETWORKS[name]
        net = executor.quantize(layers(executor), seed=0)
        res = executor.run_network(net, timeout=t["timeout"])
        rec = {
            "op": "network",
            "impl": name,
            "shape": [1, 32, 32, 3],
            "packets": res.total_packets,
            "exact": res.exact,
        }
        records.append(rec)
        log.info("network %s: %d packets, exact=%s", name, res.total_packets, res.exact)
        row = {
            "model": f"{title}, 32x32, int8",
            "total_packets": res.total_packets,
            "packets_by_role": res.packets_by_role(),
            "plan": res.plan,
            "macs": sum(q.layer.macs for q in net.layers),
            "arena_bytes": res.arena_bytes,
            "separate_buffer_bytes": res.naive_bytes,
            "exact": res.exact,
        }
        local = executor.choose_plans(net, local=True)
        if local != res.plan:
            loc = executor.run_network(net, local, timeout=t["timeout"])
            records.append(
                {
                    **rec,
                    "impl": f"{name}_local_plan",
                    "packets": loc.total_packets,
                    "exact": loc.exact,
                }
            )
            row["local_plan_packets"] = loc.total_packets
        else:
            row["local_plan_packets"] = res.total_packets
        row["measured_global_over_local"] = round(row["local_plan_packets"] / res.total_packets, 4)
        if name == "mobilenetv2_head":
            # a layout change at every layer (measured): what ignoring transforms costs
            mixed = dict.fromkeys(res.plan, "vrmpy")
            for lay, variant in zip(sorted(mixed), ("vmpy", "vrmpy") * len(mixed)):
                mixed[lay] = variant
            alt = executor.run_network(net, mixed, timeout=t["timeout"])
            records.append(
                {
                    **rec,
                    "impl": f"{name}_mixed_layouts",
                    "packets": alt.total_packets,
                    "exact": alt.exact,
                }
            )
            row.update(
                mixed_layout_plan=mixed,
                mixed_layout_packets=alt.total_packets,
                mixed_layout_packets_by_role=alt.packets_by_role(),
            )
        out[name] = row
    return out


def _stock_key(path, size) -> str:
    """Stock TVM's packets depend on the quantized file, the reader's integers and TVM."""
    import hashlib
    from pathlib import Path

    import tvm

    import tvm_cocopie

    h = hashlib.sha256(Path(path).read_bytes())
    pkg = Path(tvm_cocopie.__file__).parent
    for src in ("hexagon/executor/qonnx.py", "topi/int8/compute.py"):
        h.update((pkg / src).read_bytes())
    return f"{h.hexdigest()[:16]}|{size}|tvm={tvm.__version__}"


def whole_models(records, names, args, t) -> dict:
    """Issue 21: zoo models quantized (QDQ, calibrated on sample inputs) and run whole
    under qemu-hexagon at ``--model-size``, against stock TVM's lowering of the same
    int8 network (cached per quantized model in ``--model-cache``: resumable), numpy
    (bit for bit) and ONNX Runtime on the same QDQ file. A model the executor cannot run
    is recorded with the operators it lacks."""
    import tempfile
    from pathlib import Path

    from tvm_cocopie import models
    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.errors import ModelError, UnsupportedOperatorError
    from tvm_cocopie.hexagon.executor.model import run_model
    from tvm_cocopie.hexagon.tools import measure

    cache_path = args.model_cache or str(_default_ms_cache().with_name("bench_hexagon_models.json"))
    rows, work = {}, Path(tempfile.mkdtemp(prefix="bench_hexagon_models_"))
    for name in names:
        size = args.model_size
        try:
            proto = models.build(name, image_size=size)
        except ModelError:  # a sequence model (the encoder): its length instead
            proto = models.build(name, seq=args.seq)
            size = None
        folder = work / name  # run_model quantizes the float model here (model_qdq.onnx)
        path = folder / "model_qdq.onnx"
        stock_runner = None
        if not args.no_stock:
            def stock_runner(net, timeout=None, _path=path, _size=size):
                key = _stock_key(_path, _size)
                rec = bm.read_result_cache(cache_path).get(key)
                if rec is None:
                    rec = measure.stock_network(net, timeout=timeout)
                    rec.pop("packets_by_layer")
                    bm.store_result(cache_path, key, rec)
                return rec
        try:
            row = run_model(proto, timeout=t["timeout"], stock_runner=stock_runner,
                            workdir=folder)
        except UnsupportedOperatorError as err:
            rows[name] = {"unsupported": str(err), "ops": sorted(err.ops)}
            log.warning("model %s: %s", name, err)
            continue
        row.pop("quantized_model")
        # the same file in the front door's int8 form through tvm.compile's pipeline: the
        # executor above is the same selection and kernels, so the packets should agree
        via = measure.pipeline_network(path, t["timeout"])
        row.update(tvm_compile_packets=via["packets"], tvm_compile_exact=via["exact"])
        row["input_size"] = size if size else f"sequence {args.seq}"
        rows[name] = row
        records.append({"op": "model", "impl": name, "shape": row["input"],
                        "packets": row["total_packets"], "exact": row["exact"]})
        log.info("model %s: %d packets (stock %s), exact=%s, ORT %s", name,
                 row["total_packets"], row.get("stock_tvm_packets"), row["exact"],
                 row["ort_agreement"])
    ran = [r for r in rows.values() if "total_packets" in r]
    ratios = [r["packet_ratio_vs_tvm"] for r in ran if "packet_ratio_vs_tvm" in r]
    return {
        "models": rows,
        "model_packet_ratio_vs_tvm": round(bm.geomean(ratios), 3) if ratios else None,
        "models_exact": bool(ran) and all(r["exact"] and r.get("stock_tvm_exact", True)
                                          and r["tvm_compile_exact"] for r in ran),
        "models_ort_per_layer_max_steps": max(
            (r["ort_agreement"]["per_layer"]["max_steps"] for r in ran), default=None),
        "models_unsupported": sorted(n for n, r in rows.items() if "unsupported" in r),
    }


def _emulator_info(target) -> dict:
    import subprocess

    from tvm_cocopie.emulation.toolchain import toolchain

    tc = toolchain()
    version = subprocess.run(
        [tc.qemu, "--version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return {
        "hexagon_target": target,
        "emulator": version[0] if version else tc.qemu,
        "measure": "packets",
    }


def _report(table, speedups, summary) -> None:
    from tvm_cocopie.bench import timing as bm

    rows = []
    for s, row in table.items():
        thesis = THESIS_TABLE_4_2.get(s, {}).get("latency", {})
        rows.append(
            {
                "size": s,
                **{f"lat_{v}": row["latency"][v] for v in VARIANTS},
                **{f"data_{v}": row["data"][v] for v in VARIANTS},
                "winner": row["winner"],
                "thesis": " ".join(f"{thesis[v]:.2f}" for v in VARIANTS) if thesis else "-",
                "thesis_winner": row["thesis_winner"] or "-",
            }
        )
    print("Table 4.2 (MatMul M=K=N), packets and data size normalized to vmpy")
    print(
        bm.format_table(
            rows,
            [
                ("size", "M=K=N", "{}"),
                ("lat_vmpy", "vmpy", "{:.2f}"),
                ("lat_vmpa", "vmpa", "{:.2f}"),
                ("lat_vrmpy", "vrmpy", "{:.2f}"),
                ("winner", "winner", "{}"),
                ("data_vmpy", "data vmpy", "{:.2f}"),
                ("data_vmpa", "vmpa", "{:.2f}"),
                ("data_vrmpy", "vrmpy", "{:.2f}"),
                ("thesis", "thesis latency", "{}"),
                ("thesis_winner", "thesis winner", "{}"),
            ],
        )
    )
    if speedups:
        print("\nStock TVM lowering vs GCD² kernels (packets)")
        print(
            bm.format_table(
                speedups,
                [
                    ("op", "op", "{}"),
                    ("shape", "shape", "{}"),
                    ("stock_packets", "stock", "{}"),
                    ("best", "best", "{}"),
                    ("best_packets", "packets", "{}"),
                    ("speedup", "x", "{:.1f}"),
                ],
            )
        )
        print(f"geomean speedup over stock TVM: {summary['geomean_speedup_vs_stock']}x")
    for key in ("packet_ratio_vs_tvm", "packet_ratio_vs_tvm_vrmpy", "peak_fraction",
                "peak_fraction_at_scale"):
        if key in summary:
            print(f"{key}: {summary[key]}")
    if "resnet50_convs" in summary:
        print(f"ResNet-50 convs at spatial scale {summary['resnet50_spatial_scale']}")
        print(
            bm.format_table(
                summary["resnet50_convs"],
                [
                    ("shape", "shape", "{}"),
                    ("chosen", "variant", "{}"),
                    ("packets", "ours", "{}"),
                    ("predicted_packets", "predicted", "{}"),
                    ("tvm_vrmpy_hand_packets", "vrmpy hand", "{}"),
                    ("tvm_vrmpy_ms_packets", "vrmpy MS", "{}"),
                    ("ms_search_s", "MS s", "{}"),
                    ("stock_packets", "stock", "{}"),
                    ("macs_per_packet", "MAC/packet", "{}"),
                    ("full_packets", "ours at 224", "{}"),
                    ("full_peak_fraction", "of peak", "{}"),
                ],
            )
        )
    for name, row in summary.get("global_over_local", {}).items():
        print(
            f"global over local, {name}: {row['ratio']}x "
            f"(selection {row['selection_seconds']} s, {row['partitions']} partitions)"
        )
    for name, net in summary.get("network", {}).items():
        print(
            f"network {name}: {net['total_packets']} packets {net['packets_by_role']}, "
            f"exact={net['exact']}, measured global over local "
            f"{net['measured_global_over_local']}x"
        )
    for name, row in summary.get("models", {}).items():
        if "unsupported" in row:
            print(f"model {name}: not run: {row['unsupported']}")
            continue
        print(
            f"model {name} ({row['input']}): {row['total_packets']} packets, stock TVM "
            f"{row.get('stock_tvm_packets')} ({row.get('packet_ratio_vs_tvm')}x), exact="
            f"{row['exact']}, ONNX Runtime {row['ort_agreement']}; ONNX Runtime's own int8 "
            f"vs float model {row.get('ort_quantized_vs_float')}"
        )
    if summary.get("models"):
        print(f"whole models: packets vs stock TVM geomean {summary['model_packet_ratio_vs_tvm']}x"
              f" (goal >= 3.4), all exact {summary['models_exact']}")
    print(f"all results bit-exact: {summary['all_exact']}")


if __name__ == "__main__":
    sys.exit(main())

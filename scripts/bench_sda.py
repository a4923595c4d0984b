#!/usr/bin/env python
"""SDA packing and the cycle model on the HVX backend's kernels (seed 004, §4.5).

Every kernel (ResNet-50's first 8 unique convolutions and MobileNetV2's 1x1, depthwise
and projection convolutions at a reduced spatial size, int8 matmuls) is compiled by
TVM for Hexagon V66, its assembly re-packed four ways by
:class:`tvm_cocopie.hexagon.vliw.repack.Repack` and reassembled with ``llvm-mc``:

- ``llvm``: LLVM's own packets, through the same assembler (the baseline);
- ``soft_to_hard``: the packer with every soft dependence made hard;
- ``soft_to_none``: soft dependences cost nothing (``p = 0``);
- ``sda``: the soft-dependence-aware packer.

Each program runs under ``qemu-hexagon`` on random data, its outputs are checked bit
for bit against numpy, and its executed packets are replayed through the cycle model
(:mod:`tvm_cocopie.hexagon.vliw.cycles`): estimated cycles = packets + stalls. The
model itself is checked first on microbenchmarks whose counts are known by
construction (:mod:`tvm_cocopie.hexagon.vliw.microbench`). Because scalar load
latency is the model's most consequential number (LLVM's scheduler places loads
right before their use), every estimate is also given with loads at latency 1.

JSON (``--json PATH``): ``{"bench": "sda", "machine", "records", "summary"}``; a
record per kernel and mode ``{kernel, op, shape, mode, packets, cycles, stalls,
cycles_load1, exact, blocks}``; summary ``cycles_ratio_vs_llvm`` (geomean of LLVM's
cycles over SDA's; goal >= 1.2), ``worst_ratio_vs_llvm`` (goal >= 1.0),
``soft_to_hard_ratio_vs_llvm``, ``soft_to_none_ratio_vs_llvm``,
``packet_ratio_vs_llvm``, ``cycles_ratio_vs_llvm_load1``, ``model_max_err_pct``,
``microbench``, ``all_exact``. Finished kernels are kept in ``--cache`` (resume).

    python scripts/bench_sda.py --quick --json bench_sda.json
"""

import argparse
import hashlib
import json
import logging
import sys
import time

log = logging.getLogger("bench_sda")

MODES = ("llvm", "soft_to_hard", "soft_to_none", "sda")

#: MobileNetV2's expand / depthwise / project convolutions (ResNet-50's first 8 unique
#: convolutions come from tvm_cocopie.hexagon.selection.networks.RESNET50_FIRST_CONVS).
MOBILENETV2_CONVS = [
    ("expand", (56, 56, 24, 144, 1, 1, 0), False),
    ("depthwise", (56, 56, 144, 144, 3, 1, 1), True),
    ("depthwise_s2", (56, 56, 144, 144, 3, 2, 1), True),
    ("project", (28, 28, 144, 32, 1, 1, 0), False),
]
MATMULS = [(64, 64, 64), (128, 128, 128), (32, 256, 256)]
QUICK = {"resnet": (1, 2, 6), "mobilenet": (1, 3), "matmul": (0,)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 ResNet-50 convs, 2 MobileNetV2, 1 matmul")
    p.add_argument("--scale", type=int, help="divide the convs' spatial sizes (default 8; quick 8)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated packings")
    p.add_argument("--cache", help="finished kernels (resume); default in the cache folder")
    p.add_argument("--no-cache", action="store_true", help="measure everything again")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per emulated run")
    p.add_argument("--json", metavar="PATH", help="write results here")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def kernels(quick: bool, scale: int) -> list:
    """``[(name, op, variant, shape, depthwise)]`` of the kernels to measure."""
    from tvm_cocopie.hexagon.selection import costmodel
    from tvm_cocopie.hexagon.selection.networks import RESNET50_FIRST_CONVS as RESNET50_CONVS
    from tvm_cocopie.topi.int8.layouts import GridGeometry

    model = costmodel.CostModel.default()
    out = []
    for i, (h, w, c, o, k, s, p) in enumerate(RESNET50_CONVS):
        if quick and i not in QUICK["resnet"]:
            continue
        hs, ws = max(h // scale, k), max(w // scale, k)
        geo = GridGeometry(hs, ws, k, s, p)
        costs = {v: model.conv(v, geo, c, o) for v in ("vmpy", "vrmpy")}
        out.append((f"resnet50_conv{i}", "conv2d", min(costs, key=costs.get),
                    (hs, ws, c, o, k, s, p), False))
    for i, (name, (h, w, c, o, k, s, p), dw) in enumerate(MOBILENETV2_CONVS):
        if quick and i not in QUICK["mobilenet"]:
            continue
        hs, ws = max(h // scale, k), max(w // scale, k)
        out.append((f"mobilenetv2_{name}", "dwconv2d" if dw else "conv2d",
                    "vmpy" if dw else "vrmpy", (hs, ws, c, o, k, s, p), dw))
    for i, (m, k, n) in enumerate(MATMULS):
        if quick and i not in QUICK["matmul"]:
            continue
        out.append((f"matmul_{m}x{k}x{n}", "matmul", "vrmpy", (m, k, n), False))
    return out


def measure_kernel(spec, mode: str, timeout: float) -> dict:
    """One kernel in one packing: packets, cycles (and with loads at latency 1), exact."""
    from tvm_cocopie.hexagon.tools import measure
    from tvm_cocopie.hexagon.vliw import isa
    from tvm_cocopie.hexagon.vliw.cycles import CycleModel
    from tvm_cocopie.hexagon.vliw.repack import Repack

    name, op, variant, shape, dw = spec
    load1 = CycleModel(latency={**isa.LATENCY, "load": 1})
    rp = Repack(mode)
    models = {"": CycleModel(), "_load1": load1}
    started = time.perf_counter()
    if op == "matmul":
        rec = measure.gcd2_matmul(variant, *shape, timeout=timeout, asm_pass=rp, cycles=models)
    else:
        rec = measure.gcd2_conv(variant, *shape, dw=dw, timeout=timeout, asm_pass=rp,
                                cycles=models)
    return {
        "kernel": name,
        "op": op,
        "variant": variant,
        "shape": list(shape),
        "mode": mode,
        "packets": rec["packets"],
        "cycles": rec["cycles"],
        "stalls": rec["stalls"],
        "cycles_load1": rec["cycles_load1"],
        "exact": rec["exact"],
        "blocks": rp.summary() if rp.reports else None,
        "seconds": round(time.perf_counter() - started, 2),
    }


def _cache_key(spec, mode: str) -> str:
    """Kernel, packing, and the code both come from (kernels, computes, the pass)."""
    from pathlib import Path

    import tvm_cocopie
    from tvm_cocopie.hexagon.vliw.repack import Repack

    root = Path(tvm_cocopie.__file__).parent
    h = hashlib.sha256(json.dumps([list(map(str, spec)), mode, Repack(mode).key]).encode())
    for path in sorted([*root.glob("hexagon/kernels/*.py"), *root.glob("topi/int8/*.py")]):
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def _default_cache() -> str:
    from tvm_cocopie.paths import cache_dir

    return str(cache_dir("bench") / "sda_kernels.json")


def summarize(records, micro) -> dict:
    from tvm_cocopie.bench import timing as bm

    by = {}
    for r in records:
        by.setdefault(r["kernel"], {})[r["mode"]] = r
    ratios = {m: [] for m in MODES if m != "llvm"}
    packets, load1 = [], []
    for modes in by.values():
        base = modes.get("llvm")
        if not base:
            continue
        for m, values in ratios.items():
            if m in modes:
                values.append(base["cycles"] / modes[m]["cycles"])
        if "sda" in modes:
            packets.append(base["packets"] / modes["sda"]["packets"])
            load1.append(base["cycles_load1"] / modes["sda"]["cycles_load1"])
    out = {
        "kernels": len(by),
        "cycles_ratio_vs_llvm": round(bm.geomean(ratios["sda"]), 3) if ratios["sda"] else None,
        "worst_ratio_vs_llvm": round(min(ratios["sda"]), 3) if ratios["sda"] else None,
        "soft_to_hard_ratio_vs_llvm": round(bm.geomean(ratios["soft_to_hard"]), 3)
        if ratios["soft_to_hard"] else None,
        "soft_to_none_ratio_vs_llvm": round(bm.geomean(ratios["soft_to_none"]), 3)
        if ratios["soft_to_none"] else None,
        "packet_ratio_vs_llvm": round(bm.geomean(packets), 3) if packets else None,
        "cycles_ratio_vs_llvm_load1": round(bm.geomean(load1), 3) if load1 else None,
        "model_max_err_pct": max(r["err_pct"] for r in micro) if micro else None,
        "microbench": micro,
        "all_exact": all(r["exact"] for r in records),
        "goals": {"cycles_ratio_vs_llvm": 1.2, "worst_ratio_vs_llvm": 1.0},
    }
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    from tqdm import tqdm

    from tvm_cocopie.bench import timing as bm
    from tvm_cocopie.hexagon.vliw import microbench

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        print(f"bench_sda: unknown mode(s) {bad}; use some of {list(MODES)}", file=sys.stderr)
        return 2
    scale = args.scale or 8
    cache = None if args.no_cache else (args.cache or _default_cache())
    micro = microbench.run()
    specs = kernels(args.quick, scale)
    records = []
    done = bm.read_result_cache(cache)
    jobs = [(s, m) for s in specs for m in modes]
    for spec, mode in tqdm(jobs, desc="kernels x packings", disable=not sys.stderr.isatty()):
        key = _cache_key(spec, mode)
        rec = done.get(key)
        if rec is None:
            rec = measure_kernel(spec, mode, args.timeout)
            if cache:
                bm.store_result(cache, key, rec)
        records.append(rec)
    summary = summarize(records, micro)
    summary["spatial_scale"] = f"1/{scale}"
    _report(records, summary)
    if args.json:
        bm.write_json_atomic(args.json, {
            "bench": "sda",
            "machine": {**bm.machine_info(), "measure": "qemu-hexagon packets + cycle model"},
            "records": records,
            "summary": summary,
        })
    return 0 if summary["all_exact"] else 1


def _report(records, summary) -> None:
    by = {}
    for r in records:
        by.setdefault(r["kernel"], {})[r["mode"]] = r
    print(f"{'kernel':28s} " + " ".join(f"{m:>14s}" for m in MODES) + "  exact")
    for name, modes in by.items():
        cells = [f"{modes[m]['cycles']:>14d}" if m in modes else f"{'-':>14s}" for m in MODES]
        exact = all(r["exact"] for r in modes.values())
        print(f"{name:28s} " + " ".join(cells) + f"  {exact}")
    for k in ("cycles_ratio_vs_llvm", "worst_ratio_vs_llvm", "soft_to_hard_ratio_vs_llvm",
              "soft_to_none_ratio_vs_llvm", "packet_ratio_vs_llvm", "cycles_ratio_vs_llvm_load1",
              "model_max_err_pct", "all_exact"):
        print(f"{k}: {summary[k]}")


if __name__ == "__main__":
    sys.exit(main())

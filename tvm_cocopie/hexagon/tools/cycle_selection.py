"""Selection by estimated cycles against selection by packets (seed 004, §4.4).

GCD² prices plans "based on the number of instructions (cycles)". The shipped cost
model predicts emulator packets; :meth:`..selection.costmodel.CostModel.cycles` predicts estimated
cycles (packets plus pipeline stalls, :mod:`..vliw.cycles`) of the same calibration
shapes. :func:`cycles_vs_packets_selection` runs local and global selection on the
ResNet-50 and MobileNetV2 layer graphs under both models and reports whether the
choices change and what each choice costs in predicted cycles.

Adds and pools keep their estimated per-vector packet cost
(:data:`..selection.networks.ELEMENTWISE_PACKETS_PER_VECTOR`) under both models: the same for every
plan, it shifts totals, never a choice.
"""

from __future__ import annotations

from collections import Counter

from ..selection.costmodel import CostModel
from ..selection.networks import mobilenetv2_layers, resnet50_layers, selection_graph
from ..selection.search import DEFAULT_CAP, global_select, local_select


def _networks() -> dict:
    return {"resnet50": resnet50_layers(), "mobilenetv2": mobilenetv2_layers()}


def same_run_packet_model() -> CostModel:
    """A packet model fitted on the packets of the cycle calibration's own traced runs
    (``CYCLE_SAMPLES``): it separates what stalls change from what the kernels' packets
    changed since the shipped packet model was calibrated."""
    from ..selection.coefficients import CYCLE_SAMPLES
    from .calibrate import fit_samples

    return fit_samples([(f, v, s, p) for f, v, s, _, p in CYCLE_SAMPLES])


def _differ(a: dict, b: dict) -> list:
    return [n for n in a if a[n] != b[n]]


def cycles_vs_packets_selection(layers: dict | None = None, cap: int = DEFAULT_CAP) -> dict:
    """Local and global selection with the packet model and with the cycle model.

    ``layers``: ``{name: layer list}`` (default ResNet-50 and MobileNetV2 at 224), each
    run with 8-bit weights (no ``vmpa``) and with 7-bit weights (``vmpa`` offered, key
    suffix ``_7bit_weights``), as ``scripts/bench_hexagon.py``'s ``global_vs_local``.
    Per network (JSON-ready):

    - ``operators``; ``global_plans_differing`` / ``local_plans_differing``: operators
      whose plan differs between selection by packets and by cycles (``differing_ops``:
      ``{name: [by packets, by cycles]}`` of the global plans);
    - ``global_over_local``: local cost / global cost under each model;
    - ``predicted_cycles``: Eq. 4.1 in cycles (cycle model) of each of the four plans;
      ``cycles_saved_by_selecting_on_cycles``: global-by-packets / global-by-cycles;
    - ``predicted_packets``: the same four plans under the packet model;
    - ``plan_counts``: how many operators take each plan in either global selection;
    - ``same_run_packets``: the control of :func:`same_run_packet_model`: global plans
      differing from the shipped packet model's and from the cycle model's.
    """
    packets, cycles = CostModel.default(), CostModel.cycles()
    fresh = same_run_packet_model()
    out = {}
    for name, net in (layers or _networks()).items():
        for suffix, ok in (("", False), ("_7bit_weights", True)):
            def vmpa_ok(lay, ok=ok):
                return ok

            gp = selection_graph(net, packets, vmpa_ok)
            gc = selection_graph(net, cycles, vmpa_ok)
            gf = selection_graph(net, fresh, vmpa_ok)
            loc_p, glo_p = local_select(gp), global_select(gp, cap)
            loc_c, glo_c = local_select(gc), global_select(gc, cap)
            glo_f = global_select(gf, cap)
            plans = {
                "global_by_packets": glo_p.plan,
                "global_by_cycles": glo_c.plan,
                "local_by_packets": loc_p.plan,
                "local_by_cycles": loc_c.plan,
            }
            diff = _differ(glo_p.plan, glo_c.plan)
            out[name + suffix] = {
                "operators": len(gp.nodes),
                "global_plans_differing": len(diff),
                "local_plans_differing": len(_differ(loc_p.plan, loc_c.plan)),
                "differing_ops": {n: [glo_p.plan[n], glo_c.plan[n]] for n in diff},
                "global_over_local": {
                    "packets": round(loc_p.cost / glo_p.cost, 4),
                    "cycles": round(loc_c.cost / glo_c.cost, 4),
                },
                "predicted_cycles": {k: round(gc.cost(p)) for k, p in plans.items()},
                "cycles_saved_by_selecting_on_cycles": round(gc.cost(glo_p.plan) / glo_c.cost, 4),
                "predicted_packets": {k: round(gp.cost(p)) for k, p in plans.items()},
                "global_transform_cycles": {
                    "by_packets": round(gc.cost(glo_p.plan) - glo_p.op_cost(gc)),
                    "by_cycles": round(glo_c.transform_cost(gc)),
                },
                "plan_counts": {
                    "by_packets": dict(Counter(glo_p.plan.values())),
                    "by_cycles": dict(Counter(glo_c.plan.values())),
                },
                "same_run_packets": {
                    "global_plans_differing_from_shipped_packets": len(
                        _differ(glo_p.plan, glo_f.plan)),
                    "global_plans_differing_from_cycles": len(_differ(glo_f.plan, glo_c.plan)),
                    "global_over_local": round(local_select(gf).cost / glo_f.cost, 4),
                },
            }
    return out


def main() -> None:  # pragma: no cover - a report printed by hand
    """Print :func:`cycles_vs_packets_selection` as JSON."""
    import json

    print(json.dumps(cycles_vs_packets_selection(), indent=1))


if __name__ == "__main__":  # pragma: no cover
    main()

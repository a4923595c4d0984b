"""GCD²'s global layout and instruction selection (seed 004, §4.4.1-§4.4.2).

Every operator ``O`` has execution plans ``EP(O)`` with a cost ``Cost(ep)``; every edge
``(J, O)`` costs ``TC(ep_J, ep_O)`` to transform ``J``'s output into the layout ``O``'s
plan reads (zero when the layouts agree). Selection minimizes Eq. 4.1,
``Agg_Cost = sum Cost + sum TC``, a PBQP problem. This module solves it in the ways
the thesis compares:

- :func:`local_select`: each operator takes its cheapest plan, ignoring transforms
  (the "local optimal" baseline of Fig. 4.10);
- :func:`exhaustive_select`: all ``k^|V|`` assignments (small graphs only);
- :func:`chain_select`: Eq. 4.2's dynamic program on a chain, ``O(|V| k^2)``;
- :func:`frontier_select`: the same dynamic program on a DAG in topological order,
  its state the plans of the operators whose output is still needed (exact; for a
  chain it is Eq. 4.2, for ResNet blocks the frontier holds two or three tensors);
- :func:`partition` / :func:`global_select`: GCD²'s heuristic for DAGs: cut at
  *desirable partitioning edges* (the successor has one predecessor and is a layout
  operator, or the transform on the edge is *profitable*), cap sub-graphs at ``cap``
  operators, solve each sub-graph exactly and independently.

Plans are names (for HVX kernels: ``vmpy`` / ``vmpa`` / ``vrmpy``, meaning the 1-, 2-,
4-column layouts, or ``rowmajor`` for a graph input); the caller supplies the costs,
usually from :mod:`.costmodel` (see :mod:`.networks`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import CocopieError

log = logging.getLogger(__name__)

#: Sub-graph size cap of GCD²'s partitioning ("13 or 17 operators", §4.4.2).
DEFAULT_CAP = 13


@dataclass
class Node:
    """An operator: its plans with their costs, its predecessors, its kind."""

    name: str
    plans: dict  # plan name -> cost
    preds: tuple = ()
    kind: str = "op"  # "layout" marks a layout transformation operator (Reshape, ...)
    info: dict = field(default_factory=dict)


@dataclass
class Graph:
    """A computational graph in topological order with an edge cost ``tc(u, v, pu, pv)``."""

    nodes: list
    tc: Callable  # (pred Node, succ Node, pred plan, succ plan) -> cost

    def __post_init__(self):
        self.by_name = {n.name: n for n in self.nodes}
        seen = set()
        for n in self.nodes:
            for p in n.preds:
                if p not in seen:
                    raise CocopieError(f"{n.name} reads {p}, which is not an earlier node")
            if not n.plans:
                raise CocopieError(f"{n.name} has no execution plan")
            seen.add(n.name)
        self.succs = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for p in n.preds:
                self.succs[p].append(n.name)

    def edges(self):
        """Every edge ``(producer, consumer)`` of the graph, as nodes."""
        for n in self.nodes:
            for p in n.preds:
                yield self.by_name[p], n

    def edge_cost(self, u: Node, v: Node, pu, pv) -> float:
        """Cost of the transform on edge ``u -> v`` when they run plans ``pu`` and ``pv`` (0 for
        the same layout)."""
        return 0.0 if pu == pv else float(self.tc(u, v, pu, pv))

    def cost(self, plan: dict) -> float:
        """Eq. 4.1 for a full assignment ``name -> plan``."""
        total = sum(n.plans[plan[n.name]] for n in self.nodes)
        return total + sum(
            self.edge_cost(u, v, plan[u.name], plan[v.name]) for u, v in self.edges()
        )

    def is_chain(self) -> bool:
        """Whether every node has at most one predecessor and one successor."""
        return all(len(n.preds) <= 1 for n in self.nodes) and all(
            len(s) <= 1 for s in self.succs.values()
        )


@dataclass
class Selection:
    """A plan per operator, its Eq. 4.1 cost, and how long the search took."""

    plan: dict
    cost: float
    seconds: float
    method: str
    parts: int = 1

    def op_cost(self, graph: Graph) -> float:
        """Cost of the operators alone under this selection's plans."""
        return sum(n.plans[self.plan[n.name]] for n in graph.nodes)

    def transform_cost(self, graph: Graph) -> float:
        """Cost of the layout transforms this selection needs (its cost less the operators')."""
        return self.cost - self.op_cost(graph)


def _timed(method):
    def wrap(graph, *args, **kwargs):
        start = time.perf_counter()
        plan, parts = method(graph, *args, **kwargs)
        sel = Selection(plan, graph.cost(plan), time.perf_counter() - start, method.__name__, parts)
        log.debug("%s: cost %.0f in %.4f s", sel.method, sel.cost, sel.seconds)
        return sel

    wrap.__name__ = method.__name__
    wrap.__doc__ = method.__doc__
    return wrap


@_timed
def local_select(graph: Graph):
    """Every operator takes its cheapest plan, transforms ignored.

    Ties (layout-agnostic operators such as adds and pools cost the same in every
    layout) go to the first predecessor's plan, so local choice never transforms
    for nothing.
    """
    plan: dict = {}
    for n in graph.nodes:
        best = min(n.plans.values())
        ties = [p for p, c in n.plans.items() if c == best]
        follow = plan.get(n.preds[0]) if n.preds else None
        plan[n.name] = follow if follow in ties else ties[0]
    return plan, 1


@_timed
def exhaustive_select(graph: Graph, limit: int = 200_000):
    """Try every assignment (refuses more than ``limit``)."""
    names = [n.name for n in graph.nodes]
    options = [list(n.plans) for n in graph.nodes]
    count = 1
    for o in options:
        count *= len(o)
    if count > limit:
        raise CocopieError(f"exhaustive search over {count} assignments exceeds {limit}")
    best, best_cost = None, float("inf")
    for combo in itertools.product(*options):
        plan = dict(zip(names, combo))
        c = graph.cost(plan)
        if c < best_cost:
            best, best_cost = plan, c
    return best, 1


@_timed
def chain_select(graph: Graph):
    """Eq. 4.2: ``Sol(i, j) = min_l Sol(i-1, l) + TC(l, j)`` (plus ``Cost(ep_j(O_i))``)."""
    if not graph.is_chain():
        raise CocopieError("chain_select needs a chain; use frontier_select or global_select")
    return _chain(graph, graph.nodes), 1


def _chain(graph: Graph, nodes) -> dict:
    sol = {p: (c, None) for p, c in nodes[0].plans.items()}
    back = []
    for prev, node in itertools.pairwise(nodes):
        linked = node.preds == (prev.name,)
        nxt = {}
        for pj, cj in node.plans.items():
            best = min(
                sol,
                key=lambda pl: sol[pl][0] + (graph.edge_cost(prev, node, pl, pj) if linked else 0),
            )
            extra = graph.edge_cost(prev, node, best, pj) if linked else 0.0
            nxt[pj] = (sol[best][0] + extra + cj, best)
        back.append(nxt)
        sol = nxt
    last = min(sol, key=lambda p: sol[p][0])
    plan = {nodes[-1].name: last}
    for node, table in zip(reversed(nodes[:-1]), reversed(back)):
        last = table[last][1]
        plan[node.name] = last
    return plan


def _frontier(graph: Graph, nodes) -> dict:
    """Exact DP over ``nodes`` (a topologically ordered subset); other edges ignored."""
    inside = {n.name for n in nodes}
    remaining = {n.name: sum(1 for s in graph.succs[n.name] if s in inside) for n in nodes}
    # state: tuple of (name, plan) of live nodes -> (cost, full assignment)
    states = {(): (0.0, {})}
    for node in nodes:
        preds = [p for p in node.preds if p in inside]
        new: dict = {}
        for key, (cost, assign) in states.items():
            live = dict(key)
            for pv, cv in node.plans.items():
                c = cost + cv
                for p in preds:
                    c += graph.edge_cost(graph.by_name[p], node, live[p], pv)
                nkey = tuple(sorted({**live, node.name: pv}.items()))
                if nkey not in new or c < new[nkey][0]:
                    new[nkey] = (c, {**assign, node.name: pv})
        for p in preds:
            remaining[p] -= 1
        dead = {p for p in preds if remaining[p] == 0}
        if remaining[node.name] == 0:
            dead.add(node.name)
        states = {}
        for key, (cost, assign) in new.items():
            k2 = tuple(item for item in key if item[0] not in dead)
            if k2 not in states or cost < states[k2][0]:
                states[k2] = (cost, assign)
    return min(states.values(), key=lambda s: s[0])[1]


@_timed
def frontier_select(graph: Graph):
    """Exact DP on a DAG: state = plans of the operators whose output is still needed."""
    return _frontier(graph, graph.nodes), 1


def desirable_edges(graph: Graph) -> set:
    """§4.4.2: edges ``(u, v)`` where ``v`` has the single predecessor ``u`` and ``v`` is
    a layout operator or the transform into ``v``'s best plan is *profitable*: whatever
    plan ``u`` takes, ``Cost(v, p) + TC(u, v)`` is least for ``v``'s own best plan."""
    out = set()
    for n in graph.nodes:
        if len(n.preds) != 1:
            continue
        u = graph.by_name[n.preds[0]]
        if n.kind == "layout":
            out.add((u.name, n.name))
            continue
        best = min(n.plans, key=n.plans.get)
        profitable = all(
            n.plans[best] + graph.edge_cost(u, n, pu, best)
            <= min(n.plans[p] + graph.edge_cost(u, n, pu, p) for p in n.plans)
            for pu in u.plans
        )
        if profitable:
            out.add((u.name, n.name))
    return out


def partition(graph: Graph, cap: int = DEFAULT_CAP) -> list:
    """Sub-graphs (lists of nodes in topological order) after cutting desirable edges;
    components larger than ``cap`` are split into consecutive runs of ``cap``."""
    cut = desirable_edges(graph)
    parent = {n.name: n.name for n in graph.nodes}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for u, v in graph.edges():
        if (u.name, v.name) not in cut:
            parent[find(u.name)] = find(v.name)
    comps: dict = {}
    for n in graph.nodes:
        comps.setdefault(find(n.name), []).append(n)
    parts = []
    for nodes in comps.values():
        parts += [nodes[i : i + cap] for i in range(0, len(nodes), cap)]
    return parts


@_timed
def global_select(graph: Graph, cap: int = DEFAULT_CAP):
    """GCD²'s global selection: Eq. 4.2 on a chain, else partition and solve each part."""
    if graph.is_chain():
        return _chain(graph, graph.nodes), 1
    plan: dict = {}
    parts = partition(graph, cap)
    for nodes in parts:
        plan.update(_frontier(graph, nodes))
    return plan, len(parts)

"""GCD²'s global layout/instruction selection (seed 004, §4.4.2) against exhaustive search."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_cocopie.hexagon import selection

PLANS = ("vmpy", "vmpa", "vrmpy")


@st.composite
def graphs(draw, chain=False, max_nodes=7):
    n = draw(st.integers(2, max_nodes))
    nodes = []
    for i in range(n):
        k = draw(st.integers(1, 3))
        plans = draw(st.permutations(PLANS))[:k]
        costs = {p: draw(st.integers(0, 50)) for p in plans}
        if i == 0:
            preds = ()
        elif chain:
            preds = (f"n{i - 1}",)
        else:
            preds = tuple(
                sorted(set(draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=3))))
            )
            preds = tuple(f"n{j}" for j in preds)
        kind = draw(st.sampled_from(["op", "op", "op", "layout"]))
        nodes.append(selection.Node(f"n{i}", costs, preds, kind))
    tcs = {}
    for v in nodes:
        for u in v.preds:
            for pu in PLANS:
                for pv in PLANS:
                    tcs[(u, v.name, pu, pv)] = draw(st.integers(0, 40))
    return selection.Graph(nodes, lambda u, v, pu, pv: tcs[(u.name, v.name, pu, pv)])


@settings(max_examples=60, deadline=None)
@given(graphs(chain=True, max_nodes=8))
def test_chain_dp_equals_exhaustive(graph):
    dp = selection.chain_select(graph)
    ex = selection.exhaustive_select(graph)
    assert dp.cost == ex.cost
    assert graph.cost(dp.plan) == dp.cost
    assert selection.global_select(graph).cost == ex.cost


@settings(max_examples=60, deadline=None)
@given(graphs(max_nodes=7))
def test_dag_dp_equals_exhaustive(graph):
    ex = selection.exhaustive_select(graph)
    assert selection.frontier_select(graph).cost == ex.cost
    # the partitioning heuristic and local choice can only be worse
    assert selection.global_select(graph, cap=3).cost >= ex.cost
    assert selection.local_select(graph).cost >= ex.cost


@settings(max_examples=30, deadline=None)
@given(graphs(max_nodes=7))
def test_partitioning_without_cuts_is_exact(graph):
    if selection.desirable_edges(graph) or graph.is_chain():
        return
    assert selection.global_select(graph, cap=100).cost == selection.exhaustive_select(graph).cost


def test_partition_cuts_at_layout_ops_and_caps_size():
    def node(i, preds, kind="op"):
        return selection.Node(f"n{i}", {"vmpy": 1, "vrmpy": 2}, preds, kind)

    nodes = [node(0, ()), node(1, ("n0",)), node(2, ("n0",)), node(3, ("n1", "n2"))]
    nodes += [node(4, ("n3",), "layout"), node(5, ("n4",)), node(6, ("n4",)), node(7, ("n5", "n6"))]
    graph = selection.Graph(nodes, lambda u, v, pu, pv: 5)
    assert ("n3", "n4") in selection.desirable_edges(graph)
    parts = selection.partition(graph, cap=3)
    assert all(len(p) <= 3 for p in parts)
    assert sorted(n.name for p in parts for n in p) == [f"n{i}" for i in range(8)]


def test_global_beats_local_when_transforms_dominate():
    # n1 prefers vmpy alone, but its neighbours are vrmpy and a transform costs 10
    nodes = [
        selection.Node("a", {"vrmpy": 1}),
        selection.Node("b", {"vmpy": 3, "vrmpy": 5}, ("a",)),
        selection.Node("c", {"vrmpy": 1}, ("b",)),
    ]
    graph = selection.Graph(nodes, lambda u, v, pu, pv: 10)
    assert selection.local_select(graph).cost == 1 + 3 + 1 + 20
    assert selection.global_select(graph).cost == 7
    with pytest.raises(Exception, match="exceeds"):
        selection.exhaustive_select(graph, limit=1)

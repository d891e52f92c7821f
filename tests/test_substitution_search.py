"""The substitution searches: exact ones equal brute force, every result stays equivalent,
budgets hold, the flow split is a partition into convex parts, recorded steps replay."""

from __future__ import annotations

import pytest

from accel_model.latency import make_latency_model
from fusionplan.passes.substitution.convert import check_equivalence, from_onnx, to_onnx
from fusionplan.passes.substitution.cost import GraphCost
from fusionplan.passes.substitution.pipeline import SubstitutionRequest, substitute
from fusionplan.passes.substitution.rules import make_rules
from fusionplan.passes.substitution.search import SEARCHES, Problem
from fusionplan.passes.substitution.search.base import Candidate
from fusionplan.passes.substitution.search.ocggs import DynamicProgramming, Pruning
from fusionplan.passes.substitution.search.split import flow_split
from tests.substitution_models import inception_block, mlp

COST = GraphCost(make_latency_model("h100"))


def problem(budget: int = 100_000) -> Problem:
    return Problem(make_rules(), COST, budget)


def brute_force(p: Problem, cand: Candidate, depth: int) -> float:
    """Cheapest cost over every sequence of at most ``depth`` substitutions, no pruning."""
    best = cand.cost
    if depth == 0:
        return best
    for match in p.matches(cand.graph):
        child = p.child(cand, match)
        if child is not None:
            best = min(best, brute_force(p, child, depth - 1))
    return best


@pytest.mark.parametrize("build", [inception_block, mlp], ids=["inception", "mlp"])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_exact_searches_equal_brute_force(build, depth: int) -> None:
    graph = from_onnx(build())
    p = problem()
    expected = brute_force(p, p.start(graph), depth)
    for search in (Pruning(depth), DynamicProgramming(depth)):
        result = search.run(problem(), graph)
        assert result.best.cost == pytest.approx(expected, rel=1e-12), search.name
        assert len(result.best.steps) <= depth


def test_canonical_order_visits_fewer_graphs_than_brute_force() -> None:
    graph = from_onnx(inception_block())
    counted = problem()
    brute_force(counted, counted.start(graph), 3)
    pruned = Pruning(3).run(problem(), graph)
    assert pruned.generated < counted.generated


@pytest.mark.parametrize("name", SEARCHES.names())
def test_every_search_returns_an_equivalent_cheaper_graph(name: str) -> None:
    m = inception_block()
    result = substitute(m, SubstitutionRequest(search=name, budget=400, depth=2))
    rewritten, report = result.model, result.report
    assert check_equivalence(m, rewritten).ok
    assert report.after.sum < report.before.sum
    assert report.generated <= 400
    assert len(report.steps) >= 1


def test_budget_caps_graphs_built() -> None:
    graph = from_onnx(inception_block())
    assert len(problem().matches(graph)) > 3
    result = SEARCHES.get("taso")().run(problem(budget=3), graph)
    assert result.generated == 3


def test_flow_split_is_a_partition_into_small_convex_parts() -> None:
    graph = from_onnx(mlp(layers=12))
    p = problem()
    parts = flow_split(graph, p.matches(graph), threshold=8)
    names = [n for part in parts for n in part]
    assert sorted(names) == sorted(graph.nodes) and len(parts) > 1
    assert all(len(part) <= 8 for part in parts)
    index = {n: i for i, part in enumerate(parts) for n in part}
    for node in graph.nodes.values():  # no edge runs from a later part to an earlier one
        for t in node.inputs:
            if t in graph.producer:
                assert index[graph.producer[t].name] <= index[node.name]


def test_steps_found_on_parts_replay_on_the_whole_graph() -> None:
    graph = from_onnx(mlp(layers=6))
    p = problem()
    root = p.start(graph)
    parts = flow_split(graph, p.matches(graph), threshold=6)
    steps = []
    for part in parts:
        sub = p.fork(1000)
        best = SEARCHES.get("taso")().explore(sub, sub.start(graph.subgraph(part)))
        steps.extend(best.steps)
    stitched = p.replay(root, steps)
    assert len(stitched.steps) == len(steps) > 0
    assert stitched.cost < root.cost
    assert check_equivalence(to_onnx(graph), to_onnx(stitched.graph)).ok

"""The substitution searches: exact ones equal brute force, every result stays equivalent,
budgets hold, the flow split is a partition into convex parts, recorded steps replay."""

from __future__ import annotations

import pytest

from accel_model.latency import make_latency_model
from fusionplan.ir.onnx_model import from_onnx, to_onnx
from fusionplan.ir.onnx_run import check_equivalence
from fusionplan.passes.substitution.cost import GraphCost
from fusionplan.passes.substitution.pipeline import SubstitutionRequest, substitute
from fusionplan.passes.substitution.rules import make_rules
from fusionplan.passes.substitution.search import REWRITE_SEARCHES, Problem
from fusionplan.passes.substitution.search.base import RewriteCandidate
from fusionplan.passes.substitution.search.ocggs import DynamicProgramming, Pruning
from fusionplan.passes.substitution.search.split import flow_split
from tests.substitution_models import inception_block, mlp

COST = GraphCost(make_latency_model("h100"))


def problem(budget: int = 100_000) -> Problem:
    return Problem(make_rules(), COST, budget)


def brute_force(p: Problem, cand: RewriteCandidate, depth: int) -> float:
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


@pytest.mark.parametrize("name", REWRITE_SEARCHES.names())
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
    result = REWRITE_SEARCHES.get("taso")().run(problem(budget=3), graph)
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
        best = REWRITE_SEARCHES.get("taso")().explore(sub, sub.start(graph.subgraph(part)))
        steps.extend(best.steps)
    stitched = p.replay(root, steps)
    assert len(stitched.steps) == len(steps) > 0
    assert stitched.cost < root.cost
    assert check_equivalence(to_onnx(graph), to_onnx(stitched.graph)).ok


def test_a_pattern_input_is_never_produced_inside_its_match() -> None:
    """``Concat(Conv(c), c)`` with ``c = Conv(x)``: the exclusive-concat rule must not take
    the first conv's input from the second conv it removes."""
    from onnx import helper

    from tests.substitution_models import model, weight

    m = model(
        [
            helper.make_node("Conv", ["x", "w1"], ["c"]),
            helper.make_node("Conv", ["c", "w2"], ["a"]),
            helper.make_node("Concat", ["a", "c"], ["y"], axis=1),
        ],
        {"x": (1, 2, 4, 4)},
        ["y"],
        [weight("w1", 2, 2, 1, 1), weight("w2", 2, 2, 1, 1)],
    )
    graph = from_onnx(m)
    for match in problem().matches(graph):
        produced = {t for n in match.nodes for t in n.outputs}
        for var, value in match.binding.items():
            if var not in match.rule.produced_vars:
                assert value not in produced, (match.rule.name, var)
        assert check_equivalence(m, to_onnx(match.rule.apply(graph, match))).ok


def test_guard_drops_the_rule_family_that_slows_the_device() -> None:
    """With a stand-in device on which every Split costs a lot (a merge's price), the guard
    drops the sibling merges and keeps the rest; if nothing helps, the original."""
    from fusionplan.passes.substitution.guard import guard

    graph = from_onnx(inception_block())
    p = problem()
    root = p.start(graph)
    best = REWRITE_SEARCHES.get("taso")().explore(p, root)
    rules_used = {s.rule for s in best.steps}
    assert "merge-sibling-convs" in rules_used and len(rules_used) > 1

    def splits_cost(graphs):
        return [1.0 + sum(n.op == "Split" for n in g.nodes.values()) for g in graphs]

    outcome = guard(p, root, best, splits_cost)
    assert "merge-sibling-convs" in outcome.dropped
    assert all(n.op != "Split" for n in outcome.chosen.graph.nodes.values())
    assert outcome.chosen.steps and outcome.chosen.cost < root.cost
    assert check_equivalence(to_onnx(graph), to_onnx(outcome.chosen.graph)).ok

    def always_slower(graphs):
        return [1.0 if g is graph else 2.0 for g in graphs]

    assert guard(p, root, best, always_slower).chosen is root


def test_a_static_shape_chain_is_folded_at_import_and_the_rewrite_runs() -> None:
    """A Shape (int64 output, no value_info) feeding ConstantOfShape (a tensor attribute)
    beside a fusable conv: the importer folds the chain into one float weight (the shape is
    static), so the rewritten model reads it as an initializer and runs in onnxruntime."""
    import numpy as np
    from onnx import helper, numpy_helper

    from tests.substitution_models import model, weight

    fill = numpy_helper.from_array(np.array([0.5], dtype=np.float32))
    m = model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Shape", ["r"], ["s"]),
            helper.make_node("ConstantOfShape", ["s"], ["half"], value=fill),
            helper.make_node("Add", ["r", "half"], ["y"]),
        ],
        {"x": (1, 2, 4, 4)},
        ["y"],
        [weight("w", 3, 2, 1, 1)],
    )
    result = substitute(m, SubstitutionRequest(search="taso"))
    assert result.report.steps
    assert {n.op_type for n in result.model.graph.node}.isdisjoint({"Shape", "ConstantOfShape"})
    half = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}["half"]
    assert half.shape == (1, 3, 4, 4) and half.dtype == np.float32 and (half == 0.5).all()
    assert check_equivalence(m, result.model).ok

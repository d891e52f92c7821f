"""Certified plans (search/certify.py, accel_model/bounds.py, search/lns.py, search/auto.py).

* The traffic bound is admissible (never above the brute-force optimum) and consistent
  along every step of random plans, and a tensor between two ops that can never share a
  group is charged its write and its read (a hand-computed case);
* the solver with frozen groups (LNS's subproblem) finds the best plan that keeps them:
  the brute-force optimum when they are groups of an optimal plan;
* LNS is never worse than its start and proves the optimum on small graphs; auto returns
  the proven optimum when the exact search finishes and a valid plan with a sound bound
  when it does not;
* every search's plan carries a certificate whose bound is at most the optimum, shown by
  ``fusionplan plan`` (defaults) and stored in the plan JSON.
"""

from __future__ import annotations

import functools
import json
import random

import pytest

import fusionplan as fp
from accel_model import Accelerator
from accel_model.bounds import TrafficBound, plan_lower_bound
from accel_model.lbdf import LBDF
from fusionplan.ir.graph import Node, OpGraph, Tensor, bits
from fusionplan.planning.split import make_splitter
from fusionplan.search import FusionProblem, make_search
from fusionplan.search.certify import certify
from fusionplan.search.exact import ExactSolver, SolveLimits, count_downsets, solve
from tests.random_dags import random_dag
from tests.test_cli import invoke
from tests.test_exact import (
    CASES,
    _medium_graph_problem,
    brute_force,
    case_problem,
    make_problem,
)


@functools.cache
def optimum(seed: int, scheme: str) -> tuple[int, tuple[int, ...]]:
    dram, plan, _ = brute_force(seed, scheme)
    return dram, plan


# ------------------------------------------------------------------------ the bound
@pytest.mark.parametrize("seed,scheme", CASES[::2])
def test_traffic_bound_admissible_and_consistent(seed, scheme):
    problem = case_problem(seed, scheme)
    opt, plan = optimum(seed, scheme)
    cm = problem.cost_model
    bound = TrafficBound(cm, [1 << v for v in bits(problem.unfusable)])
    assert bound.total() <= plan_lower_bound(cm) <= opt  # the latter with its chains
    _pays_its_drop_along(problem, bound, plan)


def _pays_its_drop_along(problem: FusionProblem, bound: TrafficBound, plan) -> None:
    """Along ``plan``, in an order its groups can run in, each step pays the bound's drop
    (consistency), and the bound ends at 0."""
    done, pending, cm = 0, list(plan), problem.cost_model
    while pending:
        step = next(g for g in pending if not _preds(problem.graph, g) & ~done)
        pending.remove(step)
        assert bound.remaining(done) <= cm.cost(step).dram + bound.remaining(done | step)
        done |= step
    assert bound.remaining(done) == 0


def _preds(graph: OpGraph, group: int) -> int:
    out = 0
    for v in bits(group):
        out |= graph.pred_mask[v]
    return out & ~group


def _two_convs() -> OpGraph:
    """x -> conv a (100 weights) -> t -> conv b (100 weights) -> y; tensors 4x8x8 = 256."""
    tensors = [Tensor("x", (4, 8, 8), -1), Tensor("t", (4, 8, 8), 0), Tensor("y", (4, 8, 8), 1)]
    nodes = [
        Node("a", "Conv", "conv", (0,), (1,), weights=100),
        Node("b", "Conv", "conv", (1,), (2,), weights=100),
    ]
    return OpGraph.build("two", nodes, tensors, [0], [2])


def test_separated_tensor_is_charged_both_ways():
    """Each conv fits alone (100 weights + a row of its input and one of its output,
    100 + 2 x 32 = 164 < 180) but not together (200 + 3 x 32 = 296): t must be written and
    read back, 2 x 256 B beyond io + weights."""
    graph = _two_convs()
    cm = LBDF(graph, Accelerator(180, "lbdf"))
    assert cm.is_valid(1) and cm.is_valid(2) and not cm.is_valid(3)
    bound = TrafficBound(cm, [])
    assert bound.separated_tensors == 1
    assert bound.total() == 256 + 256 + 200 + 2 * 256
    best = make_search("exact").run(FusionProblem(cm, make_splitter("tree", cm, 0), 1), 0)
    assert best.best.dram == bound.total()  # the bound is tight here: splitting is forced
    roomy = LBDF(graph, Accelerator(10_000, "lbdf"))
    assert TrafficBound(roomy, []).total() == 256 + 256 + 200  # fusable: nothing forced


# ------------------------------------------------------------------------ frozen groups
@pytest.mark.parametrize("seed,scheme", CASES[1::3])
def test_frozen_groups_of_an_optimum_keep_it(seed, scheme):
    problem = case_problem(seed, scheme)
    opt, plan = optimum(seed, scheme)
    rng = random.Random(seed)
    fused = [g for g in plan if not g & problem.unfusable]
    frozen = rng.sample(fused, k=len(fused) // 2)
    solver = ExactSolver(problem.cost_model, problem.unfusable, frozen)
    out = solve(solver, SolveLimits.of(10**9))
    assert out.optimal and out.dram == opt
    assert all(g in out.groups for g in frozen)
    problem.to_plan(problem._candidate(tuple(sorted(out.groups)))).validate()


@pytest.mark.parametrize("seed", range(6))
def test_ancestor_and_descendant_masks_by_search(seed):
    graph = random_dag(seed, n_nodes=20)

    def reach(direct, v):
        found, todo = 0, list(bits(direct[v]))
        while todo:
            u = todo.pop()
            if not found >> u & 1:
                found |= 1 << u
                todo.extend(bits(direct[u]))
        return found

    for v in range(len(graph)):
        assert graph.ancestor_mask[v] == reach(graph.pred_mask, v)
        assert graph.descendant_mask[v] == reach(graph.succ_mask, v)


@pytest.mark.parametrize("seed", range(8))
def test_count_downsets_of_a_region(seed):
    graph = random_dag(seed, max_nodes=12)
    region = random.Random(seed).getrandbits(len(graph)) & graph.all_nodes
    pred = graph.pred_mask
    subsets = [s for s in range(1 << len(graph)) if not s & ~region]
    want = sum(all(not pred[v] & region & ~s for v in bits(s)) for s in subsets)
    assert count_downsets(graph, 10**9, region=region) == (want, True)


# ------------------------------------------------------------------------ LNS and auto
@pytest.mark.parametrize("seed,scheme", CASES[::4])
def test_lns_never_worse_and_proves_small_optima(seed, scheme):
    problem = case_problem(seed, scheme, budget=200)
    start = make_search("rs").run(case_problem(seed, scheme, budget=2), seed).best
    problem.warm_start = [start.groups]
    lns = make_search("lns")
    result = lns.run(problem, seed)
    assert result.best.dram <= start.dram
    assert lns.outcome.optimal and result.best.dram == optimum(seed, scheme)[0]
    problem.to_plan(result.best).validate()


@pytest.mark.parametrize("seed,scheme", CASES[2::5])
def test_auto_returns_the_proven_optimum(seed, scheme):
    result = make_search("auto").run(case_problem(seed, scheme, budget=50), 0)
    assert result.algorithm == "auto" and result.extra["auto_stage"] == "exact"
    assert result.exact.optimal and result.best.dram == optimum(seed, scheme)[0]
    assert result.exact.gap == 0.0


def test_auto_past_its_exact_share_still_certifies():
    full = make_search("exact").run(_medium_graph_problem(), 0).best.dram  # the optimum
    problem = _medium_graph_problem()
    problem.budget = 100  # LNS proposes each improvement
    result = make_search("auto", effort=0.02, exact_share=0.01).run(problem, 0)
    assert result.extra["auto_stage"] in ("lns", "exact after lns")
    bound = result.exact.lower_bound_bytes
    assert bound <= full <= result.best.dram
    assert result.exact.optimal == (result.best.dram == bound)
    assert result.exact.gap == pytest.approx((result.best.dram - bound) / bound)
    problem.to_plan(result.best).validate()


# ------------------------------------------------------------------------ certificates
@pytest.mark.parametrize("seed,scheme", CASES[::3])
@pytest.mark.parametrize("effort", [0.0, 1.0])
def test_certificate_of_a_heuristic_plan(seed, scheme, effort):
    opt = optimum(seed, scheme)[0]
    problem = case_problem(seed, scheme, budget=3)
    result = make_search("rs").run(problem, seed)
    cert = certify(problem, result, effort)
    assert cert.lower_bound_bytes <= opt <= result.best.dram
    if effort:  # A* finishes on these graphs: the optimum itself
        assert cert.lower_bound_bytes == opt
        assert cert.method == ("optimal" if result.best.dram == opt else "exact optimum")
    else:
        assert cert.method == "traffic bound"
    assert cert.gap == pytest.approx((result.best.dram - cert.lower_bound_bytes)
                                     / cert.lower_bound_bytes)  # fmt: skip


def test_plan_defaults_print_bound_and_gap(tmp_path):
    out = invoke("plan", "resnet18", "--buffer", "128KB", "-q").output
    assert "search       auto" in out
    assert "lower bound" in out and "(optimal), gap 0.00%" in out
    path = tmp_path / "p.json"
    invoke("plan", "resnet18", "--search", "ls", "--budget", "50", "--bound-effort", "0",
           "-q", "-o", path)  # fmt: skip
    metrics = json.loads(path.read_text())["metrics"]
    assert metrics["bound_method"] == "traffic bound"
    assert 0 < metrics["lower_bound_bytes"] <= metrics["dram_bytes"]
    assert metrics["gap"] == pytest.approx(
        (metrics["dram_bytes"] - metrics["lower_bound_bytes"]) / metrics["lower_bound_bytes"]
    )


def test_sweep_table_has_the_gap():
    out = invoke("sweep", "resnet18", "--buffers", "64KB,128KB", "-q").output
    assert "gap" in out and "0.00%" in out


def test_auto_proves_after_lns_with_its_plan_as_upper_bound():
    """First exact run cut at once, a sliver of LNS, then the second exact run (warm-started
    from LNS's plan) has the work to prove the optimum."""
    full = make_search("exact").run(_medium_graph_problem(), 0).best.dram
    problem = _medium_graph_problem()
    problem.budget = 100
    auto = make_search("auto", effort=2.0, exact_share=1e-4, lns_share=1e-4)
    result = auto.run(problem, 0)
    assert result.exact.optimal and result.best.dram == full
    assert result.exact.lower_bound_bytes == full and result.exact.gap == 0.0
    assert result.extra["auto_stage"] in ("lns", "exact after lns")
    problem.to_plan(result.best).validate()


def test_lns_when_every_op_is_unfusable_returns_at_once():
    problem = make_problem(random_dag(1000, n_nodes=8), "lbdf", 1, budget=10)  # nothing fits
    assert problem.unfusable == problem.graph.all_nodes
    result = make_search("lns").run(problem, 0)
    assert result.wall_time_s < 1.0 and result.extra["work"] < 100
    assert all(g.bit_count() == 1 for g in result.best.groups)


def _three_convs() -> OpGraph:
    """x (4x8x8) -> a -> t (4x8x8) -> b -> u (2x8x8) -> c -> y (4x8x8), 1x1 convs of 100
    weights each."""
    tensors = [
        Tensor("x", (4, 8, 8), -1),
        Tensor("t", (4, 8, 8), 0),
        Tensor("u", (2, 8, 8), 1),
        Tensor("y", (4, 8, 8), 2),
    ]
    nodes = [
        Node("a", "Conv", "conv", (0,), (1,), weights=100),
        Node("b", "Conv", "conv", (1,), (2,), weights=100),
        Node("c", "Conv", "conv", (2,), (3,), weights=100),
    ]
    return OpGraph.build("three", nodes, tensors, [0], [3])


def test_a_chain_that_no_group_holds_whole_is_charged_its_cheapest_cut():
    """Each pair fits (floor 200 weights + a row of three tensors, 32 + 32 + 16 = 280 <
    400) but the three convs do not (300 + 32 + 32 + 16 + 32 = 412): no pair is separated,
    yet every plan cuts t (2 x 256 B) or u (2 x 128 B): the bound is io + W + 256 =
    256 + 256 + 300 + 256 = 1068, the optimum ({a, b}, {c})."""
    graph = _three_convs()
    cm = LBDF(graph, Accelerator(400, "lbdf"))
    assert cm.is_valid(0b011) and cm.is_valid(0b110) and not cm.is_valid(0b111)
    assert cm.buffer_floor(0b111) == 412
    plain, bound = TrafficBound(cm, []), TrafficBound(cm, [], chain_budget=100)
    assert plain.separated_tensors == 0 and plain.total() == 256 + 256 + 300
    assert bound.total() == 1068
    best = make_search("exact").run(FusionProblem(cm, make_splitter("tree", cm, 0), 1), 0)
    assert best.best.dram == 1068 and sorted(best.best.groups) == [0b011, 0b100]
    # {a} ran: b and c fit together, t is read back (256), b and c's weights and y remain
    assert bound.remaining(0b001) == 256 + 200 + 256
    # past its budget the chain is dropped, never half counted
    assert TrafficBound(cm, [], chain_budget=1).total() == plain.total()


CHAIN_CASES = CASES + [(seed, scheme) for seed in range(40, 76) for scheme in ("lbdf", "brr")]


@pytest.mark.parametrize("seed,scheme", CHAIN_CASES)
def test_chain_relaxation_admissible_and_consistent(seed, scheme):
    # 200 random graphs and buffers: the bound with its chain relaxation never exceeds the
    # brute-force optimum, never falls below the plain traffic bound, and each step of an
    # optimal plan pays at least what the bound drops (consistency, what A* needs)
    problem = case_problem(seed, scheme)
    opt, plan = optimum(seed, scheme)
    cm = problem.cost_model
    atoms = [1 << v for v in bits(problem.unfusable)]
    plain = TrafficBound(cm, atoms)
    bound = TrafficBound(cm, atoms, chain_budget=10_000)
    assert plain.total() <= bound.total() <= opt
    _pays_its_drop_along(problem, bound, plan)


@pytest.mark.parametrize("seed,scheme", CHAIN_CASES[::5])
def test_chain_relaxation_is_consistent_on_every_transition(seed, scheme):
    # every state A* can reach and every transition out of it: the drop of the bound is at
    # most the step's DRAM (the chain terms' proof, docs/cost-model.md "Chains")
    problem = case_problem(seed, scheme)
    solver = ExactSolver(problem.cost_model, problem.unfusable, chains=True)
    start, _ = solver.start_state()
    todo, seen = [start], {start}
    while todo:
        state = todo.pop()
        for _, _, nxt, dram in solver.expand(state):
            assert solver.h(state) <= dram + solver.h(nxt)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert solver.h(problem.graph.all_nodes) == 0


@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_chain_relaxation_never_exceeds_a_zoo_optimum(model, scheme):
    # exact on real networks too: the bound with its chains stays at or below the proven
    # optimum at a small and a large buffer (every zoo model: docs/results.md, "Issue 27")
    for buffer in ("64KB", "512KB"):
        plan = fp.plan(model, buffer, scheme, search="exact")
        assert plan.result.exact.optimal
        assert plan_lower_bound(plan.cost_model) <= plan.metrics.dram_bytes

"""Searches (search/): RS, LS, NSGA-II (pymoo and OpenBox backends) on a small real model.

The model is a 28-op network built with ``onnx.helper`` and imported like any ONNX file:
two residual blocks, a strided block with a 1x1 projection, a squeeze-and-excitation block
and a Gemm head. Every returned plan goes through ``Plan.validate()``; the budget is checked
to be spent exactly; seeded runs must repeat exactly.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest

from accel_model import Accelerator, make_cost_model
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import bits, is_weakly_connected, quotient_order
from fusionplan.ir.partition import cut_edges_of, groups_from_cut_edges
from fusionplan.planning.split import make_splitter
from fusionplan.search import FusionProblem, SearchResult, make_search, search_names
from fusionplan.search.local_search import LocalSearch, LocalSearchConfig
from fusionplan.search.nsga2 import NSGA2Config, NSGA2Search
from fusionplan.search.operators import (
    EdgeCodec,
    MergeAdjacentGroups,
    MoveBoundaryNode,
    OneEditMutation,
    PlanRepair,
    PlanView,
    RandomCutSampling,
    SplitAtTopologicalCut,
)
from tests.onnx_builders import Net, to_graph
from tests.random_dags import random_dag

SEARCHES = ["rs", "ls", "nsga2", "nsga2-openbox"]


def mini_net():
    """x(1,8,16,16) -> stem -> 2 residual blocks -> strided block (+1x1 projection) -> SE
    -> head conv -> GAP -> Gemm -> y(1,10): 28 compute ops, 31 edges."""
    net = Net(7)
    t = net.conv("x", "stem", 8, 16)
    t = net.op("Relu", [t], "stem_relu.out", "stem_relu")
    for b in range(2):
        s = t
        t = net.conv(t, f"b{b}c1", 16, 16)
        t = net.op("Relu", [t], f"b{b}r1.out", f"b{b}r1")
        t = net.conv(t, f"b{b}c2", 16, 16)
        t = net.op("Add", [t, s], f"b{b}add.out", f"b{b}add")
        t = net.op("Relu", [t], f"b{b}r2.out", f"b{b}r2")
    s = t
    t = net.conv(t, "d_c1", 16, 32, stride=2)
    t = net.op("Relu", [t], "d_r1.out", "d_r1")
    t = net.conv(t, "d_c2", 32, 32)
    p = net.conv(s, "d_proj", 16, 32, k=1, stride=2)
    t = net.op("Add", [t, p], "d_add.out", "d_add")
    t = net.op("Relu", [t], "d_r2.out", "d_r2")
    g = net.op("GlobalAveragePool", [t], "se_gap.out", "se_gap")
    g = net.conv(g, "se_fc1", 32, 8, k=1)
    g = net.op("Relu", [g], "se_r.out", "se_r")
    g = net.conv(g, "se_fc2", 8, 32, k=1)
    g = net.op("Sigmoid", [g], "se_sig.out", "se_sig")
    t = net.op("Mul", [t, g], "se_mul.out", "se_mul")
    t = net.conv(t, "head", 32, 32)
    t = net.op("Relu", [t], "head_r.out", "head_r")
    t = net.op("GlobalAveragePool", [t], "gap.out", "gap")
    t = net.op("Flatten", [t], "flat.out", "flat")
    net.op("Gemm", [t, net.weight("fc.w", 10, 32), net.weight("fc.b", 10)], "y", "fc", transB=1)
    return net.model([("x", [1, 8, 16, 16])], [("y", [1, 10])], "mini_net")


@pytest.fixture(scope="module")
def graph():
    return to_graph(mini_net())


def make_problem(graph, scheme="lbdf", buffer=8 * 1024, splitter="random", budget=40, seed=0):
    cm = make_cost_model(graph, Accelerator(buffer, scheme))
    return FusionProblem(cm, make_splitter(splitter, cm, seed), budget)


def search(name: str, **options):
    if name == "nsga2-openbox":
        pytest.importorskip("openbox")
    return make_search(name, **options)


def run(graph, name, seed=0, **problem_kw) -> tuple[FusionProblem, SearchResult]:
    problem = make_problem(graph, seed=seed, **problem_kw)
    return problem, search(name).run(problem, seed)


# ------------------------------------------------------------------------ the basics
def test_registry_names():
    assert {"rs", "ls", "nsga2", "nsga2-openbox"} <= set(search_names())
    assert make_search("ls").name == "ls"
    assert make_search("nsga2").name == "nsga2"
    assert make_search("nsga2", backend="pymoo").name == "nsga2"


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("scheme,buffer", [("lbdf", 8 * 1024), ("brr", 6 * 1024)])
@pytest.mark.parametrize("splitter", ["random", "tree"])
def test_returns_valid_plan_and_spends_budget_exactly(graph, name, scheme, buffer, splitter):
    problem, result = run(graph, name, scheme=scheme, buffer=buffer, splitter=splitter,
                          budget=37)  # fmt: skip
    assert problem.proposed == problem.budget == result.proposed == 37
    plan = problem.to_plan(result.best, result).validate()
    assert plan.metrics.dram_bytes == result.best.dram
    assert plan.metrics.mbu_bytes == result.best.mbu
    # trace: strictly improving, ends at the best, positions within the budget
    drams = [d for _, d in result.trace]
    assert drams == sorted(drams, reverse=True) and len(set(drams)) == len(drams)
    assert drams[-1] == result.best.dram
    assert all(1 <= n <= 37 for n, _ in result.trace)
    stats, cm = problem.splitter.stats, problem.cost_model.stats
    assert result.invalid_groups == stats.invalid_groups and 0 < result.cost_queries <= cm.queries
    assert result.rectify_rate == (
        stats.rectified / stats.invalid_groups if stats.invalid_groups else 1.0
    )
    if splitter == "random" and stats.invalid_groups:
        assert result.rectify_rate == 0.0  # random cuts never count as rectified
    assert result.algorithm == name
    json.dumps(result.info())  # JSON-friendly metadata


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("budget", [1, 2, 9, 10, 11, 23])
def test_budget_is_exact_for_any_size(graph, name, budget):
    problem, result = run(graph, name, budget=budget, seed=budget)
    assert problem.proposed == budget == result.proposed
    problem.to_plan(result.best).validate()


@pytest.mark.parametrize("name", SEARCHES)
def test_deterministic_for_a_seed(graph, name):
    a_problem, a = run(graph, name, seed=3, budget=50, splitter="random")
    b_problem, b = run(graph, name, seed=3, budget=50, splitter="random")
    assert a.best.groups == b.best.groups
    assert a.trace == b.trace
    assert [c.key for c in a.pareto] == [c.key for c in b.pareto]
    assert a_problem.seen.keys() == b_problem.seen.keys()


@pytest.mark.parametrize("name", SEARCHES)
def test_pareto_front_is_non_dominated_and_holds_the_best(graph, name):
    problem, result = run(graph, name, scheme="brr", buffer=6 * 1024, budget=60)
    front = result.pareto
    assert front, "empty front"
    assert result.best in front
    pairs = [(c.dram, c.mbu) for c in front]
    assert len(set(pairs)) == len(pairs)
    for i, a in enumerate(pairs):
        for j, b in enumerate(pairs):
            if i != j:
                assert not (b[0] <= a[0] and b[1] <= a[1]), f"{a} is dominated by {b}"
    # nothing the search saw dominates a front member
    for cand in problem.seen.values():
        for c in front:
            assert not (cand.dram <= c.dram and cand.mbu <= c.mbu
                        and (cand.dram, cand.mbu) != (c.dram, c.mbu))  # fmt: skip
    assert min(c.dram for c in problem.seen.values()) == result.best.dram
    for c in front:
        problem.to_plan(c).validate()


def test_ls_and_nsga2_beat_random_search_on_average(graph):
    """BRR at 6 KB with random splitting: at 300 plans the guided searches find clearly
    cheaper plans than random search (checked on 20 seeds when this test was written:
    LS won 20/20, NSGA-II 19/20; over seeds 0-3 both means are ~10% below RS)."""
    means = {}
    for name in ("rs", "ls", "nsga2"):
        drams = []
        for seed in range(4):
            _, result = run(graph, name, seed=seed, scheme="brr", buffer=6 * 1024,
                                  splitter="random", budget=300)  # fmt: skip
            drams.append(result.best.dram)
        means[name] = statistics.mean(drams)
    assert means["ls"] <= means["rs"], means
    assert means["nsga2"] <= means["rs"], means


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("budget", [0, -5, 2.5, True, "10"])
def test_bad_budget_is_a_config_error(graph, budget):
    with pytest.raises(ConfigError, match="budget"):
        make_problem(graph, budget=budget)


@pytest.mark.parametrize("name", SEARCHES)
def test_spent_budget_is_a_config_error_at_start(graph, name):
    problem = make_problem(graph, budget=3)
    search(name).run(problem, 0)
    with pytest.raises(ConfigError, match="budget"):
        search(name).run(problem, 0)


@pytest.mark.parametrize(
    "name,options,match",
    [
        ("nope", {}, "unknown search"),
        ("rs", {"top_k": 3}, "takes no options"),
        ("ls", {"top_k": 0}, "top_k"),
        ("ls", {"selection": "roulette"}, "selection"),
        ("ls", {"mutations": ("teleport",)}, "mutation"),
        ("ls", {"bogus": 1}, "no option 'bogus'"),
        ("nsga2", {"backend": "deap"}, "backend"),
        ("nsga2", {"pop_size": 0}, "pop_size"),
        ("nsga2", {"crossover": "one_point"}, "crossover"),
        ("nsga2", {"mutation_rate": 1.5}, "mutation_rate"),
        ("nsga2-openbox", {"backend": "pymoo"}, "OpenBox"),
    ],
)
def test_bad_options_are_config_errors(name, options, match):
    if name == "nsga2-openbox":
        pytest.importorskip("openbox")
    with pytest.raises(ConfigError, match=match):
        make_search(name, **options)


def test_openbox_options_only_for_pymoo_are_refused():
    pytest.importorskip("openbox")
    with pytest.raises(ConfigError, match="pymoo backend only"):
        make_search("nsga2", backend="openbox", crossover="uniform")


def test_missing_openbox_is_a_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "openbox", None)  # import openbox -> ImportError
    with pytest.raises(ConfigError, match=r"pip install 'fusionplan\[openbox\]'"):
        make_search("nsga2", backend="openbox")
    with pytest.raises(ConfigError, match=r"fusionplan\[openbox\]"):
        make_search("nsga2-openbox")


def test_config_objects_and_options_agree(graph):
    cfg = LocalSearchConfig(top_k=4, selection="uniform")
    a = LocalSearch(cfg).run(make_problem(graph, budget=30), 1)
    b = make_search("ls", top_k=4, selection="uniform").run(make_problem(graph, budget=30), 1)
    assert a.best.groups == b.best.groups and a.trace == b.trace
    assert a.config["top_k"] == 4
    n = NSGA2Search(NSGA2Config(pop_size=6, crossover="uniform"))
    assert n.config.pop_size == 6 and n.name == "nsga2"
    assert make_search("nsga2", pop_size=6).config.pop_size == 6


def test_search_does_not_import_ga_libraries():
    code = (
        "import sys; from fusionplan import search; "
        "search.make_search('ls'); search.make_search('nsga2'); "
        "search.search_names(); "
        "bad = [m for m in ('pymoo', 'openbox', 'platypus', 'ConfigSpace') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------ operators
def test_one_edit_mutations_keep_a_partition(graph):
    problem = make_problem(graph, budget=100)
    rng = np.random.default_rng(0)
    import random

    prng = random.Random(0)
    for _ in range(10):
        cand = problem.evaluate_cuts(list(rng.random(len(problem.edges)) < rng.random()))
        view = PlanView(problem, cand)
        for op in (MoveBoundaryNode(), MergeAdjacentGroups(), SplitAtTopologicalCut(),
                   OneEditMutation()):  # fmt: skip
            if hasattr(op, "applicable") and not op.applicable(view):
                continue
            groups = op.do(view, prng)
            union = 0
            for g in groups:
                assert g and not union & g
                union |= g
            assert union == problem.fusable
            assert groups != view.groups
            if isinstance(op, SplitAtTopologicalCut):  # a topological cut stays sound
                assert all(is_weakly_connected(graph, g) for g in groups)
                assert quotient_order(graph, [*groups, *problem.fixed]) is not None
            plan = problem.to_plan(problem.evaluate(groups))
            plan.validate()


def test_mutation_with_nothing_to_do_returns_the_plan():
    g = random_dag(2, n_nodes=1)
    cm = make_cost_model(g, Accelerator(1 << 20, "lbdf"))
    problem = FusionProblem(cm, make_splitter("random", cm, 0), 5)
    view = PlanView(problem, problem.evaluate_cuts([]))
    import random

    assert OneEditMutation().do(view, random.Random(0)) == view.groups


@pytest.mark.parametrize("seed", range(6))
def test_edge_codec_matches_partition_functions(seed):
    g = random_dag(seed, n_nodes=14)
    cm = make_cost_model(g, Accelerator(1 << 20, "lbdf"))
    problem = FusionProblem(cm, make_splitter("random", cm, 0), 5)
    codec = EdgeCodec(problem)
    rng = np.random.default_rng(seed)
    for x in RandomCutSampling().do(20, len(problem.edges), rng):
        cut = x.tolist()
        groups = codec.decode(cut)
        assert groups == groups_from_cut_edges(g, problem.fusable, cut, problem.edges)
        assert codec.encode(groups).tolist() == cut_edges_of(groups, problem.edges)


def test_plan_repair_is_idempotent_and_matches_evaluate(graph):
    problem = make_problem(graph, budget=75, splitter="tree")
    repair = PlanRepair(problem)
    X = RandomCutSampling().do(25, len(problem.edges), np.random.default_rng(1))
    R = repair.do(X)
    assert np.array_equal(repair.do(R), R)
    for x, r in zip(X, R, strict=True):
        plan = repair.plan_of(x)
        assert plan == repair.plan_of(r)
        assert problem.evaluate_cuts(x.tolist()).groups == plan
        assert problem.evaluate_cuts(r.tolist()).groups == plan
        problem.to_plan(problem.evaluate_realised(plan)).validate()
    assert problem.proposed == 75


def test_sampling_has_both_fine_and_coarse_plans():
    X = RandomCutSampling().do(200, 50, np.random.default_rng(0))
    rate = X.mean(axis=1)
    assert X.dtype == bool and rate.min() < 0.15 and rate.max() > 0.85


def test_realise_does_not_count_and_evaluate_realised_does(graph):
    problem = make_problem(graph, budget=2)
    plan = problem.realise(problem.whole_components())
    assert problem.proposed == 0
    cand = problem.evaluate_realised(plan)
    assert problem.proposed == 1 and cand.groups == plan
    assert problem.evaluate(problem.whole_components()) is cand  # same plan, memoised


def test_unfusable_ops_stay_singletons(graph):
    problem, result = run(graph, "ls", scheme="lbdf", buffer=4 * 1024, budget=40)
    assert problem.unfusable, "the 4 KB buffer should leave some op unfusable"
    for v in bits(problem.unfusable):
        assert (1 << v) in result.best.groups
    problem.to_plan(result.best).validate()

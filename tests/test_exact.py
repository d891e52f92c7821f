"""Exact search (search/exact.py): A* over down-sets against an independent brute force.

* on random DAGs of 6-13 ops (tests/random_dags.py), both schemes, buffers at which some
  ops are unfusable and many groups do not fit, the exact optimum equals the best plan of a
  brute force that enumerates *every* partition of the fusable ops (written here from
  scratch: its own connectivity and cycle checks, costs computed without the memo);
* it is never worse than RS / LS / NSGA-II at any budget, and its lower bound never exceeds
  the optimum, also when the time limit cuts the search short;
* it refuses hopeless graphs quickly with a one-line ConfigError, spends exactly one
  proposal, and repeats exactly;
* the facts its exactness argument rests on hold: the buffer is monotone over down-sets of
  the remaining graph (LBDF, BRR), the heuristic is consistent, the down-set count is right.
"""

from __future__ import annotations

import functools
import random
import time

import pytest

from accel_model import Accelerator
from accel_model.accelerator import OPTIMUS_APPROXIMATIONS
from accel_model.brr import BRR
from accel_model.lbdf import LBDF
from accel_model.registry import cost_model_class
from fusionplan.data.synthetic import resnet_block_stack
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Node, OpGraph, Tensor, bits, weak_components
from fusionplan.ir.onnx_import import graph_from_proto
from fusionplan.planning.split import make_splitter
from fusionplan.search import ExactConfig, FusionProblem, make_search, search_names
from fusionplan.search.effort import EXACT_UNITS
from fusionplan.search.exact import ExactSolver, count_downsets
from tests.random_dags import random_dag, small_buffer, valid_plans

VARIANTS: dict[str, dict] = {
    "lbdf": {},
    "brr": {},
    # channel slices of 2 (the random graphs have 2-8 channels), and Optimus's conventions
    "brr-k2": {"pe_unroll": 2},
    # (their monotone approximations: the profile itself mirrors Optimus's code, slips and all)
    "optimus-k2": {
        "conventions": OPTIMUS_APPROXIMATIONS,
        "depthwise_weights": False,
        "pe_unroll": 2,
    },
}
"""Accelerator settings the property tests run under, by name."""


def accelerator(variant: str, buffer: int, b: int = 1, single_layer: str | None = None):
    """The accelerator of a test variant (:data:`VARIANTS`)."""
    scheme = "lbdf" if variant == "lbdf" else "brr"
    return Accelerator.of(buffer, scheme, b, single_layer, **VARIANTS[variant])


def scheme_class(variant: str):
    """The cost-model class of a test variant."""
    return cost_model_class(accelerator(variant, 1).scheme)


def make_problem(graph, scheme, buffer, budget=1, splitter="tree", seed=0, cls=None):
    accel = accelerator(scheme, buffer)
    cm = (cls or cost_model_class(accel.scheme))(graph, accel)
    return FusionProblem(cm, make_splitter(splitter, cm, seed), budget)


def case_problem(seed: int, scheme: str, budget: int = 1, cls=None) -> FusionProblem:
    """Case ``seed``: 6..13 ops; the buffer is cut at the 50/70/90/100 % quantile of the
    single-op needs (so some ops fit nowhere) and scaled 1x / 1x / 1.5x / 3x, so that some
    groups do not fit and the best plans range from a few to many fused ops."""
    graph = random_dag(1000 + seed, n_nodes=6 + seed % 8)
    quantile = (0.5, 0.7, 0.9, 1.0)[seed % 4]
    base = small_buffer(
        cost_model_class(accelerator(scheme, 1).scheme), graph, seed, quantile=quantile
    )
    buffer = max(1, int(base * (1, 1, 1.5, 3)[seed // 4 % 4]))
    return make_problem(graph, scheme, buffer, budget, cls=cls)


CASES = [(seed, scheme) for seed in range(40) for scheme in ("lbdf", "brr")]
CASES += [(seed, variant) for seed in range(24) for variant in ("brr-k2", "optimus-k2")]


# ------------------------------------------------------------------------ brute force
@functools.cache
def brute_force(seed: int, scheme: str) -> tuple[int, tuple[int, ...], int]:
    """(optimal DRAM, an optimal plan, number of valid plans), over every valid plan
    (:func:`tests.random_dags.valid_plans`)."""
    cm = case_problem(seed, scheme).cost_model
    best: list = [None, None]
    plans = 0
    for plan in valid_plans(cm):
        plans += 1
        dram = sum(cm.compute_uncached(g).dram for g in plan)
        if best[0] is None or dram < best[0]:
            best[:] = [dram, plan]
    return best[0], best[1], plans


@pytest.mark.parametrize("seed,scheme", CASES)
def test_matches_brute_force(seed, scheme):
    opt, opt_plan, _ = brute_force(seed, scheme)
    problem = case_problem(seed, scheme)
    result = make_search("exact").run(problem, 0)
    assert result.exact.optimal is True
    assert result.best.dram == opt, f"exact {result.best.dram} B, brute force {opt} B"
    assert result.exact.lower_bound_bytes == opt
    assert problem.proposed == result.proposed == 1
    problem.to_plan(result.best).validate()
    # the plan the brute force found is accepted by the independent checker too
    problem.to_plan(problem._candidate(opt_plan)).validate()


def test_cases_exercise_fusion_and_invalid_groups():
    """The brute-force cases are not trivial: unfusable ops, connected groups that do not
    fit, and optima that fuse several ops all occur often."""
    with_unfusable = fused = with_invalid_group = 0
    base = [(seed, scheme) for seed, scheme in CASES if scheme in ("lbdf", "brr")]
    for seed, scheme in base:
        problem = case_problem(seed, scheme)
        cm, graph = problem.cost_model, problem.graph
        _, plan, _ = brute_force(seed, scheme)
        with_unfusable += problem.unfusable != 0
        fused += any(g.bit_count() > 1 for g in plan)
        with_invalid_group += any(
            not cm.cost(c).valid
            for c in weak_components(graph, problem.fusable)
            if c.bit_count() > 1
        )
    assert with_unfusable >= len(base) // 4
    assert fused >= len(base) * 3 // 4
    assert with_invalid_group >= len(base) // 2
    # channel slices and Optimus's conventions fuse more, but still meet groups that do not fit
    for variant in ("brr-k2", "optimus-k2"):
        cases = [(seed, v) for seed, v in CASES if v == variant]
        plans = [brute_force(seed, v)[1] for seed, v in cases]
        assert sum(any(g.bit_count() > 1 for g in p) for p in plans) >= len(cases) * 3 // 4
        invalid = 0
        for seed, v in cases:
            problem = case_problem(seed, v)
            invalid += any(
                not problem.cost_model.cost(c).valid
                for c in weak_components(problem.graph, problem.fusable)
                if c.bit_count() > 1
            )
        assert invalid >= len(cases) // 2


@pytest.mark.parametrize("seed,scheme", CASES[::4])
def test_without_buffer_pruning_same_optimum(seed, scheme):
    """A scheme that does not declare its buffer monotone over down-sets is searched
    without stopping at groups that do not fit (slower, same optimum)."""

    class Unproven(scheme_class(scheme)):  # same costs, no monotonicity declared
        def monotone_over_downsets(self) -> bool:
            return False

    problem = case_problem(seed, scheme, cls=Unproven)
    result = make_search("exact").run(problem, 0)
    assert result.exact.pruned_by_buffer is False
    assert result.best.dram == brute_force(seed, scheme)[0]


# ------------------------------------------------------------------------ effort, bound
@pytest.mark.parametrize("seed,scheme", CASES[::3])
def test_a_spent_effort_gives_valid_plan_and_lower_bound(seed, scheme):
    opt = brute_force(seed, scheme)[0]
    problem = case_problem(seed, scheme)
    result = make_search("exact", work=1).run(problem, 0)
    lower = result.exact.lower_bound_bytes
    assert lower <= opt <= result.best.dram
    assert result.exact.optimal == (lower == result.best.dram)
    assert problem.proposed == 1
    problem.to_plan(result.best).validate()


def _medium_graph_problem(scheme: str = "brr", seed: int = 1) -> FusionProblem:
    """36 ops, 9,094 down-sets: A* expands thousands of states (about 0.4 s)."""
    graph = random_dag(seed, n_nodes=36)
    return make_problem(graph, scheme, small_buffer(cost_model_class(scheme), graph, seed))


def test_work_limits_on_a_larger_graph():
    full = make_search("exact").run(_medium_graph_problem(), 0)
    assert full.exact.optimal and full.exact.states > 100
    assert full.exact.stopped_by == "optimal" and full.exact.work > 0
    opt = full.best.dram
    problem = _medium_graph_problem()
    cut = make_search("exact", work=1).run(problem, 0)
    bound = cut.exact
    assert bound.optimal is False and bound.status == "effort spent"
    assert bound.lower_bound_bytes <= opt < cut.best.dram
    assert bound.gap > 0
    problem.to_plan(cut.best).validate()
    # work that stops A* part-way (with or without the greedy dive): the bound holds, the
    # units are respected, and the same work gives the same plan and bound every time
    for work in (500, 5_000, full.exact.work // 2):
        for dive in (False, True):
            runs = []
            for _ in range(2):
                problem = _medium_graph_problem()
                mid = make_search("exact", work=work, greedy_dive=dive).run(problem, 0)
                lower = mid.exact.lower_bound_bytes
                assert lower <= opt <= mid.best.dram
                assert mid.exact.optimal == (lower == mid.best.dram)
                # limits are read every 16 visits: at most that many groups (and the states
                # the last expansion bounds) past them
                assert mid.exact.work <= work + 16 * 4 * len(problem.graph) + 1000
                problem.to_plan(mid.best).validate()
                runs.append((mid.best.groups, lower, mid.exact.states, mid.exact.work))
            assert runs[0] == runs[1]


def test_the_clock_cap_stops_a_run_and_says_so():
    problem = _medium_graph_problem()
    cut = make_search("exact", time_limit_s=1e-9).run(problem, 0)
    assert cut.exact.optimal is False and cut.exact.status == "time limit hit"
    problem.to_plan(cut.best).validate()


# ------------------------------------------------------------------------ vs heuristics
@pytest.mark.parametrize("seed,scheme", CASES[1::6])
@pytest.mark.parametrize("name", ["rs", "ls", "nsga2"])
def test_never_worse_than_heuristics(seed, scheme, name):
    exact = make_search("exact").run(case_problem(seed, scheme), 0).best.dram
    for budget in (1, 7, 120):
        problem = case_problem(seed, scheme, budget)
        heuristic = make_search(name).run(problem, seed)
        assert exact <= heuristic.best.dram, (name, budget)


def test_mini_net_against_searches():
    from tests.onnx_builders import to_graph
    from tests.test_search import mini_net

    graph = to_graph(mini_net())
    for scheme, buffer in (("lbdf", 8 * 1024), ("brr", 6 * 1024)):
        exact = make_search("exact").run(make_problem(graph, scheme, buffer), 0)
        assert exact.exact.optimal
        for name, budget in (("ls", 1000), ("nsga2", 300)):
            problem = make_problem(graph, scheme, buffer, budget)
            assert exact.best.dram <= make_search(name).run(problem, 0).best.dram


# ------------------------------------------------------------------------ refusal
def wide_dag(branches: int, length: int) -> OpGraph:
    """One input feeding ``branches`` parallel chains of 1x1 convs, summed by a chain of
    adds: about (length + 1) ** branches down-sets."""
    tensors = [Tensor("x", (4, 8, 8), -1)]
    nodes: list[Node] = []

    def add(name, op, kind, inputs, weights=0):
        tensors.append(Tensor(f"{name}.out", (4, 8, 8), len(nodes)))
        nodes.append(Node(name, op, kind, inputs, (len(tensors) - 1,), weights=weights))
        return len(tensors) - 1

    ends = []
    for b in range(branches):
        t = 0
        for i in range(length):
            t = add(f"b{b}c{i}", "Conv", "conv", (t,), weights=20)
        ends.append(t)
    acc = ends[0]
    for b, end in enumerate(ends[1:]):
        acc = add(f"sum{b}", "Add", "eltwise", (acc, end))
    return OpGraph.build("wide", nodes, tensors, [0], [acc])


def test_refuses_a_wide_graph():
    problem = make_problem(wide_dag(16, 3), "lbdf", 64 * 1024)
    with pytest.raises(ConfigError) as err:
        make_search("exact").run(problem, 0)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("exact search refused: model wide has more than ")
    assert "down-sets (limit 200,000); use --search auto, lns, ls or nsga2" in msg
    assert problem.proposed == 0


def test_max_downsets_option():
    graph = random_dag(5, n_nodes=30)
    count, exact = count_downsets(graph, 10**9)
    assert exact
    problem = make_problem(graph, "brr", small_buffer(BRR, graph, 5))
    with pytest.raises(ConfigError, match=rf"limit {count - 1:,}\)"):
        make_search("exact", max_downsets=count - 1).run(problem, 0)
    assert make_search("exact", max_downsets=count).run(problem, 0).exact.downsets == count


# ------------------------------------------------------------------------ protocol
def test_registry_options_and_budget():
    assert "exact" in search_names()
    assert make_search("exact").name == "exact"
    assert make_search("exact", time_limit_s=5).config == ExactConfig(time_limit_s=5)
    assert make_search("exact", effort=0.5).config.total_work == EXACT_UNITS // 2
    for bad in (
        {"time_limit_s": 0},
        {"time_limit_s": -1},
        {"time_limit_s": "1"},
        {"effort": 0},
        {"effort": float("nan")},
        {"work": 0},
        {"max_downsets": 0},
        {"max_downsets": 1.5},
        {"greedy_dive": 1},
        {"dive_share": 2},
        {"budget": 3},
    ):
        with pytest.raises(ConfigError):
            make_search("exact", **bad)
    problem = case_problem(3, "lbdf", budget=50)
    result = make_search("exact").run(problem, 0)
    assert problem.proposed == result.proposed == 1 and result.budget == 50
    assert result.trace == [(1, result.best.dram)]
    info = result.info()
    for key in ("optimal", "lower_bound_bytes", "states", "groups_enumerated", "downsets"):
        assert key in info
    problem.proposed = problem.budget
    with pytest.raises(ConfigError, match="budget"):
        make_search("exact").run(problem, 0)


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_deterministic(scheme):
    runs = [make_search("exact").run(_medium_graph_problem(scheme), s) for s in (0, 1)]
    assert runs[0].best.groups == runs[1].best.groups
    assert runs[0].exact == runs[1].exact


def test_all_ops_unfusable():
    graph = random_dag(7, n_nodes=8)
    problem = make_problem(graph, "lbdf", 1)  # nothing fits
    result = make_search("exact").run(problem, 0)
    assert result.exact.optimal
    assert result.best.groups == tuple(1 << v for v in range(len(graph)))


# ------------------------------------------------------------------------ the proof's facts
def _random_downset(graph: OpGraph, rng: random.Random) -> int:
    done, pred = 0, graph.pred_mask
    for _ in range(rng.randrange(len(graph))):
        ready = [v for v in range(len(graph)) if not done >> v & 1 and not pred[v] & ~done]
        done |= 1 << rng.choice(ready)
    return done


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_buffer_is_monotone_over_downsets_of_the_rest(scheme):
    """For a down-set D and down-sets S ⊆ G of R = V - D grown by closure steps (add a
    neighbour and its ancestors in R): F_beta(S) <= F_beta(G), and BRR's footprint too."""
    rng = random.Random(scheme)
    checked = 0
    for seed in range(150):
        graph = random_dag(seed, max_nodes=16)
        cls = LBDF if scheme == "lbdf" else BRR
        cm = cls(graph, Accelerator(1 << 40, scheme))  # everything fits: nothing is hidden
        done = _random_downset(graph, rng)
        rest = graph.all_nodes & ~done
        anc = ExactSolver(cm, 0).anc
        ready = [v for v in bits(rest) if not graph.pred_mask[v] & rest]
        group = 1 << rng.choice(ready)
        while True:
            near = 0
            for v in bits(group):
                near |= graph.neighbour_mask[v]
            near &= rest & ~group
            if not near:
                break
            x = rng.choice(bits(near))
            bigger = group | ((anc[x] | 1 << x) & rest)
            small, big = cm.compute_uncached(group), cm.compute_uncached(bigger)
            assert small.buffer <= big.buffer
            if scheme == "brr":
                assert cm.terms(group).footprint <= cm.terms(bigger).footprint
            group = bigger
            checked += 1
    assert checked > 300


@pytest.mark.parametrize("seed,scheme", CASES[::5])
def test_heuristic_is_consistent_and_admissible(seed, scheme):
    problem = case_problem(seed, scheme)
    solver = ExactSolver(problem.cost_model, problem.unfusable)
    state, g = solver.start_state()
    assert g + solver.h(state) <= brute_force(seed, scheme)[0]
    rng = random.Random(seed)
    while state != solver.all:
        moves = solver.expand(state)
        for _, _, nxt, dram in moves:
            assert solver.h(state) <= dram + solver.h(nxt)
        state = rng.choice(moves)[2]
    assert solver.h(solver.all) == 0


def _count_by_subsets(graph: OpGraph) -> int:
    pred = graph.pred_mask
    return sum(
        all(not (s >> v & 1) or not pred[v] & ~s for v in range(len(graph)))
        for s in range(1 << len(graph))
    )


@pytest.mark.parametrize("seed", range(12))
def test_count_downsets(seed):
    graph = random_dag(seed, max_nodes=12)
    assert count_downsets(graph, 10**9) == (_count_by_subsets(graph), True)
    total = _count_by_subsets(graph)
    count, exact = count_downsets(graph, total - 1)
    assert not exact and count > total - 1


@pytest.mark.bench
def test_refusal_is_quick():
    t0 = time.perf_counter()
    with pytest.raises(ConfigError):
        make_search("exact").run(make_problem(wide_dag(16, 3), "lbdf", 64 * 1024), 0)
    assert time.perf_counter() - t0 < 2.0


# ------------------------------------------------------------------------ shape memo
@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_groups_of_one_shape_share_a_cost_and_change_nothing(scheme):
    # five residual blocks: the exact search prices each shape once (a translate
    # of a priced group is answered from the shape memo), every answer equals a fresh
    # pricing, and the plan, its work units and its proof are those of a mask-only memo
    graph = graph_from_proto(resnet_block_stack(5, channels=8, size=8))
    found = {}
    for by_shape in (True, False):
        cm = cost_model_class(scheme)(graph, accelerator(scheme, 6000))
        cm.shape_invariant = by_shape
        problem = FusionProblem(cm, make_splitter("tree", cm, 0), 1)
        result = make_search("exact").run(problem, 0)
        assert result.exact.optimal
        found[by_shape] = (sorted(result.best.groups), result.best.dram, cm.stats.work)
        if by_shape:
            # at least each op of blocks 3 and 4 alone is the translate of block 2's op,
            # with the same surroundings (block 1 reads the graph input, 5 writes the output)
            assert cm.stats.shape_hits >= 2 * 5
            assert len(cm._by_shape) + cm.stats.shape_hits == len(cm._memo)
            assert all(c == cm.compute_uncached(g) for g, c in cm._memo.items())
    assert found[True] == found[False]
    paper = cost_model_class(scheme)(graph, accelerator(scheme, 6000, single_layer="paper"))
    assert not paper.shape_invariant  # the tools' conventions keep the memo by mask

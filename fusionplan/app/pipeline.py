"""The one place that assembles a planning run: cost model -> splitter -> problem -> search.

The API, the CLI, the bench and the speed measurements all go through :func:`assemble`, so
a plug-in registered in any registry (docs/design.md, "Plug points") is usable everywhere
at once. Importing :mod:`explainers` here registers the explainer splitters (lazily: torch
loads only when one is used).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import explainers  # noqa: F401  (registers the gnne / pg / rg splitters)
from accel_model import Accelerator, CostModel, make_cost_model
from accel_model.hardware import Hardware
from accel_model.objectives import OBJECTIVES, check_additive, make_objective, needs_schedules
from accel_model.oracle import Oracle, OracleCostModel, as_oracle
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, OpGraph
from fusionplan.planning.plan import Plan
from fusionplan.planning.split import SPLITTERS, Splitter, make_splitter
from fusionplan.search import SEARCHES, WORK_SEARCHES, FusionProblem, Search, make_search
from fusionplan.search.certify import certify, relative_gap
from fusionplan.search.effort import check_effort, check_time_cap
from fusionplan.search.problem import check_query_budget


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Everything that determines a planning run besides the model (one sweep point)."""

    buffer: str | int = "256KB"
    scheme: str = "lbdf"
    search: str = "auto"
    splitter: str = "tree"
    budget: int = 2000
    seed: int = 0
    bytes_per_element: int = 1
    # the cost conventions (accel_model/accelerator.py): a profile's defaults, each
    # overridable; None: the profile's value
    profile: str = "fusionplan"
    single_layer: str | None = None  # "tiled" or "paper" (docs/cost-model.md)
    pe_unroll: int | None = None
    in_place: bool | None = None
    depthwise_weights: bool | None = None
    conventions: tuple[str, ...] | None = None
    search_options: Mapping[str, Any] = field(default_factory=dict)
    # work of the exact, lns and auto searches, in multiples of their defaults
    # (search/effort.py): the same plan on any machine, under any load
    effort: float = 1.0
    # A* work certifying a heuristic's plan, in multiples of CERTIFY_UNITS
    # (search/certify.py); 0: the static bound only
    bound_effort: float = 1.0
    # wall-clock safety cap over the search and its certificate (None: none); a run it
    # stops says so ("time limit hit") and is the one result that depends on the machine
    time_limit_s: float | None = None
    # what the search minimises (accel_model/objectives.py) and the PE array, clock and
    # energies its latency and energy come from (None: accel_model.hardware's defaults)
    objective: str = "dram"
    hardware: Hardware | None = None
    # a black box that prices groups instead of the scheme's model (accel_model/oracle.py:
    # an Oracle, or a function query -> answer), and the oracle queries after which the
    # search stops (None: only ``budget`` stops it)
    oracle: Oracle | Callable[[dict[str, Any]], Any] | None = None
    query_budget: int | None = None

    def accelerator(self) -> Accelerator:
        conventions = None if self.conventions is None else frozenset(self.conventions)
        return Accelerator.of(
            self.buffer,
            self.scheme,
            self.bytes_per_element,
            self.single_layer,
            profile=self.profile,
            pe_unroll=self.pe_unroll,
            in_place=self.in_place,
            depthwise_weights=self.depthwise_weights,
            conventions=conventions,
        )

    def on(self, accel: Accelerator) -> PlanRequest:
        """This request on ``accel``: its buffer, scheme and every cost convention."""
        return replace(
            self,
            buffer=accel.buffer_bytes,
            scheme=accel.scheme,
            bytes_per_element=accel.bytes_per_element,
            profile="fusionplan",
            single_layer=accel.single_layer,
            pe_unroll=accel.pe_unroll,
            in_place=accel.in_place,
            depthwise_weights=accel.depthwise_weights,
            conventions=tuple(sorted(accel.conventions)),
        )

    def check(self) -> PlanRequest:
        """Reject bad settings before a possibly slow model load or export."""
        self.accelerator()
        if self.budget < 1:
            raise ConfigError(f"budget must be at least 1 plan, got {self.budget}")
        check_effort("search", self.effort)
        check_effort("bound", self.bound_effort, allow_zero=True)
        check_time_cap("the", self.time_limit_s)
        SEARCHES.check(self.search)
        SPLITTERS.check(self.splitter)
        OBJECTIVES.check(self.objective)
        if self.objective != "dram" and self.search == "lns":
            raise ConfigError(
                f"--search lns re-solves windows for DRAM only; for --objective "
                f"{self.objective} use auto, exact, rs, ls or nsga2"
            )
        if self.search == "exact":
            check_additive(self.objective)
        check_query_budget(self.query_budget)
        if self.query_budget is not None and self.search in WORK_SEARCHES:
            raise ConfigError(
                f"--search {self.search} is bounded by its effort, not by oracle queries: "
                "use --query-budget with rs, ls or nsga2"
            )
        if self.oracle is not None and (self.search in WORK_SEARCHES or self.objective != "dram"):
            exact = self.search in WORK_SEARCHES
            what = f"--search {self.search}" if exact else f"--objective {self.objective}"
            raise ConfigError(
                f"{what} reads the built-in cost model's bounds or schedules, which a "
                "black-box oracle does not have: use rs, ls or nsga2 with objective dram"
            )
        optimus = "optimus-groups" in self.accelerator().conventions
        front = self.search_options.get("front", "mbu") != "mbu"
        if optimus and (needs_schedules(self.objective) or front):
            what = "--front dram-energy-latency" if front else f"objective {self.objective}"
            raise ConfigError(
                f"{what} needs each group's schedule, and the optimus profile prices fused "
                "groups by Optimus's formulas, which lay out none: use dram or energy"
            )
        return self


def default_search(search: str | None, oracle: object | None) -> str:
    """``search``, or the default: ``auto``, or ``ls`` with a black-box oracle (auto reads
    the built-in model's bounds)."""
    if search is not None:
        return search
    return "auto" if oracle is None else "ls"


@dataclass
class Pipeline:
    """The assembled pieces of one run; :meth:`run` searches and returns the validated plan."""

    request: PlanRequest
    graph: OpGraph
    cost_model: CostModel
    splitter: Splitter
    problem: FusionProblem
    search: Search

    def run(self, progress: Callable[[int], None] | None = None) -> Plan:
        try:
            return self._run(progress)
        finally:
            self.cost_model.close()  # an oracle's program stops with the run, failed or not

    def _run(self, progress: Callable[[int], None] | None) -> Plan:
        request = self.request
        started = time.perf_counter()
        result = self.search.run(self.problem, request.seed, progress)
        result.model = self.graph.name
        result.splitter = request.splitter
        ranker_stats = getattr(getattr(self.splitter, "ranker", None), "stats", None)
        if ranker_stats is not None:  # explainer rankers: how many groups, how long
            result.explained_groups = ranker_stats.explained
            result.explain_seconds = ranker_stats.explain_seconds
        cap = request.time_limit_s
        left = None if cap is None else max(cap - (time.perf_counter() - started), 1e-6)
        if self.cost_model.white_box:  # a black box proves nothing beyond what it answered
            result.certificate = certify(self.problem, result, request.bound_effort, left)
        return self.problem.to_plan(result.best, result).validate()


def assemble(
    graph: OpGraph, request: PlanRequest, *, shape_memo: tuple[dict, dict] | None = None
) -> Pipeline:
    """Build a fresh cost model, splitter, problem and search for ``request`` on ``graph``;
    ``shape_memo``: the memo and fact ids the cost model prices through, shared with other
    graphs' (:meth:`accel_model.base.CostModel.share_shape_memo`)."""
    request.check()
    if request.oracle is not None:
        cost_model: CostModel = OracleCostModel(
            graph, request.accelerator(), as_oracle(request.oracle)
        )
    else:
        cost_model = make_cost_model(graph, request.accelerator())
    if shape_memo is not None:
        cost_model.share_shape_memo(*shape_memo)
    splitter = make_splitter(request.splitter, cost_model, request.seed)
    options = dict(request.search_options)
    if request.search in WORK_SEARCHES:
        options.setdefault("effort", request.effort)
        options.setdefault("time_limit_s", request.time_limit_s)
    search = make_search(request.search, **options)
    objective = make_objective(request.objective, cost_model, request.hardware)
    try:  # the problem asks about single ops: an oracle's program starts here
        problem = FusionProblem(
            cost_model, splitter, request.budget, objective=objective,
            query_budget=request.query_budget,
        )  # fmt: skip
    except BaseException:
        cost_model.close()
        raise
    return Pipeline(request, graph, cost_model, splitter, problem, search)


def plan_graph(
    graph: OpGraph,
    request: PlanRequest,
    progress: Callable[[int], None] | None = None,
    *,
    warm_start: Sequence[Plan] = (),
) -> Plan:
    """Run one search on ``graph`` and return its best plan, validated.

    ``warm_start`` plans (of the same graph) are the search's starting incumbents
    (``FusionProblem.warm_start``): the result is never worse than any of them.
    """
    pipeline = assemble(graph, request)
    pipeline.problem.warm_start = _groups_of(graph, warm_start)
    return pipeline.run(progress)


def plan_at_least_as_good(
    graph: OpGraph,
    request: PlanRequest,
    others: Sequence[Plan],
    progress: Callable[[int], None] | None = None,
    *,
    groups: Sequence[Sequence[Group]] = (),
) -> Plan:
    """Exactly the plan :func:`plan_graph` returns for ``request`` (the same search, the
    same work, the same bytes), replaced by the best of ``others`` (made valid here) where
    that one costs less (scores less, under another objective). Unlike a warm start,
    ``others`` cannot steer the search, so the result is never worse than ``fusionplan
    plan`` at this point: they can only help. ``groups``: more such plans, as group masks
    of ``graph`` (a plan a pre-pass found for it)."""
    pipeline = assemble(graph, request)
    plan = pipeline.run(progress)
    result, problem = plan.result, pipeline.problem
    assert result is not None and result.certificate is not None
    problem.warm_start = [*_groups_of(graph, others), *(tuple(g) for g in groups)]
    better = min(problem.warm_candidates(), key=lambda c: (c.score, c.dram, c.mbu), default=None)
    if better is None or better.score >= result.best.score:
        return plan
    bound = result.certificate.lower_bound_bytes
    optimal = bound >= better.dram
    result.best = better
    if result.objective_bound is not None:  # the swapped-in plan's score, its gap
        found = result.objective_bound
        result.objective_bound = replace(
            found, score=better.score, optimal=found.lower_bound >= better.score
        )
    result.certificate = replace(
        result.certificate,
        gap=0.0 if optimal else relative_gap(better.dram, bound),
        method="optimal" if optimal else result.certificate.method,
    )
    result.extra = {**result.extra, "from_smaller_buffer": True}
    return problem.to_plan(better, result).validate()


def _groups_of(graph: OpGraph, plans: Sequence[Plan]) -> list[tuple[int, ...]]:
    if any(p.graph is not graph for p in plans):
        raise ConfigError("warm-start plans must be plans of the graph being planned")
    return [tuple(p.groups) for p in plans]


def sweep_graph(
    graph: OpGraph,
    requests: Sequence[PlanRequest],
    progress: Callable[[int], None] | None = None,
) -> list[Plan]:
    """Plan ``graph`` at each request's buffer, smallest first: each point is the plan
    ``fusionplan plan`` gives there, or the best plan at the next smaller buffer of the same
    scheme where that one costs less (:func:`plan_at_least_as_good`).

    With the default ``tiled`` single-layer cost a plan valid at a buffer is valid and no
    dearer at a larger one (docs/cost-model.md, "Single-layer cost"), so the DRAM curve never
    rises with the buffer, whatever the search (the ``paper`` convention can rise), and no
    point is worse than planning that buffer alone.
    Progress counts proposals over the whole sweep.
    """
    order = sorted(requests, key=lambda r: r.accelerator().buffer_bytes)
    plans: list[Plan] = []
    previous: dict[Accelerator, Plan] = {}
    offset = 0
    for request in order:
        accel = request.accelerator()
        key = replace(accel, buffer_bytes=1)  # the same accelerator but for its buffer
        smaller = [previous[key]] if key in previous else []
        tick = None if progress is None else (lambda n, o=offset: progress(o + n))
        plan = plan_at_least_as_good(graph, request, smaller, tick)
        previous[key] = plan
        plans.append(plan)
        offset += request.budget
    return plans

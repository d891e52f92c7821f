"""The one place that assembles a planning run: cost model -> splitter -> problem -> search.

The API, the CLI, the bench and the speed measurements all go through :func:`assemble`, so
a plug-in registered in any registry (docs/design.md, "Plug points") is usable everywhere
at once. Importing :mod:`explainers` here registers the explainer splitters (lazily: torch
loads only when one is used).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import explainers  # noqa: F401  (registers the gnne / pg / rg splitters)
from accel_model import Accelerator, CostModel, make_cost_model
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import OpGraph
from fusionplan.planning.plan import Plan
from fusionplan.planning.split import SPLITTERS, Splitter, make_splitter
from search import SEARCHES, FusionProblem, Search, make_search
from search.certify import certify


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
    # A* time spent certifying a heuristic's plan (search/certify.py); 0: static bound only
    bound_time_s: float = 1.0

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
        t = self.bound_time_s
        if isinstance(t, bool) or not isinstance(t, int | float) or t < 0:
            raise ConfigError(f"bound time must be a number of seconds >= 0, got {t!r}")
        SEARCHES.check(self.search)
        SPLITTERS.check(self.splitter)
        return self


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
        request = self.request
        result = self.search.run(self.problem, request.seed, progress)
        result.model = self.graph.name
        result.splitter = request.splitter
        ranker_stats = getattr(getattr(self.splitter, "ranker", None), "stats", None)
        if ranker_stats is not None:  # explainer rankers: how many groups, how long
            result.explained_groups = ranker_stats.explained
            result.explain_seconds = ranker_stats.explain_seconds
        result.certificate = certify(self.problem, result, request.bound_time_s)
        return self.problem.to_plan(result.best, result).validate()


def assemble(graph: OpGraph, request: PlanRequest) -> Pipeline:
    """Build a fresh cost model, splitter, problem and search for ``request`` on ``graph``."""
    request.check()
    cost_model = make_cost_model(graph, request.accelerator())
    splitter = make_splitter(request.splitter, cost_model, request.seed)
    search = make_search(request.search, **dict(request.search_options))
    problem = FusionProblem(cost_model, splitter, request.budget)
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
    if any(p.graph is not graph for p in warm_start):
        raise ConfigError("warm-start plans must be plans of the graph being planned")
    pipeline = assemble(graph, request)
    pipeline.problem.warm_start = [tuple(p.groups) for p in warm_start]
    return pipeline.run(progress)


def sweep_graph(
    graph: OpGraph,
    requests: Sequence[PlanRequest],
    progress: Callable[[int], None] | None = None,
) -> list[Plan]:
    """Plan ``graph`` at each request's buffer, smallest first, each warm-started from the
    best plan at the next smaller buffer of the same scheme.

    With the default ``tiled`` single-layer cost a plan valid at a buffer is valid and no
    dearer at a larger one (docs/cost-model.md, "Single-layer cost"), so the DRAM curve never
    rises with the buffer, whatever the search (the ``paper`` convention can rise).
    Progress counts proposals over the whole sweep.
    """
    order = sorted(requests, key=lambda r: r.accelerator().buffer_bytes)
    plans: list[Plan] = []
    previous: dict[Accelerator, Plan] = {}
    offset = 0
    for request in order:
        accel = request.accelerator()
        key = replace(accel, buffer_bytes=1)  # the same accelerator but for its buffer
        warm = [previous[key]] if key in previous else []
        tick = None if progress is None else (lambda n, o=offset: progress(o + n))
        plan = plan_graph(graph, request, tick, warm_start=warm)
        previous[key] = plan
        plans.append(plan)
        offset += request.budget
    return plans

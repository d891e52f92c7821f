"""``auto``, the default search: the proven optimum when it comes within the effort, else
the best plan found with a certified gap (docs/design.md, "Search").

Every stage is sized in work units (search/effort.py), never in seconds, so the same
command gives the same plan on any machine and under any load. With ``W`` the run's units
(``effort`` x ``AUTO_UNITS``):

1. The exact search (A* over down-sets) runs for ``exact_share`` x W units. If it finishes,
   its plan is the proven optimum and auto returns it.
2. Otherwise a local search gives a second opinion: ``SCOUT_EDGE_PLANS / max(ops, edges)``
   plans at effort 1 (at most ``ls_budget``; counted apart from auto's own budget). The
   large-neighbourhood search then runs for ``lns_share`` x W units, starting from the
   better of the exact search's and the local search's plans.
3. The exact search runs again on the units left (no greedy dive: it spends them all on A*),
   with LNS's plan as its first upper bound and the chain relaxation added to its bound
   (accel_model/bounds.py; the first run proves most graphs without paying for it):
   A* prunes every state whose bound reaches it, so it often proves that plan optimal (or
   finds better) where the first run, bounded only by a greedy dive, could not.

A graph with more than ``max_downsets`` down-sets (which the exact search refuses) gets LNS
for all W units and the static traffic bound. ``time_limit_s`` is a wall-clock safety cap
over all stages; when it is what stopped the run, ``exact.stopped_by`` says so. The result's
``exact`` field holds the best bound of the A* runs and their counters;
``extra["auto_stage"]`` says which stage found the returned plan (``"exact"``, ``"lns"`` or
``"exact after lns"``).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

from accel_model.bounds import plan_lower_bound
from accel_model.objectives import Objective, objective_parts, static_floor
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, OpGraph
from fusionplan.planning.result import ExactBound, ObjectiveBound, SearchResult
from fusionplan.search.base import SEARCHES, Progress, build_config, check_start
from fusionplan.search.certify import DEFAULT_MAX_DOWNSETS, relative_gap
from fusionplan.search.effort import (
    AUTO_UNITS,
    SCOUT_EDGE_PLANS,
    STOP_CLOCK,
    STOP_OPTIMAL,
    STOP_WORK,
    check_effort,
    check_time_cap,
    clock_end,
    units,
)
from fusionplan.search.exact import ExactSearch, count_downsets, objective_optimum
from fusionplan.search.lns import LargeNeighbourhoodSearch
from fusionplan.search.local_search import LocalSearch
from fusionplan.search.problem import FusionProblem
from fusionplan.search.result import Recorder


@dataclass(frozen=True)
class AutoConfig:
    """Settings of :class:`AutoSearch` (``make_search("auto", **fields)``)."""

    effort: float = 1.0  # work of all stages together, in units of AUTO_UNITS
    time_limit_s: float | None = None  # wall-clock safety cap over all stages; None: none
    exact_share: float = 0.2  # of the work for the first exact search
    lns_share: float = 0.6  # of it for LNS; the rest for the second exact search
    ls_budget: int = 2000  # at most this many local-search plans (its own count) seed LNS
    max_downsets: int = DEFAULT_MAX_DOWNSETS  # above this, skip straight to LNS
    window_states: int = 60  # LNS's first cap on a window's down-sets

    def __post_init__(self) -> None:
        check_effort("auto option", self.effort)
        check_time_cap("auto option", self.time_limit_s)
        for name in ("exact_share", "lns_share"):
            s = getattr(self, name)
            if isinstance(s, bool) or not isinstance(s, int | float) or not 0 < s <= 1:
                raise ConfigError(f"auto option {name} must be in (0, 1], got {s!r}")
        if self.exact_share + self.lns_share > 1:
            raise ConfigError("auto options exact_share + lns_share must be <= 1")
        for name in ("max_downsets", "ls_budget"):
            m = getattr(self, name)
            if (
                isinstance(m, bool)
                or not isinstance(m, int)
                or m < 0
                or (m == 0 and name == "max_downsets")
            ):
                raise ConfigError(f"auto option {name} must be a whole number, got {m!r}")

    def scout_plans(self, graph: OpGraph) -> int:
        """Local-search plans of the scout on ``graph`` (search/effort.py, SCOUT_EDGE_PLANS)."""
        size = max(len(graph), len(graph.edges), 1)
        return min(self.ls_budget, units(self.effort, SCOUT_EDGE_PLANS // size))


class AutoSearch:
    name = "auto"

    def __init__(self, config: AutoConfig | None = None, **options: object) -> None:
        self.config = build_config(AutoConfig, config, options, self.name)

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        if problem.objective.name != "dram":
            return self._other_objective(problem, seed, progress)
        cfg = self.config
        t0 = time.perf_counter()
        end = clock_end(cfg.time_limit_s, t0)
        total = units(cfg.effort, AUTO_UNITS)
        tractable = count_downsets(problem.graph, cfg.max_downsets)[1]
        exact: ExactBound | None = None
        work, clock_hit = 0, False
        if tractable:
            first = self._exact(problem, seed, progress, int(cfg.exact_share * total), end)
            exact = first.exact
            assert exact is not None
            work, clock_hit = exact.work, exact.stopped_by == STOP_CLOCK
            if exact.optimal or problem.remaining < 1:
                return self._finish(first, t0, exact, "exact", work, clock_hit)
            problem.warm_start = [*problem.warm_start, first.best.groups]
        if cfg.ls_budget:  # a cheap second opinion LNS can start from (its own budget)
            problem.warm_start = [*problem.warm_start, self._scout(problem, seed)]
        lns_work = int(cfg.lns_share * total) if tractable else total - work
        lns = LargeNeighbourhoodSearch(
            work=max(lns_work, 1), time_limit_s=_left(end), states=cfg.window_states
        )
        second = lns.run(problem, seed, progress)
        found = lns.outcome
        work += found.work
        clock_hit |= found.stopped_by == STOP_CLOCK
        if found.optimal:
            bound = found.lower_bound
        else:
            static = plan_lower_bound(problem.cost_model)
            bound = max(static, found.lower_bound, exact.lower_bound_bytes if exact else 0)
        if exact is None:
            exact = ExactBound(False, 0, 0.0, 0, 0, 0, 0, 0, False)
        exact = replace(exact, optimal=found.optimal, lower_bound_bytes=bound)
        left = total - work
        if found.optimal or not tractable or left <= 0 or clock_hit or problem.remaining < 1:
            return self._finish(second, t0, exact, "lns", work, clock_hit)
        problem.warm_start = [*problem.warm_start, second.best.groups]
        third = self._exact(problem, seed, progress, left, end, second_run=True)
        again = third.exact
        assert again is not None
        work += again.work
        clock_hit |= again.stopped_by == STOP_CLOCK
        exact = replace(
            again, lower_bound_bytes=max(bound, again.lower_bound_bytes),
            states=exact.states + again.states,
        )  # fmt: skip
        stage = "exact after lns" if third.best.dram < second.best.dram else "lns"
        merged = replace(third, extra={**second.extra, **third.extra})
        return self._finish(merged, t0, exact, stage, work, clock_hit)

    def _other_objective(
        self, problem: FusionProblem, seed: int, progress: Progress | None
    ) -> SearchResult:
        """Energy, latency or EDP: exactly the DRAM run above (its plan is the first
        incumbent, so the answer never scores worse than the DRAM plan), then A* under the
        objective on as much work again (EDP: under energy and under latency, half each,
        the best product kept; its bound is the product of their bounds), then, unless A*
        proved its plan, a local search under the objective from every plan found."""
        cfg = self.config
        t0 = time.perf_counter()
        end = clock_end(cfg.time_limit_s, t0)
        cm, objective = problem.cost_model, problem.objective
        by_dram = FusionProblem(cm, problem.splitter, problem.budget, warm_start=problem.warm_start)
        first = AutoSearch(cfg).run(by_dram, seed).best.groups
        found = [first]  # plans every stage hands on, observed as warm starts at the end
        work = units(cfg.effort, AUTO_UNITS)
        tractable = count_downsets(problem.graph, cfg.max_downsets)[1]
        parts = objective_parts(objective)
        bounds: list[ObjectiveBound | None] = []
        for part in parts:
            if not tractable:  # too many down-sets for A*: the static floor, a local search
                bounds.append(None)
                continue
            sub = FusionProblem(cm, problem.splitter, problem.budget, objective=part)
            sub.warm_start = [first]
            sub_rec = Recorder(sub)
            bounds.append(objective_optimum(sub, sub_rec, max(work // len(parts), 1), end))
            assert sub_rec.best is not None
            found.append(sub_rec.best.groups)
        proven = all(b is not None and b.optimal for b in bounds)
        if (not objective.additive or not proven) and cfg.ls_budget:
            # a product of optima is not the optimum of the product, and where A* did not
            # prove its plan (or could not run) local moves under the objective find better:
            # EfficientNet-B0 BRR 512 KB, 6.78 -> 2.05 mJ in 1,806 plans
            polish = FusionProblem(cm, problem.splitter, cfg.scout_plans(cm.graph),
                                   objective=objective, warm_start=list(found))  # fmt: skip
            found.append(LocalSearch().run(polish, seed).best.groups)
        original = problem.warm_start
        problem.warm_start = [*original, *found]
        rec = Recorder(problem, progress)  # observes every plan found, without proposals
        problem.warm_start = original
        best = rec.best
        assert best is not None
        traffic = plan_lower_bound(cm)
        bound = _combined_bound(objective, parts, best.score, bounds, traffic)
        result = rec.result(self.name, seed, config=asdict(cfg), objective_bound=bound)
        return replace(result, wall_time_s=time.perf_counter() - t0)

    def _scout(self, problem: FusionProblem, seed: int) -> tuple[Group, ...]:
        """The best plan of a local search of :meth:`AutoConfig.scout_plans` plans."""
        budget = self.config.scout_plans(problem.graph)
        scout = FusionProblem(problem.cost_model, problem.splitter, budget)
        return LocalSearch().run(scout, seed).best.groups

    def _exact(
        self, problem: FusionProblem, seed: int, progress: Progress | None, work: int,
        end: float, second_run: bool = False,
    ) -> SearchResult:  # fmt: skip
        """The exact search on ``work`` units. The second run skips its greedy dive (it has
        LNS's plan, better than any dive, as its first upper bound) and adds the chain
        relaxation to its bound (the first run proves most graphs without paying for it)."""
        search = ExactSearch(
            work=max(work, 1), time_limit_s=_left(end), max_downsets=self.config.max_downsets,
            greedy_dive=not second_run, chain_bound=second_run,
        )  # fmt: skip
        return search.run(problem, seed, progress)

    def _finish(
        self, result: SearchResult, t0: float, exact: ExactBound, stage: str, work: int,
        clock_hit: bool,
    ) -> SearchResult:  # fmt: skip
        if not exact.optimal and exact.lower_bound_bytes >= result.best.dram:
            exact = replace(exact, optimal=True)  # the bound reached the plan: proven
        gap = 0.0 if exact.optimal else relative_gap(result.best.dram, exact.lower_bound_bytes)
        stopped = STOP_OPTIMAL if exact.optimal else (STOP_CLOCK if clock_hit else STOP_WORK)
        return replace(
            result,
            algorithm=self.name,
            wall_time_s=time.perf_counter() - t0,
            config=asdict(self.config),
            exact=replace(exact, gap=gap, work=work, stopped_by=stopped),
            extra={**result.extra, "auto_stage": stage},
        )


def _combined_bound(
    objective: Objective,
    parts: list[Objective],
    score: int,
    found: list[ObjectiveBound | None],
    traffic: int,
) -> ObjectiveBound:
    """The objective's bound: per part (:func:`objective_parts`) A*'s where it ran, else its
    floor from the static traffic bound; EDP's is the product of the energy and latency
    bounds (both are >= 0)."""
    lows, states = [], 0
    for part, bound in zip(parts, found, strict=True):
        if bound is None:
            lows.append(static_floor(part, traffic))
        else:
            lows.append(bound.lower_bound)
            states += bound.states
    lower = min(math.prod(lows), score)
    stopped = [b.stopped_by for b in found if b is not None and not b.optimal]
    if lower >= score:
        why = STOP_OPTIMAL
    elif stopped:
        why = stopped[0]
    else:  # every part proven, but a product of optima is not the optimum of the product
        why = "bounds multiplied" if not objective.additive else "static bound"
    return ObjectiveBound(objective.name, objective.unit, score, lower, lower >= score, states, why)


def _left(end: float) -> float | None:
    """Seconds to the safety cap for a stage (None: no cap; a sliver once it has passed,
    so the stage stops at its first check)."""
    return None if math.isinf(end) else max(end - time.perf_counter(), 1e-6)


SEARCHES.register("auto", AutoSearch, help="exact within an effort, then LNS; certified gap")

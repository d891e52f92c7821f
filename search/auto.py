"""``auto``, the default search: the proven optimum when it comes in time, else the best
plan found with a certified gap (docs/design.md, "Search").

1. The exact search (A* over down-sets) runs for ``exact_share`` of ``time_limit_s``. If it
   finishes, its plan is the proven optimum and auto returns it.
2. Otherwise a local search of ``ls_budget`` plans (counted apart from auto's own budget;
   fewer where a 50-plan pilot shows they would take more than ``scout_share`` of the time)
   gives a second opinion, and the large-neighbourhood search runs for ``lns_share`` of the
   time, starting from the better of the exact search's and the local search's plans.
3. The exact search runs again for the rest of the time with LNS's plan as its first upper
   bound: A* prunes every state whose bound reaches it, so it often proves that plan optimal
   (or finds better) where the first run, bounded only by a greedy dive, could not.

A graph with more than ``max_downsets`` down-sets (which the exact search refuses) gets LNS
for the whole time and the static traffic bound. The result's ``exact`` field holds the
best bound of the A* runs and their counters; ``extra["auto_stage"]`` says which stage found
the returned plan (``"exact"``, ``"lns"`` or ``"exact after lns"``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

from accel_model.bounds import plan_lower_bound
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group
from fusionplan.planning.result import ExactBound, SearchResult
from search.base import SEARCHES, Progress, build_config, check_start
from search.certify import DEFAULT_MAX_DOWNSETS, relative_gap
from search.exact import ExactSearch, count_downsets
from search.lns import LargeNeighbourhoodSearch
from search.local_search import LocalSearch
from search.problem import FusionProblem


@dataclass(frozen=True)
class AutoConfig:
    """Settings of :class:`AutoSearch` (``make_search("auto", **fields)``)."""

    time_limit_s: float = 10.0  # wall-clock limit of all stages together
    exact_share: float = 0.2  # of it for the first exact search
    lns_share: float = 0.3  # of it for LNS; the rest for the second exact search
    ls_budget: int = 2000  # plans of a local search (its own count) that also seeds LNS
    scout_share: float = 0.1  # at most about this share of the time for that local search
    max_downsets: int = DEFAULT_MAX_DOWNSETS  # above this, skip straight to LNS
    window_states: int = 60  # LNS's first cap on a window's down-sets

    def __post_init__(self) -> None:
        t = self.time_limit_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0:
            raise ConfigError(f"auto option time_limit_s must be a number > 0, got {t!r}")
        for name in ("exact_share", "lns_share", "scout_share"):
            s = getattr(self, name)
            if isinstance(s, bool) or not isinstance(s, int | float) or not 0 < s <= 1:
                raise ConfigError(f"auto option {name} must be in (0, 1], got {s!r}")
        if self.exact_share + self.lns_share + self.scout_share > 1:
            raise ConfigError("auto options exact_share + lns_share + scout_share must be <= 1")
        for name in ("max_downsets", "ls_budget"):
            m = getattr(self, name)
            if (
                isinstance(m, bool)
                or not isinstance(m, int)
                or m < 0
                or (m == 0 and name == "max_downsets")
            ):
                raise ConfigError(f"auto option {name} must be a whole number, got {m!r}")


class AutoSearch:
    name = "auto"

    def __init__(self, config: AutoConfig | None = None, **options: object) -> None:
        self.config = build_config(AutoConfig, config, options, self.name)

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        cfg = self.config
        t0 = time.perf_counter()
        limit = cfg.time_limit_s
        tractable = count_downsets(problem.graph, cfg.max_downsets)[1]
        exact: ExactBound | None = None
        if tractable:
            first = self._exact(problem, seed, progress, cfg.exact_share * limit)
            exact = first.exact
            assert exact is not None
            if exact.optimal or problem.remaining < 1:
                return self._finish(first, t0, exact, "exact")
            problem.warm_start = [*problem.warm_start, first.best.groups]
        if cfg.ls_budget:  # a cheap second opinion LNS can start from (its own budget)
            problem.warm_start = [*problem.warm_start, self._scout(problem, seed, limit)]
        share = cfg.lns_share if tractable else 1.0
        left = limit - (time.perf_counter() - t0)
        lns = LargeNeighbourhoodSearch(
            time_limit_s=max(min(share * limit, left), 1e-3), states=cfg.window_states
        )
        second = lns.run(problem, seed, progress)
        found = lns.outcome
        if found.optimal:
            bound = found.lower_bound
        else:
            static = plan_lower_bound(problem.cost_model)
            bound = max(static, found.lower_bound, exact.lower_bound_bytes if exact else 0)
        if exact is None:
            exact = ExactBound(False, 0, 0.0, 0, 0, 0, 0, 0, False)
        exact = replace(exact, optimal=found.optimal, lower_bound_bytes=bound)
        left = limit - (time.perf_counter() - t0)
        if found.optimal or not tractable or left <= 0 or problem.remaining < 1:
            return self._finish(second, t0, exact, "lns")
        problem.warm_start = [*problem.warm_start, second.best.groups]
        third = self._exact(problem, seed, progress, left)
        again = third.exact
        assert again is not None
        exact = replace(
            again, lower_bound_bytes=max(bound, again.lower_bound_bytes),
            states=exact.states + again.states,
        )  # fmt: skip
        stage = "exact after lns" if third.best.dram < second.best.dram else "lns"
        merged = replace(third, extra={**second.extra, **third.extra})
        return self._finish(merged, t0, exact, stage)

    def _scout(self, problem: FusionProblem, seed: int, limit: float) -> tuple[Group, ...]:
        """The best plan of a local search on its own budget: ``ls_budget`` plans, fewer
        where a 50-plan pilot shows they would take more than ``scout_share`` of the time."""
        cfg = self.config
        t0 = time.perf_counter()
        pilot = min(50, cfg.ls_budget)
        first = LocalSearch().run(FusionProblem(problem.cost_model, problem.splitter, pilot), seed)
        per_plan = (time.perf_counter() - t0) / pilot
        budget = min(cfg.ls_budget - pilot, int(cfg.scout_share * limit / per_plan) - pilot)
        if budget < 1:
            return first.best.groups
        scout = FusionProblem(problem.cost_model, problem.splitter, budget)
        scout.warm_start = [first.best.groups]
        return LocalSearch().run(scout, seed).best.groups

    def _exact(
        self, problem: FusionProblem, seed: int, progress: Progress | None, seconds: float
    ) -> SearchResult:
        cfg = self.config
        search = ExactSearch(time_limit_s=max(seconds, 1e-3), max_downsets=cfg.max_downsets)
        return search.run(problem, seed, progress)

    def _finish(
        self, result: SearchResult, t0: float, exact: ExactBound, stage: str
    ) -> SearchResult:
        if not exact.optimal and exact.lower_bound_bytes >= result.best.dram:
            exact = replace(exact, optimal=True)  # the bound reached the plan: proven
        gap = 0.0 if exact.optimal else relative_gap(result.best.dram, exact.lower_bound_bytes)
        return replace(
            result,
            algorithm=self.name,
            wall_time_s=time.perf_counter() - t0,
            config=asdict(self.config),
            exact=replace(exact, gap=gap),
            extra={**result.extra, "auto_stage": stage},
        )


SEARCHES.register("auto", AutoSearch, help="exact under a time limit, then LNS; certified gap")

"""``auto``, the default search: the proven optimum when it comes in time, else the best
plan found with a certified gap (docs/design.md, "Search").

1. The exact search (A* over down-sets) runs for ``exact_share`` of ``time_limit_s``. If it
   finishes, its plan is the proven optimum and auto returns it.
2. Otherwise (time out, or a graph with more than ``max_downsets`` down-sets, which the
   exact search refuses) the large-neighbourhood search continues for the rest of the time,
   starting from the exact search's best plan (A*'s greedy dives), and auto returns its plan.
   The lower bound is A*'s (the smallest f over its open states when time ran out), or the
   static traffic bound when A* never ran; a final LNS window that covers the whole graph
   and finishes proves the optimum after all.

The result's ``exact`` field holds the bound and the A* counters; ``extra`` says which stage
answered (``auto_stage``: ``"exact"`` or ``"lns"``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

from fusionplan.ir.errors import ConfigError
from fusionplan.planning.result import ExactBound, SearchResult
from search.base import SEARCHES, Progress, build_config, check_start
from search.certify import DEFAULT_MAX_DOWNSETS, relative_gap
from search.exact import ExactSearch, ExactSolver, count_downsets
from search.lns import LargeNeighbourhoodSearch
from search.problem import FusionProblem


@dataclass(frozen=True)
class AutoConfig:
    """Settings of :class:`AutoSearch` (``make_search("auto", **fields)``)."""

    time_limit_s: float = 10.0  # wall-clock limit of both stages together
    exact_share: float = 0.5  # of it for the exact search
    max_downsets: int = DEFAULT_MAX_DOWNSETS  # above this, skip straight to LNS
    window_states: int = 60  # LNS's first cap on a window's down-sets

    def __post_init__(self) -> None:
        t = self.time_limit_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0:
            raise ConfigError(f"auto option time_limit_s must be a number > 0, got {t!r}")
        s = self.exact_share
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0 < s <= 1:
            raise ConfigError(f"auto option exact_share must be in (0, 1], got {s!r}")
        m = self.max_downsets
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ConfigError(f"auto option max_downsets must be an integer >= 1, got {m!r}")


class AutoSearch:
    name = "auto"

    def __init__(self, config: AutoConfig | None = None, **options: object) -> None:
        self.config = build_config(AutoConfig, config, options, self.name)

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        cfg = self.config
        t0 = time.perf_counter()
        exact: ExactBound | None = None
        if count_downsets(problem.graph, cfg.max_downsets)[1]:
            first = ExactSearch(
                time_limit_s=cfg.exact_share * cfg.time_limit_s, max_downsets=cfg.max_downsets
            ).run(problem, seed, progress)
            exact = first.exact
            assert exact is not None
            if exact.optimal or problem.remaining < 1:
                return self._finish(first, t0, exact, "exact")
            problem.warm_start = [*problem.warm_start, first.best.groups]
        left = cfg.time_limit_s - (time.perf_counter() - t0)
        lns = LargeNeighbourhoodSearch(time_limit_s=max(left, 1e-3), states=cfg.window_states)
        second = lns.run(problem, seed, progress)
        found = lns.outcome
        if found.optimal:
            bound = found.lower_bound
        else:
            static = ExactSolver(problem.cost_model, problem.unfusable).bound.total()
            bound = max(static, found.lower_bound, exact.lower_bound_bytes if exact else 0)
        if exact is None:
            exact = ExactBound(False, 0, 0.0, 0, 0, 0, 0, 0, False)
        exact = replace(exact, optimal=found.optimal, lower_bound_bytes=bound)
        return self._finish(second, t0, exact, "lns")

    def _finish(
        self, result: SearchResult, t0: float, exact: ExactBound, stage: str
    ) -> SearchResult:
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

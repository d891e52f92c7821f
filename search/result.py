"""The recorder that builds a search's :class:`SearchResult` as candidates arrive."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fusionplan.ir.errors import ConfigError
from fusionplan.planning.result import Candidate, ExactBound, ObjectiveBound, SearchResult
from fusionplan.search.problem import FusionProblem


class Recorder:
    """Tracks the best candidate, the non-dominated set and the trace while a search runs."""

    def __init__(self, problem: FusionProblem, progress: Callable[[int], None] | None = None):
        self.problem = problem
        self.progress = progress
        self.best: Candidate | None = None
        self.front: dict[tuple, Candidate] = {}
        self.trace: list[tuple[int, int]] = []
        self.query_trace: list[tuple[int, int]] = []  # (oracle queries, best score)
        self.start = time.perf_counter()
        cm = problem.cost_model
        self._q0, self._h0 = cm.stats.queries, cm.stats.hits
        # the problem's warm-start plans count as found before the search proposes anything
        self.started: list[Candidate] = [self.observe(c) for c in problem.warm_candidates()]

    def observe(self, cand: Candidate) -> Candidate:
        best = self.best
        if best is None or cand.score < best.score:
            self.best = cand
            self.trace.append((self.problem.proposed, cand.score))
            self.query_trace.append((self.problem.cost_model.stats.misses, cand.score))
        elif cand.score == best.score and (cand.dram, cand.mbu) < (best.dram, best.mbu):
            self.best = cand  # same score, less DRAM or a smaller peak buffer
        self._update_front(cand)
        if self.progress is not None:
            self.progress(self.problem.proposed)
        return cand

    def _update_front(self, cand: Candidate) -> None:
        objs = (cand.dram, cand.mbu)
        for other in self.front.values():
            if other.dram <= objs[0] and other.mbu <= objs[1]:
                return  # dominated or equal
        self.front = {
            k: c for k, c in self.front.items() if not (objs[0] <= c.dram and objs[1] <= c.mbu)
        }
        self.front[cand.key] = cand

    def result(
        self,
        algorithm: str,
        seed: int,
        *,
        config: dict[str, Any] | None = None,
        exact: ExactBound | None = None,
        objective_bound: ObjectiveBound | None = None,
        **extra: Any,
    ) -> SearchResult:
        if self.best is None:
            raise ConfigError(
                f"the search proposed no plan: budget {self.problem.budget}, "
                f"{self.problem.proposed} already spent (budget must leave >= 1 plan)"
            )
        p = self.problem
        p.to_plan(self.best).validate()  # every search checks what it reports
        cm, st = p.cost_model, p.splitter.stats
        queries = cm.stats.queries - self._q0
        hits = cm.stats.hits - self._h0
        return SearchResult(
            algorithm=algorithm,
            best=self.best,
            pareto=sorted(self.front.values(), key=lambda c: (c.dram, c.mbu)),
            trace=self.trace,
            query_trace=self.query_trace,
            oracle_queries=cm.stats.misses,
            oracle_seconds=cm.stats.seconds,
            query_budget=p.query_budget,
            proposed=p.proposed,
            budget=p.budget,
            seed=seed,
            wall_time_s=time.perf_counter() - self.start,
            cost_queries=queries,
            cost_hit_rate=hits / queries if queries else 0.0,
            split_calls=st.calls,
            invalid_groups=st.invalid_groups,
            rectify_rate=st.rectify_rate,
            config=config or {},
            exact=exact,
            objective_bound=objective_bound,
            extra=extra,
        )

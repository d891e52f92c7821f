"""AutoGraph: top-k candidates per subgraph, combined by dynamic programming, verified by
measurement.

The graph is split as MetaFlow splits it; each part is searched by backtracking with
AutoGraph's looser bound ``beta`` (1.1) and keeps its ``k`` best distinct rewrites (the
empty one included). The DP walks the parts in order keeping the ``k`` cheapest whole-graph
combinations (costed on the whole graph, since the mixed critical-path cost does not add up
over parts), then searches the boundary. If a ``measure`` function is given (a device),
the ``k`` best graphs are timed and the fastest measured one wins: the cost model ranks,
the device decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fusionplan.ir.model import ModelGraph
from fusionplan.passes.substitution.search.backtracking import Backtracking
from fusionplan.passes.substitution.search.base import (
    Problem,
    RewriteResult,
    SubstitutionSearch,
)
from fusionplan.passes.substitution.search.metaflow import search_boundary, search_part
from fusionplan.passes.substitution.search.split import (
    DEFAULT_THRESHOLD,
    cut_tensors,
    flow_split,
)

Measure = Callable[[ModelGraph], float]
"""Seconds one run of a graph takes on the device at hand."""


class AutoGraph(SubstitutionSearch):
    name = "autograph"

    def __init__(
        self,
        beta: float = 1.1,
        top_k: int = 4,
        threshold: int = DEFAULT_THRESHOLD,
        boundary_share: float = 0.2,
        measure: Measure | None = None,
    ) -> None:
        self.beta = beta
        self.top_k = top_k
        self.threshold = threshold
        self.boundary_share = boundary_share
        self.measure = measure

    def run(self, problem: Problem, graph: ModelGraph) -> RewriteResult:
        started = time.perf_counter()
        root = problem.start(graph)
        parts = flow_split(graph, problem.matches(graph), self.threshold)
        share = (1 - self.boundary_share) * problem.budget / len(graph)
        combos = [root]
        for part in parts:
            searched = search_part(problem, graph, part, Backtracking(self.beta), share)
            options = [c.steps for c in searched.top(self.top_k)]
            extended = {}
            for combo in combos:
                for steps in options:
                    cand = problem.replay(combo, steps)
                    extended.setdefault(cand.graph.fingerprint, cand)
            combos = sorted(extended.values(), key=lambda c: c.cost)[: self.top_k]
        search_boundary(problem, combos[0], cut_tensors(graph, parts), self.beta)
        if self.measure is None:
            return problem.result(self.name, root, started)
        timed = sorted(
            ((c, self.measure(c.graph)) for c in problem.top(self.top_k)), key=lambda ct: ct[1]
        )
        return problem.result(self.name, root, started, best=timed[0][0], measured=tuple(timed))

"""TASO's and MetaFlow's backtracking search: best-first over candidate graphs, keeping
any candidate within ``alpha`` of the best so far (alpha 1.05), so a substitution that
makes the graph slightly slower (MetaFlow's relaxed rules: enlarge a kernel) can enable
one that pays more. Candidates are deduplicated by structural hash; the queue is capped.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterable

from fusionplan.ir.model import ModelGraph
from fusionplan.passes.substitution.search.base import (
    BudgetExhausted,
    Problem,
    RewriteCandidate,
    RewriteResult,
    SubstitutionSearch,
)

Focus = Callable[[ModelGraph], Iterable[str]]
"""Restricts a search to matches using the returned nodes (a boundary re-search)."""


class Backtracking(SubstitutionSearch):
    name = "taso"

    def __init__(self, alpha: float = 1.05, queue_cap: int = 2000, focus: Focus | None = None):
        self.alpha = alpha
        self.queue_cap = queue_cap
        self.focus = focus

    def run(self, problem: Problem, graph: ModelGraph) -> RewriteResult:
        started = time.perf_counter()
        root = problem.start(graph)
        self.explore(problem, root)
        return problem.result(self.name, root, started)

    def explore(self, problem: Problem, root: RewriteCandidate) -> RewriteCandidate:
        """Best-first from ``root`` until the queue empties or the budget is spent."""
        best = root
        tie = itertools.count()
        queue: list[tuple[float, int, RewriteCandidate]] = [(root.cost, next(tie), root)]
        seen = {root.graph.fingerprint}
        try:
            while queue:
                _, _, cand = heapq.heappop(queue)
                if cand.cost > self.alpha * best.cost:
                    continue
                near = None if self.focus is None else list(self.focus(cand.graph))
                for match in problem.matches(cand.graph, near):
                    child = problem.child(cand, match)
                    if child is None or child.graph.fingerprint in seen:
                        continue
                    seen.add(child.graph.fingerprint)
                    if child.cost < best.cost:
                        best = child
                    if child.cost <= self.alpha * best.cost:
                        heapq.heappush(queue, (child.cost, next(tie), child))
                if len(queue) > self.queue_cap:
                    queue = heapq.nsmallest(self.queue_cap, queue)
        except BudgetExhausted:
            pass
        return best

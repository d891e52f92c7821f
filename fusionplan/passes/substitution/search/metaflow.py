"""MetaFlow: backtracking on the parts of a flow-based split, stitched, then the boundary.

A graph above the split threshold is cut into parts (:func:`~.split.flow_split`); each part
is searched on its own with the backtracking search and ``(1 - boundary_share)`` of the
budget in proportion to its size; the parts' best steps are replayed on the whole graph;
the rest of the budget searches substitutions that use a node next to a cut (or a node the
boundary search created), which the parts could not see.
"""

from __future__ import annotations

import time

from fusionplan.ir.model import ModelGraph
from fusionplan.passes.substitution.search.backtracking import Backtracking
from fusionplan.passes.substitution.search.base import (
    Problem,
    RewriteCandidate,
    RewriteResult,
    Step,
    SubstitutionSearch,
)
from fusionplan.passes.substitution.search.split import (
    DEFAULT_THRESHOLD,
    boundary_nodes,
    cut_tensors,
    flow_split,
)


class MetaFlow(SubstitutionSearch):
    name = "metaflow"

    def __init__(
        self, alpha: float = 1.05, threshold: int = DEFAULT_THRESHOLD, boundary_share: float = 0.2
    ) -> None:
        self.alpha = alpha
        self.threshold = threshold
        self.boundary_share = boundary_share

    def run(self, problem: Problem, graph: ModelGraph) -> RewriteResult:
        started = time.perf_counter()
        root = problem.start(graph)
        parts = flow_split(graph, problem.matches(graph), self.threshold)
        steps: list[Step] = []
        share = (1 - self.boundary_share) * problem.budget / len(graph)
        for part in parts:
            searched = search_part(problem, graph, part, Backtracking(self.alpha), share)
            steps.extend(searched.top(1)[0].steps)
        stitched = problem.replay(root, steps)
        search_boundary(problem, stitched, cut_tensors(graph, parts), self.alpha)
        return problem.result(self.name, root, started)


def search_part(
    problem: Problem, graph: ModelGraph, part: list[str], search: Backtracking, share: float
) -> Problem:
    """One part searched as a graph of its own with ``share`` x its size of the budget; the
    forked problem, whose ``top`` holds the part's best candidates."""
    sub = problem.fork(int(share * len(part)))
    search.explore(sub, sub.start(graph.subgraph(part)))
    problem.absorb(sub)
    return sub


def search_boundary(
    problem: Problem, start: RewriteCandidate, cut: set[str], alpha: float
) -> RewriteCandidate:
    """Backtracking over the matches next to the cuts (and next to what it rewrites)."""
    base = set(start.graph.nodes)
    seeds = boundary_nodes(start.graph, cut)

    def focus(g: ModelGraph) -> list[str]:
        return [n for n in g.nodes if n in seeds or n not in base]

    return Backtracking(alpha, focus=focus).explore(problem, start)

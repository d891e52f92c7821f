"""OCGGS's searches: exact up to K substitutions (Pruning, DPP) and Sampling.

*Pruning* enumerates substitution sequences of length <= K depth-first, in a canonical
order: after applying ``s``, a next substitution ``t`` that leaves ``s``'s neighbourhood
untouched (independent) is applied only if its key sorts after ``s``'s. Independent
substitutions commute (both stay applicable and give the same graph), so any sequence can
be reordered, swapping adjacent out-of-order independent pairs, into one this search
visits: the best graph within K steps is found exactly, without visiting each of the k!
orders of k independent rewrites.

*DPP* (dynamic programming with pruning) goes breadth-first over distinct graphs, each kept
at the smallest depth it is reached at (exact: the graphs within K steps are exactly the
union of those layers), and reuses the parent's matches: a match using no node near the
rewrite is still a match of the child (:class:`~.base.Footprint`), so only the
neighbourhood is matched again.

*Sampling* descends greedily: from the current graph it builds ``q`` (20) children from
randomly sampled matches and moves to the cheapest if its cost is at most ``eta`` (1.0)
times the current one (else it samples the next ``q`` untried matches); it stops after
``steps`` moves, when no match qualifies, or when the budget is spent. Cheap where a
space is wide (Inception blocks) and most substitutions are independent, so sampling a few
finds the good ones.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable

from fusionplan.ir.model import ModelGraph
from fusionplan.passes.substitution.pattern import Match
from fusionplan.passes.substitution.search.base import (
    BudgetExhausted,
    Problem,
    RewriteCandidate,
    RewriteResult,
    SubstitutionSearch,
    footprint,
)

DEFAULT_DEPTH = 5


class Pruning(SubstitutionSearch):
    name = "ocggs-prune"

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        self.depth = depth

    def run(self, problem: Problem, graph: ModelGraph) -> RewriteResult:
        started = time.perf_counter()
        root = problem.start(graph)
        with contextlib.suppress(BudgetExhausted):
            self._visit(problem, root, None, frozenset(), self.depth)
        return problem.result(self.name, root, started)

    def _visit(
        self,
        problem: Problem,
        cand: RewriteCandidate,
        last: tuple[str, tuple[str, ...]] | None,
        near: frozenset[str],
        left: int,
    ) -> None:
        if left == 0:
            return
        for match in problem.matches(cand.graph):
            if last is not None and match.key < last and near.isdisjoint(match.names):
                continue  # independent of the last step and out of order: visited elsewhere
            child = problem.child(cand, match)
            if child is None:
                continue
            near = footprint(cand.graph, child.graph).near
            self._visit(problem, child, match.key, near, left - 1)


class DynamicProgramming(SubstitutionSearch):
    name = "ocggs-dpp"

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        self.depth = depth

    def run(self, problem: Problem, graph: ModelGraph) -> RewriteResult:
        started = time.perf_counter()
        root = problem.start(graph)
        # a graph's matches are worked out when it is expanded, from its parent's (most
        # graphs of the last layer reached are never expanded once the budget runs out)
        layer: list[Lazy] = [Lazy(root, lambda: problem.matches(graph))]
        seen = {graph.fingerprint}
        try:
            for _ in range(self.depth):
                following: list[Lazy] = []
                for item in layer:
                    matches = item.matches()
                    for match in matches:
                        child = problem.child(item.cand, match)
                        if child is None or child.graph.fingerprint in seen:
                            continue
                        seen.add(child.graph.fingerprint)
                        following.append(Lazy.of(problem, item.cand, child, matches))
                layer = following
        except BudgetExhausted:
            pass
        return problem.result(self.name, root, started)


class Lazy:
    """A candidate whose matches are computed on first use (and kept)."""

    __slots__ = ("_make", "_matches", "cand")

    def __init__(self, cand: RewriteCandidate, make: Callable[[], list[Match]]) -> None:
        self.cand = cand
        self._make: Callable[[], list[Match]] | None = make
        self._matches: list[Match] = []

    @classmethod
    def of(
        cls,
        problem: Problem,
        parent: RewriteCandidate,
        child: RewriteCandidate,
        matches: list[Match],
    ) -> Lazy:
        return cls(child, lambda: _child_matches(problem, parent, child, matches))

    def matches(self) -> list[Match]:
        if self._make is not None:
            self._matches, self._make = self._make(), None
        return self._matches


def _child_matches(
    problem: Problem, parent: RewriteCandidate, child: RewriteCandidate, matches: list[Match]
) -> list[Match]:
    """The child's matches: the parent's that the rewrite left alone, plus new ones near it."""
    changed = footprint(parent.graph, child.graph)
    kept = [m for m in matches if changed.stale.isdisjoint(m.names)]
    return kept + problem.matches(child.graph, changed.near)


class Sampling(SubstitutionSearch):
    name = "ocggs-sample"

    def __init__(self, q: int = 20, eta: float = 1.0, steps: int = 200, seed: int = 0) -> None:
        self.q = q
        self.eta = eta
        self.steps = steps
        self.seed = seed

    def run(self, problem: Problem, graph: ModelGraph) -> RewriteResult:
        started = time.perf_counter()
        rng = random.Random(self.seed)
        root = problem.start(graph)
        current = root
        seen = {graph.fingerprint}
        matches = problem.matches(graph)
        try:
            for _ in range(self.steps):
                child = self._step(problem, current, matches, seen, rng)
                if child is None:
                    break
                seen.add(child.graph.fingerprint)
                matches = _child_matches(problem, current, child, matches)
                current = child
        except BudgetExhausted:
            pass
        return problem.result(self.name, root, started)

    def _step(
        self,
        problem: Problem,
        current: RewriteCandidate,
        matches: list[Match],
        seen: set[int],
        rng: random.Random,
    ) -> RewriteCandidate | None:
        """The cheapest qualifying child among ``q`` sampled matches; if none qualifies,
        the next ``q`` untried ones, until all are tried."""
        order = rng.sample(matches, len(matches))
        for start in range(0, len(order), self.q):
            best: RewriteCandidate | None = None
            for match in order[start : start + self.q]:
                child = problem.child(current, match)
                if child is None or child.graph.fingerprint in seen:
                    continue
                if best is None or child.cost < best.cost:
                    best = child
            if best is not None and best.cost <= self.eta * current.cost:
                return best
        return None

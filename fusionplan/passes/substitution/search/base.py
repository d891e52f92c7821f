"""The protocol every substitution search follows (docs/design.md, "Graph substitution").

A :class:`Problem` owns the rules, the cost and the budget; a search asks it for the
matches of a graph and for the child a match makes, and it counts every graph it builds
(``generated``) and every graph whose matches were enumerated (``expanded``). The budget
caps ``generated``: building and costing a candidate is the unit of work every search
shares, however it chooses which to build.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fusionplan.ir.model import ModelGraph
from fusionplan.passes.substitution.cost import GraphCost
from fusionplan.passes.substitution.pattern import Match, Rule

DEFAULT_BUDGET = 5000


@dataclass(frozen=True)
class Step:
    """One applied substitution: the rule and the matched node names in pattern order."""

    rule: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class RewriteCandidate:
    """A graph the search reached, how, and what it costs."""

    graph: ModelGraph
    steps: tuple[Step, ...]
    cost: float

    def then(self, step: Step, graph: ModelGraph, cost: float) -> RewriteCandidate:
        return RewriteCandidate(graph, (*self.steps, step), cost)


@dataclass(frozen=True)
class RewriteResult:
    search: str
    original: RewriteCandidate
    best: RewriteCandidate
    top: tuple[RewriteCandidate, ...]  # the best distinct graphs seen, cheapest first
    expanded: int
    generated: int
    seconds: float
    measured: tuple[tuple[RewriteCandidate, float], ...] = ()
    """Candidates timed on a device (AutoGraph's check) with their seconds, fastest first."""
    budget_hit: bool = False
    """The budget ran out: an exact search's answer is then not proven."""

    @property
    def speedup(self) -> float:
        return self.original.cost / self.best.cost if self.best.cost else 1.0


class BudgetExhausted(Exception):
    """Raised by :meth:`Problem.child` once the budget is spent; searches stop on it."""


@dataclass
class Problem:
    """Rules, cost and budget shared by every search, with the counters they report."""

    rules: Sequence[Rule]
    cost: GraphCost
    budget: int = DEFAULT_BUDGET
    max_growth: float = 1.5
    """A candidate with more than ``max_growth`` times the original's ops is not kept (a
    size cap, as TASO's: relaxed rules could otherwise grow the graph without end)."""
    progress: Callable[[int], None] | None = None
    expanded: int = 0
    generated: int = 0
    _limit_nodes: int = field(default=0, repr=False)
    _top: dict[int, RewriteCandidate] = field(default_factory=dict, repr=False)

    def start(self, g: ModelGraph) -> RewriteCandidate:
        self._limit_nodes = int(len(g) * self.max_growth) + 1
        root = RewriteCandidate(g, (), self.cost(g))
        self._remember(root)
        return root

    @property
    def exhausted(self) -> bool:
        return self.generated >= self.budget

    def matches(self, g: ModelGraph, near: Iterable[str] | None = None) -> list[Match]:
        """Every rule's matches in ``g`` (only those using a ``near`` node, if given); each
        call counts as expanding ``g``."""
        self.expanded += 1
        names = None if near is None else list(near)
        return [m for rule in self.rules for m in rule.matches(g, names)]

    def child(self, parent: RewriteCandidate, match: Match) -> RewriteCandidate | None:
        """Apply ``match``; None if the result exceeds the size cap."""
        if self.exhausted:
            raise BudgetExhausted
        graph = match.rule.apply(parent.graph, match)
        self.generated += 1
        if self.progress is not None:
            self.progress(1)
        if len(graph) > self._limit_nodes:
            return None
        child = parent.then(Step(match.rule.name, match.names), graph, self.cost(graph))
        self._remember(child)
        return child

    def fork(self, budget: int) -> Problem:
        """A problem over a part of the graph: same rules and cost cache, its own budget,
        counters and best candidates (merge the counters back with :meth:`absorb`)."""
        return Problem(self.rules, self.cost, max(budget, 0), self.max_growth, self.progress)

    def absorb(self, part: Problem) -> None:
        self.expanded += part.expanded
        self.generated += part.generated

    def replay(
        self, start: RewriteCandidate, steps: Sequence[Step], *, skip_missing: bool = False
    ) -> RewriteCandidate:
        """Apply recorded steps (found on a part of the graph) to ``start``'s graph.

        Node names are stable and names a rule creates depend only on its match, so a step
        found on a subgraph names the same nodes in the whole graph; not counted in the
        budget (no new graph is searched, a known one is rebuilt). With ``skip_missing``, a
        step whose match is gone (it depended on a step left out) is skipped.
        """
        rules = {r.name: r for r in self.rules}
        graph = start.graph
        applied = []
        for step in steps:
            rule = rules[step.rule]
            match = next(
                (m for m in rule.matches(graph, step.nodes) if m.names == step.nodes), None
            )
            if match is None:
                if skip_missing:
                    continue
                raise RuntimeError(f"step {step} does not replay")  # a framework bug
            graph = rule.apply(graph, match)
            applied.append(step)
        result = RewriteCandidate(graph, (*start.steps, *applied), self.cost(graph))
        self._remember(result)
        return result

    def _remember(self, c: RewriteCandidate, keep: int = 16) -> None:
        held = self._top.get(c.graph.fingerprint)
        if held is None or c.cost < held.cost or len(c.steps) < len(held.steps):
            self._top[c.graph.fingerprint] = c if held is None or c.cost <= held.cost else held
        if len(self._top) > 4 * keep:
            self._top = dict(sorted(self._top.items(), key=lambda kv: kv[1].cost)[:keep])

    def top(self, k: int = 8) -> tuple[RewriteCandidate, ...]:
        return tuple(sorted(self._top.values(), key=lambda c: (c.cost, len(c.steps)))[:k])

    def result(
        self, name: str, root: RewriteCandidate, started: float, **extra: Any
    ) -> RewriteResult:
        top = self.top()
        best = extra.pop("best", top[0])
        return RewriteResult(
            name,
            root,
            best,
            top,
            self.expanded,
            self.generated,
            time.perf_counter() - started,
            budget_hit=self.exhausted,
            **extra,
        )


@dataclass(frozen=True)
class Footprint:
    """Where a rewrite changed the graph, for reusing the parent's matches in the child.

    ``near``: nodes of the child whose matches may differ from the parent's: the new nodes
    and every reader or producer of a tensor the rewrite read, wrote or rewired. Any match
    of the child using none of them was already a match of the parent (same nodes, same
    readers of their outputs), which is what lets DPP and the canonical order reuse them.
    ``stale``: ``near`` plus the parent's nodes the child lacks or holds changed: a parent
    match using one of these no longer holds.
    """

    near: frozenset[str]
    stale: frozenset[str]


def footprint(parent: ModelGraph, child: ModelGraph) -> Footprint:
    new = [n for name, n in child.nodes.items() if parent.nodes.get(name) is not n]
    gone = [n for name, n in parent.nodes.items() if child.nodes.get(name) is not n]
    tensors = {t for n in (*new, *gone) for t in (*n.inputs, *n.outputs) if t}
    near = {n.name for n in new}
    for t in tensors:
        producer = child.producer.get(t)
        if producer is not None:
            near.add(producer.name)
        near.update(n.name for n in child.consumers.get(t, ()))
    return Footprint(frozenset(near), frozenset(near.union(n.name for n in gone)))


class SubstitutionSearch(ABC):
    """One search strategy; options are constructor arguments."""

    name: ClassVar[str]

    @abstractmethod
    def run(self, problem: Problem, graph: ModelGraph) -> RewriteResult: ...

"""The fusion-planning problem every search algorithm shares.

A search proposes partitions of the *fusable* nodes freely (edge cuts, mutations). The
problem turns each proposal into a valid, costed candidate: make it structurally sound,
split invalid groups with the configured splitter, and sum the memoised group costs. It
also counts proposals, so every algorithm can stop exactly at its budget.
"""

from __future__ import annotations

import numbers
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accel_model.bounds import unfusable_nodes
from accel_model.hardware import Hardware
from accel_model.objectives import DramObjective, Objective
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, bits, lowest, weak_components
from fusionplan.ir.partition import groups_from_cut_edges, make_sound
from fusionplan.planning.plan import Plan
from fusionplan.planning.result import Candidate, SearchResult

if TYPE_CHECKING:
    from accel_model.base import CostModel
    from fusionplan.planning.split import Splitter


class BudgetExhausted(Exception):
    """Raised by :meth:`FusionProblem.evaluate` when a search asks past its budget."""


def check_query_budget(budget: object) -> int | None:
    """``budget`` as a whole number of oracle queries >= 1, or None (no query budget)."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1:
        raise ConfigError(f"query budget must be a whole number of queries >= 1, got {budget!r}")
    return int(budget)


@dataclass
class FusionProblem:
    """Graph + cost model + splitter, with a proposal counter bounded by ``budget``."""

    cost_model: CostModel
    splitter: Splitter
    budget: int
    proposed: int = 0
    seen: dict[tuple[Group, ...], Candidate] = field(default_factory=dict)
    # Plans every search starts from (e.g. a sweep's best plan at a smaller buffer): each
    # search sees them as already found, so it can only return something as good or better.
    warm_start: list[tuple[Group, ...]] = field(default_factory=list)
    # what the searches minimise (None: DRAM bytes)
    objective: Objective | None = None
    # oracle queries (distinct groups priced, ``CacheStats.misses``) after which no further
    # plan is proposed; None: only ``budget`` stops the search (docs/design.md, "Oracles")
    query_budget: int | None = None

    def __post_init__(self) -> None:
        budget = self.budget
        if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1:
            raise ConfigError(f"search budget must be a whole number of plans >= 1, got {budget!r}")
        self.budget = int(budget)
        self.query_budget = check_query_budget(self.query_budget)
        cm = self.cost_model
        if self.objective is None:
            self.objective = DramObjective(cm, Hardware())
        self.graph = cm.graph
        self.unfusable: Group = unfusable_nodes(cm)
        self.fusable: Group = self.graph.all_nodes & ~self.unfusable
        self.fixed: list[Group] = [1 << v for v in bits(self.unfusable)]
        pairs = {(e.src, e.dst) for e in self.graph.edges}
        fus = self.fusable
        self.edges: list[tuple[int, int]] = sorted(
            (u, v) for u, v in pairs if (fus >> u) & (fus >> v) & 1
        )

    # -- proposals --------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        """Plans the search may still propose: none once the oracle queries reach the
        query budget (checked where searches check this, so the plan or generation under
        way is finished; the first plan is always proposed)."""
        qb = self.query_budget
        if qb is not None and self.proposed and self.cost_model.stats.misses >= qb:
            return 0
        return self.budget - self.proposed

    def evaluate(self, groups: list[Group]) -> Candidate:
        """Count one proposal and return its valid, costed candidate.

        ``groups`` are disjoint sets of fusable nodes covering all of them; they need not
        be connected, acyclic or valid.
        """
        self._count()
        return self._candidate(self.realise(groups))

    def realise(self, groups: list[Group]) -> tuple[Group, ...]:
        """The valid plan a proposal becomes (sound, invalid groups split, unfusable
        singletons added, sorted by lowest node), *without* counting a proposal.

        Searches that repair their encoding before proposing (the NSGA-II ``Repair``) call
        this, then :meth:`evaluate_realised` when the plan is actually proposed.
        """
        sound = make_sound(self.graph, [*groups, *self.fixed])
        final: list[Group] = []
        split = self.splitter.split
        unf = self.unfusable
        for g in sound:
            if g & unf:
                final.append(g)
            else:
                final.extend(split(g))
        final.sort(key=lowest)
        return tuple(final)

    def evaluate_realised(self, plan: tuple[Group, ...]) -> Candidate:
        """Count one proposal of a plan that :meth:`realise` returned, and cost it."""
        self._count()
        return self._candidate(plan)

    def _count(self) -> None:
        if self.proposed >= self.budget:
            raise BudgetExhausted(f"budget of {self.budget} plans is spent")
        self.proposed += 1

    def _candidate(self, key: tuple[Group, ...]) -> Candidate:
        hit = self.seen.get(key)
        if hit is not None:
            return hit
        cost = self.cost_model.cost
        unf = self.unfusable
        dram = mbu = 0
        for g in key:
            c = cost(g)
            dram += c.dram
            if not g & unf and c.buffer > mbu:
                mbu = c.buffer
        objective = self.objective
        score = dram if isinstance(objective, DramObjective) else objective.plan(key)
        cand = Candidate(key, dram, mbu, score)
        self.seen[key] = cand
        return cand

    def warm_candidates(self) -> list[Candidate]:
        """The warm-start plans made valid here and costed, without counting proposals.

        Ops unfusable here are taken out of their groups first (they run alone in every
        plan), and a group that does not fit here is split as any proposal's.
        """
        fus = self.fusable
        return [
            self._candidate(self.realise([g & fus for g in plan if g & fus]))
            for plan in self.warm_start
        ]

    def evaluate_cuts(self, cut: list[bool]) -> Candidate:
        """Evaluate the partition whose groups are components of the uncut edges."""
        return self.evaluate(groups_from_cut_edges(self.graph, self.fusable, cut, self.edges))

    # -- encodings and sampling -------------------------------------------------------
    def random_cuts(self, rng: random.Random) -> list[bool]:
        """Edge-cut bits with a cut probability drawn per plan, so both fine and coarse
        partitions are sampled."""
        p = rng.random()
        return [rng.random() < p for _ in self.edges]

    def whole_components(self) -> list[Group]:
        """The coarsest proposal: each connected region of fusable nodes as one group."""
        return weak_components(self.graph, self.fusable)

    def to_plan(self, candidate: Candidate, result: SearchResult | None = None) -> Plan:
        return Plan(
            self.graph, self.cost_model, list(candidate.groups), result=result,
            hardware=self.objective.hw,
        )  # fmt: skip

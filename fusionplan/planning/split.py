"""Splitting invalid fusion groups into valid ones (docs/design.md, "Splitting").

One protocol, several small implementations:

* :class:`RandomSplitter` — the paper's baseline: random topological cuts until every part
  fits, blind to DRAM.
* :class:`TreeSplitter` — the paper's Algorithm 1, a recursive greedy tree over topological
  cuts derived from edges an :class:`EdgeRanker` names as responsible for invalidity. The
  ranker is pluggable: :class:`CostModelRanker` (no GNN) here, the graph explainers later.

Every splitter memoises per group and counts how often its ranker alone rectified a group.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from fusionplan.ir.graph import Group, OpGraph, bits
from fusionplan.ir.partition import cut_at
from fusionplan.ir.registry import Registry

if TYPE_CHECKING:
    from accel_model.base import CostModel

Edge = tuple[int, int]


@dataclass
class SplitStats:
    """Counters every search reports. A group is *rectified* when the ranker's edges alone
    (no random fallback anywhere in its split tree) produced valid parts."""

    calls: int = 0
    invalid_groups: int = 0  # distinct invalid groups split
    memo_hits: int = 0
    rectified: int = 0
    fallbacks: int = 0  # random cuts taken because the ranker gave nothing usable

    @property
    def rectify_rate(self) -> float:
        return self.rectified / self.invalid_groups if self.invalid_groups else 1.0


class Splitter(Protocol):
    name: str
    stats: SplitStats

    def split(self, group: Group) -> list[Group]:
        """Valid groups that exactly cover ``group`` (the group itself if it is valid)."""
        ...


class PartJudge(Protocol):
    """How Algorithm 1 classifies the parts of a candidate cut and prices a choice among
    cuts. The parts it keeps are always checked against the cost model afterwards (one
    oracle query each); the judge decides how many *other* parts are asked about
    (docs/design.md, "Oracles")."""

    name: str

    def rules_out(self, group: Group) -> bool:
        """Whether to split ``group`` without asking the oracle if it fits (never a group
        the oracle has answered; a group not ruled out is asked, so every part kept fits)."""
        ...

    def fits(self, parts: list[Group]) -> list[bool]:
        """Whether each part fits the buffer, as far as the judge can tell."""
        ...

    def dram(self, parts: list[Group]) -> int:
        """The DRAM bytes of ``parts`` run as groups, exact or estimated."""
        ...


class OracleJudge:
    """Asks the cost model about every candidate part: exact, one query per new part."""

    name = "oracle"

    def __init__(self, cost_model: CostModel) -> None:
        self.cost_model = cost_model

    def rules_out(self, group: Group) -> bool:
        return False

    def fits(self, parts: list[Group]) -> list[bool]:
        return [self.cost_model.is_valid(p) for p in parts]

    def dram(self, parts: list[Group]) -> int:
        return sum(self.cost_model.dram_bytes(p) for p in parts)


class EdgeRanker(Protocol):
    name: str

    def rank(self, group: Group) -> list[Edge]:
        """Edges inside ``group``, most responsible for its invalidity first."""
        ...


def group_edges(graph: OpGraph, group: Group) -> list[Edge]:
    """Producer -> consumer node pairs with both ends in ``group``, by (src, dst)."""
    succ = graph.succ_mask
    return [(u, v) for u in bits(group) for v in bits(succ[u] & group)]


def positions_between(group: Group, edge: Edge) -> list[int]:
    """Topological cut positions p with label(u) <= p < label(v) that change the group."""
    u, v = edge
    window = group & ((1 << v) - 1) & ~((1 << u) - 1)
    return list(bits(window))


class _MemoSplitter:
    """Shared front: validity shortcut, memo and counters; subclasses split one group."""

    name = "base"

    def __init__(self, cost_model: CostModel, seed: int = 0) -> None:
        self.cost_model = cost_model
        self.graph = cost_model.graph
        self.rng = random.Random(seed)
        self.stats = SplitStats()
        self._memo: dict[Group, list[Group]] = {}

    def split(self, group: Group) -> list[Group]:
        self.stats.calls += 1
        if group.bit_count() == 1 or self._fits(group):
            return [group]
        cached = self._memo.get(group)
        if cached is not None:
            self.stats.memo_hits += 1
            return cached
        self.stats.invalid_groups += 1
        parts, rectified = self._split_invalid(group)
        self.stats.rectified += rectified
        self._memo[group] = parts
        return parts

    def _fits(self, group: Group) -> bool:
        """Whether ``group`` runs as it is (the oracle's word)."""
        return self.cost_model.is_valid(group)

    def _split_invalid(self, group: Group) -> tuple[list[Group], bool]:
        raise NotImplementedError

    def _random_split(self, group: Group) -> list[Group]:
        """Random topological cuts until every part fits (single ops always stop)."""
        done, todo = [], [group]
        while todo:
            g = todo.pop()
            if g.bit_count() == 1 or self.cost_model.is_valid(g):
                done.append(g)
                continue
            labels = list(bits(g))[:-1]
            todo.extend(cut_at(self.graph, g, self.rng.choice(labels)))
        return sorted(done)


class RandomSplitter(_MemoSplitter):
    """The paper's baseline: random topological cuts, no regard for DRAM."""

    name = "random"

    def _split_invalid(self, group: Group) -> tuple[list[Group], bool]:
        return self._random_split(group), False


@dataclass
class TreeConfig:
    """Knobs of Algorithm 1. ``top_edges``: ranked edges turned into cuts per level;
    ``branch``: category-3 solutions explored per level; ``max_depth``: levels before a
    random fallback (which makes the group count as not rectified)."""

    top_edges: int = 3
    branch: int = 2
    max_depth: int = 8


class TreeSplitter(_MemoSplitter):
    """The paper's Algorithm 1 over any :class:`EdgeRanker`."""

    def __init__(
        self,
        cost_model: CostModel,
        ranker: EdgeRanker,
        seed: int = 0,
        config: TreeConfig | None = None,
        judge: PartJudge | None = None,
    ) -> None:
        super().__init__(cost_model, seed)
        self.ranker = ranker
        self.config = config or TreeConfig()
        self.judge = judge or OracleJudge(cost_model)
        judged = "" if self.judge.name == "oracle" else f", {self.judge.name} judge"
        self.name = f"tree[{ranker.name}{judged}]"
        self._solved: dict[Group, tuple[list[Group], int, bool]] = {}

    def _split_invalid(self, group: Group) -> tuple[list[Group], bool]:
        parts, _, rectified = self._solve(group, 0)
        return parts, rectified

    def _fits(self, group: Group) -> bool:
        """The oracle's word, unless the judge rules ``group`` out unasked."""
        return not self.judge.rules_out(group) and self.cost_model.is_valid(group)

    def _solve(self, group: Group, depth: int) -> tuple[list[Group], int, bool]:
        """(parts, their DRAM, rectified) for ``group``; memoised across calls."""
        cm = self.cost_model
        if group.bit_count() == 1 or self._fits(group):
            return [group], cm.dram_bytes(group), True
        hit = self._solved.get(group)
        if hit is not None:
            return hit
        candidates = self._candidate_cuts(group) if depth < self.config.max_depth else []
        if not candidates:
            self.stats.fallbacks += 1
            parts = self._random_split(group)
            result = (parts, sum(cm.dram_bytes(p) for p in parts), False)
        else:
            result = self._best_solution(candidates, depth)
        self._solved[group] = result
        return result

    def _candidate_cuts(self, group: Group) -> list[list[Group]]:
        """Distinct topological cuts from the ranker's top edges, in ranking order."""
        inside = [e for e in self.ranker.rank(group) if (group >> e[0]) & (group >> e[1]) & 1]
        seen: set[int] = set()
        cuts = []
        for edge in inside[: self.config.top_edges]:
            for p in positions_between(group, edge):
                low = group & ((1 << (p + 1)) - 1)
                if low not in seen:
                    seen.add(low)
                    cuts.append(cut_at(self.graph, group, p))
        return cuts

    def _best_solution(self, cuts: list[list[Group]], depth: int):
        verdicts = iter(self.judge.fits([p for parts in cuts for p in parts]))
        cat1, cat2, cat3 = [], [], []
        for parts in cuts:
            valid = [next(verdicts) for _ in parts]
            (cat1 if all(valid) else cat2 if any(valid) else cat3).append((parts, valid))
        if cat1:  # every part fits: the cheapest such cut ends the recursion once its
            # parts are confirmed (free when the judge asked the cost model already)
            return self._recurse(min((p for p, _ in cat1), key=self.judge.dram), depth)
        if cat2:  # keep the largest valid side, recurse on what is still invalid
            parts, _ = max(cat2, key=self._valid_side_size)
            return self._recurse(parts, depth)
        # all parts invalid: explore a few cuts fully, keep the cheapest total
        explored = [self._recurse(parts, depth) for parts, _ in cat3[: self.config.branch]]
        return min(explored, key=lambda r: r[1])

    def _valid_side_size(self, candidate: tuple[list[Group], list[bool]]) -> tuple[int, int]:
        """Category-2 preference: most nodes in valid parts, then least DRAM among them."""
        valid_parts = [p for p, ok in zip(*candidate, strict=True) if ok]
        return sum(p.bit_count() for p in valid_parts), -self.judge.dram(valid_parts)

    def _recurse(self, parts: list[Group], depth: int) -> tuple[list[Group], int, bool]:
        out, dram, rectified = [], 0, True
        for p in parts:
            sub, sub_dram, ok = self._solve(p, depth + 1)
            out.extend(sub)
            dram += sub_dram
            rectified &= ok
        return sorted(out), dram, rectified


class CostModelRanker:
    """No GNN: score topological cuts of the group with the cost model and rank each edge
    by the best cut it spans. The natural ablation for the explainer rankers.

    At most ``max_positions`` evenly spaced cut positions are scored, so ranking a group of
    n ops costs O(max_positions * n) instead of O(n^2); an edge whose span holds no scored
    position takes the score of the nearest one.
    """

    name = "cost"

    def __init__(self, cost_model: CostModel, max_positions: int = 32) -> None:
        self.cost_model = cost_model
        self.graph = cost_model.graph
        self.max_positions = max_positions

    def _cut_score(self, group: Group, position: int) -> tuple[int, float, int]:
        cm = self.cost_model
        costs = [cm.cost(p) for p in cut_at(self.graph, group, position)]
        overflow = max((c.buffer / cm.beta for c in costs if not c.valid), default=0.0)
        return (int(overflow > 0), overflow, sum(c.dram for c in costs))

    def rank(self, group: Group) -> list[Edge]:
        positions = bits(group)[:-1]
        if len(positions) > self.max_positions:
            step = len(positions) / self.max_positions
            positions = [positions[int(i * step)] for i in range(self.max_positions)]
        scores = {p: self._cut_score(group, p) for p in positions}
        ranked = []
        for u, v in group_edges(self.graph, group):
            spanned = [scores[p] for p in positions if u <= p < v]
            if not spanned:
                spanned = [scores[min(positions, key=lambda p: abs(p - u))]]
            ranked.append((min(spanned), (u, v)))
        ranked.sort()
        return [edge for _, edge in ranked]


SplitterFactory = Callable[["CostModel", int], Splitter]
SPLITTERS: Registry[SplitterFactory] = Registry("splitter")
"""Splitter name -> ``factory(cost_model, seed)``. The explainers package adds gnne/pg/rg."""


def make_splitter(name: str, cost_model: CostModel, seed: int = 0) -> Splitter:
    """A fresh splitter by registry name for ``cost_model``, seeded."""
    return SPLITTERS.get(name)(cost_model, seed)


SPLITTERS.register(
    "random",
    lambda cm, seed: RandomSplitter(cm, seed),
    help="random topological cuts, the paper's baseline",
)
SPLITTERS.register(
    "tree",
    lambda cm, seed: TreeSplitter(cm, CostModelRanker(cm), seed),
    help="Algorithm 1 guided by the cost model",
)

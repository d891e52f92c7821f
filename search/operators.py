"""Search operators as small objects (pymoo style): each does one thing to one encoding.

Two encodings are used by the searches:

* **group lists** (local search): a candidate's fusable groups, as bitmasks. A
  :class:`PlanView` precomputes what the 1-edit mutations need (owner of every node, the cut
  edges between groups, the groups with more than one node). Each mutation returns a new
  list of groups, which need not be connected, acyclic or valid:
  :meth:`fusionplan.search.problem.FusionProblem.evaluate` repairs it.

  - :class:`MoveBoundaryNode` — move one end of a cut edge into the other end's group;
  - :class:`MergeAdjacentGroups` — merge the two groups a cut edge joins;
  - :class:`SplitAtTopologicalCut` — split one group at a topological position
    (:func:`fusionplan.ir.partition.cut_at`; such a cut never creates a cycle);
  - :class:`OneEditMutation` — one of the applicable mutations above, chosen uniformly.

* **edge-cut bit-strings** (NSGA-II): bit ``i`` set <=> ``problem.edges[i]`` is cut; a group
  is a connected component of the uncut edges.

  - :class:`RandomCutSampling` — the random-search distribution (a cut probability drawn
    per plan, then independent bits);
  - :class:`EdgeCodec` — decode / encode between bit-strings and groups (fast);
  - :class:`PlanRepair` — make each bit-string the cut bits of the valid plan it becomes
    (sound, invalid groups split), memoised, so a population carries valid plans;
  - :func:`stable_randomized_argsort` — the sort NSGA-II's survival orders a front by
    (pymoo's ``randomized_argsort`` with a stable sort, so ties never depend on the CPU).

Crossover and bit-flip mutation for bit-strings are the standard ones of the GA library in
use (pymoo's two-point / uniform crossover and bit-flip mutation); nothing here imports
pymoo, so the module stays cheap to import.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import numpy as np

from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, bits
from fusionplan.ir.partition import cut_at

if TYPE_CHECKING:
    import numpy as np

    from fusionplan.planning.result import Candidate
    from fusionplan.search.problem import FusionProblem


# ----------------------------------------------------------------------- group lists
class PlanView:
    """What mutations need to know about one candidate's fusable groups.

    ``groups``: fusable groups (unfusable singletons left out); ``owner[v]``: index in
    ``groups`` of node ``v`` (-1 for unfusable nodes); ``cut``: the edges of
    ``problem.edges`` whose ends lie in different groups; ``multi``: indices of the groups
    with two or more nodes.
    """

    __slots__ = ("cut", "graph", "groups", "multi", "owner")

    def __init__(self, problem: FusionProblem, candidate: Candidate) -> None:
        unf = problem.unfusable
        groups = [g for g in candidate.groups if not g & unf]
        owner = [-1] * len(problem.graph)
        for gi, g in enumerate(groups):
            for v in bits(g):
                owner[v] = gi
        self.graph = problem.graph
        self.groups = groups
        self.owner = owner
        self.cut = [(u, v) for u, v in problem.edges if owner[u] != owner[v]]
        self.multi = [gi for gi, g in enumerate(groups) if g & (g - 1)]


class MoveBoundaryNode:
    """Move one end of a random cut edge into the group at its other end."""

    name = "move"

    def applicable(self, view: PlanView) -> bool:
        return bool(view.cut)

    def do(self, view: PlanView, rng: random.Random) -> list[Group]:
        u, v = rng.choice(view.cut)
        if rng.random() < 0.5:
            u, v = v, u  # move u into v's group
        src, dst = view.owner[u], view.owner[v]
        groups = view.groups.copy()
        bit = 1 << u
        groups[dst] |= bit
        rest = groups[src] & ~bit
        if rest:
            groups[src] = rest
        else:
            del groups[src]
        return groups


class MergeAdjacentGroups:
    """Merge the two groups joined by a random cut edge."""

    name = "merge"

    def applicable(self, view: PlanView) -> bool:
        return bool(view.cut)

    def do(self, view: PlanView, rng: random.Random) -> list[Group]:
        u, v = rng.choice(view.cut)
        a, b = view.owner[u], view.owner[v]
        groups = view.groups.copy()
        groups[a] |= groups[b]
        del groups[b]
        return groups


class SplitAtTopologicalCut:
    """Split a random multi-node group after a random node label (topological cut)."""

    name = "split"

    def applicable(self, view: PlanView) -> bool:
        return bool(view.multi)

    def do(self, view: PlanView, rng: random.Random) -> list[Group]:
        gi = rng.choice(view.multi)
        g = view.groups[gi]
        position = rng.choice(list(bits(g))[:-1])
        return [*view.groups[:gi], *cut_at(view.graph, g, position), *view.groups[gi + 1 :]]


MUTATIONS: dict[str, type] = {
    cls.name: cls for cls in (MoveBoundaryNode, MergeAdjacentGroups, SplitAtTopologicalCut)
}


class OneEditMutation:
    """Apply one mutation chosen uniformly among those applicable to the plan.

    A plan to which none applies (no fusable edge at all) is returned unchanged.
    """

    name = "one-edit"

    def __init__(self, names: tuple[str, ...] = ("move", "merge", "split")) -> None:
        unknown = [n for n in names if n not in MUTATIONS]
        if unknown or not names:
            raise ConfigError(
                f"unknown mutation(s) {unknown or names!r} (choose from {', '.join(MUTATIONS)})"
            )
        self.ops = [MUTATIONS[n]() for n in dict.fromkeys(names)]

    def do(self, view: PlanView, rng: random.Random) -> list[Group]:
        ops = [op for op in self.ops if op.applicable(view)]
        if not ops:
            return view.groups.copy()
        op = ops[0] if len(ops) == 1 else rng.choice(ops)
        return op.do(view, rng)


# ------------------------------------------------------------------ edge-cut bit-strings
class RandomCutSampling:
    """``n`` random bit-strings drawn like :meth:`FusionProblem.random_cuts`: a cut
    probability ``p ~ U(0, 1)`` per string, then each edge cut with probability ``p``."""

    def do(self, n_samples: int, n_var: int, rng: np.random.Generator) -> np.ndarray:
        p = rng.random((n_samples, 1))
        return rng.random((n_samples, n_var)) < p


class EdgeCodec:
    """Fast decode / encode between cut bit-strings over ``problem.edges`` and groups.

    Same results as :func:`fusionplan.ir.partition.groups_from_cut_edges` and
    :func:`fusionplan.ir.partition.cut_edges_of` (the tests check it), about twice as fast:
    decoding grows components with bitmask adjacency; encoding memoises, per group, the
    indices of the edges inside it (groups recur across plans much like cost queries).
    """

    def __init__(self, problem: FusionProblem) -> None:
        self.edges = list(problem.edges)
        self.fusable = problem.fusable
        self._bit = [1 << v for v in range(len(problem.graph))]
        self._inside: dict[Group, list[int]] = {}

    def decode(self, cut) -> list[Group]:
        """Connected components of the fusable nodes over the uncut edges, by lowest node."""
        bit = self._bit
        adj = [0] * len(bit)
        for (u, v), is_cut in zip(self.edges, cut, strict=True):
            if not is_cut:
                adj[u] |= bit[v]
                adj[v] |= bit[u]
        rest = self.fusable
        comps = []
        while rest:
            comp = frontier = rest & -rest
            while frontier:
                grow = 0
                while frontier:
                    low = frontier & -frontier
                    grow |= adj[low.bit_length() - 1]
                    frontier ^= low
                frontier = grow & ~comp
                comp |= frontier
            comps.append(comp)
            rest &= ~comp
        return comps

    def inside(self, group: Group) -> list[int]:
        """Indices of the edges with both ends in ``group`` (memoised)."""
        idx = self._inside.get(group)
        if idx is None:
            idx = [i for i, (u, v) in enumerate(self.edges) if (group >> u) & (group >> v) & 1]
            self._inside[group] = idx
        return idx

    def encode(self, groups) -> np.ndarray:
        """Cut bits of a partition: an edge is cut iff its ends are in different groups."""
        x = np.ones(len(self.edges), dtype=bool)
        uncut: list[int] = []
        inside = self.inside
        for g in groups:
            if g & (g - 1):
                uncut.extend(inside(g))
        x[uncut] = False
        return x


class PlanRepair:
    """Turn bit-strings into the cut bits of the valid plans they become.

    Each row is decoded (components of the uncut edges), realised by the problem (made
    sound, invalid groups split; no proposal is counted) and re-encoded. Results are
    memoised by the row's bytes, both for the input and for the repaired row, so
    :meth:`plan_of` on a repaired row is a dict lookup. The memo is cleared when it exceeds
    ``max_memo`` rows (the splitter's own memo keeps the result deterministic).
    """

    def __init__(self, problem: FusionProblem, max_memo: int = 20000) -> None:
        self.problem = problem
        self.codec = EdgeCodec(problem)
        self.max_memo = max_memo
        self._memo: dict[bytes, tuple[Any, tuple[Group, ...]]] = {}

    def _entry(self, x: np.ndarray) -> tuple[np.ndarray, tuple[Group, ...]]:
        x = np.asarray(x, dtype=bool)
        key = x.tobytes()
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        plan = self.problem.realise(self.codec.decode(x.tolist()))
        repaired = self.codec.encode(plan)
        entry = (repaired, plan)
        if len(self._memo) >= self.max_memo:
            self._memo.clear()
        self._memo[key] = entry
        self._memo[repaired.tobytes()] = entry
        return entry

    def do(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=bool)
        out = np.empty_like(X)
        for i, row in enumerate(X):
            out[i] = self._entry(row)[0]
        return out

    def plan_of(self, x: np.ndarray) -> tuple[Group, ...]:
        """The realised plan (all groups, sorted) of a bit-string."""
        return self._entry(x)[1]


def stable_randomized_argsort(
    values: np.ndarray, rng: np.random.Generator, descending: bool = False
) -> np.ndarray:
    """pymoo's ``randomized_argsort(values, method="numpy", random_state=rng)``, made stable.

    pymoo shuffles the indices with ``rng.permutation`` (so ties are broken at random) and
    then sorts with ``np.argsort(kind="quicksort")``, which is not stable: numpy picks the
    sort by CPU (an AVX-512 sort on AVX-512 machines, introsort elsewhere), and they order
    equal values (several ``inf`` crowding distances) differently, so a seeded NSGA-II run
    gave different plans on different CPUs. Here the shuffled indices are sorted stably:
    the same random draw (one ``permutation``), ties kept in shuffled order, then reversed
    for ``descending`` as pymoo does (``np.flip`` of the ascending order). Equal to pymoo's
    result wherever numpy's quicksort keeps ties in order: without AVX-512, numpy 1.26's
    introsort sorts up to 17 keys by insertion sort alone, which is stable. Only a front of
    18 or more points with ties (possible from ``pop_size=9`` up, when nearly all of the
    merged population is mutually non-dominated) can come out otherwise than pymoo's did
    there; the recorded plan digests (``pop_size=10``) are unchanged.
    """
    values = np.asarray(values)
    perm = rng.permutation(len(values))
    order = perm[np.argsort(values[perm], kind="stable")]
    return np.flip(order, axis=0) if descending else order

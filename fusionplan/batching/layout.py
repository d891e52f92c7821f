"""Memory layout of batched execution: where each node's output row lives (ED-Batch's planner).

Node outputs of one width share one arena (a ``[rows, width]`` tensor); a batch writes its
outputs as one contiguous run of rows, in its members' order. An operand slot of a batch reads
one row per member. When those rows are one contiguous run, in the members' order, the slot is
a *view* of the arena; otherwise it must be gathered (a copy). Batching is only free of copies
if the layout makes the operands of every batch contiguous (adjacency) and equally ordered
with the batch (alignment).

* ``naive_layout``: allocation in execution order, members by node id (DyNet's behaviour).
* ``pq_layout``: a PQ tree per arena (``pqtree``) takes every batch's output run as a hard
  consecutive constraint, then each operand slot's rows as a soft one, heaviest first, skipping
  any that no order can satisfy together with those already taken. Alignment, our extension
  (docs/design.md, "Batching"): the tree's frontier is read with a key that orders each batch's
  members by the position of their operand in the heaviest slot the tree made consecutive,
  recomputed from the resulting positions for a few rounds; the round with fewest copied bytes
  is kept (or allocation order, should it copy less: the planner is never worse than naive).
  Every order the tree admits keeps all accepted slots contiguous, so alignment never costs
  adjacency. Mirroring: a batch and the operand run it follows must share their consecutive
  structure to be equally ordered, so each taken set is copied across that map (``_mirror``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fusionplan.batching.graph import Batch, DataflowGraph
from fusionplan.batching.pqtree import PQTree

FLOAT_BYTES = 4  # float32 everywhere in the executor


@dataclass(frozen=True)
class MemoryLayout:
    """Arena and row of every node's output."""

    name: str
    arena: tuple[int, ...]  # node -> arena id (one per output width)
    row: tuple[int, ...]  # node -> row in its arena
    widths: tuple[int, ...]  # arena id -> row width (floats)
    sizes: tuple[int, ...]  # arena id -> rows


@dataclass(frozen=True)
class CopyStats:
    """What batching costs in data movement under one layout."""

    slots: int  # operand slots read, over all batches
    views: int  # of which read in place
    bytes_copied: int  # gathered bytes, all slots
    bytes_copied_by_type: dict[str, int]  # gathered bytes per consumer type


def member_order(batch: Batch, layout: MemoryLayout) -> list[int]:
    """A batch's members in the order of their output rows (the order its kernel sees)."""
    return sorted(batch, key=lambda n: layout.row[n])


def slot_rows(graph: DataflowGraph, members: Sequence[int], slot: int) -> list[int]:
    """Producer node of operand ``slot`` for each member, in member order."""
    return [graph.nodes[n].args[slot] for n in members]


def is_view(producers: Sequence[int], layout: MemoryLayout) -> bool:
    """True when ``producers`` are consecutive rows of one arena, ascending, no repeats."""
    first = producers[0]
    arena, start = layout.arena[first], layout.row[first]
    return all(
        layout.arena[p] == arena and layout.row[p] == start + i for i, p in enumerate(producers)
    )


def copy_stats(graph: DataflowGraph, batches: Sequence[Batch], layout: MemoryLayout) -> CopyStats:
    slots = views = copied = 0
    by_type: dict[str, int] = {}
    for batch in batches:
        members = member_order(batch, layout)
        kind = graph.nodes[members[0]].type
        for j in range(len(graph.nodes[members[0]].args)):
            producers = slot_rows(graph, members, j)
            slots += 1
            if is_view(producers, layout):
                views += 1
                continue
            nbytes = sum(layout.widths[layout.arena[p]] for p in producers) * FLOAT_BYTES
            copied += nbytes
            by_type[kind] = by_type.get(kind, 0) + nbytes
    return CopyStats(slots, views, copied, by_type)


def _arenas(
    graph: DataflowGraph, widths: Mapping[str, int]
) -> tuple[list[int], list[int], list[list[int]]]:
    """Arena id per node (one arena per distinct output width), arena widths, members."""
    ids: dict[int, int] = {}
    arena = []
    for node in graph.nodes:
        arena.append(ids.setdefault(widths[node.type], len(ids)))
    members: list[list[int]] = [[] for _ in ids]
    for n, a in enumerate(arena):
        members[a].append(n)
    return arena, list(ids), members


def _layout_from_orders(
    name: str, arena: list[int], width: list[int], orders: list[list[int]]
) -> MemoryLayout:
    row = [0] * len(arena)
    for order in orders:
        for r, n in enumerate(order):
            row[n] = r
    return MemoryLayout(name, tuple(arena), tuple(row), tuple(width), tuple(map(len, orders)))


def naive_layout(
    graph: DataflowGraph, batches: Sequence[Batch], widths: Mapping[str, int]
) -> MemoryLayout:
    """Rows allocated in execution order, each batch's members by node id."""
    arena, width, members = _arenas(graph, widths)
    orders: list[list[int]] = [[] for _ in members]
    for batch in batches:
        for n in sorted(batch):
            orders[arena[n]].append(n)
    return _layout_from_orders("naive", arena, width, orders)


def pq_layout(
    graph: DataflowGraph,
    batches: Sequence[Batch],
    widths: Mapping[str, int],
    rounds: int = 4,
) -> MemoryLayout:
    """Adjacency by PQ trees, alignment by steering their frontiers (see the module docstring)."""
    arena, width, members = _arenas(graph, widths)
    trees = _Constraints(arena, members)
    for batch in batches:  # hard: a batch writes one contiguous run (disjoint, so never fails)
        if not trees.add(batch):
            raise AssertionError("disjoint batch runs always fit a PQ tree")
    accepted = _accepted_slots(graph, batches, arena, width, trees)
    steer: dict[int, int] = {}  # batch -> the slot its members' order follows
    for s, j in accepted:
        steer.setdefault(s, j)
    _mirror(graph, batches, steer, trees)
    step = {n: s for s, batch in enumerate(batches) for n in batch}
    scale = float(len(graph) + 1)
    key = {n: step[n] * scale + n for n in range(len(graph))}
    best: MemoryLayout | None = None
    best_bytes = -1
    for _ in range(rounds):
        orders = [tree.frontier(key=key.__getitem__) for tree in trees.trees]
        layout = _layout_from_orders("pq", arena, width, orders)
        nbytes = copy_stats(graph, batches, layout).bytes_copied
        if best is None or nbytes < best_bytes:
            best, best_bytes = layout, nbytes
        # a batch's members follow the rows of their steering operand; the members of a batch
        # with no steering slot of its own (a source batch) follow the rows of the heaviest
        # consumer that reads them in place
        claimed: set[int] = set()
        for s, j in accepted:
            for n in batches[s]:
                p = graph.nodes[n].args[j]
                if j == steer[s]:
                    key[n] = s * scale + layout.row[p]
                elif step[p] not in steer and p not in claimed:
                    claimed.add(p)
                    key[p] = step[p] * scale + layout.row[n]
    assert best is not None
    naive = naive_layout(graph, batches, widths)  # the planner never does worse than DyNet
    if copy_stats(graph, batches, naive).bytes_copied < best_bytes:
        return MemoryLayout("pq", naive.arena, naive.row, naive.widths, naive.sizes)
    return best


LAYOUTS: dict[str, Callable[..., MemoryLayout]] = {"naive": naive_layout, "pq": pq_layout}
"""Layout name -> builder. Here rather than in the pipeline (which loads torch), so that
``fusionplan batch --help`` lists the names without it."""


class _Constraints:
    """One PQ tree per arena, plus the consecutive sets taken so far (to mirror them)."""

    def __init__(self, arena: list[int], members: list[list[int]]) -> None:
        self.arena = arena
        self.trees = [PQTree(m) for m in members]
        self.sets: list[frozenset[int]] = []
        self.taken: set[frozenset[int]] = set()
        self.refused: set[frozenset[int]] = set()
        self.containing: dict[int, list[int]] = {}

    def add(self, nodes: Sequence[int] | frozenset[int]) -> bool:
        """Make ``nodes`` (all in one arena) consecutive; False if no order allows it now."""
        key = frozenset(nodes)
        if len(key) < 2 or key in self.taken:
            return True
        if key in self.refused or not self.trees[self.arena[next(iter(key))]].reduce(key):
            self.refused.add(key)
            return False
        self.taken.add(key)
        for n in key:
            self.containing.setdefault(n, []).append(len(self.sets))
        self.sets.append(key)
        return True

    def strictly_within(self, universe: set[int]) -> list[int]:
        """Ids (into ``sets``) of the taken sets that are proper subsets of ``universe``."""
        ids = {i for n in universe for i in self.containing.get(n, ())}
        return [
            i for i in sorted(ids) if len(self.sets[i]) < len(universe) and self.sets[i] <= universe
        ]


def _mirror(
    graph: DataflowGraph,
    batches: Sequence[Batch],
    steer: Mapping[int, int],
    trees: _Constraints,
) -> None:
    """Give each batch and the operand run it follows the same consecutive structure.

    Two runs can only be equally ordered if every set that must be consecutive in one maps to
    a consecutive set in the other; mirroring each taken set across the member -> operand map
    (both ways, to a fixed point) makes the trees agree, so steering can align them. The
    worklist holds (map, taken set) pairs, each mirrored once: a newly taken set is queued
    only for the maps whose runs strictly contain it, so the work is linear in the pairs.
    """
    maps: list[tuple[set[int], dict[int, int]]] = []  # (run, member <-> operand map)
    for s, j in steer.items():
        forward = {n: graph.nodes[n].args[j] for n in batches[s]}
        backward = {p: n for n, p in forward.items()}
        maps += [(set(forward), forward), (set(backward), backward)]
    touching: dict[int, list[int]] = {}
    for m, (run, _) in enumerate(maps):
        for n in run:
            touching.setdefault(n, []).append(m)
    todo = deque((m, k) for m, (run, _) in enumerate(maps) for k in trees.strictly_within(run))
    while todo:
        m, k = todo.popleft()
        mapping = maps[m][1]
        image = frozenset(mapping[n] for n in trees.sets[k])
        if image in trees.taken or not trees.add(image):
            continue
        new = len(trees.sets) - 1
        for other in sorted({o for n in image for o in touching.get(n, ())}):
            run = maps[other][0]
            if len(image) < len(run) and image <= run:
                todo.append((other, new))


def _accepted_slots(
    graph: DataflowGraph,
    batches: Sequence[Batch],
    arena: list[int],
    width: list[int],
    trees: _Constraints,
) -> list[tuple[int, int]]:
    """Reduce every slot that could be a view, heaviest first; the (batch, slot) pairs taken.

    A slot can only be a view if its producers live in one arena and are distinct.
    """
    candidates = []
    for s, batch in enumerate(batches):
        for j in range(len(graph.nodes[batch[0]].args)):
            producers = [graph.nodes[n].args[j] for n in batch]
            arenas = {arena[p] for p in producers}
            if len(arenas) != 1 or len(set(producers)) != len(producers):
                continue
            a = arenas.pop()
            candidates.append((len(producers) * width[a], s, j, a, producers))
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    return [(s, j) for _, s, j, _, producers in candidates if trees.add(producers)]

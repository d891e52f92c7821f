"""The ready frontier of a partly executed dataflow graph.

Every frontier policy (agenda, FSM) and the brute-force optimum step the same machine: pick a
type, run *all* its ready nodes as one batch. Running every ready node of the chosen type loses
nothing: the executed set only grows, and any schedule that finishes from a smaller executed
down-set still finishes from a larger one with no more batches (drop the members already run).
"""

from __future__ import annotations

from fusionplan.batching.graph import Batch, DataflowGraph


class Frontier:
    """Execution state of one graph: which nodes are ready, per type, and what is left."""

    def __init__(self, graph: DataflowGraph, *, track_largest: bool = False) -> None:
        """``track_largest`` keeps ``largest_batch`` up to date: the FSM's training reward needs
        it, scheduling does not, and its set-up is most of a big graph's scheduling time."""
        self.graph = graph
        self._waiting = list(graph.indegree)
        self.ready: dict[str, list[int]] = {}
        self._top: dict[str, int] = {}  # per ready type, its ready nodes' greatest height
        for i, w in enumerate(self._waiting):
            if w == 0:
                self._make_ready(i)
        self.remaining = len(graph)
        self._tracking = track_largest
        self._open: dict[str, int] = {}
        self._same_waiting: list[int] = []
        self._same_succ: list[list[int]] = []
        if track_largest:
            self._open, self._same_waiting, self._same_succ = _nearest_same_type(graph)

    def copy(self) -> Frontier:
        """An independent copy (the graph and the static lists are shared)."""
        other = Frontier.__new__(Frontier)
        other.graph, other._same_succ, other._tracking = self.graph, self._same_succ, self._tracking
        other._waiting, other._same_waiting = list(self._waiting), list(self._same_waiting)
        other.ready = {t: list(v) for t, v in self.ready.items()}
        other._top = dict(self._top)
        other._open, other.remaining = dict(self._open), self.remaining
        return other

    @property
    def done(self) -> bool:
        return self.remaining == 0

    def ready_types(self) -> list[str]:
        """Types with at least one ready node, in the graph's type order."""
        return [t for t in self.graph.types if self.ready.get(t)]

    def largest_batch(self, kind: str) -> int:
        """Unexecuted nodes of ``kind`` with no unexecuted ``kind`` ancestor.

        No schedule can ever batch more nodes of ``kind`` together from here: the reward's
        denominator (docs/design.md, "Batching"). Needs ``track_largest``.
        """
        if not self._tracking:
            raise ValueError("largest_batch needs a Frontier built with track_largest=True")
        return self._open.get(kind, 0)

    def top_height(self, kind: str) -> int:
        """The greatest ``graph.height`` among the ready nodes of ``kind`` (a ready type).

        Kept as nodes become ready: a type's ready list only grows until it runs whole.
        """
        return self._top[kind]

    def _make_ready(self, i: int) -> str:
        kind = self.graph.nodes[i].type
        self.ready.setdefault(kind, []).append(i)
        h = self.graph.height[i]
        if h > self._top.get(kind, -1):
            self._top[kind] = h
        return kind

    def run(self, kind: str) -> Batch:
        """Run every ready node of ``kind`` as one batch and return it (ids ascending)."""
        batch = tuple(self.ready.pop(kind, ()))
        if not batch:
            raise ValueError(f"no ready node of type {kind!r}")
        del self._top[kind]
        nodes, succ = self.graph.nodes, self.graph.successors
        grown: set[str] = set()
        for i in batch:
            for s in succ[i]:
                self._waiting[s] -= 1
                if self._waiting[s] == 0:
                    grown.add(self._make_ready(s))
        if self._tracking:
            self._open[kind] -= len(batch)
            for i in batch:
                for s in self._same_succ[i]:
                    self._same_waiting[s] -= 1
                    if self._same_waiting[s] == 0:
                        self._open[nodes[s].type] += 1
        for t in grown:  # only lists that received nodes can be out of order
            self.ready[t].sort()
        self.remaining -= len(batch)
        return batch


def _nearest_same_type(
    graph: DataflowGraph,
) -> tuple[dict[str, int], list[int], list[list[int]]]:
    """Per node, its nearest ancestors of its own type: (open count per type, how many each
    node waits for, whom each node releases).

    A node has an unexecuted ancestor of its own type iff one of its *nearest* such ancestors is
    unexecuted (executed sets are down-sets, so a far one being pending makes the near one on
    the same path pending too); tracking only the nearest keeps the lists short.
    """
    nodes = graph.nodes
    nearest: dict[tuple[int, str], frozenset[int]] = {}

    def last_of(v: int, kind: str) -> frozenset[int]:
        # iterative post-order over the ancestors that still need an answer for ``kind``
        stack = [v]
        while stack:
            u = stack[-1]
            if (u, kind) in nearest:
                stack.pop()
                continue
            if nodes[u].type == kind:
                nearest[(u, kind)] = frozenset((u,))
                stack.pop()
                continue
            todo = [a for a in nodes[u].args if (a, kind) not in nearest]
            if todo:
                stack.extend(todo)
                continue
            acc: frozenset[int] = frozenset()
            for a in nodes[u].args:
                acc |= nearest[(a, kind)]
            nearest[(u, kind)] = acc
            stack.pop()
        return nearest[(v, kind)]

    waiting = [0] * len(nodes)
    pending: list[list[int]] = [[] for _ in nodes]
    open_count: dict[str, int] = {}
    for v, node in enumerate(nodes):
        preds: set[int] = set()
        for a in node.args:
            preds |= last_of(a, node.type)
        waiting[v] = len(preds)
        for p in preds:
            pending[p].append(v)
        open_count.setdefault(node.type, 0)
        if not preds:
            open_count[node.type] += 1
    return open_count, waiting, pending

"""The op DAG the stream scheduler works on: integer nodes in topological order, with
reachability as bitsets (docs/design.md, "Stream scheduling").

Every question the scheduler asks (is ``v`` reachable from ``u``, which edges does the
transitive reduction keep, which chains cover the graph) is a few integer AND/ORs per node
on Python ints used as bitsets, so a 400-op graph's closure costs milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from fusionplan.ir.model import ModelGraph


def bits(mask: int) -> Iterator[int]:
    """Indices of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


@dataclass(frozen=True)
class OpDag:
    """Ops ``0..n-1`` in topological order; ``preds[v]``/``succs[v]`` without duplicates."""

    names: tuple[str, ...]
    preds: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        for v, ps in enumerate(self.preds):
            if any(not 0 <= p < v for p in ps):
                raise ValueError(f"op {self.names[v]}: predecessors must come earlier")

    @classmethod
    def from_graph(cls, g: ModelGraph) -> OpDag:
        """One node per op of ``g``; an edge wherever an op reads another's output."""
        index = {name: i for i, name in enumerate(g.nodes)}
        producer = g.producer
        preds = []
        for node in g.nodes.values():
            ps = {index[producer[t].name] for t in node.inputs if t in producer}
            preds.append(tuple(sorted(ps)))
        return cls(tuple(g.nodes), tuple(preds))

    @classmethod
    def from_edges(cls, n: int, edges: Sequence[tuple[int, int]]) -> OpDag:
        """A DAG on ``0..n-1`` from ``(u, v)`` edges with ``u < v`` (tests, generators)."""
        preds: list[set[int]] = [set() for _ in range(n)]
        for u, v in edges:
            preds[v].add(u)
        return cls(tuple(str(i) for i in range(n)), tuple(tuple(sorted(p)) for p in preds))

    def __len__(self) -> int:
        return len(self.names)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.names]
        for v, ps in enumerate(self.preds):
            for p in ps:
                out[p].append(v)
        return tuple(tuple(s) for s in out)

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        return tuple((p, v) for v, ps in enumerate(self.preds) for p in ps)

    @cached_property
    def descendants(self) -> tuple[int, ...]:
        """Bitset of the ops reachable from each op (itself excluded)."""
        desc = [0] * len(self)
        for u in reversed(range(len(self))):
            mask = 0
            for w in self.succs[u]:
                mask |= desc[w] | (1 << w)
            desc[u] = mask
        return tuple(desc)

    def reaches(self, u: int, v: int) -> bool:
        return bool(self.descendants[u] >> v & 1)

    @cached_property
    def reduced_edges(self) -> tuple[tuple[int, int], ...]:
        """The transitive reduction: edge ``(u, v)`` stays unless another successor of
        ``u`` reaches ``v`` (then a longer path implies it). Unique for a DAG."""
        kept = []
        for u in range(len(self)):
            succs = self.succs[u]
            for v in succs:
                cover = 0
                for w in succs:
                    if w != v:
                        cover |= self.descendants[w]
                if not cover >> v & 1:
                    kept.append((u, v))
        return tuple(kept)

    def critical_path(self, latency: Sequence[float]) -> float:
        """Length of the longest path, summing op latencies."""
        finish = [0.0] * len(self)
        for v, ps in enumerate(self.preds):
            finish[v] = max((finish[p] for p in ps), default=0.0) + latency[v]
        return max(finish, default=0.0)

    def bottom_levels(self, latency: Sequence[float]) -> list[float]:
        """Longest path from each op to a sink, the op included (list-scheduling priority)."""
        level = [0.0] * len(self)
        for u in reversed(range(len(self))):
            level[u] = latency[u] + max((level[w] for w in self.succs[u]), default=0.0)
        return level

"""Nimble's stream assignment: as many streams as the graph can use, as few syncs as the
assignment allows (docs/design.md, "Stream scheduling").

1. **Chains.** A stream runs its ops in order, so a stream's ops form a chain of the DAG's
   order. The fewest chains that cover the ops is the maximum antichain width (Dilworth),
   reached by a maximum matching in the bipartite graph ``u -> v`` for ``v`` reachable from
   ``u`` (``n - |matching|`` chains). We grow it in three steps, each a matching the next
   extends: a greedy seed over the reduction's edges along the longest paths (so the
   critical path tends to be one chain, with no event on it), Kuhn augmenting paths over
   the reduction's edges until that matching is maximum (Nimble's matching: a matched
   reduction edge is a dependency that needs no event), then over the closure until it is
   maximum, so the cover is minimum. Bitsets make each augmenting search O(n) words.
2. **Packing.** With ``max_streams`` below the width, chains cannot each have a stream, and
   packing whole chains (interval partitioning by their unlimited-stream schedule, tried
   first) left makespans 20-27 % above the bound on branchy graphs (docs/results.md). So the
   ops are list-scheduled instead: ready ops by bottom level (longest path to a sink), each
   onto the stream where it can start first, a predecessor's stream on ties (saves an
   event). The pop order is topological and every stream issues in it, so the streams
   cannot deadlock. Without a limit, each chain is a stream, issued by ASAP start time
   (ties by topological index), one global order consistent with every chain and edge.
3. **Events.** A cross-stream edge needs an event unless stream order and other events
   already imply it. With ``H`` = stream order + the reduction's cross-stream edges, the
   events placed are exactly the cross-stream edges of ``H``'s transitive reduction: every
   subgraph of ``H`` with ``H``'s reachability contains them (an edge of a DAG's reduction
   is the only path between its ends), so no smaller set is correct, and they are a subset
   of the reduction's cross-stream edges.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from fusionplan.ir.errors import ConfigError
from fusionplan.passes.streams.dag import OpDag, bits


@dataclass(frozen=True)
class StreamAssignment:
    """Which stream runs each op, in which order, and the events between streams."""

    stream_of: tuple[int, ...]
    streams: tuple[tuple[int, ...], ...]
    """Op indices per stream, in issue order."""
    order: tuple[int, ...]
    """The host's launch order: topological, consistent with every stream's order."""
    events: tuple[tuple[int, int], ...]
    """``(u, v)``: ``v``'s stream waits on an event recorded after ``u``."""
    width: int
    """Maximum antichain of the DAG: the most ops that can ever run at once."""
    reduced_cross_edges: int
    """Cross-stream edges of the transitive reduction (an upper bound on the events)."""

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    def waits(self) -> dict[int, list[int]]:
        """Op -> the ops whose events it waits for."""
        out: dict[int, list[int]] = {}
        for u, v in self.events:
            out.setdefault(v, []).append(u)
        return out


def minimum_chain_cover(dag: OpDag, latency: Sequence[float] | None = None) -> list[list[int]]:
    """Fewest chains covering ``dag`` (their number is the maximum antichain width), each
    in topological order; with ``latency``, chains follow the longest paths where they can."""
    n = len(dag)
    after, before = _critical_seed(dag, latency or [1.0] * n)
    reduced = [0] * n
    for u, v in dag.reduced_edges:
        reduced[u] |= 1 << v
    for reach in (reduced, dag.descendants):  # Nimble's matching, then the closure's
        for u in range(n):
            if u not in after:
                _augment(reach, u, after, before)
    heads = [v for v in range(n) if v not in before]
    chains = []
    for head in heads:
        chain, v = [head], head
        while v in after:
            v = after[v]
            chain.append(v)
        chains.append(chain)
    return chains


def _critical_seed(dag: OpDag, latency: Sequence[float]) -> tuple[dict[int, int], dict[int, int]]:
    """A greedy matching over the reduction's edges that continues each op, longest path
    first, to its free successor with the longest path to a sink: the augmentations keep
    matched ops matched, so the critical path tends to stay one chain (no events on it).
    As (u -> its chain successor, v -> its chain predecessor)."""
    level = dag.bottom_levels(latency)
    succs: list[list[int]] = [[] for _ in range(len(dag))]
    for u, v in dag.reduced_edges:
        succs[u].append(v)
    after: dict[int, int] = {}
    before: dict[int, int] = {}
    for u in sorted(range(len(dag)), key=lambda u: (-level[u], u)):
        free = [w for w in succs[u] if w not in before]
        if free:
            w = max(free, key=lambda w: (level[w], -w))
            after[u], before[w] = w, u
    return after, before


def _augment(reach: Sequence[int], u: int, after: dict[int, int], before: dict[int, int]) -> bool:
    """Extend the matching by an augmenting path from free left vertex ``u`` over the edges
    ``x -> bits of reach[x]``, breadth first (Kuhn). A vertex with no augmenting path now
    has none after later augmentations either, so one try per vertex from any starting
    matching gives a maximum one; augmenting never unmatches a matched vertex."""
    reached_from: dict[int, int] = {}
    visited = 0
    queue = [u]
    for x in queue:
        fresh = reach[x] & ~visited
        visited |= fresh
        for v in bits(fresh):
            reached_from[v] = x
            if v in before:
                queue.append(before[v])
                continue
            while True:  # flip the path back to u
                x = reached_from[v]
                previous = after.get(x)
                after[x], before[v] = v, x
                if x == u:
                    return True
                assert previous is not None
                v = previous
    return False


def assign_streams(
    dag: OpDag, latency: Sequence[float] | None = None, max_streams: int | None = None
) -> StreamAssignment:
    """Nimble's assignment of ``dag`` onto at most ``max_streams`` streams (the width if
    None); ``latency`` (seconds per op, unit if None) orders packed streams."""
    if max_streams is not None and max_streams < 1:
        raise ConfigError(f"--max-streams must be at least 1, got {max_streams}")
    lat = list(latency) if latency is not None else [1.0] * len(dag)
    if len(lat) != len(dag):
        raise ValueError(f"{len(lat)} latencies for {len(dag)} ops")
    chains = minimum_chain_cover(dag, lat)
    limit = len(chains) if max_streams is None else min(max_streams, len(chains))
    if limit >= len(chains):
        start = _asap(dag, lat)
        order = sorted(range(len(dag)), key=lambda v: (start[v], v))
        rank = {v: i for i, v in enumerate(order)}
        groups = [sorted(c, key=rank.__getitem__) for c in chains]
    else:
        groups, order = _list_schedule(dag, lat, limit)
        rank = {v: i for i, v in enumerate(order)}
    streams = sorted((tuple(g) for g in groups if g), key=lambda ops: rank[ops[0]])
    stream_of = [0] * len(dag)
    for s, ops in enumerate(streams):
        for v in ops:
            stream_of[v] = s
    cross = [(u, v) for u, v in dag.reduced_edges if stream_of[u] != stream_of[v]]
    events = place_events(len(dag), streams, order, cross)
    return StreamAssignment(
        stream_of=tuple(stream_of),
        streams=tuple(streams),
        order=tuple(order),
        events=tuple(events),
        width=len(chains),
        reduced_cross_edges=len(cross),
    )


def place_events(
    n: int,
    streams: Sequence[Sequence[int]],
    order: Sequence[int],
    cross: Sequence[tuple[int, int]],
) -> list[tuple[int, int]]:
    """The cross-stream edges of the transitive reduction of stream order + ``cross``
    (``order`` must be topological for both); the minimum correct set of events."""
    preds: list[list[int]] = [[] for _ in range(n)]
    for ops in streams:
        for a, b in itertools.pairwise(ops):
            preds[b].append(a)
    for u, v in cross:
        preds[v].append(u)
    ancestors = [0] * n
    for v in order:
        mask = 0
        for p in preds[v]:
            mask |= ancestors[p] | (1 << p)
        ancestors[v] = mask
    events = []
    for u, v in cross:
        implied = any(x != u and ancestors[x] >> u & 1 for x in preds[v])
        if not implied:
            events.append((u, v))
    return sorted(events)


def _asap(dag: OpDag, latency: Sequence[float]) -> list[float]:
    """Earliest start of each op with unlimited streams."""
    start = [0.0] * len(dag)
    for v, ps in enumerate(dag.preds):
        start[v] = max((start[p] + latency[p] for p in ps), default=0.0)
    return start


def _list_schedule(
    dag: OpDag, latency: Sequence[float], k: int
) -> tuple[list[list[int]], list[int]]:
    """Ops onto ``k`` streams by priority list scheduling; (ops per stream, pop order)."""
    level = dag.bottom_levels(latency)
    free, finish = [0.0] * k, [0.0] * len(dag)
    stream_of = [0] * len(dag)
    missing = [len(ps) for ps in dag.preds]
    ready = [(-level[v], v) for v in range(len(dag)) if not missing[v]]
    heapq.heapify(ready)
    groups: list[list[int]] = [[] for _ in range(k)]
    order = []
    while ready:
        _, v = heapq.heappop(ready)
        earliest = max((finish[p] for p in dag.preds[v]), default=0.0)
        homes = {stream_of[p] for p in dag.preds[v]}
        s = min(range(k), key=lambda s: (max(free[s], earliest), s not in homes, s))
        finish[v] = max(free[s], earliest) + latency[v]
        free[s], stream_of[v] = finish[v], s
        groups[s].append(v)
        order.append(v)
        for w in dag.succs[v]:
            missing[w] -= 1
            if not missing[w]:
                heapq.heappush(ready, (-level[w], w))
    return groups, order

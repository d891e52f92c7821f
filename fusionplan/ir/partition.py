"""Plain functions over partitions (lists of disjoint group bitmasks) of an op graph.

A partition is *structurally sound* when every group is weakly connected and the quotient
graph of groups is acyclic. Searches build partitions freely (edge cuts, mutations) and call
:func:`make_sound` before anything is costed; validity (fitting the buffer) is the splitter's
job, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fusionplan.ir.graph import (
    Group,
    OpGraph,
    bits,
    lowest,
    quotient_edges,
    topological_cut,
    weak_components,
)


def groups_from_cut_edges(
    graph: OpGraph, nodes: Group, cut: Sequence[bool], edges: Sequence[tuple[int, int]]
) -> list[Group]:
    """Connected components of ``nodes`` when the edges with ``cut[i]`` set are removed.

    ``edges`` lists the (src, dst) pairs the bit-string ``cut`` refers to; nodes in ``nodes``
    touched by no uncut edge become singletons.
    """
    parent = {v: v for v in bits(nodes)}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for (u, v), is_cut in zip(edges, cut, strict=True):
        if not is_cut:
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[max(ru, rv)] = min(ru, rv)
    groups: dict[int, Group] = {}
    for v in parent:
        r = find(v)
        groups[r] = groups.get(r, 0) | (1 << v)
    return sorted(groups.values(), key=lowest)


def cut_edges_of(groups: Iterable[Group], edges: Sequence[tuple[int, int]]) -> list[bool]:
    """The edge bit-string encoding ``groups``: an edge is cut iff its ends differ in group."""
    owner: dict[int, int] = {}
    for gi, g in enumerate(groups):
        for v in bits(g):
            owner[v] = gi
    return [owner.get(u, -1) != owner.get(v, -2) for u, v in edges]


def make_sound(graph: OpGraph, groups: Iterable[Group]) -> list[Group]:
    """Split groups until each is weakly connected and the quotient graph is acyclic.

    On a quotient cycle G1 -> G2 -> ... -> G1, each group is entered at some node x_i and
    left at some node y_i with y_i < x_{i+1} (labels are topological), so at least one group
    is left *before* it is entered (y_i < x_i). Cutting that group topologically after y_i
    separates the two. Every step strictly refines the partition, and the all-singleton
    partition is acyclic, so this terminates.
    """
    parts = [c for g in groups for c in weak_components(graph, g)]
    pred, succ = graph.pred_mask, graph.succ_mask
    while True:
        cycles = _quotient_cycles(graph, parts)
        if not cycles:
            return sorted(parts, key=lowest)
        replace: dict[int, list[Group]] = {}
        for scc in cycles:
            scc_nodes = 0
            for gi in scc:
                scc_nodes |= parts[gi]
            for gi in sorted(scc):
                g = parts[gi]
                outside = scc_nodes & ~g
                exits = [v for v in bits(g) if succ[v] & outside]
                entries = [v for v in bits(g) if pred[v] & outside]
                if exits and entries and exits[0] < entries[-1]:
                    replace[gi] = cut_at(graph, g, exits[0])
                    break
        parts = [p for gi, g in enumerate(parts) for p in replace.get(gi, [g])]


def _quotient_cycles(graph: OpGraph, parts: list[Group]) -> list[list[int]]:
    """Strongly connected components (of two or more groups) of the quotient graph.

    Most partitions are already acyclic, so a cheap Kahn pass answers first; Tarjan runs
    only when a cycle exists.
    """
    succ = quotient_edges(graph, parts)
    indeg = [0] * len(parts)
    for targets in succ:
        for b in targets:
            indeg[b] += 1
    ready = [a for a, d in enumerate(indeg) if d == 0]
    seen = 0
    while ready:
        a = ready.pop()
        seen += 1
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    if seen == len(parts):
        return []
    return [comp for comp in _strongly_connected(succ) if len(comp) > 1]


def _strongly_connected(succ: list[set[int]]) -> list[list[int]]:
    """Iterative Tarjan: the strongly connected components of a small digraph."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in range(len(succ)):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
    return comps


def topological_positions(group: Group) -> list[int]:
    """Cut positions that change a group: every node label except the group's last."""
    labels = list(bits(group))
    return labels[:-1]


def cut_at(graph: OpGraph, group: Group, position: int) -> list[Group]:
    """Parts of ``group`` after the topological cut at ``position``, split into components."""
    low, high = topological_cut(group, position)
    return weak_components(graph, low) + weak_components(graph, high)

"""How few batches a dataflow graph can run in: a lower bound, and the optimum on small graphs.

Lower bound: two nodes of one type on one path can never share a batch, and batches are
single-typed, so a graph needs at least ``sum over types t of (most t-nodes on any path)``
batches. The bound is tight on chains and single-type trees; a frontier policy that reaches it
is optimal, which is what lets the FSM's training stop early.
"""

from __future__ import annotations

from fusionplan.batching.frontier import Frontier
from fusionplan.batching.graph import DataflowGraph


def type_path_counts(graph: DataflowGraph) -> dict[str, int]:
    """Per type, the most nodes of that type on any one path (one longest-path DP per type)."""
    best: dict[str, int] = {}
    for kind in graph.types:
        count = [0] * len(graph)
        for i, node in enumerate(graph.nodes):
            count[i] = (node.type == kind) + max((count[a] for a in node.args), default=0)
        best[kind] = max(count)
    return best


def lower_bound(graph: DataflowGraph) -> int:
    """A lower bound on the number of batches of any valid schedule of ``graph``."""
    return sum(type_path_counts(graph).values())


def optimal_batches(graph: DataflowGraph, max_states: int = 200_000) -> int:
    """The fewest batches any schedule needs, by breadth-first search over executed sets.

    Exact: a batch may be any set of ready nodes of one type, but taking *all* of them is never
    worse (see ``frontier``), so breadth-first search over "run every ready node of type t"
    moves from the empty set reaches the optimum at its first complete state. Raises
    ``ValueError`` past ``max_states`` distinct executed sets (for small test graphs only).
    """
    if len(graph) == 0:
        return 0
    start = Frontier(graph)
    layer: dict[frozenset[int], Frontier] = {frozenset(): start}
    seen: set[frozenset[int]] = {frozenset()}
    depth = 0
    while layer:
        depth += 1
        nxt: dict[frozenset[int], Frontier] = {}
        for executed, state in layer.items():
            for kind in state.ready_types():
                child = state.copy()
                batch = child.run(kind)
                key = executed | frozenset(batch)
                if child.done:
                    return depth
                if key not in seen:
                    seen.add(key)
                    nxt[key] = child
                    if len(seen) > max_states:
                        raise ValueError(f"more than {max_states} states: graph too large")
        layer = nxt
    raise AssertionError("unreachable: every nonempty graph finishes")

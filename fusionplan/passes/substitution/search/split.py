"""MetaFlow's flow-based graph split: cut a large graph where few substitutions span.

Every edge (producer -> reader) gets capacity 1 plus the number of matches that span it
(both ends in the match, or the reader in a match whose other node reads the same tensor:
a sibling merge). A minimum s-t cut between the first and the last third of the
topological order, with infinite reverse edges so the source side is closed under
predecessors (no edge runs back across the cut), splits the graph in two; each side is
split again until it has at most ``threshold`` ops (30, as MetaFlow).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import networkx as nx

from fusionplan.ir.model import ModelGraph
from fusionplan.passes.substitution.pattern import Match

DEFAULT_THRESHOLD = 30


def flow_split(
    g: ModelGraph, matches: Sequence[Match], threshold: int = DEFAULT_THRESHOLD
) -> list[list[str]]:
    """Node-name parts of ``g`` (in topological order), each at most ``threshold`` ops."""
    order = list(g.nodes)
    if len(order) <= threshold:
        return [order]
    span = _spanning(g, matches)
    flow = nx.DiGraph()
    flow.add_nodes_from(order)
    for node in g.nodes.values():
        for t in dict.fromkeys(node.inputs):
            producer = g.producer.get(t)
            if producer is None:
                continue
            edge = (producer.name, node.name)
            capacity = 1 + span[edge]
            if flow.has_edge(*edge):
                capacity += flow.edges[edge]["capacity"]
            flow.add_edge(*edge, capacity=capacity)
            flow.add_edge(node.name, producer.name)  # no capacity attribute: infinite
    third = max(1, len(order) // 3)
    for name in order[:third]:
        flow.add_edge("__source__", name)
    for name in order[-third:]:
        flow.add_edge(name, "__sink__")
    _, (left, right) = nx.minimum_cut(flow, "__source__", "__sink__")
    parts = []
    for side in (left, right):
        names = [n for n in order if n in side]
        inside = set(names)
        sub_matches = [m for m in matches if inside.issuperset(m.names)]
        parts.extend(flow_split(g.subgraph(names), sub_matches, threshold))
    return parts


def _spanning(g: ModelGraph, matches: Sequence[Match]) -> Counter[tuple[str, str]]:
    span: Counter[tuple[str, str]] = Counter()
    for m in matches:
        names = set(m.names)
        read = Counter(t for n in m.nodes for t in set(n.inputs) if t)
        for node in m.nodes:
            for t in set(node.inputs):
                producer = g.producer.get(t)
                if producer is not None and (producer.name in names or read[t] > 1):
                    span[(producer.name, node.name)] += 1
    return span


def cut_tensors(g: ModelGraph, parts: Sequence[Sequence[str]]) -> set[str]:
    """Tensors produced in one part and read in another."""
    part_of = {name: i for i, names in enumerate(parts) for name in names}
    return {
        t
        for node in g.nodes.values()
        for t in node.inputs
        if t in g.producer and part_of[g.producer[t].name] != part_of[node.name]
    }


def boundary_nodes(g: ModelGraph, tensors: set[str]) -> set[str]:
    """Producers and readers in ``g`` of the given tensors (those still in ``g``)."""
    near: set[str] = set()
    for t in tensors:
        if t in g.producer:
            near.add(g.producer[t].name)
        near.update(n.name for n in g.consumers.get(t, ()))
    return near

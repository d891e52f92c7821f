"""Dynamic dataflow graphs: typed nodes, one graph per mini-batch (docs/design.md, "Batching").

A node is one cell invocation (an LSTM step, a tree node, a word link). Its *type* is the
batching signature: nodes of one type run the same kernel on same-shaped operands, so any set
of them with no path between them can run as one batched call. Nodes are numbered in
topological order (every operand's producer has a smaller id), which every algorithm here
relies on instead of re-sorting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from fusionplan.ir.errors import ConfigError


@dataclass(frozen=True)
class CellNode:
    """One cell invocation: its type, the producer of each operand slot, its external input."""

    type: str
    args: tuple[int, ...] = ()  # producer node id per operand slot; fixed arity per type
    token: int = -1  # index of the external input it reads (a token, a word), -1 if none


@dataclass(frozen=True)
class DataflowGraph:
    """The dataflow graph of one mini-batch: the union of every input's graph."""

    nodes: tuple[CellNode, ...]
    instance: tuple[int, ...]  # which input of the mini-batch each node belongs to
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.instance) != len(self.nodes):
            raise ConfigError("dataflow graph: one instance id per node is needed")
        arity: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if any(not 0 <= a < i for a in node.args):
                raise ConfigError(f"dataflow graph: node {i} reads a node that is not before it")
            if arity.setdefault(node.type, len(node.args)) != len(node.args):
                raise ConfigError(f"dataflow graph: type {node.type!r} has two arities")

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def types(self) -> tuple[str, ...]:
        """Node types in order of first appearance."""
        return tuple(dict.fromkeys(n.type for n in self.nodes))

    @cached_property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for a in dict.fromkeys(node.args):  # a node reading one producer twice waits once
                out[a].append(i)
        return tuple(tuple(s) for s in out)

    @cached_property
    def indegree(self) -> tuple[int, ...]:
        return tuple(len(set(n.args)) for n in self.nodes)

    @cached_property
    def depth(self) -> tuple[int, ...]:
        """Longest path (in nodes) from a source, 0 for sources: TF Fold's batching key."""
        d = [0] * len(self.nodes)
        for i, node in enumerate(self.nodes):
            d[i] = 1 + max((d[a] for a in node.args), default=-1)
        return tuple(d)

    @cached_property
    def height(self) -> tuple[int, ...]:
        """Longest path (in nodes) to a sink, 0 for sinks: how critical a ready node is."""
        h = [0] * len(self.nodes)
        for i in reversed(range(len(self.nodes))):
            h[i] = 1 + max((h[s] for s in self.successors[i]), default=-1)
        return tuple(h)

    def type_counts(self) -> Counter[str]:
        return Counter(n.type for n in self.nodes)


Batch = tuple[int, ...]
"""Node ids run together as one kernel, all of one type, in their memory order."""


def check_schedule(graph: DataflowGraph, batches: Sequence[Batch]) -> None:
    """Raise ``ValueError`` unless ``batches`` runs every node once, after all its inputs.

    A batch is single-typed and runs as one step, so no member may read another member.
    """
    step = [-1] * len(graph)
    for s, batch in enumerate(batches):
        if not batch:
            raise ValueError(f"batch {s} is empty")
        kinds = {graph.nodes[i].type for i in batch}
        if len(kinds) != 1:
            raise ValueError(f"batch {s} mixes types {sorted(kinds)}")
        for i in batch:
            if step[i] != -1:
                raise ValueError(f"node {i} runs twice (batches {step[i]} and {s})")
            step[i] = s
    for i, node in enumerate(graph.nodes):
        if step[i] == -1:
            raise ValueError(f"node {i} never runs")
        for a in node.args:
            if step[a] >= step[i]:
                raise ValueError(f"node {i} (batch {step[i]}) runs before its input {a}")

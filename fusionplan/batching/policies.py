"""Batching policies: which ready nodes run together, behind one protocol and a registry.

* ``depth`` (TensorFlow Fold): batch nodes of one type at one depth, depth by depth.
* ``agenda`` (DyNet): from the ready frontier, run the type whose ready nodes have the lowest
  average depth.
* ``fsm`` (ED-Batch, in ``fsm``): a learned table from an encoding of the frontier to the type
  to run.

Every policy returns the batches in execution order; ``graph.check_schedule`` holds for each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from fusionplan.batching.frontier import Frontier
from fusionplan.batching.graph import Batch, DataflowGraph
from fusionplan.ir.registry import Registry


class BatchingPolicy(Protocol):
    """Dataflow graph in, batches in execution order out."""

    name: str

    def schedule(self, graph: DataflowGraph) -> list[Batch]: ...


POLICIES: Registry[Callable[..., BatchingPolicy]] = Registry("batching policy")
"""Policy name -> ``factory(**options)``."""


class DepthPolicy:
    """TensorFlow Fold's rule: nodes of equal depth and type form one batch."""

    name = "depth"

    def schedule(self, graph: DataflowGraph) -> list[Batch]:
        groups: dict[tuple[int, int], list[int]] = {}
        rank = {t: r for r, t in enumerate(graph.types)}
        for i, node in enumerate(graph.nodes):
            groups.setdefault((graph.depth[i], rank[node.type]), []).append(i)
        return [tuple(groups[k]) for k in sorted(groups)]


class FrontierPolicy:
    """Base of the frontier policies: repeatedly run every ready node of a chosen type."""

    name = "frontier"

    def choose(self, frontier: Frontier) -> str:
        raise NotImplementedError

    def schedule(self, graph: DataflowGraph) -> list[Batch]:
        return self.run(Frontier(graph))

    def run(self, frontier: Frontier) -> list[Batch]:
        """Finish ``frontier`` (consumed) and return the batches it ran."""
        batches = []
        while not frontier.done:
            batches.append(frontier.run(self.choose(frontier)))
        return batches


class AgendaPolicy(FrontierPolicy):
    """DyNet's agenda rule: the ready type with the lowest average node depth goes first.

    Shallow nodes first keeps the frontier level, which is what lets later batches fill up.
    """

    name = "agenda"

    def choose(self, frontier: Frontier) -> str:
        depth = frontier.graph.depth
        return min(
            frontier.ready_types(),
            key=lambda t: sum(depth[i] for i in frontier.ready[t]) / len(frontier.ready[t]),
        )


POLICIES.register("depth", DepthPolicy, help="TensorFlow Fold: one batch per (depth, type).")
POLICIES.register("agenda", AgendaPolicy, help="DyNet: ready type of lowest mean depth first.")

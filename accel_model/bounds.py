"""Model-level facts derived from a cost model: unfusable ops and the traffic lower bound."""

from __future__ import annotations

from accel_model.base import CostModel
from fusionplan.ir.graph import Group, OpGraph


def unfusable_nodes(model: CostModel) -> Group:
    """Nodes whose singleton group does not fit: they run layer by layer, outside the search."""
    mask = 0
    for v in range(len(model.graph)):
        if not model.is_valid(1 << v):
            mask |= 1 << v
    return mask


def compulsory_traffic(graph: OpGraph, bytes_per_element: int = 1) -> int:
    """Bytes every plan must move: graph inputs, graph outputs and all weights, once each."""
    t = graph.tensors
    io = sum(t[i].size for i in set(graph.inputs) | set(graph.outputs))
    return bytes_per_element * (io + sum(n.weights for n in graph.nodes))

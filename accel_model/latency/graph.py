"""Latencies of a model graph's ops (:class:`fusionplan.ir.model.ModelGraph`) under a
latency model, shared by every pass that costs a whole graph: substitution's search cost and
the stream scheduler's simulation (docs/design.md, "Graph substitution", "Stream
scheduling").

An op is costed by its :class:`OpSignature`, so a graph pays once per distinct op shape;
:class:`OpLatencies` caches per signature and per node across graphs, which a search that
costs thousands of rewrites of one graph relies on.
"""

from __future__ import annotations

from accel_model.latency.base import LatencyModel
from accel_model.latency.signature import OpSignature, TensorSig
from fusionplan.ir.model import ModelGraph, ModelNode, split_qualified

MIXED_ALPHA = 0.25
"""AutoGraph's weight of the critical path in its mixed cost ``alpha * critical path +
total work``."""


def node_signature(g: ModelGraph, node: ModelNode) -> OpSignature:
    """What the latency models key on: op, input/output shapes, attributes."""
    domain, op_type = split_qualified(node.op)
    inputs = tuple(_tensor_sig(g, t) if t else None for t in node.inputs)
    outputs = tuple(_tensor_sig(g, t) for t in node.outputs if t)
    return OpSignature(op_type, domain, inputs, outputs, node.attrs)


def _tensor_sig(g: ModelGraph, tensor: str) -> TensorSig:
    weight = g.weights.get(tensor)
    if weight is not None:
        return TensorSig(weight.shape, weight.dtype, True, weight.small_value)
    info = g.tensors[tensor]
    return TensorSig(info.shape, info.dtype)


class OpLatencies:
    """Seconds per node of any model graph under one latency model, cached."""

    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency
        self._op: dict[str, float] = {}  # signature key -> seconds
        self._node: dict[ModelNode, float] = {}

    def __call__(self, g: ModelGraph) -> dict[str, float]:
        """Node name -> seconds (measuring or estimating each new signature once).

        Cached per node too: a node a rewrite left alone is the same value in the child
        graph, and tensor names are stable across graphs (a rule's new names derive from
        its match), so its signature, the costly part, is built once per search.
        """
        missing = [n for n in g.nodes.values() if n not in self._node]
        if missing:
            sigs = {n: node_signature(g, n) for n in missing}
            unknown = list({s.key(): s for s in sigs.values() if s.key() not in self._op}.values())
            if unknown:
                for sig, seconds in zip(unknown, self.latency.latencies(unknown), strict=True):
                    self._op[sig.key()] = seconds
            for node, sig in sigs.items():
                self._node[node] = self._op[sig.key()]
        return {name: self._node[node] for name, node in g.nodes.items()}

"""How channels flow through an op: what BRR's partial-channel buffering and in-place
execution may assume about it (docs/cost-model.md, "BRR").

An op is *channel-mixing* when every output channel reads every input channel of its group
(a dense conv, a linear layer): it can accumulate its output from input channel slices, but
computing a slice of its own output needs all its input channels. A *channel-local* op
(activation, elementwise, pooling, depthwise conv, pad, resize) computes output channel c
from input channel c alone, so it can follow its producer slice by slice. Everything else
(concat, split, softmax, a layer norm over channels, an activation matmul, unknown ops) is a
*barrier*: it keeps all its channels.
"""

from __future__ import annotations

from enum import IntEnum

from accel_model.rows import is_activation_matmul
from fusionplan.ir.graph import OpGraph

MIXING_BARRIER_ACTS = frozenset({"LayerNormalization", "LRN"})
"""Ops the importer calls activations that mix channels (normalise or window across them)."""


class ChannelRole(IntEnum):
    MIXING = 0
    LOCAL = 1
    BARRIER = 2


def is_depthwise(graph: OpGraph, v: int) -> bool:
    """A conv whose every group is one input channel (MobileNet's 3x3 convs)."""
    node = graph.nodes[v]
    if node.kind != "conv" or node.groups <= 1 or not node.inputs:
        return False
    return node.groups == graph.tensors[node.inputs[0]].shape[0]


def channel_role(graph: OpGraph, v: int) -> ChannelRole:
    """The role of op ``v`` in channel slicing (module docstring)."""
    node = graph.nodes[v]
    kind = node.kind
    same_channels = all(graph.tensors[t].shape[0] == graph.out_shape(v)[0] for t in node.inputs)
    if kind == "conv":
        return ChannelRole.LOCAL if is_depthwise(graph, v) else ChannelRole.MIXING
    if kind == "matmul":
        if node.weights > 0 and not is_activation_matmul(node):
            return ChannelRole.MIXING
        return ChannelRole.BARRIER
    if kind in ("pool", "eltwise", "pad", "resize", "global_pool") and same_channels:
        return ChannelRole.LOCAL
    if kind == "act" and same_channels and node.op_type not in MIXING_BARRIER_ACTS:
        return ChannelRole.LOCAL
    return ChannelRole.BARRIER


def in_place_inputs(graph: OpGraph, v: int) -> tuple[int, ...]:
    """Input tensors op ``v`` may overwrite with its output: a unary activation or an
    elementwise op whose output has the input's exact shape (each output element depends
    only on the same element of its inputs, so it can be written where that input was)."""
    node = graph.nodes[v]
    if node.kind not in ("act", "eltwise") or node.whole_input or len(node.outputs) != 1:
        return ()
    if channel_role(graph, v) != ChannelRole.LOCAL:
        return ()
    out = graph.tensors[node.outputs[0]].shape
    return tuple(t for t in node.inputs if graph.tensors[t].shape == out)


def is_activation(graph: OpGraph, v: int) -> bool:
    """A unary channel-local activation (what Optimus's networks leave out)."""
    node = graph.nodes[v]
    return (
        node.kind == "act" and len(node.inputs) == 1 and channel_role(graph, v) == ChannelRole.LOCAL
    )

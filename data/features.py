"""Graph features of one fusion group: the input of the GIN classifier and the explainers.

A *sample* is (group, scheme, buffer size). Per node (docs/design.md, "GNN pipeline"): op-
kind one-hot, log-scaled input and output shapes, kernel span, stride, log weight count, and
the buffer size as a node feature, plus a few structural flags. Edges run producer ->
consumer inside the group, with node indices local to the group (ascending topological
label).

Features are computed with numpy only, so dataset generation does not need torch; the
buffer column is filled in last because one group is labelled at several buffer sizes.
"""

from __future__ import annotations

import math

import numpy as np

from fusionplan.ir.graph import OP_KINDS, Group, OpGraph, bits, row_span

FEATURE_NAMES: tuple[str, ...] = (
    *(f"kind_{k}" for k in OP_KINDS),
    "log_in_c", "log_in_h", "log_in_w",
    "log_out_c", "log_out_h", "log_out_w",
    "kernel_h", "kernel_w", "stride_h", "stride_w",
    "log_weights", "whole_input", "n_inputs",
    "in_group_preds", "in_group_succs", "external_inputs", "external_outputs",
    "log_buffer",
)  # fmt: skip
NUM_FEATURES = len(FEATURE_NAMES)
BUFFER_COLUMN = NUM_FEATURES - 1
FEATURE_VERSION = 1


def _log2p(x: float) -> float:
    return math.log2(1.0 + x)


def node_feature_table(graph: OpGraph) -> np.ndarray:
    """Group-independent features of every node, shape (n, NUM_FEATURES); the structural
    and buffer columns are left zero for :func:`group_features` to fill."""
    table = np.zeros((len(graph), NUM_FEATURES), dtype=np.float32)
    kind_index = {k: i for i, k in enumerate(OP_KINDS)}
    base = len(OP_KINDS)
    for v, node in enumerate(graph.nodes):
        row = table[v]
        row[kind_index[node.kind]] = 1.0
        ins = [graph.tensors[t].shape for t in node.inputs] or [(0, 0, 0)]
        c_in = max(s[0] for s in ins)
        h_in = max(s[1] for s in ins)
        w_in = max(s[2] for s in ins)
        c_out, h_out, w_out = graph.out_shape(v)
        row[base : base + 6] = [_log2p(c_in), _log2p(h_in), _log2p(w_in),
                                _log2p(c_out), _log2p(h_out), _log2p(w_out)]  # fmt: skip
        span_w = (node.kernel[1] - 1) * node.dilation[1] + 1
        row[base + 6 : base + 10] = [row_span(node), span_w, *node.stride]
        row[base + 10] = _log2p(node.weights)
        row[base + 11] = float(node.whole_input)
        row[base + 12] = float(len(node.inputs))
    return table


def group_features(
    graph: OpGraph, table: np.ndarray, group: Group
) -> tuple[np.ndarray, np.ndarray]:
    """(x, edge_index) of ``group``: x is (k, NUM_FEATURES) with the buffer column zero,
    edge_index is (2, e) int64 over local indices."""
    nodes = bits(group)
    local = {v: i for i, v in enumerate(nodes)}
    x = table[nodes].copy()
    pred, succ = graph.pred_mask, graph.succ_mask
    src, dst = [], []
    base = len(OP_KINDS) + 13
    for i, v in enumerate(nodes):
        inner_preds = pred[v] & group
        x[i, base] = inner_preds.bit_count()
        x[i, base + 1] = (succ[v] & group).bit_count()
        node = graph.nodes[v]
        x[i, base + 2] = sum(
            1 for t in node.inputs
            if graph.tensors[t].producer < 0 or not (group >> graph.tensors[t].producer) & 1
        )  # fmt: skip
        x[i, base + 3] = sum(
            1 for t in node.outputs
            if graph.consumer_mask[t] & ~group or t in graph.graph_output_set
        )  # fmt: skip
        for u in bits(inner_preds):
            src.append(local[u])
            dst.append(i)
    edge_index = np.array([src, dst], dtype=np.int64).reshape(2, -1)
    return x, edge_index


def with_buffer(x: np.ndarray, buffer_bytes: int) -> np.ndarray:
    """A copy of ``x`` with the buffer-size column set (log2 of KB)."""
    out = x.copy()
    out[:, BUFFER_COLUMN] = math.log2(buffer_bytes / 1024)
    return out

"""Row geometry of one op, shared by the schemes: how input rows map to output rows.

Rows are the streaming unit of both schemes (axis H of an NCHW tensor). A "windowed" op reads
a band of K_h input rows per output row (conv, pooling, a linear Resize reads 2); a
"whole-input" op (global pooling, Gemm, spatial softmax) must see every input row first.
"""

from __future__ import annotations

import math

from fusionplan.ir.graph import Node, OpGraph, row_span

Range = tuple[int, int]

WINDOWED_KINDS = frozenset({"conv", "pool", "resize"})


def is_windowed(node: Node) -> bool:
    return node.kind in WINDOWED_KINDS and row_span(node) > 1


def lbdf_rows(node: Node) -> int:
    """Line-buffer rows kept per activation input: K_h for windowed ops, else 1."""
    return row_span(node) if is_windowed(node) else 1


def is_activation_matmul(node: Node) -> bool:
    """A MatMul of two activations (attention's Q·K^T, P·V): every output row reads all of
    its second operand, which both schemes' single-layer and LBDF costs account for."""
    return node.op_type == "MatMul" and len(node.inputs) == 2


def lbdf_input_rows(graph: OpGraph, v: int) -> tuple[int, ...]:
    """Line-buffer rows LBDF keeps per activation input of op ``v``.

    ``lbdf_rows`` for each input, except the second operand of a MatMul between two
    activations (attention's Q·K^T, P·V): every output row reads all of its rows, so the
    whole tensor is held (docs/cost-model.md, "Transformers").
    """
    node = graph.nodes[v]
    rows = [lbdf_rows(node)] * len(node.inputs)
    if is_activation_matmul(node):
        rows[1] = max(graph.tensors[node.inputs[1]].shape[1], 1)
    return tuple(rows)


def lbdf_lag(graph: OpGraph, v: int) -> int:
    """Rows of delay op ``v`` adds before its first output row."""
    node = graph.nodes[v]
    if node.whole_input:
        return graph.in_height(v)
    if is_windowed(node):
        return row_span(node) // 2
    return 0


def lbdf_reduces(graph: OpGraph, v: int) -> bool:
    """Whether LBDF folds op ``v``'s input into accumulators one row per pass (global
    pooling, a classifier contracting rows) instead of waiting for every row: its output
    rows are all held from the first pass to the last (docs/cost-model.md, "LBDF")."""
    node = graph.nodes[v]
    return (
        node.whole_input
        and node.kind in ("global_pool", "matmul")
        and not is_activation_matmul(node)
        and graph.tensors[node.inputs[0]].shape[1] > 1
    )


def proportional_rows(r: int, out_h: int, in_h: int) -> Range:
    """Input rows output row ``r`` of a row-aligned operand reads (heights may differ)."""
    if in_h == out_h:
        return (r, r + 1)
    lo = min(r * in_h // out_h, in_h - 1)
    return (lo, max(min(math.ceil((r + 1) * in_h / out_h), in_h), lo + 1))


def row_window(graph: OpGraph, v: int, exact: bool = False) -> tuple[float, float]:
    """(K, S) of op ``v`` for BRR: ``(h - 1) * S + K`` input rows make ``h`` output rows.

    ``exact``: an op reading proportional rows (``S = H_in/H_out``, accel_model/windows.py)
    at a scale that is not a whole number has ``K`` = the most rows one output row reads,
    ``ceil((H_in + H_out - gcd) / H_out)`` (a window's floor and ceil straddle a row
    boundary: a class token's Concat, 4 rows to 5, reads 2), else ``max(1, S)``."""
    node = graph.nodes[v]
    h_in = graph.in_height(v)
    h_out = max(graph.out_shape(v)[1], 1)
    if node.whole_input:
        return float(h_in), h_in / h_out
    if node.op_type == "ConvTranspose":
        s = node.stride[0]
        return float(math.ceil(row_span(node) / s)), 1.0 / s
    if node.kind in ("conv", "pool"):
        return float(row_span(node)), float(node.stride[0])
    if node.kind == "resize":
        return float(row_span(node)), h_in / h_out
    s = h_in / h_out
    if exact and h_in % h_out:
        # output row a reads rows floor(a S) .. ceil((a + 1) S) - 1: with S = p/q in lowest
        # terms, at most ceil((p + q - 1) / q) of them
        return float(-(-(h_in + h_out - math.gcd(h_in, h_out)) // h_out)), s
    return max(1.0, s), s  # an op that merges rows (S > 1) reads S of them per output row


def row_shift(graph: OpGraph, v: int) -> float:
    """Where op ``v``'s window of output row 0 starts, in input rows: minus the top pad of a
    conv or pool, else 0. Readers of one tensor whose windows start at other rows need the
    union of their windows, not the larger one (BRR, docs/cost-model.md)."""
    node = graph.nodes[v]
    if node.kind in ("conv", "pool") and node.op_type != "ConvTranspose" and not node.whole_input:
        return -float(node.pads[0])
    return 0.0


def input_rows(k: float, s: float, h_out_rows: int, h_cap: int) -> int:
    """Input rows needed for ``h_out_rows`` output rows, capped at the input's height."""
    return min(math.ceil((h_out_rows - 1) * s + k - 1e-9), h_cap)


def is_tiling_pool(node: Node) -> bool:
    """A pooling whose windows tile its input (kernel = stride, no padding, no dilation):
    each input element feeds one output, so it can pool a layer's outputs as they are
    written (an epilogue)."""
    return (
        node.kind == "pool"
        and node.kernel == node.stride
        and not any(node.pads)
        and node.dilation == (1, 1)
    )

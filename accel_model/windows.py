"""Exact read windows of one op: which rows, channels and columns of each input a block of
its output reads (docs/cost-model.md, "Schedules and replay").

The closed forms count rows with ``(h - 1) * S + K`` (accel_model/rows.py); a schedule
needs positions. These maps come from the op's own attributes (kernel, stride, padding,
dilation, groups, channel role), so the replay checks a schedule against the op's geometry,
not against the formula it is compared with. Every range is half-open and clipped to the
input; an empty range is ``(0, 0)``.
"""

from __future__ import annotations

import math

from accel_model.channels import ChannelRole, channel_role, is_depthwise
from accel_model.rows import is_activation_matmul
from fusionplan.ir.graph import OpGraph

Range = tuple[int, int]


def _clip(lo: int, hi: int, size: int) -> Range:
    lo, hi = max(lo, 0), min(hi, size)
    return (lo, hi) if lo < hi else (0, 0)


def _axis_window(
    graph: OpGraph, v: int, i: int, out: Range, out_size: int, in_size: int, axis: int
) -> Range:
    """Input indices along ``axis`` (0 rows, 1 columns) that output indices ``out`` read."""
    node = graph.nodes[v]
    a, b = out
    if a >= b:
        return (0, 0)
    if node.whole_input:
        return (0, in_size)
    if in_size == 1 and out_size > 1:
        return (0, 1)  # broadcast along this axis
    if node.kind in ("conv", "pool"):
        k, s, d = node.kernel[axis], node.stride[axis], node.dilation[axis]
        pad = node.pads[axis]  # top (rows) or left (columns)
        span = (k - 1) * d + 1
        if node.op_type == "ConvTranspose":
            # output o gathers input i with o = i*s - pad + j*d, j in [0, k)
            lo = math.ceil((a + pad - (k - 1) * d) / s)
            hi = (b - 1 + pad) // s + 1
            return _clip(lo, hi, in_size)
        return _clip(a * s - pad, (b - 1) * s - pad + span, in_size)
    scale = in_size / max(out_size, 1)
    if node.kind == "resize":
        if node.kernel[axis] > 1:  # the importer's 2-tap window of a linear resize
            # linear: half-pixel source x = (o + 0.5) * scale - 0.5 reads floor(x), floor(x) + 1
            lo = math.floor((a + 0.5) * scale - 0.5)
            hi = math.floor((b - 0.5) * scale - 0.5) + 2
            return _clip(lo, hi, in_size)
        return _clip(math.floor(a * scale), math.floor((b - 1) * scale) + 1, in_size)
    if in_size == out_size:
        return (a, b)
    # any other op that merges (scale > 1) or spreads (scale < 1) rows: proportional
    return _clip(math.floor(a * scale), math.ceil(b * scale), in_size)


def input_rows(graph: OpGraph, v: int, i: int, rows: Range) -> Range:
    """Rows of op ``v``'s ``i``-th input that its output ``rows`` read."""
    t = graph.tensors[graph.nodes[v].inputs[i]]
    return _axis_window(graph, v, i, rows, graph.out_shape(v)[1], t.shape[1], 0)


def input_cols(graph: OpGraph, v: int, i: int, cols: Range | None) -> Range:
    """Columns of op ``v``'s ``i``-th input that its output ``cols`` (None: all) read.

    A conv or pool reads its kernel's window, any op reducing over a whole input every
    column; a channel-mixing op other than a conv contracts the features of a row, so it
    reads the whole row; other ops read the same (or proportional) columns."""
    node = graph.nodes[v]
    t = graph.tensors[node.inputs[i]]
    width, out_width = t.shape[2], graph.out_shape(v)[2]
    if cols is None or (node.kind != "conv" and channel_role(graph, v) == ChannelRole.MIXING):
        return (0, width)
    return _axis_window(graph, v, i, cols, out_width, width, 1)


def input_channels(graph: OpGraph, v: int, i: int, channels: Range) -> Range:
    """Channels of op ``v``'s ``i``-th input that its output ``channels`` read.

    A channel-mixing op reads every input channel of the groups it computes (all of them
    for a dense conv or a linear layer); a channel-local op the same channels (a depthwise
    conv with multiplier m: channel c reads c // m; a broadcast input its one channel); a
    concat along channels the part of its output that input fills; any other barrier all
    its input channels (docs/cost-model.md, "Channel slices")."""
    node = graph.nodes[v]
    c_in = graph.tensors[node.inputs[i]].shape[0]
    c_out = graph.out_shape(v)[0]
    a, b = channels
    if a >= b:
        return (0, 0)
    per_batch = batch_channels(graph, v, i)
    if per_batch is not None:
        return (a * per_batch, b * per_batch)
    role = channel_role(graph, v)
    if role == ChannelRole.MIXING:
        g = max(node.groups, 1)
        if g == 1 or c_out % g or c_in % g:
            return (0, c_in)
        per_out, per_in = c_out // g, c_in // g
        return ((a // per_out) * per_in, ((b - 1) // per_out + 1) * per_in)
    if role == ChannelRole.LOCAL:
        if c_in == 1 and c_out > 1:
            return (0, 1)
        if is_depthwise(graph, v) and c_out != c_in and c_out % c_in == 0:
            m = c_out // c_in
            return (a // m, (b - 1) // m + 1)
        return _clip(a, b, c_in)
    offset = concat_offset(graph, v, i)
    if offset is not None:
        return _clip(a - offset, b - offset, c_in)
    return (0, c_in)


def batch_channels(graph: OpGraph, v: int, i: int) -> int | None:
    """Input ``i``'s channels per output channel of a matmul of two activations whose output
    channels are its batch (attention's heads, docs/cost-model.md, "Transformers"): output
    channel ``c`` reads channels ``[c k, (c + 1) k)``. ``Q`` ``(heads, T, d)`` and ``V``
    ``(heads, T, d)`` give ``k = 1``, ``Kᵀ`` ``(heads · d, T, 1)`` gives ``k = d``. None for any
    other op, or a layout that does not match (then every channel is read)."""
    node = graph.nodes[v]
    if not is_activation_matmul(node):
        return None
    c_out, h_out, w_out = graph.out_shape(v)
    (c_a, h_a, w_a), (c_b, h_b, w_b) = (graph.tensors[t].shape for t in node.inputs)
    if c_out <= 1 or c_a != c_out or h_a != h_out:
        return None
    if c_b == c_out and h_b == w_a and w_b == w_out:
        per_batch = 1  # B (batch, K, N): K rows of N columns per batch
    elif c_b == c_out * w_a and h_b == w_out and w_b == 1:
        per_batch = w_a  # Bᵀ's rows are N: (batch · K, N, 1)
    else:
        return None
    return 1 if i == 0 else per_batch


def streams_channels(graph: OpGraph, v: int) -> bool:
    """Whether op ``v`` computes each output channel from its own input channels, so that a
    schedule may run it one output channel at a time: a channel-local op, or a batched
    activation matmul (:func:`batch_channels`), one head at a time."""
    return channel_role(graph, v) == ChannelRole.LOCAL or batch_channels(graph, v, 0) is not None


def concat_offset(graph: OpGraph, v: int, i: int) -> int | None:
    """Where a channel concat places its ``i``-th input in its output channels (None: not a
    concat along channels, i.e. the input channels do not add up to the output's)."""
    node = graph.nodes[v]
    if node.kind != "concat":
        return None
    shapes = [graph.tensors[t].shape for t in node.inputs]
    c_out, h_out, w_out = graph.out_shape(v)
    if sum(c for c, _, _ in shapes) != c_out or any(s[1:] != (h_out, w_out) for s in shapes):
        return None
    return sum(c for c, _, _ in shapes[:i])


def reduces_over_inputs(graph: OpGraph, v: int) -> bool:
    """Whether op ``v`` may consume its inputs' channels in partial passes (accumulating a
    mixing op's sums, assembling a barrier's input): every op but a channel-local one."""
    return channel_role(graph, v) != ChannelRole.LOCAL

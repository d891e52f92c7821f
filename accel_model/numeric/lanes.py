"""What a compute reads, from its op's own dependence: the input elements of an output
block, and for a partial pass (``Compute.in_channels`` / ``in_rows``) the lanes (input
channel x input row) it consumes and how its partial results fold (docs/cost-model.md,
"Numeric replay").

A partial pass of a sum (a conv, a linear layer, an average, a data move) adds its share and
the op's value at zero input (its bias) once complete; a max or min folds its extreme; any
other op assembles its input (accel_model/numeric/replay.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from accel_model.numeric.buffer import Block
from accel_model.numeric.network import Chw, NumericGraph
from accel_model.replay import ReplayError
from accel_model.schedule import Compute


class Fold(NamedTuple):
    """How partial passes of an op combine: ``combine`` two partial results; ``fill`` the
    lanes a pass does not consume; ``offset``: the op's value at zero input is added once
    (an affine op: the passes' shares leave its constant part out)."""

    combine: Callable[[np.ndarray, np.ndarray], np.ndarray]
    fill: float
    offset: bool


SUM = Fold(np.add, 0.0, True)
FOLDS: dict[str, Fold] = {
    **dict.fromkeys(
        (
            "Conv",
            "Gemm",
            "MatMul",
            "GlobalAveragePool",
            "AveragePool",
            "ReduceMean",
            "ReduceSum",
            "Transpose",
            "Gather",
            "Slice",
            "Split",
            "Concat",
            "Pad",
            "Add",
            "Sub",
            "Sum",
        ),
        SUM,
    ),
    **dict.fromkeys(("GlobalMaxPool", "MaxPool", "ReduceMax"), Fold(np.maximum, -np.inf, False)),
    "ReduceMin": Fold(np.minimum, np.inf, False),
}
"""Ops whose partial passes fold lanes: sums (linear or affine in their inputs) and extremes.
A MatMul of two activations is bilinear: its partial passes are not folded."""


def fold_of(net: NumericGraph, v: int) -> Fold | None:
    node = net.graph.nodes[v]
    if node.op_type == "MatMul" and len(node.inputs) > 1:
        return None
    return FOLDS.get(node.op_type)


def channel_start(net: NumericGraph, v: int, tensor: int) -> int:
    """Where output ``tensor`` of op ``v`` starts in its stacked output channels."""
    start = 0
    for t in net.graph.nodes[v].outputs:
        if t == tensor:
            return start
        start += net.graph.tensors[t].shape[0]
    raise ValueError(f"tensor {tensor} is not an output of op {v}")


def mask_lanes(net: NumericGraph, c: Compute, inputs: dict[int, Chw], fill: float) -> np.ndarray:
    """Set every input element outside the pass's input channels and rows to ``fill`` and
    return the pass as a mask over the lanes (input channel x input row, flat)."""
    graph = net.graph
    node = graph.nodes[c.op]
    shapes = {graph.tensors[t].shape[:2] for t in node.inputs}
    if len(shapes) != 1:
        raise ReplayError(f"a partial pass of '{node.name}' over inputs of unequal lanes")
    (c_in, h_in), masks = shapes.pop(), []
    for lanes, size in ((c.in_channels, c_in), (c.in_rows, h_in)):
        lo, hi = (0, size) if lanes is None else lanes
        if not 0 <= lo < hi <= size:
            raise ReplayError(f"a partial pass over lanes {lo}..{hi} of {size}")
        mask = np.zeros(size, bool)
        mask[lo:hi] = True
        masks.append(mask)
    passed = np.outer(*masks)
    for array in inputs.values():
        array[~passed] = fill
    return passed.reshape(-1)


def needed_lanes(net: NumericGraph, v: int, tensor: int, block: Block) -> np.ndarray:
    """Per output channel and row of ``block`` (of output ``tensor``), the lanes (input
    channel x input row, flat) that element reduces over, over all the op's inputs."""
    deps = [net.dependence(v, i) for i in range(len(net.graph.nodes[v].inputs))]
    channels = np.any([d[0] for d in deps], axis=0)
    rows = np.any([d[1] for d in deps], axis=0)
    start = channel_start(net, v, tensor)
    (c0, c1), (r0, r1), _ = block
    chans, rows = channels[start + c0 : start + c1], rows[r0:r1]
    return (chans[:, None, :, None] & rows[None, :, None, :]).reshape(c1 - c0, r1 - r0, -1)


def input_reads(net: NumericGraph, c: Compute, blocks: list[tuple[int, Block]], i: int):
    """The elements of input ``i`` that compute ``c`` (writing ``blocks`` of its outputs)
    reads: by the op's dependence, within the pass's input channels and rows (a boolean
    array of the input's shape)."""
    chans, rows, cols = net.dependence(c.op, i)
    need_c = np.zeros(chans.shape[1], bool)
    need_r = np.zeros(rows.shape[1], bool)
    need_w = np.zeros(cols.shape[1], bool)
    for t, ((c0, c1), (r0, r1), (w0, w1)) in blocks:
        start = channel_start(net, c.op, t)
        need_c |= chans[start + c0 : start + c1].any(axis=0)
        need_r |= rows[r0:r1].any(axis=0)
        need_w |= cols[w0:w1].any(axis=0)
    for lanes, need in ((c.in_channels, need_c), (c.in_rows, need_r)):
        if lanes is not None:
            need[: lanes[0]] = False
            need[lanes[1] :] = False
    return need_c[:, None, None] & need_r[None, :, None] & need_w[None, None, :]

"""Numeric replay: a group's :class:`~accel_model.schedule.Schedule` executed on real
values, each compute reading only what the schedule put in the buffer.

DRAM holds whole tensors (the graph inputs, then what earlier groups wrote); the buffer
holds, per region, only the elements the schedule's transfers read in and its computes wrote
(:mod:`accel_model.numeric.buffer`). A compute evaluates its op by the op's ONNX definition
on inputs that are NaN wherever the buffer does not hold a final value, so a NaN in the block
it produces proves it needed an element the schedule never loaded, or had overwritten; a
transfer copies exactly its block. Running a plan's groups in order and comparing the graph
outputs with an independent evaluation is the numeric proof that the schedules compute the
graph with the traffic they claim (docs/cost-model.md, "Numeric replay").

Partial passes (``Compute.in_channels`` or ``in_rows``) consume a slice of their inputs'
channels or rows. An op that is a sum over those lanes (a conv, a linear layer, an average,
a data move) adds the pass's share, its value at zero input (a bias) added once complete; a
max or min folds the pass's extreme; any other op with one input of its output's shape (a
layer norm or softmax across channels) assembles its input in its output's slots and runs
once the last slice is in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from accel_model.base import CostModel
from accel_model.numeric.buffer import (
    Block,
    PoolRegion,
    RingRegion,
    block_index,
    block_size,
)
from accel_model.numeric.diagnose import held_rows, missing_inputs, ranges
from accel_model.numeric.lanes import fold_of, input_reads, mask_lanes, needed_lanes
from accel_model.numeric.network import Chw, NumericGraph
from accel_model.replay import ReplayError
from accel_model.schedule import (
    Action,
    Compute,
    Schedule,
    Step,
    TrafficKey,
    Transfer,
    build_schedule,
)
from fusionplan.ir.graph import Group, bits

POOL_ORDERS = ("layer:", "epilogue:")
"""Loop orders whose regions are pools of elements (sized to the most they hold at once)
rather than rings of rows x channels x columns: a single layer's orders."""


@dataclass
class Dram:
    """Whole tensors in DRAM, with which elements have been written so far."""

    values: dict[int, Chw] = field(default_factory=dict)
    written: dict[int, np.ndarray] = field(default_factory=dict)

    @staticmethod
    def with_inputs(inputs: Mapping[int, Chw]) -> Dram:
        dram = Dram()
        for t, value in inputs.items():
            dram.values[t] = np.array(value, np.float64)
            dram.written[t] = np.ones(value.shape, bool)
        return dram

    def complete(self, tensor: int) -> bool:
        return tensor in self.written and bool(self.written[tensor].all())

    def store(self, tensor: int, block: Block, values: np.ndarray, shape) -> None:
        index = block_index(block)
        self.values.setdefault(tensor, np.zeros(shape))[index] = values
        self.written.setdefault(tensor, np.zeros(shape, bool))[index] = True


@dataclass(frozen=True)
class GroupReplay:
    """What a group's replay did: the elements it moved per tensor and per op's weights
    (counted from the blocks it copied), its steps, computes and transfers."""

    schedule: Schedule
    traffic: dict[TrafficKey, int]
    steps: int
    computes: int
    transfers: int


class _Run:
    """One schedule's execution against ``dram`` (see :func:`replay_schedule`)."""

    def __init__(
        self, numeric: NumericGraph, cost_model: CostModel, schedule: Schedule, dram: Dram
    ) -> None:
        self.net, self.cm, self.schedule, self.dram = numeric, cost_model, schedule, dram
        self.graph = numeric.graph
        self.regions: list[RingRegion | PoolRegion] = []
        self.weight_room: dict[int, int] = {}
        pools = schedule.order.startswith(POOL_ORDERS)
        shapes = {i: t.shape for i, t in enumerate(self.graph.tensors)}
        for r in schedule.regions:
            if r.kind == "weights":
                self.weight_room[r.key] = self.weight_room.get(r.key, 0) + r.elements
            elif pools:
                self.regions.append(PoolRegion(r, {t: shapes[t] for t in (r.key, *r.aliases)}))
            else:
                self.regions.append(RingRegion(r))
        self.resident_weights: dict[int, np.ndarray] = {}
        self.streamed_weights: dict[int, np.ndarray] = {}
        self.loaded_weights: dict[int, int] = {}
        self.made: dict[int, np.ndarray] = {}  # outputs computed since the weights streamed
        self.unbuffered: dict[int, Chw] = {}  # this step's outputs of tensors with no region
        self.traffic: dict[TrafficKey, int] = {}
        self.offsets: dict[int, list[Chw]] = {}
        self.where = ""

    # -- helpers ------------------------------------------------------------------------
    def fail(self, message: str) -> ReplayError:
        names = [self.graph.nodes[v].name for v in bits(self.schedule.group)]
        head = f"{self.schedule.order} schedule of group [{', '.join(names)}]"
        return ReplayError(f"{head}, {self.where}: {message}")

    def name(self, tensor: int) -> str:
        return self.graph.tensors[tensor].name

    def holders(self, tensor: int) -> list[RingRegion | PoolRegion]:
        return [r for r in self.regions if tensor in r.holds]

    def block(self, tensor: int, rows, channels, cols) -> Block:
        c, h, w = self.graph.tensors[tensor].shape
        block = (tuple(channels), tuple(rows), (0, w) if cols is None else tuple(cols))
        for (lo, hi), size, axis in zip(
            block, (c, h, w), ("channels", "rows", "columns"), strict=True
        ):
            if not 0 <= lo <= hi <= size:
                raise self.fail(f"{axis} {lo}..{hi} of '{self.name(tensor)}' are outside 0..{size}")
        return block  # type: ignore[return-value]

    def resident(self, tensor: int) -> Chw:
        """``tensor``'s whole array: its final values in the buffer, NaN elsewhere."""
        out = np.full(self.graph.tensors[tensor].shape, np.nan)
        for region in self.holders(tensor):
            region.fill(tensor, out)
        return out

    def guarded(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ReplayError as exc:
            raise self.fail(str(exc)) from None

    # -- the run ------------------------------------------------------------------------
    def run(self) -> GroupReplay:
        s = self.schedule
        self.where = "at its start"
        if s.peak_bytes > s.buffer_bytes:
            raise self.fail(f"its regions take {s.peak_bytes} B of a {s.buffer_bytes} B buffer")
        computes = transfers = 0
        clock = 0
        for index, step in enumerate(self.schedule.steps):
            self.streamed_weights, self.unbuffered = {}, {}
            for action in step.actions:
                self.where = _where(self.graph, index, step, action)
                for region in self.regions:
                    region.clock = clock
                clock += 1
                if isinstance(action, Compute):
                    self.compute(action)
                    computes += 1
                else:
                    self.transfer(action)
                    transfers += 1
        self.where = "at its end"
        self.check_outputs()
        self.check_pools(clock)
        if dict(self.schedule.dram) != self.traffic:
            raise self.fail(f"claims traffic {dict(self.schedule.dram)} but moves {self.traffic}")
        return GroupReplay(
            self.schedule, self.traffic, len(self.schedule.steps), computes, transfers
        )

    def transfer(self, t: Transfer) -> None:
        self.traffic[t.key] = self.traffic.get(t.key, 0) + t.elements
        if t.is_weights:
            self.load_weights(t)
            return
        block = self.block(t.tensor, t.rows, t.channels, t.cols)
        if t.elements != block_size(block):
            raise self.fail(f"counts {t.elements} elements for a block of {block_size(block)}")
        index, name = block_index(block), self.name(t.tensor)
        if t.direction == "read":
            written = self.dram.written.get(t.tensor)
            if written is None or not written[index].all():
                raise self.fail(f"reads '{name}' from DRAM before anything wrote it there")
            holders = self.holders(t.tensor)
            if not holders:
                raise self.fail(f"reads '{name}' into the buffer, which has no region for it")
            for region in holders:
                self.guarded(region.store, t.tensor, block, self.dram.values[t.tensor][index])
            return
        self.touch(t.tensor, block)
        value = self.resident(t.tensor)
        if t.tensor in self.unbuffered:
            value = np.where(np.isnan(value), self.unbuffered[t.tensor], value)
        value = value[index]
        if np.isnan(value).any():
            c, r, w = (
                int(a[0]) + lo
                for a, (lo, _) in zip(np.nonzero(np.isnan(value)), block, strict=True)
            )
            raise self.fail(
                f"writes '{name}' channel {c} row {r} column {w}, which the buffer does not hold "
                "as a final value"
            )
        self.dram.store(t.tensor, block, value, self.graph.tensors[t.tensor].shape)

    def load_weights(self, t: Transfer) -> None:
        v, (c0, c1) = t.op, t.channels
        node, c_out = self.graph.nodes[v], self.graph.out_shape(v)[0]
        if not 0 <= c0 < c1 <= c_out:
            raise self.fail(f"reads weights of channels {c0}..{c1} of a {c_out}-channel op")
        full = self.cm.node_weights[v]
        whole = (c0, c1) == (0, c_out)
        expected = full if whole or not full else self.net.weight_elements(v, (c0, c1))
        if t.elements != expected:
            raise self.fail(
                f"counts {t.elements} weight elements for channels {c0}..{c1} of "
                f"'{node.name}', which needs {expected}"
            )
        if self.schedule.holds_weights(v):
            if v not in self.weight_room:
                raise self.fail(f"holds the weights of '{node.name}' with no region for them")
            self.loaded_weights[v] = self.loaded_weights.get(v, 0) + t.elements
            if self.loaded_weights[v] > self.weight_room[v]:
                raise self.fail(
                    f"loads {self.loaded_weights[v]} weight elements of '{node.name}' into a "
                    f"region of {self.weight_room[v]}"
                )
            have = self.resident_weights.setdefault(v, np.zeros(c_out, bool))
        else:
            have = self.streamed_weights.setdefault(v, np.zeros(c_out, bool))
            self.made.pop(v, None)
        have[c0:c1] = True

    def has_weights(self, c: Compute) -> bool:
        """Whether compute ``c`` has the weights of its output channels: held in their
        region, or read in this step; streamed weights pass the PEs once, so they serve one
        computation of each output (a recompute reads them again)."""
        v, (c0, c1) = c.op, c.channels
        if not self.cm.node_weights[v]:
            return True
        held = self.resident_weights.get(v)
        if held is not None and held[c0:c1].all():
            return True
        streamed = self.streamed_weights.get(v)
        if streamed is None or not streamed[c0:c1].all():
            return False
        if c.in_channels is None and c.in_rows is None:
            shape = self.graph.out_shape(v)
            made = self.made.setdefault(v, np.zeros(shape, bool))
            index = block_index(((c0, c1), c.rows, c.cols or (0, shape[2])))
            if made[index].any():
                raise self.fail(
                    f"computes '{self.graph.nodes[v].name}' rows {c.rows[0]}..{c.rows[1]} again "
                    "without reading its streamed weights again"
                )
            made[index] = True
        return True

    # -- computes -----------------------------------------------------------------------
    def compute(self, c: Compute) -> None:
        v, node = c.op, self.graph.nodes[c.op]
        if not self.schedule.group >> v & 1:
            raise self.fail(f"computes '{node.name}', which is not in the group")
        if not self.has_weights(c):
            raise self.fail(f"computes '{node.name}' without the weights of its channels")
        inputs = {t: self.resident(t) for t in node.inputs}
        self.touch_inputs(c)
        if c.in_channels is None and c.in_rows is None:
            outs = self.net.evaluate(v, inputs, c.rows)
            for t, block in self.out_blocks(c):
                got = outs[node.outputs.index(t)][block_index(block)]
                if np.isnan(got).any():
                    raise self.fail(self.diagnose(v, inputs, t, block))
                self.put(t, block, got)
            return
        fold = fold_of(self.net, v)
        if fold is None:
            self.assemble(c, inputs)
            return
        passed = self.guarded(mask_lanes, self.net, c, inputs, fold.fill)
        outs = self.net.evaluate(v, inputs, c.rows)
        if fold.offset:
            outs = [o - z for o, z in zip(outs, self.offset(v), strict=True)]
        for t, block in self.out_blocks(c):
            k = node.outputs.index(t)
            got = outs[k][block_index(block)]
            if np.isnan(got).any():
                raise self.fail(self.diagnose(v, inputs, t, block))
            needed = needed_lanes(self.net, v, t, block)
            holders = self.holders(t)
            if not holders:
                raise self.fail(f"accumulates '{self.name(t)}', which has no region")
            for region in holders:
                total, done = self.guarded(
                    region.accumulate, t, block, got, passed, needed, fold.combine
                )
                if fold.offset:
                    total = total + self.offset(v)[k][block_index(block)]
                region.finish(t, block, done, total)

    def touch(self, tensor: int, block: Block) -> None:
        """Record a read of ``block`` of ``tensor`` in the pool regions holding it."""
        mask = np.zeros(self.graph.tensors[tensor].shape, bool)
        mask[block_index(block)] = True
        for region in self.holders(tensor):
            if isinstance(region, PoolRegion):
                region.touch(tensor, mask)

    def touch_inputs(self, c: Compute) -> None:
        """Record, in the pool regions, the input elements compute ``c`` reads."""
        blocks = None
        for i, t in enumerate(self.graph.nodes[c.op].inputs):
            pools = [r for r in self.holders(t) if isinstance(r, PoolRegion)]
            if pools:
                blocks = self.out_blocks(c) if blocks is None else blocks
                reads = input_reads(self.net, c, blocks, i)
                for region in pools:
                    region.touch(t, reads)

    def check_pools(self, actions: int) -> None:
        """Every pool region holds at most its elements live at once."""
        flat = [(si, a) for si, step in enumerate(self.schedule.steps) for a in step.actions]
        for region in self.regions:
            if isinstance(region, PoolRegion):
                live, at = region.peak(actions)
                if live > region.region.elements:
                    si, action = flat[min(at, len(flat) - 1)]
                    self.where = _where(self.graph, si, self.schedule.steps[si], action)
                    raise self.fail(
                        f"the region of '{self.name(region.region.key)}' holds {live} live "
                        f"elements, over its {region.region.elements}"
                    )

    def out_blocks(self, c: Compute) -> list[tuple[int, Block]]:
        """The output tensors a compute defines and its block of each (a multi-output op's
        channels run over its outputs in order)."""
        out, start = [], 0
        for t in self.graph.nodes[c.op].outputs:
            size = self.graph.tensors[t].shape[0]
            lo, hi = max(c.channels[0] - start, 0), min(c.channels[1] - start, size)
            start += size
            if lo < hi:
                out.append((t, self.block(t, c.rows, (lo, hi), c.cols)))
        return out

    def put(self, tensor: int, block: Block, values: np.ndarray) -> None:
        """Store a computed block in its regions; a tensor with none (a sink written to
        DRAM as it is produced) keeps it until the end of the step, for its write only."""
        holders = self.holders(tensor)
        if not holders:
            shape = self.graph.tensors[tensor].shape
            self.unbuffered.setdefault(tensor, np.full(shape, np.nan))[block_index(block)] = values
            return
        for region in holders:
            self.guarded(region.store, tensor, block, values)

    def offset(self, v: int) -> list[Chw]:
        """Op ``v``'s outputs at zero input (its bias): what partial sums leave out."""
        if v not in self.offsets:
            zeros = {t: np.zeros(self.graph.tensors[t].shape) for t in self.graph.nodes[v].inputs}
            self.offsets[v] = self.net.evaluate(v, zeros)
        return self.offsets[v]

    def assemble(self, c: Compute, inputs: dict[int, Chw]) -> None:
        """A partial pass of an op that is no sum over its lanes: stage the input slice in
        the output's slots (one input of the output's shape, read where it is written) and
        run the op on the rows once every channel of them is in."""
        v, node = c.op, self.graph.nodes[c.op]
        tensors = self.graph.tensors
        one_to_one = len(node.inputs) == len(node.outputs) == 1
        if not one_to_one or tensors[node.inputs[0]].shape != tensors[node.outputs[0]].shape:
            raise self.fail(
                f"a partial pass of '{node.name}' ({node.op_type}), which neither sums over its "
                "input lanes nor has one input of its output's shape to assemble"
            )
        if c.in_channels is None:
            raise self.fail(f"a pass over input rows of '{node.name}', which is no reduction")
        (t_in,), (t_out,) = node.inputs, node.outputs
        shape = tensors[t_out].shape
        full = self.block(t_out, c.rows, (0, shape[0]), c.cols)
        part = (tuple(c.in_channels), full[1], full[2])
        values = inputs[t_in][block_index(part)]
        if np.isnan(values).any():
            raise self.fail(self.diagnose_missing(t_in, part, inputs[t_in], node.name))
        holders = self.holders(t_out)
        if not holders:
            raise self.fail(f"assembles the input of '{node.name}' with no region to hold it")
        for region in holders:
            self.guarded(region.store, t_out, part, values, partial=True)
            if not region.resident(t_out, full, partial=True).all():
                continue
            x = np.full(shape, np.nan)
            x[block_index(full)] = region.read(t_out, full)
            got = self.net.evaluate(v, {t_in: x})[0][block_index(full)]
            if np.isnan(got).any():
                raise self.fail(f"'{node.name}' needs more of its input than the rows it assembled")
            region.store(t_out, full, got)

    # -- diagnosis ----------------------------------------------------------------------
    def diagnose(self, v: int, inputs: dict[int, Chw], out: int, block: Block) -> str:
        (c0, c1), (r0, r1), _ = block
        head = (
            f"'{self.graph.nodes[v].name}' computing '{self.name(out)}' channels {c0}..{c1} "
            f"rows {r0}..{r1} needs"
        )
        return f"{head} {missing_inputs(self.net, v, inputs, out, block)}"

    def diagnose_missing(self, tensor: int, block: Block, array: Chw, op: str) -> str:
        index = block_index(block)
        rows = np.nonzero(np.isnan(array[index]).any(axis=(0, 2)))[0] + block[1][0]
        return (
            f"'{op}' needs '{self.name(tensor)}' rows {ranges(rows)}, which the buffer does not "
            f"hold (rows held: {held_rows(array)})"
        )

    def check_outputs(self) -> None:
        g, group = self.graph, self.schedule.group
        for v in bits(group):
            for t in g.nodes[v].outputs:
                external = t in g.graph_output_set or g.consumer_mask[t] & ~group
                if external and not self.dram.complete(t):
                    written = self.dram.written.get(t)
                    rows = (
                        "none"
                        if written is None
                        else ranges(np.nonzero(written.all(axis=(0, 2)))[0])
                    )
                    raise self.fail(f"never writes all of '{self.name(t)}' (rows written: {rows})")


def _where(graph, index: int, step: Step, action: Action) -> str:
    if isinstance(action, Compute):
        what = (
            f"compute '{graph.nodes[action.op].name}' rows {action.rows[0]}..{action.rows[1]} "
            f"channels {action.channels[0]}..{action.channels[1]}"
        )
        if action.in_channels is not None:
            what += f" over input channels {action.in_channels[0]}..{action.in_channels[1]}"
        if action.in_rows is not None:
            what += f" over input rows {action.in_rows[0]}..{action.in_rows[1]}"
    elif action.is_weights:
        what = f"{action.direction} of '{graph.nodes[action.op].name}' weights"
    else:
        what = (
            f"{action.direction} of '{graph.tensors[action.tensor].name}' rows "
            f"{action.rows[0]}..{action.rows[1]} channels "
            f"{action.channels[0]}..{action.channels[1]}"
        )
    return f"step {index} (tile {step.tile}), {what}"


def replay_schedule(
    numeric: NumericGraph, cost_model: CostModel, schedule: Schedule, dram: Dram
) -> GroupReplay:
    """Execute ``schedule`` against ``dram`` (updated with what it writes); raises
    :class:`ReplayError` at the first action that cannot run as written."""
    if schedule.order == "free":
        return _run_free(numeric, schedule, dram)
    return _Run(numeric, cost_model, schedule, dram).run()


def _run_free(numeric: NumericGraph, schedule: Schedule, dram: Dram) -> GroupReplay:
    """A group its cost model prices at nothing (an op its conventions call free alone)
    has no steps: its outputs are computed straight from DRAM and move no counted bytes."""
    for v in bits(schedule.group):
        node = numeric.graph.nodes[v]
        if not all(dram.complete(t) for t in node.inputs):
            raise ReplayError(f"free op '{node.name}' runs before its inputs are in DRAM")
        for t, value in zip(node.outputs, numeric.evaluate(v, dram.values), strict=True):
            dram.values[t] = value
            dram.written[t] = np.ones(value.shape, bool)
    return GroupReplay(schedule, {}, 0, 0, 0)


@dataclass(frozen=True)
class PlanReplay:
    """A plan's groups replayed in order: the graph outputs (ONNX shapes, by name) and each
    group's replay."""

    outputs: dict[str, np.ndarray]
    groups: tuple[GroupReplay, ...]


def replay_plan(
    numeric: NumericGraph,
    cost_model: CostModel,
    groups: Iterable[Group],
    feeds: Mapping[str, np.ndarray],
) -> PlanReplay:
    """Replay the schedule :func:`build_schedule` gives each of ``groups`` (in execution
    order) from the graph inputs ``feeds`` and return the graph outputs."""
    dram = Dram.with_inputs(numeric.feeds_chw(feeds))
    replays = tuple(
        replay_schedule(numeric, cost_model, build_schedule(cost_model, group), dram)
        for group in groups
    )
    g = numeric.graph
    outputs = {}
    for t in g.outputs:
        if not dram.complete(t):
            raise ReplayError(f"no group wrote graph output '{g.tensors[t].name}'")
        outputs[g.tensors[t].name] = numeric.to_onnx(t, dram.values[t])
    return PlanReplay(outputs, replays)

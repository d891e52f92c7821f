"""Latency and energy of a group, read off the schedule its cost model priced
(docs/cost-model.md, "Energy and latency").

Nothing here re-derives a group's traffic: :func:`schedule_metrics` walks the steps of an
:class:`~accel_model.schedule.Schedule` (the one the replay checks against the buffer) and
counts, per step, the MACs and PE-array cycles of its computes (the array's utilisation for
that compute's shape under the dataflow), the DRAM bytes of its transfers, and the buffer
bytes both touch. A step takes ``max(compute, transfer, buffer)`` cycles when transfers are
double-buffered, else ``max(compute, buffer) + transfer``; a group's latency is the sum over
its steps and its energy the accesses times their energies plus leakage over that time.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from accel_model.channels import ChannelRole, channel_role
from accel_model.hardware import Hardware
from accel_model.schedule import Compute, Range, Schedule, Transfer, build_schedule
from accel_model.windows import input_channels, input_rows
from fusionplan.ir.graph import Group, OpGraph, bits

if TYPE_CHECKING:
    from accel_model.base import CostModel

FJ_PER_PJ = 1000
"""Energies are kept as whole femtojoules, so that sums and comparisons are exact."""


@dataclass(frozen=True)
class GroupMetrics:
    """What one group's schedule does on the hardware. Bytes and cycles are whole numbers;
    energies whole femtojoules (``energy_fj`` is the sum of the four parts)."""

    macs: int
    dram_bytes: int
    buffer_bytes: int  # bytes read from and written to the on-chip buffer
    compute_cycles: int  # the PE array busy, over all steps
    transfer_cycles: int  # the DRAM interface busy, over all steps
    latency_cycles: int
    dram_fj: int
    buffer_fj: int
    mac_fj: int
    leakage_fj: int

    @property
    def energy_fj(self) -> int:
        return self.dram_fj + self.buffer_fj + self.mac_fj + self.leakage_fj

    def __add__(self, other: GroupMetrics) -> GroupMetrics:
        """Two groups run one after the other."""
        return GroupMetrics(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


ZERO = GroupMetrics(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


class _OpShape:
    """Per op: output (C, H, W), MACs, the input channels one output channel reduces over,
    and the share of its outputs' MACs a partial compute does (memoised: a schedule repeats
    the same partial passes step after step)."""

    def __init__(self, graph: OpGraph, v: int) -> None:
        node = graph.nodes[v]
        self.graph, self.v = graph, v
        self.out = graph.out_shape(v)
        size = self.out[0] * self.out[1] * self.out[2]
        self.macs, self.size = node.macs, max(size, 1)
        lo, hi = input_channels(graph, v, 0, (0, 1)) if node.inputs else (0, 1)
        self.reduced = max(hi - lo, 1)
        # (output, input) channels per group of a channel-mixing op (input_channels' rule),
        # None for any other op
        c_in = graph.tensors[node.inputs[0]].shape[0] if node.inputs else 0
        g, c_out = max(node.groups, 1), self.out[0]
        mixing = node.inputs and channel_role(graph, v) == ChannelRole.MIXING
        if mixing and (g == 1 or c_out % g or c_in % g):
            g = 1
        self.groups = (c_out // g, c_in // g) if mixing and c_out and c_in else None
        # every output channel reads the same inputs, so one buffer read of an input feeds
        # all the output channels the array computes at once; a depthwise or grouped conv's
        # output channels read inputs of their own (ZigZag's count of a depthwise layer
        # showed the difference: docs/results.md, "Energy and latency")
        self.shares_inputs = bool(mixing) and g == 1
        self.weighted = node.weights > 0
        self._shares: dict[tuple[str, Range, Range], Fraction] = {}

    def share(self, axis: str, outputs: Range, part: Range) -> Fraction:
        """Sum over the output channels (``axis`` "channels") or rows ("rows") ``outputs``
        of the share of what each reads (its group's input channels; its input window,
        clipped to the input) that a pass over input channels or rows ``part`` covers."""
        key = (axis, outputs, part)
        hit = self._shares.get(key)
        if hit is None:
            if axis == "channels" and self.groups:
                hit = self._grouped_share(outputs, part)
            else:
                window = input_channels if axis == "channels" else input_rows
                hit = Fraction(0)
                for o in range(*outputs):
                    lo, hi = window(self.graph, self.v, 0, (o, o + 1))
                    if hi > lo:
                        hit += Fraction(_overlap((lo, hi), part), hi - lo)
            self._shares[key] = hit
        return hit

    def _grouped_share(self, outputs: Range, part: Range) -> Fraction:
        """:meth:`share` over channels for a channel-mixing op, group by group (each output
        channel of group q reads input channels q * per_in .. (q + 1) * per_in), instead
        of channel by channel: the same sum."""
        per_out, per_in = self.groups
        a, b = outputs
        total = Fraction(0)
        for q in range(a // per_out, (b - 1) // per_out + 1):
            count = min(b, (q + 1) * per_out) - max(a, q * per_out)
            covered = _overlap((q * per_in, (q + 1) * per_in), part)
            total += Fraction(count * covered, per_in)
        return total


def _overlap(a: Range, b: Range) -> int:
    return max(min(a[1], b[1]) - max(a[0], b[0]), 0)


def _compute_counts(a: Compute, op: _OpShape, hw: Hardware) -> tuple[int, int, int]:
    """(MACs, PE-array cycles, buffer elements touched) of one compute action. A partial
    pass does its share of its outputs' MACs (:meth:`_OpShape.share`): the passes
    that complete an output add up to its MACs."""
    rows = a.rows[1] - a.rows[0]
    chans = a.channels[1] - a.channels[0]
    cols = op.out[2] if a.cols is None else a.cols[1] - a.cols[0]
    n_out = rows * chans * cols
    partial = a.in_channels is not None or a.in_rows is not None
    reduced = op.reduced
    if not partial:
        macs = -(-n_out * op.macs // op.size)
    else:
        share = Fraction(op.macs * cols, op.size)
        if a.in_channels is not None:  # a pass over a slice of the input channels
            share *= op.share("channels", a.channels, a.in_channels)
            reduced = max(min(a.in_channels[1] - a.in_channels[0], reduced), 1)
        else:
            share *= chans
        share *= op.share("rows", a.rows, a.in_rows) if a.in_rows is not None else rows
        macs = math.ceil(share)
    if not macs:
        return 0, 0, n_out
    r, c = hw.pe_rows, hw.pe_cols
    if hw.dataflow == "cout-ow":  # rows: output channels, columns: output columns
        passes = -(-chans // r) * -(-cols // c)
        cycles = -(-macs * passes // (chans * cols))
        # one read feeds a column's channels, where they read the same input
        inputs = -(-macs * -(-chans // r) // chans) if op.shares_inputs else macs
        weights = -(-macs * -(-cols // c) // cols) if op.weighted else 0
        outputs = n_out * (2 if partial else 1)  # a partial sum is read back and written
    else:  # cin-cout: rows reduce over input channels, columns: output channels
        folds = -(-reduced // r)
        passes = folds * -(-chans // c)
        cycles = -(-macs * passes // (reduced * chans))
        # one read feeds a row's output channels, where they read the same input
        inputs = -(-macs * -(-chans // c) // chans) if op.shares_inputs else macs
        weights = -(-macs // (rows * cols)) if op.weighted else 0  # loaded once, then kept
        outputs = n_out * (2 * folds if partial or folds > 1 else 1)
    return macs, cycles, inputs + weights + outputs


def _operand_reads(macs: int, op: _OpShape, hw: Hardware) -> int:
    """Buffer elements ``macs`` MACs of ``op`` read at least: its inputs and weights at the
    array's full utilisation (the reuse :func:`_compute_counts` charges, at best)."""
    if hw.dataflow == "cout-ow":
        inputs = macs // hw.pe_rows if op.shares_inputs else macs
        return inputs + (macs // hw.pe_cols if op.weighted else 0)
    weights = macs // (op.out[1] * op.out[2]) if op.weighted else 0
    return (macs // hw.pe_cols if op.shares_inputs else macs) + weights


def buffer_floor_elements(graph: OpGraph, v: int, hw: Hardware) -> int:
    """Buffer elements every schedule touches computing op ``v`` (the bounds' share of it):
    each output written once, and the operand reads :func:`_compute_counts` charges at full
    utilisation of the array (a compute of fewer channels or columns only reads more)."""
    op = _OpShape(graph, v)
    out = op.size
    if not op.macs:
        return out
    if hw.dataflow == "cout-ow":
        return _operand_reads(op.macs, op, hw) + out
    folds = -(-op.reduced // hw.pe_rows)  # partial sums leave the array once per fold
    return _operand_reads(op.macs, op, hw) + out * (2 * folds if folds > 1 else 1)


def schedule_metrics(
    schedule: Schedule, graph: OpGraph, hw: Hardware, shapes: dict[int, _OpShape] | None = None
) -> GroupMetrics:
    """Latency and energy of ``schedule`` on ``hw`` (module docstring). A schedule with no
    steps (a group that moves nothing, e.g. an activation Optimus does not count) still
    computes its ops, at the array's peak."""
    b = schedule.bytes_per_element
    shapes = {} if shapes is None else shapes
    macs = buf_elems = dram_bytes = compute = transfer = latency = 0
    bw_buf = hw.buffer_bytes_per_cycle
    done: dict[int, int] = {}  # MACs counted per op
    for step in schedule.steps:
        s_compute = s_buf = s_dram = 0
        for a in step.actions:
            if isinstance(a, Transfer):
                s_dram += a.elements * b
                s_buf += a.elements  # every DRAM byte passes through the buffer once
                continue
            op = shapes.get(a.op)
            if op is None:
                op = shapes[a.op] = _OpShape(graph, a.op)
            m, cycles, touched = _compute_counts(a, op, hw)
            macs += m
            done[a.op] = done.get(a.op, 0) + m
            s_compute += cycles
            s_buf += touched
        s_transfer = hw.dram_cycles(s_dram)
        s_buffer = -(-s_buf * b // bw_buf)
        if hw.double_buffering:
            latency += max(s_compute, s_transfer, s_buffer)
        else:
            latency += max(s_compute, s_buffer) + s_transfer
        compute += s_compute
        transfer += s_transfer
        dram_bytes += s_dram
        buf_elems += s_buf
    # An op whose passes add up to fewer MACs than it has (a pass this model cannot split
    # exactly; a group with no steps, which Optimus does not count) runs the rest at the
    # array's peak, reading its operands at full reuse: no figure falls below its floor.
    rest = rest_reads = 0
    for v in bits(schedule.group):
        short = graph.nodes[v].macs - done.get(v, 0)
        if short > 0:
            op = shapes.get(v) or shapes.setdefault(v, _OpShape(graph, v))
            rest += short
            rest_reads += _operand_reads(short, op, hw) + (0 if v in done else op.size)
    if rest:
        cycles = -(-rest // hw.macs_per_cycle)
        macs += rest
        compute += cycles
        buf_elems += rest_reads
        latency += max(cycles, -(-rest_reads * b // bw_buf))
    buf_bytes = buf_elems * b
    unit = UnitEnergies.of(hw, schedule.buffer_bytes)
    return GroupMetrics(
        macs=macs,
        dram_bytes=dram_bytes,
        buffer_bytes=buf_bytes,
        compute_cycles=compute,
        transfer_cycles=transfer,
        latency_cycles=latency,
        dram_fj=dram_bytes * unit.dram,
        buffer_fj=buf_bytes * unit.buffer,
        mac_fj=macs * unit.mac,
        leakage_fj=latency * unit.leakage,
    )


@dataclass(frozen=True)
class UnitEnergies:
    """Whole femtojoules per DRAM byte, buffer byte, MAC and cycle of leakage: every energy
    is a whole number of them, so sums, bounds and comparisons are exact integers."""

    dram: int
    buffer: int
    mac: int
    leakage: int

    @classmethod
    def of(cls, hw: Hardware, buffer_bytes: int) -> UnitEnergies:
        return cls(
            round(hw.dram_pj_per_byte * FJ_PER_PJ),
            round(hw.buffer_energy(buffer_bytes) * FJ_PER_PJ),
            round(hw.mac_pj * FJ_PER_PJ),
            round(hw.leakage_pj_per_cycle * FJ_PER_PJ),
        )


class MetricsModel:
    """Memoised :class:`GroupMetrics` of groups under one cost model and hardware: each
    group's schedule is built once (:func:`~accel_model.schedule.build_schedule`)."""

    def __init__(self, cost_model: CostModel, hardware: Hardware) -> None:
        self.cm, self.hw = cost_model, hardware
        self._memo: dict[Group, GroupMetrics] = {}
        self._shapes: dict[int, _OpShape] = {}
        self.built = 0  # schedules built (each is work: search/effort.py counts it)

    def group(self, group: Group) -> GroupMetrics:
        hit = self._memo.get(group)
        if hit is None:
            schedule = build_schedule(self.cm, group)
            self.built += 1
            hit = self._memo[group] = schedule_metrics(
                schedule, self.cm.graph, self.hw, self._shapes
            )
        return hit

    def plan(self, groups: list[Group]) -> GroupMetrics:
        """A plan's totals: its groups run one after another."""
        total = ZERO
        for g in groups:
            total = total + self.group(g)
        return total

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

from dataclasses import dataclass
from typing import TYPE_CHECKING

from accel_model.hardware import Hardware
from accel_model.schedule import Compute, Schedule, ScheduleError, Transfer, build_schedule
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
        return GroupMetrics(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))


ZERO = GroupMetrics(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def _fields(m: GroupMetrics) -> tuple[int, ...]:
    return (
        m.macs,
        m.dram_bytes,
        m.buffer_bytes,
        m.compute_cycles,
        m.transfer_cycles,
        m.latency_cycles,
        m.dram_fj,
        m.buffer_fj,
        m.mac_fj,
        m.leakage_fj,
    )


class _OpShape:
    """Per op: output (C, H, W), MACs per output element, and the channels and rows of the
    input it reduces over (a partial compute covers a share of them)."""

    def __init__(self, graph: OpGraph, v: int) -> None:
        node = graph.nodes[v]
        self.out = graph.out_shape(v)
        size = self.out[0] * self.out[1] * self.out[2]
        self.macs, self.size = node.macs, max(size, 1)
        first = graph.tensors[node.inputs[0]].shape if node.inputs else self.out
        self.in_channels, self.in_rows = max(first[0], 1), max(first[1], 1)
        groups = max(node.groups, 1)
        self.reduced = max(first[0] // groups, 1)  # input channels each output reads
        self.weighted = node.weights > 0


def _compute_counts(a: Compute, op: _OpShape, hw: Hardware) -> tuple[int, int, int]:
    """(MACs, PE-array cycles, buffer elements touched) of one compute action."""
    rows = a.rows[1] - a.rows[0]
    chans = a.channels[1] - a.channels[0]
    cols = op.out[2] if a.cols is None else a.cols[1] - a.cols[0]
    n_out = rows * chans * cols
    num, den = n_out * op.macs, op.size
    reduced = op.reduced
    if a.in_channels is not None:  # a partial pass over a slice of the input channels
        part = a.in_channels[1] - a.in_channels[0]
        num, den = num * part, den * op.in_channels
        reduced = max(reduced * part // op.in_channels, 1)
    if a.in_rows is not None:  # a partial pass over some input rows
        num, den = num * (a.in_rows[1] - a.in_rows[0]), den * op.in_rows
    macs = -(-num // den)
    if not macs:
        return 0, 0, n_out
    partial = a.in_channels is not None or a.in_rows is not None
    r, c = hw.pe_rows, hw.pe_cols
    if hw.dataflow == "cout-ow":  # rows: output channels, columns: output columns
        passes = -(-chans // r) * -(-cols // c)
        cycles = -(-macs * passes // (chans * cols))
        inputs = -(-macs * -(-chans // r) // chans)  # one read feeds a column's channels
        weights = -(-macs * -(-cols // c) // cols) if op.weighted else 0
        outputs = n_out * (2 if partial else 1)  # a partial sum is read back and written
    else:  # cin-cout: rows reduce over input channels, columns: output channels
        folds = -(-reduced // r)
        passes = folds * -(-chans // c)
        cycles = -(-macs * passes // (reduced * chans))
        inputs = -(-macs * -(-chans // c) // chans)  # one read feeds a row's channels
        weights = -(-macs // (rows * cols)) if op.weighted else 0  # loaded once, then kept
        outputs = n_out * (2 * folds if partial or folds > 1 else 1)
    return macs, cycles, inputs + weights + outputs


def buffer_floor_elements(graph: OpGraph, v: int, hw: Hardware) -> int:
    """Buffer elements every schedule touches computing op ``v`` (the bounds' share of it):
    each output written once, and the operand reads :func:`_compute_counts` charges at full
    utilisation of the array (a compute of fewer channels or columns only reads more)."""
    op = _OpShape(graph, v)
    out = op.size
    if not op.macs:
        return out
    if hw.dataflow == "cout-ow":
        weights = op.macs // hw.pe_cols if op.weighted else 0
        return op.macs // hw.pe_rows + weights + out
    weights = op.macs // (op.out[1] * op.out[2]) if op.weighted else 0
    folds = -(-op.reduced // hw.pe_rows)  # partial sums leave the array once per fold
    return op.macs // hw.pe_cols + weights + out * (2 * folds if folds > 1 else 1)


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
    if not schedule.steps:
        macs = sum(graph.nodes[v].macs for v in bits(schedule.group))
        compute = latency = -(-macs // hw.macs_per_cycle)
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

    def available(self, group: Group) -> bool:
        """Whether ``group`` has a schedule to read metrics from (the optimus profile prices
        fused groups by Optimus's formulas, which lay out none)."""
        try:
            self.group(group)
        except ScheduleError:
            return False
        return True


def compulsory_energy_fj(cost_model: CostModel, hw: Hardware, group: Group) -> int:
    """The least energy any schedule of ``group`` can spend: its compulsory DRAM bytes
    (io + weights once) through the buffer, and its MACs (the property tests' floor)."""
    unit = UnitEnergies.of(hw, cost_model.beta)
    macs = sum(cost_model.graph.nodes[v].macs for v in bits(group))
    return cost_model.compulsory(group) * (unit.dram + unit.buffer) + macs * unit.mac

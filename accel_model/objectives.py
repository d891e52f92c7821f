"""What a plan is optimised for: DRAM bytes, energy, latency or their product
(docs/cost-model.md, "Energy and latency"; ``--objective``).

An :class:`Objective` scores a group and a plan in whole units (bytes, femtojoules, cycles)
and gives the exact search what it needs to stay a proof: a cheap *floor* of a group's score
from its DRAM bytes (A* prices a group's schedule only when that floor could matter) and a
floor of the rest of the graph from the traffic bound and the MACs still to run. DRAM, energy
and latency add over groups (groups run one after another), so A* is exact for them; EDP is a
product of plan totals, which no per-group cost can express, so only the whole-plan searches
(rs, ls, nsga2) optimise it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from accel_model.energy import MetricsModel, UnitEnergies
from accel_model.hardware import Hardware
from fusionplan.ir.graph import Group, bits
from fusionplan.ir.registry import Registry

if TYPE_CHECKING:
    from accel_model.base import CostModel

SCHEDULE_WORK_PER_OP = 64
"""Work units (search/effort.py) of building and walking one op's schedule for its metrics:
about 1 ms per op, some 60 cost-model evaluations' worth."""


class Objective(ABC):
    """One figure of merit over a cost model and a hardware description."""

    name: ClassVar[str]
    unit: ClassVar[str]
    additive: ClassVar[bool] = True  # a plan's score is the sum of its groups' scores

    def __init__(
        self, cost_model: CostModel, hardware: Hardware, metrics: MetricsModel | None = None
    ) -> None:
        self.cm, self.hw = cost_model, hardware
        self.metrics = metrics or MetricsModel(cost_model, hardware)
        self.macs = tuple(n.macs for n in cost_model.graph.nodes)
        self.work = 0  # units spent on schedules (counted by the searches' budgets)

    def group(self, group: Group) -> int:
        """The group's score (additive objectives)."""
        raise NotImplementedError(f"objective {self.name} has no per-group score")

    @abstractmethod
    def plan(self, groups: Sequence[Group]) -> int:
        """A whole plan's score."""

    def group_floor(self, group: Group, dram: int) -> int:
        """A lower bound on :meth:`group` from the group's DRAM bytes, without a schedule."""
        return self.group(group)

    def rest_floor(self, macs: int, traffic: int) -> int:
        """A lower bound on the score of running ops with ``macs`` MACs whose DRAM traffic is
        at least ``traffic`` bytes; consistent when the traffic bound is (docs/cost-model.md)."""
        raise NotImplementedError(f"objective {self.name} has no lower bound")

    def macs_of(self, group: Group) -> int:
        macs = self.macs
        return sum(macs[v] for v in bits(group))

    def _metrics(self, group: Group):
        before = self.metrics.built
        m = self.metrics.group(group)
        if self.metrics.built != before:
            self.work += SCHEDULE_WORK_PER_OP * group.bit_count()
        return m


class DramObjective(Objective):
    name, unit = "dram", "B"

    def group(self, group: Group) -> int:
        return self.cm.cost(group).dram

    def plan(self, groups: Sequence[Group]) -> int:
        cost = self.cm.cost
        return sum(cost(g).dram for g in groups)

    def group_floor(self, group: Group, dram: int) -> int:
        return dram

    def rest_floor(self, macs: int, traffic: int) -> int:
        return traffic


class EnergyObjective(Objective):
    """Femtojoules: DRAM, buffer, MACs and leakage, from each group's schedule."""

    name, unit = "energy", "fJ"

    def __init__(
        self, cost_model: CostModel, hardware: Hardware, metrics: MetricsModel | None = None
    ) -> None:
        super().__init__(cost_model, hardware, metrics)
        self.units = UnitEnergies.of(hardware, cost_model.beta)

    def group(self, group: Group) -> int:
        return self._metrics(group).energy_fj

    def plan(self, groups: Sequence[Group]) -> int:
        return sum(self.group(g) for g in groups)

    def group_floor(self, group: Group, dram: int) -> int:
        # every DRAM byte passes through the buffer once; every MAC runs at least once
        u = self.units
        return dram * (u.dram + u.buffer) + self.macs_of(group) * u.mac

    def rest_floor(self, macs: int, traffic: int) -> int:
        u = self.units
        return traffic * (u.dram + u.buffer) + macs * u.mac


class LatencyObjective(Objective):
    """Cycles: each group's steps, compute against transfers (double-buffered or not)."""

    name, unit = "latency", "cycles"

    def group(self, group: Group) -> int:
        return self._metrics(group).latency_cycles

    def plan(self, groups: Sequence[Group]) -> int:
        return sum(self.group(g) for g in groups)

    def group_floor(self, group: Group, dram: int) -> int:
        return self.rest_floor(self.macs_of(group), dram)

    def rest_floor(self, macs: int, traffic: int) -> int:
        # sum over groups of max(compute, transfer) >= max of the sums
        return max(-(-macs // self.hw.macs_per_cycle), self.hw.dram_cycles(traffic))


class EdpObjective(Objective):
    """Energy x latency of the whole plan (fJ x cycles): not a sum over groups."""

    name, unit, additive = "edp", "fJ*cycles", False

    def plan(self, groups: Sequence[Group]) -> int:
        energy = latency = 0
        for g in groups:
            m = self._metrics(g)
            energy += m.energy_fj
            latency += m.latency_cycles
        return energy * latency


OBJECTIVES: Registry[type[Objective]] = Registry("objective")
"""What ``--objective`` chooses from."""
OBJECTIVES.register("dram", DramObjective, help="DRAM bytes (the default)")
OBJECTIVES.register("energy", EnergyObjective, help="energy per inference, from the schedules")
OBJECTIVES.register("latency", LatencyObjective, help="cycles per inference, from the schedules")
OBJECTIVES.register("edp", EdpObjective, help="energy x latency (whole-plan searches only)")


def objective_parts(objective: Objective) -> list[Objective]:
    """The additive objectives whose bounds bound ``objective``: itself, or for EDP energy
    and latency (sharing its schedules)."""
    if objective.additive:
        return [objective]
    cm, hw, metrics = objective.cm, objective.hw, objective.metrics
    return [EnergyObjective(cm, hw, metrics), LatencyObjective(cm, hw, metrics)]


def make_objective(name: str, cost_model: CostModel, hardware: Hardware | None = None) -> Objective:
    """The objective ``name`` over ``cost_model`` (``hardware``: the default design)."""
    return OBJECTIVES.get(name)(cost_model, hardware or Hardware())

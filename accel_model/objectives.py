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

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

from accel_model.energy import (
    FJ_PER_PJ,
    GroupMetrics,
    MetricsModel,
    UnitEnergies,
    buffer_floor_elements,
)
from accel_model.hardware import Hardware
from fusionplan.ir.errors import ConfigError
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
        self.work = 0  # units spent on schedules (counted by the searches' budgets)

    @cached_property
    def macs(self) -> tuple[int, ...]:
        return tuple(n.macs for n in self.cm.graph.nodes)

    @cached_property
    def touch(self) -> tuple[int, ...]:
        """Buffer bytes every schedule touches per op (none for an op that may run free);
        built when a floor is first asked for, not for every problem a search makes."""
        cm, graph = self.cm, self.cm.graph
        free = cm.free_alone
        return tuple(
            0 if free >> v & 1 else cm.b * buffer_floor_elements(graph, v, self.hw)
            for v in range(len(graph))
        )

    def group(self, group: Group) -> int:
        """The group's score (additive objectives)."""
        raise NotImplementedError(f"objective {self.name} has no per-group score")

    @abstractmethod
    def plan(self, groups: Sequence[Group]) -> int:
        """A whole plan's score."""

    def group_floor(self, group: Group, dram: int) -> int:
        """A lower bound on :meth:`group` from the group's DRAM bytes, without a schedule."""
        return self.rest_floor(group, dram)

    def rest_floor(self, nodes: Group, traffic: int) -> int:
        """A lower bound on the score of running ``nodes`` when their DRAM traffic is at
        least ``traffic`` bytes, built from terms additive over ops and groups (a max of
        such sums for latency, which is subadditive too) and monotone in the traffic, hence
        consistent where the traffic bound is (docs/cost-model.md, "Energy and latency")."""
        raise NotImplementedError(f"objective {self.name} has no lower bound")

    def floors(self, nodes: Group) -> tuple[int, int]:
        """(MACs, buffer bytes touched at least) of running ``nodes``."""
        macs, touch = self.macs, self.touch
        m = t = 0
        for v in bits(nodes):
            m += macs[v]
            t += touch[v]
        return m, t

    def _metrics(self, group: Group) -> GroupMetrics:
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

    def rest_floor(self, nodes: Group, traffic: int) -> int:
        return traffic


class EnergyObjective(Objective):
    """Femtojoules: DRAM, buffer, MACs and leakage, from each group's schedule; under a
    cost model that another tool prices (the optimus profile), that tool's own energy
    (Optimus's reported energy, on Optimus's architecture: the hardware is not read)."""

    name, unit = "energy", "fJ"

    def __init__(
        self, cost_model: CostModel, hardware: Hardware, metrics: MetricsModel | None = None
    ) -> None:
        super().__init__(cost_model, hardware, metrics)
        self.units = UnitEnergies.of(hardware, cost_model.beta)
        self.tool = cost_model.tool_energy()
        if self.tool is not None:
            # a whole fJ below each op's share, so that rounding never lifts the floor
            # above a group's rounded energy
            self.fixed = tuple(
                max(math.floor(pj * FJ_PER_PJ) - 1, 0) for pj in self.tool.fixed_energy()
            )
            per_element = math.floor(self.tool.dram_pj_per_element * FJ_PER_PJ)
            self.tool_dram = per_element // cost_model.b  # fJ per DRAM byte, rounded down

    def group(self, group: Group) -> int:
        if self.tool is None:
            return self._metrics(group).energy_fj
        pj = self.tool.energy(group)
        if not math.isfinite(pj):  # never on Optimus's five networks (each conv has a blocking)
            names = [self.cm.graph.nodes[v].name for v in bits(group)]
            raise ConfigError(f"Optimus's energy model prices no schedule for group {names}")
        return round(pj * FJ_PER_PJ)

    def plan(self, groups: Sequence[Group]) -> int:
        return sum(self.group(g) for g in groups)

    def rest_floor(self, nodes: Group, traffic: int) -> int:
        if self.tool is not None:  # the tool's DRAM term and each op's fixed share
            fixed = self.fixed
            return traffic * self.tool_dram + sum(fixed[v] for v in bits(nodes))
        # every DRAM byte passes through the buffer once; every MAC runs at least once
        u = self.units
        macs, touch = self.floors(nodes)
        return traffic * (u.dram + u.buffer) + touch * u.buffer + macs * u.mac


class LatencyObjective(Objective):
    """Cycles: each group's steps, compute against transfers (double-buffered or not)."""

    name, unit = "latency", "cycles"

    def __init__(
        self, cost_model: CostModel, hardware: Hardware, metrics: MetricsModel | None = None
    ) -> None:
        _check_schedules(cost_model, self.name)
        super().__init__(cost_model, hardware, metrics)

    def group(self, group: Group) -> int:
        return self._metrics(group).latency_cycles

    def plan(self, groups: Sequence[Group]) -> int:
        return sum(self.group(g) for g in groups)

    def rest_floor(self, nodes: Group, traffic: int) -> int:
        # a sum over steps of max(compute, transfer, buffer) >= the max of the three sums
        hw = self.hw
        macs, touch = self.floors(nodes)
        return max(
            -(-macs // hw.macs_per_cycle),
            hw.dram_cycles(traffic),
            -(-(touch + traffic) // hw.buffer_bytes_per_cycle),
        )


class EdpObjective(Objective):
    """Energy x latency of the whole plan (fJ x cycles): not a sum over groups."""

    name, unit, additive = "edp", "fJ*cycles", False

    def __init__(
        self, cost_model: CostModel, hardware: Hardware, metrics: MetricsModel | None = None
    ) -> None:
        _check_schedules(cost_model, self.name)
        super().__init__(cost_model, hardware, metrics)

    def plan(self, groups: Sequence[Group]) -> int:
        energy = latency = 0
        for g in groups:
            m = self._metrics(g)
            energy += m.energy_fj
            latency += m.latency_cycles
        return energy * latency


def check_additive(name: str) -> None:
    """ConfigError unless objective ``name`` adds over groups (what A* needs)."""
    if not OBJECTIVES.get(name).additive:
        raise ConfigError(
            f"objective {name} is not a sum over groups: the exact search cannot optimise it; "
            "use --search auto, rs, ls or nsga2"
        )


def needs_schedules(name: str) -> bool:
    """Whether objective ``name`` reads latency, which only schedules give."""
    return name in ("latency", "edp")


def static_floor(objective: Objective, traffic: int) -> int:
    """The objective's floor over the whole graph from a DRAM lower bound (a plan's static
    bound where no A* ran under the objective)."""
    return objective.rest_floor(objective.cm.graph.all_nodes, traffic)


def _check_schedules(cost_model: CostModel, name: str) -> None:
    """Latency comes from schedules only: refuse a cost model another tool prices."""
    if cost_model.tool_energy() is not None:
        raise ConfigError(
            f"objective {name} needs each group's schedule, and the optimus profile prices "
            "fused groups by Optimus's formulas, which lay out none: use dram or energy"
        )


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
    return [make_objective(name, cm, hw, metrics) for name in ("energy", "latency")]


def make_objective(
    name: str,
    cost_model: CostModel,
    hardware: Hardware | None = None,
    metrics: MetricsModel | None = None,
) -> Objective:
    """The objective ``name`` over ``cost_model`` (``hardware``: the default design;
    ``metrics``: schedules shared with another objective of the same hardware)."""
    return OBJECTIVES.get(name)(cost_model, hardware or Hardware(), metrics)

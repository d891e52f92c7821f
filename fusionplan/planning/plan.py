"""Partition plans: the result of fusion planning, its metrics, checks and file formats.

A :class:`Plan` holds every group of the model, unfusable ops included as singletons.
:meth:`Plan.validate` is the one independent checker every search and test relies on: it
recomputes each group's cost without the memo and checks coverage, connectivity, an acyclic
quotient graph and the buffer limit.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from accel_model.bounds import compulsory_traffic, plan_lower_bound, unfusable_nodes
from accel_model.energy import GroupMetrics, MetricsModel
from accel_model.hardware import Hardware
from accel_model.objectives import make_objective, static_floor
from accel_model.schedule import Schedule, ScheduleError, build_schedule
from fusionplan.ir.errors import ConfigError, PlanError
from fusionplan.ir.graph import Group, OpGraph, bits, is_weakly_connected, lowest, quotient_order
from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.ir.onnx_model import onnx_node_names
from fusionplan.ir.version import VERSION
from fusionplan.planning.result import PassRecord, SearchResult

if TYPE_CHECKING:
    from accel_model.base import CostModel

PLAN_FORMAT = "fusionplan.plan"
PLAN_FORMAT_VERSION = 1
KB, MB = 1024, 1024**2


@dataclass(frozen=True)
class PlanMetrics:
    """Totals reported for a plan; bytes, with KB/MB views (KB = 1024 B, MB = 1024^2 B)."""

    dram_bytes: int
    fusable_dram_bytes: int  # groups of fusable ops only (the paper's figure)
    unfusable_dram_bytes: int  # ops that fit nowhere, run layer by layer
    mbu_bytes: int  # largest F_beta over fusable groups
    groups: int
    fused_groups: int  # groups with more than one op
    unfusable_ops: int
    compulsory_bytes: int  # graph io + all weights, once each
    lower_bound_bytes: int  # proven lower bound on the optimum (docs/design.md, "Certified plans")
    gap: float  # (DRAM - lower bound) / lower bound
    bound_method: str  # how the bound was proven (Certificate.method)

    @property
    def dram_mb(self) -> float:
        return self.dram_bytes / MB

    @property
    def fusable_dram_mb(self) -> float:
        return self.fusable_dram_bytes / MB

    @property
    def mbu_kb(self) -> float:
        return self.mbu_bytes / KB

    def as_dict(self) -> dict[str, float | int | str]:
        d: dict[str, float | int | str] = asdict(self)
        d.update(dram_mb=self.dram_mb, fusable_dram_mb=self.fusable_dram_mb, mbu_kb=self.mbu_kb)
        return d


@dataclass(frozen=True)
class PlanEnergy:
    """A plan's energy and latency on its hardware (accel_model/energy.py), with lower
    bounds on every plan's: A*'s under that objective where it ran, else the floor of the
    DRAM lower bound plus every MAC (docs/cost-model.md, "Energy and latency")."""

    totals: GroupMetrics
    per_group: tuple[GroupMetrics, ...]
    energy_bound_fj: int
    latency_bound_cycles: int
    clock_mhz: float

    @property
    def energy_uj(self) -> float:
        return self.totals.energy_fj / 1e9

    @property
    def latency_ms(self) -> float:
        return self.totals.latency_cycles / (self.clock_mhz * 1e3)

    def as_dict(self) -> dict[str, Any]:
        t = self.totals
        return {
            "energy_uj": round(self.energy_uj, 6),
            "energy_bound_uj": round(self.energy_bound_fj / 1e9, 6),
            "energy_parts_uj": {
                part: round(value / 1e9, 6)
                for part, value in (
                    ("dram", t.dram_fj), ("buffer", t.buffer_fj), ("mac", t.mac_fj),
                    ("leakage", t.leakage_fj),
                )
            },
            "latency_cycles": t.latency_cycles,
            "latency_bound_cycles": self.latency_bound_cycles,
            "latency_ms": round(self.latency_ms, 6),
            "macs": t.macs,
            "buffer_bytes": t.buffer_bytes,
            "compute_cycles": t.compute_cycles,
            "transfer_cycles": t.transfer_cycles,
        }  # fmt: skip


def _hardware_of(saved: Any) -> Hardware | None:
    """The hardware a plan file was planned on (None: none recorded, the defaults)."""
    if saved is None:
        return None
    if not isinstance(saved, dict):
        raise PlanError("plan file: 'hardware' must be an object of settings")
    try:
        return Hardware(**saved)
    except (TypeError, ConfigError) as exc:
        raise PlanError(f"plan file: bad 'hardware': {exc}") from None


def _prepasses_of(saved: Any) -> tuple[PassRecord, ...]:
    """The pre-pass records of a plan file (none in a plan made without pre-passes)."""
    if saved is None:
        return ()
    try:
        return tuple(PassRecord.from_json(entry) for entry in saved)
    except (TypeError, KeyError, AttributeError) as exc:
        raise PlanError(f"plan file: bad 'prepasses': {exc}") from None


class Plan:
    """Groups of one graph under one cost model, with the :class:`SearchResult` that found
    them (``None`` for a plan built by hand or read from a file), on ``hardware`` (its
    energy and latency; None: accel_model.hardware's defaults). ``prepasses`` records
    what the pre-passes did to the model before it was planned (the stream schedule)."""

    def __init__(
        self,
        graph: OpGraph,
        cost_model: CostModel,
        groups: list[Group] | tuple[Group, ...],
        result: SearchResult | None = None,
        *,
        saved_info: dict[str, Any] | None = None,
        hardware: Hardware | None = None,
        prepasses: tuple[PassRecord, ...] = (),
    ) -> None:
        self.graph = graph
        self.cost_model = cost_model
        self.hardware = hardware or Hardware()
        foreign = any(g & ~graph.all_nodes for g in groups)  # reported by problems()
        order = None if foreign else quotient_order(graph, list(groups))
        ordered = [groups[i] for i in order] if order is not None else sorted(groups, key=lowest)
        self.groups: tuple[Group, ...] = tuple(ordered)
        self.result = result
        self._saved_info: dict[str, Any] = dict(saved_info or {})
        self.prepasses = tuple(prepasses)

    @property
    def info(self) -> dict[str, Any]:
        """The search metadata as stored in the plan file's ``search`` field (JSON form)."""
        return self.result.info() if self.result is not None else dict(self._saved_info)

    # -- checks -----------------------------------------------------------------------
    @cached_property
    def unfusable(self) -> Group:
        return unfusable_nodes(self.cost_model)

    def problems(self) -> list[str]:
        """Every way the plan breaks the rules, as readable sentences (empty if valid)."""
        g, names = self.graph, [n.name for n in self.graph.nodes]
        found: list[str] = []
        seen = 0
        for grp in self.groups:
            if grp == 0:
                found.append("a group is empty")
            if seen & grp:
                dup = names[lowest(seen & grp)]
                found.append(f"node '{dup}' is in more than one group")
            seen |= grp
        missing = g.all_nodes & ~seen
        if missing:
            example = names[lowest(missing)]
            found.append(f"{missing.bit_count()} node(s) in no group, e.g. '{example}'")
        if seen & ~g.all_nodes:
            found.append("a group names a node id outside the graph")
            return found  # the checks below index per-node tables by node id
        for grp in self.groups:
            if grp and not is_weakly_connected(g, grp):
                found.append(f"group starting at '{names[lowest(grp)]}' is not weakly connected")
        if quotient_order(g, list(self.groups)) is None:
            found.append("the groups depend on each other in a cycle")
        beta = self.cost_model.beta
        for grp in self.groups:
            if grp.bit_count() == 1 and grp & self.unfusable:
                continue
            if grp & self.unfusable:
                found.append(f"unfusable node '{names[lowest(grp & self.unfusable)]}' is fused")
            cost = self.cost_model.compute_uncached(grp)
            if not cost.valid:
                found.append(
                    f"group starting at '{names[lowest(grp)]}' needs {cost.buffer} B "
                    f"of buffer, not < {beta} B"
                )
        return found

    def validate(self) -> Plan:
        """Raise :class:`PlanError` unless the plan is valid; return self for chaining."""
        found = self.problems()
        if found:
            more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
            raise PlanError(f"invalid plan: {found[0]}{more}")
        return self

    # -- metrics ----------------------------------------------------------------------
    @cached_property
    def metrics(self) -> PlanMetrics:
        cm, unfusable = self.cost_model, self.unfusable
        fus = [cm.cost(grp) for grp in self.groups if not grp & unfusable]
        unf = [cm.cost(grp) for grp in self.groups if grp & unfusable]
        fus_dram = sum(c.dram for c in fus)
        unf_dram = sum(c.dram for c in unf)
        cert = self.result.certificate if self.result is not None else None
        if cert is not None:
            bound, method = cert.lower_bound_bytes, cert.method
        elif not cm.white_box:  # a black-box oracle's answers bound nothing
            bound, method = 0, "none (black-box oracle)"
        else:  # a plan built by hand or read from a file: the static bound
            bound, method = plan_lower_bound(cm), "traffic bound"
        dram = fus_dram + unf_dram
        return PlanMetrics(
            dram_bytes=dram,
            fusable_dram_bytes=fus_dram,
            unfusable_dram_bytes=unf_dram,
            mbu_bytes=max((c.buffer for c in fus), default=0),
            groups=len(self.groups),
            fused_groups=sum(1 for grp in self.groups if grp.bit_count() > 1),
            unfusable_ops=unfusable.bit_count(),
            compulsory_bytes=compulsory_traffic(self.graph, cm.b, cm.node_weights),
            lower_bound_bytes=bound,
            gap=(dram - bound) / bound if bound > 0 else 0.0,
            bound_method=method,
        )

    @cached_property
    def energy(self) -> PlanEnergy | None:
        """Energy and latency from each group's schedule; None where some group has no
        schedule to read them from (the optimus profile's fused groups)."""
        if not self.cost_model.white_box:  # an oracle prices groups, it lays out no schedule
            return None
        model = MetricsModel(self.cost_model, self.hardware)
        try:
            per_group = tuple(model.group(g) for g in self.groups)
        except ScheduleError:
            return None
        totals = model.plan(list(self.groups))
        cm, hw, traffic = self.cost_model, self.hardware, self.metrics.lower_bound_bytes
        energy_lb = static_floor(make_objective("energy", cm, hw, model), traffic)
        latency_lb = static_floor(make_objective("latency", cm, hw, model), traffic)
        found = self.result.objective_bound if self.result is not None else None
        if found is not None and found.objective == "energy":
            energy_lb = max(energy_lb, found.lower_bound)
        if found is not None and found.objective == "latency":
            latency_lb = max(latency_lb, found.lower_bound)
        return PlanEnergy(totals, per_group, energy_lb, latency_lb, self.hardware.clock_mhz)

    @cached_property
    def tool_energy_uj(self) -> float | None:
        """The energy another tool's own model reports for this plan (the optimus profile:
        Optimus's), or None."""
        tool = self.cost_model.tool_energy()
        if tool is None:
            return None
        total = sum(tool.energy(g) for g in self.groups) / 1e6
        return total if math.isfinite(total) else None  # a group Optimus cannot schedule

    # -- serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        cm, names = self.cost_model, [n.name for n in self.graph.nodes]
        energy = self.energy
        groups = []
        for gi, grp in enumerate(self.groups):
            cost = cm.cost(grp)
            entry = {
                "id": gi,
                "nodes": [names[v] for v in bits(grp)],
                "buffer_bytes": cost.buffer,
                "dram_bytes": cost.dram,
                "unfusable": bool(grp & self.unfusable),
                "schedule": self.schedule_summary(grp),
            }
            if energy is not None:
                m = energy.per_group[gi]
                entry.update(energy_uj=round(m.energy_fj / 1e9, 6), latency_cycles=m.latency_cycles)
            groups.append(entry)
        accel = cm.accel
        prepasses = {"prepasses": [r.to_json() for r in self.prepasses]} if self.prepasses else {}
        return {
            "format": PLAN_FORMAT,
            "version": PLAN_FORMAT_VERSION,
            "fusionplan_version": VERSION,
            "model": {"name": self.graph.name, "ops": len(self.graph)},
            **prepasses,
            "accelerator": accel.settings(),
            "metrics": self.metrics.as_dict(),
            "hardware": self.hardware.settings(),
            "energy": energy.as_dict() if energy is not None else self._tool_energy_dict(),
            "search": self.info,
            "groups": groups,
        }

    def _tool_energy_dict(self) -> dict[str, Any] | None:
        uj = self.tool_energy_uj
        return None if uj is None else {"model": "optimus", "energy_uj": round(uj, 6)}

    def schedule(self, group: Group) -> Schedule:
        """The schedule the cost model priced for ``group``, step by step
        (docs/cost-model.md, "Schedules and replay"); ScheduleError where none is built."""
        return build_schedule(self.cost_model, group)

    def schedule_summary(self, group: Group) -> dict[str, Any]:
        """The plan file's compact schedule of ``group``: its loop order, tiles, slices and
        traffic per tensor, or the loop order and why no schedule is written out."""
        if not self.cost_model.white_box:
            return {"order": "oracle", "unavailable": "a black-box oracle priced this group"}
        try:
            return self.schedule(group).compact(self.graph)
        except ScheduleError as exc:
            kind, _ = self.cost_model.priced_order(group)
            return {"order": kind, "unavailable": str(exc)}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def save(self, path: str | Path) -> Path:
        return write_text_atomic(path, self.to_json() + "\n")

    @staticmethod
    def from_dict(graph: OpGraph, cost_model: CostModel, data: dict[str, Any]) -> Plan:
        """Rebuild a plan for ``graph`` from :meth:`to_dict` output (validity not checked)."""
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise PlanError("not a fusionplan plan file (missing 'format': 'fusionplan.plan')")
        if data.get("version") != PLAN_FORMAT_VERSION:
            raise PlanError(f"plan format version {data.get('version')} is not supported")
        index = graph.node_index
        entries = data.get("groups", [])
        if not isinstance(entries, list):
            raise PlanError("plan file: 'groups' must be a list of groups")
        groups = []
        for entry in entries:
            names = entry.get("nodes", []) if isinstance(entry, dict) else None
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise PlanError("plan file: each group must be an object with a list of node names")
            mask = 0
            for name in names:
                if name not in index:
                    raise PlanError(f"plan names node '{name}', which model '{graph.name}' lacks")
                mask |= 1 << index[name]
            groups.append(mask)
        return Plan(graph, cost_model, groups, saved_info=data.get("search") or {},
                    hardware=_hardware_of(data.get("hardware")),
                    prepasses=_prepasses_of(data.get("prepasses")))  # fmt: skip

    @staticmethod
    def from_json(graph: OpGraph, cost_model: CostModel, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanError(f"plan file is not JSON: {exc.msg} at line {exc.lineno}") from None
        return Plan.from_dict(graph, cost_model, data)

    # -- presentation -----------------------------------------------------------------
    def group_of(self) -> dict[str, int]:
        """ONNX node name -> group id, in the order groups execute."""
        names = [n.name for n in self.graph.nodes]
        return {names[v]: gi for gi, grp in enumerate(self.groups) for v in bits(grp)}

    def summary(self) -> str:
        m, accel = self.metrics, self.cost_model.accel
        info = self.info  # derived from the search result: build it once
        lines = [
            f"model        {self.graph.name} ({len(self.graph)} ops)",
            f"accelerator  {accel.describe()}",
            f"groups       {m.groups} ({m.fused_groups} fused, {m.unfusable_ops} unfusable ops)",
            f"DRAM         {m.dram_mb:.3f} MB (fusable {m.fusable_dram_mb:.3f} MB, "
            f"unfusable {m.unfusable_dram_bytes / MB:.3f} MB)",
            f"lower bound  {m.lower_bound_bytes / MB:.3f} MB ({m.bound_method}), gap {m.gap:.2%}"
            if self.cost_model.white_box
            else f"lower bound  {m.bound_method}",
            f"MBU          {m.mbu_kb:.1f} KB"
            if self.cost_model.white_box or m.mbu_bytes
            else "MBU          unknown (the oracle gave no buffer sizes)",
        ]
        for record in self.prepasses:
            lines.append(f"{'prepass':<12} {record.name}: {record.summary}")
            lines += [f"{'':<12} its {fact} is stale: {later} rewrote the graph after it"
                      for fact, later in record.invalidated.items()]  # fmt: skip
        e = self.energy
        if e is not None:
            lines += [
                f"energy       {e.energy_uj:.3f} uJ (bound {e.energy_bound_fj / 1e9:.3f} uJ; "
                f"DRAM {e.totals.dram_fj / 1e9:.1f}, buffer {e.totals.buffer_fj / 1e9:.1f}, "
                f"MACs {e.totals.mac_fj / 1e9:.1f})",
                f"latency      {e.latency_ms:.3f} ms = {e.totals.latency_cycles:,} cycles "
                f"(bound {e.latency_bound_cycles:,}) on {self.hardware.describe()}",
            ]
        if e is None and self.tool_energy_uj is not None:
            lines.append(f"energy       {self.tool_energy_uj:.3f} uJ (Optimus's energy model)")
        found = self.result.objective_bound if self.result is not None else None
        if found is not None:
            status = "proven optimal" if found.optimal else f"gap {found.gap:.2%}"
            lines.append(f"{'objective':<12} {found.objective}: {status}")
        front = info.get("front")
        if front:
            lines.append(f"{'front':<12} {len(front)} plans non-dominated in DRAM, energy, latency")
            for row in front:
                lines.append(
                    f"{'':<12} DRAM {row['dram_bytes'] / MB:.3f} MB, energy "
                    f"{row['energy_fj'] / 1e9:.3f} uJ, latency {row['latency_cycles']:,} cycles"
                )
        for key in ("search", "splitter", "budget", "seed"):
            if key in info:
                lines.append(f"{key:<12} {info[key]}")
        if info.get("oracle_queries"):
            spent = info.get("timing", {}).get("oracle_seconds")
            budget = f" (budget {info['query_budget']:,})" if info.get("query_budget") else ""
            took = f", {spent} s" if spent is not None else ""
            lines.append(f"{'oracle':<12} {info['oracle_queries']:,} queries{budget}{took}")
        seconds = info.get("timing", {}).get("wall_time_s")
        if seconds is not None:
            lines.append(f"{'wall time':<12} {seconds} s")
        return "\n".join(lines)

    def annotate_onnx(self, src: str | Path | onnx.ModelProto, dst: str | Path) -> Path:
        """Write ``src`` (a file, or a model in memory: left as it is) to ``dst`` with each
        compute node tagged with its fusion group.

        Tags go in node ``metadata_props`` (``fusionplan.group``, ``fusionplan.group_dram``)
        and in the doc string, which Netron shows. Folded and view ops carry no tag.
        """

        if isinstance(src, onnx.ModelProto):
            model = onnx.ModelProto()
            model.CopyFrom(src)
        else:
            model = onnx.load(str(src))
        group_of = self.group_of()
        cm = self.cost_model
        for node, name in zip(model.graph.node, onnx_node_names(model.graph), strict=True):
            gi = group_of.get(name)
            if gi is None:
                continue
            cost = cm.cost(self.groups[gi])
            for key, value in (("fusionplan.group", gi), ("fusionplan.group_dram", cost.dram)):
                prop = node.metadata_props.add()
                prop.key, prop.value = key, str(value)
            node.doc_string = f"fusion group {gi} (DRAM {cost.dram} B, buffer {cost.buffer} B)"
        model.ir_version = max(model.ir_version, 10)  # node metadata_props needs IR >= 10
        return write_atomic(dst, lambda p: onnx.save(model, str(p)))

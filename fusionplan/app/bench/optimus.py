"""``fusionplan bench optimus``: Optimus's own code as the referee of the ``optimus`` profile.

Per cell (Optimus's five networks x 128/256/512 KB, 16-bit, batch 1): Optimus's optimum,
computed by running Optimus (``optimus_oracle.py``) under its own objective (energy) and
under a DRAM objective (its search, each group costed by the DRAM it reports); fusionplan's
proven optimum under the ``optimus`` profile; and fusionplan's plan priced by Optimus's code.
Every group of those plans is priced both ways: the profile must equal Optimus's code on each
group Optimus can price, and the groups where it does not are listed by name.

Optimus's figures are written to ``data/optimus_oracle.json`` each run (tests read them as
recorded data); without an Optimus checkout the bench skips with one line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_model import Accelerator
from accel_model.accelerator import OPTIMUS_CONVENTIONS
from accel_model.base import CostModel
from fusionplan.app.bench.certified import publish_section
from fusionplan.app.bench.optimus_oracle import (
    BUFFER_KB,
    OptimusRunner,
    layer_of_ops,
    optimus_group,
)
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.data.zoo import load_zoo_model
from fusionplan.ir.graph import Group, OpGraph, is_weakly_connected
from fusionplan.ir.io import write_text_atomic
from fusionplan.planning.plan import Plan
from fusionplan.search.effort import EXACT_UNITS, effort_for_seconds

BEGIN = "<!-- fusionplan bench optimus: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench optimus: end -->"
MB = 2**20
BYTES = 2  # Optimus's 16-bit elements
BUFFERS = ("128KB", "256KB", "512KB")
NETWORKS = (
    "optimus_resnet18",
    "optimus_resnet50",
    "optimus_vgg16",
    "optimus_squeezenet",
    "optimus_mobilenet",
)
DATA = Path(__file__).parents[3] / "data" / "optimus_oracle.json"
QUIRKS = ("rounded-up-tiles", "unsliced-weights-once", "optimus-solver")
"""The optimus profile's switchable quirks, each switched off on its own at 128 KB."""


def optimus_accelerator(network: str, buffer: str, without: Sequence[str] = ()) -> Accelerator:
    """The optimus profile for ``network``: Optimus's code skips its solvers for the network
    it names SqueezeNet, so the profile does too there (docs/cost-model.md)."""
    skip = set(without) | ({"optimus-solver"} if network == "optimus_squeezenet" else set())
    conventions = frozenset(c for c in OPTIMUS_CONVENTIONS if c not in skip)
    return Accelerator.of(buffer, "brr", BYTES, profile="optimus", conventions=conventions)


def solve(
    graph: OpGraph, accel: Accelerator, limit_s: float, objective: str = "dram"
) -> tuple[Plan, float]:
    """fusionplan's exact optimum of ``graph`` on ``accel`` under ``objective`` and the
    seconds it took."""
    options = {"effort": effort_for_seconds(limit_s, EXACT_UNITS)}
    request = PlanRequest(
        search="exact", objective=objective, budget=1, bound_effort=0.0, search_options=options
    )
    start = time.perf_counter()
    plan = plan_graph(graph, request.on(accel))
    return plan, time.perf_counter() - start


@dataclass(frozen=True)
class GroupCheck:
    """One group priced by the optimus profile and by Optimus's code (elements)."""

    cell: str
    layers: tuple[str, ...]
    profile: int | None  # None: the profile does not fuse it
    optimus: int | None  # None: Optimus's code finds no schedule for it
    overflow: bool

    @property
    def equal(self) -> bool:
        return self.profile == self.optimus


def profile_price(cm: CostModel, names: list[str], layers: Sequence[str]) -> int | None:
    """The profile's DRAM elements for the group of Optimus ``layers`` (every op of each
    layer, its activation included); None where the profile does not fuse it."""
    mask = sum(1 << v for v, n in enumerate(names) if n in layers)
    cost = cm.cost(mask)
    return cost.dram // cm.b if cost.valid else None


def groups_of(plan: Plan, names: list[str]) -> list[list[str]]:
    """fusionplan's plan as Optimus's groups (groups of activations alone dropped)."""
    found = [optimus_group(plan.graph, names, g) for g in plan.groups]
    return [g for g in found if g]


def run_optimus_bench(
    report_path: str | Path | None,
    runner: OptimusRunner,
    limit_s: float = 60.0,
    networks: Sequence[str] = NETWORKS,
    command: str = "fusionplan bench optimus",
    progress: Callable[[int], None] | None = None,
    data_path: str | Path = DATA,
) -> str:
    """Run Optimus and fusionplan on every cell; write the data file and the report section
    (into ``report_path`` when given; ``bench fidelity`` publishes it under its own markers)."""
    cells: dict[str, dict[str, Any]] = {}
    checks: list[GroupCheck] = []
    ablation: dict[str, list[float]] = {}
    done = 0
    for network in networks:
        graph = load_zoo_model(network)
        names = layer_of_ops(graph, network)
        plans = {b: solve(graph, optimus_accelerator(network, b), limit_s) for b in BUFFERS}
        tasks = []
        for buffer in BUFFERS:
            kb = BUFFER_KB[buffer]
            tasks += [
                {"kind": "optimum", "net": network, "buffer_kb": kb, "objective": "energy"},
                {"kind": "optimum", "net": network, "buffer_kb": kb, "objective": "dram"},
                {"kind": "price", "net": network, "buffer_kb": kb,
                 "groups": groups_of(plans[buffer][0], names)},
            ]  # fmt: skip
        answers = iter(runner.run(tasks))
        for buffer in BUFFERS:
            plan, seconds = plans[buffer]
            energy, dram, priced = next(answers), next(answers), next(answers)["groups"]
            real, _ = solve(graph, Accelerator.of(buffer, "brr", BYTES), limit_s)
            key = f"{network}|{buffer}"
            cells[key] = {
                "energy": energy,
                "dram": dram,
                "fusionplan": {"groups": groups_of(plan, names), "priced": priced},
            }
            cells[key]["fusionplan_mb"] = plan.metrics.dram_bytes / MB
            cells[key]["proven"] = plan.metrics.gap == 0.0
            cells[key]["seconds"] = seconds
            cells[key]["realistic_mb"] = real.metrics.dram_bytes / MB
            checks += _check_cell(key, plan.cost_model, names, cells[key])
            cells[key]["disconnected"] = _disconnected(graph, names, dram["groups"])
            done += 1
            if progress:
                progress(done)
        ablation[network] = [
            solve(graph, optimus_accelerator(network, "128KB", [q]), limit_s)[0].metrics.dram_bytes
            / MB
            for q in QUIRKS
        ]
    _write_data(data_path, runner, cells)
    section = optimus_section(cells, checks, ablation, runner, command)
    if report_path is not None:
        publish_section(report_path, section, BEGIN, END)
    return section


def _check_cell(
    key: str, cm: CostModel, names: list[str], cell: dict[str, Any]
) -> list[GroupCheck]:
    """Every group of the cell's three plans, priced both ways (each set of layers once)."""
    seen: dict[tuple[str, ...], GroupCheck] = {}
    fp = cell["fusionplan"]
    pairs = list(zip(fp["groups"], fp["priced"], strict=True))
    for side in ("energy", "dram"):
        pairs += [
            (g, {"priced": True, "dram": d, "overflow": False})
            for g, d in zip(cell[side]["groups"], cell[side]["group_dram"], strict=True)
        ]
    for layers, answer in pairs:
        group = tuple(layers)
        if group in seen:
            continue
        optimus = answer["dram"] if answer.get("priced") else None
        seen[group] = GroupCheck(key, group, profile_price(cm, names, layers), optimus,
                                 bool(answer.get("overflow")))  # fmt: skip
    return list(seen.values())


def _disconnected(graph: OpGraph, names: list[str], groups: list[list[str]]) -> int:
    """Optimus's groups that are not weakly connected (fusionplan's plans never have them)."""
    count = 0
    for layers in groups:
        mask: Group = sum(1 << v for v, n in enumerate(names) if n in layers)
        count += not is_weakly_connected(graph, mask)
    return count


def _write_data(path: str | Path, runner: OptimusRunner, cells: dict[str, dict]) -> None:
    keep = ("energy", "dram", "fusionplan")
    data = {
        "about": "Optimus's optima and its prices of fusionplan's plans, from running its "
        "code (fusionplan bench optimus); regenerated by each run.",
        "optimus": runner.versions(),
        "cells": {k: {f: v[f] for f in keep} for k, v in cells.items()},
    }
    write_text_atomic(Path(path), json.dumps(data, indent=1, sort_keys=True) + "\n")


def optimus_section(
    cells: dict[str, dict[str, Any]],
    checks: list[GroupCheck],
    ablation: dict[str, list[float]],
    runner: OptimusRunner,
    command: str,
) -> str:
    v = runner.versions()
    lines = [
        f"Command: `{command}`. Optimus {v['commit'][:7] or '(no git)'} run by Python "
        f"{v['python']}, numpy {v['numpy']}, scipy {v['scipy']}. 16-bit elements, batch 1, "
        "MB = 2^20 bytes. fusionplan: exact optimum of the optimus profile (`*`: not "
        "proven); its plan priced by Optimus's code. Optimus: its optimum under its own "
        "(energy) objective and under a DRAM objective.",
        "",
        "| network | buffer | Optimus (energy obj.) MB | Optimus (DRAM obj.) MB | "
        "fusionplan MB | fusionplan priced by Optimus MB | <= energy obj. | <= DRAM obj. | "
        "groups equal | fusionplan s | realistic BRR MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    wins = [0, 0]
    for key, cell in cells.items():
        network, buffer = key.split("|")
        priced = cell["fusionplan"]["priced"]
        ok = all(p.get("priced") for p in priced)
        by_optimus = sum(p["dram"] for p in priced if p.get("priced")) * BYTES / MB
        energy = cell["energy"]["dram"] * BYTES / MB
        dram = cell["dram"]["dram"] * BYTES / MB
        mine = [c for c in checks if c.cell == key and c.optimus is not None]
        marks = []
        for i, target in enumerate((energy, dram)):
            good = ok and by_optimus <= target + 1e-9
            wins[i] += good
            marks.append("yes" if good else f"no ({by_optimus - target:+.2f})")
        note = f" ({cell['disconnected']} split)" if cell["disconnected"] else ""
        lines.append(
            f"| {network.removeprefix('optimus_')} | {buffer} | {energy:.3f} | {dram:.3f}{note} "
            f"| {cell['fusionplan_mb']:.3f}{'' if cell['proven'] else '*'} | "
            f"{by_optimus:.3f}{'' if ok else ' (unpriced groups)'} | {marks[0]} | {marks[1]} | "
            f"{sum(c.equal for c in mine)}/{len(mine)} | {cell['seconds']:.1f} | "
            f"{cell['realistic_mb']:.2f} |"
        )
    priced = [c for c in checks if c.optimus is not None]
    unequal = [c for c in priced if not c.equal]
    unpriced = [c for c in checks if c.optimus is None]
    lines += [
        "",
        f"Groups priced by Optimus's code: {len(priced)} distinct (all plans, all cells); "
        f"the optimus profile equals it on {len(priced) - len(unequal)} of them. "
        f"fusionplan's plan priced by Optimus's code is at or below Optimus's optimum on "
        f"{wins[0]} of {len(cells)} cells (energy objective) and {wins[1]} of {len(cells)} "
        "(DRAM objective). `(n split)`: the DRAM-objective optimum has n groups that are not "
        "weakly connected, which fusionplan's plans cannot have.",
        "",
    ]
    if unequal:
        lines.append("Exceptions (profile / Optimus's code, elements):")
        lines.append("")
        for c in unequal:
            lines.append(
                f"* {c.cell.replace('optimus_', '')} [{', '.join(c.layers)}]: "
                f"{c.profile if c.profile is not None else 'not fused'} / {c.optimus}"
            )
        lines.append("")
    if unpriced:
        agree = sum(c.profile is None for c in unpriced)
        lines.append(
            f"Groups Optimus's code cannot price: {len(unpriced)}; the profile does not fuse "
            f"{agree} of them."
        )
        lines.append("")
    overflows = sum(c.overflow for c in priced)
    lines += [
        f"Groups whose rounded-up tiles overflow Optimus's own buffer: {overflows} of "
        f"{len(priced)}.",
        "",
        "Each quirk switched off on its own at 128 KB (fusionplan's exact optimum, MB):",
        "",
        "| network | optimus profile | " + " | ".join(f"- {q}" for q in QUIRKS) + " |",
        "|---|---|" + "---|" * len(QUIRKS),
    ]
    for network, row in ablation.items():
        base = cells[f"{network}|128KB"]["fusionplan_mb"]
        lines.append(
            f"| {network.removeprefix('optimus_')} | {base:.3f} | "
            + " | ".join(f"{x:.3f}" for x in row)
            + " |"
        )
    return "\n".join(lines) + "\n"

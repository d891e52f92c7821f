"""``fusionplan bench optimus``: fusionplan's proven BRR optima on Optimus's five networks
beside Optimus's own figures, and the difference attributed convention by convention.

Optimus's figures were measured by running Optimus unmodified (16-bit, batch 1, its
``3_level_mem_*KB`` global buffers; docs/results.md, "BRR at Optimus's fidelity"); they are
data here. fusionplan plans the same networks (``data/optimus_nets.py``) with its exact search
under three settings: the BRR before partial channels and in-place ops, its realistic BRR,
and the ``optimus`` profile, whose conventions are then switched on one at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from accel_model import Accelerator
from accel_model.accelerator import OPTIMUS_CONVENTIONS
from data.zoo import load_zoo_model
from fusionplan.app.bench.certified import publish_section
from fusionplan.app.pipeline import PlanRequest, plan_graph
from search.effort import EXACT_UNITS, effort_for_seconds

BEGIN = "<!-- fusionplan bench optimus: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench optimus: end -->"
MB = 2**20
BUFFERS = ("128KB", "256KB", "512KB")
NETWORKS = (
    "optimus_resnet18",
    "optimus_resnet50",
    "optimus_vgg16",
    "optimus_squeezenet",
    "optimus_mobilenet",
)


@dataclass(frozen=True)
class OptimusFigures:
    """Optimus's reported DRAM (MB) and search seconds at 128/256/512 KB; ``dram_objective``
    is its optimum with the energy weighting removed (128 KB only)."""

    energy_objective_mb: tuple[float, float, float]
    search_s: tuple[float, float, float]
    dram_objective_mb: float
    no_fusion_mb: float | None = None


OPTIMUS = {
    "optimus_resnet18": OptimusFigures((27.34, 25.35, 24.37), (13.9, 25.8, 54.5), 27.11, 33.49),
    "optimus_resnet50": OptimusFigures((81.11, 75.54, 70.04), (34.3, 59.1, 192.6), 76.78),
    "optimus_vgg16": OptimusFigures((91.54, 73.38, 61.44), (3.6, 4.0, 4.8), 75.70, 123.08),
    "optimus_squeezenet": OptimusFigures((5.25, 3.43, 3.12), (0.2, 0.3, 0.6), 5.25, 19.04),
    "optimus_mobilenet": OptimusFigures((13.06, 10.54, 10.62), (6.4, 8.6, 14.6), 12.18),
}
"""Measured by running Optimus (github SheaCai/optimus) on its own networks."""

REALISTIC = {"profile": "fusionplan"}
BEFORE = {"pe_unroll": 0, "in_place": False}  # fusionplan's BRR before issue 15
ATTRIBUTION: tuple[tuple[str, dict], ...] = (
    ("fusionplan BRR (realistic)", {}),
    ("+ depthwise weights not counted", {"depthwise_weights": False}),
    *(
        (f"+ {name}", {"conventions": frozenset(OPTIMUS_CONVENTIONS[: i + 1])})
        for i, name in enumerate(OPTIMUS_CONVENTIONS)
    ),
)
"""Cumulative steps from the realistic BRR to the optimus profile (the last step)."""


@dataclass(frozen=True)
class Cell:
    dram_mb: float
    seconds: float
    optimal: bool


def solve(graph, accel: Accelerator, limit_s: float) -> Cell:
    """fusionplan's exact optimum of ``graph`` on ``accel`` and the time to prove it."""
    options = {"effort": effort_for_seconds(limit_s, EXACT_UNITS)}
    request = PlanRequest(search="exact", budget=1, bound_effort=0.0, search_options=options)
    request = request.on(accel)
    start = time.perf_counter()
    plan = plan_graph(graph, request)
    seconds = time.perf_counter() - start
    return Cell(plan.metrics.dram_bytes / MB, seconds, plan.metrics.gap == 0.0)


def accelerator(buffer: str, **settings) -> Accelerator:
    return Accelerator.of(buffer, "brr", 2, **settings)


def run_optimus_bench(
    report_path: str | Path,
    limit_s: float = 60.0,
    networks: Sequence[str] = NETWORKS,
    command: str = "fusionplan bench optimus",
    progress: Callable[[int], None] | None = None,
) -> str:
    """Plan every network and write both tables into ``report_path``'s generated section."""
    graphs = {name: load_zoo_model(name) for name in networks}
    side: dict[tuple[str, str], dict[str, Cell]] = {}
    steps: dict[str, list[Cell]] = {}
    done = 0
    for name, graph in graphs.items():
        for buffer in BUFFERS:
            side[name, buffer] = {
                label: solve(graph, accelerator(buffer, **settings), limit_s)
                for label, settings in (
                    ("before", BEFORE),
                    ("realistic", REALISTIC),
                    ("optimus", {"profile": "optimus"}),
                )
            }
            done += 1
            if progress:
                progress(done)
        acc = accelerator("128KB")
        cells = []
        for _, settings in ATTRIBUTION:
            acc = replace(acc, **settings)
            cells.append(solve(graph, acc, limit_s))
        steps[name] = cells
    section = optimus_section(side, steps, command)
    publish_section(report_path, section, BEGIN, END)
    return section


def optimus_section(
    side: dict[tuple[str, str], dict[str, Cell]], steps: dict[str, list[Cell]], command: str
) -> str:
    lines = [
        f"Command: `{command}`. 16-bit elements, batch 1, MB = 2^20 bytes; fusionplan's",
        "figures are proven optima of its exact search (`*`: time limit reached, best plan).",
        "Optimus: its default (energy) objective; at 128 KB also its DRAM objective.",
        "",
        "| network | buffer | Optimus MB | Optimus DRAM-obj. MB | optimus profile MB | "
        "<= Optimus | search s (Optimus / fusionplan) | realistic BRR MB | BRR before MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, buffer), cells in side.items():
        figures = OPTIMUS[name]
        i = BUFFERS.index(buffer)
        target = figures.dram_objective_mb if i == 0 else figures.energy_objective_mb[i]
        opt = cells["optimus"]
        ok = "yes" if opt.dram_mb <= target + 5e-3 else f"no (+{opt.dram_mb - target:.2f})"
        speed = figures.search_s[i] / max(opt.seconds, 1e-3)
        dram_objective = f"{figures.dram_objective_mb:.2f}" if i == 0 else "-"
        lines.append(
            f"| {name.removeprefix('optimus_')} | {buffer} | "
            f"{figures.energy_objective_mb[i]:.2f} | {dram_objective} | {_mb(opt)} | {ok} | "
            f"{figures.search_s[i]:g} / {opt.seconds:.2f} ({speed:,.0f}x) | "
            f"{_mb(cells['realistic'])} | {_mb(cells['before'])} |"
        )
    names = list(steps)
    lines += [
        "",
        "Attribution at 128 KB: fusionplan's exact optimum (MB) as Optimus's conventions are "
        "switched on one at a time (cumulative; the last row is the optimus profile).",
        "",
        "| step | " + " | ".join(n.removeprefix("optimus_") for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for index, (label, _) in enumerate(ATTRIBUTION):
        row = []
        for n in names:
            cell = steps[n][index]
            delta = "" if index == 0 else f" ({cell.dram_mb - steps[n][index - 1].dram_mb:+.2f})"
            row.append(f"{_mb(cell)}{delta}")
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    row = [f"{OPTIMUS[n].dram_objective_mb:.2f}" for n in names]
    lines.append("| Optimus, DRAM objective | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _mb(cell: Cell) -> str:
    return f"{cell.dram_mb:.2f}" + ("" if cell.optimal else "*")

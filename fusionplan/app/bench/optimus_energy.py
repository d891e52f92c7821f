"""``fusionplan bench optimus-energy``: fusionplan's energy-optimal plans against Optimus's
energy optimum, both priced by Optimus's own code (docs/results.md, "Energy and latency").

Per cell (Optimus's five networks x 128/256/512 KB, 16-bit, batch 1): Optimus's search
under its own objective (its energy estimate), run by its code, with the energy its tool
reports for the plan it picks and the seconds its search took; fusionplan's exact optimum
of Optimus's reported energy (``--objective energy`` under the optimus profile, which prices
every group as Optimus's code does, accel_model/optimus_pricing.py), that plan's energy by
fusionplan and by Optimus's code, and the seconds it took. Like like: both figures are
Optimus's reported energy of a partition of the same network on the same architecture.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fusionplan.app.bench.certified import publish_section
from fusionplan.app.bench.optimus import BUFFERS, NETWORKS, groups_of, optimus_accelerator, solve
from fusionplan.app.bench.optimus_oracle import BUFFER_KB, OptimusRunner, layer_of_ops
from fusionplan.data.zoo import load_zoo_model

BEGIN = "<!-- fusionplan bench optimus-energy: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench optimus-energy: end -->"


def run_optimus_energy_bench(
    report_path: str | Path | None,
    runner: OptimusRunner,
    limit_s: float = 600.0,
    networks: Sequence[str] = NETWORKS,
    command: str = "fusionplan bench optimus-energy",
    progress: Callable[[int], None] | None = None,
) -> str:
    """Every cell (module docstring); the report section, written into ``report_path``."""
    rows: list[dict[str, Any]] = []
    for network in networks:
        graph = load_zoo_model(network)
        names = layer_of_ops(graph, network)
        for buffer in BUFFERS:
            plan, seconds = solve(graph, optimus_accelerator(network, buffer), limit_s, "energy")
            kb = BUFFER_KB[buffer]
            optimum, priced = runner.run([
                {"kind": "optimum", "net": network, "buffer_kb": kb, "objective": "energy"},
                {"kind": "price", "net": network, "buffer_kb": kb,
                 "groups": groups_of(plan, names)},
            ])  # fmt: skip
            bound = plan.result.objective_bound
            rows.append({
                "network": network, "buffer": buffer,
                "optimus_uj": optimum["energy"] / 1e6, "optimus_s": optimum["seconds"],
                "optimus_groups": len(optimum["groups"]),
                "mine_uj": plan.tool_energy_uj, "mine_s": seconds,
                "proven": bound is not None and bound.optimal,
                "priced_uj": sum(g["energy"] for g in priced["groups"]) / 1e6
                if all(g.get("priced") for g in priced["groups"]) else None,
                "groups": len(priced["groups"]),
            })  # fmt: skip
            if progress:
                progress(len(rows))
    section = energy_section(rows, runner, command)
    if report_path is not None:
        publish_section(report_path, section, BEGIN, END)
    return section


def energy_section(rows: list[dict[str, Any]], runner: OptimusRunner, command: str) -> str:
    v = runner.versions()
    lines = [
        f"Command: `{command}`. Optimus {v['commit'][:7] or '(no git)'} run by Python "
        f"{v['python']}, numpy {v['numpy']}, scipy {v['scipy']}. Energy as Optimus's tool "
        "reports it (uJ = 1e6 pJ). Optimus: its search under its own objective, the plan's "
        "reported energy and the search's seconds (network loaded). fusionplan: the exact "
        "optimum of that reported energy (`*`: not proven), by fusionplan and priced by "
        "Optimus's code, and the seconds of the whole `plan` call.",
        "",
        "| network | buffer | Optimus uJ | Optimus s | fusionplan uJ | priced by Optimus uJ "
        "| <= Optimus | fusionplan s | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    wins = 0
    for r in rows:
        priced = r["priced_uj"]
        good = priced is not None and priced <= r["optimus_uj"] * (1 + 1e-12)
        wins += good
        diff = (
            "unpriced" if priced is None else f"{(priced - r['optimus_uj']) / r['optimus_uj']:+.2%}"
        )
        lines.append(
            f"| {r['network'].removeprefix('optimus_')} | {r['buffer']} | "
            f"{r['optimus_uj']:.3f} | {r['optimus_s']:.1f} | "
            f"{r['mine_uj']:.3f}{'' if r['proven'] else '*'} | "
            f"{'-' if priced is None else f'{priced:.3f}'} | {'yes' if good else 'no'} ({diff}) | "
            f"{r['mine_s']:.1f} | {r['optimus_s'] / r['mine_s']:.2f}x |"
        )
    lines += [
        "",
        f"fusionplan's energy optimum, priced by Optimus's code, is at or below Optimus's "
        f"energy optimum on {wins} of {len(rows)} cells.",
    ]
    return "\n".join(lines) + "\n"

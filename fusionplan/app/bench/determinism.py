"""``fusionplan bench determinism``: the same command gives the same bytes.

Every cell (model, scheme, buffer) is planned with the default search in fresh processes,
each with its own ``PYTHONHASHSEED``: ``repeats`` times on an otherwise idle machine, then
once more while ``hog`` busy processes keep every core loaded. Each plan's JSON, with its
``timing`` field left out (the only part allowed to differ: docs/design.md, "Effort"), is
hashed and the hashes compared. The cells' models are then swept on the local engine and
on Ray, and the two tables compared. The DRAM of each cell is set beside a baseline table
(the previous wall-clock-limited ``auto``, from ``bench certified``'s section of a report).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusionplan.app.api import load
from fusionplan.app.bench import machine_line
from fusionplan.app.bench.certified import publish_section
from fusionplan.app.grid import Grid, run_grid
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.engines import make_engine
from fusionplan.ir.errors import ConfigError
from fusionplan.planning.plan import Plan

MODELS = (
    "resnet18", "resnet50", "mobilenet_v2", "squeezenet", "efficientnet_b0",
    "efficientnet_v2_s", "densenet121", "vit_b_16", "googlenet", "inception_v3",
)  # fmt: skip
SCHEMES = ("lbdf", "brr")
BUFFERS = ("128KB", "512KB")
BEGIN = "<!-- fusionplan bench determinism: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench determinism: end -->"

Cell = tuple[str, str, str]  # model, scheme, buffer


def plan_digest(plan: Plan) -> str:
    """SHA-256 of the plan's JSON without its ``timing`` field."""
    data = json.loads(plan.to_json())
    data.get("search", {}).pop("timing", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def plan_cells(cells: Sequence[Cell], effort: float = 1.0) -> Iterator[dict[str, Any]]:
    """Plan each cell here, as ``fusionplan plan MODEL --scheme S --buffer B`` does."""
    graphs: dict[str, Any] = {}
    for model, scheme, buffer in cells:
        graph = graphs.setdefault(model, load(model))
        started = time.perf_counter()
        plan = plan_graph(graph, PlanRequest(buffer=buffer, scheme=scheme, effort=effort))
        assert plan.result is not None and plan.result.exact is not None
        yield {
            "cell": [model, scheme, buffer],
            "digest": plan_digest(plan),
            "dram_mb": plan.metrics.dram_mb,
            "gap": plan.metrics.gap,
            "status": plan.result.exact.status,
            "seconds": time.perf_counter() - started,
        }


def _round(cells: Sequence[Cell], effort: float, hash_seed: int) -> dict[Cell, dict[str, Any]]:
    """One fresh process planning every cell (its own hash seed); results by cell."""
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    spec = json.dumps({"cells": [list(c) for c in cells], "effort": effort})
    out = subprocess.run(
        [sys.executable, "-m", "fusionplan.app.bench.determinism", spec],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {tuple(r["cell"]): r for r in rows}


@contextmanager
def cpu_hog(processes: int) -> Iterator[None]:
    """``processes`` busy loops in the background while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def _engine_tables(cells: Sequence[Cell], effort: float) -> tuple[bool, bool]:
    """Sweep the cells' models x schemes x buffers on the local engine and on Ray; whether
    the two tables are equal, and whether Ray could run at all."""
    models = tuple(dict.fromkeys(c[0] for c in cells))
    schemes = tuple(dict.fromkeys(c[1] for c in cells))
    buffers = tuple(dict.fromkeys(c[2] for c in cells))
    grid = Grid(models, schemes, tuple(PlanRequest(buffer=b, effort=effort) for b in buffers))
    local, _ = run_grid(grid, load, engine=make_engine("local", processes=2))
    try:
        ray, _ = run_grid(grid, load, engine=make_engine("ray", processes=2))
    except ConfigError:  # Ray is an optional extra (one-line error when missing): reported
        return False, False
    return local == ray, True


@dataclass(frozen=True)
class DeterminismConfig:
    cells: tuple[Cell, ...]
    repeats: int = 5
    hog: int = 2
    effort: float = 1.0
    engines: bool = True
    baseline: str | None = None  # a report holding `bench certified`'s section


def run_determinism(
    config: DeterminismConfig,
    report: str | Path,
    command: str,
    progress: Callable[[int, int | None], None] | None = None,
) -> list[dict[str, Any]]:
    """Every round, the comparison, and the report section; returns one row per cell."""
    started = time.perf_counter()
    total = config.repeats + 1 + int(config.engines)
    rounds: list[dict[Cell, dict[str, Any]]] = []
    for i in range(config.repeats):
        rounds.append(_round(config.cells, config.effort, hash_seed=i + 1))
        if progress:
            progress(i + 1, total)
    with cpu_hog(config.hog):
        hogged = _round(config.cells, config.effort, hash_seed=config.repeats + 1)
    if progress:
        progress(config.repeats + 1, total)
    engines_equal, ray_ran = _engine_tables(config.cells, config.effort) if config.engines else (
        False, False)  # fmt: skip
    baseline = read_certified_baseline(config.baseline) if config.baseline else {}
    rows = []
    for cell in config.cells:
        first = rounds[0][cell]
        seconds = [r[cell]["seconds"] for r in rounds]
        rows.append({
            "cell": cell,
            "dram_mb": first["dram_mb"],
            "gap": first["gap"],
            "status": first["status"],
            "median_s": statistics.median(seconds),
            "max_s": max(seconds),
            "same_repeats": sum(r[cell]["digest"] == first["digest"] for r in rounds),
            "same_under_hog": hogged[cell]["digest"] == first["digest"],
            "hog_s": hogged[cell]["seconds"],
            "before_mb": baseline.get(cell),
        })  # fmt: skip
    minutes = (time.perf_counter() - started) / 60
    section = determinism_section(rows, config, command, minutes, engines_equal, ray_ran)
    publish_section(report, section, BEGIN, END)
    return rows


def read_certified_baseline(path: str | Path) -> dict[Cell, float]:
    """``auto MB`` of each cell in the ``bench certified`` section of a report."""
    text = Path(path).read_text(encoding="utf-8")
    begin = text.find("<!-- fusionplan bench certified: begin")
    end = text.find("<!-- fusionplan bench certified: end")
    out: dict[Cell, float] = {}
    for line in text[begin:end].splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) >= 5 and parts[2].upper() in ("LBDF", "BRR"):
            try:
                out[(parts[0], parts[2].lower(), parts[3])] = float(parts[4])
            except ValueError:
                continue
    return out


def determinism_section(
    rows: Sequence[dict[str, Any]],
    config: DeterminismConfig,
    command: str,
    minutes: float,
    engines_equal: bool,
    ray_ran: bool,
) -> str:
    n, k = len(rows), config.repeats
    same = sum(r["same_repeats"] == k and r["same_under_hog"] for r in rows)
    compared = [r for r in rows if r["before_mb"] is not None]
    worse = [r for r in compared if r["dram_mb"] > r["before_mb"] + 5e-4]
    better = [r for r in compared if r["dram_mb"] < r["before_mb"] - 5e-4]
    slowest = max(rows, key=lambda r: r["max_s"])
    engines = (
        ("local and Ray sweep tables identical" if engines_equal
         else "local and Ray sweep tables DIFFER") if ray_ran
        else "Ray: not run"
    )  # fmt: skip
    lines = [
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')} ({minutes:.1f} min); "
        f"machine: {machine_line()}. Default search (auto) at effort {config.effort:g}; each "
        f"round is a fresh process with its own PYTHONHASHSEED; {k} rounds on the idle "
        f"machine, one under {config.hog} busy processes. Plans compared as their JSON "
        "without `timing`.",
        "",
        f"**{n} cells: identical plan JSON on all {k} idle rounds and under the CPU hog on "
        f"{same}; {engines}; against the previous wall-clock auto (idle): "
        f"{len(worse)} worse, {len(better)} better, {len(compared) - len(worse) - len(better)}"
        f" equal of {len(compared)} compared; slowest cell "
        f"{slowest['max_s']:.1f} s ({' '.join(slowest['cell'])}).**",
        "",
        "| model | scheme | buffer | DRAM MB | gap | status | median s | max s | "
        "same (idle) | same (hog) | hog s | before MB |",
        "|" + " --- |" * 12,
    ]
    for r in rows:
        model, scheme, buffer = r["cell"]
        before = "-" if r["before_mb"] is None else f"{r['before_mb']:.3f}"
        lines.append(
            f"| {model} | {scheme.upper()} | {buffer} | {r['dram_mb']:.3f} | {r['gap']:.2%} | "
            f"{r['status']} | {r['median_s']:.2f} | {r['max_s']:.2f} | "
            f"{r['same_repeats']}/{k} | {'yes' if r['same_under_hog'] else 'NO'} | "
            f"{r['hog_s']:.2f} | {before} |"
        )
    return "\n".join(lines)


def default_cells(models: Sequence[str] = MODELS) -> tuple[Cell, ...]:
    return tuple((m, s, b) for m in models for s in SCHEMES for b in BUFFERS)


if __name__ == "__main__":  # one round, in a fresh process (see _round)
    spec = json.loads(sys.argv[1])
    for row in plan_cells([tuple(c) for c in spec["cells"]], spec["effort"]):
        print(json.dumps(row), flush=True)

"""``fusionplan bench fidelity``: how close fusionplan's figures are to schedules that exist
(issue 26). One function per table, each returning its markdown section; :func:`run_fidelity`
publishes each table into the report between its own generated-section markers.

* ``bounds``: every conv and matmul of the zoo run alone, at each buffer and bytes per
  element, under both schemes: its default-profile cost over its I/O lower bound
  (docs/cost-model.md, "I/O lower bounds"), the distance to the physical limit, per model;
  and how many cells of the paper and optimus profiles fall below the bound (those profiles
  mirror other tools' conventions: reported, not fixed).
* ``replay``: every group of every zoo plan, and random groups, built as the schedule its cost
  model priced and replayed (``replay_table``).
* ``optimus``: Optimus's own code as the referee of the optimus profile (``bench optimus``'s
  tables, run only where an Optimus checkout is given; skipped, and nothing published,
  otherwise).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_model import Accelerator, make_cost_model
from accel_model.accelerator import parse_size
from accel_model.io_bounds import fast_memory, io_lower_bound
from fusionplan.app.bench import machine_line, per_model
from fusionplan.app.bench.certified import publish_section
from fusionplan.app.bench.optimus import BUFFERS as OPTIMUS_BUFFERS
from fusionplan.app.bench.optimus import NETWORKS as OPTIMUS_NETWORKS
from fusionplan.app.bench.optimus import run_optimus_bench
from fusionplan.app.bench.optimus_oracle import OptimusRunner
from fusionplan.app.bench.replay_table import replay_table
from fusionplan.data.zoo import load_zoo_model, zoo_names
from fusionplan.engines import Engine
from fusionplan.ir.graph import OpGraph

SCHEMES = ("lbdf", "brr")
OTHER_PROFILES = (("paper", ("lbdf", "brr")), ("optimus", ("brr",)))
"""Profiles that mirror other tools, with the schemes they apply to."""

Progress = Callable[[int, int], None]
Row = dict[str, Any]


@dataclass(frozen=True)
class FidelityConfig:
    """The cells every table covers."""

    models: tuple[str, ...] = zoo_names()
    buffers: tuple[str, ...] = ("64KB", "128KB", "512KB")
    bytes_per_element: tuple[int, ...] = (1, 2)
    optimus: OptimusRunner | None = None  # the ``optimus`` table runs only with a checkout
    engine: Engine | None = None  # where the per-model tasks run (None: this process)
    optimus_limit_s: float = 60.0  # work per exact search of the optimus table
    optimus_data: Path = Path("bench-out/optimus_oracle.json")  # Optimus's figures, rewritten
    cache: Path | None = None  # the replay table's finished models (a stopped run resumes)

    def points(self) -> list[tuple[str, int]]:
        return list(itertools.product(self.buffers, self.bytes_per_element))


def layers(graph: OpGraph) -> list[int]:
    """The convs and matmuls of ``graph``: the ops an I/O lower bound is reported for."""
    return [v for v in range(len(graph)) if graph.nodes[v].kind in ("conv", "matmul")]


def layer_ratios(
    graph: OpGraph, buffer: str, b: int, scheme: str, profile: str
) -> list[tuple[float, bool]]:
    """Per conv and matmul of ``graph`` run alone (its singleton group) under ``profile``:
    its cost over ``b`` times its I/O lower bound, and whether the pebble bound (not the
    compulsory traffic) sets that bound."""
    ops = layers(graph)
    model = make_cost_model(graph, Accelerator.of(buffer, scheme, b, profile=profile))
    s = fast_memory(parse_size(buffer), b)
    found = []
    for v in ops:
        bound = io_lower_bound(graph, v, s)
        found.append(
            (model.dram_bytes(1 << v) / (b * bound.elements), bound.pebble > bound.compulsory)
        )
    return found


def bounds_row(name: str, points: Sequence[tuple[str, int]]) -> Row:
    """One model's row (an engine task): the default profile's ratios per scheme at every
    (buffer, bytes) point, and the paper and optimus profiles' cells below their bound."""
    graph = load_zoo_model(name)
    row: Row = {"model": name, "layers": len(layers(graph))}
    for scheme in SCHEMES:
        row[scheme] = [
            found for buffer, b in points
            for found in layer_ratios(graph, buffer, b, scheme, "fusionplan")
        ]  # fmt: skip
    for profile, schemes in OTHER_PROFILES:
        ratios = [
            r for (buffer, b), scheme in itertools.product(points, schemes)
            for r, _ in layer_ratios(graph, buffer, b, scheme, profile)
        ]  # fmt: skip
        row[profile] = (sum(r < 1 for r in ratios), len(ratios))
    return row


def bounds_rows(config: FidelityConfig, progress: Progress | None = None) -> list[Row]:
    """Every model's :func:`bounds_row`, one task per model on ``config.engine``, in the
    config's model order."""
    return per_model(
        bounds_row, config.models, config.points(), config.engine, "bounding the layers of",
        progress,
    )  # fmt: skip


def _spread(ratios: Sequence[float]) -> str:
    if not ratios:
        return "-"
    return f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}"


def _ratios(row: Row, scheme: str, pebble_only: bool = False) -> list[float]:
    return [r for r, pebble in row[scheme] if pebble or not pebble_only]


def bounds_section(rows: Sequence[Row], config: FidelityConfig, command: str) -> str:
    """The per-model table and its summary line."""
    default = [r for row in rows for scheme in SCHEMES for r in _ratios(row, scheme)]
    pebble = [r for row in rows for scheme in SCHEMES for r in _ratios(row, scheme, True)]
    below = sum(r < 1 for r in default)
    within = sum(r <= 2 for r in default)
    lines = [
        f"Generated by `{command}`; machine: {machine_line()}. Every conv and matmul, "
        f"run alone, at {', '.join(config.buffers)} and "
        f"{' and '.join(map(str, config.bytes_per_element))} bytes per element: its singleton "
        "DRAM over `b` times its I/O lower bound, `max(io + W, pebble bound)` with fast "
        "memory `buffer / b + 3` elements. min / median / max per model over layers and "
        "cells (a ratio of 1.00: the layer moves its io and weights once); pebble: the cells "
        "where the pebble bound exceeds io + W (no schedule moves the layer's operands only "
        "once), their count and median ratio; below: cells under the bound. The paper and "
        "optimus profiles mirror other tools' conventions (the paper's unfusable op moves "
        "io + W once; the optimus profile prices as Optimus's code does): their cells "
        "below the bound are reported, not fixed.",
        "",
        f"**Default profile: {len(default)} cells, {below} below the bound, {within} within "
        f"2x of it, largest ratio {max(default, default=0):.2f}; where the pebble bound binds "
        f"({len(pebble)} cells) the median ratio is "
        f"{statistics.median(pebble) if pebble else 0:.2f}.**",
        "",
        "| model | layers | LBDF cost / bound | BRR cost / bound | pebble | below | "
        "paper below | optimus below |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        below_row = sum(r < 1 for scheme in SCHEMES for r in _ratios(row, scheme))
        binding = [r for scheme in SCHEMES for r in _ratios(row, scheme, True)]
        paper, optimus = row["paper"], row["optimus"]
        at_pebble = f"{len(binding)}, {statistics.median(binding):.2f}" if binding else "0"
        lines.append(
            f"| {row['model']} | {row['layers']} | {_spread(_ratios(row, 'lbdf'))} | "
            f"{_spread(_ratios(row, 'brr'))} | {at_pebble} | {below_row} | "
            f"{paper[0]} of {paper[1]} | {optimus[0]} of {optimus[1]} |"
        )
    return "\n".join(lines) + "\n"


def bounds_table(config: FidelityConfig, command: str, progress: Progress | None = None) -> str:
    """The ``bounds`` table: single-layer costs over their I/O lower bounds."""
    return bounds_section(bounds_rows(config, progress), config, command)


def optimus_table(
    config: FidelityConfig, command: str, progress: Progress | None = None
) -> str | None:
    """The ``optimus`` table: ``bench optimus``'s cells and group checks (Optimus's figures
    written to ``config.optimus_data``); None (nothing to publish) without a checkout."""
    if config.optimus is None:
        return None
    total = len(OPTIMUS_NETWORKS) * len(OPTIMUS_BUFFERS)
    return run_optimus_bench(
        None,
        config.optimus,
        config.optimus_limit_s,
        command=command,
        progress=(lambda done: progress(done, total)) if progress else None,
        data_path=config.optimus_data,
    )


@dataclass(frozen=True)
class Table:
    """One table of the bench: what it measures and how it is built."""

    title: str
    build: Callable[[FidelityConfig, str, Progress | None], str | None]


TABLES: dict[str, Table] = {
    "bounds": Table("single-layer costs over their I/O lower bounds", bounds_table),
    "replay": Table("closed forms against replayed schedules", replay_table),
    "optimus": Table("Optimus's own code as the optimus profile's referee", optimus_table),
}


def markers(name: str) -> tuple[str, str]:
    """The generated-section markers of table ``name`` in the report."""
    tag = f"fusionplan bench fidelity {name}"
    return f"<!-- {tag}: begin (generated; edit outside these markers) -->", f"<!-- {tag}: end -->"


def run_fidelity(
    report: str | Path,
    names: Sequence[str],
    config: FidelityConfig,
    command: str = "fusionplan bench fidelity",
    progress: Progress | None = None,
) -> dict[str, str]:
    """Build tables ``names`` and publish each into ``report``; returns the sections built
    (a table with nothing to run, ``optimus`` without a checkout, is left out)."""
    sections = {}
    for name in names:
        section = TABLES[name].build(config, command, progress)
        if section is not None:
            sections[name] = section
            publish_section(report, section, *markers(name))
    return sections

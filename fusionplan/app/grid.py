"""Sweep grids: models x schemes x buffers, one warm-started sweep per (model, scheme) task.

A task is one model under one scheme across every buffer (``sweep_graph``, smallest buffer
first, each plan seeding the next), so its curve never rises with the buffer; tasks are
independent and run on any engine. The driver loads each model once and ships the graphs to
the workers once; finished tasks are kept in ``runs.jsonl`` (the bench's result store), so an
interrupted grid resumes, and a task that still fails after its retries is reported in the
table, never dropped, and run again on the next rerun.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from accel_model.accelerator import format_size
from fusionplan.app.bench.runner import ResultStore
from fusionplan.app.pipeline import PlanRequest, sweep_graph
from fusionplan.app.report import sweep_rows
from fusionplan.data.shards import graph_fingerprint
from fusionplan.engines import Engine, Job, LocalEngine, Outcome
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.io import write_atomic
from fusionplan.planning.plan import Plan

GRID_FIELDS = (
    "model",
    "scheme",
    "buffer",
    "buffer_bytes",
    "dram_mb",
    "fusable_dram_mb",
    "unfusable_dram_mb",
    "lower_bound_mb",
    "gap",
    "bound_method",
    "mbu_kb",
    "groups",
    "unfusable_ops",
    "energy_uj",
    "energy_bound_uj",
    "latency_ms",
    "latency_bound_ms",
    "error",
)
"""The grid table's columns; a failed task has one row per buffer with only ``error`` set."""


@dataclass(frozen=True)
class GridTask:
    model: str
    scheme: str
    key: str  # identifies the task and every setting its rows depend on


@dataclass(frozen=True)
class Grid:
    """What a grid computes: every request is planned for every model under every scheme."""

    models: tuple[str, ...]
    schemes: tuple[str, ...]
    requests: tuple[PlanRequest, ...]  # one per buffer; their scheme is replaced per task
    load_options: str = ""  # how the models are loaded (input shapes, ...): part of the key

    def tasks(self, fingerprints: dict[str, str]) -> list[GridTask]:
        """The tasks, keyed by every setting and by each model graph's content, so a rerun
        with other settings or an edited model file never reuses stale rows."""
        settings = [{k: v for k, v in asdict(r).items() if k != "scheme"} for r in self.requests]
        text = json.dumps([settings, self.load_options], sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return [
            GridTask(m, s, f"grid|{m}|{s}|{digest}|{fingerprints[m][:16]}")
            for m in self.models
            for s in self.schemes
        ]


def grid_rows(model: str, plans: Sequence[Plan]) -> list[dict[str, Any]]:
    """The table rows of one model's sweep, in :data:`GRID_FIELDS` order: every sweep, on
    any engine, of one model or many, writes these columns."""
    return [{f: row.get(f, "") for f in GRID_FIELDS} for row in
            ({"model": model, **r} for r in sweep_rows(list(plans)))]  # fmt: skip


def _sweep_task(task: GridTask, shared: tuple[dict[str, OpGraph], Grid]) -> list[dict[str, Any]]:
    """One engine task: a sweep of one model under one scheme, smallest buffer first."""
    graphs, grid = shared
    requests = [replace(r, scheme=task.scheme) for r in grid.requests]
    return grid_rows(task.model, sweep_graph(graphs[task.model], requests))


def _failure_rows(task: GridTask, grid: Grid, error: str) -> list[dict[str, Any]]:
    sizes = sorted(r.accelerator().buffer_bytes for r in grid.requests)
    return [
        {"model": task.model, "scheme": task.scheme, "buffer": format_size(b), "buffer_bytes": b,
         "error": error}
        for b in sizes
    ]  # fmt: skip


def run_grid(
    grid: Grid,
    load: Callable[[str], OpGraph],
    *,
    engine: Engine | None = None,
    out_dir: str | Path | None = None,
    retries: int = 2,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[dict[str, Any]], list[Outcome]]:
    """Every grid row (models, then schemes, then buffers ascending) and the outcomes of the
    tasks run now. With ``out_dir``, finished tasks are stored there and reused on a rerun;
    failed ones are stored too (the table shows them) but run again on the next rerun.
    """
    graphs = {m: load(m) for m in dict.fromkeys(grid.models)}  # bad input fails here, early
    tasks = grid.tasks({m: graph_fingerprint(g) for m, g in graphs.items()})
    store = ResultStore(out_dir) if out_dir is not None else None
    results: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        row = None if store is None else store.rows.get(t.key)
        if row is not None and not any(r.get("error") for r in row["rows"]):
            results[t.key] = row["rows"]  # a failed task is run again
    todo = [t for t in tasks if t.key not in results]
    graphs = {m: graphs[m] for m in dict.fromkeys(t.model for t in todo)}
    done = len(tasks) - len(todo)
    if progress:
        progress(done, len(tasks))
    engine = engine or LocalEngine(1)
    with Job(engine, _sweep_task, todo, shared=(graphs, grid), retries=retries) as job:
        for outcome in job:
            task = todo[outcome.index]
            rows = outcome.value if outcome.ok else _failure_rows(task, grid, str(outcome.error))
            results[task.key] = rows
            if store is not None:
                store.add({"key": task.key, "rows": rows})
            done += 1
            if progress:
                progress(done, len(tasks))
    table = [{f: row.get(f, "") for f in GRID_FIELDS} for t in tasks for row in results[t.key]]
    return table, job.outcomes


def write_grid_plot(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """DRAM over its proven lower bound against buffer size: one panel per scheme, one line
    per model (the ratio puts models of any size on one axis; 1.0 is proven optimal)."""
    # matplotlib (1 s to import) loads only when a plot is asked for
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # only after choosing the headless backend

    good = [r for r in rows if not r["error"]]
    schemes = list(dict.fromkeys(r["scheme"] for r in good)) or [""]
    fig, axes = plt.subplots(1, len(schemes), figsize=(5 * len(schemes), 3.6), squeeze=False)
    for ax, scheme in zip(axes[0], schemes, strict=True):
        for model in dict.fromkeys(r["model"] for r in good):
            mine = [r for r in good if r["model"] == model and r["scheme"] == scheme]
            if not mine:
                continue
            kb = [r["buffer_bytes"] / 1024 for r in mine]
            ax.plot(kb, [r["dram_mb"] / r["lower_bound_mb"] for r in mine], "o-", label=model)
        ax.set_xscale("log", base=2)
        sizes = sorted({r["buffer_bytes"]: r["buffer"] for r in good}.items())
        ax.set_xticks([b / 1024 for b, _ in sizes], [name for _, name in sizes])
        ax.set_xlabel("on-chip buffer")
        ax.set_title(scheme.upper())
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("DRAM / lower bound")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    try:
        return write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=110))
    finally:
        plt.close(fig)

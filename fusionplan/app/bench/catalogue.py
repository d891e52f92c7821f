"""``fusionplan bench catalogue``: every torchvision model exported, imported and planned.

For each model (the paper's twelve zoo entries, then every other torchvision classification
and segmentation model, see :mod:`fusionplan.data.zoo`): export into the zoo cache (or a cache hit),
import (timed; op count, weights), the compulsory traffic, and the best DRAM of one search
at each (scheme, buffer) point. A model that fails at some stage gets a row with a one-line
reason instead of numbers; the bench goes on.

Rows go to ``runs.jsonl`` through the paper bench's :class:`ResultStore` (appended and
fsynced as each model ends), keyed by model and settings, so an interrupted run resumes and
a run with other settings does not reuse them. Models run one at a time in a worker process:
a crash of torch's exporter (a segfault, the OOM killer) then costs that model's row only.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from accel_model.bounds import compulsory_traffic
from fusionplan.app.bench import machine_line, splice
from fusionplan.app.bench.render import catalogue_table, point_label
from fusionplan.app.bench.runner import ResultStore, resume_rows
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.data.zoo import is_cached, torchvision_models, zoo_entry, zoo_names, zoo_path
from fusionplan.engines import Engine, LocalEngine
from fusionplan.ir.errors import FusionPlanError
from fusionplan.ir.io import write_text_atomic
from fusionplan.ir.onnx_import import load_model

MB = 2**20
BEGIN = "<!-- fusionplan bench catalogue: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench catalogue: end -->"
CSV_FILE = "catalogue.csv"

Row = dict[str, Any]


@dataclass(frozen=True)
class CatalogueConfig:
    """The search run at every (scheme, buffer) point; all of it is part of a row's key."""

    schemes: tuple[str, ...] = ("lbdf", "brr")
    buffers: tuple[str, ...] = ("128KB", "512KB")
    search: str = "ls"
    splitter: str = "tree"
    budget: int = 1000
    seed: int = 0
    bytes_per_element: int = 1

    def points(self) -> list[tuple[str, str]]:
        """(scheme, buffer) pairs in column order."""
        return [(s, b) for s in self.schemes for b in self.buffers]

    def request(self, scheme: str, buffer: str) -> PlanRequest:
        return PlanRequest(
            buffer=buffer,
            scheme=scheme,
            search=self.search,
            splitter=self.splitter,
            budget=self.budget,
            seed=self.seed,
            bytes_per_element=self.bytes_per_element,
        )

    def check(self) -> CatalogueConfig:
        """Reject bad settings before any model is exported."""
        for scheme, buffer in self.points():
            self.request(scheme, buffer).check()
        return self

    def key(self, model: str) -> str:
        return f"catalogue|{model}|{json.dumps(asdict(self), sort_keys=True)}"


def catalogue_models() -> tuple[str, ...]:
    """Every torchvision classification and segmentation model by zoo name: the paper's
    entries (``squeezenet1_0`` is ``squeezenet``) first, then the rest in torchvision order."""
    return (*zoo_names(), *torchvision_models())


def _reason(exc: BaseException) -> str:
    """One line: a ``FusionPlanError`` says it all; anything else is named by its type."""
    text = " ".join(str(exc).split())
    if not isinstance(exc, FusionPlanError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def measure(model: str, config: CatalogueConfig) -> Row:
    """Export, import and plan one model; its row (``error`` names the failing stages)."""
    row: Row = {"key": config.key(model), "model": model, "dram_mb": {}}
    errors = []
    try:
        entry = zoo_entry(model)
        row["input"] = entry.input_size
        cached = is_cached(model)
        if not cached:
            # torch is imported before the clock starts: its import is not export time
            import torch  # noqa: F401
        t0 = time.perf_counter()
        path = zoo_path(model)
        row["export_s"] = None if cached else round(time.perf_counter() - t0, 3)
    except Exception as exc:  # a row that says why, never a crashed bench
        return {**row, "error": f"export: {_reason(exc)}"}
    try:
        t0 = time.perf_counter()
        graph = load_model(path, name=entry.name)
        row["import_s"] = round(time.perf_counter() - t0, 4)
    except Exception as exc:
        return {**row, "error": f"import: {_reason(exc)}"}
    row.update(
        ops=len(graph),
        weights_m=round(sum(n.weights for n in graph.nodes) / 1e6, 3),
        compulsory_mb=compulsory_traffic(graph, config.bytes_per_element) / MB,
        search_s=0.0,
    )
    for scheme, buffer in config.points():
        try:
            plan = plan_graph(graph, config.request(scheme, buffer))
        except Exception as exc:
            errors.append(f"plan {scheme} {buffer}: {_reason(exc)}")
            continue
        row["dram_mb"][point_label(scheme, buffer)] = plan.metrics.dram_mb
        assert plan.result is not None  # plan_graph always attaches its search result
        row["search_s"] = round(row["search_s"] + plan.result.wall_time_s, 3)
    if errors:
        row["error"] = "; ".join(errors)
    return row


def _measure_task(model: str, config: CatalogueConfig) -> Row:
    return measure(model, config)


def run_catalogue(
    models: Sequence[str],
    config: CatalogueConfig,
    out_dir: str | os.PathLike,
    report_path: str | os.PathLike,
    *,
    engine: Engine | None = None,
    retries: int = 0,
    isolate: bool = True,
    retry_failed: bool = False,
    command: str = "fusionplan bench catalogue",
    progress: Callable[[int, int], None] | None = None,
) -> list[Row]:
    """Measure (or resume) ``models`` under ``config`` on ``engine``; after every model the
    CSV beside ``runs.jsonl`` and the report's generated section are rewritten atomically.
    Returns the rows in ``models`` order. The default engine is one worker process
    (``isolate=False``: this process, for tests), so a crash costs one model's row."""
    config.check()
    # an unknown name fails before any work; squeezenet1_0 and squeezenet are one model
    names = list(dict.fromkeys(zoo_entry(m).name for m in models))
    out, report_path = Path(out_dir), Path(report_path)
    store = ResultStore(out)
    started = time.perf_counter()

    def publish(reused: int) -> list[Row]:
        rows = [store.rows[k] for n in names if (k := config.key(n)) in store.rows]
        minutes = (time.perf_counter() - started) / 60
        preamble = _preamble(config, command, len(names), len(rows), reused, minutes)
        _write_outputs(rows, config, out / CSV_FILE, report_path, preamble)
        return rows

    def failed(name: str, error: str) -> Row:
        row = {"key": config.key(name), "model": name, "dram_mb": {}}
        return {**row, "input": zoo_entry(name).input_size, "error": error}

    engine = engine or LocalEngine(1, isolate=isolate)
    return resume_rows(
        names, config.key, _measure_task, config, store, publish, failed,
        engine=engine, retries=retries, retry_failed=retry_failed, progress=progress,
    )  # fmt: skip


def _preamble(
    config: CatalogueConfig, command: str, total: int, finished: int, reused: int, minutes: float
) -> str:
    c = config
    return (
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')}: {finished} of {total} "
        f"models ({reused} reused from an earlier invocation), {minutes:.1f} min. Search "
        f"{c.search}, splitter {c.splitter}, budget {c.budget} plans, seed {c.seed}, "
        f"{c.bytes_per_element} B/element. Machine: {machine_line()}. DRAM is the total "
        "traffic (all ops) of the best plan, which passed `Plan.validate()`; the lower bound "
        "is the compulsory traffic (inputs, outputs and weights once). Export s is empty "
        "where the zoo cache already held the model."
    )


def _write_outputs(
    rows: list[Row], config: CatalogueConfig, csv_path: Path, report_path: Path, preamble: str
) -> None:
    write_text_atomic(csv_path, to_csv(rows, config))
    section = f"{preamble}\n\n{catalogue_table(rows, config.points())}\n"
    write_text_atomic(report_path, splice(report_path, section, begin=BEGIN, end=END))


def to_csv(rows: list[Row], config: CatalogueConfig) -> str:
    """One line per model; empty cells where a stage did not run."""
    points = [point_label(s, b) for s, b in config.points()]
    fields = ["model", "input", "ops", "weights_m", "export_s", "import_s", "compulsory_mb"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*fields, *(f"dram_mb_{p}" for p in points), "search_s", "error"])
    for r in rows:
        writer.writerow(
            [
                *(r.get(f) for f in fields),
                *(r["dram_mb"].get(p) for p in points),
                r.get("search_s"),
                r.get("error", ""),
            ]
        )
    return buffer.getvalue()

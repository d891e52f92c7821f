"""Measurements behind ``docs/results.md``: search throughput and zoo export/import time.

It assembles runs with :func:`fusionplan.app.pipeline.assemble` and returns rows; the CLI
prints them.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from fusionplan.app.api import load
from fusionplan.app.pipeline import PlanRequest, assemble
from fusionplan.data.zoo import data_path, zoo_entry, zoo_path
from fusionplan.ir.onnx_import import load_model


@dataclass(frozen=True)
class SpeedRow:
    model: str
    search: str
    splitter: str
    plans_per_second: float  # median over repeats
    runs: tuple[float, ...]
    best_dram_mb: float


def search_speed(models: Sequence[str], request: PlanRequest, repeats: int = 3) -> list[SpeedRow]:
    """Plans per second of one search per model: a fresh problem (cold caches) per run."""
    request.check()
    rows = []
    for spec in models:
        graph = load(spec)
        rates, best = [], 0.0
        for _ in range(repeats):
            run = assemble(graph, request)
            result = run.search.run(run.problem, request.seed)
            rates.append(result.plans_per_second)
            best = result.best.dram / 2**20
        rows.append(
            SpeedRow(
                graph.name,
                request.search,
                request.splitter,
                statistics.median(rates),
                tuple(rates),
                best,
            )
        )
    return rows


@dataclass(frozen=True)
class ZooTimeRow:
    model: str
    export_s: float
    import_s: float
    ops: int
    weights_mb: float


def zoo_times(models: Sequence[str]) -> list[ZooTimeRow]:
    """Export (into an empty temporary cache) and import time of each zoo model."""
    import torch  # noqa: F401  (import cost excluded from the export time)

    rows = []
    old = os.environ.get("FUSIONPLAN_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["FUSIONPLAN_CACHE_DIR"] = tmp
        try:
            for name in models:
                name = zoo_entry(name).name
                t0 = time.perf_counter()
                path = zoo_path(name)
                t1 = time.perf_counter()
                graph = load_model(path, name=name)
                t2 = time.perf_counter()
                size = data_path(path).stat().st_size / 2**20 if data_path(path).exists() else 0
                rows.append(ZooTimeRow(name, t1 - t0, t2 - t1, len(graph), size))
        finally:
            if old is None:
                os.environ.pop("FUSIONPLAN_CACHE_DIR", None)
            else:
                os.environ["FUSIONPLAN_CACHE_DIR"] = old
    return rows

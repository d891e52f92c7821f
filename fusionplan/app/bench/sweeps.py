"""DRAM-vs-buffer sweeps of zoo models: is every curve monotone, and what did the
single-layer cost change? (docs/cost-model.md, "Single-layer cost").

For each model and scheme it runs a warm-started heuristic sweep (what ``fusionplan sweep``
does) and the exact optimum at every buffer under both single-layer conventions, and reports
where each curve rises. Rows are plain data; the CLI prints them as a markdown table.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from fusionplan.app.api import load
from fusionplan.app.pipeline import PlanRequest, plan_graph, sweep_graph
from fusionplan.ir.graph import OpGraph
from fusionplan.search.effort import EXACT_UNITS, effort_for_seconds

MB = 1024**2


@dataclass(frozen=True)
class SweepRow:
    model: str
    scheme: str
    buffers: tuple[int, ...]
    heuristic_mb: tuple[float, ...]  # warm-started sweep, tiled costs
    optimum_mb: tuple[float, ...]  # exact, tiled costs
    paper_optimum_mb: tuple[float, ...]  # exact, the paper's single-layer convention
    unfusable: tuple[int, ...]  # unfusable ops per buffer
    proven: bool  # every exact run proved its optimum within the time limit
    seconds: float

    @staticmethod
    def rises(curve: Sequence[float]) -> int:
        """How many steps of a curve go up (a byte counts: curves compare exact bytes)."""
        return sum(b > a for a, b in pairwise(curve))


def _exact(graph: OpGraph, buffer: int, scheme: str, single_layer: str, limit: float):
    request = PlanRequest(
        buffer=buffer,
        scheme=scheme,
        search="exact",
        budget=1,
        single_layer=single_layer,
        search_options={"effort": effort_for_seconds(limit, EXACT_UNITS)},
    )
    return plan_graph(graph, request)


def sweep_model(
    model: str,
    scheme: str,
    buffers: Sequence[int],
    *,
    search: str = "ls",
    budget: int = 500,
    seed: int = 0,
    exact_limit_s: float = 60.0,
) -> SweepRow:
    """One model and scheme across ``buffers`` (bytes, any order; reported ascending)."""
    t0 = time.perf_counter()
    graph = load(model)
    sizes = sorted(buffers)
    requests = [
        PlanRequest(buffer=b, scheme=scheme, search=search, budget=budget, seed=seed) for b in sizes
    ]
    heuristic = sweep_graph(graph, requests)
    tiled = [_exact(graph, b, scheme, "tiled", exact_limit_s) for b in sizes]
    paper = [_exact(graph, b, scheme, "paper", exact_limit_s) for b in sizes]
    return SweepRow(
        model=graph.name,
        scheme=scheme,
        buffers=tuple(sizes),
        heuristic_mb=tuple(p.metrics.dram_bytes / MB for p in heuristic),
        optimum_mb=tuple(p.metrics.dram_bytes / MB for p in tiled),
        paper_optimum_mb=tuple(p.metrics.dram_bytes / MB for p in paper),
        unfusable=tuple(p.metrics.unfusable_ops for p in tiled),
        proven=all(p.result and p.result.exact and p.result.exact.optimal for p in tiled + paper),
        seconds=time.perf_counter() - t0,
    )

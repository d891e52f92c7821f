"""Execute bench runs on an engine (local processes or Ray) and keep every result on disk.

Results go to one JSON-lines file, one line per finished run, appended and fsynced as each
run ends; a restarted bench skips the runs already there (a torn last line is ignored), so
an interruption loses at most the runs in flight.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fusionplan.app.api import load
from fusionplan.app.bench.experiments import Run
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.engines import Engine, Job, LocalEngine, TaskFn
from fusionplan.ir.errors import FusionPlanError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.io import write_text_atomic
from fusionplan.search.effort import EXACT_UNITS, effort_for_seconds

MB = 2**20
RESULTS_FILE = "runs.jsonl"
TIMING_FILE = "timing.json"  # the last invocation's wall, setup and driver seconds


class ResultStore:
    """Finished runs by key, backed by an append-only JSON-lines file."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / RESULTS_FILE
        self.rows: dict[str, dict[str, Any]] = {}
        if not self.path.is_file():
            return
        text = self.path.read_text()
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by an interruption: that run is simply redone
            if isinstance(row, dict) and "key" in row:
                self.rows[row["key"]] = row
        if text and not text.endswith("\n"):  # drop the torn tail before appending again
            body = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.rows.values())
            write_text_atomic(self.path, body)

    def add(self, row: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.rows[row["key"]] = row

    def get(self, run: Run) -> dict[str, Any] | None:
        return self.rows.get(run.key)


_GRAPHS: dict[str, OpGraph] = {}


def resume_rows(
    names: Sequence[str],
    key: Callable[[str], str],
    task: TaskFn,
    shared: Any,
    store: ResultStore,
    publish: Callable[[int], list[dict[str, Any]]],
    failed: Callable[[str, str], dict[str, Any]],
    *,
    engine: Engine,
    retries: int = 0,
    retry_failed: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """A per-model bench that resumes: ``task(name, shared)`` on ``engine`` for each of
    ``names`` without a row in ``store`` (or with a failed one, under ``retry_failed``); each
    row (``failed(name, error)`` for a task that raised) is stored and ``publish(reused)``
    rewrites the bench's outputs after every model, so an interruption loses one model's
    work. Returns the final ``publish``."""

    def done(name: str) -> bool:
        row = store.rows.get(key(name))
        return row is not None and not (retry_failed and "error" in row)

    todo = [n for n in names if not done(n)]
    reused = finished = len(names) - len(todo)
    if progress:
        progress(reused, len(names))
    with Job(engine, task, todo, shared=shared, retries=retries) as job:
        for outcome in job:
            name = todo[outcome.index]
            store.add(outcome.value if outcome.ok else failed(name, outcome.error))
            publish(reused)
            finished += 1
            if progress:
                progress(finished, len(names))
    return publish(reused)


def _graph(model: str) -> OpGraph:
    graph = _GRAPHS.get(model)
    if graph is None:
        graph = _GRAPHS[model] = load(model)
    return graph


def execute(
    run: Run, exact_time_limit_s: float = 60.0, graph: OpGraph | None = None
) -> dict[str, Any]:
    """Run one search; its result as a JSON-friendly row (the plan is validated first).
    ``graph`` is the run's model when the caller has it, else it is loaded."""
    effort = effort_for_seconds(exact_time_limit_s, EXACT_UNITS)
    options = {"effort": effort} if run.search == "exact" else {}
    request = PlanRequest(
        buffer=run.buffer,
        scheme=run.scheme,
        search=run.search,
        splitter=run.splitter,
        budget=run.budget,
        seed=run.seed,
        profile="paper",  # the paper's tables keep its BRR and single-layer conventions
        bound_effort=0.0,  # the paper's tables report DRAM; the static bound is enough
        search_options=options,
    )
    row: dict[str, Any] = {"key": run.key, **asdict(run)}
    try:
        plan = plan_graph(graph if graph is not None else _graph(run.model), request)
    except FusionPlanError as exc:  # reported in the tables, never silently dropped
        return {**row, "error": str(exc)}
    m, result = plan.metrics, plan.result
    assert result is not None  # plan_graph always attaches its search result
    row.update(
        dram_mb=m.dram_mb,
        fusable_dram_mb=m.fusable_dram_mb,
        mbu_kb=m.mbu_kb,
        compulsory_mb=m.compulsory_bytes / MB,
        search_s=round(result.wall_time_s, 3),
        rectify_rate=round(result.rectify_rate, 4),
        invalid_groups=result.invalid_groups,
        explained_groups=result.explained_groups,
        explain_s=round(result.explain_seconds, 3),
        trace=[(n, dram / MB) for n, dram in result.trace],
    )
    if result.exact is not None:
        bound = result.exact
        row.update(optimal=bound.optimal, lower_bound_mb=bound.lower_bound_bytes / MB)
    return row


def _estimated_cost(run: Run, ops: dict[str, int]) -> float:
    """Rough relative cost, to start the longest runs first (better load balance)."""
    per_group = {"gnne": 30.0, "pg": 2.0, "rg": 3.0}.get(run.splitter, 1.0)
    search = {"rs": 3.0, "exact": 0.01}.get(run.search, 1.0)
    return run.budget * per_group * search * ops.get(run.model, 100)


def _execute_task(run: Run, shared: tuple[dict[str, OpGraph], float]) -> dict[str, Any]:
    """One engine task: a run on the graphs every worker received once."""
    graphs, exact_time_limit_s = shared
    return execute(run, exact_time_limit_s, graphs[run.model])


def run_all(
    runs: Iterable[Run],
    store: ResultStore,
    *,
    engine: Engine | None = None,
    retries: int = 2,
    exact_time_limit_s: float = 60.0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Execute the runs ``store`` lacks on ``engine`` (default: this process); every run's
    row by key. A run that fails even after ``retries`` is stored with its error."""
    started = time.perf_counter()
    runs = list(runs)
    todo = [r for r in runs if store.get(r) is None or store.get(r).get("task_failed")]
    # Import every model here once: workers get the graphs, never race to fill the zoo cache.
    graphs = {m: _graph(m) for m in sorted({r.model for r in todo})}
    ops = {m: len(g) for m, g in graphs.items()}
    todo.sort(key=lambda r: _estimated_cost(r, ops), reverse=True)
    total, done = len(runs), len(runs) - len(todo)
    if progress:
        progress(done, total)
    shared = (graphs, exact_time_limit_s)
    engine = engine or LocalEngine(1)
    setup_s = time.perf_counter() - started  # serial work, for scaling estimates
    with Job(engine, _execute_task, todo, shared=shared, retries=retries) as job:
        for outcome in job:
            run = todo[outcome.index]
            # a task that failed (not a search that reported bad input) runs again on a rerun
            failure = {"key": run.key, **asdict(run), "error": outcome.error, "task_failed": True}
            row = outcome.value if outcome.ok else failure
            store.add({**row, "task_s": round(outcome.seconds, 3)})
            done += 1
            if progress:
                progress(done, total)
    if todo:
        timing = {
            "engine": engine.describe(),
            "runs": len(todo),
            "wall_s": round(time.perf_counter() - started, 3),
            "setup_s": round(setup_s, 3),
            "driver_s": round(setup_s + job.driver_s, 3),
        }
        write_text_atomic(store.directory / TIMING_FILE, json.dumps(timing, indent=1) + "\n")
    return {r.key: store.rows[r.key] for r in runs}

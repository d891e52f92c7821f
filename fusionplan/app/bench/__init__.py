"""``fusionplan bench``: the paper's experiments on this product's cost models.

:mod:`~fusionplan.app.bench.experiments` says which runs each table and figure needs,
:mod:`~fusionplan.app.bench.runner` executes them in parallel and resumably,
:mod:`~fusionplan.app.bench.valid_share` computes Figure 3, :mod:`~fusionplan.app.bench.render`
writes markdown and PNGs, and :func:`run_bench` ties them together. Search throughput and
zoo timings live in :mod:`~fusionplan.app.bench.speed`; every torchvision model, imported and
planned, in :mod:`~fusionplan.app.bench.catalogue` (its own generated section).
"""

from __future__ import annotations

import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fusionplan.app.bench import render
from fusionplan.app.bench.experiments import BenchConfig, Run, planned_runs
from fusionplan.app.bench.runner import ResultStore, resume_rows, run_all
from fusionplan.app.bench.valid_share import valid_share
from fusionplan.engines import Engine, Job, LocalEngine, TaskFn
from fusionplan.ir.errors import FusionPlanError
from fusionplan.ir.io import write_text_atomic

__all__ = ["BenchConfig", "Run", "planned_runs", "run_bench", "splice"]

BEGIN = "<!-- fusionplan bench: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench: end -->"


def machine_line() -> str:
    """What the figures were measured on."""
    # torch only for its version string in the report
    import torch

    cpu = platform.processor() or platform.machine()
    return (
        f"{os.cpu_count()} CPU ({cpu}), Python {platform.python_version()}, "
        f"torch {torch.__version__}, {platform.system()} {platform.release()}"
    )


def per_model(
    fn: TaskFn,
    models: Sequence[str],
    shared: Any,
    engine: Engine | None,
    what: str,
    progress: Callable[[int, int], None] | None = None,
    done: Callable[[str, Any], None] | None = None,
) -> list[Any]:
    """``fn(model, shared)`` for every model, one task each on ``engine`` (default: this
    process), in ``models``' order; a failed model stops the bench naming ``what`` failed.
    ``done(model, value)`` sees each result as it arrives (a bench keeps it, to resume)."""
    found: dict[int, Any] = {}
    with Job(engine or LocalEngine(1), fn, models, shared=shared) as job:
        for outcome in job:
            if not outcome.ok:
                raise FusionPlanError(f"{what} {models[outcome.index]} failed: {outcome.error}")
            found[outcome.index] = outcome.value
            if done:
                done(models[outcome.index], outcome.value)
            if progress:
                progress(len(found), len(models))
    return [found[i] for i in range(len(models))]


def splice(path: Path, section: str, *, begin: str = BEGIN, end: str = END) -> str:
    """``path``'s text with the generated section between ``begin`` and ``end`` replaced
    (or appended if it has none); other commands' sections use their own markers."""
    block = f"{begin}\n{section.rstrip()}\n{end}\n"
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(old):
        return pattern.sub(lambda _: block, old, count=1)
    return old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "") + block


def run_spliced(
    names: Sequence[str],
    key: Callable[[str], str],
    task: TaskFn,
    shared: Any,
    out_dir: str | os.PathLike,
    report_path: str | os.PathLike,
    section: Callable[[list[dict[str, Any]], int, float], str],
    *,
    begin: str,
    end: str,
    engine: Engine | None = None,
    retry_failed: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """A resumable per-model bench whose report is one generated section of a markdown file:
    ``task(name, shared)`` per model (:func:`runner.resume_rows`, one worker process by
    default), and after each model ``section(rows, reused, minutes)`` spliced between
    ``begin`` and ``end`` of ``report_path``, atomically. Rows in ``names`` order."""
    store = ResultStore(Path(out_dir))
    report_path = Path(report_path)
    started = time.perf_counter()

    def publish(reused: int) -> list[dict[str, Any]]:
        rows = [store.rows[k] for n in names if (k := key(n)) in store.rows]
        text = section(rows, reused, (time.perf_counter() - started) / 60)
        write_text_atomic(report_path, splice(report_path, text, begin=begin, end=end))
        return rows

    def failed(name: str, error: str) -> dict[str, Any]:
        return {"key": key(name), "model": name, "error": error}

    return resume_rows(
        names, key, task, shared, store, publish, failed,
        engine=engine or LocalEngine(1, isolate=True), retry_failed=retry_failed,
        progress=progress,
    )  # fmt: skip


def run_bench(
    config: BenchConfig,
    out_dir: str | os.PathLike,
    report_path: str | os.PathLike,
    *,
    engine: Engine | None = None,
    retries: int = 2,
    command: str = "fusionplan bench",
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Run (or resume) every selected experiment on ``engine`` (default: this process),
    write the figures next to ``report_path`` (``img/``) and the markdown section into it;
    returns ``report_path``."""

    started = time.perf_counter()
    runs = planned_runs(config)
    out, report_path = Path(out_dir), Path(report_path)
    store = ResultStore(out)
    reused = sum(store.get(r) is not None for r in runs)
    engine = engine or LocalEngine(1)
    rows = run_all(
        runs,
        store,
        engine=engine,
        retries=retries,
        exact_time_limit_s=config.exact_time_limit_s,
        progress=progress,
    )
    shares = []
    if "fig3" in config.experiments:
        shares = valid_share(
            config.fig3_models,
            out / f"fig3-dataset-{config.fig3_groups}",  # one per size, each resumable
            groups=config.fig3_groups,
            buffers_kb=(128, 256, 512, 1024, 2048),
            engine=engine,
        )
    results = render.Results(rows)
    img = report_path.parent / "img"
    figures = {}
    if shares:
        render.plot_fig3(shares, img / "bench-fig3.png")
        figures["fig3"] = "img/bench-fig3.png"
    if "fig5" in config.experiments:
        render.plot_fig5(render.fig5_series(results, config), img / "bench-fig5.png")
        figures["fig5"] = "img/bench-fig5.png"
    minutes = (time.perf_counter() - started) / 60
    search_minutes = sum(r.get("search_s", 0.0) for r in rows.values()) / 60
    preamble = (
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')}: {len(runs)} runs "
        f"({reused} reused from an earlier invocation), {minutes:.1f} min on "
        f"{engine.describe()}; the runs' search times sum to {search_minutes:.0f} min. "
        f"Machine: {machine_line()}. Every reported plan passed "
        f"`Plan.validate()` (a run that fails is listed at the end). DRAM is total "
        f'traffic (all ops); "fusable MB" leaves out the '
        f'unfusable ops as the paper does, so it is the column to set against "paper MB" '
        f"(the paper's own cost model: compare trends, not values)."
    )
    section = render.report(config, results, shares, figures, preamble)
    write_text_atomic(report_path, splice(report_path, section))
    return report_path

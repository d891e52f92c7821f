"""``fusionplan bench queries``: best DRAM against oracle queries, not plans (issue 28).

Where the cost model is a black box (a toolchain, a slow simulator) what a search spends is
oracle queries: distinct groups asked about (docs/design.md, "Oracles"). Each run plans one
cell (model, scheme, buffer) with one search (rs, ls, nsga2) and one splitter (random,
``tree``, an explainer's tree, and the same tree with the learning GIN judge, ``gin-*``)
under a query budget, and keeps its trace of best DRAM against queries. ``auto`` on the
built-in model (white box, its queries counted too) gives each cell's reference plan; the
best known plan of a cell is the best over every run. Rows go to ``runs.jsonl`` as each run
ends (:class:`ResultStore`), keyed by run and settings, so an interrupted bench resumes.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from explainers.checkpoints import weights_identity
from fusionplan.app.api import load
from fusionplan.app.bench import machine_line, run_spliced
from fusionplan.app.pipeline import PlanRequest, assemble
from fusionplan.engines import Engine

MB = 2**20
BEGIN = "<!-- fusionplan bench queries: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench queries: end -->"
REFERENCE = "auto"  # the run name's search for a cell's reference plan
MODEL_FREE = ("random", "tree")  # splitters that read no trained weights

Row = dict[str, Any]

HARD_CELLS = ("densenet121", "googlenet", "inception_v3", "randwire-n32-s0", "nasnet-c3")
"""The issue's hard cells: dense, branchy, random-wired and NAS-cell graphs."""


@dataclass(frozen=True)
class QueriesConfig:
    """What runs per cell and how far."""

    schemes: tuple[str, ...] = ("brr",)
    buffers: tuple[str, ...] = ("128KB",)
    searches: tuple[str, ...] = ("rs", "ls", "nsga2")
    splitters: tuple[str, ...] = ("random", "tree", "rg", "gin-rg")
    seeds: tuple[int, ...] = (0, 1)
    query_budget: int = 5000
    # a search that converged asks nothing new: the plans it may still propose
    plan_budget: int = 20_000
    checkpoints: tuple[int, ...] = (500, 1000, 2000, 5000)

    def runs(self, models: Sequence[str]) -> list[str]:
        """Run names ``model|scheme|buffer|search|splitter|seed``: each cell's reference
        (auto) first, then every search x splitter x seed."""
        out = []
        for model in models:
            for scheme in self.schemes:
                for buffer in self.buffers:
                    cell = f"{model}|{scheme}|{buffer}"
                    out.append(f"{cell}|{REFERENCE}|-|0")
                    out += [
                        f"{cell}|{search}|{splitter}|{seed}"
                        for search in self.searches
                        for splitter in self.splitters
                        for seed in self.seeds
                    ]
        return out

    def key(self, run: str) -> str:
        """The run and what bounds it (the checkpoints only read a row, so they are not in
        it: a rerun reading at other counts reuses the rows), and for a GNN-guided splitter
        the weights it reads (retrained weights: the row is run again)."""
        key = f"queries|{run}|{self.query_budget}|{self.plan_budget}"
        _, scheme, _, search, splitter, _ = run.split("|")
        if search != REFERENCE and splitter not in MODEL_FREE:
            key += f"|{weights_identity(scheme)}"
        return key


def measure(run: str, config: QueriesConfig) -> Row:
    """One run's row: its plan's DRAM, queries, plans, seconds and query trace."""
    model, scheme, buffer, search, splitter, seed = run.split("|")
    row: Row = {"key": config.key(run), "model": model, "scheme": scheme, "buffer": buffer,
                "search": search, "splitter": splitter, "seed": int(seed)}  # fmt: skip
    graph = load(model)
    reference = search == REFERENCE
    request = PlanRequest(
        buffer=buffer,
        scheme=scheme,
        search=search,
        splitter="tree" if reference else splitter,
        budget=config.plan_budget,
        seed=int(seed),
        bound_effort=0,
        query_budget=None if reference else config.query_budget,
    )
    t0 = time.perf_counter()
    pipeline = assemble(graph, request)
    plan = pipeline.run()
    result = plan.result
    assert result is not None
    row.update(
        ops=len(graph),
        dram=plan.metrics.dram_bytes,
        queries=result.oracle_queries,
        plans=result.proposed,
        seconds=round(time.perf_counter() - t0, 2),
        trace=result.query_trace,
    )
    stats = getattr(getattr(pipeline.splitter, "judge", None), "stats", None)
    if stats is not None:  # a learning GIN judge: when it was trusted, and its GIN's speed
        row["judge"] = {
            "screening_from": stats.screening_from,
            "classifying_from": stats.classifying_from,
            "updates": stats.updates,
            "predicted": stats.predicted,  # parts the GIN classified
            "unsure": stats.unsure,  # of those, asked because it was unsure
            "last_accuracy": round(stats.last_accuracy, 4),
            "last_false_valid": round(stats.last_false_valid, 4),
            "last_false_invalid": round(stats.last_false_invalid, 4),
            "train_seconds": round(stats.train_seconds, 2),
        }
        if stats.batches:
            row["gin_ms_per_batch"] = round(stats.ms_per_batch, 3)
    if reference and result.certificate is not None:
        row["reference_method"] = result.certificate.method
    return row


def best_at(trace: Sequence[Sequence[int]], queries: int) -> int | None:
    """The best DRAM a run had found after ``queries`` oracle queries (None: no plan yet)."""
    found = [dram for q, dram in trace if q <= queries]
    return found[-1] if found else None


def queries_to_reach(trace: Sequence[Sequence[int]], target: float) -> int | None:
    """Oracle queries after which a run's best DRAM is <= ``target`` (None: never)."""
    return next((q for q, dram in trace if dram <= target), None)


def cells(rows: Sequence[Row]) -> dict[tuple[str, str, str], list[Row]]:
    out: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        if "dram" in r:
            out.setdefault((r["model"], r["scheme"], r["buffer"]), []).append(r)
    return out


def summary(rows: Sequence[Row], config: QueriesConfig, within: float = 0.01) -> list[Row]:
    """Per cell, search and splitter: the median over seeds of the gap to the cell's best
    known plan at each checkpoint and at the end, and the median queries to come within
    ``within`` of it (a seed that never does counts as infinite)."""
    out = []
    for (model, scheme, buffer), runs in cells(rows).items():
        best = min(r["dram"] for r in runs)
        reference = next((r for r in runs if r["search"] == REFERENCE), None)
        target = best * (1 + within)
        groups: dict[tuple[str, str], list[Row]] = {}
        for r in runs:
            if r["search"] != REFERENCE:
                groups.setdefault((r["search"], r["splitter"]), []).append(r)
        for (search, splitter), seeds in groups.items():
            gaps = {}
            for q in config.checkpoints:
                found = [best_at(r["trace"], q) for r in seeds]
                gaps[q] = (
                    None
                    if any(f is None for f in found)
                    else statistics.median((f - best) / best for f in found)
                )
            reach = [queries_to_reach(r["trace"], target) for r in seeds]
            reached = sorted(q if q is not None else float("inf") for q in reach)
            out.append({
                "model": model, "scheme": scheme, "buffer": buffer, "search": search,
                "splitter": splitter, "best_known": best,
                "reference_dram": reference["dram"] if reference else None,
                "reference_queries": reference["queries"] if reference else None,
                "gap_at": gaps,
                "final_gap": statistics.median((r["dram"] - best) / best for r in seeds),
                "queries_to_1pct": statistics.median(reached),
                "seeds": len(seeds),
                "seconds": round(statistics.median(r["seconds"] for r in seeds), 1),
                "gin_ms_per_batch": max(r.get("gin_ms_per_batch", 0) for r in seeds),
            })  # fmt: skip
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _queries(value: float) -> str:
    return "never" if value == float("inf") else f"{value:,.0f}"


def markdown(rows: Sequence[Row], config: QueriesConfig) -> str:
    """The equal-queries table (gap to the best known plan by queries spent), the
    reference line per cell and the GNN-vs-tree verdicts."""
    summ = summary(rows, config)
    head = " | ".join(f"gap at {q:,} q" for q in config.checkpoints)
    lines = [
        f"| cell | search | splitter | {head} | final gap | queries to 1 % | s/run |",
        "|---|---|---|" + "---:|" * (len(config.checkpoints) + 3),
    ]
    for s in summ:
        cell = f"{s['model']} {s['scheme'].upper()} {s['buffer']}"
        gaps = " | ".join(_pct(s["gap_at"][q]) for q in config.checkpoints)
        lines.append(
            f"| {cell} | {s['search']} | {s['splitter']} | {gaps} | {_pct(s['final_gap'])} | "
            f"{_queries(s['queries_to_1pct'])} | {s['seconds']} |"
        )
    lines += ["", "| cell | best known MB | auto MB | auto queries | auto method |",
              "|---|---:|---:|---:|---|"]  # fmt: skip
    for (model, scheme, buffer), runs in cells(rows).items():
        ref = next((r for r in runs if r["search"] == REFERENCE), None)
        best = min(r["dram"] for r in runs)
        if ref is not None:
            lines.append(
                f"| {model} {scheme.upper()} {buffer} | {best / MB:.3f} | {ref['dram'] / MB:.3f} "
                f"| {ref['queries']:,} | {ref.get('reference_method', '')} |"
            )
    return "\n".join(lines)


def verdicts(rows: Sequence[Row], config: QueriesConfig) -> list[str]:
    """Per search, in how many cells a GIN-judged splitter came within 1 % with >= 5x fewer
    queries than ``tree``, and in how many it ended worse than ``random``."""
    summ = summary(rows, config)
    index = {(s["model"], s["scheme"], s["buffer"], s["search"], s["splitter"]): s for s in summ}
    out = []
    for search in config.searches:
        for splitter in (s for s in config.splitters if s.startswith("gin-")):
            faster = worse = total = 0
            for (m, sc, b, se, sp), s in index.items():
                if se != search or sp != splitter:
                    continue
                total += 1
                tree = index.get((m, sc, b, se, "tree"))
                rand = index.get((m, sc, b, se, "random"))
                q = s["queries_to_1pct"]
                if tree is not None and q != float("inf") and 5 * q <= tree["queries_to_1pct"]:
                    faster += 1
                if rand is not None and s["final_gap"] > rand["final_gap"]:
                    worse += 1
            if total:
                out.append(
                    f"{search} + {splitter}: within 1 % with >= 5x fewer queries than tree in "
                    f"{faster} of {total} cells; final plan worse than random in {worse}"
                )
    return out


def run_bench(
    models: Sequence[str],
    config: QueriesConfig,
    out_dir: str | Path,
    report_path: str | Path,
    *,
    engine: Engine | None = None,
    command: str = "fusionplan bench queries",
    progress: Callable[[int, int], None] | None = None,
) -> list[Row]:
    """Run (or resume) every run of ``models``; the report's generated section is rewritten
    after each one."""
    runs = config.runs(models)

    def section(rows: list[Row], reused: int, minutes: float) -> str:
        c = config
        pre = (
            f"Generated by `{command}` on {time.strftime('%Y-%m-%d')}: {len(rows)} of "
            f"{len(runs)} runs, {minutes:.1f} min this invocation. Query budget "
            f"{c.query_budget:,} per run (a run finishes the plan or generation under way; at "
            f"most {c.plan_budget:,} plans, for a search that converged and asks nothing new), "
            f"seeds {', '.join(map(str, c.seeds))}; gaps are medians over seeds to the cell's "
            f"best known plan (over every run and auto). Machine: {machine_line()}.\n\n"
            f"Settings: `{json.dumps(asdict(c))}`"
        )
        found = "\n".join(f"- {v}" for v in verdicts(rows, config))
        return f"{pre}\n\n{markdown(rows, config)}\n\n{found}"

    return run_spliced(
        runs, config.key, measure, config, out_dir, report_path, section,
        begin=BEGIN, end=END, engine=engine, progress=progress,
    )  # fmt: skip

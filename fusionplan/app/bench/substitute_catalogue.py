"""``fusionplan bench substitute-catalogue``: every zoo and catalogue model through the
``substitute`` search (its defaults, on the ONNX file, the written model checked and
imported into the planner).

For each model (the catalogue's order: the paper's zoo first, then every other torchvision
model): export into the zoo cache (or a cache hit), run the pre-pass (the search, the
standard-op write, the equivalence check with onnxruntime's optimisations off, which
refuses a result off by more than 1e-4), check that the written model is contrib-free (no
node and no opset import outside the default ONNX domain), and import it as the planner
does. A row carries ops before and after, the substitutions, the equivalence error, and
the failing stage's one-line reason where one fails; the bench goes on.

Rows go to ``runs.jsonl`` (:class:`ResultStore`) as each model ends, keyed by model and
settings, so an interrupted run resumes; models run one at a time in a worker process, so a
crash costs one row.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import onnx

from fusionplan.app.bench import machine_line, run_spliced
from fusionplan.app.bench.catalogue import _reason
from fusionplan.data.zoo import zoo_entry, zoo_path
from fusionplan.engines import Engine
from fusionplan.ir.onnx_import import graph_from_proto
from fusionplan.passes.substitution.pipeline import (
    STANDARD_DOMAINS,
    SubstitutionRequest,
    substitute,
)
from fusionplan.passes.substitution.search.base import DEFAULT_BUDGET

BEGIN = "<!-- fusionplan bench substitute-catalogue: begin (generated) -->"
END = "<!-- fusionplan bench substitute-catalogue: end -->"

Row = dict[str, Any]


@dataclass(frozen=True)
class SubstituteCatalogueConfig:
    """The pre-pass's settings; all of them are part of a row's key."""

    search: str = "metaflow"
    budget: int = DEFAULT_BUDGET
    seed: int = 0
    target: str = "onnx"

    def key(self, model: str) -> str:
        return f"substitute-catalogue|{model}|{json.dumps(asdict(self), sort_keys=True)}"


def contrib_free(model: onnx.ModelProto) -> bool:
    """No node and no opset import outside the default ONNX domain."""
    domains = {n.domain for n in model.graph.node} | {o.domain for o in model.opset_import}
    return domains <= STANDARD_DOMAINS


def measure(model: str, config: SubstituteCatalogueConfig) -> Row:
    """Export one model, run the pre-pass, check and import its output; its row."""
    row: Row = {"key": config.key(model), "model": model}
    try:
        entry = zoo_entry(model)
        row["input"] = entry.input_size
        path = zoo_path(model)
        proto = onnx.load(os.fspath(path))
    except Exception as exc:  # a row that says why, never a crashed bench
        return {**row, "error": f"export: {_reason(exc)}"}
    try:
        started = time.perf_counter()
        result = substitute(proto, SubstitutionRequest(**asdict(config)), name=entry.name)
        rewritten, report = result.model, result.report.to_json()
        row["seconds"] = round(time.perf_counter() - started, 2)
    except Exception as exc:
        return {**row, "error": f"substitute: {_reason(exc)}"}
    row.update(
        ops_before=sum(report["ops_before"].values()),
        ops_after=sum(report["ops_after"].values()),
        substitutions=len(report["steps"]),
        rules=dict(Counter(s["rule"] for s in report["steps"]).most_common()),
        max_rel_error=report["max_rel_error"],
        speedup_estimated=round(report["speedup_estimated"], 4),
        contrib_free=contrib_free(rewritten),
    )
    try:
        row["planner_ops"] = len(graph_from_proto(rewritten, name=entry.name))
    except Exception as exc:
        row["error"] = f"import: {_reason(exc)}"
    return row


def _measure_task(model: str, config: SubstituteCatalogueConfig) -> Row:
    return measure(model, config)


def run_substitute_catalogue(
    models: Sequence[str],
    config: SubstituteCatalogueConfig,
    out_dir: str | os.PathLike,
    report_path: str | os.PathLike,
    *,
    engine: Engine | None = None,
    retry_failed: bool = False,
    command: str = "fusionplan bench substitute-catalogue",
    progress: Callable[[int, int], None] | None = None,
) -> list[Row]:
    """Run (or resume) ``models``; after each one the report's generated section is
    rewritten atomically. Rows in ``models`` order; the default engine is one worker."""
    names = list(dict.fromkeys(zoo_entry(m).name for m in models))  # unknown names fail now

    def section(rows: list[Row], reused: int, minutes: float) -> str:
        head = _preamble(config, command, len(names), len(rows), reused, minutes)
        return f"{head}\n\n{markdown(rows)}"

    return run_spliced(
        names, config.key, _measure_task, config, out_dir, report_path, section,
        begin=BEGIN, end=END, engine=engine, retry_failed=retry_failed, progress=progress,
    )  # fmt: skip


def _preamble(
    config: SubstituteCatalogueConfig,
    command: str,
    total: int,
    finished: int,
    reused: int,
    minutes: float,
) -> str:
    return (
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')}: {finished} of {total} "
        f"models ({reused} reused from an earlier invocation), {minutes:.1f} min. Pre-pass "
        f"`substitute`: search {config.search}, budget {config.budget} graphs, seed "
        f"{config.seed}, target {config.target}. Machine: {machine_line()}. Max rel. error is "
        "the pass's own check (original vs rewritten, onnxruntime with ORT_DISABLE_ALL, "
        "seeded normal input; above 1e-4 the pass refuses the model); contrib-free: no node "
        "and no opset import outside the default ONNX domain; planner ops: the rewritten "
        "model as the fusion planner imports it."
    )


def markdown(rows: Sequence[Row]) -> str:
    """One line per model, a summary line first."""
    ok = [r for r in rows if "error" not in r]
    worst = max((r["max_rel_error"] for r in ok), default=0.0)
    lines = [
        f"{len(ok)} of {len(rows)} models through the pass; "
        f"{sum(r['contrib_free'] for r in ok)} contrib-free; worst relative error "
        f"{worst:.1e}; {len(rows) - len(ok)} failed.",
        "",
        "| model | input | ops before | ops after | substitutions | max rel. error "
        "| contrib-free | planner ops | s | error |",
        "|---|---|--:|--:|--:|--:|---|--:|--:|---|",
    ]
    for r in rows:
        error = r.get("error", "").replace("|", "\\|")
        err = r.get("max_rel_error")
        free = r.get("contrib_free")
        cells = [
            r["model"],
            r.get("input", ""),
            r.get("ops_before", ""),
            r.get("ops_after", ""),
            r.get("substitutions", ""),
            "" if err is None else f"{err:.1e}",
            "" if free is None else ("yes" if free else "NO"),
            r.get("planner_ops", ""),
            r.get("seconds", ""),
            error,
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"

"""``fusionplan bench substitute-dram``: the planner's DRAM with no pass, with the latency-driven
substitution and with the DRAM-driven one, per catalogue model (issue 29).

Each model: the plan of the model as ``fusionplan plan`` imports it (no pass), the plan of the
latency pass's output (``substitute``'s default search and cost, standard ops: what
``plan --prepass substitute`` plans) and the plan of the DRAM pass's output
(``--cost dram`` on the same accelerator and planner settings), each planned cold with one
:class:`PlanRequest`. Rows go to ``runs.jsonl`` (:class:`ResultStore`) as each model ends,
keyed by model and settings, so an interrupted run resumes; each model runs in a worker
process, as in ``bench catalogue``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from accel_model import Accelerator
from fusionplan.app.bench import machine_line, run_spliced
from fusionplan.app.bench.catalogue import _reason
from fusionplan.app.dram_cost import carry_over
from fusionplan.app.pipeline import PlanRequest, plan_at_least_as_good, plan_graph
from fusionplan.data.zoo import zoo_entry, zoo_path
from fusionplan.engines import Engine
from fusionplan.ir.onnx_import import graph_from_proto, load_model
from fusionplan.ir.onnx_model import load_onnx
from fusionplan.passes.substitution.pipeline import PLANNED_BUDGET, SubstitutionRequest, substitute

MB = 2**20
BEGIN = "<!-- fusionplan bench substitute-dram: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench substitute-dram: end -->"

Row = dict[str, Any]


@dataclass(frozen=True)
class DramBenchConfig:
    """The accelerator, the planner's settings and the DRAM search's; all in a row's key."""

    buffer: str = "128KB"
    scheme: str = "brr"
    bytes_per_element: int = 1
    effort: float = 0.25
    search: str = "taso"
    budget: int = PLANNED_BUDGET

    def plan_request(self) -> PlanRequest:
        """``fusionplan plan --buffer B --scheme S --bytes-per-element N --effort E``."""
        return PlanRequest(
            buffer=self.buffer,
            scheme=self.scheme,
            bytes_per_element=self.bytes_per_element,
            effort=self.effort,
        )

    def accelerator(self) -> Accelerator:
        return self.plan_request().check().accelerator()

    def key(self, model: str) -> str:
        return f"substitute-dram|{model}|{json.dumps(asdict(self), sort_keys=True)}"


def measure(model: str, config: DramBenchConfig) -> Row:
    """One model's row: the three DRAM figures, the DRAM pass's report and timings."""
    row: Row = {"key": config.key(model), "model": model}
    try:
        entry = zoo_entry(model)
        path = zoo_path(model)
        proto = load_onnx(path)
        request = config.plan_request()
        t0 = time.perf_counter()
        base = plan_graph(load_model(path, name=entry.name), request)
        row["plan_s"] = round(time.perf_counter() - t0, 2)
        row["ops"] = len(base.graph)
        row["none_bytes"] = base.metrics.dram_bytes
    except Exception as exc:  # a row that says why, never a crashed bench
        return {**row, "error": f"no pass: {_reason(exc)}"}
    passes = {
        "latency": SubstitutionRequest(),
        "dram": SubstitutionRequest(
            search=config.search,
            cost="dram",
            budget=config.budget,
            accelerator=config.accelerator(),
            plan_effort=config.effort,
        ),
    }
    for label, sub in passes.items():
        try:
            t0 = time.perf_counter()
            result = substitute(proto, sub, name=entry.name)
            row[f"{label}_s"] = round(time.perf_counter() - t0, 2)
            graph = graph_from_proto(result.model, name=entry.name)
            row[f"{label}_bytes"] = plan_graph(graph, request).metrics.dram_bytes
            row[f"{label}_steps"] = len(result.report.steps)
            a = result.report.accelerator
            if a is not None:  # the planner warm-started from the pass's plan
                hint = carry_over(tuple(map(tuple, a["plan_groups"])), graph)
                planned = plan_at_least_as_good(graph, request, [], groups=hint)
                row["dram_planned_bytes"] = planned.metrics.dram_bytes
                row["dram_report"] = {k: v for k, v in a.items() if k != "plan_groups"}
                row["dram_rules"] = sorted({s["rule"] for s in result.report.steps})
        except Exception as exc:
            row.setdefault("errors", []).append(f"{label} pass: {_reason(exc)}")
    if "errors" in row:
        row["error"] = "; ".join(row.pop("errors"))
    return row


def _measure_task(model: str, config: DramBenchConfig) -> Row:
    return measure(model, config)


def run_bench(
    models: Sequence[str],
    config: DramBenchConfig,
    out_dir: str | Path,
    report_path: str | Path,
    *,
    engine: Engine | None = None,
    command: str = "fusionplan bench substitute-dram",
    progress: Callable[[int, int], None] | None = None,
) -> list[Row]:
    """Measure (or resume) ``models``; after each one the report's generated section is
    rewritten. One worker process by default, so a crash costs one model's row."""
    names = list(dict.fromkeys(zoo_entry(m).name for m in models))

    def section(rows: list[Row], reused: int, minutes: float) -> str:
        return f"{preamble(config, command, len(names), len(rows), minutes)}\n\n{markdown(rows)}"

    return run_spliced(
        names, config.key, _measure_task, config, out_dir, report_path, section,
        begin=BEGIN, end=END, engine=engine, progress=progress,
    )  # fmt: skip


def preamble(config: DramBenchConfig, command: str, total: int, done: int, minutes: float) -> str:
    c = config
    return (
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')}: {done} of {total} models, "
        f"{minutes:.1f} min this invocation. Accelerator {c.buffer} {c.scheme.upper()}, "
        f"{c.bytes_per_element} B/element; every column is the plan of `fusionplan plan "
        f"--buffer {c.buffer} --scheme {c.scheme} --effort {c.effort:g}` (auto, cold) of the "
        f"model, of the latency pass's output (`substitute`'s defaults: metaflow, sum of H100 "
        f"op latencies, standard ops) and of the DRAM pass's output (`--cost dram`, {c.search}, "
        f"{c.budget} candidates). Machine: {machine_line()}."
    )


def _change(before: int, after: int) -> str:
    """The change in %, or in bytes where it would print as 0.00 % (a bias vector)."""
    pct = 100 * (after - before) / before
    if after != before and abs(pct) < 0.005:
        return f"{after - before:+,} B"
    return f"{pct:+.2f} %"


COLUMNS = {
    "latency_bytes": "latency pass",
    "dram_bytes": "DRAM pass, its graph planned alone",
    "dram_planned_bytes": "DRAM pass, its graph and plan",
}


def _control(r: Row) -> int | None:
    rep = r.get("dram_report")
    return None if rep is None else rep["dram_control"]


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    """Per column: lower / equal / higher than no pass and the median change (%); for the
    DRAM pass's plan also against the control (the original with the same extra planning)."""
    out: dict[str, Any] = {}
    for field in (*COLUMNS, "control"):
        pairs = [
            (r["none_bytes"], _control(r) if field == "control" else r.get(field))
            for r in rows
            if "none_bytes" in r
        ]
        pairs = [(b, a) for b, a in pairs if a is not None]
        changes = [100 * (a - b) / b for b, a in pairs]
        moved = [c for c in changes if c]
        out[field] = {
            "models": len(pairs),
            "lower": sum(a < b for b, a in pairs),
            "equal": sum(a == b for b, a in pairs),
            "higher": sum(a > b for b, a in pairs),
            "median_change_pct": statistics.median(changes) if changes else None,
            "median_change_pct_where_changed": statistics.median(moved) if moved else None,
        }
    pairs = [(c, r["dram_planned_bytes"]) for r in rows if (c := _control(r)) is not None]
    pairs = [(c, a) for c, a in pairs if a is not None]
    out["rewrite_vs_control"] = {
        "models": len(pairs),
        "lower": sum(a < c for c, a in pairs),
        "equal": sum(a == c for c, a in pairs),
        "higher": sum(a > c for c, a in pairs),
    }
    return out


def markdown(rows: Sequence[Row]) -> str:
    lines = [
        "| model | ops | no pass MB | latency pass | DRAM pass: graph alone | DRAM pass: graph "
        "+ plan | control | kept | rewrites | rules | candidates | s/candidate | memo hits |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        if "none_bytes" not in r:
            lines.append(f"| {r['model']} | | | | | | | | | {r.get('error', '')} | | | |")
            continue
        none = r["none_bytes"]
        cells = [r["model"], str(r["ops"]), f"{none / MB:.3f}"]
        for field in (*COLUMNS, "control"):
            value = _control(r) if field == "control" else r.get(field)
            cells.append("failed" if value is None else _change(none, value))
        rep = r.get("dram_report")
        if rep is None:
            cells += ["", "", r.get("error", ""), "", "", ""]
        else:
            cells += [
                rep["kept"],
                str(r["dram_steps"]),
                ", ".join(r["dram_rules"]) or "-",
                str(rep["candidates"]),
                f"{rep['seconds_per_candidate']:.2f}",
                f"{rep['hit_rate']:.0%}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    s = summary(rows)
    lines.append("")
    for field, name in (*COLUMNS.items(), ("control", "control")):
        t = s[field]
        med, moved = t["median_change_pct"], t["median_change_pct_where_changed"]
        lines.append(
            f"- {name}: lower on {t['lower']}, equal on {t['equal']}, higher on "
            f"{t['higher']} of {t['models']} models; median change "
            f"{'n/a' if med is None else f'{med:+.2f} %'}, "
            f"{'n/a' if moved is None else f'{moved:+.2f} %'} where it changed."
        )
    t = s["rewrite_vs_control"]
    lines.append(
        f"- DRAM pass's graph + plan against the control: lower on {t['lower']}, equal on "
        f"{t['equal']}, higher on {t['higher']} of {t['models']} models."
    )
    return "\n".join(lines) + "\n"

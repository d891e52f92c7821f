"""``fusionplan bench certified``: the default ``auto`` search on every zoo and torchvision
classification model, with its certified gap, local search beside it, and the exact search's
proofs (docs/design.md, "Certified plans").

Per (model, scheme, buffer) cell: ``auto`` with its defaults (effort 1: exact, then LNS) and its
lower bound, gap and wall time; LS with a fixed budget (5000 plans); and, where auto did not
prove the optimum, the exact search with a longer limit, whose optimum (or bound) says how
far auto really is. ``fusionplan bench exact`` is the second table: the time, states and
peak Python heap the exact search needs to prove the optimum on each zoo model.

Cells run one after another in this process (timings must not share the two cores) and are
appended to ``runs.jsonl`` as they finish, so a rerun resumes.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusionplan.app.api import load
from fusionplan.app.bench import machine_line, splice
from fusionplan.app.bench.runner import ResultStore
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.data.synthetic import SYNTHETIC, certified_graphs
from fusionplan.data.zoo import torchvision_models, zoo_names
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.io import write_text_atomic
from fusionplan.search.certify import DEFAULT_MAX_DOWNSETS
from fusionplan.search.effort import EXACT_UNITS, effort_for_seconds
from fusionplan.search.exact import count_downsets

MB = 2**20
BEGIN = "<!-- fusionplan bench certified: begin (generated; edit outside these markers) -->"
END = "<!-- fusionplan bench certified: end -->"
EXACT_BEGIN = "<!-- fusionplan bench exact: begin (generated; edit outside these markers) -->"
EXACT_END = "<!-- fusionplan bench exact: end -->"

Row = dict[str, Any]


def certified_models() -> tuple[str, ...]:
    """The zoo's twelve, every other torchvision classification model, then the synthetic
    random-wired and cell-stack graphs (``fusionplan.data.synthetic.certified_graphs``)."""
    more = [n for n, m in torchvision_models().items() if m.task == "classification"]
    return (*zoo_names(), *more, *certified_graphs())


@dataclass(frozen=True)
class CertifiedConfig:
    schemes: tuple[str, ...] = ("lbdf", "brr")
    buffers: tuple[str, ...] = ("128KB", "512KB")
    ls_budget: int = 5000
    exact_limit_s: float = 60.0  # for cells auto did not prove; 0: skip

    def key(self, model: str, scheme: str, buffer: str) -> str:
        return f"certified|{model}|{scheme}|{buffer}|{self.ls_budget}|{self.exact_limit_s}"


def certify_cell(graph: OpGraph, scheme: str, buffer: str, config: CertifiedConfig) -> Row:
    """auto, LS and (if auto proved nothing) a longer exact run on one cell."""
    auto = plan_graph(graph, PlanRequest(buffer=buffer, scheme=scheme))
    assert auto.result is not None
    m = auto.metrics
    row: Row = {
        "auto_mb": m.dram_mb,
        "bound_mb": m.lower_bound_bytes / MB,
        "gap": m.gap,
        "method": m.bound_method,
        "stage": auto.result.extra.get("auto_stage", ""),
        "auto_s": round(auto.result.wall_time_s, 3),
    }
    ls_request = PlanRequest(
        buffer=buffer, scheme=scheme, search="ls", budget=config.ls_budget, bound_effort=0.0
    )
    ls = plan_graph(graph, ls_request)
    assert ls.result is not None
    row.update(ls_mb=ls.metrics.dram_mb, ls_s=round(ls.result.wall_time_s, 3))
    if m.bound_method == "optimal":
        row.update(optimum_mb=m.dram_mb, optimum_proven=True)
    elif config.exact_limit_s > 0 and not count_downsets(graph, DEFAULT_MAX_DOWNSETS)[1]:
        row.update(optimum_mb=None, optimum_proven=False)  # the exact search refuses the graph
    elif config.exact_limit_s > 0:  # how far is auto really? A longer proof, from auto's plan
        request = PlanRequest(
            buffer=buffer,
            scheme=scheme,
            search="exact",
            budget=1,
            search_options={"effort": effort_for_seconds(config.exact_limit_s, EXACT_UNITS)},
        )
        exact = plan_graph(graph, request, warm_start=[auto])
        assert exact.result is not None and exact.result.exact is not None
        e = exact.result.exact
        row.update(
            optimum_mb=exact.metrics.dram_mb if e.optimal else None,
            optimum_proven=e.optimal,
            exact_bound_mb=e.lower_bound_bytes / MB,
            exact_mb=exact.metrics.dram_mb,
            exact_s=round(exact.result.wall_time_s, 3),
        )
    return row


def run_certified(
    models: Sequence[str],
    config: CertifiedConfig,
    out_dir: str | Path,
    report_path: str | Path,
    *,
    command: str = "fusionplan bench certified",
    progress: Callable[[int, int], None] | None = None,
) -> list[Row]:
    """Every cell of ``models`` (resuming from ``out_dir``); the report section is rewritten
    after each model run and at the end (also when every cell was already stored). A model
    that fails to load gets one row saying why."""
    store = ResultStore(out_dir)
    cells = [(m, s, b) for m in models for s in config.schemes for b in config.buffers]
    started = time.perf_counter()

    def publish() -> list[Row]:
        rows = [store.rows[k] for c in cells if (k := config.key(*c)) in store.rows]
        minutes = (time.perf_counter() - started) / 60
        publish_section(report_path, certified_section(rows, config, command, minutes), BEGIN, END)
        return rows

    done = 0
    for model in models:
        mine = [c for c in cells if c[0] == model]
        if all(config.key(*c) in store.rows for c in mine):
            done += len(mine)
            continue
        try:
            graph = load(model)
        except Exception as exc:  # a row that says why, never a crashed bench
            for c in mine:
                store.add(
                    {
                        "key": config.key(*c),
                        "model": model,
                        "scheme": c[1],
                        "buffer": c[2],
                        "error": " ".join(str(exc).split())[:200],
                    }
                )
            done += len(mine)
            continue
        for _, scheme, buffer in mine:
            key = config.key(model, scheme, buffer)
            if key not in store.rows:
                row = certify_cell(graph, scheme, buffer, config)
                store.add(
                    {
                        "key": key,
                        "model": model,
                        "scheme": scheme,
                        "buffer": buffer,
                        "ops": len(graph),
                        **row,
                    }
                )
            done += 1
            if progress:
                progress(done, len(cells))
        publish()
    return publish()


def publish_section(report_path: str | Path, section: str, begin: str, end: str) -> None:
    """Replace this bench's generated section of the report (atomically)."""
    path = Path(report_path)
    write_text_atomic(path, splice(path, section, begin=begin, end=end))


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def gap_summary(rows: Sequence[Row]) -> str:
    """The certified gaps' median and maximum, for the catalogue models and for the synthetic
    graphs apart (a proven cell counts 0)."""
    parts = []
    for label, mine in (
        ("catalogue", [r for r in rows if r["model"] not in SYNTHETIC]),
        ("synthetic graphs", [r for r in rows if r["model"] in SYNTHETIC]),
    ):
        if mine:
            gaps = sorted(r["gap"] for r in mine)
            within = sum(1 for g in gaps if g <= 0.02)
            parts.append(
                f"{label}: gap median {statistics.median(gaps):.2%}, max {gaps[-1]:.2%}, "
                f"<= 2 % on {within} of {len(gaps)} cells"
            )
    return "Certified gap (auto's plan over its lower bound): " + "; ".join(parts) + "."


def _optimum_source(config: CertifiedConfig) -> str:
    """Where the optimum column comes from, in the report's header."""
    if config.exact_limit_s <= 0:
        return "Optimum: auto's own proof only (no longer exact run: --exact-limit 0)."
    effort = effort_for_seconds(config.exact_limit_s, EXACT_UNITS)
    return (
        f"Optimum: auto's own proof, else the exact search for {config.exact_limit_s:.0f} s of "
        f"work (effort {effort:g}) warm-started from auto's plan ('-' where it did not "
        "finish; its bound is then in the last column)."
    )


def certified_section(
    rows: Sequence[Row], config: CertifiedConfig, command: str, minutes: float
) -> str:
    """The markdown table and its summary."""
    good = [r for r in rows if "error" not in r]
    proven = [r for r in good if r["method"] == "optimal"]
    known = [r for r in good if r.get("optimum_mb")]
    off = [r for r in known if r["auto_mb"] > r["optimum_mb"] * 1.01 + 1e-9]
    slow = max((r["auto_s"] for r in good), default=0.0)
    lines = [
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')} ({minutes:.1f} min); "
        f"machine: {machine_line()}. auto: default settings (effort 1: exact, then LS + LNS, "
        "then exact again). "
        f"LS: {config.ls_budget} plans, seed 0. " + _optimum_source(config),
        "",
        f"**{len(good)} cells: auto proved the optimum on {len(proven)}; the optimum is known "
        f"on {len(known)}, and auto is more than 1 % above it on {len(off)}"
        + (
            " (" + ", ".join(f"{r['model']} {r['scheme']} {r['buffer']}" for r in off) + ")"
            if off
            else ""
        )
        + f"; slowest auto run {slow:.1f} s.**",
        "",
        gap_summary(good),
        "",
        "| model | ops | scheme | buffer | auto MB | lower bound MB | gap | bound | auto s "
        "| LS MB | LS s | optimum MB | auto vs optimum | exact bound MB |",
        "|" + " --- |" * 14,
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['model']} | | {r['scheme']} | {r['buffer']} | "
                f"failed: {r['error']} |" + " |" * 9
            )
            continue
        opt = r.get("optimum_mb")
        vs = "-" if not opt else f"{(r['auto_mb'] - opt) / opt:+.2%}"
        lines.append(
            f"| {r['model']} | {r['ops']} | {r['scheme'].upper()} | {r['buffer']} | "
            f"{_mb(r['auto_mb'])} | {_mb(r['bound_mb'])} | {r['gap']:.2%} | {r['method']} | "
            f"{r['auto_s']:.2f} | {_mb(r['ls_mb'])} | {r['ls_s']:.2f} | {_mb(opt)} | {vs} | "
            f"{_mb(r.get('exact_bound_mb'))} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- exact proofs
def prove_cell(graph: OpGraph, scheme: str, buffer: str, limit_s: float) -> Row:
    """The exact search on one cell: timed, then rerun under tracemalloc for its peak heap
    (tracing slows Python, so the two are separate runs)."""
    request = PlanRequest(
        buffer=buffer,
        scheme=scheme,
        search="exact",
        budget=1,
        search_options={"effort": effort_for_seconds(limit_s, EXACT_UNITS)},
    )
    plan = plan_graph(graph, request)
    assert plan.result is not None and plan.result.exact is not None
    e = plan.result.exact
    tracemalloc.start()
    try:
        plan_graph(graph, request)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {
        "optimal": e.optimal,
        "dram_mb": plan.metrics.dram_mb,
        "seconds": round(plan.result.wall_time_s, 3),
        "states": e.states,
        "groups": e.groups_enumerated,
        "downsets": e.downsets,
        "peak_mb": round(peak / MB, 1),
    }


def run_exact_table(
    models: Sequence[str],
    schemes: Sequence[str],
    buffers: Sequence[str],
    limit_s: float,
    out_dir: str | Path,
    report_path: str | Path,
    *,
    command: str = "fusionplan bench exact",
) -> list[Row]:
    store = ResultStore(out_dir)
    keys = {
        (m, s, b): f"exact|{m}|{s}|{b}|{limit_s}" for m in models for s in schemes for b in buffers
    }

    def publish() -> list[Row]:
        rows = [store.rows[k] for k in keys.values() if k in store.rows]
        publish_section(
            report_path, exact_section(rows, buffers, command, limit_s), EXACT_BEGIN, EXACT_END
        )
        return rows

    for model in models:
        graph = None
        for (name, scheme, buffer), key in keys.items():
            if name != model or key in store.rows:
                continue
            graph = graph or load(model)
            store.add(
                {
                    "key": key,
                    "model": model,
                    "scheme": scheme,
                    "buffer": buffer,
                    **prove_cell(graph, scheme, buffer, limit_s),
                }
            )
        publish()
    return publish()


def exact_section(rows: Sequence[Row], buffers: Sequence[str], command: str, limit_s: float) -> str:
    """One line per (model, scheme): seconds to the proof at each buffer, then the largest
    state count and peak heap over the buffers."""
    lines = [
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')}; machine: {machine_line()}. "
        f"Seconds for the exact search to prove the optimum (limit {limit_s:.0f} s; "
        "'>' = not proven), then the most states expanded and the largest peak Python heap "
        "(tracemalloc, a separate run) over the buffers.",
        "",
        "| model | scheme | " + " | ".join(buffers) + " | states (max) | peak heap MB (max) |",
        "|" + " --- |" * (len(buffers) + 4),
    ]
    cells: dict[tuple[str, str], dict[str, Row]] = {}
    for r in rows:
        cells.setdefault((r["model"], r["scheme"]), {})[r["buffer"]] = r
    for (model, scheme), by_buffer in cells.items():
        times = []
        for b in buffers:
            r = by_buffer.get(b)
            times.append(
                ""
                if r is None
                else (f"{r['seconds']:.2f}" if r["optimal"] else f">{r['seconds']:.0f}")
            )
        states = max(r["states"] for r in by_buffer.values())
        peak = max(r["peak_mb"] for r in by_buffer.values())
        lines.append(
            f"| {model} | {scheme.upper()} | " + " | ".join(times) + f" | {states} | {peak:.1f} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- equal wall time
def equal_time_cell(graph: OpGraph, scheme: str, buffer: str, seconds: float) -> Row:
    """LNS for ``seconds`` against LS and NSGA-II given the same wall time: each runs a
    budget long enough to pass ``seconds`` and is read off its improvement trace at the
    plan count its own throughput reaches in ``seconds`` (every run is a prefix of a longer
    one with the same seed)."""
    row: Row = {}
    for name, budget in (("ls", 60_000), ("nsga2", 20_000)):
        request = PlanRequest(
            buffer=buffer, scheme=scheme, search=name, budget=budget, bound_effort=0.0
        )
        result = plan_graph(graph, request).result
        assert result is not None
        reach = int(result.plans_per_second * seconds)
        best = min((dram for n, dram in result.trace if n <= reach), default=None)
        row[name] = None if best is None else best / MB
        row[f"{name}_plans"] = reach
        row[f"{name}_passed"] = result.wall_time_s >= seconds  # the budget was long enough
    request = PlanRequest(
        buffer=buffer, scheme=scheme, search="lns", bound_effort=0.0,
        search_options={"time_limit_s": seconds, "effort": 1000.0},  # time is the point
    )  # fmt: skip
    row["lns"] = plan_graph(graph, request).metrics.dram_mb
    return row


def equal_time_table(cells: Sequence[tuple[str, str, str]], seconds: float) -> str:
    """The markdown table of :func:`equal_time_cell` over ``cells`` (model, scheme, buffer)."""
    lines = [
        f"| model | scheme | buffer | LNS {seconds:.0f} s MB | LS MB (plans) "
        f"| NSGA-II MB (plans) | best |",
        "|" + " --- |" * 7,
    ]
    graphs: dict[str, OpGraph] = {}
    for model, scheme, buffer in cells:
        graph = graphs.setdefault(model, load(model))
        r = equal_time_cell(graph, scheme, buffer, seconds)
        values = {"LNS": r["lns"], "LS": r["ls"], "NSGA-II": r["nsga2"]}
        low = min(v for v in values.values() if v is not None)
        best = " = ".join(k for k, v in values.items() if v == low)
        marks = {k: "" if r[f"{k}_passed"] else " (budget short)" for k in ("ls", "nsga2")}
        lines.append(
            f"| {model} | {scheme.upper()} | {buffer} | {_mb(r['lns'])} | "
            f"{_mb(r['ls'])} ({r['ls_plans']}){marks['ls']} | "
            f"{_mb(r['nsga2'])} ({r['nsga2_plans']}){marks['nsga2']} | {best} |"
        )
    return "\n".join(lines)

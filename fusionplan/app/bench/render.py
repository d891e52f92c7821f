"""Markdown tables and PNG figures of bench results, next to the paper's figures.

Every DRAM cell is the mean over seeds with the (min-max) range; "paper" is the paper's
figure for the same cell (fusable ops only, its own cost model); "vs random" is the change
of the mean against random splitting in the same search; "gap" is the distance of the mean
to the exact optimum of the cell.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fusionplan.app.bench.experiments import (
    BenchConfig,
    Run,
    exact_runs,
    table2_runs,
    table34_runs,
)
from fusionplan.app.bench.paper import PAPER_DRAM_MB, PAPER_RECTIFY
from fusionplan.app.bench.valid_share import ValidShare
from fusionplan.ir.io import write_atomic

Row = dict[str, Any]
SEARCH_NAMES = {"rs": "RS", "ls": "LS", "nsga2": "NSGA-II", "exact": "exact"}
SPLITTER_NAMES = {
    "random": "random (paper: none)",
    "tree": "tree (cost model)",
    "gnne": "GNNExplainer",
    "pg": "PGExplainer",
    "rg": "RG-Explainer",
}


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


class Results:
    """Finished rows grouped by cell (a run without its seed)."""

    def __init__(self, rows: dict[str, Row]) -> None:
        self.rows = rows

    def seeds(self, run: Run, seeds: int) -> list[Row]:
        keys = [Run(*(*_cell(run), s)).key for s in range(seeds)]
        return [self.rows[k] for k in keys if k in self.rows]

    def change_vs_random(self, run: Run, seeds: int) -> float | None:
        """Relative change of the cell's mean DRAM against random splitting in the same
        search (None until both have finished)."""
        mean = _mean(self.seeds(run, seeds), "dram_mb")
        base_run = Run(*_cell(run)[:4], "random", run.budget, 0)
        base = _mean(self.seeds(base_run, seeds), "dram_mb")
        return None if mean is None or base is None else (mean - base) / base

    def errors(self) -> list[Row]:
        return [r for r in self.rows.values() if "error" in r]

    def exact(self, model: str, scheme: str, buffer: str) -> Row | None:
        (run,) = exact_runs([Run(model, scheme, buffer, "ls", "tree", 1, 0)])
        row = self.rows.get(run.key)
        return None if row is None or "error" in row else row


def _cell(run: Run) -> tuple:
    return run.model, run.scheme, run.buffer, run.search, run.splitter, run.budget


def _mean(rows: list[Row], field: str) -> float | None:
    vals = [r[field] for r in rows if "error" not in r]
    return statistics.mean(vals) if vals else None


def _spread(rows: list[Row], field: str = "dram_mb") -> str:
    vals = [r[field] for r in rows if "error" not in r]
    if not vals:
        return "error" if rows else "not run"
    mean = statistics.mean(vals)
    if len(vals) == 1 or max(vals) - min(vals) < 5e-4:
        return f"{mean:.3f}"
    return f"{mean:.3f} ({min(vals):.3f}-{max(vals):.3f})"


def dram_table(results: Results, runs: list[Run], seeds: int) -> str:
    """One row per (model, scheme, search, splitter) cell of ``runs``, plus the optimum."""
    cells = sorted({_cell(r) for r in runs}, key=_cell_order)
    header = [
        "model",
        "scheme",
        "search",
        "splitter",
        "DRAM MB mean (min-max)",
        "fusable MB",
        "paper MB",
        "vs random",
        "gap to optimum",
        "search s",
    ]
    body, last = [], None
    for cell in cells:
        run = Run(*cell, 0)
        group = (run.model, run.scheme, run.buffer)
        if group != last and last is not None:
            body.append(_exact_row(results, *last))
        last = group
        rows = results.seeds(run, seeds)
        mean = _mean(rows, "dram_mb")
        exact = results.exact(*group)
        change = results.change_vs_random(run, seeds)
        versus = "" if change is None or run.splitter == "random" else f"{100 * change:+.2f} %"
        gap = (
            ""
            if mean is None or exact is None
            else (
                f"{100 * (mean - exact['dram_mb']) / exact['dram_mb']:.2f} %"
                + ("" if exact["optimal"] else " (to best known)")
            )
        )
        paper = PAPER_DRAM_MB.get((*group, run.search, run.splitter))
        body.append(
            [
                run.model,
                run.scheme.upper(),
                SEARCH_NAMES[run.search],
                SPLITTER_NAMES[run.splitter],
                _spread(rows),
                _fmt(_mean(rows, "fusable_dram_mb")),
                _fmt(paper),
                versus,
                gap,
                _fmt(_mean(rows, "search_s"), 1),
            ]
        )
    if last is not None:
        body.append(_exact_row(results, *last))
    return _table(header, body)


def _cell_order(cell: tuple) -> tuple:
    model, scheme, _, search, splitter, budget = cell
    return (
        model,
        scheme,
        ["rs", "ls", "nsga2"].index(search) if search != "exact" else 9,
        list(SPLITTER_NAMES).index(splitter),
        budget,
    )


def _exact_row(results: Results, model: str, scheme: str, buffer: str) -> list[str]:
    row = results.exact(model, scheme, buffer)
    if row is None:
        return [model, scheme.upper(), "exact", "optimum", "not run", "", "", "", "", ""]
    label = "optimum" if row["optimal"] else f"best known (bound {row['lower_bound_mb']:.3f})"
    return [
        model,
        scheme.upper(),
        "exact",
        label,
        f"**{row['dram_mb']:.3f}**",
        _fmt(row["fusable_dram_mb"]),
        "",
        "",
        "",
        _fmt(row["search_s"], 2),
    ]


def never_worse_summary(results: Results, runs: list[Run], seeds: int) -> str:
    """Cell counts for the target "explainer-driven splitting never worse than random"."""
    cells = sorted({_cell(r) for r in runs if r.splitter != "random"})
    counts: dict[str, list[int]] = {}
    worse: list[str] = []
    for cell in cells:
        change = results.change_vs_random(Run(*cell, 0), seeds)
        if change is None:
            continue
        ok = change <= 1e-9
        c = counts.setdefault(cell[4], [0, 0])
        c[0] += ok
        c[1] += 1
        if not ok:
            worse.append(
                f"{SPLITTER_NAMES[cell[4]]} on {cell[0]} {cell[1].upper()} "
                f"{SEARCH_NAMES[cell[3]]} (+{100 * change:.2f} %)"
            )
    parts = [f"{SPLITTER_NAMES[s]} {ok}/{n}" for s, (ok, n) in counts.items()]
    text = "Cells where the splitter's mean is not worse than random splitting: " + ", ".join(parts)
    if worse:
        text += ". Worse: " + "; ".join(worse)
    return text + "."


def table5(results: Results, config: BenchConfig) -> str:
    """Rectify rate and search time on MobileNetV2, LBDF, 128 KB (paper Table V)."""
    body = []
    for search in ("ls", "rs"):
        for sp in config.splitters:
            run = Run("mobilenet_v2", "lbdf", "128KB", search, sp, config.small_budget, 0)
            rows = results.seeds(run, config.seeds)
            if not rows:
                continue
            rate = _mean(rows, "rectify_rate")
            explained, seconds = _mean(rows, "explained_groups"), _mean(rows, "explain_s")
            per_group = 1000 * seconds / explained if explained else None
            paper = PAPER_RECTIFY.get((search, sp))
            body.append(
                [
                    SEARCH_NAMES[search],
                    SPLITTER_NAMES[sp],
                    "-" if sp == "random" or rate is None else f"{100 * rate:.1f} %",
                    f"{paper[0]:.1f} %" if paper else "",
                    _fmt(_mean(rows, "invalid_groups"), 0),
                    _fmt(_mean(rows, "search_s"), 1),
                    f"{paper[1]:.0f}" if paper else "",
                    _fmt(per_group, 1),
                    _spread(rows),
                ]
            )
    header = [
        "search",
        "splitter",
        "rectify rate",
        "paper rectify",
        "invalid groups split",
        "search s",
        "paper search s",
        "explain ms / group",
        "DRAM MB",
    ]
    return _table(header, body)


def best_at(trace: Sequence[Sequence[float]], budget: int) -> float | None:
    """Best DRAM a search had after ``budget`` plans, from its improvement trace."""
    best = None
    for n, dram in trace:
        if n > budget:
            break
        best = dram
    return best


def fig5_series(results: Results, config: BenchConfig) -> dict[tuple, dict[str, list]]:
    """Per panel and splitter: (budgets, mean best DRAM over seeds at each budget)."""
    budgets = [max(1, round(config.fig5_budget * k / 20)) for k in range(1, 21)]
    series: dict[tuple, dict[str, list]] = {}
    for model, scheme, search in config.fig5_panels:
        panel = series.setdefault((model, scheme, search), {})
        for sp in config.splitters:
            run = Run(model, scheme, "128KB", search, sp, config.fig5_budget, 0)
            rows = [r for r in results.seeds(run, config.seeds) if "error" not in r]
            if not rows:
                continue
            means = []
            for b in budgets:
                vals = [best_at(r["trace"], b) for r in rows]
                means.append(statistics.mean(vals) if None not in vals else None)
            panel[sp] = [budgets, means]
    return series


def fig5_table(series: dict[tuple, dict[str, list]]) -> str:
    body = []
    for (model, scheme, search), panel in series.items():
        for sp, (_, means) in panel.items():
            quarter = [means[i] for i in (4, 9, 14, 19)]
            body.append(
                [
                    model,
                    scheme.upper(),
                    SEARCH_NAMES[search],
                    SPLITTER_NAMES[sp],
                    *[_fmt(m) for m in quarter],
                ]
            )
    budgets = next(iter(next(iter(series.values())).values()))[0] if body else [0] * 20
    header = [
        "model",
        "scheme",
        "search",
        "splitter",
        *[f"best MB @ {budgets[i]}" for i in (4, 9, 14, 19)],
    ]
    return _table(header, body)


def fig3_table(shares: list[ValidShare]) -> str:
    if not shares:
        return ""
    header = ["model", "scheme", "groups", *[f"{kb} KB" for kb in shares[0].buffers_kb]]
    body = [
        [s.model, s.scheme.upper(), str(s.groups), *[f"{100 * v:.1f} %" for v in s.share]]
        for s in sorted(shares, key=lambda s: (s.scheme, s.model))
    ]
    return _table(header, body)


def report(
    config: BenchConfig,
    results: Results,
    shares: list[ValidShare],
    figures: dict[str, str],
    preamble: str,
) -> str:
    """The whole markdown section; ``figures`` maps figure names to image paths."""
    c = config
    out = [preamble]
    if "table2" in c.experiments:
        runs = table2_runs(c)
        out += [
            f"### Table II: LBDF, 256 KB, {c.large_budget} plans, {c.seeds} seed(s)",
            dram_table(results, runs, c.seeds),
            never_worse_summary(results, runs, c.seeds),
        ]
    for name, search, roman in (("table3", "ls", "III"), ("table4", "rs", "IV")):
        if name in c.experiments:
            runs = table34_runs(c, search)
            out += [
                f"### Table {roman}: {SEARCH_NAMES[search]}, LBDF and BRR, 128 KB, "
                f"{c.small_budget} plans, {c.seeds} seed(s)",
                dram_table(results, runs, c.seeds),
                never_worse_summary(results, runs, c.seeds),
            ]
    if {"table3", "table4"} & set(c.experiments) and "mobilenet_v2" in c.table34_models:
        out += [
            f"### Table V: rectify rate and search time, MobileNetV2, LBDF, 128 KB, "
            f"{c.small_budget} plans",
            table5(results, c),
        ]
    if "fig3" in c.experiments and shares:
        out += [
            "### Figure 3: share of valid fusion groups vs buffer size",
            f"![valid share]({figures['fig3']})",
            fig3_table(shares),
        ]
    if "fig5" in c.experiments:
        series = fig5_series(results, c)
        out += [
            f"### Figure 5: best DRAM vs plan budget ({c.seeds} seed(s), mean)",
            f"![best DRAM vs budget]({figures['fig5']})",
            fig5_table(series),
        ]
    errors = results.errors()
    if errors:
        out += ["### Failed runs", *[f"- `{r['key']}`: {r['error']}" for r in errors]]
    return "\n\n".join(out) + "\n"


def plot_fig3(shares: list[ValidShare], path: Path) -> Path:
    plt, fig, axes = _figure(1, 2)
    for ax, scheme in zip(axes, ("lbdf", "brr"), strict=True):
        for s in (s for s in shares if s.scheme == scheme):
            ax.plot(s.buffers_kb, [100 * v for v in s.share], "o-", label=s.model)
        ax.set_xscale("log", base=2)
        ax.set_xticks(shares[0].buffers_kb, [str(kb) for kb in shares[0].buffers_kb])
        ax.set_title(scheme.upper())
        ax.set_xlabel("buffer (KB)")
        ax.set_ylabel("valid fusion groups (%)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _save(plt, fig, path)


def plot_fig5(series: dict[tuple, dict[str, list]], path: Path) -> Path:
    plt, fig, axes = _figure(1, max(1, len(series)))
    for ax, ((model, scheme, search), panel) in zip(axes, series.items(), strict=False):
        for sp, (budgets, means) in panel.items():
            pts = [(b, m) for b, m in zip(budgets, means, strict=True) if m is not None]
            ax.plot(*zip(*pts, strict=True), label=SPLITTER_NAMES[sp])
        ax.set_title(f"{model}, {scheme.upper()}, {SEARCH_NAMES[search]}")
        ax.set_xlabel("plan budget")
        ax.set_ylabel("best DRAM (MB)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _save(plt, fig, path)


def _figure(rows: int, cols: int):
    # matplotlib (1 s to import) loads only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # only after choosing the headless backend

    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4), squeeze=False)
    return plt, fig, list(axes.flat)


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    try:
        return write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=110))
    finally:
        plt.close(fig)


def point_label(scheme: str, buffer: str) -> str:
    """The catalogue's key for one (scheme, buffer) point in a row's ``dram_mb``."""
    return f"{scheme}/{buffer}"


def catalogue_table(rows: Sequence[Row], points: Sequence[tuple[str, str]]) -> str:
    """``fusionplan bench catalogue``: one line per model, its failure (if any) as a note."""
    header = [
        "model",
        "input",
        "ops",
        "weights M",
        "export s",
        "import s",
        "lower bound MB",
        *[f"{scheme.upper()} {buffer} MB" for scheme, buffer in points],
        "search s",
        "note",
    ]
    body = [
        [
            r["model"],
            r.get("input", "-"),
            str(r.get("ops", "-")),
            _fmt(r.get("weights_m"), 1),
            _fmt(r.get("export_s"), 2) if r.get("export_s") is not None else "",
            _fmt(r.get("import_s")),
            _fmt(r.get("compulsory_mb")),
            *[_fmt(r["dram_mb"].get(point_label(*point))) for point in points],
            _fmt(r.get("search_s"), 1),
            r.get("error", "").replace("|", "\\|"),
        ]
        for r in rows
    ]
    return _table(header, body)

"""``fusionplan plan`` and ``fusionplan sweep``: one plan, or a DRAM-vs-buffer curve."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click

from accel_model import COST_MODELS
from fusionplan.app.cli.common import (
    EngineOptions,
    OutputPath,
    PlanOptions,
    check_distinct_outputs,
    engine_options,
    plan_options,
    print_table,
    progress_bar,
)
from fusionplan.app.grid import Grid, grid_rows, run_grid, write_grid_plot
from fusionplan.app.htmlreport import write_plan_html, write_sweep_html
from fusionplan.app.pipeline import plan_graph, sweep_graph
from fusionplan.app.report import write_sweep_csv, write_sweep_plot
from fusionplan.data.zoo import model_source
from fusionplan.engines import tasks_per_node
from fusionplan.ir.errors import ConfigError
from fusionplan.planning.plan import Plan
from fusionplan.search.effort import STOP_CLOCK


@click.command("plan")
@click.argument("model")
@click.option("--buffer", default="256KB", show_default=True, help="On-chip buffer, e.g. 128KB.")
@plan_options
@click.option("-o", "--output", type=OutputPath(), help="Write the plan JSON here.")
@click.option(
    "--onnx-out",
    type=OutputPath(),
    help="Write the model planned (after any rewriting --prepass) with fusion groups as "
    "node metadata.",
)
@click.option("--html", type=OutputPath(), help="Write an interactive HTML report here.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of a summary.")
def plan_cmd(model, buffer, opts: PlanOptions, output, onnx_out, html, as_json):
    """Plan fusion for MODEL (an ONNX file or a zoo name; see `fusionplan zoo list`)."""
    check_distinct_outputs({"-o/--output": output, "--onnx-out": onnx_out, "--html": html})
    request = opts.request(buffer)
    prepared = opts.prepare(model, request.accelerator())
    graph = prepared.graph
    with progress_bar(f"{opts.search} on {graph.name}", opts.budget, not opts.quiet) as progress:
        result = plan_graph(graph, request, progress)
    result.prepasses = prepared.records
    if output:
        result.save(output)
    if onnx_out:  # the model planned: the rewritten one where a pre-pass rewrote it
        result.annotate_onnx(prepared.rewritten or model_source(model), onnx_out)
    if html:  # the plan file just written, if any: its schedules are built once
        saved = json.loads(Path(output).read_text(encoding="utf-8")) if output else None
        write_plan_html(result, html, saved)
    if as_json:
        click.echo(result.to_json())
    else:
        _print_plan(result)
        for path in (output, onnx_out, html):
            if path:
                click.echo(f"wrote {path}")


def _print_plan(plan: Plan) -> None:
    click.echo(plan.summary())
    result = plan.result
    if result is None:
        return
    if result.exact is not None:
        e = result.exact
        verdict = "proven optimal" if e.optimal else f"{e.status}, gap certified by A*"
        stage = result.extra.get("auto_stage")
        via = f", answered by {stage}" if stage else ""
        click.echo(f"exact        {verdict} ({e.states} states, {e.work:,} work units{via})")
    cert = result.certificate
    if (result.exact is not None and result.exact.status == STOP_CLOCK) or (
        cert is not None and cert.stopped_by == STOP_CLOCK
    ):
        click.echo(
            "note         the wall-clock safety cap (--time-limit) stopped the search, so this "
            "plan depends on the machine and its load; --effort sizes a reproducible run"
        )
    click.echo(
        f"search stats {result.proposed} plans, {result.plans_per_second:.0f} plans/s, "
        f"cost cache hit {result.cost_hit_rate:.1%}, "
        f"rectify rate {result.rectify_rate:.1%} of {result.invalid_groups} invalid groups"
    )


@click.command("sweep")
@click.argument("model", required=False)
@click.option(
    "--models",
    "models_file",
    type=click.Path(exists=True, dir_okay=False),
    help="A file of models (zoo names or ONNX paths), one per line: sweep them all.",
)
@click.option(
    "--buffers",
    default="64KB,128KB,256KB,512KB,1MB,2MB",
    show_default=True,
    help="Comma-separated buffer sizes.",
)
@click.option("--schemes", help="Comma list of schemes to sweep (default: --scheme).")
@plan_options
@engine_options(default_processes=None)
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(directory=True),
    help="Keep finished (model, scheme) sweeps here (runs.jsonl); rerunning resumes.",
)
@click.option("--plot", type=OutputPath(), help="Write a DRAM-vs-buffer PNG here.")
@click.option("-o", "--output", type=OutputPath(), help="Write the table as CSV.")
@click.option(
    "--html", type=OutputPath(), help="Write an interactive chart (each point opens its plan)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the sweep as JSON.")
def sweep_cmd(
    model,
    models_file,
    buffers,
    schemes,
    opts: PlanOptions,
    engine_opts: EngineOptions,
    out_dir,
    plot,
    output,
    html,
    as_json,
):
    """DRAM traffic of MODEL across buffer sizes: a table, optionally CSV and a PNG plot.

    With --models, --schemes, --out or --engine ray it sweeps a grid (models x schemes x
    buffers) as independent tasks on the chosen engine, resumably; the rows do not depend on
    where they ran.
    """
    check_distinct_outputs({"-o/--output": output, "--plot": plot, "--html": html})
    sizes = [b.strip() for b in buffers.split(",") if b.strip()]
    if not sizes:
        raise ConfigError("--buffers needs at least one size")
    requests = [opts.request(b) for b in sizes]
    models = ([model] if model else []) + (_read_models(models_file) if models_file else [])
    if not models:
        raise ConfigError("name a MODEL or give --models FILE")
    scheme_list = [x.strip().lower() for x in (schemes or opts.scheme).split(",") if x.strip()]
    for scheme in scheme_list:
        COST_MODELS.check(scheme)
    grid_mode = len(models) > 1 or len(scheme_list) > 1 or out_dir or engine_opts.engine != "local"
    if grid_mode:
        load_options = json.dumps([sorted(opts.input_shape), opts.strict_ops])
        grid = Grid(tuple(models), tuple(scheme_list), tuple(requests), load_options)
        _sweep_grid(grid, opts, engine_opts, out_dir, plot, output, html, as_json)
        return
    requests = [replace(r, scheme=scheme_list[0]) for r in requests]
    graph = opts.load(models[0])
    total = opts.budget * len(requests)
    with progress_bar(f"sweep {graph.name}", total, not opts.quiet) as progress:
        plans = sweep_graph(graph, requests, progress)  # smallest buffer first
    rows = grid_rows(models[0], plans)  # the columns of a grid sweep, on any engine
    scheme = scheme_list[0].upper()
    if output:
        write_sweep_csv(rows, output)
    if plot:
        write_sweep_plot(rows, plot, title=f"{graph.name}, {scheme}")
    if html:
        write_sweep_html(plans, rows, html)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    print_table(
        [
            "buffer",
            "DRAM MB",
            "fusable MB",
            "lower bound MB",
            "gap",
            "MBU KB",
            "groups",
            "unfusable",
        ],
        [
            [
                r["buffer"],
                f"{r['dram_mb']:.3f}",
                f"{r['fusable_dram_mb']:.3f}",
                f"{r['lower_bound_mb']:.3f}",
                f"{r['gap']:.2%}",
                f"{r['mbu_kb']:.1f}",
                r["groups"],
                r["unfusable_ops"],
            ]
            for r in rows
        ],
        title=f"{graph.name}: {scheme}, {opts.search} x {opts.budget}, splitter {opts.splitter}",
    )
    for path in (output, plot, html):
        if path:
            click.echo(f"wrote {path}")


def _read_models(path: str) -> list[str]:
    """One model per line; blank lines and ``#`` comments are skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    models = [ln.split("#", 1)[0].strip() for ln in lines]
    models = [m for m in models if m]
    if not models:
        raise ConfigError(f"{path} names no model (one zoo name or ONNX path per line)")
    return models


def _model_label(model: str) -> str:
    """A grid table's model cell: an ONNX file's stem, a zoo name as it is. A whole path was
    cut to the column's width, so models of one folder all read ``/home/me/…``."""
    return Path(model).stem if model.lower().endswith(".onnx") else model


def _sweep_grid(
    grid: Grid, opts: PlanOptions, engine_opts: EngineOptions, out_dir, plot, output, html,
    as_json,
) -> None:  # fmt: skip
    engine = engine_opts.make()
    with progress_bar("sweep tasks", len(grid.models) * len(grid.schemes), not opts.quiet) as bar:
        rows, outcomes = run_grid(
            grid, opts.load, engine=engine, out_dir=out_dir, retries=engine_opts.retries,
            progress=bar,
        )  # fmt: skip
    if output:
        write_sweep_csv(rows, output)
    if plot:
        write_grid_plot(rows, plot)
    if html:  # a grid keeps its rows, not its plans: the chart alone
        write_sweep_html([], rows, html)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    print_table(
        ["model", "scheme", "buffer", "DRAM MB", "lower bound MB", "gap", "groups", "note"],
        [
            [
                _model_label(r["model"]),
                r["scheme"],
                r["buffer"],
                "" if r["error"] else f"{r['dram_mb']:.3f}",
                "" if r["error"] else f"{r['lower_bound_mb']:.3f}",
                "" if r["error"] else f"{r['gap']:.2%}",
                r["groups"],
                r["error"],
            ]
            for r in rows
        ],
        title=f"sweep grid on {engine.describe()}: {opts.search} x {opts.budget}",
    )
    if outcomes:
        click.echo(tasks_per_node(outcomes))
    for path in (output, plot, html):
        if path:
            click.echo(f"wrote {path}")
    failed = sorted({(r["model"], r["scheme"]) for r in rows if r["error"]})
    if failed:
        raise ConfigError(
            f"{len(failed)} (model, scheme) sweep(s) failed, e.g. {failed[0][0]} "
            f"{failed[0][1]}: see the table; rerun to retry them"
        )

"""``fusionplan plan`` and ``fusionplan sweep``: one plan, or a DRAM-vs-buffer curve."""

from __future__ import annotations

import json

import click

from data.zoo import model_source
from fusionplan.app.cli.common import (
    OutputPath,
    PlanOptions,
    plan_options,
    print_table,
    progress_bar,
)
from fusionplan.app.pipeline import plan_graph, sweep_graph
from fusionplan.app.report import sweep_rows, write_sweep_csv, write_sweep_plot
from fusionplan.ir.errors import ConfigError
from fusionplan.planning.plan import Plan


@click.command("plan")
@click.argument("model")
@click.option("--buffer", default="256KB", show_default=True, help="On-chip buffer, e.g. 128KB.")
@plan_options
@click.option("-o", "--output", type=OutputPath(), help="Write the plan JSON here.")
@click.option(
    "--onnx-out",
    type=OutputPath(),
    help="Write the model with fusion groups as node metadata.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of a summary.")
def plan_cmd(model, buffer, opts: PlanOptions, output, onnx_out, as_json):
    """Plan fusion for MODEL (an ONNX file or a zoo name; see `fusionplan zoo list`)."""
    request = opts.request(buffer)
    graph = opts.load(model)
    with progress_bar(f"{opts.search} on {graph.name}", opts.budget, not opts.quiet) as progress:
        result = plan_graph(graph, request, progress)
    if output:
        result.save(output)
    if onnx_out:
        result.annotate_onnx(model_source(model), onnx_out)
    if as_json:
        click.echo(result.to_json())
    else:
        _print_plan(result)
        for path in (output, onnx_out):
            if path:
                click.echo(f"wrote {path}")


def _print_plan(plan: Plan) -> None:
    click.echo(plan.summary())
    result = plan.result
    if result is None:
        return
    if result.exact is not None:
        e = result.exact
        bound = e.lower_bound_bytes / 2**20
        verdict = "proven optimal" if e.optimal else f"time limit hit, optimum >= {bound:.3f} MB"
        click.echo(f"exact        {verdict} ({e.states} states)")
    click.echo(
        f"search stats {result.proposed} plans, {result.plans_per_second:.0f} plans/s, "
        f"cost cache hit {result.cost_hit_rate:.1%}, "
        f"rectify rate {result.rectify_rate:.1%} of {result.invalid_groups} invalid groups"
    )


@click.command("sweep")
@click.argument("model")
@click.option(
    "--buffers",
    default="64KB,128KB,256KB,512KB,1MB,2MB",
    show_default=True,
    help="Comma-separated buffer sizes.",
)
@plan_options
@click.option("--plot", type=OutputPath(), help="Write a DRAM-vs-buffer PNG here.")
@click.option("-o", "--output", type=OutputPath(), help="Write the table as CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print the sweep as JSON.")
def sweep_cmd(model, buffers, opts: PlanOptions, plot, output, as_json):
    """DRAM traffic of MODEL across buffer sizes: a table, optionally CSV and a PNG plot."""
    sizes = [b.strip() for b in buffers.split(",") if b.strip()]
    if not sizes:
        raise ConfigError("--buffers needs at least one size")
    requests = [opts.request(b) for b in sizes]
    graph = opts.load(model)
    total = opts.budget * len(requests)
    with progress_bar(f"sweep {graph.name}", total, not opts.quiet) as progress:
        plans = sweep_graph(graph, requests, progress)  # smallest buffer first, warm-started
    rows = sweep_rows(plans)
    scheme = opts.scheme.upper()
    if output:
        write_sweep_csv(rows, output)
    if plot:
        write_sweep_plot(rows, plot, title=f"{graph.name}, {scheme}")
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    print_table(
        ["buffer", "DRAM MB", "fusable MB", "lower bound MB", "MBU KB", "groups", "unfusable"],
        [
            [
                r["buffer"],
                f"{r['dram_mb']:.3f}",
                f"{r['fusable_dram_mb']:.3f}",
                f"{r['lower_bound_mb']:.3f}",
                f"{r['mbu_kb']:.1f}",
                r["groups"],
                r["unfusable_ops"],
            ]
            for r in rows
        ],
        title=f"{graph.name}: {scheme}, {opts.search} x {opts.budget}, splitter {opts.splitter}",
    )
    for path in (output, plot):
        if path:
            click.echo(f"wrote {path}")

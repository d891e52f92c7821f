"""``fusionplan report``: one interactive HTML file of plan files and sweep tables."""

from __future__ import annotations

from pathlib import Path

import click

from fusionplan.app.cli.common import OutputPath, input_shape_option, parse_shapes
from fusionplan.app.htmlreport import plan_label, plan_report, read_plan_file, read_sweep_csv
from fusionplan.data.zoo import resolve_model
from fusionplan.ir.errors import ConfigError, FusionPlanError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.io import write_text_atomic


@click.command("report")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=OutputPath(), required=True, help="Write the HTML here.")
@click.option(
    "--model",
    help="The plans' model (zoo name or ONNX file); default: the model the plan files name.",
)
@input_shape_option()
def report_cmd(inputs, output, model, input_shape):
    """An interactive HTML report of plan files (JSON from `plan -o`) of one model and sweep
    tables (CSV from `sweep -o`): the op graph with its fusion groups, the numbers, a diff
    of the plans and the sweep chart. One file that opens offline in any browser."""
    plans, rows = [], []
    for path in inputs:
        if path.lower().endswith(".csv"):
            rows.extend(read_sweep_csv(path))
        else:
            plans.append((path, read_plan_file(path)))
    graph = _graph_of(plans, model, input_shape) if plans else None
    page = plan_report(graph, _labelled(plans), rows or None)
    write_text_atomic(output, page)
    click.echo(f"wrote {output}")


def _graph_of(plans: list[tuple[str, dict]], model: str | None, input_shape) -> OpGraph:
    """The op graph every plan names; one model per report (a diff compares its groups)."""
    names = sorted({p["model"]["name"] for _, p in plans})
    if len(names) > 1:
        raise ConfigError(
            f"the plans are of {len(names)} models ({', '.join(names)}): a report holds plans "
            "of one model"
        )
    try:
        return resolve_model(model or names[0], input_shapes=parse_shapes(input_shape))
    except FusionPlanError as exc:
        if model is not None:
            raise
        raise ConfigError(
            f"{exc} (the plans are of model '{names[0]}': give its ONNX file with --model)"
        ) from None


def _labelled(plans: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """Each plan named by its buffer and scheme, and by its file where two share those."""
    labels = [plan_label(p) for _, p in plans]
    return [
        (label if labels.count(label) == 1 else f"{label} · {Path(path).stem}", p)
        for label, (path, p) in zip(labels, plans, strict=True)
    ]

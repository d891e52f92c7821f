"""``fusionplan zoo list|export``: the built-in torchvision models."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from fusionplan.app.cli.common import OutputPath, print_table
from fusionplan.data.zoo import export_model, list_torchvision, list_zoo, torchvision_models


@click.group("zoo")
def zoo_group() -> None:
    """The built-in model zoo (torchvision architectures exported to ONNX, no weights)."""


@zoo_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also list every other torchvision classification/segmentation model.",
)
def zoo_list(as_json: bool, show_all: bool) -> None:
    """List the paper's zoo models, their input sizes and whether they are cached; any
    other torchvision classification or segmentation model also works by name."""
    rows = list_zoo()
    others = list_torchvision() if show_all else []
    if as_json:
        click.echo(json.dumps([asdict(r) for r in [*rows, *others]], indent=2))
        return
    print_table(
        ["name", "input", "role", "cached", "description"],
        [[r.name, r.input_size, r.role, "yes" if r.cached else "", r.description] for r in rows],
    )
    if not show_all:
        click.echo(
            f"\n{len(torchvision_models())} more torchvision models work by name "
            "(fusionplan zoo list --all)."
        )
        return
    click.echo("")
    print_table(
        ["name", "input", "cached", "description"],
        [[r.name, r.input_size, "yes" if r.cached else "", r.description] for r in others],
        title="other torchvision models (by name)",
    )


@zoo_group.command("export")
@click.argument("name")
@click.option("-o", "--output", type=OutputPath(), required=True)
@click.option("--single-file", is_flag=True, help="Embed weights instead of FILE.data beside it.")
def zoo_export(name: str, output: str, single_file: bool) -> None:
    """Export zoo model NAME (a paper model or any torchvision one) to an ONNX file."""
    path = export_model(name, Path(output), external_data=not single_file)
    click.echo(f"wrote {path}")

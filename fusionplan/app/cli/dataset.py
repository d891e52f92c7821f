"""``fusionplan dataset generate``: labelled fusion groups for GNN training."""

from __future__ import annotations

from pathlib import Path

import click

from fusionplan.app.cli.common import (
    EngineOptions,
    OutputPath,
    comma_list,
    engine_options,
    progress_bar,
    whole_kb_sizes,
)
from fusionplan.data.dataset import DEFAULT_PROCESSES, default_dataset_dir, generate_dataset


@click.group("dataset")
def dataset_group() -> None:
    """Fusion-group datasets for training the GNN validity classifier."""


@dataset_group.command("generate")
@click.option(
    "-o",
    "--output",
    type=OutputPath(directory=True),
    default=default_dataset_dir,
    help="Dataset directory (default: the fusionplan cache).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--groups",
    type=int,
    default=None,
    help="Distinct groups from the training models (default 12,000).",
)
@click.option(
    "--unseen-groups",
    type=int,
    default=None,
    help="Groups from the unseen test models (default 2,000).",
)
@click.option(
    "--models",
    help="Comma list of training models: zoo names, ONNX files or synthetic graphs "
    "(randwire-n32-s0, nasnet-c3, ...) (default: the twelve models of the training "
    "families, docs/dataset.md).",
)
@click.option(
    "--unseen-models",
    help="Comma list of held-out models, same forms (default Inception-v3, RandWire-64, "
    "NASNet-A 6 cells: unseen members of the training families).",
)
@click.option("--buffers", help="Comma list of buffer sizes to label at (default 64KB,...,2MB).")
@engine_options(default_processes=DEFAULT_PROCESSES)
@click.option("--overwrite", is_flag=True, help="Discard an existing dataset with other settings.")
@click.option("--quiet", "-q", is_flag=True)
def dataset_generate(
    output, seed, groups, unseen_groups, models, unseen_models, buffers,
    engine_opts: EngineOptions, overwrite, quiet,
) -> None:  # fmt: skip
    """Sample fusion groups from the zoo and label them under LBDF and BRR at 6 buffers.

    Deterministic for a seed, parallel (local processes or Ray: the bytes are the same),
    resumable: rerun the same command after an interruption and only missing shards are built.
    """

    sizes = {
        k: v for k, v in (("groups", groups), ("unseen_groups", unseen_groups)) if v is not None
    }
    if models:
        sizes["models"] = list(comma_list(models) or ())
    if unseen_models:
        sizes["unseen_models"] = list(comma_list(unseen_models) or ())
    if buffers:
        sizes["buffers_kb"] = [b // 1024 for b in whole_kb_sizes(buffers)]
    out = Path(output)
    engine = engine_opts.make()
    with progress_bar("generating shards", enabled=not quiet) as progress:
        manifest = generate_dataset(
            out,
            seed=seed,
            engine=engine,
            retries=engine_opts.retries,
            overwrite=overwrite,
            progress=progress,
            **sizes,
        )
    train, unseen = manifest["counts"]["train"], manifest["counts"]["unseen"]
    click.echo(
        f"wrote {out}: {train['groups']} training groups ({train['samples_per_scheme']} "
        f"samples per scheme) + {unseen['groups']} unseen-model groups, "
        f"{manifest['generation_seconds']:.0f} s on {manifest['engine']}"
    )
    if not quiet:
        click.echo(manifest["tasks_per_node"])

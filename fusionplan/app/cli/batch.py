"""``fusionplan batch``: schedule, lay out and run one mini-batch of a dynamic workload."""

from __future__ import annotations

import json

import click

from fusionplan.app.cli.common import console
from fusionplan.batching.fsm import DEFAULT_ENCODING, ENCODINGS
from fusionplan.batching.layout import LAYOUTS
from fusionplan.batching.policies import POLICIES
from fusionplan.batching.workloads import WORKLOADS


@click.command("batch")
@click.argument("workload", type=click.Choice(WORKLOADS.names()), metavar="WORKLOAD")
@click.option("--policy", type=click.Choice(POLICIES.names()), default="fsm", show_default=True)
@click.option("--layout", type=click.Choice(list(LAYOUTS)), default="pq", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--hidden", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--train-episodes", type=click.IntRange(min=1), default=400, show_default=True)
@click.option(
    "--encoding",
    type=click.Choice(list(ENCODINGS)),
    default=DEFAULT_ENCODING,
    show_default=True,
    help="FSM state encoding (set, sort, max: the paper's; crit, critsort: ours).",
)
@click.option(
    "--table",
    type=click.Path(exists=True, dir_okay=False),
    help="A saved FSM table (JSON) instead of the cached or freshly trained one.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--no-verify", is_flag=True, help="Skip the check against node-by-node runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def batch_cmd(
    workload,
    policy,
    layout,
    batch_size,
    hidden,
    train_episodes,
    encoding,
    table,
    seed,
    repeats,
    no_verify,
    as_json,
) -> None:
    """Batch WORKLOAD's dataflow graph with a policy (ED-Batch's FSM, DyNet's agenda, TF
    Fold's depth), plan memory, run it in PyTorch and report batches, copies, throughput."""
    # torch (seconds to import) loads only when a batch runs, not for --help or a bad option
    from fusionplan.batching.pipeline import BatchingRequest, run_batching

    request = BatchingRequest(
        workload,
        policy,
        layout,
        batch_size,
        hidden,
        seed,
        train_episodes,
        encoding,
        table,
        repeats,
        not no_verify,
    ).check()
    with console(stderr=True).status(f"batching {workload} ..."):
        result = run_batching(request)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, default=str))
    else:
        click.echo(result.summary())

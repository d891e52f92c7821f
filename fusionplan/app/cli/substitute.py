"""``fusionplan substitute``: rewrite a model's graph by cost-based substitution search."""

from __future__ import annotations

import json

import click

from accel_model import COST_MODELS
from accel_model.latency import LATENCY_MODELS
from fusionplan.app.api import substitute
from fusionplan.app.cli.common import (
    OutputPath,
    RegistryChoice,
    input_shape_option,
    parse_shapes,
    progress_bar,
)
from fusionplan.passes.substitution.cost import COST_KINDS
from fusionplan.passes.substitution.measures import MEASURES
from fusionplan.passes.substitution.pipeline import (
    ACCELERATOR_COSTS,
    PLANNED_BUDGET,
    TARGETS,
    SubstitutionRequest,
)
from fusionplan.passes.substitution.rules import RULES
from fusionplan.passes.substitution.search import REWRITE_SEARCHES
from fusionplan.passes.substitution.search.base import DEFAULT_BUDGET
from fusionplan.passes.substitution.search.ocggs import DEFAULT_DEPTH


@click.command("substitute")
@click.argument("model")
@click.option(
    "--search",
    type=RegistryChoice(REWRITE_SEARCHES),
    help=f"Search: {REWRITE_SEARCHES.describe()}. Default: metaflow; taso with a DRAM cost.",
)
@click.option(
    "--cost",
    type=click.Choice([*COST_KINDS, *ACCELERATOR_COSTS.names()]),
    default="sum",
    show_default=True,
    help="sum of op latencies (TASO, MetaFlow), AutoGraph's 0.25 x critical path + sum, "
    "dram: DRAM of the fusion planner's plan on the accelerator (--buffer, --scheme or "
    "--accelerator), or dram-exact: each candidate planned by the exact search (joint).",
)
@click.option("--buffer", help="dram costs: on-chip buffer, e.g. 128KB (default 256KB).")
@click.option(
    "--scheme",
    type=RegistryChoice(COST_MODELS),
    default="lbdf",
    show_default=True,
    help="dram costs: the fusion scheme.",
)
@click.option(
    "--accelerator",
    type=click.Path(exists=True, dir_okay=False),
    help="dram costs: an accelerator description file (its buffer unless --buffer).",
)
@click.option(
    "--plan-effort",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="dram costs: the planner's effort, as `fusionplan plan --effort` (give the plan's "
    "own: the rewrite is then never dearer in DRAM than the original under that plan).",
)
@click.option(
    "--device",
    type=RegistryChoice(LATENCY_MODELS),
    default="h100",
    show_default=True,
    help=f"Op latencies: {LATENCY_MODELS.describe()}.",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    help=f"Candidate graphs the search may build (default {DEFAULT_BUDGET}; {PLANNED_BUDGET} "
    "with a DRAM cost, each one a plan).",
)
@click.option(
    "--depth",
    "-K",
    type=click.IntRange(min=1),
    default=DEFAULT_DEPTH,
    show_default=True,
    help="K: longest substitution sequence for ocggs-prune and ocggs-dpp.",
)
@click.option(
    "--rules",
    help="Comma list of rules to use (default: all). See --list-rules.",
)
@click.option(
    "--measure",
    type=click.Choice(MEASURES.names()),
    help="autograph: time its top candidates here and keep the fastest: ort (onnxruntime on "
    "this CPU) or streams (their stream schedule run for real: CUDA Graph on a GPU, a "
    "thread per stream on the CPU). Rank them by AutoGraph's cost with --cost mixed.",
)
@click.option(
    "--guard",
    is_flag=True,
    help="Time the result in onnxruntime on this CPU and drop rule families that make it "
    "more than 2% slower than the original.",
)
@click.option(
    "--target",
    type=click.Choice(TARGETS),
    default="onnx",
    show_default=True,
    help="What the rewritten model may use: standard ONNX ops only (any runtime), or "
    "onnxruntime's contrib ops too (FusedConv, FusedGemm).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@input_shape_option()
@click.option("-o", "--output", type=OutputPath(), help="Write the rewritten ONNX model here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def substitute_cmd(
    model,
    search,
    cost,
    buffer,
    scheme,
    accelerator,
    plan_effort,
    device,
    budget,
    depth,
    rules,
    measure,
    guard,
    target,
    seed,
    input_shape,
    output,
    as_json,
    quiet,
) -> None:
    """Rewrite MODEL (ONNX file or zoo name) into an equivalent graph that is faster under
    the op-latency model: fused activations, merged sibling convs and matmuls, folded
    constants. The result is checked against the original in onnxruntime (optimisations
    off); with --guard or --measure the headline speedup is the one measured here."""
    names = [r.strip() for r in rules.split(",") if r.strip()] if rules else None
    for name in names or ():
        RULES.check(name)
    shapes = parse_shapes(input_shape)
    planned = cost in ACCELERATOR_COSTS.names()
    if not planned and (buffer or accelerator):
        raise click.UsageError("--buffer and --accelerator apply to --cost dram or dram-exact")
    defaults = SubstitutionRequest(search=search, cost=cost, budget=budget).resolved()
    search, budget = defaults.search, defaults.budget
    with progress_bar(f"{search} on {model}", budget, not quiet) as bar:
        done = 0

        def progress(n: int) -> None:
            nonlocal done
            done += n
            bar(done)

        result = substitute(
            model,
            search=search,
            cost=cost,
            device=device,
            budget=budget,
            depth=depth,
            rules=names,
            measure=measure,
            guard=guard,
            seed=seed,
            target=target,
            progress=progress,
            input_shapes=shapes,
            buffer=buffer,
            scheme=scheme,
            accelerator=accelerator,
            plan_effort=plan_effort,
        )
    if output:
        result.save(output)
    if as_json:
        click.echo(json.dumps(result.report.to_json(), indent=2))
        return
    click.echo(result.summary())
    if output:
        click.echo(f"wrote {output}")

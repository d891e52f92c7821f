"""``fusionplan streams``: assign a model's ops to parallel GPU streams (Nimble), simulate
the schedule, optionally run it, and draw it."""

from __future__ import annotations

import json

import click

from accel_model.latency import LATENCY_MODELS
from fusionplan.app.api import schedule_streams
from fusionplan.app.cli.common import (
    OutputPath,
    RegistryChoice,
    check_distinct_outputs,
    input_shape_option,
    parse_shapes,
)
from fusionplan.app.htmlreport import write_streams_html
from fusionplan.passes.streams.pipeline import EXECUTORS
from fusionplan.passes.streams.simulate import EVENT_S


@click.command("streams")
@click.argument("model")
@click.option(
    "--device",
    type=RegistryChoice(LATENCY_MODELS),
    default="h100",
    show_default=True,
    help=f"Op latencies the schedule is simulated on: {LATENCY_MODELS.describe()}.",
)
@click.option(
    "--max-streams",
    type=click.IntRange(min=1),
    help="At most this many streams (default: the graph's width, its maximum antichain).",
)
@click.option(
    "--execute",
    type=click.Choice(EXECUTORS),
    help="Also run the schedule here and time it: cpu (a thread per stream) or cuda "
    "(CUDA streams, eager and CUDA Graph).",
)
@click.option(
    "--launch-us",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Host issue time per op in the simulation (0: a CUDA Graph replay; ~4 eager).",
)
@click.option(
    "--event-us",
    type=click.FloatRange(min=0),
    default=EVENT_S * 1e6,
    show_default=True,
    help="Cost of one cross-stream event wait in the simulation.",
)
@click.option(
    "--repeats", type=click.IntRange(min=1), default=20, show_default=True, help="Timed runs."
)
@input_shape_option()
@click.option("--trace", type=OutputPath(), help="Write a Chrome/Perfetto trace (JSON) here.")
@click.option("--gantt", type=OutputPath(), help="Write a Gantt chart (PNG) here.")
@click.option("--html", type=OutputPath(), help="Write an interactive Gantt chart (HTML) here.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def streams_cmd(
    model,
    device,
    max_streams,
    execute,
    launch_us,
    event_us,
    repeats,
    input_shape,
    trace,
    gantt,
    html,
    as_json,
) -> None:
    """Schedule MODEL's ops (ONNX file or zoo name) onto parallel streams with the fewest
    synchronisations, as Nimble does; report streams, events, and the makespan simulated on
    the op-latency model against its bounds and one stream."""
    check_distinct_outputs({"--trace": trace, "--gantt": gantt, "--html": html})
    shapes = parse_shapes(input_shape)
    result = schedule_streams(
        model,
        input_shapes=shapes,
        device=device,
        max_streams=max_streams,
        execute=execute,
        launch_s=launch_us * 1e-6,
        event_s=event_us * 1e-6,
        repeats=repeats,
    )
    if trace:
        result.save_trace(trace)
    if gantt:
        result.save_gantt(gantt)
    if html:
        write_streams_html(result.trace(), result.report.model + ": stream schedule", html)
    if as_json:
        click.echo(json.dumps(result.report.to_json(), indent=2))
        return
    click.echo(result.summary())
    for path in (trace, gantt, html):
        if path:
            click.echo(f"wrote {path}")

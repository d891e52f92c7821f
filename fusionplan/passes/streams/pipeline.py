"""``schedule_streams``: one call from an ONNX model to a stream schedule, its simulated
makespan on an op-latency model, and (optionally) its measured latency.

The model is imported once (constants folded, :func:`from_onnx`), then the op DAG is
assigned to streams (:func:`assign_streams`), simulated on the latency model
(:func:`simulate`) and, with
``execute``, run for real on the CPU or a GPU (:mod:`.measure`). The report carries what an
inference engineer asks for: ops, width, streams, events against the reduction's
cross-stream edges, makespan against its bounds and one stream, AutoGraph's mixed cost
beside it, and measured times with their numeric check.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnx

from accel_model.latency import LatencyModel, make_latency_model
from accel_model.latency.graph import OpLatencies
from data.zoo import model_source
from fusionplan.ir.errors import ConfigError, ModelError
from fusionplan.ir.model import ModelGraph, split_qualified
from fusionplan.ir.onnx_model import from_onnx, load_onnx, with_input_shapes
from fusionplan.passes.streams.assign import StreamAssignment, assign_streams
from fusionplan.passes.streams.dag import OpDag
from fusionplan.passes.streams.measure import (
    TOLERANCE,
    Measurement,
    feeds_for,
    measure_cpu,
    measure_cuda,
)
from fusionplan.passes.streams.program import check_schedulable
from fusionplan.passes.streams.simulate import EVENT_S, Simulation, simulate
from fusionplan.passes.streams.trace import Timeline, chrome_trace, write_gantt, write_trace

Execute = Literal["cpu", "cuda"]
EXECUTORS: tuple[Execute, ...] = ("cpu", "cuda")
METADATA_KEY = "fusionplan.streams"


@dataclass(frozen=True)
class StreamsRequest:
    device: str = "h100"  # the latency model the schedule is simulated on
    max_streams: int | None = None  # None: the graph's width
    execute: Execute | None = None  # also run it for real here
    launch_s: float = 0.0  # host issue time per op (0: a CUDA Graph replay)
    event_s: float = EVENT_S
    repeats: int = 20
    seed: int = 0


@dataclass(frozen=True)
class StreamsReport:
    model: str
    device: str
    ops: int
    edges: int
    reduced_edges: int
    width: int
    streams: int
    events: int
    reduced_cross_edges: int
    schedule_seconds: float
    simulation: dict[str, float | int]
    measured: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        ms = 1e3
        sim = self.simulation
        lines = [
            f"{self.model}: {self.ops} ops, width {self.width}, on {self.device}",
            f"  streams   {self.streams} streams, {self.events} events "
            f"(cross-stream edges of the reduction: {self.reduced_cross_edges}), "
            f"scheduled in {self.schedule_seconds * ms:.1f} ms",
            f"  makespan  {sim['makespan_s'] * ms:.3f} ms vs one stream "
            f"{sim['sequential_s'] * ms:.3f} ms ({sim['speedup']:.2f}x)",
            f"  bounds    critical path {sim['critical_path_s'] * ms:.3f} ms, work/streams "
            f"{sim['work_s'] / max(self.streams, 1) * ms:.3f} ms: makespan "
            f"{sim['gap'] * 100:.1f} % above the bound",
            f"  autograph mixed cost 0.25 x critical path + work = {sim['mixed_s'] * ms:.3f} ms",
        ]
        if self.measured is not None:
            m = self.measured
            times = ", ".join(f"{k} {v:.2f} ms" for k, v in m["times_ms"].items())
            errors = ", ".join(f"{k} {v:.1e}" for k, v in m["errors"].items())
            lines.append(f"  measured  {m['device']}: {times} ({m['speedup']:.2f}x)")
            lines.append(f"  check     max relative error vs sequential: {errors}")
        return "\n".join(lines)


@dataclass(frozen=True)
class StreamsResult:
    """The schedule of a graph (its constants folded at import) and what it costs."""

    graph: ModelGraph
    dag: OpDag
    latency: tuple[float, ...]
    """Seconds per op of ``dag`` on the request's latency model (to reschedule without
    pricing the ops again)."""
    assignment: StreamAssignment
    simulation: Simulation
    report: StreamsReport
    measurement: Measurement | None = field(default=None)

    def summary(self) -> str:
        return self.report.summary()

    def stream_map(self) -> dict[str, Any]:
        """Node name -> stream, and the events as node-name pairs (the pass's metadata)."""
        names = self.dag.names
        return {
            "streams": {names[v]: s for v, s in enumerate(self.assignment.stream_of)},
            "events": [[names[u], names[v]] for u, v in self.assignment.events],
        }

    def trace(self) -> dict[str, Any]:
        """Chrome/Perfetto trace: the simulated schedule, and the measured CPU run if any."""
        timelines = [
            Timeline(
                f"simulated on {self.report.device}", self.simulation.start, self.simulation.finish
            )
        ]
        if self.measurement is not None and self.measurement.timeline is not None:
            start, finish = self.measurement.timeline
            timelines.append(Timeline(f"measured on {self.measurement.device}", start, finish))
        return chrome_trace(self.dag.names, self._ops(), self.assignment, timelines)

    def save_trace(self, path: str | os.PathLike) -> Path:
        return write_trace(path, self.trace())

    def save_gantt(self, path: str | os.PathLike) -> Path:
        timeline = Timeline("simulated", self.simulation.start, self.simulation.finish)
        title = (
            f"{self.report.model}: {self.report.streams} streams, {self.report.events} events, "
            f"simulated on {self.report.device.split(':')[0]}"
        )
        return write_gantt(path, self._ops(), self.assignment, timeline, title)

    def _ops(self) -> list[str]:
        return [split_qualified(self.graph.nodes[name].op)[1] for name in self.dag.names]


def schedule_streams(
    model: onnx.ModelProto | str | os.PathLike,
    request: StreamsRequest = StreamsRequest(),
    *,
    latency: LatencyModel | None = None,
    name: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> StreamsResult:
    """Assign ``model``'s ops (a ModelProto, an ONNX path or a zoo name) to streams,
    simulate the schedule on ``request.device``'s latency model and optionally run it.
    ``input_shapes`` makes symbolic graph inputs static (``{"x": (1, 3, 224, 224)}``)."""
    if request.execute is not None and request.execute not in EXECUTORS:
        raise ConfigError(f"unknown executor '{request.execute}' (choose cpu or cuda)")
    if request.execute == "cuda":
        _require_cuda()
    if not isinstance(model, onnx.ModelProto):
        name = name or Path(os.fspath(model)).stem
        model = load_onnx(model_source(model))
    graph = check_schedulable(from_onnx(with_input_shapes(model, input_shapes), command="streams"))
    if not len(graph):
        raise ModelError(f"{name or graph.name}: no ops to schedule")
    latency = latency or make_latency_model(request.device)
    seconds = list(OpLatencies(latency)(graph).values())
    began = time.perf_counter()
    dag = OpDag.from_graph(graph)
    assignment = assign_streams(dag, seconds, request.max_streams)
    scheduled = time.perf_counter() - began
    sim = simulate(dag, assignment, seconds, launch_s=request.launch_s, event_s=request.event_s)
    measurement = None
    if request.execute is not None:
        feeds = feeds_for(graph, request.seed)
        measure = measure_cuda if request.execute == "cuda" else measure_cpu
        measurement = measure(graph, assignment, feeds, repeats=request.repeats)
        bad = {k: e for k, e in measurement.errors.items() if k.startswith("streams")}
        if request.execute == "cpu" and max(bad.values()) > TOLERANCE:
            raise ModelError(
                f"multi-stream run differs from the sequential one (relative error "
                f"{max(bad.values()):.1e} > {TOLERANCE:g})"
            )
    report = StreamsReport(
        model=name or graph.name,
        device=latency.describe(),
        ops=len(dag),
        edges=len(dag.edges),
        reduced_edges=len(dag.reduced_edges),
        width=assignment.width,
        streams=assignment.num_streams,
        events=len(assignment.events),
        reduced_cross_edges=assignment.reduced_cross_edges,
        schedule_seconds=scheduled,
        simulation=sim.to_json(),
        measured=measurement.to_json() if measurement is not None else None,
    )
    return StreamsResult(graph, dag, tuple(seconds), assignment, sim, report, measurement)


def _require_cuda() -> None:
    import torch  # heavy: 2 s, only to ask whether there is a GPU

    if not torch.cuda.is_available():
        raise ConfigError("--execute cuda needs a CUDA GPU; none is available here")


class StreamsPass:
    """The ``streams`` pre-pass of :data:`fusionplan.passes.PASSES`: the model comes back
    unchanged but for its stream schedule in the metadata (``fusionplan.streams``: node ->
    stream, events), plus the report as JSON."""

    name = "streams"

    def __init__(self, **options: Any) -> None:
        self.request = StreamsRequest(**options)

    def run(self, model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, Any]]:
        result = schedule_streams(model, self.request)
        annotated = onnx.ModelProto()
        annotated.CopyFrom(model)
        kept = [p for p in annotated.metadata_props if p.key != METADATA_KEY]
        del annotated.metadata_props[:]
        annotated.metadata_props.extend(kept)
        entry = annotated.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, json.dumps(result.stream_map())
        r, sim = result.report, result.simulation
        line = (
            f"{r.streams} streams, {r.events} events, simulated {sim.makespan * 1e3:.3f} ms vs "
            f"{sim.sequential * 1e3:.3f} ms on one stream ({sim.speedup:.2f}x)"
        )
        return annotated, {**r.to_json(), "summary": line}

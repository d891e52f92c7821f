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

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnx

from accel_model.latency import LATENCY_MODELS, LatencyModel, make_latency_model
from accel_model.latency.graph import OpLatencies
from fusionplan.data.zoo import model_source
from fusionplan.ir.errors import ConfigError, ModelError
from fusionplan.ir.model import ModelGraph, split_qualified
from fusionplan.ir.onnx_model import from_onnx, load_onnx, with_input_shapes
from fusionplan.passes.manager import (
    STATIC_SHAPES,
    STREAM_SCHEDULE,
    ModelPass,
    OptionError,
    PassContext,
    PassResult,
    check_choice,
)
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
class StreamSchedule:
    """The ``streams`` pass's artifact (:data:`STREAM_SCHEDULE`): which ops run on which
    stream, in issue order, the events between streams, and the makespan simulated on the
    op-latency model against one stream; what a plan's report and JSON carry."""

    device: str
    streams: tuple[tuple[str, ...], ...]
    events: tuple[tuple[str, str], ...]
    makespan_s: float
    sequential_s: float
    bound_s: float
    """No schedule on these streams finishes earlier (critical path, work / streams)."""

    @property
    def speedup(self) -> float:
        return self.sequential_s / self.makespan_s if self.makespan_s else 1.0

    def headline(self) -> str:
        per_stream = "/".join(str(len(ops)) for ops in self.streams)
        return (
            f"{len(self.streams)} streams (ops per stream {per_stream}), {len(self.events)} "
            f"events, makespan {self.makespan_s * 1e3:.3f} ms vs {self.sequential_s * 1e3:.3f} "
            f"ms on one stream ({self.speedup:.2f}x) on {self.device.split(':')[0]}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "streams": [list(ops) for ops in self.streams],
            "events": [list(e) for e in self.events],
            "makespan_s": self.makespan_s,
            "sequential_s": self.sequential_s,
            "bound_s": self.bound_s,
            "speedup": self.speedup,
        }


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

    def schedule(self) -> StreamSchedule:
        """The schedule as later stages read it: node names per stream, events, makespan."""
        names, sim = self.dag.names, self.simulation
        return StreamSchedule(
            device=self.report.device,
            streams=tuple(tuple(names[v] for v in ops) for ops in self.assignment.streams),
            events=tuple((names[u], names[v]) for u, v in self.assignment.events),
            makespan_s=sim.makespan,
            sequential_s=sim.sequential,
            bound_s=sim.bound,
        )

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
    model: ModelGraph | onnx.ModelProto | str | os.PathLike,
    request: StreamsRequest = StreamsRequest(),
    *,
    latency: LatencyModel | None = None,
    name: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> StreamsResult:
    """Assign ``model``'s ops (the model IR, a ModelProto, an ONNX path or a zoo name) to streams,
    simulate the schedule on ``request.device``'s latency model and optionally run it.
    ``input_shapes`` makes symbolic graph inputs static (``{"x": (1, 3, 224, 224)}``)."""
    if request.execute is not None and request.execute not in EXECUTORS:
        raise ConfigError(f"unknown executor '{request.execute}' (choose cpu or cuda)")
    if request.execute == "cuda":
        _require_cuda()
    if isinstance(model, ModelGraph):
        graph = check_schedulable(model)
    else:
        if not isinstance(model, onnx.ModelProto):
            name = name or Path(os.fspath(model)).stem
            model = load_onnx(model_source(model))
        model = with_input_shapes(model, input_shapes)
        graph = check_schedulable(from_onnx(model, command="streams"))
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


@dataclass(frozen=True)
class StreamsOptions(StreamsRequest):
    """The ``streams`` pass's options: :class:`StreamsRequest`'s fields, checked."""

    def check(self) -> None:
        check_choice(LATENCY_MODELS, "device", self.device)
        if self.max_streams is not None and self.max_streams < 1:
            raise OptionError("max_streams", f"must be at least 1, got {self.max_streams}")
        for option in ("launch_s", "event_s"):
            if getattr(self, option) < 0:
                raise OptionError(option, f"must be >= 0, got {getattr(self, option)}")
        if self.repeats < 1:
            raise OptionError("repeats", f"must be at least 1, got {self.repeats}")


class StreamsPass(ModelPass):
    """The ``streams`` pre-pass: an analysis that leaves the graph as it is and provides
    its :class:`StreamSchedule`, which the plan's report and JSON carry."""

    name = "streams"
    Options = StreamsOptions
    needs = frozenset({STATIC_SHAPES})
    provides = frozenset({STREAM_SCHEDULE})

    def run(self, graph: ModelGraph, context: PassContext) -> PassResult:
        result = schedule_streams(graph, self.options)
        schedule = result.schedule()
        return PassResult(graph, False, result.report, schedule.headline(),
                          {STREAM_SCHEDULE: schedule})  # fmt: skip

"""Makespan of a stream assignment on an op-latency model, against what any schedule needs
(docs/design.md, "Stream scheduling").

The host issues ops in the assignment's launch order, ``launch_s`` apart (0 for a CUDA
Graph replay, which launches the whole graph at once; a few µs per op for eager launches
from one thread). An op starts once it is issued, its stream has finished the op before it,
and every event it waits on was recorded plus ``event_s`` (the cross-stream wait). Any
schedule on ``k`` streams needs at least the critical path, the total work over ``k``, and
the host's issue time: the bound the makespan is compared with.

The same numbers give AutoGraph's mixed cost ``alpha * critical path + work`` its meaning:
it sits between the unlimited-stream makespan (the critical path) and one stream (the work).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from accel_model.latency.graph import MIXED_ALPHA
from fusionplan.passes.streams.assign import StreamAssignment
from fusionplan.passes.streams.dag import OpDag

EVENT_S = 1e-6
"""Cross-stream wait: a recorded event a stream waits on, or a dependency edge between
streams in a CUDA Graph (an assumption of the model, set per call)."""


@dataclass(frozen=True)
class Simulation:
    """Seconds: per-op start and finish, the makespan and its references."""

    start: tuple[float, ...]
    finish: tuple[float, ...]
    makespan: float
    sequential: float
    """One stream, same launch order: the sum of latencies where the host keeps up."""
    critical_path: float
    work: float
    streams: int
    launch_s: float
    event_s: float

    @property
    def bound(self) -> float:
        """max(critical path, work / streams, issue time): no schedule on these streams
        finishes earlier."""
        issue = self.launch_s * len(self.start)
        return max(self.critical_path, self.work / max(self.streams, 1), issue)

    @property
    def gap(self) -> float:
        """How far the makespan is above the bound (0.03 = 3 %)."""
        return self.makespan / self.bound - 1 if self.bound else 0.0

    @property
    def speedup(self) -> float:
        """Sequential over multi-stream makespan."""
        return self.sequential / self.makespan if self.makespan else 1.0

    @property
    def mixed(self) -> float:
        """AutoGraph's mixed critical-path cost of the same graph."""
        return MIXED_ALPHA * self.critical_path + self.work

    def to_json(self) -> dict[str, float | int]:
        return {
            "makespan_s": self.makespan,
            "sequential_s": self.sequential,
            "critical_path_s": self.critical_path,
            "work_s": self.work,
            "bound_s": self.bound,
            "gap": self.gap,
            "speedup": self.speedup,
            "mixed_s": self.mixed,
            "streams": self.streams,
            "launch_s": self.launch_s,
            "event_s": self.event_s,
        }


def simulate(
    dag: OpDag,
    assignment: StreamAssignment,
    latency: Sequence[float],
    *,
    launch_s: float = 0.0,
    event_s: float = EVENT_S,
) -> Simulation:
    """Run ``assignment`` on per-op ``latency`` seconds."""
    n = len(dag)
    start, finish = [0.0] * n, [0.0] * n
    stream_free = [0.0] * assignment.num_streams
    waits = assignment.waits()
    issued = 0.0
    for v in assignment.order:
        issued += launch_s
        s = assignment.stream_of[v]
        ready = max(
            stream_free[s],
            issued,
            max((finish[p] for p in dag.preds[v]), default=0.0),
            max((finish[u] + event_s for u in waits.get(v, ())), default=0.0),
        )
        start[v], finish[v] = ready, ready + latency[v]
        stream_free[s] = finish[v]
    one_stream, issued = 0.0, 0.0
    for v in assignment.order:
        issued += launch_s
        one_stream = max(one_stream, issued) + latency[v]
    work = float(sum(latency))
    return Simulation(
        start=tuple(start),
        finish=tuple(finish),
        makespan=max(finish, default=0.0),
        sequential=one_stream,
        critical_path=dag.critical_path(latency),
        work=work,
        streams=assignment.num_streams,
        launch_s=launch_s,
        event_s=event_s,
    )

"""Pictures of a schedule: a Chrome trace (Perfetto, chrome://tracing) and a Gantt PNG.

The trace uses the Trace Event Format: one complete event (``ph: "X"``, µs) per op on its
stream's thread, a flow arrow (``ph: "s"`` / ``"f"``) per placed event from the producer's
end to the waiting op, and metadata naming processes (the simulated device, the measured
run) and threads (``stream N``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.passes.streams.assign import StreamAssignment


@dataclass(frozen=True)
class Timeline:
    """When each op ran (seconds from the run's start), under one label."""

    label: str
    start: Sequence[float]
    finish: Sequence[float]


def chrome_trace(
    names: Sequence[str],
    ops: Sequence[str],
    assignment: StreamAssignment,
    timelines: Sequence[Timeline],
) -> dict[str, Any]:
    """The trace as a JSON-ready dict, one process per timeline."""
    events: list[dict[str, Any]] = []
    flow = 0
    for pid, timeline in enumerate(timelines, start=1):
        events.append(_meta("process_name", pid, 0, timeline.label))
        for s in range(assignment.num_streams):
            events.append(_meta("thread_name", pid, s, f"stream {s}"))
        for v, name in enumerate(names):
            begin, end = _us(timeline.start[v]), _us(timeline.finish[v])
            events.append(
                {
                    "name": ops[v],
                    "cat": "op",
                    "ph": "X",
                    "pid": pid,
                    "tid": assignment.stream_of[v],
                    "ts": begin,
                    "dur": round(max(end - begin, 0.0), 3),
                    "args": {"node": name, "index": v},
                }
            )
        for u, v in assignment.events:
            flow += 1
            common = {"name": "event", "cat": "sync", "pid": pid, "id": flow}
            events.append(
                {
                    **common,
                    "ph": "s",
                    "tid": assignment.stream_of[u],
                    "ts": _us(timeline.finish[u]),
                }
            )
            events.append(
                {
                    **common,
                    "ph": "f",
                    "bp": "e",
                    "tid": assignment.stream_of[v],
                    "ts": _us(timeline.start[v]),
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _us(seconds: float) -> float:
    """A time in the trace: µs, rounded to the ns. An op's start and end are rounded, and
    its ``dur`` is their difference: rounding ``ts`` and ``dur`` apart let an op end up to
    a ns after its consumer starts (``ts + dur`` rounds differently from the end)."""
    return round(seconds * 1e6, 3)


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def write_trace(path: str | os.PathLike, trace: dict[str, Any]) -> Path:
    return write_text_atomic(path, json.dumps(trace) + "\n")


def write_gantt(
    path: str | os.PathLike,
    ops: Sequence[str],
    assignment: StreamAssignment,
    timeline: Timeline,
    title: str,
) -> Path:
    """One row per stream, one bar per op coloured by op type, event arrows in grey."""
    import matplotlib  # heavy: 1 s, only for the picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: after choosing the Agg backend

    kinds = sorted(set(ops))
    cmap = plt.get_cmap("tab20")
    colour = {k: cmap(i % 20) for i, k in enumerate(kinds)}
    rows = assignment.num_streams
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.45 * rows))
    us = 1e6
    for v, op in enumerate(ops):
        begin, end = timeline.start[v] * us, timeline.finish[v] * us
        row = assignment.stream_of[v]
        ax.broken_barh([(begin, max(end - begin, 0.05))], (row - 0.4, 0.8), color=colour[op], lw=0)
    for u, v in assignment.events:
        ax.annotate(
            "",
            xy=(timeline.start[v] * us, assignment.stream_of[v]),
            xytext=(timeline.finish[u] * us, assignment.stream_of[u]),
            arrowprops={"arrowstyle": "->", "color": "0.55", "lw": 0.5},
        )
    ax.set_yticks(range(rows), [f"stream {s}" for s in range(rows)])
    ax.invert_yaxis()
    ax.set_xlabel("time (µs)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[k]) for k in kinds]
    ax.legend(handles, kinds, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.tight_layout()

    def save(tmp: Path) -> None:
        fig.savefig(tmp, dpi=120, format="png")

    try:
        return write_atomic(path, save)
    finally:
        plt.close(fig)

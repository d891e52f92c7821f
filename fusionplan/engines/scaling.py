"""How a fan-out job scales: measured task times projected onto more cores (Amdahl).

The projection is a simulation, not a formula: tasks are list-scheduled longest first onto
``cores`` identical workers (what the jobs do: the bench submits its longest runs first, the
dataset its largest models), and the driver's serial work is added. That sees both limits a
cluster runs into: the serial fraction (Amdahl) and the longest single task, which no number
of cores shortens.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


def lpt_makespan(task_seconds: Sequence[float], cores: int) -> float:
    """Wall time of ``task_seconds`` on ``cores`` workers, longest task first (greedy LPT:
    within 4/3 of the optimal schedule)."""
    if cores < 1:
        raise ValueError("cores must be >= 1")
    loads = [0.0] * min(cores, max(len(task_seconds), 1))
    heapq.heapify(loads)
    for t in sorted(task_seconds, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + t)
    return max(loads)


@dataclass(frozen=True)
class Projection:
    cores: int
    wall_s: float
    speedup: float  # over one core
    efficiency: float  # speedup / cores
    bound: str  # what limits it: "tasks", "longest task" or "serial"


def project(
    task_seconds: Sequence[float], serial_s: float, cores: Sequence[int]
) -> list[Projection]:
    """Projected wall time on each core count: ``serial_s`` + the LPT makespan."""
    one = serial_s + sum(task_seconds)
    longest = max(task_seconds, default=0.0)
    out = []
    for n in cores:
        span = lpt_makespan(task_seconds, n)
        wall = serial_s + span
        if serial_s >= span:
            bound = "serial"
        elif span <= longest * 1.05:
            bound = "longest task"
        else:
            bound = "tasks"
        speedup = one / wall if wall else 1.0
        out.append(Projection(n, wall, speedup, speedup / n, bound))
    return out


def serial_fraction(task_seconds: Sequence[float], serial_s: float) -> float:
    """Amdahl's serial fraction: the driver's share of the one-core time."""
    total = serial_s + sum(task_seconds)
    return serial_s / total if total else 0.0


@dataclass(frozen=True)
class JobTiming:
    """What a finished job measured: each task's seconds and the driver's serial seconds."""

    source: str
    task_seconds: tuple[float, ...]
    setup_s: float  # before the first task (loading models): does not grow with the job
    driver_s: float  # all serial driver work, setup included

    def scaled(self, factor: float) -> JobTiming:
        """The same job ``factor`` times larger: every task and the per-result driver work
        grow by ``factor`` (same task count: a dataset's shards are fixed per model and size
        bin, a bigger dataset has bigger shards), the set-up does not."""
        per_result = (self.driver_s - self.setup_s) * factor
        return JobTiming(
            f"{self.source} x {factor:g}",
            tuple(t * factor for t in self.task_seconds),
            self.setup_s,
            self.setup_s + per_result,
        )


def markdown(timing: JobTiming, cores: Sequence[int]) -> str:
    """The projection table, with the measured inputs it rests on."""
    tasks = timing.task_seconds
    lines = [
        f"{timing.source}: {len(tasks)} tasks, {sum(tasks):.1f} s of task time (longest "
        f"{max(tasks, default=0.0):.1f} s), driver {timing.driver_s:.1f} s serial "
        f"(serial fraction {serial_fraction(tasks, timing.driver_s):.2%})",
        "",
        "| cores | projected wall s | speedup | efficiency | limited by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in project(tasks, timing.driver_s, cores):
        lines.append(
            f"| {p.cores} | {p.wall_s:,.1f} | {p.speedup:.1f}x | {p.efficiency:.0%} | {p.bound} |"
        )
    return "\n".join(lines)

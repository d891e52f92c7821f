"""Wall-clock timing of alternatives that are compared with each other.

Used wherever two configurations are compared (batching policies, a model and its
rewrite): timing one after the other on a shared machine lets a slow spell land on one of
them alone, which gave 10-40 % swings here; round-robin rounds spread it over all.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def time_interleaved(
    runs: Sequence[Callable[[], object]], repeats: int, warmup: int = 1
) -> list[float]:
    """Median seconds of each of ``runs``, timed round-robin (one call of each per round), so
    that a slow spell of a shared machine hits every configuration alike instead of one."""
    for run in runs:
        for _ in range(warmup):
            run()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, mine in zip(runs, times, strict=True):
            began = time.perf_counter()
            run()
            mine.append(time.perf_counter() - began)
    return [statistics.median(t) for t in times]

"""Measured latency of whole models in onnxruntime on this machine's CPU: the check the
measured guard, AutoGraph's loop and the substitution bench run on candidates.

Models compared with each other are timed *interleaved*: one run of each per round, medians
over the rounds, so a slow spell of a shared machine hits all of them alike (timing one
model after another here gave 10-15 % swings between runs of the same graph).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import numpy as np
import onnx

from fusionplan.passes.substitution.convert import ort_session


def ort_latencies(
    models: Sequence[onnx.ModelProto], *, threads: int = 1, repeats: int = 20, warmup: int = 5
) -> list[float]:
    """Median seconds per run of each model (same random input, interleaved rounds)."""
    sessions = [ort_session(m, threads=threads) for m in models]
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            np.float32
        )
        for i in sessions[0].get_inputs()
    }
    for session in sessions:
        for _ in range(warmup):
            session.run(None, feeds)
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(repeats):
        for i, session in enumerate(sessions):
            start = time.perf_counter()
            session.run(None, feeds)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def ort_latency(model: onnx.ModelProto, *, threads: int = 1, repeats: int = 20) -> float:
    """Median seconds per run of one model."""
    return ort_latencies([model], threads=threads, repeats=repeats)[0]

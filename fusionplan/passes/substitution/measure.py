"""Measured latency of whole models in onnxruntime on this machine's CPU: the check the
measured guard, AutoGraph's loop and the substitution bench run on candidates.

Models compared with each other are timed *interleaved*: one run of each per round, medians
over the rounds, so a slow spell of a shared machine hits all of them alike (timing one
model after another here gave 10-15 % swings between runs of the same graph).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx

from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import OnnxWriter
from fusionplan.ir.onnx_run import ort_session, random_feeds
from fusionplan.ir.timing import time_interleaved


def ort_latencies(
    models: Sequence[onnx.ModelProto], *, threads: int = 1, repeats: int = 20, warmup: int = 5
) -> list[float]:
    """Median seconds per run of each model (same random input, interleaved rounds)."""
    sessions = [ort_session(m, threads=threads) for m in models]
    feeds = random_feeds(sessions[0])
    runs = [lambda s=s: s.run(None, feeds) for s in sessions]
    return time_interleaved(runs, repeats, warmup)


def ort_latency(model: onnx.ModelProto, *, threads: int = 1, repeats: int = 20) -> float:
    """Median seconds per run of one model."""
    return ort_latencies([model], threads=threads, repeats=repeats)[0]


def ort_measure(write: OnnxWriter) -> Callable[[ModelGraph], float]:
    """The ``ort`` measure of AutoGraph's loop: median seconds per run of a model graph as
    ``write`` writes it (the ONNX the request ships)."""
    return lambda g: ort_latency(write(g))

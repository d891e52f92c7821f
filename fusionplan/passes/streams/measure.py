"""Measured latency of a stream schedule against its baselines, and the measure AutoGraph's
loop uses (docs/design.md, "Stream scheduling").

Every configuration of one model is timed *interleaved* (:func:`time_interleaved`), on the
same input, after checking that it computes what the sequential run computes.

* CPU: ``sequential`` (the same op sequence on one thread, one intra-op thread: the
  per-core baseline the streams are measured against), ``sequential_all_cores`` (torch's
  intra-op threads on every core), ``streams`` (one thread per stream), ``onnxruntime``
  (its own scheduler on every core).
* CUDA: ``eager`` and ``cuda_graph`` on one stream, ``streams_eager`` and
  ``streams_cuda_graph`` on the assignment's streams.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import OnnxWriter, to_onnx
from fusionplan.ir.onnx_run import max_relative_error, ort_session
from fusionplan.ir.timing import time_interleaved
from fusionplan.passes.streams.assign import StreamAssignment, assign_streams
from fusionplan.passes.streams.dag import OpDag
from fusionplan.passes.streams.execute import CudaStreams, ThreadStreams
from fusionplan.passes.streams.program import TorchProgram, intra_op_threads

TOLERANCE = 1e-5
"""Multi-stream against sequential execution of the same kernels: equal up to this
relative error (the issue's bar; the kernels are the same, so it is normally exact)."""


@dataclass(frozen=True)
class Measurement:
    """Median ms per run of each configuration, and each one's error against the
    sequential run on the same device."""

    device: str
    streams: int
    times_ms: dict[str, float]
    errors: dict[str, float]
    timeline: tuple[tuple[float, ...], tuple[float, ...]] | None = field(default=None)
    """(start, finish) seconds per op of one recorded multi-stream run (CPU)."""

    @property
    def speedup(self) -> float:
        """Streams over the single-stream baseline on the same device."""
        if "streams" in self.times_ms:
            return self.times_ms["sequential"] / self.times_ms["streams"]
        return self.times_ms["cuda_graph"] / self.times_ms["streams_cuda_graph"]

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "streams": self.streams,
            "times_ms": self.times_ms,
            "errors": self.errors,
            "speedup": self.speedup,
        }


def feeds_for(g: ModelGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal inputs of ``g`` (the shapes onnxruntime's check uses)."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(g.shape(name)).astype(g.dtype(name)) for name in g.inputs}


def measure_cpu(
    g: ModelGraph,
    assignment: StreamAssignment,
    feeds: Mapping[str, np.ndarray],
    *,
    repeats: int = 20,
) -> Measurement:
    """Time ``g`` on this CPU, sequential against threads per stream."""
    program = TorchProgram(g, "cpu")
    torch = program.torch
    cores = os.cpu_count() or 1
    order = assignment.order
    with intra_op_threads(torch, 1):
        reference = program.run(feeds, order)
    session = ort_session(to_onnx(g))
    names = [o.name for o in session.get_outputs()]
    ort_out = dict(zip(names, session.run(None, dict(feeds)), strict=True))

    def sequential(threads: int) -> Callable[[], object]:
        def run() -> object:
            with intra_op_threads(torch, threads):
                return program.run(feeds, order)

        return run

    with ThreadStreams(program, assignment) as streams:
        parallel = streams.run(feeds, record=True)
        timeline = streams.last_timeline
        runs = {
            "sequential": sequential(1),
            "sequential_all_cores": sequential(cores),
            "streams": lambda: streams.run(feeds),
            "onnxruntime": lambda: session.run(None, dict(feeds)),
        }
        seconds = time_interleaved(list(runs.values()), repeats, warmup=2)
    return Measurement(
        device=f"cpu ({cores} cores)",
        streams=assignment.num_streams,
        times_ms={k: s * 1e3 for k, s in zip(runs, seconds, strict=True)},
        errors={
            "streams": max_relative_error(reference, parallel),
            "onnxruntime": max_relative_error(reference, ort_out),
        },
        timeline=timeline,
    )


def measure_cuda(
    g: ModelGraph,
    assignment: StreamAssignment,
    feeds: Mapping[str, np.ndarray],
    *,
    repeats: int = 50,
) -> Measurement:
    """Time ``g`` on the GPU: eager and CUDA Graph, one stream and the assignment's."""
    program = TorchProgram(g, "cuda")
    torch = program.torch
    configs = {
        "eager": CudaStreams(program, None, graph=False, feeds=feeds),
        "cuda_graph": CudaStreams(program, None, graph=True, feeds=feeds),
        "streams_eager": CudaStreams(program, assignment, graph=False, feeds=feeds),
        "streams_cuda_graph": CudaStreams(program, assignment, graph=True, feeds=feeds),
    }
    outputs = {name: c.run(feeds) for name, c in configs.items()}
    seconds = time_interleaved([c.timed for c in configs.values()], repeats, warmup=3)
    reference = outputs["eager"]
    return Measurement(
        device=f"cuda ({torch.cuda.get_device_name()})",
        streams=assignment.num_streams,
        times_ms={k: s * 1e3 for k, s in zip(configs, seconds, strict=True)},
        errors={k: max_relative_error(reference, out) for k, out in outputs.items()},
    )


def stream_measure(write: OnnxWriter) -> Callable[[ModelGraph], float]:
    """The ``streams`` measure of AutoGraph's loop: the graph runs as PyTorch ops on its
    streams, so how ONNX would write it does not change the timing."""
    return stream_latency


def stream_latency(
    g: ModelGraph, *, device: str | None = None, max_streams: int | None = None, repeats: int = 10
) -> float:
    """Seconds per run of ``g`` executed with its stream schedule: multi-stream CUDA Graph
    on a GPU (the default where one is present), threads per stream on the CPU (at most one
    stream per core). AutoGraph's loop times its top candidates with this."""
    import torch  # heavy: 2 s; only measuring needs it

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dag = OpDag.from_graph(g)
    feeds = feeds_for(g)
    if device == "cuda":
        assignment = assign_streams(dag, max_streams=max_streams)
        program = TorchProgram(g, "cuda")
        runner = CudaStreams(program, assignment, graph=True, feeds=feeds)
        return time_interleaved([runner.timed], repeats, warmup=3)[0]
    limit = max_streams or os.cpu_count() or 1
    assignment = assign_streams(dag, max_streams=limit)
    with ThreadStreams(TorchProgram(g, "cpu"), assignment) as streams:
        return time_interleaved([lambda: streams.run(feeds)], repeats, warmup=2)[0]

"""Running a stream assignment for real (docs/design.md, "Stream scheduling").

* :class:`ThreadStreams` (CPU): one worker thread per stream runs that stream's ops in
  order; an op waits on a ``threading.Event`` per placed event and sets its own when other
  streams wait for it. Torch ops release the GIL, so streams overlap on separate cores.
  Intra-op parallelism is set to one thread meanwhile: a stream is a core.
* :class:`CudaStreams` (GPU): the same ops on ``torch.cuda.Stream``\\ s with
  ``torch.cuda.Event``\\ s, eager or captured into one ``torch.cuda.CUDAGraph``. The
  capture forks every stream from the capture stream and joins them back before it ends;
  it warms up on a side stream first (cuDNN/cuBLAS pick algorithms and allocate
  workspaces outside the capture); every intermediate tensor stays referenced for the
  graph's lifetime, so no cross-stream tensor is freed while another stream reads it.
  With one stream it is the single-stream baseline (eager or CUDA Graph).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fusionplan.passes.streams.assign import StreamAssignment
from fusionplan.passes.streams.program import TorchProgram, intra_op_threads

WARMUP_RUNS = 3


class ThreadStreams:
    """Executes ``program`` on CPU threads, one per stream of ``assignment``."""

    def __init__(self, program: TorchProgram, assignment: StreamAssignment) -> None:
        self.program = program
        self.assignment = assignment
        self.waits = assignment.waits()
        self.sources = {u for u, _ in assignment.events}
        self._pool = ThreadPoolExecutor(assignment.num_streams, thread_name_prefix="stream")
        self.last_timeline: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    def __enter__(self) -> ThreadStreams:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def run(
        self, feeds: Mapping[str, np.ndarray], *, record: bool = False
    ) -> dict[str, np.ndarray]:
        """One run; output name -> array. An op's error is raised here, the others stop.
        With ``record``, :attr:`last_timeline` holds each op's (start, finish) seconds."""
        torch = self.program.torch
        env = self.program.environment(feeds)
        signals = {u: threading.Event() for u in self.sources}
        abort = threading.Event()
        n = len(self.program.ops)
        began, start, finish = time.perf_counter(), [0.0] * n, [0.0] * n

        def work(ops: tuple[int, ...]) -> None:
            # OpenMP's thread count is per thread: set it in the worker, or each stream
            # would run its ops on every core and the streams would oversubscribe them
            torch.set_num_threads(1)
            with torch.inference_mode():  # grad mode is per thread
                for v in ops:
                    for u in self.waits.get(v, ()):
                        signals[u].wait()
                    if abort.is_set():
                        return
                    try:
                        if record:
                            start[v] = time.perf_counter() - began
                        self.program.run_op(v, env)
                        if record:
                            finish[v] = time.perf_counter() - began
                    except BaseException:
                        abort.set()
                        for signal in signals.values():
                            signal.set()
                        raise
                    if v in signals:
                        signals[v].set()

        with intra_op_threads(torch, 1):
            futures = [self._pool.submit(work, ops) for ops in self.assignment.streams]
            for future in futures:
                future.result()
        if record:
            self.last_timeline = (tuple(start), tuple(finish))
        return self.program.outputs(env)


class CudaStreams:
    """Executes ``program`` (on a CUDA device) on the assignment's streams, eager or as a
    CUDA Graph; ``assignment`` None runs everything on one stream in graph order."""

    def __init__(
        self,
        program: TorchProgram,
        assignment: StreamAssignment | None,
        *,
        graph: bool,
        feeds: Mapping[str, np.ndarray],
    ) -> None:
        torch = program.torch
        self.program, self.assignment, self.graph = program, assignment, graph
        n = len(program.ops)
        self.order = assignment.order if assignment is not None else tuple(range(n))
        self.stream_of = assignment.stream_of if assignment is not None else (0,) * n
        self.waits = assignment.waits() if assignment is not None else {}
        self.sources = {u for u, _ in assignment.events} if assignment is not None else set()
        count = assignment.num_streams if assignment is not None else 1
        self.streams = [torch.cuda.Stream() for _ in range(count)] if count > 1 else []
        self.static = program.environment(feeds)  # inputs copied in before every replay
        self._graph: Any = None
        self._env: dict[str, Any] = {}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._enqueue(dict(self.static))
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        if graph:
            self._graph = torch.cuda.CUDAGraph()
            self._env = dict(self.static)
            with torch.inference_mode(), torch.cuda.graph(self._graph):
                self._enqueue(self._env)
            torch.cuda.synchronize()

    def _enqueue(self, env: dict[str, Any]) -> dict[str, Any]:
        """Issue every op on its stream: fork from the current stream, join back at the end."""
        torch = self.program.torch
        main = torch.cuda.current_stream()
        for s in self.streams:
            s.wait_stream(main)
        recorded: dict[int, Any] = {}
        for v in self.order:
            stream = self.streams[self.stream_of[v]] if self.streams else main
            with torch.cuda.stream(stream):
                for u in self.waits.get(v, ()):
                    stream.wait_event(recorded[u])
                self.program.run_op(v, env)
                if v in self.sources:
                    event = torch.cuda.Event()
                    event.record(stream)
                    recorded[v] = event
        for s in self.streams:
            main.wait_stream(s)
        return env

    def launch(self) -> None:
        """Start one run on the current inputs (asynchronous)."""
        if self._graph is not None:
            self._graph.replay()
        else:
            with self.program.torch.inference_mode():
                self._env = self._enqueue(dict(self.static))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Copy ``feeds`` in, run once, wait; output name -> array."""
        torch = self.program.torch
        for name in self.program.graph.inputs:
            self.static[name].copy_(torch.from_numpy(np.asarray(feeds[name])))
        self.launch()
        torch.cuda.synchronize()
        return self.program.outputs(self._env)

    def timed(self) -> None:
        """One run as a benchmark repeats it: launch and wait."""
        self.launch()
        self.program.torch.cuda.synchronize()

"""Measured latency of a whole model in onnxruntime on this machine's CPU: the check
AutoGraph's loop and the substitution bench run on a candidate."""

from __future__ import annotations

import statistics
import time

import numpy as np
import onnx


def ort_latency(
    model: onnx.ModelProto, *, threads: int = 1, repeats: int = 20, warmup: int = 3
) -> float:
    """Median seconds of ``repeats`` runs on one random input (after ``warmup`` runs)."""
    import onnxruntime as ort  # heavy: the runtime loads only when a model is timed

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            np.float32
        )
        for i in session.get_inputs()
    }
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)

"""Running an ONNX model in onnxruntime at the IR's boundary: the numeric equivalence check
of a rewritten model against its original, and the sessions and inputs it and the measured
passes share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from fusionplan.ir.errors import ModelError


@dataclass(frozen=True)
class Equivalence:
    """Outcome of running two models on the same random inputs."""

    max_rel_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_rel_error <= self.tolerance


def ort_session(model: onnx.ModelProto, *, threads: int = 0, optimize: bool = True) -> Any:
    """An onnxruntime CPU session for ``model``; a model it cannot load is a one-line
    :class:`ModelError` (a search on a model nothing can run is wasted). ``optimize=False``
    turns onnxruntime's graph optimisations off (``ORT_DISABLE_ALL``): the graph runs as
    written, none of onnxruntime's own fusions."""
    import onnxruntime as ort  # heavy: loads the runtime, only when a model is run

    options = ort.SessionOptions()
    options.log_severity_level = 4  # fatal only: failures surface as our one-line error
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own unrelated exception types
        first = " ".join(str(exc).split())[:200]
        raise ModelError(f"onnxruntime cannot run the model: {first}") from None


def random_feeds(session: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """A seeded standard-normal float32 input for every graph input of ``session`` (a
    symbolic dimension taken as 1)."""
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            np.float32
        )
        for i in session.get_inputs()
    }


def run_model(
    model: onnx.ModelProto, *, seed: int = 0, optimize: bool = True
) -> dict[str, np.ndarray]:
    """Outputs of one onnxruntime run on a seeded random input (normal, float32); a model
    that fails to run is a one-line :class:`ModelError`. ``optimize`` as for
    :func:`ort_session`."""
    import onnxruntime as ort  # heavy: already loaded by ort_session

    session = ort_session(model, optimize=optimize)
    feeds = random_feeds(session, seed)
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # fatal only: a failing run reports through our one line
    try:
        values = session.run(None, feeds, quiet)
    except Exception as exc:  # onnxruntime raises its own unrelated exception types
        first = " ".join(str(exc).split())[:200]
        raise ModelError(f"onnxruntime cannot run the model: {first}") from None
    return dict(zip([o.name for o in session.get_outputs()], values, strict=True))


def check_equivalence(
    original: onnx.ModelProto, rewritten: onnx.ModelProto, *, tolerance: float = 1e-4, seed: int = 0
) -> Equivalence:
    """Run both in onnxruntime on one random input and compare every output
    (:func:`max_relative_error`). Both run with onnxruntime's graph optimisations off: its
    own fusions can neither hide a wrong rewrite nor make a right one differ."""
    ref = run_model(original, seed=seed, optimize=False)
    got = run_model(rewritten, seed=seed, optimize=False)
    return Equivalence(max_relative_error(ref, got), tolerance)


def max_relative_error(ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> float:
    """Worst output's ``max |a - b| / max |a|`` (relative to the output's scale, so a
    near-zero element does not blow it up)."""
    worst = 0.0
    for name, a in ref.items():
        b = np.asarray(got[name])
        scale = float(np.max(np.abs(a))) or 1.0
        worst = max(worst, float(np.max(np.abs(a - b))) / scale if a.size else 0.0)
    return worst

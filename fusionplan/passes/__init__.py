"""Graph pre-passes that run before fusion planning (docs/design.md, "Plug points").

A pass rewrites or annotates an ONNX model upstream of the planner: graph substitution,
stream scheduling, dynamic batching (one subpackage each, ``substitution/``, ``streams/``,
``batching/``). Each registers a factory in :data:`PASSES`; the planner and the CLI find
passes by name there. Builtin passes register lazily: their modules load onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fusionplan.ir.registry import Registry
from fusionplan.passes.substitution.measures import MEASURES


class Pass(Protocol):
    """ONNX model in, ONNX model out, plus a JSON-friendly report of what changed."""

    name: str

    def run(self, model: Any) -> tuple[Any, dict[str, Any]]: ...


PASSES: Registry[Callable[..., Pass]] = Registry("pass")
"""Pass name -> ``factory(**options)``."""
PASSES.register_lazy(
    "substitute",
    "fusionplan.passes.substitution.pipeline:SubstitutionPass",
    help="rewrite the graph by cost-based substitution search (MetaFlow by default)",
)
PASSES.register_lazy(
    "streams",
    "fusionplan.passes.streams.pipeline:StreamsPass",
    help="assign ops to GPU streams (Nimble) and record the schedule in the model's metadata",
)
# AutoGraph's loop may time its candidates with the stream schedule: the passes meet here,
# neither substitution nor streams imports the other
MEASURES.register_lazy(
    "streams",
    "fusionplan.passes.streams.measure:stream_latency",
    help="the graph's stream schedule executed (CUDA Graph on a GPU, threads on the CPU)",
)

"""How AutoGraph's loop times a candidate graph: a plug point, so that a package that can run
a model graph (the stream scheduler) registers its measure without substitution importing
it (docs/design.md, "Layers"). A measure maps a :class:`ModelGraph` to seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from fusionplan.ir.model import ModelGraph
from fusionplan.ir.registry import Registry

MEASURES: Registry[Callable[[ModelGraph], float]] = Registry("measure")
"""Measure name -> ``measure(graph) -> seconds``; ``streams`` is registered by
:mod:`fusionplan.passes`, which composes the passes."""
MEASURES.register_lazy(
    "ort",
    "fusionplan.passes.substitution.measure:graph_latency",
    help="onnxruntime on this CPU, one thread",
)

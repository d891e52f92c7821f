"""How AutoGraph's loop times a candidate graph: a plug point, so that a package that can run
a model graph (the stream scheduler) registers its measure without substitution importing
it (docs/design.md, "Layers"). A measure is made for the way the request writes graphs
(standard ONNX or onnxruntime's contrib ops: what ships is what is timed) and maps a
:class:`ModelGraph` to seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import OnnxWriter
from fusionplan.ir.registry import Registry

Measure = Callable[[ModelGraph], float]
MEASURES: Registry[Callable[[OnnxWriter], Measure]] = Registry("measure")
"""Measure name -> ``make(write)``, a ``measure(graph) -> seconds``; ``streams`` is registered by
:mod:`fusionplan.passes`, which composes the passes."""
MEASURES.register_lazy(
    "ort",
    "fusionplan.passes.substitution.measure:ort_measure",
    help="onnxruntime on this CPU, one thread",
)

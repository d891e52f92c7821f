"""Graph pre-passes that run before fusion planning (docs/design.md, "Pass pipeline").

A pass reads and writes the model IR upstream of the planner: graph substitution and
stream scheduling (one subpackage each, ``substitution/``, ``streams/``). Each is a
:class:`~fusionplan.passes.manager.ModelPass` registered in :data:`PASSES`; the planner,
the API and the CLI find passes by name there and run them with
:class:`~fusionplan.passes.manager.Sequential`. Builtin passes register lazily: their
modules load onnxruntime.
"""

from __future__ import annotations

from fusionplan.ir.registry import Registry
from fusionplan.passes.manager import PassRegistry
from fusionplan.passes.substitution.measures import MEASURES

PASSES: PassRegistry = Registry("pass")
"""Pass name -> its :class:`~fusionplan.passes.manager.ModelPass` subclass."""
PASSES.register_lazy(
    "substitute",
    "fusionplan.passes.substitution.pipeline:SubstitutionPass",
    help="rewrite the graph by cost-based substitution search (MetaFlow by default)",
)
PASSES.register_lazy(
    "streams",
    "fusionplan.passes.streams.pipeline:StreamsPass",
    help="assign ops to GPU streams (Nimble); the schedule goes into the plan's report",
)
# AutoGraph's loop may time its candidates with the stream schedule: the passes meet here,
# neither substitution nor streams imports the other
MEASURES.register_lazy(
    "streams",
    "fusionplan.passes.streams.measure:stream_measure",
    help="the graph's stream schedule executed (CUDA Graph on a GPU, threads on the CPU)",
)

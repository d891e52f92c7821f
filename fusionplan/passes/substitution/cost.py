"""What a graph costs: the sum of its op latencies (TASO, MetaFlow) or AutoGraph's mixed
critical-path cost ``C = alpha * sum(critical path) + sum(all)`` (alpha 0.25), on any
latency model of :mod:`accel_model.latency` (docs/design.md, "Graph substitution").

The sum is the latency of a one-stream execution; the critical path is what unlimited
streams could reach; the mixed cost favours graphs whose work is off the critical path
without ignoring total work. Latencies are cached by op signature, so a search pays for
each distinct op once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accel_model.latency import LatencyModel
from accel_model.latency.graph import MIXED_ALPHA, OpLatencies
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.model import ModelGraph

CostKind = Literal["sum", "mixed"]
COST_KINDS: tuple[CostKind, ...] = ("sum", "mixed")


@dataclass(frozen=True)
class CostBreakdown:
    """Seconds: total work (the sum cost), the critical path, and the mixed cost."""

    sum: float
    critical_path: float
    mixed: float


class GraphCost:
    """Callable cost of a :class:`ModelGraph` under one latency model and cost kind."""

    def __init__(
        self, latency: LatencyModel, kind: CostKind = "sum", *, alpha: float = MIXED_ALPHA
    ) -> None:
        if kind not in COST_KINDS:
            raise ConfigError(f"unknown cost '{kind}' (choose from {', '.join(COST_KINDS)})")
        self.latency = latency
        self.kind = kind
        self.alpha = alpha
        self.op_latencies = OpLatencies(latency)
        self._graph: dict[int, CostBreakdown] = {}

    def breakdown(self, g: ModelGraph) -> CostBreakdown:
        cached = self._graph.get(g.fingerprint)
        if cached is not None:
            return cached
        lat = self.op_latencies(g)
        finish: dict[str, float] = {}
        longest = 0.0
        for name, node in g.nodes.items():
            start = max((finish.get(t, 0.0) for t in node.inputs if t), default=0.0)
            end = start + lat[name]
            for t in node.outputs:
                finish[t] = end
            longest = max(longest, end)
        total = sum(lat.values())
        result = CostBreakdown(total, longest, self.alpha * longest + total)
        self._graph[g.fingerprint] = result
        return result

    def __call__(self, g: ModelGraph) -> float:
        """The cost the search minimises: the sum or the mixed cost."""
        return getattr(self.breakdown(g), self.kind)

"""LBDF: line-buffer depth-first fusion (docs/cost-model.md, "LBDF").

Rows stream through the whole group and every weight stays on chip, so the buffer holds
all weights, a K_h-row line buffer per activation input, and the extra rows a join must hold
while its slower input catches up (skip buffers). Delays are counted in rows without
rescaling across strides: each lag is added in the consumer's input rows.
"""

from __future__ import annotations

from accel_model.base import CostModel, GroupCost
from accel_model.registry import COST_MODELS
from accel_model.rows import lbdf_input_rows, lbdf_lag
from fusionplan.ir.graph import Group, bits


@COST_MODELS.register("lbdf")
class LBDF(CostModel):
    name = "lbdf"

    def __init__(self, graph, accel) -> None:
        super().__init__(graph, accel)
        t = graph.tensors
        capped = self.physical_rows
        # Per node: (line-buffer elements, lag, ((producer, skip row elements, its tensor's height)
        # per input)). An input the line buffer already holds whole (attention's K^T, V) needs no
        # skip rows. Under the default profile no buffer holds more rows than its tensor has
        # (a dilated 3x3 conv on a 33-row map holds 33 rows, not 49); the paper's LBDF does not
        # cap them (docs/cost-model.md, "LBDF").
        terms = []
        for v, n in enumerate(graph.nodes):
            held = lbdf_input_rows(graph, v)
            heights = [t[ti].shape[1] for ti in n.inputs]
            if capped:
                held = tuple(min(r, max(h, 1)) for r, h in zip(held, heights, strict=True))
            rows = [t[ti].shape[0] * t[ti].shape[2] for ti in n.inputs]
            whole = [r >= h > 1 for r, h in zip(held, heights, strict=True)]
            terms.append(
                (
                    sum(r * row for r, row in zip(held, rows, strict=True)),
                    lbdf_lag(graph, v),
                    tuple(
                        (t[ti].producer, 0 if w else row, h)
                        for ti, row, w, h in zip(n.inputs, rows, whole, heights, strict=True)
                    ),
                )
            )
        self._node_terms = tuple(terms)

    def monotone_over_downsets(self) -> bool:
        return True  # every node's terms are fixed once its in-group producers are

    def buffer_floor(self, nodes: Group) -> int:
        # weights and line buffers are per node and non-negative, skip buffers are >= 0
        line = sum(self._node_terms[v][0] for v in bits(nodes))
        return self.b * (self.weight_elements(nodes) + line)

    def buffer_terms(self, group: Group) -> tuple[int, int, int]:
        """(weight, line-buffer, skip-buffer) elements of ``group``; see the module doc.

        Written flat (the exact search costs hundreds of thousands of groups)."""
        delay: dict[int, int] = {}
        node_terms, node_weights = self._node_terms, self.node_weights
        weights = line = skip = 0
        capped = self.physical_rows
        for v in bits(group):
            line_v, lag, ins = node_terms[v]
            weights += node_weights[v]
            line += line_v
            ready, count, rows_sum, lagged = 0, 0, 0, 0
            for p, row, _ in ins:
                if p >= 0 and group >> p & 1:
                    d = delay[p]
                    count += 1
                    rows_sum += row
                    lagged += d * row
                    if d > ready:
                        ready = d
            if count > 1:  # sum of (ready - d) * row over the in-group inputs
                if capped:  # a skip buffer never holds more rows than its tensor has
                    skip += sum(
                        min(ready - delay[p], cap) * row
                        for p, row, cap in ins
                        if p >= 0 and group >> p & 1
                    )
                else:
                    skip += ready * rows_sum - lagged
            delay[v] = ready + lag
        return weights, line, skip

    def _compute(self, group: Group) -> GroupCost:
        weights, line, skip = self.buffer_terms(group)
        buffer = self.b * (weights + line + skip)
        dram = self.b * (self.io_elements(group) + weights)
        return GroupCost(buffer, dram, buffer < self.beta)

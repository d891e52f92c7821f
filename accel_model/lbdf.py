"""LBDF: line-buffer depth-first fusion (docs/cost-model.md, "LBDF").

Rows stream through the whole group and every weight stays on chip. Under the default
profile the buffer holds all weights and one ring of rows per tensor the group reads or
writes: the rows its readers' windows span between the newest row produced and the oldest
row the slowest reader still needs (the row pipeline of ``accel_model/schedule_lbdf.py``,
which fires each op as soon as its window is complete). The paper's and Optimus's profiles
keep the paper's count: a ``K_h``-row line buffer per op and input plus, at a join, skip
rows for the faster input. Delays are counted in rows without rescaling across strides:
each lag is added in the consumer's input rows.
"""

from __future__ import annotations

from accel_model.base import CostModel, GroupCost
from accel_model.registry import COST_MODELS
from accel_model.rows import (
    Range,
    is_activation_matmul,
    is_windowed,
    lbdf_input_rows,
    lbdf_lag,
    lbdf_reduces,
    proportional_rows,
)
from accel_model.windows import input_rows
from fusionplan.ir.graph import Group, OpGraph, bits

WHOLE = -1  # window rows of an input every firing reads whole


def lbdf_firings(graph: OpGraph, v: int) -> int:
    """Firings of op ``v`` in the LBDF row pipeline: one per output row, or one per input
    row for a reduction over rows."""
    if lbdf_reduces(graph, v):
        return graph.tensors[graph.nodes[v].inputs[0]].shape[1]
    return max(graph.out_shape(v)[1], 1)


def lbdf_held_whole(graph: OpGraph, v: int, i: int) -> bool:
    """Whether every firing of op ``v`` reads all of its ``i``-th input: the inputs of a
    whole-input op, except a reduction's (one row per pass) and the row-aligned first
    operand of a matmul of two activations."""
    node = graph.nodes[v]
    if not node.whole_input or lbdf_reduces(graph, v):
        return False
    return not (is_activation_matmul(node) and i == 0)


def lbdf_read_rows(graph: OpGraph, v: int, i: int, f: int) -> Range:
    """Rows of op ``v``'s ``i``-th input that its ``f``-th pipeline firing reads."""
    node = graph.nodes[v]
    h_in = max(graph.tensors[node.inputs[i]].shape[1], 1)
    if lbdf_held_whole(graph, v, i):
        return (0, h_in)
    if lbdf_reduces(graph, v):  # one input row per pass
        return proportional_rows(f, max(graph.tensors[node.inputs[0]].shape[1], 1), h_in)
    if is_activation_matmul(node):  # output row r reads row r of A
        return proportional_rows(f, max(graph.out_shape(v)[1], 1), h_in)
    return input_rows(graph, v, i, (f, f + 1))


def lbdf_window_rows(graph: OpGraph, v: int, i: int) -> int:
    """The most rows of op ``v``'s ``i``-th input one pipeline firing reads (``WHOLE`` when
    each reads all of it): ``min(K_h, H)`` for a conv or pool (the dilated span), 1 for a
    row-local op or a reduction's pass."""
    if lbdf_held_whole(graph, v, i):
        return WHOLE
    node = graph.nodes[v]
    h_in = max(graph.tensors[node.inputs[i]].shape[1], 1)
    if h_in == 1 or (h_in == max(graph.out_shape(v)[1], 1) and not is_windowed(node)):
        return 1
    if lbdf_reduces(graph, v) and i == 0:
        return 1
    spans = (lbdf_read_rows(graph, v, i, f) for f in range(lbdf_firings(graph, v)))
    return max(max(hi - lo for lo, hi in spans), 1)


def lbdf_stream_lag(graph: OpGraph, v: int) -> int:
    """Rows op ``v``'s first output row waits after its streamed inputs' first rows: the
    last row its first firing reads (``floor(K_h/2)`` for a conv or pool padded by
    ``floor(K_h/2)``, more for an unpadded one); ``H_in`` for a reduction; 0 for an op that
    reads an input whole, whose wait is that input's last row (counted with its delay)."""
    node = graph.nodes[v]
    if lbdf_reduces(graph, v):
        return lbdf_lag(graph, v)
    if node.whole_input:
        return 0
    return max((lbdf_read_rows(graph, v, i, 0)[1] - 1 for i in range(len(node.inputs))), default=0)


@COST_MODELS.register("lbdf")
class LBDF(CostModel):
    name = "lbdf"

    def __init__(self, graph, accel) -> None:
        super().__init__(graph, accel)
        if self.physical_rows:
            self._ring_setup(graph)
        else:
            self._paper_setup(graph)

    def _ring_setup(self, graph: OpGraph) -> None:
        """Per node: (weight elements, lag, (producer, rows added when read whole) per input
        made by an op, (tensor, window rows) per input, (tensor, consumers, rows it holds as
        a sink) per output); per tensor its row elements, height and producer
        (docs/cost-model.md, "LBDF")."""
        t = graph.tensors
        self._row = tuple(s.shape[0] * s.shape[2] for s in t)
        self._height = tuple(max(s.shape[1], 1) for s in t)
        self._producer = tuple(s.producer for s in t)
        # a reduction's accumulators hold all its output rows from the first pass
        self._accumulated = frozenset(
            ti for v in range(len(graph)) if lbdf_reduces(graph, v) for ti in graph.nodes[v].outputs
        )
        consumers = graph.consumer_mask
        terms = []
        for v, n in enumerate(graph.nodes):
            window = [lbdf_window_rows(graph, v, i) for i in range(len(n.inputs))]
            # an input read whole is complete its height after its producer's first row
            waits = tuple(
                (t[ti].producer, self._height[ti] if k == WHOLE else 0)
                for ti, k in zip(n.inputs, window, strict=True)
                if t[ti].producer >= 0
            )
            outs = tuple(
                (ti, consumers[ti], self._height[ti] if ti in self._accumulated else 1)
                for ti in n.outputs
            )
            reads = tuple(zip(n.inputs, window, strict=True))
            terms.append((self.node_weights[v], lbdf_stream_lag(graph, v), waits, reads, outs))
        self._ring_terms = tuple(terms)

    def _paper_setup(self, graph: OpGraph) -> None:
        """Per node: (line-buffer elements, lag, ((producer, skip row elements, its
        tensor's height) per input)). An input the line buffer already holds whole
        (attention's K^T, V) needs no skip rows."""
        t = graph.tensors
        terms = []
        for v, n in enumerate(graph.nodes):
            held = lbdf_input_rows(graph, v)
            heights = [t[ti].shape[1] for ti in n.inputs]
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
        # default: a node's delay depends on its in-group producers only, and every ring is
        # a max over readers (a min for an input's arrival); paper: per-node terms
        return True

    def buffer_floor(self, nodes: Group) -> int:
        if not self.physical_rows:  # weights and line buffers are per node, skip rows >= 0
            line = sum(self._node_terms[v][0] for v in bits(nodes))
            return self.b * (self.weight_elements(nodes) + line)
        # every group holding ``nodes`` keeps at least each reader's window of each input
        # and a row (a reduction: every row) of each output
        rows: dict[int, int] = {}
        for v in bits(nodes):
            _, _, _, reads, outs = self._ring_terms[v]
            for ti, k in reads:
                h = self._height[ti]
                rows[ti] = max(rows.get(ti, 0), h if k == WHOLE else min(k, h))
            for ti, _, sink in outs:
                rows[ti] = max(rows.get(ti, 0), sink)
        held = sum(n * self._row[ti] for ti, n in rows.items())
        return self.b * (self.weight_elements(nodes) + held)

    def rings(self, group: Group) -> dict[int, tuple[int, int]]:
        """Default profile: per tensor ``group`` reads or writes, (window rows, rows held):
        the most rows one reader reads at once, and the rows its ring spans in the
        pipeline (docs/cost-model.md, "LBDF")."""
        return {ti: (k, held) for ti, k, held in self._rings(group)[1]}

    def _rings(self, group: Group) -> tuple[int, list[tuple[int, int, int]]]:
        """(weight elements, (tensor, window rows, rows held) per ring) of ``group``.
        Written flat: the exact search's hot path."""
        delay: dict[int, int] = {}
        # streamed tensor -> [max over readers of start + window, min start, max window]
        spans: dict[int, list[int]] = {}
        whole: set[int] = set()
        rings: list[tuple[int, int, int]] = []
        weights = 0
        for v in bits(group):
            weight, lag, waits, reads, outs = self._ring_terms[v]
            weights += weight
            start = 0
            for p, extra in waits:
                if group >> p & 1:
                    d = delay[p] + extra
                    if d > start:
                        start = d
            for ti, k in reads:
                if k == WHOLE:
                    whole.add(ti)
                    continue
                span = spans.get(ti)
                if span is None:
                    spans[ti] = [start + k, start, k]
                    continue
                if start + k > span[0]:
                    span[0] = start + k
                if start < span[1]:
                    span[1] = start
                if k > span[2]:
                    span[2] = k
            delay[v] = start + lag
            for ti, readers, sink in outs:
                if not readers & group:
                    rings.append((ti, sink, sink))
        height, producer, accumulated = self._height, self._producer, self._accumulated
        for ti in whole:
            rings.append((ti, height[ti], height[ti]))
        for ti, (reach, arrive, k) in spans.items():
            if whole and ti in whole:
                continue
            h, p = height[ti], producer[ti]
            if p >= 0 and group >> p & 1:
                if ti in accumulated:
                    rings.append((ti, h, h))
                    continue
                arrive = delay[p]
            held = reach - arrive
            rings.append((ti, k, held if held < h else h))
        return weights, rings

    def buffer_terms(self, group: Group) -> tuple[int, int, int]:
        """(weight, line-buffer, skip-buffer) elements of ``group``: under the default
        profile the rings' window rows and the rows beyond them; see the module doc."""
        if not self.physical_rows:
            return self._paper_terms(group)
        row = self._row
        weights, rings = self._rings(group)
        line = held_total = 0
        for ti, k, held in rings:
            line += k * row[ti]
            held_total += held * row[ti]
        return weights, line, held_total - line

    def _paper_terms(self, group: Group) -> tuple[int, int, int]:
        """The paper's per-node line buffers and uncapped skip rows. Written flat (the
        exact search costs hundreds of thousands of groups)."""
        delay: dict[int, int] = {}
        node_terms, node_weights = self._node_terms, self.node_weights
        weights = line = skip = 0
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
                skip += ready * rows_sum - lagged
            delay[v] = ready + lag
        return weights, line, skip

    def _compute(self, group: Group) -> GroupCost:
        weights, line, skip = self.buffer_terms(group)
        buffer = self.b * (weights + line + skip)
        dram = self.b * (self.io_elements(group) + weights)
        return GroupCost(buffer, dram, buffer < self.beta)

"""LBDF: line-buffer depth-first fusion (docs/cost-model.md, "LBDF").

Rows stream through the whole group and every weight stays on chip. Under the default
profile the buffer holds all weights and one ring of rows per tensor the group reads or
writes: the rows its readers' windows span between the newest row produced and the oldest
row the slowest reader still needs (the row pipeline of ``accel_model/schedule_lbdf.py``,
which fires each op as soon as its window is complete). The paper's and Optimus's profiles
keep the paper's count: a ``K_h``-row line buffer per op and input plus, at a join, skip
rows for the faster input. The default profile counts delays on one clock for the whole
graph (``lbdf_clock``), in which a row of each tensor lasts in proportion to its rate, so a
lag before a stride or an upsampling is worth what it is in the rows read after it; the
paper's profile adds plain row counts (``lbdf_lag``).
"""

from __future__ import annotations

import math

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


def lbdf_clock(graph: OpGraph) -> int:
    """Ticks of the default profile's clock per pass over the graph's rows: the least common
    multiple of every tensor's height, so each tensor's row lasts a whole number of ticks."""
    return math.lcm(*(max(t.shape[1], 1) for t in graph.tensors))


def lbdf_row_ticks(graph: OpGraph, clock: int, t: int) -> int:
    """Ticks between two rows of tensor ``t``: its producer makes one per firing (a
    reduction's accumulators, and an input from outside, count its own height)."""
    p = graph.tensors[t].producer
    if p >= 0 and not lbdf_reduces(graph, p):
        return clock // lbdf_firings(graph, p)
    return clock // max(graph.tensors[t].shape[1], 1)


class RingReader:
    """How one streamed input of one op fills its tensor's ring: firing ``f`` comes
    ``f * fire`` ticks after the op's first, reads rows from ``lo_f`` on, and by then every
    row of the tensor made up to that tick is there (docs/cost-model.md, "LBDF")."""

    __slots__ = ("firings", "memo", "tick", "top")

    def __init__(self, firings: tuple[tuple[int, int], ...], tick: int, height: int) -> None:
        self.firings, self.tick, self.top = firings, tick, height - 1
        self.memo: dict[int, int] = {}

    def rows(self, lead: int) -> int:
        """Rows the ring holds for this reader when the tensor's first row is made ``lead``
        ticks before the reader's first firing: the most, over firings, of the rows made by
        then from the oldest the firing reads. Non-decreasing in ``lead``."""
        held = self.memo.get(lead)
        if held is None:
            tick, top = self.tick, self.top
            held = max(min((lead + at) // tick, top) + 1 - lo for at, lo in self.firings)
            self.memo[lead] = held
        return held


def lbdf_read_timing(graph: OpGraph, clock: int, v: int, i: int) -> tuple[int, RingReader]:
    """(offset, reader) of op ``v``'s streamed ``i``-th input on the default clock: the
    offset is the least number of ticks by which v's first firing must follow the input's
    first row so that each firing ``f``, ``f`` firing periods later, finds its last row made
    (the input's row ``r`` is made ``r`` row periods after its first)."""
    t = graph.nodes[v].inputs[i]
    tick = lbdf_row_ticks(graph, clock, t)
    fire = clock // lbdf_firings(graph, v)
    spans = [lbdf_read_rows(graph, v, i, f) for f in range(lbdf_firings(graph, v))]
    read = [(f * fire, lo, hi) for f, (lo, hi) in enumerate(spans) if hi > lo]
    offset = max(((hi - 1) * tick - at for at, _, hi in read), default=0)
    height = max(graph.tensors[t].shape[1], 1)
    return max(offset, 0), RingReader(tuple((at, lo) for at, lo, _ in read), tick, height)


@COST_MODELS.register("lbdf")
class LBDF(CostModel):
    name = "lbdf"
    shape_costs = True  # every default-profile term reads shapes and in-group edges

    def __init__(self, graph, accel) -> None:
        super().__init__(graph, accel)
        if self.physical_rows:
            self._ring_setup(graph)
        else:
            self._paper_setup(graph)

    def _ring_setup(self, graph: OpGraph) -> None:
        """Per node: (weight elements, lag, ticks from its first firing to its first output
        row, (producer, ticks added when read whole) per input made by an op, (tensor,
        window rows, offset, reader) per input, (tensor, consumers, rows it holds as a sink)
        per output), in ticks of ``lbdf_clock``; per tensor its row elements, height and
        producer (docs/cost-model.md, "LBDF")."""
        t = graph.tensors
        clock = lbdf_clock(graph)
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
            # an input read whole is complete a pass over its rows after its first row
            waits = tuple(
                (
                    t[ti].producer,
                    self._height[ti] * lbdf_row_ticks(graph, clock, ti) if k == WHOLE else 0,
                )
                for ti, k in zip(n.inputs, window, strict=True)
                if t[ti].producer >= 0
            )
            reads = []
            for i, (ti, k) in enumerate(zip(n.inputs, window, strict=True)):
                if k == WHOLE:
                    reads.append((ti, WHOLE, 0, None))
                else:
                    reads.append((ti, k, *lbdf_read_timing(graph, clock, v, i)))
            lag = max((offset for _, k, offset, _ in reads if k != WHOLE), default=0)
            # a reduction's output rows are complete after its last pass
            done = clock if lbdf_reduces(graph, v) else 0
            outs = tuple(
                (ti, consumers[ti], self._height[ti] if ti in self._accumulated else 1)
                for ti in n.outputs
            )
            terms.append((self.node_weights[v], lag, done, waits, tuple(reads), outs))
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
        # a max over readers of a non-decreasing function of the reader's lead over the
        # tensor's arrival (a min over readers for an input from outside); paper: per-node terms
        return True

    def buffer_floor(self, nodes: Group) -> int:
        if not self.physical_rows:  # weights and line buffers are per node, skip rows >= 0
            line = sum(self._node_terms[v][0] for v in bits(nodes))
            return self.b * (self.weight_elements(nodes) + line)
        # every group holding ``nodes`` keeps at least each reader's window of each input
        # and a row (a reduction: every row) of each output
        rows: dict[int, int] = {}
        for v in bits(nodes):
            _, _, _, _, reads, outs = self._ring_terms[v]
            for ti, k, _, _ in reads:
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
        delay: dict[int, int] = {}  # d(v): the tick of v's first output row
        # streamed tensor -> (first firing of the reader, offset, window rows, reader)
        spans: dict[int, list[tuple[int, int, int, RingReader]]] = {}
        whole: set[int] = set()
        rings: list[tuple[int, int, int]] = []
        weights = 0
        for v in bits(group):
            weight, lag, done, waits, reads, outs = self._ring_terms[v]
            weights += weight
            start = 0
            for p, extra in waits:
                d = delay.get(p)  # in the group iff already timed (producers come first)
                if d is not None:
                    d += extra
                    if d > start:
                        start = d
            first = start + lag
            for ti, k, offset, reader in reads:
                if k == WHOLE:
                    whole.add(ti)
                    continue
                span = spans.get(ti)
                if span is None:
                    spans[ti] = [(first, offset, k, reader)]
                else:
                    span.append((first, offset, k, reader))
            delay[v] = first + done
            for ti, readers, sink in outs:
                if not readers & group:
                    rings.append((ti, sink, sink))
        height, producer, accumulated = self._height, self._producer, self._accumulated
        for ti in whole:
            rings.append((ti, height[ti], height[ti]))
        for ti, span in spans.items():
            if whole and ti in whole:
                continue
            p = producer[ti]
            if p in delay:  # made in the group
                if ti in accumulated:
                    rings.append((ti, height[ti], height[ti]))
                    continue
                arrive = delay[p]
            else:  # read from outside no earlier than its first reader needs it
                arrive = min(first - offset for first, offset, _, _ in span)
            held = k = 0
            for first, _, window, reader in span:
                n = reader.rows(first - arrive)
                if n > held:
                    held = n
                if window > k:
                    k = window
            rings.append((ti, k, held))
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

"""The LBDF schedule the cost model priced, written out row by row (docs/cost-model.md,
"LBDF" and "Schedules and replay").

LBDF streams rows through the whole group: every weight is loaded once and stays, and each
op keeps, per activation input, a line buffer of the rows its window reads plus, at a join,
a skip FIFO for the rows its faster input runs ahead. The builder writes that out:

* **regions**: one weights region per op with weights; one region per tensor an in-group op
  reads, of as many rows as the cost model allots to it over all its in-group readers (line
  buffer plus skip FIFO each; the second operand of a matmul of two activations whole), all
  channels and columns. The regions add up to ``F_beta / b`` exactly. A region is a pool of
  row slots: a row stays from the step it is read or computed until the last op that reads
  it has run (one shared ring per tensor, so two readers of a row never hold two copies).
  A tensor no op of the group reads (a sink's output) has no region: the cost model
  allots none, so its rows are written to DRAM as they are computed.
* **the pipeline**: external input rows are read, and ops compute one output row at a time,
  in a fixed round (inputs in tensor order, then ops in topological order), each firing as
  soon as the rows its window reads are complete and the region it writes has a free slot.
  Every ring has one writer and frees rows only when no reader needs them, so firing one op
  never stalls another: if this round runs out of moves, no order of the same firings fits
  the regions. It then runs the most downstream op that has its inputs anyway, and the
  region it overfills is recorded (:attr:`Pipeline.overflows`); the replay reports it.
* **reductions over rows** (global pooling, a classifier contracting rows): they consume
  one input row per pass (``Compute.in_rows``) into accumulators that take their output rows'
  slots from the first pass and are complete after the last.
* **steps**: one per output row of the tallest sink (ties: the first op), each ending with
  the writes of the rows it completed; the first step starts with every weight read, the
  last one runs whatever the other sinks still had to do.
* **DRAM**: every external input row read once, every row of a tensor read outside the group
  (or a graph output) written once, every weight read once: ``io + W``, ``F_D / b``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from accel_model.lbdf import LBDF, lbdf_firings, lbdf_read_rows
from accel_model.rows import lbdf_input_rows, lbdf_lag, lbdf_reduces
from accel_model.schedule import (
    SCHEDULE_BUILDERS,
    Action,
    Compute,
    Range,
    Region,
    Schedule,
    Step,
    Transfer,
    traffic,
)
from fusionplan.ir.graph import Group, OpGraph, bits


def lbdf_region_rows(cm: LBDF, group: Group) -> dict[int, int]:
    """Rows of each tensor's region: under the default profile the ring the cost model
    allots (``LBDF.rings``, sinks' rows and reductions' accumulators included); under the
    paper's and Optimus's, over its in-group readers, the line buffer plus the skip FIFO
    the paper counts, and none for a sink (docs/cost-model.md, "LBDF"). Either way the
    per-tensor split of ``LBDF.buffer_terms``'s line and skip terms."""
    if cm.physical_rows:
        return {t: held for t, (_, held) in cm.rings(group).items()}
    graph, tensors = cm.graph, cm.graph.tensors
    delay: dict[int, int] = {}
    rows: dict[int, int] = {}
    for v in bits(group):
        node = graph.nodes[v]
        heights = [tensors[t].shape[1] for t in node.inputs]
        held = lbdf_input_rows(graph, v)
        producers = [tensors[t].producer for t in node.inputs]
        inside = [p >= 0 and group >> p & 1 for p in producers]
        ready = max((delay[p] for p, ok in zip(producers, inside, strict=True) if ok), default=0)
        join = sum(inside) > 1
        for i, t in enumerate(node.inputs):
            r = held[i]
            whole = r >= heights[i] > 1  # held whole: no skip rows (an attention operand)
            if join and inside[i] and not whole:
                r += ready - delay[producers[i]]
            rows[t] = rows.get(t, 0) + r
        delay[v] = ready + lbdf_lag(graph, v)
    return rows


class Overflow(NamedTuple):
    """A region the pipeline overfilled: no order of the firings fits the cost model's rows."""

    tensor: int
    step: int  # the first step at which it overflowed
    rows: int  # the most rows it held at once
    allotted: int  # the rows of its region


@dataclass(frozen=True)
class Pipeline:
    """The row pipeline of one LBDF group: its regions and steps, the regions it had to
    overfill, and the most rows each tensor held at once (at most its region's rows when
    nothing overflowed)."""

    regions: tuple[Region, ...]
    steps: tuple[Step, ...]
    overflows: tuple[Overflow, ...]
    peak_rows: dict[int, int] = field(default_factory=dict)
    streamed: frozenset[int] = frozenset()  # sink outputs written with no region


@SCHEDULE_BUILDERS.register("lbdf")
def lbdf_schedule(cm: LBDF, group: Group) -> Schedule:
    """The schedule :class:`LBDF` priced for ``group`` (module docstring)."""
    pipe = lbdf_pipeline(cm, group)
    height = max(cm.graph.out_shape(v)[1] for v in _sinks(cm.graph, group))
    return Schedule(
        group,
        cm.name,
        "lbdf",
        cm.b,
        cm.beta,
        h_tile=height,
        tiles=((0, height),),
        regions=pipe.regions,
        steps=pipe.steps,
        dram=traffic(pipe.steps),
    )


def lbdf_pipeline(cm: LBDF, group: Group, rows: dict[int, int] | None = None) -> Pipeline:
    """Run ``group``'s row pipeline with the cost model's regions, or with ``rows`` rows per
    tensor instead (to ask whether fewer rows would do)."""
    return _Pipe(cm, group, lbdf_region_rows(cm, group) if rows is None else rows).run()


def _sinks(graph: OpGraph, group: Group) -> list[int]:
    return [v for v in bits(group) if not graph.succ_mask[v] & group]


class _Actor:
    """An external input read row by row (``op`` -1) or an op firing once per output row
    (per input row for a reduction); ``needs[i]`` = (tensor, first rows, ends) per firing."""

    def __init__(self, op: int, tensor: int, firings: int, reduce: bool = False) -> None:
        self.op, self.tensor, self.firings, self.reduce = op, tensor, firings, reduce
        self.next = 0
        self.needs: list[tuple[int, list[int], list[int]]] = []


class _Pipe:
    def __init__(self, cm: LBDF, group: Group, rows: dict[int, int]) -> None:
        self.cm, self.group, self.graph = cm, group, cm.graph
        graph = cm.graph
        nodes, tensors = graph.nodes, graph.tensors
        self.ops = bits(group)
        inside = {t for v in self.ops for t in nodes[v].outputs}
        external = sorted({t for v in self.ops for t in nodes[v].inputs} - inside)
        self.actors = [_Actor(-1, t, max(tensors[t].shape[1], 1)) for t in external]
        for v in self.ops:
            self.actors.append(self._op_actor(v))
        self.cap: dict[int, int] = dict(rows)  # tensor -> region rows
        self.stored: dict[int, set[int]] = {t: set() for t in rows}
        self.done: dict[int, int] = {}
        outs, readers = graph.graph_output_set, graph.consumer_mask
        self.writes = {t for t in inside if t in outs or readers[t] & ~group}
        # per tensor: (actor, last firing reading each row) for each in-group reader
        self.last: dict[int, list[tuple[_Actor, list[int]]]] = {}
        for a in self.actors:
            for t, lo, hi in a.needs:
                last = [-1] * max(tensors[t].shape[1], 1)
                for f in range(a.firings):
                    for r in range(lo[f], hi[f]):
                        last[r] = f
                self.last.setdefault(t, []).append((a, last))
        sinks = _sinks(graph, group)
        self.tall = max(sinks, key=lambda v: (graph.out_shape(v)[1], -v))
        self.peak: dict[int, int] = {t: 0 for t in rows}
        self.over: dict[int, Overflow] = {}

    def _op_actor(self, v: int) -> _Actor:
        graph = self.graph
        a = _Actor(v, -1, lbdf_firings(graph, v), lbdf_reduces(graph, v))
        for i, t in enumerate(graph.nodes[v].inputs):
            spans = [lbdf_read_rows(graph, v, i, f) for f in range(a.firings)]
            a.needs.append((t, [s[0] for s in spans], [s[1] for s in spans]))
        return a

    # -- state ------------------------------------------------------------------------
    def _ready(self, a: _Actor) -> bool:
        f = a.next
        return all(hi[f] <= self.done.get(t, 0) for t, _, hi in a.needs)

    def _made(self, a: _Actor) -> list[tuple[int, Range, bool]]:
        """(tensor, rows placed, complete) per tensor the next firing of ``a`` defines."""
        f = a.next
        if a.op < 0:
            return [(a.tensor, (f, f + 1), True)]
        h = max(self.graph.out_shape(a.op)[1], 1)
        if a.reduce:
            rows = (0, h) if f == 0 else (0, 0)
            return [(t, rows, f == a.firings - 1) for t in self.graph.nodes[a.op].outputs]
        return [(t, (f, f + 1), True) for t in self.graph.nodes[a.op].outputs]

    def _fits(self, a: _Actor) -> bool:
        for t, (lo, hi), _ in self._made(a):
            if t in self.cap and len(self.stored[t]) + hi - lo > self.cap[t]:
                return False
        return True

    def _live(self, t: int, r: int) -> bool:
        return any(last[r] >= a.next for a, last in self.last.get(t, ()))

    def _free(self, t: int) -> None:
        held = self.stored.get(t)
        if held:
            held.difference_update([r for r in held if not self._live(t, r)])

    # -- firing -----------------------------------------------------------------------
    def _fire(self, a: _Actor, actions: list[Action], step: int) -> Range | None:
        """Run ``a``'s next firing; the rows of its output it completed (None: none)."""
        graph, tensors = self.graph, self.graph.tensors
        made = self._made(a)
        if a.op < 0:
            c, _, w = tensors[a.tensor].shape
            f = a.next
            actions.append(Transfer("read", a.tensor, -1, (f, f + 1), (0, c), c * w))
        else:
            c_out = graph.out_shape(a.op)[0]
            if a.reduce:
                h = max(graph.out_shape(a.op)[1], 1)
                _, lo, hi = a.needs[0]
                span = (lo[a.next], hi[a.next])
                actions.append(Compute(a.op, (0, h), (0, c_out), in_rows=span))
            else:
                actions.append(Compute(a.op, (a.next, a.next + 1), (0, c_out)))
        completed: Range | None = None
        for t, (lo, hi), complete in made:
            if t in self.stored:
                self.stored[t].update(range(lo, hi))
                n = len(self.stored[t])
                self.peak[t] = max(self.peak[t], n)
                if n > self.cap[t]:
                    seen = self.over.get(t)
                    first = seen.step if seen else step
                    rows = max(n, seen.rows if seen else 0)
                    self.over[t] = Overflow(t, first, rows, self.cap[t])
            if complete:
                start = self.done.get(t, 0)
                end = hi if a.op < 0 or not a.reduce else max(graph.tensors[t].shape[1], 1)
                self.done[t] = end
                completed = (start, end)
                if t in self.writes:
                    c, _, w = tensors[t].shape
                    actions.append(
                        Transfer("write", t, -1, (start, end), (0, c), (end - start) * c * w)
                    )
        a.next += 1
        for t, _, _ in a.needs:
            self._free(t)
        for t, _, _ in made:
            self._free(t)
        return completed

    def run(self) -> Pipeline:
        cm, graph = self.cm, self.graph
        actions: list[Action] = [
            Transfer("read", -1, v, (0, 0), (0, max(graph.out_shape(v)[0], 1)), cm.node_weights[v])
            for v in self.ops
            if cm.node_weights[v]
        ]
        steps: list[Step] = []
        order = self.actors
        while True:
            moved = False
            for a in order:
                if a.next < a.firings and self._ready(a) and self._fits(a):
                    self._step(a, actions, steps)
                    moved = True
            if all(a.next >= a.firings for a in order):
                break
            if not moved:  # no order fits the regions: run the most downstream op anyway
                stuck = [a for a in order if a.next < a.firings and self._ready(a)]
                self._step(stuck[-1], actions, steps)
        if actions:
            if steps:
                last = steps[-1]
                steps[-1] = last._replace(actions=last.actions + tuple(actions))
            else:
                steps.append(Step(0, (0, 0), tuple(actions)))
        regions = [
            Region("weights", v, 0, 0, 0, cm.node_weights[v])
            for v in self.ops
            if cm.node_weights[v]
        ]
        for t in sorted(self.cap):
            c, _, w = graph.tensors[t].shape
            n = self.cap[t]
            regions.append(Region("tensor", t, n, c, w, n * c * w))
        streamed = frozenset(
            t for v in self.ops for t in graph.nodes[v].outputs if t not in self.cap
        )
        return Pipeline(
            tuple(regions),
            tuple(steps),
            tuple(self.over[t] for t in sorted(self.over)),
            dict(self.peak),
            streamed,
        )

    def _step(self, a: _Actor, actions: list[Action], steps: list[Step]) -> None:
        """Fire ``a``; close a step when it completed rows of the tallest sink."""
        rows = self._fire(a, actions, len(steps))
        if a.op == self.tall and rows is not None:
            steps.append(Step(0, rows, tuple(actions)))
            actions.clear()


def least_rows(cm: LBDF, group: Group, tensor: int) -> int | None:
    """The fewest rows of ``tensor``'s region with which ``group``'s pipeline runs without
    overflowing, every other region as the cost model allots it (None: it overflows
    however many rows this one gets). Below the allotted rows, the cost model reserves
    rows no order needs; above, it allots too few. Rows only add moves, so the search
    halves the range."""
    rows = lbdf_region_rows(cm, group)

    def fits(n: int) -> bool:
        return not lbdf_pipeline(cm, group, {**rows, tensor: n}).overflows

    # a region of the whole tensor never evicts a row anyone needs
    top = max(rows[tensor], cm.graph.tensors[tensor].shape[1])
    if not fits(top):
        return None
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo

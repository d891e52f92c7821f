"""Replay a schedule against the buffer, step by step, and count its DRAM bytes
(docs/cost-model.md, "Schedules and replay").

The replay is the referee of the closed forms, so it never calls them: it executes a
:class:`~accel_model.schedule.Schedule`'s actions with a buffer allocator and the exact read
windows of each op (accel_model/windows.py, from the op's kernel, stride, padding, dilation,
groups and channel role):

* **allocate**: every region of the schedule is allocated when the group starts and held to
  its end; their sum is the peak, and it must fit the buffer;
* **read / write**: a tensor read puts its block into the tensor's region and counts its
  elements; a write needs the block resident and complete; weights are counted as read
  (streamed weights pass to the PEs, resident ones fill their region); streamed weights
  serve one computation of each output: an op that recomputes an output in the same step
  must read them again;
* **compute**: before an op runs, every input row x channel x column its output block reads
  must be resident and complete (not a partial sum), and its weights loaded (resident) or
  streamed in the current step; its output block takes room in its region (an op written
  in place over an input takes the room that input's dying cells free);
* **reuse / free**: a stored value is freed right after its last read (by a compute or a
  write) before it is next loaded or computed again, so its slot is reused;
* a region whose live data would exceed its size, data read that is not there, a result
  never written to DRAM, or regions that exceed the buffer raise :class:`ReplayError` at
  the exact step and action.

Data is tracked in cells: one row of one tensor over a channel segment and a column segment,
the segments being the tensor's channel and column ranges cut at every boundary the schedule
uses.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from accel_model.schedule import Compute, Range, Schedule, TrafficKey, Transfer
from accel_model.windows import input_channels, input_cols, input_rows, reduces_over_inputs
from fusionplan.ir.errors import FusionPlanError
from fusionplan.ir.graph import OpGraph, bits

Cell = tuple[int, int, int, int]  # tensor, row, channel segment, column segment


class ReplayError(FusionPlanError):
    """The schedule cannot run as written: the message names the step, action and data."""


@dataclass(frozen=True)
class ReplayResult:
    """What the replay measured: ``dram_bytes`` in all and ``per_tensor`` (bytes per tensor
    and per op's weights), ``peak_bytes`` allocated at once, the number of ``steps`` run, and
    ``live_peak_bytes``: the most bytes holding live data at once (at most ``peak_bytes``;
    the difference is room the regions reserve but the schedule never fills at once)."""

    dram_bytes: int
    per_tensor: dict[TrafficKey, int]
    peak_bytes: int
    steps: int
    live_peak_bytes: int


class _Segments:
    """Channel and column segments of one tensor: cut at every boundary the schedule uses."""

    def __init__(self, channels: set[int], cols: set[int]) -> None:
        self.ch = sorted(channels)
        self.col = sorted(cols)

    @staticmethod
    def _span(bounds: list[int], r: Range) -> range:
        a, b = r
        if a >= b:
            return range(0)
        return range(bisect_right(bounds, a) - 1, bisect_left(bounds, b))

    def cells(self, tensor: int, rows: Range, channels: Range, cols: Range) -> list[Cell]:
        chs, cls = self._span(self.ch, channels), self._span(self.col, cols)
        return [(tensor, r, c, k) for r in range(*rows) for c in chs for k in cls]

    def size(self, cell: Cell) -> int:
        _, _, c, k = cell
        return (self.ch[c + 1] - self.ch[c]) * (self.col[k + 1] - self.col[k])


class _Plan:
    """Each action's cells, found once before the run: what it reads, what it defines."""

    def __init__(self, schedule: Schedule, graph: OpGraph) -> None:
        nodes, tensors = graph.nodes, graph.tensors
        cuts: dict[int, tuple[set[int], set[int]]] = {}

        def cut(t: int, channels: Range, cols: Range) -> None:
            ch, cl = cuts.setdefault(t, ({0, tensors[t].shape[0]}, {0, tensors[t].shape[2]}))
            ch.update(channels)
            cl.update(cols)

        # (kind, payload) per action, in run order, with the step it belongs to
        self.actions: list[tuple[int, int, Compute | Transfer]] = [
            (si, ai, a)
            for si, step in enumerate(schedule.steps)
            for ai, a in enumerate(step.actions)
        ]
        blocks: list[tuple[list, list]] = []  # per action: (reads, defines) as block tuples
        for _, _, a in self.actions:
            reads: list[tuple[int, Range, Range, Range, int]] = []  # tensor, rows, ch, cols, input
            defines: list[tuple[int, Range, Range, Range, int]] = []
            if isinstance(a, Transfer):
                if not a.is_weights:
                    cols = a.cols or (0, tensors[a.tensor].shape[2])
                    block = (a.tensor, a.rows, a.channels, cols, -1)
                    (defines if a.direction == "read" else reads).append(block)
            else:
                node = nodes[a.op]
                for i, t in enumerate(node.inputs):
                    ch = input_channels(graph, a.op, i, a.channels)
                    if a.in_channels is not None and reduces_over_inputs(graph, a.op):
                        ch = (max(ch[0], a.in_channels[0]), min(ch[1], a.in_channels[1]))
                        if ch[0] >= ch[1]:
                            continue
                    rows = input_rows(graph, a.op, i, a.rows)
                    if a.in_rows is not None:
                        rows = (max(rows[0], a.in_rows[0]), min(rows[1], a.in_rows[1]))
                        if rows[0] >= rows[1]:
                            continue
                    reads.append((t, rows, ch, input_cols(graph, a.op, i, a.cols), i))
                for t, ch in _output_channels(graph, a.op, a.channels):
                    defines.append((t, a.rows, ch, a.cols or (0, tensors[t].shape[2]), -1))
            for t, _, ch, cl, _ in reads + defines:
                cut(t, ch, cl)
            blocks.append((reads, defines))
        self.segments = {t: _Segments(ch, cl) for t, (ch, cl) in cuts.items()}
        self.reads: list[list[tuple[Cell, int]]] = []  # (cell, input index or -1)
        self.defines: list[list[Cell]] = []
        for reads, defines in blocks:
            self.reads.append(
                [(c, i) for t, r, ch, cl, i in reads for c in self.segments[t].cells(t, r, ch, cl)]
            )
            self.defines.append(
                [c for t, r, ch, cl, _ in defines for c in self.segments[t].cells(t, r, ch, cl)]
            )
        # the cells whose value dies at each action: read there, not read again before they
        # are next defined (a partial compute also reads its own accumulator)
        self.dying: list[list[Cell]] = [[] for _ in self.actions]
        live: set[Cell] = set()
        for idx in range(len(self.actions) - 1, -1, -1):
            a = self.actions[idx][2]
            accum = isinstance(a, Compute) and _accumulates(graph, a)
            defined = self.defines[idx]
            # a defined cell no later action reads dies where it is made
            dying = self.dying[idx]
            dying.extend(c for c in dict.fromkeys(defined) if c not in live)
            if not accum:
                live.difference_update(defined)
            used = [c for c, _ in self.reads[idx]] + (defined if accum else [])
            for c in used:
                if c not in live:
                    if c not in dying:
                        dying.append(c)
                    live.add(c)


def _accumulates(graph: OpGraph, a: Compute) -> bool:
    """Whether compute ``a`` is a partial pass (over input rows, or input channels of an
    op that reduces over them) that accumulates into its outputs."""
    if a.in_rows is not None:
        return True
    return a.in_channels is not None and reduces_over_inputs(graph, a.op)


def _output_channels(graph: OpGraph, v: int, channels: Range) -> list[tuple[int, Range]]:
    """The output tensors of op ``v`` and the part of each that output ``channels`` cover
    (several outputs, a Split, stack their channels)."""
    out, offset = [], 0
    for t in graph.nodes[v].outputs:
        c = graph.tensors[t].shape[0]
        lo, hi = max(channels[0] - offset, 0), min(channels[1] - offset, c)
        if lo < hi:
            out.append((t, (lo, hi)))
        offset += c
    return out


def replay(schedule: Schedule, graph: OpGraph, weights: Sequence[int]) -> ReplayResult:
    """Run ``schedule`` on ``graph`` (``weights``: elements per op, as its cost model counts
    them) and measure it; raise :class:`ReplayError` where it breaks (module docstring)."""
    return _Run(schedule, graph, weights).run()


class _Run:
    """The state of one replay: what each region holds, what has been written, the counts."""

    def __init__(self, schedule: Schedule, graph: OpGraph, weights: Sequence[int]) -> None:
        self.schedule, self.graph, self.weights = schedule, graph, weights
        group = schedule.group
        nodes, tensors = graph.nodes, graph.tensors
        self.region_of, self.weight_region = _allocate(schedule, graph, weights)
        self.capacity = [r.elements for r in schedule.regions]
        self.plan = _Plan(schedule, graph)
        self.seg = self.plan.segments
        inputs = {t for v in bits(group) for t in nodes[v].inputs}
        self.external = {
            t for t in inputs if tensors[t].producer < 0 or not group >> tensors[t].producer & 1
        }
        self.outputs = _group_outputs(graph, group)
        self.resident: set[Cell] = set()
        # accumulator -> input -> the (row, channel segment) pairs it has still to consume
        self.partial: dict[Cell, dict[int, set[tuple[int, int]]]] = {}
        self.stored: set[Cell] = set()
        self.used = [0] * len(self.capacity)  # live elements per region
        self.weights_in: set[int] = set()  # ops whose weights fill their region
        self.streamed: dict[int, set[int]] = {}  # step -> ops whose weights streamed in it
        self.made: dict[int, set[Cell]] = {}  # op -> cells its last weight stream computed
        self.dram: dict[TrafficKey, int] = {}
        self.live = self.live_peak = 0

    # -- messages ---------------------------------------------------------------------
    def where(self, si: int, ai: int) -> str:
        return f"step {si} (tile {self.schedule.steps[si].tile}), action {ai}"

    def describe(self, c: Cell) -> str:
        t, r, ch, k = c
        s = self.seg[t]
        cols = f", columns {s.col[k]}..{s.col[k + 1]}" if len(s.col) > 2 else ""
        name = self.graph.tensors[t].name
        return f"tensor '{name}' row {r} channels {s.ch[ch]}..{s.ch[ch + 1]}{cols}"

    # -- the allocator ----------------------------------------------------------------
    def take(self, ri: int, n: int, what: Cell | str, at: str) -> None:
        """Allocate ``n`` elements in region ``ri`` for ``what`` (a cell, described only if
        the region overflows: most replays place hundreds of thousands of cells)."""
        if self.used[ri] + n > self.capacity[ri]:
            what = what if isinstance(what, str) else self.describe(what)
            region = self.schedule.regions[ri]
            owner = (
                f"weights of '{self.graph.nodes[region.key].name}'"
                if region.kind == "weights"
                else f"'{self.graph.tensors[region.key].name}'"
            )
            raise ReplayError(
                f"{at}: the region of {owner} ({self.capacity[ri]} elements) overflows: "
                f"{self.used[ri]} live + {n} for {what}"
            )
        self.used[ri] += n
        self.live += n
        self.live_peak = max(self.live_peak, self.live)

    def place(self, c: Cell, at: str) -> None:
        if c in self.resident:
            return
        ri = self.region_of.get(c[0])
        if ri is None:
            raise ReplayError(f"{at}: no region holds tensor '{self.graph.tensors[c[0]].name}'")
        self.take(ri, self.seg[c[0]].size(c), c, at)
        self.resident.add(c)

    def free(self, c: Cell) -> None:
        if c not in self.resident:
            return
        self.resident.discard(c)
        self.partial.pop(c, None)
        n = self.seg[c[0]].size(c)
        self.used[self.region_of[c[0]]] -= n
        self.live -= n

    # -- actions ----------------------------------------------------------------------
    def transfer(self, idx: int, si: int, a: Transfer, at: str) -> None:
        _check_elements(a, self.graph, self.weights, at)
        self.dram[a.key] = self.dram.get(a.key, 0) + a.elements
        if a.is_weights:
            if not self.schedule.holds_weights(a.op):
                self.streamed.setdefault(si, set()).add(a.op)
                self.made[a.op] = set()  # what these weights have computed
            elif a.op not in self.weights_in:
                ri = self.weight_region.get(a.op)
                if ri is None:
                    raise ReplayError(f"{at}: no region holds the weights of op {a.op}")
                self.take(ri, self.weights[a.op], "its weights", at)
                self.weights_in.add(a.op)
        elif a.direction == "read":
            for c in self.plan.defines[idx]:
                if c[0] not in self.external and c not in self.stored:
                    raise ReplayError(
                        f"{at}: reads {self.describe(c)} from DRAM, which the group computes "
                        "and has not written"
                    )
                self.place(c, at)
        else:
            for c, _ in self.plan.reads[idx]:
                if c not in self.resident or c in self.partial:
                    raise ReplayError(f"{at}: writes {self.describe(c)}, which is not computed")
                self.stored.add(c)

    def compute(self, idx: int, si: int, a: Compute, at: str) -> None:
        graph, v = self.graph, a.op
        node = graph.nodes[v]
        if self.weights[v]:
            if self.schedule.holds_weights(v):
                if v not in self.weights_in:
                    raise ReplayError(f"{at}: '{node.name}' runs before its weights are loaded")
            else:
                if v not in self.streamed.get(si, ()):
                    raise ReplayError(f"{at}: '{node.name}' runs without its weights in this step")
                if not _accumulates(graph, a):
                    made = self.made[v]
                    again = next((c for c in self.plan.defines[idx] if c in made), None)
                    if again is not None:
                        raise ReplayError(
                            f"{at}: '{node.name}' computes {self.describe(again)} again "
                            "without reading its streamed weights again"
                        )
                    made.update(self.plan.defines[idx])
        for c, _ in self.plan.reads[idx]:
            if c not in self.resident or c in self.partial:
                state = "a partial sum" if c in self.resident else "not in the buffer"
                raise ReplayError(
                    f"{at}: '{node.name}' (rows {a.rows[0]}..{a.rows[1]}, channels "
                    f"{a.channels[0]}..{a.channels[1]}) reads {self.describe(c)}, {state}"
                )
        # an op written in place over an input takes the room that input's dying cells free
        out_region = {self.region_of.get(t) for t in node.outputs} - {None}
        for c in self.plan.dying[idx]:
            if self.region_of.get(c[0]) in out_region and c[0] in node.inputs:
                self.release(c, at)
        accum = _accumulates(graph, a)
        for c in self.plan.defines[idx]:
            if not accum:
                self.place(c, at)
                self.partial.pop(c, None)
                continue
            if c not in self.resident:
                self.place(c, at)
                self.partial[c] = self.required(a, c)
            elif c not in self.partial:
                raise ReplayError(
                    f"{at}: '{node.name}' accumulates into finished {self.describe(c)}"
                )
            left = self.partial[c]
            for cell, i in self.plan.reads[idx]:
                if i in left:
                    left[i].discard((cell[1], cell[2]))
            if not any(left.values()):
                del self.partial[c]

    def required(self, a: Compute, c: Cell) -> dict[int, set[tuple[int, int]]]:
        """Per input, the (row, channel segment) pairs cell ``c`` of ``a.op``'s output reads
        in all: what its partial passes must have consumed before it is complete."""
        graph, v = self.graph, a.op
        offset = 0
        for t in graph.nodes[v].outputs:
            if t == c[0]:
                break
            offset += graph.tensors[t].shape[0]
        ch = self.seg[c[0]].ch
        channels = (ch[c[2]] + offset, ch[c[2] + 1] + offset)
        need = {}
        for i, t in enumerate(graph.nodes[v].inputs):
            if t not in self.seg:
                need[i] = {(-1, -1)}  # never read: the cell cannot complete
                continue
            segs = _Segments._span(self.seg[t].ch, input_channels(graph, v, i, channels))
            rows = range(*input_rows(graph, v, i, (c[1], c[1] + 1)))
            need[i] = {(r, k) for r in rows for k in segs}
        return need

    def release(self, c: Cell, at: str) -> None:
        """Free a dying cell; a group output must have been written to DRAM first."""
        if c[0] in self.outputs and c not in self.stored and c in self.resident:
            raise ReplayError(f"{at}: {self.describe(c)} leaves the buffer unwritten to DRAM")
        self.free(c)

    def run(self) -> ReplayResult:
        for idx, (si, ai, a) in enumerate(self.plan.actions):
            at = self.where(si, ai)
            if isinstance(a, Transfer):
                self.transfer(idx, si, a, at)
            else:
                self.compute(idx, si, a, at)
            for c in self.plan.dying[idx]:
                self.release(c, at)
        missing = _unwritten(self.outputs, self.stored, self.seg, self.graph)
        if missing:
            raise ReplayError(f"the schedule never writes {missing} to DRAM")
        b = self.schedule.bytes_per_element
        per_tensor = {k: n * b for k, n in sorted(self.dram.items())}
        return ReplayResult(
            dram_bytes=sum(per_tensor.values()),
            per_tensor=per_tensor,
            peak_bytes=sum(self.capacity) * b,
            steps=len(self.schedule.steps),
            live_peak_bytes=self.live_peak * b,
        )


def _allocate(
    schedule: Schedule, graph: OpGraph, weights: Sequence[int]
) -> tuple[dict[int, int], dict[int, int]]:
    """Allocate every region at the group's start: (tensor -> region, op -> weights region).

    Raises where the regions exceed the buffer, a tensor has two regions, or a tensor is
    written in place by an op that is not elementwise over that input's shape."""
    b, beta = schedule.bytes_per_element, schedule.buffer_bytes
    nodes, tensors = graph.nodes, graph.tensors
    tensor_region: dict[int, int] = {}
    weight_region: dict[int, int] = {}
    total = 0
    for ri, r in enumerate(schedule.regions):
        total += r.elements
        if r.kind == "weights":
            name = f"the weights of '{nodes[r.key].name}'"
            weight_region[r.key] = ri
        else:
            name = f"the region of '{tensors[r.key].name}'"
            for t in (r.key, *r.aliases):
                if t in tensor_region:
                    raise ReplayError(f"tensor '{tensors[t].name}' has two regions")
                tensor_region[t] = ri
            for t in r.aliases:
                v = tensors[t].producer
                host = [u for u in nodes[v].inputs if tensor_region.get(u) == ri]
                if (
                    nodes[v].kind not in ("act", "eltwise")
                    or nodes[v].whole_input
                    or not any(tensors[u].shape == tensors[t].shape for u in host)
                ):
                    raise ReplayError(
                        f"'{nodes[v].name}' cannot write '{tensors[t].name}' in place over "
                        f"'{tensors[r.key].name}': not elementwise over an input of its shape"
                    )
        if total * b > beta:
            raise ReplayError(
                f"allocating {name} ({r.elements * b} B) brings the regions to {total * b} B, "
                f"over the {beta} B buffer"
            )
    return tensor_region, weight_region


def _group_outputs(graph: OpGraph, group: int) -> set[int]:
    """Tensors the group must write to DRAM: read outside it, or graph outputs."""
    outs = graph.graph_output_set
    readers = graph.consumer_mask
    return {
        t for v in bits(group) for t in graph.nodes[v].outputs if t in outs or readers[t] & ~group
    }


def _check_elements(a: Transfer, graph: OpGraph, weights: Sequence[int], at: str) -> None:
    """A transfer's ``elements`` must be the size of what it moves."""
    if a.is_weights:
        c_out = max(graph.out_shape(a.op)[0], 1)
        share = weights[a.op] * (a.channels[1] - a.channels[0])
        expected = share // c_out if share % c_out == 0 else None
        if a.channels == (0, c_out):
            expected = weights[a.op]
        if expected != a.elements:
            raise ReplayError(
                f"{at}: a weight transfer of '{graph.nodes[a.op].name}' claims {a.elements} "
                f"elements for channels {a.channels[0]}..{a.channels[1]}"
            )
        return
    c, h, w = graph.tensors[a.tensor].shape
    cols = a.cols or (0, w)
    inside = all(
        0 <= lo <= hi <= size for (lo, hi), size in ((a.rows, h), (a.channels, c), (cols, w))
    )
    size = (a.rows[1] - a.rows[0]) * (a.channels[1] - a.channels[0]) * (cols[1] - cols[0])
    if not inside or size != a.elements:
        raise ReplayError(
            f"{at}: a transfer of '{graph.tensors[a.tensor].name}' claims {a.elements} "
            f"elements for rows {a.rows}, channels {a.channels}, columns {cols}"
        )


def _unwritten(outputs: set[int], stored: set[Cell], seg: dict, graph: OpGraph) -> str:
    """The first group output rows never written to DRAM, named ('' if none)."""
    for t in sorted(outputs):
        c, h, w = graph.tensors[t].shape
        s = seg.get(t)
        if s is None:
            return f"tensor '{graph.tensors[t].name}'"
        for cell in s.cells(t, (0, h), (0, c), (0, w)):
            if cell not in stored:
                return f"tensor '{graph.tensors[t].name}' row {cell[1]}"
    return ""

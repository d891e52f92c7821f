"""The schedule of an op run on its own, or with an epilogue, as its single-layer loop
order lays it out (docs/cost-model.md, "Single-layer cost" and "Schedules and replay").

The cost model prices a layer by the cheapest loop order the buffer allows
(accel_model/layer.py); :class:`~accel_model.layer.LayerTiling` names the order and the
output block it computes at once. The builder writes that order out with the op's exact
read windows (accel_model/windows.py):

* **row-bands**: column strips of ``cols`` output columns, strip after strip; each strip
  bands of ``rows`` rows, rows rolling down the strip (a band reads only the input rows the
  previous band did not), halo columns re-read by the next strip; weights streamed once per
  band; what a whole-input op reads in full is read again for every band.
* **channel-passes**: passes of ``channels`` output channels, their weights staged for the
  pass, one output row at a time over a rolling window of input rows; the input read again
  by every pass.
* **output-tiles**: tiles of ``channels`` output channels x a block of positions (whole
  rows, or a segment of one row); the partial sums stay while the input channels stream by,
  each one's window read for the tile and its weights for the tile's channels staged; the
  weights read once per position tile, each tile's window once per channel tile.
* **streaming**: one output channel at a time, bands of ``rows`` rows of its partial sums;
  the input rows of its group stream through one channel and one row at a time (a partial
  pass over that row), each with the weights of its (output, input) channel pair staged. A
  weightless op: one output row at a time, of one channel if the op is channel-local.
* **direct**: one output element at a time, output channel by output channel; its weights
  streamed, its window read one input row (of one input channel, for an op that reduces
  over them) at a time, each segment folded into the element as a partial pass.

Every order ends a pass by reading what no window of that pass reached (stride gaps, rows
below the last window), as the closed forms count whole tensors. Streamed weights take no
region; a pass's or tile's staged weights take a weights region of the size the order
stages. Tensor regions are sized to the most live data each tensor holds at once (a cell is
freed right after its last read), so the schedule's peak is what the layout needs, to be
compared with the order's ``held``.

An **epilogue** group runs its core op's order and applies the epilogue ops to each output
block as it is complete: an elementwise op writes its block over its in-group input (in
place), reading the block of any other input from DRAM; a tiling pooling pools the rows and
columns its windows cover, holding the core's rows that wait for the next block.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from accel_model.base import CostModel
from accel_model.channels import in_place_inputs
from accel_model.layer import LayerTiling
from accel_model.rows import is_activation_matmul
from accel_model.schedule import (
    LAYER,
    SCHEDULE_BUILDERS,
    Action,
    Compute,
    Range,
    Region,
    Schedule,
    ScheduleError,
    Step,
    Transfer,
    traffic,
)
from accel_model.windows import (
    input_channels,
    input_cols,
    input_rows,
    reduces_over_inputs,
    streams_channels,
)
from fusionplan.ir.graph import Group, OpGraph, bits


@SCHEDULE_BUILDERS.register(LAYER)
def layer_schedule(cm: CostModel, group: Group) -> Schedule:
    """The schedule of the loop order that priced ``group`` alone or as an epilogue group
    (module docstring)."""
    kind, core = cm.priced_order(group)
    if kind not in ("layer", "epilogue"):
        raise ScheduleError(f"the group is priced by its {kind} schedule, not a layer's")
    if cm.accel.conventions:
        raise ScheduleError(
            "the optimus profile prices a layer by Optimus's own loop blockings "
            "(accel_model/optimus_pricing.py); no builder lays those out"
        )
    if kind == "layer" and group != 1 << core:
        raise ScheduleError("a layer's schedule runs one op")
    tiling = cm.layer_tiling(core) if kind == "layer" else cm.epilogue_tiling(group, core)
    return _Layer(cm, group, core, tiling, kind).build()


def _split(total: int, size: int) -> list[Range]:
    """``(0, total)`` cut into blocks of ``size`` (the last one shorter)."""
    size = max(size, 1)
    return [(a, min(a + size, total)) for a in range(0, total, size)]


def _runs(flags: list[bool]) -> Iterator[Range]:
    """Maximal ranges of False entries: what is still to be read."""
    start = None
    for i, f in enumerate([*flags, True]):
        if not f and start is None:
            start = i
        elif f and start is not None:
            yield (start, i)
            start = None


class _Coverage:
    """Which cells of some channels of one tensor a pass has read."""

    def __init__(self, shape: tuple[int, int, int], chans: Range | None = None) -> None:
        c, h, w = shape
        self.chans = chans or (0, c)
        self.seen = np.zeros((self.chans[1] - self.chans[0], h, w), dtype=bool)

    def mark(self, rows: Range, chans: Range, cols: Range) -> None:
        lo = self.chans[0]
        self.seen[chans[0] - lo : chans[1] - lo, rows[0] : rows[1], cols[0] : cols[1]] = True

    def missing(self) -> Iterator[tuple[int, Range, Range]]:
        """(row, channels, columns) blocks still unread, channels merged where rows agree."""
        lo = self.chans[0]
        n, h, _ = self.seen.shape
        for r in range(h):
            plane = self.seen[:, r]
            same = (plane[1:] == plane[:-1]).all(axis=1).tolist()  # channel d+1 equals d
            c = 0
            while c < n:
                runs = list(_runs(plane[c].tolist()))
                d = c + 1
                while d < n and same[d - 1]:
                    d += 1
                for cols in runs:
                    yield r, (lo + c, lo + d), cols
                c = d


class _Layer:
    def __init__(self, cm: CostModel, group: Group, core: int, tiling: LayerTiling, kind: str):
        self.cm, self.group, self.v, self.t, self.kind = cm, group, core, tiling, kind
        self.graph = graph = cm.graph
        node = graph.nodes[core]
        self.node = node
        self.c_out, self.h_out, self.w_out = graph.out_shape(core)
        self.weights = cm.node_weights[core]
        self.steps: list[Step] = []
        self.actions: list[Action] = []
        self.stage = 0  # elements of the weights staged at once (0: they stream)
        self.biggest: dict[int, int] = {}  # tensor -> its largest window read
        self.epilogue = _Epilogue(self, group & ~(1 << core)) if kind == "epilogue" else None

    # -- actions ----------------------------------------------------------------------
    def read(self, t: int, rows: Range, chans: Range, cols: Range, fill: bool = False) -> None:
        if rows[0] >= rows[1] or chans[0] >= chans[1] or cols[0] >= cols[1]:
            return
        w = self.graph.tensors[t].shape[2]
        n = (rows[1] - rows[0]) * (chans[1] - chans[0]) * (cols[1] - cols[0])
        if not fill:
            self.biggest[t] = max(self.biggest.get(t, 0), n)
        self.actions.append(
            Transfer("read", t, -1, rows, chans, n, None if cols == (0, w) else cols)
        )

    def read_weights(self, chans: Range) -> None:
        """Stream the weights of output ``chans`` (all of them, or a whole-element share)."""
        if not self.weights:
            return
        n = self.weights
        if chans != (0, self.c_out):
            n, rest = divmod(self.weights * (chans[1] - chans[0]), self.c_out)
            if rest:
                raise ScheduleError(
                    f"'{self.node.name}' has {self.weights} weights for {self.c_out} output "
                    "channels: a slice of them is not a whole number of elements"
                )
        self.actions.append(Transfer("read", -1, self.v, (0, 0), chans, n))

    def close(self, rows: Range) -> None:
        self.steps.append(Step(len(self.steps), rows, tuple(self.actions)))
        self.actions = []

    def cols_of(self, cols: Range) -> Range | None:
        return None if cols == (0, self.w_out) else cols

    def finish_block(self, rows: Range, chans: Range, cols: Range) -> None:
        """The core's output block is complete: write it, or run the epilogue on it."""
        if self.epilogue is not None:
            self.epilogue.block(rows, chans, cols)
            return
        graph, offset = self.graph, 0
        for t in self.node.outputs:
            c = graph.tensors[t].shape[0]
            lo, hi = max(chans[0] - offset, 0), min(chans[1] - offset, c)
            if lo < hi:
                n = (rows[1] - rows[0]) * (hi - lo) * (cols[1] - cols[0])
                self.actions.append(Transfer("write", t, -1, rows, (lo, hi), n, self.cols_of(cols)))
            offset += c

    def fill(self, cover: dict[int, _Coverage]) -> None:
        """Read what no window of this pass reached, in blocks no larger than its windows."""
        for t, cov in cover.items():
            cap = max(self.biggest.get(t, 1), 1)
            for r, (c0, c1), (k0, k1) in cov.missing():
                step_c = max(1, cap // max(k1 - k0, 1))
                step_k = min(k1 - k0, cap)
                for c in range(c0, c1, step_c):
                    for k in range(k0, k1, step_k):
                        chans, cols = (c, min(c + step_c, c1)), (k, min(k + step_k, k1))
                        self.read(t, (r, r + 1), chans, cols, True)

    # -- the orders -------------------------------------------------------------------
    def build(self) -> Schedule:
        order = self.t.order
        layouts = {
            "row-bands": self.row_bands,
            "channel-passes": self.channel_passes,
            "output-tiles": self.output_tiles,
            "streaming": self.streaming if self.weights else self.streaming_weightless,
            "direct": self.direct,
        }
        if order not in layouts:
            raise ScheduleError(f"no schedule for the {order} loop order")
        if self.cm.b * self.t.held >= self.cm.beta:
            raise ScheduleError(
                f"'{self.node.name}' holds {self.t.held} elements even one output element at "
                "a time: no loop order runs it in this buffer"
            )
        layouts[order]()
        if self.epilogue is not None:
            self.epilogue.load_weights()
        if self.actions:
            last = self.steps[-1]
            self.steps[-1] = last._replace(actions=last.actions + tuple(self.actions))
        cm, epi = self.cm, self.epilogue
        host = epi.host if epi is not None else {}
        peaks = _live_peaks(self.graph, self.steps, host)
        regions = []
        if self.stage:
            regions.append(Region("weights", self.v, 0, 0, 0, self.stage))
        regions += [_region(self.graph, t, n) for t, n in sorted(peaks.items()) if n]
        if epi is not None:
            regions = epi.regions(regions)
        return Schedule(
            self.group,
            cm.name,
            f"{self.kind}:{order}",
            cm.b,
            cm.beta,
            core=self.v,
            h_tile=self.t.rows,
            tiles=tuple(s.sink_rows for s in self.steps),
            weights_resident=False,
            resident=epi.resident if epi is not None else 0,
            in_place=epi.in_place if epi is not None else 0,
            regions=tuple(regions),
            steps=tuple(self.steps),
            dram=traffic(self.steps),
        )

    def inputs(self) -> list[tuple[int, int]]:
        return list(enumerate(self.node.inputs))

    def whole_part(self, i: int) -> bool:
        """Input ``i`` is what a whole-input op reads in full for every band (layer.py): the
        second operand of a matmul of two activations, else every input."""
        if not self.node.whole_input:
            return False
        return i == 1 or not is_activation_matmul(self.node)

    def row_bands(self) -> None:
        graph, v, tensors = self.graph, self.v, self.graph.tensors
        cover = {t: _Coverage(tensors[t].shape) for _, t in self.inputs()}
        strips = _split(self.w_out, self.t.cols or self.w_out)
        bands = _split(self.h_out, self.t.rows or self.h_out)
        have = {t: 0 for _, t in self.inputs()}  # rows read down this strip
        for cols in strips:
            if not self.node.whole_input:  # a whole-input op keeps what every strip reads
                have = {t: 0 for _, t in self.inputs()}
            for rows in bands:
                self.read_weights((0, self.c_out))
                out_cols = self.cols_of(cols)
                for i, t in self.inputs():
                    r = input_rows(graph, v, i, rows)
                    k = input_cols(graph, v, i, out_cols)
                    ch = input_channels(graph, v, i, (0, self.c_out))
                    if self.whole_part(i):
                        lo = r[0]  # read in full again by every band
                    else:
                        lo = max(r[0], have[t])
                        have[t] = max(have[t], r[1])
                    self.read(t, (lo, r[1]), ch, k)
                    cover[t].mark((lo, r[1]), ch, k)
                self.actions.append(Compute(v, rows, (0, self.c_out), cols=out_cols))
                self.finish_block(rows, (0, self.c_out), cols)
                self.close(rows)
        self.fill(cover)

    def channel_passes(self) -> None:
        graph, v, tensors = self.graph, self.v, self.graph.tensors
        m = self.t.channels
        self.stage = max(self.weights * (b - a) for a, b in _split(self.c_out, m)) // self.c_out
        for chans in _split(self.c_out, m):
            cover = {t: _Coverage(tensors[t].shape) for _, t in self.inputs()}
            have = {t: 0 for _, t in self.inputs()}
            self.read_weights(chans)
            for r in range(self.h_out):
                for i, t in self.inputs():
                    rr = input_rows(graph, v, i, (r, r + 1))
                    ch = input_channels(graph, v, i, chans)
                    lo = max(rr[0], have[t])
                    have[t] = max(have[t], rr[1])
                    k = (0, tensors[t].shape[2])
                    self.read(t, (lo, rr[1]), ch, k)
                    cover[t].mark((lo, rr[1]), ch, k)
                self.actions.append(Compute(v, (r, r + 1), chans))
                self.finish_block((r, r + 1), chans, (0, self.w_out))
            # the pass reads the whole input again (a grouped conv's other channels too)
            self.fill(cover)
            self.close((0, self.h_out))

    def output_tiles(self) -> None:
        graph, v, tensors = self.graph, self.v, self.graph.tensors
        m, rows, cols = self.t.channels, self.t.rows, self.t.cols
        self.stage = m * _pair_weights(graph, v, self.weights)
        blocks = [(r, c) for r in _split(self.h_out, rows) for c in _split(self.w_out, cols)]
        mixing = reduces_over_inputs(graph, v)
        for chans in _split(self.c_out, m):
            reads = {t: input_channels(graph, v, i, chans) for i, t in self.inputs()}
            cover = {t: _Coverage(tensors[t].shape, reads[t]) for _, t in self.inputs()}
            # a mixing op accumulates over its input channels one at a time; a channel-local
            # one computes each output channel from its own input channel
            passes = sorted({c for a, b in reads.values() for c in range(a, b)}) if mixing else []
            for n, (r, c) in enumerate(blocks):
                self.read_weights(chans)
                out_cols = self.cols_of(c)
                for co in passes or range(*chans):
                    for i, t in self.inputs():
                        ch = (co, co + 1) if mixing else input_channels(graph, v, i, (co, co + 1))
                        if mixing and not reads[t][0] <= co < reads[t][1]:
                            continue
                        rr = input_rows(graph, v, i, r)
                        k = input_cols(graph, v, i, out_cols)
                        self.read(t, rr, ch, k)
                        cover[t].mark(rr, ch, k)
                    if mixing:
                        self.actions.append(Compute(v, r, chans, (co, co + 1), out_cols))
                    else:
                        self.actions.append(Compute(v, r, (co, co + 1), cols=out_cols))
                self.finish_block(r, chans, c)
                if n == len(blocks) - 1:
                    self.fill(cover)
                self.close(r)

    def streaming(self) -> None:
        """With weights: one output channel, a band of its rows' partial sums, its group's
        input streamed one row of one channel at a time."""
        graph, v, tensors = self.graph, self.v, self.graph.tensors
        self.stage = _pair_weights(graph, v, self.weights)
        bands = _split(self.h_out, self.t.rows or self.h_out)
        for co in range(self.c_out):
            chans = (co, co + 1)
            reads = {t: input_channels(graph, v, i, chans) for i, t in self.inputs()}
            cover = {t: _Coverage(tensors[t].shape, reads[t]) for _, t in self.inputs()}
            for n, rows in enumerate(bands):
                self.read_weights(chans)
                for i, t in self.inputs():
                    lo, hi = reads[t]
                    width = (0, tensors[t].shape[2])
                    fed = _fed_rows(graph, v, i, rows)
                    for ci in range(lo, hi):
                        for j in sorted(fed):  # rows no output reads: the pass's fill
                            self.read(t, (j, j + 1), (ci, ci + 1), width)
                            cover[t].mark((j, j + 1), (ci, ci + 1), width)
                            self.actions.append(
                                Compute(v, fed[j], chans, (ci, ci + 1), in_rows=(j, j + 1))
                            )
                self.finish_block(rows, chans, (0, self.w_out))
                if n == len(bands) - 1:
                    self.fill(cover)
                self.close(rows)

    def streaming_weightless(self) -> None:
        """One output row at a time, of one channel if the op computes each channel from its
        own (a channel-local op, an attention matmul's head)."""
        graph, v, tensors = self.graph, self.v, self.graph.tensors
        per_channel = streams_channels(graph, v)
        cover = {t: _Coverage(tensors[t].shape) for _, t in self.inputs()}
        for chans in _split(self.c_out, 1 if per_channel else self.c_out):
            have = {t: 0 for _, t in self.inputs()}
            for r in range(self.h_out):
                for i, t in self.inputs():
                    rr = input_rows(graph, v, i, (r, r + 1))
                    ch = input_channels(graph, v, i, chans)
                    lo = max(rr[0], have[t])
                    have[t] = max(have[t], rr[1])
                    k = (0, tensors[t].shape[2])
                    self.read(t, (lo, rr[1]), ch, k)
                    cover[t].mark((lo, rr[1]), ch, k)
                self.actions.append(Compute(v, (r, r + 1), chans))
                self.finish_block((r, r + 1), chans, (0, self.w_out))
            self.close((0, self.h_out))
        self.fill(cover)

    def direct(self) -> None:
        """One output element at a time, each of its window's input rows (of one input
        channel, for an op that reduces over them) read and folded into it."""
        graph, v, tensors = self.graph, self.v, self.graph.tensors
        one_channel = reduces_over_inputs(graph, v)
        for co in range(self.c_out):
            chans = (co, co + 1)
            reads = {t: input_channels(graph, v, i, chans) for i, t in self.inputs()}
            cover = {t: _Coverage(tensors[t].shape, reads[t]) for _, t in self.inputs()}
            for r in range(self.h_out):
                for k in range(self.w_out):
                    out_cols = self.cols_of((k, k + 1))
                    self.read_weights(chans)
                    spans = [
                        (t, input_rows(graph, v, i, (r, r + 1)), input_cols(graph, v, i, out_cols))
                        for i, t in self.inputs()
                    ]
                    rows = sorted({j for _, rr, _ in spans for j in range(*rr)})
                    split = sorted({c for a, b in reads.values() for c in range(a, b)})
                    for ci in split if one_channel else [None]:
                        for j in rows:
                            read = False
                            for t, rr, kk in spans:
                                ch = reads[t] if ci is None else (ci, ci + 1)
                                if rr[0] <= j < rr[1] and reads[t][0] <= ch[0] < reads[t][1]:
                                    self.read(t, (j, j + 1), ch, kk)
                                    cover[t].mark((j, j + 1), ch, kk)
                                    read = True
                            if read:
                                part = None if ci is None else (ci, ci + 1)
                                self.actions.append(
                                    Compute(
                                        v, (r, r + 1), chans, part, out_cols, in_rows=(j, j + 1)
                                    )
                                )
                    self.finish_block((r, r + 1), chans, (k, k + 1))
                if r == self.h_out - 1:  # the channel's pass reads what no window reached
                    self.fill(cover)
                self.close((r, r + 1))


def _fed_rows(graph: OpGraph, v: int, i: int, rows: Range) -> dict[int, Range]:
    """Input row -> the output rows among ``rows`` whose window reads it (input ``i``)."""
    fed: dict[int, Range] = {}
    for r in range(*rows):
        for j in range(*input_rows(graph, v, i, (r, r + 1))):
            lo, _ = fed.get(j, (r, r))
            fed[j] = (lo, r + 1)
    return fed


def _pair_weights(graph: OpGraph, v: int, weights: int) -> int:
    """Weights one (output, input) channel pair stages: a conv's kernel, else the share of
    one pair (a bias is not staged per input channel)."""
    node = graph.nodes[v]
    if node.kind == "conv":
        return node.kernel[0] * node.kernel[1]
    c_out = max(graph.out_shape(v)[0], 1)
    c_in = graph.tensors[node.inputs[0]].shape[0] if node.inputs else 1
    return max(1, weights // max(c_out * c_in, 1))


def _region(graph: OpGraph, t: int, n: int) -> Region:
    """A region of ``n`` elements of tensor ``t``, shaped in rows of the tensor where it can."""
    c, _, w = graph.tensors[t].shape
    if n % (c * w) == 0:
        return Region("tensor", t, n // (c * w), c, w, n)
    if n % w == 0:
        return Region("tensor", t, 1, n // w, w, n)
    return Region("tensor", t, 1, 1, n, n)


Block = tuple[int, Range, Range, Range]  # tensor, rows, channels, columns


def _blocks_of(graph: OpGraph, a: Action) -> tuple[list[Block], list[Block], bool]:
    """What action ``a`` reads and what it stores, and whether it accumulates (a partial
    pass keeps its outputs as running sums)."""
    tensors = graph.tensors
    if isinstance(a, Transfer):
        if a.is_weights:
            return [], [], False
        block = (a.tensor, a.rows, a.channels, a.cols or (0, tensors[a.tensor].shape[2]))
        return ([], [block], False) if a.direction == "read" else ([block], [], False)
    node = graph.nodes[a.op]
    reduces = reduces_over_inputs(graph, a.op)
    reads: list[Block] = []
    for i, t in enumerate(node.inputs):
        ch = input_channels(graph, a.op, i, a.channels)
        if a.in_channels is not None and reduces:
            ch = (max(ch[0], a.in_channels[0]), min(ch[1], a.in_channels[1]))
        rows = input_rows(graph, a.op, i, a.rows)
        if a.in_rows is not None:
            rows = (max(rows[0], a.in_rows[0]), min(rows[1], a.in_rows[1]))
        if ch[0] < ch[1] and rows[0] < rows[1]:
            reads.append((t, rows, ch, input_cols(graph, a.op, i, a.cols)))
    defines: list[Block] = []
    offset = 0
    for t in node.outputs:
        c, _, w = tensors[t].shape
        lo, hi = max(a.channels[0] - offset, 0), min(a.channels[1] - offset, c)
        if lo < hi:
            defines.append((t, a.rows, (lo, hi), a.cols or (0, w)))
        offset += c
    accumulates = a.in_rows is not None or (a.in_channels is not None and reduces)
    return reads, defines, accumulates


def _live_peaks(
    graph: OpGraph, steps: list[Step], host: dict[int, int] | None = None
) -> dict[int, int]:
    """The most elements each region holds at once (``host`` maps a tensor written in place
    to the tensor whose region it shares), a value being stored from the action that reads
    or computes it until its last read (a running sum until its last pass)."""
    host = host or {}
    actions = [a for s in steps for a in s.actions]
    found = [_blocks_of(graph, a) for a in actions]
    cuts: dict[int, tuple[set[int], set[int]]] = {}
    for reads, defines, _ in found:
        for t, _, ch, cols in reads + defines:
            c, _, w = graph.tensors[t].shape
            chans, widths = cuts.setdefault(t, ({0, c}, {0, w}))
            chans.update(ch)
            widths.update(cols)
    seg = {t: (sorted(c), sorted(k)) for t, (c, k) in cuts.items()}
    at = {
        t: ({x: i for i, x in enumerate(c)}, {x: i for i, x in enumerate(k)})
        for t, (c, k) in seg.items()
    }

    def cells(block: Block) -> list[tuple[int, int, int, int]]:
        t, rows, ch, cols = block
        cs, ks = at[t]
        ci = range(cs[ch[0]], cs[ch[1]])
        ki = range(ks[cols[0]], ks[cols[1]])
        return [(t, r, c, k) for r in range(*rows) for c in ci for k in ki]

    def size(cell: tuple[int, int, int, int]) -> int:
        cs, ks = seg[cell[0]]
        return (cs[cell[2] + 1] - cs[cell[2]]) * (ks[cell[3] + 1] - ks[cell[3]])

    used = [[c for b in reads for c in cells(b)] for reads, _, _ in found]
    made = [[c for b in defines for c in cells(b)] for _, defines, _ in found]
    dying: list[list[tuple[int, int, int, int]]] = [[] for _ in actions]
    live: set[tuple[int, int, int, int]] = set()
    for idx in range(len(actions) - 1, -1, -1):
        acc = found[idx][2]
        dying[idx].extend(c for c in dict.fromkeys(made[idx]) if c not in live)
        if not acc:
            live.difference_update(made[idx])
        for c in used[idx] + (made[idx] if acc else []):
            if c not in live:
                if c not in dying[idx]:
                    dying[idx].append(c)
                live.add(c)
    held: dict[int, int] = {}
    peak: dict[int, int] = {}
    resident: set[tuple[int, int, int, int]] = set()
    for idx, a in enumerate(actions):
        if isinstance(a, Compute):  # an op in place over an input frees its dying cells first
            outs = {host.get(t, t) for t in graph.nodes[a.op].outputs}
            for c in dying[idx]:
                if (
                    c in resident
                    and c[0] in graph.nodes[a.op].inputs
                    and host.get(c[0], c[0]) in outs
                ):
                    resident.discard(c)
                    held[host.get(c[0], c[0])] -= size(c)
        for c in made[idx]:
            if c not in resident:
                r = host.get(c[0], c[0])
                resident.add(c)
                held[r] = held.get(r, 0) + size(c)
                peak[r] = max(peak.get(r, 0), held[r])
        for c in dying[idx]:
            if c in resident:
                resident.discard(c)
                held[host.get(c[0], c[0])] -= size(c)
    return peak


class _Epilogue:
    """The epilogue ops of a layer, run on each output block of its core as soon as the
    cells they read are complete (module docstring)."""

    def __init__(self, layer: _Layer, ops: Group) -> None:
        self.layer = layer
        graph, group = layer.graph, layer.group
        self.graph, self.ops = graph, bits(ops)
        tensors, readers = graph.tensors, graph.consumer_mask
        made = [t for v in (layer.v, *self.ops) for t in graph.nodes[v].outputs]
        self.done = {t: np.zeros(tensors[t].shape, dtype=bool) for t in made}
        outs = graph.graph_output_set
        self.writes = {t for t in made if t in outs or readers[t] & ~group}
        self.fetched: dict[int, np.ndarray] = {}  # external input -> cells read
        self.host: dict[int, int] = {}  # tensor written in place -> the tensor it overwrites
        self.in_place: Group = 0
        for e in self.ops:
            for t in in_place_inputs(graph, e):
                p = tensors[t].producer
                if p >= 0 and group >> p & 1 and readers[t] & group == 1 << e:
                    self.host[graph.nodes[e].outputs[0]] = self.host.get(t, t)
                    self.in_place |= 1 << e
                    break
        self.resident = sum(1 << e for e in self.ops if layer.cm.node_weights[e])

    def block(self, rows: Range, chans: Range, cols: Range) -> None:
        """The core's output block is complete: write it where it leaves the group and
        run every epilogue op it completes the inputs of."""
        offset = 0
        for t in self.graph.nodes[self.layer.v].outputs:
            c = self.graph.tensors[t].shape[0]
            ch = (max(chans[0] - offset, 0), min(chans[1] - offset, c))
            if ch[0] < ch[1]:
                self.made(t, rows, ch, cols)
            offset += c

    def made(self, t: int, rows: Range, ch: Range, cols: Range) -> None:
        (c0, c1), (r0, r1), (k0, k1) = ch, rows, cols
        self.done[t][c0:c1, r0:r1, k0:k1] = True
        if t in self.writes:
            w = self.graph.tensors[t].shape[2]
            n = (r1 - r0) * (c1 - c0) * (k1 - k0)
            self.layer.actions.append(
                Transfer("write", t, -1, rows, ch, n, None if cols == (0, w) else cols)
            )
        for e in self.ops:
            node = self.graph.nodes[e]
            if t in node.inputs:
                self.run(e, node.inputs.index(t), rows, ch, cols)

    def run(self, e: int, i: int, rows: Range, ch: Range, cols: Range) -> None:
        """Compute every cell of epilogue op ``e`` whose inputs are now complete, among those
        reading the new block ``rows`` x ``ch`` x ``cols`` of its ``i``-th input."""
        graph = self.graph
        node = graph.nodes[e]
        out = node.outputs[0]
        _, h, w = graph.tensors[out].shape
        touched_r = [r for r in range(h) if _meets(input_rows(graph, e, i, (r, r + 1)), rows)]
        touched_k = [k for k in range(w) if _meets(input_cols(graph, e, i, (k, k + 1)), cols)]
        ready = np.zeros((h, w), dtype=bool)
        for r in touched_r:
            for k in touched_k:
                ready[r, k] = not self.done[out][ch[0] : ch[1], r, k].any() and all(
                    self.done[u][
                        slice(*input_channels(graph, e, j, ch)), slice(*rr), slice(*kk)
                    ].all()
                    for j, u in enumerate(node.inputs)
                    if u in self.done
                    for rr, kk in [
                        (input_rows(graph, e, j, (r, r + 1)), input_cols(graph, e, j, (k, k + 1)))
                    ]
                )
        r = 0
        while r < h:
            runs = list(_runs(list(~ready[r])))
            if not runs:
                r += 1
                continue
            end = r + 1
            while end < h and list(_runs(list(~ready[end]))) == runs:
                end += 1
            for kk in runs:
                self.compute(e, (r, end), ch, kk)
            r = end

    def compute(self, e: int, rows: Range, ch: Range, cols: Range) -> None:
        graph, layer = self.graph, self.layer
        node = graph.nodes[e]
        w_out = graph.tensors[node.outputs[0]].shape[2]
        out_cols = None if cols == (0, w_out) else cols
        for j, u in enumerate(node.inputs):
            if u in self.done:
                continue
            seen = self.fetched.setdefault(u, np.zeros(graph.tensors[u].shape, dtype=bool))
            rr = input_rows(graph, e, j, rows)
            kk = input_cols(graph, e, j, out_cols)
            cc = input_channels(graph, e, j, ch)
            for r in range(*rr):
                todo = ~seen[cc[0] : cc[1], r, kk[0] : kk[1]].all(axis=0)
                for a, b in _runs(list(~todo)):
                    layer.read(u, (r, r + 1), cc, (kk[0] + a, kk[0] + b))
                seen[cc[0] : cc[1], r, kk[0] : kk[1]] = True
        layer.actions.append(Compute(e, rows, ch, cols=out_cols))
        self.made(node.outputs[0], rows, ch, cols)

    def load_weights(self) -> None:
        """Read the resident epilogue weights at the start (they are read once)."""
        cm, layer = self.layer.cm, self.layer
        loads = tuple(
            Transfer(
                "read", -1, e, (0, 0), (0, max(self.graph.out_shape(e)[0], 1)), cm.node_weights[e]
            )
            for e in bits(self.resident)
        )
        if loads:
            first = layer.steps[0]
            layer.steps[0] = first._replace(actions=loads + first.actions)

    def regions(self, regions: list[Region]) -> list[Region]:
        """The epilogue's weights regions, and the tensors written in place named as their
        host region's aliases."""
        weights = self.layer.cm.node_weights
        out = [Region("weights", e, 0, 0, 0, weights[e]) for e in bits(self.resident)]
        for r in regions:
            if r.kind == "tensor":
                guests = tuple(t for t, h in sorted(self.host.items()) if h == r.key)
                r = r._replace(aliases=guests)
            out.append(r)
        return out


def _meets(a: Range, b: Range) -> bool:
    return a[0] < b[1] and b[0] < a[1]

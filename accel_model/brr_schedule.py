"""The BRR schedule the cost model priced, written out step by step (docs/cost-model.md,
"Schedules and replay").

From :meth:`BRR.terms` (tile height, parity, resident or streamed weights), the rows each
op keeps for a tile (``BRR._rows``), its sliced ops and its in-place ops, the builder lays
out:

* **regions**: per stored op its kept rows x kept channels (a slice of ``pe_unroll``
  channels when sliced; an op written in place shares its producer's region); per external
  input the rows its readers need x all its channels, or one channel slice when every
  reader takes it slice by slice; per op with weights a weights region when they are
  resident;
* **steps**: one per sink row (resident weights) or per tile of ``h_tile`` sink rows
  (streamed). A step brings every sink to its share of the rows (the tallest sink ``h``
  more rows, a shorter one proportionally); every other op to the rows its in-group
  consumers read by then. An op that keeps all its channels computes only its new rows
  (rows carry over, a rolling window); a sliced op recomputes, channel slice by channel
  slice, every row its consumers read in this step;
* **slice loops**: a sliced op, the sliced ops it feeds, the external inputs held as a
  slice, and their readers run one channel slice at a time; a reader that keeps all its
  channels accumulates over the slices (a mixing op's partial sums, a barrier assembling
  its input) or, for a concat, fills the slice's part of its output;
* **transfers**: each external input row is read once (all channels, or once per slice),
  each output row written once after it is complete, each op's weights read in the first
  step (resident) or in every step that runs the op (streamed). The last step reads what
  no window reached and finishes every output, as the io term counts whole tensors.
"""

from __future__ import annotations

import math

from accel_model.brr import BRR, SliceLoops, SlicePass, external_readers
from accel_model.schedule import (
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
from accel_model.windows import concat_offset, input_rows
from fusionplan.ir.graph import Group, bits


@SCHEDULE_BUILDERS.register("brr")
def brr_schedule(cm: BRR, group: Group) -> Schedule:
    """The schedule :class:`BRR` priced for ``group`` (module docstring)."""
    return _Builder(cm, group).build()


class _Builder:
    def __init__(self, cm: BRR, group: Group) -> None:
        self.cm, self.group = cm, group
        self.graph = graph = cm.graph
        self.nodes = bits(group)
        nodes = graph.nodes
        tt = cm.terms(group)
        if cm.b * tt.footprint >= cm.beta:
            raise ScheduleError("the group does not fit: it runs layer by layer")
        self.tt = tt
        self.h = tt.last_height if tt.resident else tt.h_tile
        self.per_step = 1 if tt.resident else self.h
        self.sliced, self.again = cm.slicing(group, tt.parity, self.nodes)
        # the rows of each op and external input a tile holds: what f(h) priced
        self.rows, self.ext_rows = cm.tile_rows(group, self.per_step, tt.parity)
        self.in_group = lambda v: v >= 0 and group >> v & 1
        self.consumers = {v: [c for c in bits(graph.succ_mask[v] & group)] for v in self.nodes}
        self.sinks = [v for v in self.nodes if not self.consumers[v]]
        readers = graph.consumer_mask
        outs = graph.graph_output_set
        self.outputs = {
            t for v in self.nodes for t in nodes[v].outputs if t in outs or readers[t] & ~group
        }
        self.external = external_readers(graph, group)  # tensor -> (reader, input index)
        self.in_place = self._in_place()
        self.whole_ext = cm.whole_inputs(group, self.sliced, self.again, self.external)

    # -- what the cost model decided --------------------------------------------------
    def _in_place(self) -> dict[int, int]:
        """op -> the input tensor it overwrites (the cost model's in-place rule: a sliced op
        only over a sliced producer)."""
        cm, group, sliced = self.cm, self.group, self.sliced
        out = {}
        for v in self.nodes:
            if not cm._stored[v]:
                continue
            for ti, p in cm._in_place[v]:
                alone = self.in_group(p) and cm._tensor_readers[ti] & group == 1 << v
                if alone and (not (cm._physical and sliced >> v & 1) or sliced >> p & 1):
                    out[v] = ti
                    break
        return out

    # -- regions ----------------------------------------------------------------------
    def regions(self) -> tuple[Region, ...]:
        cm, graph = self.cm, self.graph
        tensors = graph.tensors
        out: list[Region] = []
        if self.tt.resident:
            out += [
                Region("weights", v, 0, 0, 0, cm.node_weights[v])
                for v in self.nodes
                if cm.node_weights[v]
            ]
        for t in sorted(self.external, key=lambda t: (self.external[t][0][0], t)):
            c, _, w = tensors[t].shape
            rows = self.ext_rows[t]
            pe = cm.accel.pe_unroll
            if self.whole_ext[t]:
                channels = c
            elif "unbuffered-inputs" in cm.accel.conventions:
                channels = 0
            else:
                channels = min(pe, c)
            out.append(Region("tensor", t, rows, channels, w, rows * channels * w))
        host: dict[int, int] = {}  # tensor -> index of the region holding it
        aliases: dict[int, list[int]] = {}
        for v in self.nodes:
            if v in self.in_place:
                ri = host[self.in_place[v]]
                aliases.setdefault(ri, []).extend(graph.nodes[v].outputs)
                for t in graph.nodes[v].outputs:
                    host[t] = ri
                continue
            for t in graph.nodes[v].outputs:
                c, _, w = tensors[t].shape
                if not cm._stored[v]:
                    c = 0
                elif self.sliced >> v & 1:
                    c = min(c, cm._slice[v])
                rows = self.rows[v]
                host[t] = len(out)
                out.append(Region("tensor", t, rows, c, w, rows * c * w))
        return tuple(
            r._replace(aliases=tuple(aliases[i])) if i in aliases else r for i, r in enumerate(out)
        )

    # -- steps ------------------------------------------------------------------------
    def progress(self, step: int, last: bool) -> dict[int, int]:
        """Rows each op has computed by the end of ``step`` (a prefix of its output): its
        share of the step's sink rows (proportional to its height; a sliced op none, it
        recomputes what it is asked for), or more where a consumer's window reads ahead."""
        graph, tensors = self.graph, self.graph.tensors
        height = self.tt.last_height
        x = min((step + 1) * self.per_step, height)
        done: dict[int, int] = {}
        for v in reversed(self.nodes):
            h_v = graph.out_shape(v)[1]
            own = min(h_v, -(-x * h_v // height))
            e = 0 if self.sliced >> v & 1 and self.consumers[v] else own
            for c in self.consumers[v]:
                if done[c] > 0:
                    for i, t in enumerate(graph.nodes[c].inputs):
                        if tensors[t].producer == v:
                            e = max(e, input_rows(graph, c, i, (0, done[c]))[1])
            done[v] = e
            if last and any(t in self.outputs for t in graph.nodes[v].outputs):
                done[v] = h_v
        return done

    def ranges(self, before: dict[int, int], after: dict[int, int]) -> dict[int, Range]:
        """Output rows each op computes in a step: its new rows, or for a sliced op every
        row its consumers read in the step."""
        graph, tensors = self.graph, self.graph.tensors
        out: dict[int, Range] = {}
        for v in reversed(self.nodes):
            lo, hi = before[v], after[v]
            if self.sliced >> v & 1:
                for c in self.consumers[v]:
                    a, b = out[c]
                    if a < b:
                        for i, t in enumerate(graph.nodes[c].inputs):
                            if tensors[t].producer == v:
                                r = input_rows(graph, c, i, (a, b))
                                if r[0] < r[1]:
                                    lo = min(lo, r[0])
            out[v] = (lo, hi) if lo < hi else (hi, hi)
        return out

    def build(self) -> Schedule:
        cm = self.cm
        loops = SliceLoops(self.cm, self.group, self.sliced, self.external, self.whole_ext)
        writer = _StepWriter(self, loops.loops())
        n_steps = math.ceil(self.tt.last_height / self.per_step)
        before = dict.fromkeys(self.nodes, 0)
        steps: list[Step] = []
        for s in range(n_steps):
            last = s == n_steps - 1
            after = self.progress(s, last)
            actions = writer.step(self.ranges(before, after), last)
            steps.append(Step(s, self._sink_rows(s), actions))
            before = after
        return Schedule(
            group=self.group,
            scheme=cm.name,
            order="brr-resident" if self.tt.resident else "brr-streamed",
            bytes_per_element=cm.b,
            buffer_bytes=cm.beta,
            parity=self.tt.parity,
            sliced=self.sliced,
            pe_unroll=cm.accel.pe_unroll,
            h_tile=self.h,
            tiles=self._tiles(),
            weights_resident=self.tt.resident,
            in_place=sum(1 << v for v in self.in_place),
            regions=self.regions(),
            steps=tuple(steps),
            dram=traffic(steps),
        )

    def _concat_part(self, v: int, i: int) -> Range:
        off = concat_offset(self.graph, v, i)
        c = self.graph.tensors[self.graph.nodes[v].inputs[i]].shape[0]
        return (off, off + c)

    def _sink_rows(self, s: int) -> Range:
        height = self.tt.last_height
        return (s * self.per_step, min((s + 1) * self.per_step, height))

    def _tiles(self) -> tuple[Range, ...]:
        height = self.tt.last_height
        return tuple((a, min(a + self.h, height)) for a in range(0, height, self.h))


class _StepWriter:
    """Writes the actions of one step after another, remembering what earlier steps read,
    wrote and streamed: external rows are read once, output rows written once.

    Within a step the work is pulled from the sinks one row at a time: an op that keeps all
    its channels computes one row when a consumer's window first reaches it, its inputs
    read or pulled just before, so only the rows a window spans are held at once. A slice
    loop runs whole when first reached: every slice over every row its readers need."""

    def __init__(self, b: _Builder, loops: list[SlicePass]) -> None:
        self.b = b
        self.graph = b.graph
        self.loops = loops
        self.loop_of: dict[int, list[SlicePass]] = {}
        for lp in loops:
            for v in (lp.ops - lp.recompute) | lp.partial | set(lp.concat):
                self.loop_of.setdefault(v, []).append(lp)
        self.loaded = dict.fromkeys(b.external, 0)  # rows of each external input read so far
        self.written = dict.fromkeys(b.nodes, 0)  # rows of each sliced op written so far
        self.weights_read: set[int] = set()
        self.acts: list[Action] = []
        self.step_weights: set[int] = set()
        self.rng: dict[int, Range] = {}
        self.done: dict[int, int] = {}  # next row each op computes in this step
        self.ran: dict[int, bool] = {}  # loop (by id) -> run (True) or running (False)
        self.sweeping: dict[int, set[int]] = {}  # slice-held input -> passes that read it
        self.spent: dict[int, set[int]] = {}  # op -> passes that computed it in this step

    def step(self, rng: dict[int, Range], last: bool) -> tuple[Action, ...]:
        b = self.b
        self.acts, self.step_weights, self.rng, self.ran = [], set(), rng, {}
        self.sweeping, self.spent = {}, {}
        self.done = {v: a for v, (a, _) in rng.items()}
        if not b.tt.resident:  # a tile streams every op's weights, as F_D charges
            for v in b.nodes:
                self.weights(v)
        longest = max(rng[v][1] - rng[v][0] for v in b.sinks)
        for k in range(longest):
            for v in b.sinks:
                if rng[v][0] + k < rng[v][1]:
                    self.pull(v, rng[v][0] + k + 1)
        for v in b.nodes:  # rows no sink reached: a group output's tail
            self.pull(v, rng[v][1])
        if last:  # io moves whole tensors: read what no window reached, a row at a time
            pe = b.cm.accel.pe_unroll
            for t in sorted(b.external):
                c, h, _ = self.graph.tensors[t].shape
                step = c if b.whole_ext[t] else pe
                for j in range(0, c, step):
                    self.load(t, (j, min(j + step, c)), h, h)
                self.loaded[t] = h
        return tuple(self.acts)

    # -- transfers --------------------------------------------------------------------
    def weights(self, v: int, again: bool = False) -> None:
        """Read op ``v``'s weights: once for the group when resident, else once per step,
        and again for a pass that recomputes ``v`` (streamed weights are not kept)."""
        cm = self.b.cm
        w = cm.node_weights[v]
        if not w or (self.b.tt.resident and v in self.weights_read):
            return
        if v in self.step_weights and not (again and not self.b.tt.resident):
            return
        self.weights_read.add(v)
        self.step_weights.add(v)
        self.acts.append(Transfer("read", -1, v, (0, 0), (0, self.graph.out_shape(v)[0]), w))

    def load(self, t: int, channels: Range, upto: int, lo: int | None = None) -> None:
        """Read rows of ``t`` below ``upto`` not read yet (once per slice for a slice-held
        input): rows below ``lo``, which no window reads, one at a time so each leaves at
        once."""
        width = self.graph.tensors[t].shape[2]
        first = self.loaded[t]
        lo = first if lo is None else max(lo, first)
        n = (channels[1] - channels[0]) * width
        for r in range(first, min(lo, upto)):
            self.acts.append(Transfer("read", t, -1, (r, r + 1), channels, n))
        if lo < upto:
            self.acts.append(Transfer("read", t, -1, (lo, upto), channels, n * (upto - lo)))

    def read_input(self, v: int, i: int, rows: Range) -> None:
        """Make the rows ``rows`` of op ``v``'s ``i``-th input available: pull them from
        their in-group producer, or read a whole-held external input's new rows."""
        t = self.graph.nodes[v].inputs[i]
        lo, hi = input_rows(self.graph, v, i, rows)
        if lo >= hi:
            return
        p = self.graph.tensors[t].producer
        if self.b.in_group(p):
            self.pull(p, hi)
        elif self.b.whole_ext[t]:
            self.load(t, (0, self.graph.tensors[t].shape[0]), hi, lo)
            self.loaded[t] = max(self.loaded[t], hi)

    def write(self, v: int, rows: Range, channels: Range) -> None:
        offset = 0
        for t in self.graph.nodes[v].outputs:
            c, _, w = self.graph.tensors[t].shape
            lo, hi = max(channels[0] - offset, 0), min(channels[1] - offset, c)
            offset += c
            if t in self.b.outputs and lo < hi and rows[0] < rows[1]:
                n = (rows[1] - rows[0]) * (hi - lo) * w
                self.acts.append(Transfer("write", t, -1, rows, (lo, hi), n))

    # -- work -------------------------------------------------------------------------
    def pull(self, v: int, upto: int) -> None:
        """Have op ``v`` computed its rows below ``upto`` (within this step's range)."""
        loops = self.loop_of.get(v, ())
        for lp in loops:
            self.run_loop(lp, v, upto)
        if any(v in lp.ops or v in lp.partial for lp in loops):
            return  # its loop computed every row of this step
        graph = self.graph
        filled = {i for lp in loops for i in lp.concat.get(v, ())}  # concat inputs of loops
        parts = [i for i in range(len(graph.nodes[v].inputs)) if i not in filled]
        if not parts:
            return
        if filled:
            chans = [self.b._concat_part(v, i) for i in parts]
        else:
            chans = [(0, graph.out_shape(v)[0])]
        end = min(upto, self.rng[v][1])
        while self.done[v] < end:
            r = self.done[v]
            self.done[v] = r + 1
            for i in parts:
                self.read_input(v, i, (r, r + 1))
            self.weights(v)
            for ch in chans:
                self.acts.append(Compute(v, (r, r + 1), ch))
                self.write(v, (r, r + 1), ch)

    def run_loop(self, lp: SlicePass, v: int = -1, upto: int = 0) -> None:
        """A slice loop pass: each channel slice through every member, then its readers.
        A pass of sliced ops runs its whole range at once (a sliced op recomputes what its
        readers need in the step); a pass of whole ops reading a slice-held input runs one
        row at a time, as far as op ``v``'s row ``upto`` (as those ops keep only the rows
        their windows span)."""
        state = self.ran.get(id(lp))
        if state is False:
            raise ScheduleError("a slice loop reads its own output")
        if state:
            return
        rng, done = self.rng, self.done
        members = sorted(lp.ops | lp.partial | set(lp.concat))
        active = [m for m in members if rng[m][0] < rng[m][1]]
        fresh = {m: max(self.written[m], rng[m][0]) for m in lp.ops}
        self.ran[id(lp)] = False
        if lp.ops & set(bits(self.b.sliced)):
            self._sweep(lp, {m: rng[m] for m in active}, fresh)
            for m in lp.ops | lp.partial:
                done[m] = rng[m][1]
            finished = True
        else:
            want = min(upto, rng[v][1]) if v >= 0 else 0
            while True:
                rows = {m: (done[m], done[m] + 1) for m in active if done[m] < rng[m][1]}
                if not rows or (v >= 0 and done[v] >= want):
                    break
                self._sweep(lp, rows, fresh)
                for m in rows:
                    done[m] += 1
            finished = not any(done[m] < rng[m][1] for m in active)
        for m in lp.ops:
            self.written[m] = max(self.written[m], done[m])
        if finished:
            self.ran[id(lp)] = True
        else:
            del self.ran[id(lp)]  # resumed when a reader needs more rows

    def _sweep(self, lp: SlicePass, rows: dict[int, Range], fresh: dict[int, int]) -> None:
        """One sweep over the channel slices computing ``rows`` of each active op."""
        graph = self.graph
        for v, r in rows.items():  # what the pass reads from outside it, first
            ins = graph.nodes[v].inputs
            for i in lp.concat.get(v, range(len(ins))):
                if graph.tensors[ins[i]].producer not in lp.ops:
                    self.read_input(v, i, r)
        for m in fresh:  # an earlier pass those reads ran has written these rows
            fresh[m] = max(fresh[m], self.written[m])
        # streamed weights serve one computation: each pass of a tile streams its ops'
        # weights again, as the closed form charges (BRR.recompute_traffic)
        for v in sorted(lp.ops | lp.partial):
            self.weights(v, again=bool(self.spent.get(v, set()) - {id(lp)}))
            self.spent.setdefault(v, set()).add(id(lp))
        # slice-held inputs another pass of this step read: their slices are gone
        earlier = {t for t, passes in self.sweeping.items() if passes - {id(lp)}}
        span: dict[int, Range] = {}
        for t in lp.tensors:
            lo, hi = graph.tensors[t].shape[1], 0
            for v, i in self.b.external[t]:
                if v in rows:
                    a, z = input_rows(graph, v, i, rows[v])
                    if a < z:
                        lo, hi = min(lo, a), max(hi, z)
            span[t] = (lo, hi)
        pe = self.b.cm.accel.pe_unroll
        for j in range(0, lp.channels, pe) if rows else ():
            sl = (j, min(j + pe, lp.channels))
            for t in sorted(lp.tensors):
                lo, hi = span[t]
                if t in earlier and lo < hi:  # an earlier pass of this step read these rows
                    n = (hi - lo) * (sl[1] - sl[0]) * graph.tensors[t].shape[2]
                    self.acts.append(Transfer("read", t, -1, (lo, hi), sl, n))
                elif lo < hi:
                    self.load(t, sl, hi, lo)
            for v, (a, z) in rows.items():
                if v in lp.ops:
                    self.acts.append(Compute(v, (a, z), sl))
                    self.write(v, (max(fresh[v], a), z), sl)
                elif v in lp.partial:
                    out = (0, graph.out_shape(v)[0])
                    self.acts.append(Compute(v, (a, z), out, in_channels=sl))
                else:
                    for i in lp.concat[v]:
                        off = self.b._concat_part(v, i)[0]
                        ch = (off + sl[0], off + sl[1])
                        self.acts.append(Compute(v, (a, z), ch))
                        self.write(v, (a, z), ch)
        for t in lp.tensors:
            self.loaded[t] = max(self.loaded[t], span[t][1])
            self.sweeping.setdefault(t, set()).add(id(lp))
        for v, r in rows.items():
            if v in lp.partial:
                self.write(v, r, (0, graph.out_shape(v)[0]))

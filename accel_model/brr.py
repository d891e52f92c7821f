"""BRR: buffer-requirement reduction, Optimus-style (docs/cost-model.md, "BRR").

Only feature rows must fit: the group is evaluated one output row band at a time, each node
keeping the rows its consumers need; weights that do not fit beside them are streamed from
DRAM once per output tile. Rows are back-propagated from the group's last nodes.

Channels are sliced as Optimus does: consecutive channel-mixing ops alternate between
keeping all their output channels and a slice of ``pe_unroll`` of them, channel-local ops
follow their producer, and both parities are tried (``accel_model/channels.py`` says which
op plays which role). Unary and elementwise ops overwrite their input's rows in place.
"""

from __future__ import annotations

import math

from accel_model.base import CostModel, GroupCost
from accel_model.channels import ChannelRole, channel_role, in_place_inputs, is_activation
from accel_model.optimus_pricing import OptimusPricing
from accel_model.registry import COST_MODELS
from accel_model.rows import input_rows, row_shift, row_window
from accel_model.schedule import ScheduleError
from accel_model.windows import concat_offset
from fusionplan.ir.graph import Group, ancestors_of, bits, descendants_of, mask_of

_MIXING, _LOCAL, _BARRIER = ChannelRole.MIXING, ChannelRole.LOCAL, ChannelRole.BARRIER
TILE_STEPS = (1, 2, 3, 4, 6, 8, 12, 16)
"""Tile counts ``k`` at which :meth:`BRR.weight_reads_floor` tests whether every group must
have more than ``k`` tiles (each test is one buffer floor)."""
NO_SLICES = 2
"""The parity under which every op keeps all its channels (the default profile weighs it
against the two slicing parities: slicing can cost rows, docs/cost-model.md, "Channel
slices")."""


class BRRTerms:
    """The intermediate quantities of one group, exposed for tests and reports.

    ``footprint``, ``row_step`` and ``weights`` are in elements; ``last_height`` is
    H_out(L) in rows; ``parity`` is the channel-slicing parity chosen (0: the first
    channel-mixing ops keep a slice, 1: the second ones, ``NO_SLICES``: no op keeps a slice;
    docs/cost-model.md, "BRR").
    ``resident``, ``h_tile``, ``tiles`` and ``peak`` depend on the buffer: weights are
    resident (``tiles`` 1, ``h_tile`` = H_out(L)) iff ``b*W + b*footprint < beta`` (strict,
    like every fit test: at equality they stream); else they are streamed once per tile of
    ``h_tile`` output rows. ``peak`` is the elements the priced schedule holds at once: the
    footprint and weights when resident, the footprint of a whole tile when streamed. A group
    whose footprint does not fit (invalid) has ``resident`` False, ``h_tile`` 0 and ``tiles``
    1 (run layer by layer, weights read once). ``rerun`` (weights streamed again per tile)
    and ``reread`` (elements of slice-held inputs read again) are what the later passes of
    a slice loop add (:meth:`BRR.recompute_traffic`).
    """

    __slots__ = (
        "footprint",
        "h_tile",
        "last_height",
        "parity",
        "peak",
        "reread",
        "rerun",
        "resident",
        "row_step",
        "tiles",
        "weights",
    )

    def __init__(self, footprint, row_step, last_height, weights, parity=0) -> None:
        self.footprint, self.row_step = footprint, row_step
        self.last_height, self.weights, self.parity = last_height, weights, parity
        self.tiles, self.resident, self.h_tile = 1, True, last_height
        self.peak = footprint + weights
        self.rerun = self.reread = 0  # a slice loop's later passes: BRR.recompute_traffic

    def tile(self, b: int, beta: int, lines: list[_Line] | None = None) -> BRRTerms:
        """Set ``resident``, ``h_tile``, ``tiles`` and ``peak`` for a ``beta``-byte buffer.

        ``lines`` give the footprint ``f(h)`` of a tile of ``h`` output rows, every row it
        reads included (docs/cost-model.md, "BRR"): the tallest tile that fits is taken.
        Without them the paper's and Optimus's tile rule applies, which grows a tile by
        ``row_step`` (the ops' rows only) and so can undercount its input rows.
        """
        if b * self.footprint >= beta:
            self.resident, self.h_tile = False, 0  # invalid: layer by layer, weights once
            self.peak = self.footprint
        elif b * (self.weights + self.footprint) >= beta:  # resident iff b*(W + fp) < beta
            self.resident = False
            if lines is None:
                self.h_tile = math.floor((beta - b * self.footprint) / (b * self.row_step)) + 1
                self.peak = self.footprint
            else:
                self.h_tile, self.peak = _tallest_tile(
                    lines, self.parity, self.last_height, (beta - 1) // b
                )
            self.tiles = math.ceil(self.last_height / self.h_tile)
        return self

    def dram_key(self, b: int, beta: int) -> tuple[bool, int, int]:
        """Orders the parities of one group: valid first, then fewer weight reads, then less
        buffer (io does not depend on the parity)."""
        return (b * self.footprint >= beta, self.tiles, self.footprint)


_PassMasks = tuple[Group, Group, Group, Group, list[int]]
"""One pass of a slice loop (:meth:`SliceLoops.pass_masks`): (its members, the members of
earlier passes it computes again, readers accumulating over it, concats its slices fill,
the slice-held inputs it reads)."""

_Line = tuple[int, int, int, int, int, int]
"""(op, or ~tensor for an external input; row elements under parity 0; under parity 1; rows
in a one-row tile; rows added per sink row; height)."""


def _tallest_tile(lines: list[_Line], parity: int, height: int, limit: int) -> tuple[int, int]:
    """(h, f(h)) for the tallest tile of ``h <= height`` sink rows whose footprint under
    ``parity`` is at most ``limit`` elements (one sink row fits; ``NO_SLICES`` reads the
    parity-0 row sizes of lines collected with no op sliced). Each line's rows grow by
    its whole-row scale per sink row until they reach its tensor's height (``_rows``), so
    ``f`` is piecewise linear and non-decreasing: its pieces are walked in the order the
    lines reach their heights and each is solved in closed form, one pass over the lines
    instead of probing ``f`` (docs/cost-model.md, "BRR")."""
    base = slope = 0  # on the current piece, f(x + 1) = base + slope * x
    caps: list[tuple[int, int, int]] = []  # (x where a line reaches its height, its changes)
    for line in lines:
        a = line[2] if parity == 1 else line[1]
        if not a:
            continue
        r, g, cap = line[3], line[4], line[5]
        if r >= cap:
            base += a * cap
            continue
        base += a * r
        if g:
            slope += a * g
            caps.append((-((r - cap) // g), a * (cap - r), a * g))
    caps.sort()
    last = height - 1
    caps.append((last + 1, 0, 0))
    x, fits = 0, base  # the piece's first x; f(x) of the last x known to fit
    for t, d_base, d_slope in caps:
        end = t - 1 if t <= last else last
        if end >= x:
            if slope:  # the last x of the piece within the limit (below x: none)
                y = (limit - base) // slope
            elif base <= limit:
                y = end
            else:
                y = x - 1
            if y < end:
                return (y + 1, base + slope * y) if y >= x else (x, fits)
            fits = base + slope * end
            if end == last:
                return height, fits
        base += d_base
        slope -= d_slope
        x = t
    raise AssertionError("the last piece ends at the height")


@COST_MODELS.register("brr")
class BRR(CostModel):
    name = "brr"
    shape_costs = True  # every default-profile term reads shapes and in-group edges
    work_per_op = 3  # rows, slices and footprints under two parities: ~3x LBDF per op

    def __init__(self, graph, accel) -> None:
        super().__init__(graph, accel)
        t = graph.tensors
        conventions = accel.conventions
        n = len(graph)
        pe = accel.pe_unroll
        # the row-count induction needs every kept row count >= 1, i.e. no empty tensor
        self._heights_positive = all(x.shape[1] >= 1 for x in t)
        self._window = tuple(row_window(graph, v, self.physical_rows) for v in range(n))
        # where each op's window of its output row 0 starts (the union rule; not in the
        # paper's and Optimus's profiles, whose readers' windows all start together)
        self._shift = tuple(row_shift(graph, v) if self.physical_rows else 0.0 for v in range(n))
        # per op: its consumers, each with its window (K, S, shift)
        self._reader_windows = tuple(
            tuple((c, *self._window[c], self._shift[c]) for c in bits(m)) for m in graph.succ_mask
        )
        self._role = tuple(channel_role(graph, v) for v in range(n))
        # channels op v keeps when it holds a slice (all of them when slicing is off)
        self._slice = tuple(
            min(pe, c) if pe and role != _BARRIER else c
            for (c, _, _), role in zip(self._out_shape, self._role, strict=True)
        )
        self._partial = bool(pe) and any(
            s < c for s, (c, _, _) in zip(self._slice, self._out_shape, strict=True)
        )
        activations = [is_activation(graph, v) for v in range(n)]
        local_ops = {v for v in range(n) if self._role[v] == _LOCAL} | {
            v for v, node in enumerate(graph.nodes) if node.kind == "concat"
        }
        self._stored = tuple(
            not (
                ("free-activations" in conventions and activations[v])
                or ("free-local-outputs" in conventions and v in local_ops and not activations[v])
            )
            for v in range(n)
        )
        # Optimus buffers a group's input only for a channel-slicing conv that reads it
        unbuffered = "unbuffered-inputs" in conventions
        self._barrier_reads_whole = not unbuffered
        # the default BRR prices tiles that hold every row they read; the paper's and
        # Optimus's conventions keep their tools' tile rule (docs/cost-model.md, "BRR")
        self._physical = self.physical_rows
        # a reader whose windows overlap (K > S) keeps all channels of an external input:
        # cycling through input-channel slices would drop the other slices' overlap rows
        self._overlap_whole = tuple(self._physical and k > s + 1e-9 for k, s in self._window)
        self._overlapping = sum(1 << v for v, whole in enumerate(self._overlap_whole) if whole)
        # per op: (input tensor, its producer) it may overwrite in place
        self._in_place = tuple(
            tuple((ti, t[ti].producer) for ti in in_place_inputs(graph, v))
            if accel.in_place
            else ()
            for v in range(n)
        )
        self._tensor_readers = graph.consumer_mask
        self._producers = tuple(tuple(bits(m)) for m in graph.pred_mask)
        self._tensor_size = tuple(x.size for x in t)
        self._local_ops = sum(1 << v for v in range(n) if self._role[v] == _LOCAL)
        self._mixing_ops = sum(1 << v for v in range(n) if self._role[v] == _MIXING)
        # readers that need all channels of an external input: barriers (unless Optimus's
        # unbuffered inputs) and overlapping windows (whole_inputs)
        barriers = sum(1 << v for v in range(n) if self._role[v] == _BARRIER)
        self._reads_whole = self._overlapping | (0 if unbuffered else barriers)
        # per tensor: ops that read it as two inputs; held whole anyway (one slice or less)
        self._reads_twice = tuple(
            sum(1 << v for v in bits(m) if graph.nodes[v].inputs.count(ti) > 1)
            for ti, m in enumerate(graph.consumer_mask)
        )
        self._whole_tensor = tuple(not pe or min(pe, x.shape[0]) >= x.shape[0] for x in t)
        # concats along channels, which a slice loop fills slice by slice (SliceLoops)
        self._tile_rows_memo: dict[int, tuple[int, ...]] = {}
        self._split_memo: dict[tuple[Group, Group], tuple[Group, ...]] = {}
        self._pass_memo: dict[tuple[Group, Group, Group, Group], list | str] = {}
        self._traffic_memo: dict[tuple[tuple[Group, ...], Group, Group, Group], tuple] = {}
        self._near_loops: dict[tuple[Group, ...], Group] = {}  # split -> its ops' _pass_reach
        # per op, what a slice loop holding it reads of the group (recompute_traffic): the
        # op, its producers, the ops below it and the other readers of its inputs
        self._pass_reach = tuple(
            (1 << v)
            | graph.pred_mask[v]
            | graph.descendant_mask[v]
            | mask_of(c for ti in node.inputs for c in bits(graph.consumer_mask[ti]))
            for v, node in enumerate(graph.nodes)
        )
        self._concat_fills = sum(
            1 << v
            for v, node in enumerate(graph.nodes)
            if node.kind == "concat" and concat_offset(graph, v, 0) is not None
        )
        # per op: its inputs as (tensor, producer, C*W, H, slice C*W)
        self._ext_in = tuple(
            tuple(
                (
                    ti,
                    t[ti].producer,
                    t[ti].shape[0] * t[ti].shape[2],
                    t[ti].shape[1],
                    0
                    if unbuffered
                    else (min(pe, t[ti].shape[0]) if pe else t[ti].shape[0]) * t[ti].shape[2],
                )
                for ti in node.inputs
            )
            for node in graph.nodes
        )
        # per op, what footprints reads of it: (C_out, W_out, H_out, stored, in-place
        # inputs, slice channels, reads external inputs whole, mixing, local, K, S, inputs)
        self._op_terms = tuple(
            (
                c,
                w,
                h,
                self._stored[v],
                self._in_place[v],
                self._slice[v],
                (self._role[v] == _BARRIER and not unbuffered) or self._overlap_whole[v],
                self._role[v] == _MIXING,
                self._role[v] == _LOCAL,
                *self._window[v],
                self._ext_in[v],
            )
            for v, (c, h, w) in enumerate(self._out_shape)
        )
        # buffer_floor counts the tensors a node set reads from outside (every op stored)
        self._reads_floor = self._physical and all(self._stored)
        self._fractional_reads = "fractional-weight-reads" in conventions
        # Optimus's networks have no activations: a group led by one is led by its conv
        self._local_mask = (
            sum(1 << v for v in local_ops if not activations[v])
            if "no-local-start" in conventions
            else 0
        )
        if "free-unfused-local" in conventions:
            self.free_alone = sum(1 << v for v in local_ops)
        if "free-activations" in conventions:
            self.free_alone |= sum(1 << v for v in range(n) if activations[v])
        # Optimus's own price of every group (docs/cost-model.md, "The optimus profile")
        self._optimus: OptimusPricing | None = None
        if "optimus-groups" in conventions:
            self._optimus = OptimusPricing(
                graph, accel, self.io_elements, lambda v: self.layer_tiling(v).dram
            )
            self.node_weights = self._optimus.weights()
            self.free_alone = self._optimus.free_alone()

    def monotone_over_downsets(self) -> bool:
        # proof in search/exact.py; slices, in-place ops and Optimus's conventions keep it
        # (docs/cost-model.md, "Channel slices")
        return self._heights_positive

    def _priced(self, group: Group) -> tuple[GroupCost, str, int]:
        if self._optimus is not None:
            return self._optimus.price(group)
        return super()._priced(group)

    def tool_energy(self) -> OptimusPricing | None:
        return self._optimus

    def buffer_floor(self, nodes: Group) -> int:
        if self._optimus is not None:
            return self.b * self._optimus.floor(nodes)
        # In any group G containing ``nodes`` every node keeps >= 1 row (heights >= 1), and a
        # node with consumers in ``nodes`` keeps >= the rows each needs for the rows it
        # keeps itself: by induction from the last ops (``_rows`` keeps the union of its
        # readers' windows, each non-decreasing in the reader's rows), G only adds readers
        # and rows. Each keeps at least its slice of channels, in its own region or, run in
        # place, in the region of the same-shape input it overwrites (one that no other op
        # of ``nodes`` counts unless that input's producer is in ``nodes``: then it counts
        # 0). An op that takes no buffer counts 0; its rows still reach its producers.
        # Under the default profile (every op stored) a tensor that ``nodes`` reads from
        # outside keeps the rows its readers there need, at least a slice of channels: as
        # an external input of G or in its producer's region (or the region its producer
        # overwrites), which no op of ``nodes`` counts unless it runs in place over it: an
        # op counted above may overwrite one input that it alone reads in ``nodes``, so the
        # largest such input of each is left out, and so is a tensor whose producer may
        # overwrite, through ops outside ``nodes``, a tensor made in ``nodes``.
        if not self.monotone_over_downsets():
            return 0
        return self._floor(nodes, None)

    def weight_reads_floor(self, nodes: Group, floor: int | None = None) -> tuple[int, int]:
        # Every valid group G holding ``nodes`` keeps its weights out when ``b*(W +
        # floor) >= beta`` (W(G) >= W(nodes), footprint >= buffer_floor), and then streams
        # them once per tile. A tile of ceil(H_L / k) sink rows (H_L the tallest sink's
        # height) keeps in each sink >= ceil(H_out / k) of its rows and in every other op
        # its in-group readers' windows of theirs, so by induction from the sinks each op
        # keeps >= ``_tile_rows(k)[v]``: the least of ceil(H_out / k) and the windows any
        # reader it may have needs; the floor's other terms carry over row for row. When
        # that floor reaches the buffer, the tallest tile is shorter than H_L / k and G has
        # >= k + 1 tiles. Only a group the scheme prices (not a layer's own loop order) is
        # charged per tile (docs/cost-model.md, "Chains").
        if not self._physical:
            return 1, 0  # the tools' profiles price weight reads by their own rules
        if not self.monotone_over_downsets() or not self.scheme_prices_every_group_holding(nodes):
            return 1, 0  # a layer's own loop order may keep the weights (``_priced``)
        b, beta = self.b, self.beta
        floors = 0
        if floor is None:
            floor, floors = self.buffer_floor(nodes), 1
        if b * self.weight_elements(nodes) + floor < beta:
            return 1, floors
        reads = 1
        for k in TILE_STEPS:
            floors += 1
            if self._floor(nodes, self._tile_rows(k)) < beta:
                break
            reads = k + 1
        return reads, floors

    def _tile_rows(self, k: int) -> tuple[int, ...]:
        """Per op, rows it keeps at least in a tile of ceil(H_L / k) sink rows of any group
        holding it: ceil(H_out / k) as a sink, else the window of the fewest rows any of
        its readers' tiles can need."""
        hit = self._tile_rows_memo.get(k)
        if hit is not None:
            return hit
        rows = [0] * len(self.graph)
        succ = self.graph.succ_mask
        for v in reversed(range(len(rows))):
            h_out = self._out_shape[v][1]
            need = -(-h_out // k)
            for c in bits(succ[v]):
                kc, sc = self._window[c]
                need = min(need, input_rows(kc, sc, rows[c], h_out))
            rows[v] = max(need, 1)
        hit = self._tile_rows_memo[k] = tuple(rows)
        return hit

    def _floor(self, nodes: Group, least: tuple[int, ...] | None) -> int:
        """:meth:`buffer_floor`'s sum with each op keeping at least ``least[v]`` rows (None:
        one row)."""
        succ, total = self.graph.succ_mask, 0
        rows: dict[int, int] = {}
        outside: dict[int, int] = {}  # tensor read from outside ``nodes`` -> what it keeps
        hosts: list[list[int]] = []  # per op counted, the inputs it may overwrite
        readers = self._tensor_readers
        for x in reversed(bits(nodes)):
            _, h_out, w_out = self._out_shape[x]
            need = 1 if least is None else least[x]
            for y in bits(succ[x] & nodes):
                k, s = self._window[y]
                need = max(need, input_rows(k, s, rows[y], h_out))
            rows[x] = need
            in_place = self._in_place[x]
            if self._stored[x] and not any(nodes >> p & 1 for _, p in in_place if p >= 0):
                total += self._slice[x] * need * w_out
                hosts.append([ti for ti, _ in in_place if readers[ti] & nodes == 1 << x])
            if self._reads_floor:
                k, s = self._window[x]
                for ti, p, _, h_in, slice_cw in self._ext_in[x]:
                    if p < 0 or not nodes >> p & 1:
                        held = input_rows(k, s, need, h_in) * slice_cw
                        if held > outside.get(ti, 0):
                            outside[ti] = held
        if outside:
            total += sum(held for ti, held in outside.items() if not self._joins(ti, nodes))
            total -= sum(max((outside[ti] for ti in h), default=0) for h in hosts)
        return self.b * total

    def _joins(self, ti: int, nodes: Group) -> bool:
        """Whether tensor ``ti``, made outside ``nodes``, may share a region with a tensor
        made in ``nodes``: its producer runs in place over an input that no op of ``nodes``
        reads (one it reads has another reader, so it is nobody's sole input), made in
        ``nodes`` or, in turn, by such a producer."""
        tensors, readers, in_place = self.graph.tensors, self._tensor_readers, self._in_place
        todo = [ti]
        while todo:
            p = tensors[todo.pop()].producer
            for t, q in in_place[p] if p >= 0 else ():
                if q >= 0 and not readers[t] & nodes:
                    if nodes >> q & 1:
                        return True
                    todo.append(t)
        return False

    def _rows(
        self, group: Group, nodes: list[int], sink_rows: int = 1
    ) -> tuple[dict[int, int], dict[int, float], int, dict[int, float]]:
        """Rows each op of ``nodes`` (the bits of ``group``) keeps, its row scale, H_out(L),
        and where its rows start (relative to the last ops' rows at 0): the backward pass
        (docs/cost-model.md, "BRR"). An op keeps the union of its readers' windows, each
        ``(h - 1) * S + K`` rows from ``top * S + shift`` (the readers' windows may start
        at other rows). The last ops keep ``sink_rows`` rows (1: the footprint; a tile's
        height: the rows per tile)."""
        readers_of, out_hw = self._reader_windows, self._out_shape
        ceil = math.ceil
        whole_scales = self._physical  # a tile's row counts grow by whole rows per sink row
        rows: dict[int, int] = {}
        scale: dict[int, float] = {}
        top: dict[int, float] = {}
        last_height = 1
        for v in reversed(nodes):
            h_out = out_hw[v][1]
            sc, sink = 0.0, True
            lo_min = hi_max = 0.0
            for c, k, s, d in readers_of[v]:
                if group >> c & 1:
                    lo = top[c] * s + d
                    hi = lo + (rows[c] - 1) * s + k
                    if sink or lo < lo_min:
                        lo_min = lo
                    if sink or hi > hi_max:
                        hi_max = hi
                    sink = False
                    x = scale[c] * s
                    if whole_scales and x % 1:
                        x = ceil(x)
                    if x > sc:
                        sc = x
            if sink:
                need, sc = min(sink_rows, h_out), 1.0
                if h_out > last_height:
                    last_height = h_out
            else:
                need = ceil(hi_max - lo_min - 1e-9)
                if need > h_out:
                    need = h_out
            rows[v], scale[v], top[v] = need, sc, lo_min
        return rows, scale, last_height, top

    def sliced_ops(self, group: Group, nodes: list[int] | None = None) -> tuple[Group, Group]:
        """The ops of ``group`` that keep a channel slice under parity 0 and parity 1: a
        mixing op whose in-group producers all keep every channel, at every other mixing
        depth; a local op with a sliced in-group producer (docs/cost-model.md, "Channel
        slices"). Decided producers first, so it depends only on a node's in-group
        ancestors."""
        role, producers, pred = self._role, self._producers, self.graph.pred_mask
        depth = [0] * len(role)  # an op outside the group stays at 0: no mixing depth
        even = odd = 0  # sliced under parity 0 (odd depths) and parity 1 (even depths)
        for v in bits(group) if nodes is None else nodes:
            d = 0
            for p in producers[v]:
                if depth[p] > d:
                    d = depth[p]
            r = role[v]
            if r == _MIXING:  # even and odd hold group ops only: no test of the group
                d += 1
                if d & 1:
                    if not pred[v] & even:
                        even |= 1 << v
                elif not pred[v] & odd:
                    odd |= 1 << v
            elif r == _LOCAL:
                if pred[v] & even:
                    even |= 1 << v
                if pred[v] & odd:
                    odd |= 1 << v
            depth[v] = d
        return even, odd

    def terms(self, group: Group) -> BRRTerms:
        """Footprint, row step and tiling of ``group`` under its best channel-slicing parity
        (elements, not bytes; see BRRTerms)."""
        nodes = bits(group)
        rows, scale, last_height, top = self._rows(group, nodes)
        node_weights = self.node_weights
        weights = sum(map(node_weights.__getitem__, nodes))
        b, beta = self.b, self.beta
        sliced = self.sliced_ops(group, nodes) if self._partial else (0, 0)
        if self._physical and self._partial:
            sliced = self.slice_rereaders(sliced, group)
        lines: list[_Line] | None = [] if self._physical else None
        excess = [False, False]
        (fp0, rs0), (fp1, rs1) = self.footprints(
            group, rows, scale, top, sliced, nodes, lines, excess
        )
        best = BRRTerms(fp0, rs0, last_height, weights, 0).tile(b, beta, lines)
        if self._partial:
            other = BRRTerms(fp1, rs1, last_height, weights, 1).tile(b, beta, lines)
            if other.dram_key(b, beta) < best.dram_key(b, beta):
                best = other
            # a parity that holds no more than NO_SLICES anywhere ranks no worse at every
            # tile height (each line's row size no larger, same rows): no need to price it
            if self._physical and (sliced[0] | sliced[1]) and excess[0] and excess[1]:
                whole = self._unsliced_terms(group, rows, scale, top, nodes, last_height, weights)
                if whole.dram_key(b, beta) < best.dram_key(b, beta):
                    best = whole
            if self._physical and b * best.footprint < beta and best.parity != NO_SLICES:
                chosen = sliced[best.parity]
                split = self._split_loops(group, chosen) if chosen else ()
                if split:
                    again = sliced[2 + best.parity]  # its ops that recompute rows
                    rerun, best.reread = self.recompute_traffic(group, chosen, split, again)
                    best.rerun = 0 if best.resident else rerun
        return best

    def _unsliced_terms(
        self,
        group: Group,
        rows: dict[int, int],
        scale: dict[int, float],
        top: dict[int, float],
        nodes: list[int],
        last_height: int,
        weights: int,
    ) -> BRRTerms:
        """The terms of ``group`` with no op keeping a slice (``NO_SLICES``; external inputs
        may still be held a slice at a time): a slicing parity can need more rows than it
        saves channels (an op accumulating a sliced producer keeps a whole step's rows)."""
        lines: list[_Line] = []
        (fp, rs), _ = self.footprints(group, rows, scale, top, (0, 0), nodes, lines)
        return BRRTerms(fp, rs, last_height, weights, NO_SLICES).tile(self.b, self.beta, lines)

    def slicing(
        self, group: Group, parity: int, nodes: list[int] | None = None
    ) -> tuple[Group, Group]:
        """(the ops keeping a channel slice, those of them recomputing rows they made) in
        ``group`` under ``parity``: what :meth:`terms` priced, :meth:`tile_rows` allocates
        and the schedule builder lays out."""
        if not self._partial or parity == NO_SLICES:
            return 0, 0
        sliced = self.sliced_ops(group, nodes)
        if not self._physical:
            return sliced[parity], 0
        again = self.slice_rereaders(sliced, group)
        return again[parity], again[2 + parity]

    def _split_loops(self, group: Group, sliced: Group) -> tuple[Group, ...]:
        """The sliced ops of each slice loop of ``group`` that needs a later pass (a cheap
        test before :meth:`recompute_traffic`): a loop where a sliced op reads an op that
        keeps all its channels and lies below a sliced op of the loop (joined to it by
        edges between sliced ops). It depends on the group only through the whole ops below
        a sliced op: memoised on them."""
        below = descendants_of(self.graph.descendant_mask, sliced) & group & ~sliced
        if not below:
            return ()
        key = (sliced, below)
        hit = self._split_memo.get(key)
        if hit is None:
            hit = self._split_memo[key] = self._loops_reading_below(sliced, below)
        return hit

    def _loops_reading_below(self, sliced: Group, below: Group) -> tuple[Group, ...]:
        """The loops of :meth:`_split_loops`, given the whole ops ``below`` a sliced op."""
        graph = self.graph
        nbr, pred, anc = graph.neighbour_mask, graph.pred_mask, graph.ancestor_mask
        split: list[Group] = []
        in_split = 0  # the ops of the loops in ``split``
        loops: list[Group] = []  # the loops flooded so far
        x = sliced
        while x:
            low = x & -x
            x ^= low
            producers = pred[low.bit_length() - 1] & below
            if not producers or in_split & low:
                continue
            loop = next((lp for lp in loops if lp & low), 0)
            if not loop:
                loop = frontier = low
                while frontier:
                    v = (frontier & -frontier).bit_length() - 1
                    frontier &= frontier - 1
                    near = nbr[v] & sliced & ~loop
                    loop |= near
                    frontier |= near
                loops.append(loop)
            if ancestors_of(anc, producers) & loop:
                split.append(loop)
                in_split |= loop
        return tuple(split)

    def recompute_traffic(
        self, group: Group, sliced: Group, split: tuple[Group, ...], again: Group | None = None
    ) -> tuple[int, int]:
        """(weights streamed again per tile, elements read again) by the later passes of
        the slice loops of ``group`` under the slicing ``sliced`` (those holding an op of
        ``split``; the others run in one pass): a pass recomputes the sliced ops an earlier
        pass computed, streaming their weights again, and reads again the slice-held inputs
        an earlier pass read (docs/cost-model.md, "Channel slices"). ``again``: the sliced
        ops that recompute rows (:meth:`slice_rereaders`), when the caller has them.

        The count reads the group only near the loops' ops (``_pass_reach``: the passes
        split on the ops below them, the held inputs on their producers and readers), so
        it is memoised on the group, slicing and recomputing ops there: the exact search
        prices many groups that differ elsewhere."""
        if again is None:
            again = self.slice_rereaders((sliced, sliced), group)[2]
        near = self._near_loops.get(split)
        if near is None:
            near, reach = 0, self._pass_reach
            for ops in split:
                x = ops
                while x:
                    low = x & -x
                    near |= reach[low.bit_length() - 1]
                    x ^= low
            self._near_loops[split] = near
        key = (split, group & near, sliced & near, again & near)
        hit = self._traffic_memo.get(key)
        if hit is None:
            hit = self._traffic_memo[key] = self._recompute_traffic(group, sliced, split, again)
        return hit

    def _recompute_traffic(
        self, group: Group, sliced: Group, split: tuple[Group, ...], again: Group
    ) -> tuple[int, int]:
        """:meth:`recompute_traffic` from scratch."""
        loops = SliceLoops(self, group, sliced)
        # an op run in n passes streams its weights n - 1 more times, a tensor read in n
        # passes is read n - 1 more times: what each pass runs or reads again
        weights, sizes = self.node_weights, self._tensor_size
        ran = rerun = reread = 0
        read: set[int] = set()
        try:
            for ops in split:
                held = self._held_inputs(group, sliced, again, ops)
                for run, recomputed, partial, _, ts in loops.pass_masks(ops, held, 0):
                    m = run | recomputed | partial
                    if m & ran:
                        rerun += sum(weights[v] for v in bits(m & ran))
                    ran |= m
                    for t in ts:
                        if t in read:
                            reread += sizes[t]
                        else:
                            read.add(t)
        except ScheduleError:
            return 0, 0  # no schedule: nothing to count
        return rerun, reread

    def _held_inputs(
        self, group: Group, sliced: Group, again: Group, members: Group
    ) -> list[tuple[int, Group]]:
        """The external inputs of ``group`` that the ops ``members`` read and that are held
        a channel slice at a time, each with its in-group readers (:meth:`whole_inputs`)."""
        ext_in, readers, held, seen = self._ext_in, self._tensor_readers, [], set()
        x = members
        while x:
            low = x & -x
            x ^= low
            for ti, p, _, _, _ in ext_in[low.bit_length() - 1]:
                if (p >= 0 and group >> p & 1) or ti in seen:
                    continue
                seen.add(ti)
                if not self._whole_input(ti, group, sliced, again):
                    held.append((ti, readers[ti] & group))
        return held

    def slice_rereaders(self, sliced: tuple[Group, Group], group: Group) -> tuple[Group, ...]:
        """``sliced`` plus, per parity, the sliced ops that recompute rows they already made:
        those with an in-group descendant whose windows overlap (K > S), so that they keep
        more rows than a step advances. Such an op re-reads its external inputs' overlap rows
        for every channel slice, so those inputs stay with all their channels
        (docs/cost-model.md, "Channel slices"). Descendants only grow with the group, so a
        footprint stays monotone over down-sets."""
        s0, s1 = sliced
        overlapping = self._overlapping & group
        if not overlapping:
            return s0, s1, 0, 0
        again = group & ancestors_of(self.graph.ancestor_mask, overlapping)
        return s0, s1, s0 & again, s1 & again

    def whole_inputs(
        self, group: Group, sliced: Group, again: Group, external: dict[int, list[tuple[int, int]]]
    ) -> dict[int, bool]:
        """External tensor -> held with all its channels under the slicing ``sliced`` (its
        recomputing ops ``again``), else one channel slice at a time: the channel rule of
        :meth:`footprints`, per tensor (docs/cost-model.md, "Channel slices")."""
        return {t: self._whole_input(t, group, sliced, again) for t in external}

    def _whole_input(self, t: int, group: Group, sliced: Group, again: Group) -> bool:
        """Whether the external input ``t`` of ``group`` is held with all its channels: a
        local reader and another (or the same op twice) read it at two times, a barrier,
        an overlapping window, a recomputing op or a sliced mixing op reads it whole, or
        its channels do not exceed one slice (:meth:`footprints`' rule)."""
        if self._whole_tensor[t]:
            return True
        readers = self._tensor_readers[t] & group
        if readers & self._reads_whole | readers & (again | sliced & self._mixing_ops):
            return True
        two = readers & (readers - 1) or readers & self._reads_twice[t]
        return bool(self._physical and two and readers & self._local_ops)

    def tile_rows(
        self, group: Group, h: int, parity: int = 0
    ) -> tuple[dict[int, int], dict[int, int]]:
        """Rows each op of ``group`` and each of its external input tensors holds in a tile
        of ``h`` sink rows under the slicing ``parity``: the allocation the tile's footprint
        ``f(h)`` prices (docs/cost-model.md, "BRR"): each row count grows from the one-row
        tile by its whole-row scale per sink row until it reaches its tensor's height."""
        nodes = bits(group)
        sliced, again = self.slicing(group, parity, nodes)
        lines: list[_Line] = []
        rows, scale, _, top = self._rows(group, nodes)
        self.footprints(group, rows, scale, top, (sliced, sliced, again, again), nodes, lines)
        out_hw = self._out_shape
        first = dict(rows)
        for key, a0, _, r, _, _ in lines:
            if key >= 0 and a0:
                first[key] = r
        ops = {v: min(first[v] + (h - 1) * int(scale[v]), out_hw[v][1]) for v in nodes}
        return ops, {~key: min(r + (h - 1) * g, cap) for key, _, _, r, g, cap in lines if key < 0}

    def footprints(
        self,
        group: Group,
        rows: dict[int, int],
        scale: dict[int, float],
        top: dict[int, float],
        sliced: tuple[Group, ...],
        nodes: list[int] | None = None,
        lines: list[_Line] | None = None,
        excess: list[bool] | None = None,
    ) -> tuple[tuple[int, float], tuple[int, float]]:
        """(footprint, row step) in elements of ``group`` under each of its two slicings
        ``sliced`` (:meth:`sliced_ops`, optionally extended by :meth:`slice_rereaders`), in
        one pass; ``rows``, ``scale`` and ``top`` are :meth:`_rows`'. An external input
        keeps the union of its readers' windows. ``lines`` collects what a taller tile's
        footprint needs: per stored op and external input, its row size under each parity,
        rows, growth per sink row and height (:func:`_tallest_tile`). ``excess[p]`` is set
        when parity ``p`` holds some tensor with more rows or channels than no slicing would
        (an op's grown rows, an in-place write it forbids, a whole external input)."""
        readers, op_terms, physical = self._tensor_readers, self._op_terms, self._physical
        pred = self.graph.pred_mask
        s0, s1 = sliced[0], sliced[1]
        again0, again1 = (sliced[2], sliced[3]) if len(sliced) > 2 else (0, 0)
        ceil, shift = math.ceil, self._shift
        # external tensor -> [rows, row elements under parity 0, under parity 1, growth,
        # height, read by a local op, the union of its readers' windows (first, end)]
        ext_rows: dict[int, list] = {}
        fp0 = fp1 = 0
        rs0 = rs1 = 0.0
        for v in bits(group) if nodes is None else nodes:
            c_out, w_out, h_out, keeps, in_place, c_slice, whole, mixing, local, k, s, ins = (
                op_terms[v]
            )
            bit = 1 << v
            keeps0 = keeps1 = keeps_whole = keeps
            if keeps:
                for ti, p in in_place:
                    if p >= 0 and group >> p & 1 and readers[ti] & group == bit:
                        keeps_whole = False
                        # written over the input it alone reads in the group; a sliced op
                        # only over a sliced producer (a recompute, of its rows or in a later
                        # pass, reads a whole producer's rows again)
                        if not (physical and s0 & bit) or s0 >> p & 1:
                            keeps0 = False
                        if not (physical and s1 & bit) or s1 >> p & 1:
                            keeps1 = False
            need, sc = rows[v], scale[v]
            if keeps0 or keeps1:
                g = int(sc)
                h0 = h1 = need
                if need < g and physical and pred[v] & group & (s0 | s1):
                    # an op that keeps all its channels and reads a sliced in-group producer
                    # accumulates the slice loop's output over every row of its step at
                    # once, g rows per sink row (more than its readers' windows span)
                    grow_rows = g if g < h_out else h_out
                    if pred[v] & group & s0 and not s0 & bit:
                        h0 = grow_rows
                    if pred[v] & group & s1 and not s1 & bit:
                        h1 = grow_rows
                if excess is not None and (not keeps_whole or h0 > need or h1 > need):
                    if keeps0 and (h0 > need or not keeps_whole):
                        excess[0] = True
                    if keeps1 and (h1 > need or not keeps_whole):
                        excess[1] = True
                c0 = (c_slice if s0 & bit else c_out) if keeps0 else 0
                fp0 += c0 * h0 * w_out
                rs0 += c0 * sc * w_out
                c1 = (c_slice if s1 & bit else c_out) if keeps1 else 0
                fp1 += c1 * h1 * w_out
                rs1 += c1 * sc * w_out
                if lines is not None and h0 == h1:
                    lines.append((v, c0 * w_out, c1 * w_out, h0, g, h_out))
                elif lines is not None:  # a line per parity
                    lines.append((v, c0 * w_out, 0, h0, g, h_out))
                    lines.append((v, 0, c1 * w_out, h1, g, h_out))
            n_in = grow = -1
            lo = hi = 0.0
            for ti, producer, cw, h_in, slice_cw in ins:
                if producer >= 0 and group >> producer & 1:
                    continue
                if grow < 0:  # the op's first external input
                    lo = top[v] * s + shift[v]
                    hi = lo + (need - 1) * s + k
                    n_in = ceil(hi - lo - 1e-9)
                    grow = ceil(sc * s - 1e-9)  # its rows per sink row, at most
                    # a sliced mixing op or a barrier needs all channels of an external
                    # input; any other reader takes it a channel slice at a time
                    whole0 = whole or (mixing and s0 & bit) or again0 & bit
                    whole1 = whole or (mixing and s1 & bit) or again1 & bit
                    if excess is not None and not whole:
                        if whole0:
                            excess[0] = True
                        if whole1:
                            excess[1] = True
                n = n_in if n_in < h_in else h_in
                w0 = cw if whole0 else slice_cw
                w1 = cw if whole1 else slice_cw
                kept = ext_rows.get(ti)
                if kept is None:
                    ext_rows[ti] = [n, w0, w1, grow, h_in, local, lo, hi]
                else:
                    if lo < kept[6]:
                        kept[6] = lo
                    if hi > kept[7]:
                        kept[7] = hi
                    n = ceil(kept[7] - kept[6] - 1e-9)
                    if n > h_in:
                        n = h_in
                    if n > kept[0]:
                        kept[0] = n
                    if physical and (local or kept[5]):
                        # a local reader runs with its own slice loop, the other reader at
                        # another time: the slices would be read twice, so keep them all
                        w0 = w1 = cw
                        kept[5] = True
                    if w0 > kept[1]:
                        kept[1] = w0
                    if w1 > kept[2]:
                        kept[2] = w1
                    if grow > kept[3]:
                        kept[3] = grow
        for ti, (n, w0, w1, grow, h_in, *_) in ext_rows.items():
            fp0 += n * w0
            fp1 += n * w1
            if lines is not None:
                lines.append((~ti, w0, w1, n, grow, h_in))
        return (fp0, rs0), (fp1, rs1)

    def _compute(self, group: Group) -> GroupCost:
        b, beta = self.b, self.beta
        if group & self._local_mask and group & (group - 1) and self._starts_local(group):
            tt = self.terms(group)  # Optimus: a fused group may not start with a local op
            return GroupCost(b * tt.footprint, b * (self.io_elements(group) + tt.weights), False)
        tt = self.terms(group)
        footprint = b * tt.footprint
        valid = footprint < beta
        weights = b * tt.weights
        io = self.io_elements(group)
        if self._fractional_reads and valid and not tt.resident:
            dram = b * (io + self._fractional_weight_reads(group, tt.h_tile))
        else:
            dram = b * (io + tt.reread) + (weights + b * tt.rerun) * tt.tiles
        if not valid:
            # Only unfusable singletons are ever costed invalid in a plan: layer by layer.
            return GroupCost(footprint, dram, False)
        return GroupCost(b * tt.peak, dram, True)  # what the priced schedule holds at once

    def _fractional_weight_reads(self, group: Group, h_tile: int) -> int:
        """Optimus's reported weight traffic of a streamed group: each op's weights once per
        ``H_out(v) / H(v)``, H(v) its rows per tile of ``h_tile`` output rows (a fraction)."""
        nodes = bits(group)
        rows = self._rows(group, nodes, h_tile)[0]
        weights, out_hw = self.node_weights, self._out_shape
        reads = sum(weights[v] * out_hw[v][1] / rows[v] for v in nodes if weights[v])
        return math.ceil(reads - 1e-9)

    def _starts_local(self, group: Group) -> bool:
        """Whether a source of ``group`` (no in-group producer) is a local op or a concat."""
        pred = self.graph.pred_mask
        return any(not pred[v] & group for v in bits(group & self._local_mask))


class SlicePass:
    """One pass of a slice loop: ops and external inputs that run one channel slice at a
    time, and their readers (docs/cost-model.md, "Schedules and replay")."""

    def __init__(self) -> None:
        self.ops: set[int] = set()  # sliced ops and whole ops reading a slice-held input
        self.recompute: set[int] = set()  # ops of an earlier pass computed again in this one
        self.tensors: set[int] = set()  # external inputs held as a slice
        self.partial: set[int] = set()  # readers accumulating over the slices
        self.concat: dict[int, list[int]] = {}  # concat -> its inputs filled by this loop
        self.channels = 0


class SliceLoops:
    """The slice loops of a group under one slicing, each split into passes that run in
    order: the sliced ops joined by edges, plus the external inputs held as a slice and
    their channel-local readers, run one channel slice at a time (docs/cost-model.md,
    "Schedules and replay"). The schedule builder lays them out (:meth:`loops`); the
    closed form counts the recomputations of their later passes (:meth:`pass_masks`)."""

    def __init__(
        self,
        cm: BRR,
        group: Group,
        sliced: Group,
        external: dict[int, list[tuple[int, int]]] | None = None,
        whole_ext: dict[int, bool] | None = None,
    ) -> None:
        self.graph, self.group, self.sliced = cm.graph, group, sliced
        self.external, self.whole_ext = external or {}, whole_ext or {}
        self.role, self.pe_unroll, self.shapes = cm._role, cm.accel.pe_unroll, cm._out_shape
        graph = cm.graph
        self.succ, self.pred, self.desc = graph.succ_mask, graph.pred_mask, graph.descendant_mask
        self.fills = cm._concat_fills
        self.memo = cm._pass_memo

    def loops(self) -> list[SlicePass]:
        """The slice loops of the group, each split into passes that can run in order."""
        tensors = self.graph.tensors
        parent: dict[tuple[str, int], tuple[str, int]] = {}

        def find(x: tuple[str, int]) -> tuple[str, int]:
            while parent.setdefault(x, x) != x:
                x = parent[x]
            return x

        def union(a: tuple[str, int], b: tuple[str, int]) -> None:
            parent[find(a)] = find(b)

        sliced = set(bits(self.sliced))
        for v in sliced:
            find(("op", v))
            for c in bits(self.succ[v] & self.group):
                if c in sliced:
                    union(("op", v), ("op", c))
        ext_partial: dict[int, set[int]] = {}  # slice-held input -> readers accumulating it
        for t, readers in self.external.items():
            if self.whole_ext[t]:
                continue
            find(("tensor", t))
            for v, _ in readers:
                if v in sliced or self.role[v] == ChannelRole.LOCAL:
                    union(("tensor", t), ("op", v))
                else:
                    ext_partial.setdefault(t, set()).add(v)
        parts: dict[tuple[str, int], tuple[set[int], set[int]]] = {}
        for key in list(parent):
            ops, ts = parts.setdefault(find(key), (set(), set()))
            (ops if key[0] == "op" else ts).add(key[1])
        if parts and not self.pe_unroll:
            raise ScheduleError("channel slices without a PE unroll")
        out: list[SlicePass] = []
        shapes = self.shapes
        for ops, ts in sorted(parts.values(), key=lambda p: min(p[0] | {1 << 60})):
            channels = {shapes[v][0] for v in ops} | {tensors[t].shape[0] for t in ts}
            if len(channels) != 1:
                raise ScheduleError(
                    "a slice loop mixes channel counts " + ", ".join(map(str, sorted(channels)))
                )
            held = [(t, mask_of(v for v, _ in self.external[t])) for t in sorted(ts)]
            first = mask_of(v for t in ts for v in ext_partial.get(t, ()))
            c = channels.pop()
            out += [self._slice_pass(p, c) for p in self.pass_masks(mask_of(ops), held, first)]
        seen: set[int] = set()
        for lp in out:
            if lp.partial & seen:
                raise ScheduleError("an op accumulates over two slice loops")
            seen |= lp.partial
        return out

    def _slice_pass(self, masks: _PassMasks, channels: int) -> SlicePass:
        """The :class:`SlicePass` of one pass of :meth:`pass_masks`, with the concats its
        sliced ops fill (concat -> its input indices, in the order the ops come)."""
        graph, tensors = self.graph, self.graph.tensors
        run, again, partial, fills, held = masks
        lp = SlicePass()
        lp.ops, lp.recompute = set(bits(run | again)), set(bits(again))
        lp.partial, lp.tensors, lp.channels = set(bits(partial)), set(held), channels
        for v in bits(run & self.sliced):
            for c in bits(self.succ[v] & fills):
                lp.concat.setdefault(c, []).extend(
                    i for i, t in enumerate(graph.nodes[c].inputs) if tensors[t].producer == v
                )
        return lp

    def pass_masks(
        self, members: Group, held: list[tuple[int, Group]], first: Group
    ) -> list[_PassMasks]:
        """Split the slice loop of the sliced ops ``members`` and the slice-held inputs
        ``held`` (tensor, its in-group readers) into passes: a member that reads (through
        ops outside the loop) what the loop's readers make runs in a later pass,
        recomputing the members it reads slice by slice (a squeeze-excite scale applied to
        a sliced conv's output). ``first`` are the readers accumulating over the slice-held
        inputs, which run with the first pass.

        The split depends on the group only through its ops below the members (what runs
        after a pass), so it is memoised per (members, their slicing, the group's ops below
        them, ``first``): the exact search prices many groups that differ elsewhere."""
        below = members | descendants_of(self.desc, members)
        key = (members, members & self.sliced, self.group & below, first)
        shape = self.memo.get(key)
        if shape is None:
            try:
                shape = self._split(members, first)
            except ScheduleError as e:
                shape = str(e)
            self.memo[key] = shape
        if isinstance(shape, str):
            raise ScheduleError(shape)
        every = [t for t, _ in held]
        return [
            (run, again, partial, made, [t for t, r in held if r & (run | again | partial)])
            if run
            else (run, again, partial, made, every)  # accumulating readers: every input
            for run, again, partial, made in shape
        ]

    def _split(self, members: Group, first: Group) -> list[tuple[Group, Group, Group, Group]]:
        """The passes of :meth:`pass_masks` without their inputs: (members, members
        computed again, accumulating readers, concats filled). Bitmask flood fills."""
        if not members:  # only readers accumulating over a slice-held input
            return [(0, 0, first, 0)]
        group, sliced, fills = self.group, self.sliced, self.fills
        succ, pred, desc = self.succ, self.pred, self.desc
        outside = group & ~members
        remaining = members
        earlier = 0
        passes: list[tuple[Group, Group, Group, Group]] = []
        while remaining:
            run = remaining
            while True:
                fed = 0  # readers outside the loop of its sliced ops (whole ops finish inside)
                x = run & sliced
                while x:
                    low = x & -x
                    fed |= succ[low.bit_length() - 1]
                    x ^= low
                fed &= outside
                partial = fed & ~fills
                if not passes:
                    partial |= first
                made = partial | fed & fills  # accumulators and the concats the slices fill
                # what runs after this pass: its readers, and every op outside the loop
                # below one of them or one of its members
                reach = made
                x = made | run
                while x:
                    low = x & -x
                    reach |= desc[low.bit_length() - 1]
                    x ^= low
                reach &= outside
                bad = below = 0
                x = run
                while x:
                    low = x & -x
                    v = low.bit_length() - 1
                    if pred[v] & reach:
                        bad |= low
                        below |= desc[v]  # and every member below one of those
                    x ^= low
                bad |= run & below
                if not bad:
                    break
                run &= ~bad
                if not run:
                    break
            if not run:
                if passes or not first:
                    raise ScheduleError("a slice loop reads its own output")
                # the slice-held inputs' accumulating readers first, the members later
                passes.append((0, 0, first, 0))
                continue
            again = 0  # the members of earlier passes this one reads, computed again
            x = run
            while x:
                low = x & -x
                x ^= low
                new = pred[low.bit_length() - 1] & earlier & ~again
                again |= new
                x |= new
            passes.append((run, again, partial, fed & fills))
            earlier |= run
            remaining &= ~run
        return passes


def external_readers(graph, group: Group) -> dict[int, list[tuple[int, int]]]:
    """Tensor read by ``group`` from outside it -> its in-group (reader, input index)s."""
    tensors, out = graph.tensors, {}
    for v in bits(group):
        for i, t in enumerate(graph.nodes[v].inputs):
            p = tensors[t].producer
            if p < 0 or not group >> p & 1:
                out.setdefault(t, []).append((v, i))
    return out

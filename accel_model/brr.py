"""BRR: buffer-requirement reduction, Optimus-style (docs/cost-model.md, "BRR").

Only feature rows must fit: the group is evaluated one output row band at a time, each node
keeping the rows its consumers need; weights that do not fit beside them are streamed from
DRAM once per output tile. Rows are back-propagated from the group's last nodes.
"""

from __future__ import annotations

import math

from accel_model.base import CostModel, GroupCost
from accel_model.registry import COST_MODELS
from accel_model.rows import input_rows, row_window
from fusionplan.ir.graph import Group, bits


class BRRTerms:
    """The intermediate quantities of one group, exposed for tests and reports.

    ``footprint``, ``row_step`` and ``weights`` are in elements; ``last_height`` is
    H_out(L) in rows. ``resident``, ``h_tile`` and ``tiles`` depend on the buffer: weights are
    resident (``tiles`` 1, ``h_tile`` = H_out(L)) iff ``b*W + b*footprint < beta`` (strict,
    like every fit test: at equality they stream); else they are streamed once per tile of
    ``h_tile`` output rows. A group whose footprint does
    not fit (invalid) has ``resident`` False, ``h_tile`` 0 and ``tiles`` 1 (run layer by
    layer, weights read once).
    """

    __slots__ = ("footprint", "h_tile", "last_height", "resident", "row_step", "tiles", "weights")

    def __init__(self, footprint, row_step, last_height, weights) -> None:
        self.footprint, self.row_step = footprint, row_step
        self.last_height, self.weights = last_height, weights
        self.tiles, self.resident, self.h_tile = 1, True, last_height


@COST_MODELS.register("brr")
class BRR(CostModel):
    name = "brr"

    def __init__(self, graph, accel) -> None:
        super().__init__(graph, accel)
        t = graph.tensors
        # the row-count induction needs every kept row count >= 1, i.e. no empty tensor
        self._heights_positive = all(x.shape[1] >= 1 for x in t)
        self._window = tuple(row_window(graph, v) for v in range(len(graph)))
        self._out_hw = tuple(graph.out_shape(v) for v in range(len(graph)))
        # per op: its weights, its consumer ops, and its inputs as (tensor, producer, C*W, H)
        self._weights = tuple(n.weights for n in graph.nodes)
        self._consumers = tuple(tuple(bits(m)) for m in graph.succ_mask)
        self._ext_in = tuple(
            tuple(
                (ti, t[ti].producer, t[ti].shape[0] * t[ti].shape[2], t[ti].shape[1])
                for ti in n.inputs
            )
            for n in graph.nodes
        )

    def monotone_over_downsets(self) -> bool:
        return self._heights_positive

    def buffer_floor(self, nodes: Group) -> int:
        # In any group G containing ``nodes`` every node keeps >= 1 row (heights >= 1), and a
        # node with a consumer y in ``nodes`` keeps >= the rows y needs for one output row
        # (input_rows is non-decreasing in the rows y keeps, which are >= 1).
        if not self.monotone_over_downsets():
            return 0
        succ, total = self.graph.succ_mask, 0
        for x in bits(nodes):
            c_out, h_out, w_out = self._out_hw[x]
            rows = 1
            for y in bits(succ[x] & nodes):
                k, s = self._window[y]
                rows = max(rows, input_rows(k, s, 1, h_out))
            total += c_out * rows * w_out
        return self.b * total

    def terms(self, group: Group) -> BRRTerms:
        """Footprint, row step and tiling of ``group`` (elements, not bytes; see BRRTerms).

        The exact search costs hundreds of thousands of groups on a branchy graph, so the
        loop is written flat: per-op tables, ``input_rows`` inlined (same arithmetic).
        """
        consumers_of, window, out_hw, ext_in = (
            self._consumers,
            self._window,
            self._out_hw,
            self._ext_in,
        )
        ceil = math.ceil
        node_weights = self._weights
        rows: dict[int, int] = {}
        scale: dict[int, float] = {}
        ext_rows: dict[int, tuple[int, int]] = {}  # external tensor -> (rows, C*W)
        footprint = weights = 0
        row_step = 0.0
        last_height = 1
        for v in reversed(bits(group)):
            weights += node_weights[v]
            c_out, h_out, w_out = out_hw[v]
            need, sc, sink = 0, 0.0, True
            for c in consumers_of[v]:
                if group >> c & 1:
                    sink = False
                    k, s = window[c]
                    n = ceil((rows[c] - 1) * s + k - 1e-9)
                    if n > h_out:
                        n = h_out
                    if n > need:
                        need = n
                    x = scale[c] * s
                    if x > sc:
                        sc = x
            if sink:
                need, sc = 1, 1.0
                if h_out > last_height:
                    last_height = h_out
            rows[v], scale[v] = need, sc
            footprint += c_out * need * w_out
            row_step += c_out * sc * w_out
            k, s = window[v]
            for ti, producer, cw, h_in in ext_in[v]:
                if producer >= 0 and group >> producer & 1:
                    continue
                n = ceil((need - 1) * s + k - 1e-9)
                if n > h_in:
                    n = h_in
                prev = ext_rows.get(ti)
                kept = 0 if prev is None else prev[0]
                if prev is None or n > kept:
                    ext_rows[ti] = (n if n > kept else kept, cw)
        footprint += sum(r * cw for r, cw in ext_rows.values())
        tt = BRRTerms(footprint, row_step, last_height, weights)
        b, beta = self.b, self.beta
        if b * footprint >= beta:
            tt.resident, tt.h_tile = False, 0  # invalid: layer by layer, weights read once
        elif b * (tt.weights + footprint) >= beta:  # resident iff F_beta = b*(W + fp) < beta
            tt.resident = False
            tt.h_tile = math.floor((beta - b * footprint) / (b * row_step)) + 1
            tt.tiles = math.ceil(last_height / tt.h_tile)
        return tt

    def _compute(self, group: Group) -> GroupCost:
        b, beta = self.b, self.beta
        tt = self.terms(group)
        footprint = b * tt.footprint
        valid = footprint < beta
        weights = b * tt.weights
        dram = b * self.io_elements(group) + weights * tt.tiles
        if not valid:
            # Only unfusable singletons are ever costed invalid in a plan: layer by layer.
            return GroupCost(footprint, dram, False)
        if tt.resident:
            return GroupCost(footprint + weights, dram, True)
        return GroupCost(footprint, dram, True)

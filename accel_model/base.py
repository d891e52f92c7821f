"""The cost-model protocol, its memo, and the terms every scheme shares (DRAM io, weights).

A cost model answers three questions about a fusion group (a node bitmask): how many bytes of
on-chip buffer it needs, how many bytes of DRAM traffic it causes, and whether it fits. Each
group is computed once; searches ask about the same groups many times.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from array import array
from dataclasses import dataclass
from functools import cached_property, reduce
from operator import or_
from time import perf_counter
from typing import ClassVar, NamedTuple, Protocol

from accel_model.accelerator import Accelerator
from accel_model.channels import ChannelRole, channel_role, in_place_inputs, is_depthwise
from accel_model.layer import (
    LayerGeometry,
    LayerTiling,
    layer_geometry,
    optimus_blocking,
    single_layer_tiling,
)
from accel_model.rows import is_tiling_pool
from fusionplan.ir.graph import Group, OpGraph, bits, hull_between, mask_of


class GroupCost(NamedTuple):
    buffer: int  # F_beta, bytes
    dram: int  # F_D, bytes
    valid: bool  # fits the buffer


@dataclass
class CacheStats:
    queries: int = 0
    hits: int = 0
    work: int = 0  # ops costed from scratch x work_per_op: the searches' work measure
    shape_hits: int = 0  # misses answered by a group of the same shape (not counted in work)
    seconds: float = 0.0  # spent answering misses (machine-dependent: reports only)

    @property
    def misses(self) -> int:
        """Oracle queries: distinct groups this model was asked about (docs/design.md,
        "Oracles"); a search's cost in a black-box setting."""
        return self.queries - self.hits

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class ToolEnergy(Protocol):
    """A tool's energy of a group in pJ, and per op the pJ it charges every group holding
    that op (the floor the exact search adds up with the DRAM term)."""

    dram_pj_per_element: float

    def energy(self, group: Group) -> float: ...

    def fixed_energy(self) -> tuple[float, ...]: ...


class CostModel(ABC):
    """Base class: subclasses implement :meth:`_compute` and set ``name``."""

    name: ClassVar[str]
    # whether the model's internals (bounds, tilings, schedules) may be read, or only its
    # answers (a black-box oracle, accel_model/oracle.py)
    white_box: ClassVar[bool] = True
    # work units (search/effort.py) per op of a group costed from scratch: about 1.5 us a
    # unit on the reference machine, so a search's units track its time on every scheme
    work_per_op: ClassVar[int] = 1

    def __init__(self, graph: OpGraph, accel: Accelerator) -> None:
        self.graph = graph
        self.accel = accel
        self.b = accel.bytes_per_element
        self.beta = accel.buffer_bytes
        self.stats = CacheStats()
        # the default profile prices physical schedules; the paper's and Optimus's conventions
        # keep their tools' row rules (docs/cost-model.md, "BRR" and "LBDF")
        self.physical_rows = accel.single_layer != "paper" and not accel.conventions
        self._memo: dict[Group, GroupCost] = {}
        self._layers: dict[int, LayerTiling] = {}  # op -> its loop order alone
        self._epilogues: dict[tuple[int, tuple], LayerTiling] = {}  # (core, room) -> its order
        self._geometries: dict[int, LayerGeometry] = {}  # op -> its facts and window sums
        self._fact_ids: dict[tuple, int] = {}  # an op's facts -> its id in shape keys
        # weight elements per op; Optimus-like accelerators do not count depthwise weights
        self.node_weights = tuple(
            0 if not accel.depthwise_weights and is_depthwise(graph, v) else n.weights
            for v, n in enumerate(graph.nodes)
        )
        # ops that cost nothing run on their own (Optimus's free unfused local layers)
        self.free_alone: Group = 0
        self._out_shape = tuple(graph.out_shape(v) for v in range(len(graph)))  # (C, H, W)
        # ops that can run as a layer's epilogue, applied to its outputs as they are written
        self._epilogue_ops: Group = 0
        if accel.in_place:
            self._epilogue_ops = sum(
                1 << v
                for v, node in enumerate(graph.nodes)
                if in_place_inputs(graph, v) or is_tiling_pool(node)
            )
        t = graph.tensors
        self._in = tuple(
            tuple((ti, t[ti].producer, t[ti].size) for ti in n.inputs) for n in graph.nodes
        )
        outs = graph.graph_output_set
        self._out = tuple(
            tuple((graph.consumer_mask[ti], ti in outs, t[ti].size) for ti in n.outputs)
            for n in graph.nodes
        )
        # per op, the ops its inputs come from and its outputs go to, -1 (every op) where
        # one is a graph input or output: io_elements skips an op whose tensors all stay in
        # the group without looking at them one by one
        self._io_near = tuple(
            (
                -1 if any(p < 0 for _, p, _ in ins) else mask_of(p for _, p, _ in ins),
                -1 if any(o for _, o, _ in outs) else reduce(or_, (c for c, _, _ in outs), 0),
            )
            for ins, outs in zip(self._in, self._out, strict=True)
        )

    # -- the protocol ------------------------------------------------------------------
    def cost(self, group: Group) -> GroupCost:
        self.stats.queries += 1
        hit = self._memo.get(group)
        if hit is not None:
            self.stats.hits += 1
            return hit
        # the work counts every group new to this memo, same-shape or not, so that a
        # search's budget (and so its answer) does not depend on this second memo
        self.stats.work += group.bit_count() * self.work_per_op
        started = perf_counter()
        if self.shape_invariant:
            key = self._shape_key(group)
            result = self._by_shape.get(key)
            if result is None:
                result = self._by_shape[key] = self._evaluate(group)
            else:
                self.stats.shape_hits += 1
        else:
            result = self._evaluate(group)
        self.stats.seconds += perf_counter() - started
        self._memo[group] = result
        return result

    # a scheme whose default-profile cost of a group is a function of the group's shape
    # (:meth:`_shape_key`): its ops' attributes and tensor shapes, the edges among them and
    # which outputs leave it
    shape_costs: ClassVar[bool] = False

    @cached_property
    def shape_invariant(self) -> bool:
        """Whether groups of one shape share a cost here: the tools' conventions look at
        more (Optimus's first layer), so they keep the one memo by mask."""
        return self.physical_rows and self.shape_costs

    @cached_property
    def _by_shape(self) -> dict[tuple[int, bytes], GroupCost]:
        return {}

    @cached_property
    def _shape_ids(self) -> tuple[int, ...]:
        """Per op, a small id of everything about it and its surroundings a cost reads: its
        attributes, weights counted and tensor shapes, whether it runs free alone or as an
        epilogue, and, as label offsets from it, where each input comes from (producer and
        output index; a graph input by name) and where each output goes (its readers, and
        whether it is a graph output)."""
        g, t = self.graph, self.graph.tensors
        outs, cons = g.graph_output_set, g.consumer_mask

        def source(v: int, ti: int) -> tuple[int, int] | str:
            """Where op ``v``'s input ``ti`` comes from: (label offset of its producer, output
            index there), or a graph input's name."""
            p = t[ti].producer
            return (v - p, g.nodes[p].outputs.index(ti)) if p >= 0 else t[ti].name

        ids = self._fact_ids
        per_op = []
        for v, n in enumerate(g.nodes):
            fact = (
                n.op_type, n.kind, n.kernel, n.stride, n.pads, n.groups, n.dilation, n.macs,
                n.whole_input, self.node_weights[v], self.free_alone >> v & 1,
                self._epilogue_ops >> v & 1,
                tuple((t[ti].shape, source(v, ti)) for ti in n.inputs),
                tuple(
                    (t[ti].shape, ti in outs, tuple(c - v for c in bits(cons[ti])))
                    for ti in n.outputs
                ),
            )  # fmt: skip
            per_op.append(ids.setdefault(fact, len(ids)))
        return tuple(per_op)

    def _shape_key(self, group: Group) -> tuple[int, bytes]:
        """The shape of ``group``: its mask moved down to its lowest op, and each op's id
        (:attr:`_shape_ids`) packed as 32-bit integers. Two groups with one key are
        translates with the same surroundings (a repeated block): each op reads the same
        tensors at the same offsets, in or out of the group, and feeds the same readers."""
        low = (group & -group).bit_length() - 1
        ids = self._shape_ids
        return group >> low, array("i", [ids[v] for v in bits(group)]).tobytes()

    def share_shape_memo(self, memo: dict[tuple[int, bytes], GroupCost], fact_ids: dict) -> None:
        """Price groups through a shape memo shared with other graphs' models on the same
        accelerator (substitution's candidates; docs/design.md, "IR"): with
        one ``fact_ids`` a shape key names the same ops and surroundings in every graph, so a
        group a rewrite left alone is priced once. Work units still count every group new to
        this model's own memo, so a search's answer does not depend on the sharing."""
        if not self.shape_invariant:
            return
        assert not self._memo, "share the memo before the first group is priced"
        self.__dict__["_by_shape"] = memo
        self._fact_ids = fact_ids

    def answered(self, start: int = 0) -> list[tuple[Group, GroupCost]]:
        """The groups asked about so far, in the order they were first asked, from the
        ``start``-th on: the labels a learning judge trains on (explainers/judge.py)."""
        return list(itertools.islice(self._memo.items(), start, None))

    def known(self, group: Group) -> GroupCost | None:
        """The cost of ``group`` if it was asked about already (no query counted), else
        None: what a judge may read for free (fusionplan/planning/split.py, PartJudge)."""
        return self._memo.get(group)

    def buffer_bytes(self, group: Group) -> int:
        return self.cost(group).buffer

    def dram_bytes(self, group: Group) -> int:
        return self.cost(group).dram

    def is_valid(self, group: Group) -> bool:
        return self.cost(group).valid

    def compute_uncached(self, group: Group) -> GroupCost:
        """Cost from scratch, bypassing the memo (the independent plan checker uses it)."""
        return self._evaluate(group)

    def _evaluate(self, group: Group) -> GroupCost:
        return self._priced(group)[0]

    def priced_order(self, group: Group) -> tuple[str, int]:
        """Which loop order sets ``group``'s cost, and its core op (-1 if none): ``free``,
        ``scheme`` (the fused schedule), ``layer`` (the op's own loop order) or ``epilogue``
        (the core op's loop order with the rest applied to its outputs). Schedules
        (accel_model/schedule.py) are built from it."""
        _, kind, core = self._priced(group)
        return kind, core

    def _priced(self, group: Group) -> tuple[GroupCost, str, int]:
        """The scheme's cost, except that one op, or one op with an elementwise epilogue, is
        never charged more than it costs run on its own (docs/cost-model.md, "Single-layer
        cost"): this keeps every cost non-increasing in the buffer."""
        if group & self.free_alone and not group & (group - 1):
            return GroupCost(0, 0, True), "free", -1
        result = self._compute(group)
        if not group or self.accel.single_layer == "paper":
            return result, "scheme", -1
        if result.valid and group.bit_count() <= 4 and result.dram == self.compulsory(group):
            # no loop order moves less than io + W, so the scheme's cost stands: this skips
            # the layer tilings of most ops (an exact search prices every singleton)
            return result, "scheme", -1
        if group & (group - 1):
            core = self._epilogue_core(group) if result.valid else None
            if core is None:
                return result, "scheme", -1
            # the layer's loop order, its epilogue applied to each output as it is written
            extra = self.io_elements(group) - self.io_elements(1 << core)
            extra += self.weight_elements(group & ~(1 << core))
            tiling = self.epilogue_tiling(group, core)
            alone = (tiling.dram + extra) * self.b
            if alone < result.dram:
                return self._as_layer(result, tiling, alone), "epilogue", core
            return result, "scheme", -1
        v = group.bit_length() - 1
        tiling = self.layer_tiling(v)
        alone = tiling.dram * self.b
        if not result.valid or alone < result.dram:
            return self._as_layer(result, tiling, alone), "layer", v
        return result, "scheme", -1

    def scheme_prices_every_group_holding(self, nodes: Group) -> bool:
        """Whether :meth:`_priced` charges every group containing ``nodes`` the scheme's own
        cost: a layer's or an epilogue's loop order only prices one op plus up to three
        epilogue ops, so a set of more than four ops, or with two ops that cannot be an
        epilogue, never gets one."""
        if self.accel.single_layer == "paper":
            return True
        return nodes.bit_count() > 4 or (nodes & ~self._epilogue_ops).bit_count() >= 2

    def compulsory(self, group: Group) -> int:
        """Bytes every schedule of ``group`` moves: its io and its weights, once each."""
        return self.b * (self.io_elements(group) + self.weight_elements(group))

    def _as_layer(self, result: GroupCost, tiling: LayerTiling, dram: int) -> GroupCost:
        """The group's cost run by a layer's loop order: its DRAM, and (the default profile)
        the buffer its schedule holds; validity stays the scheme's, so the searches' buffer
        proofs (monotone over down-sets, ``buffer_floor``) are untouched."""
        if not self.physical_rows:
            return result._replace(dram=dram)
        return result._replace(dram=dram, buffer=tiling.held * self.b)

    def _epilogue_core(self, group: Group) -> int | None:
        """The op ``group`` is, with an epilogue applied to each output as it is produced: up
        to 3 ops, each elementwise over in-group inputs of its own shape (a bias, an
        activation, a residual add) or a non-overlapping pooling of one in-group input, and
        none reading the core's own input; None for any other group (docs/cost-model.md,
        "Single-layer cost")."""
        if group.bit_count() > 4 or not self._epilogue_ops:
            return None
        core = (group & -group).bit_length() - 1
        rest = group & ~(1 << core)
        if rest & ~self._epilogue_ops:
            return None
        shapes, pred, nodes = self._out_shape, self.graph.pred_mask, self.graph.nodes
        core_inputs = set(nodes[core].inputs)
        for e in bits(rest):
            producers = bits(pred[e] & group)
            if not producers or core_inputs.intersection(nodes[e].inputs):
                return None  # the core's order keeps no copy of its input beside its outputs
            if nodes[e].kind == "pool":
                if len(producers) > 1:
                    return None
            elif any(shapes[p] != shapes[e] for p in producers):
                return None
        return core

    def epilogue_tiling(self, group: Group, core: int) -> LayerTiling:
        """The loop order of ``core`` run with the rest of ``group`` as its epilogue: its
        fit tests count the epilogue's regions beside each output block (the default
        profile; the tools' conventions reuse the layer's own order)."""
        space = self._epilogue_room(group, core)
        if not space:
            return self.layer_tiling(core)
        hit = self._epilogues.get((core, space))
        if hit is None:
            geo = self._geometry(core)._replace(room=space)
            hit = self._epilogues[(core, space)] = single_layer_tiling(geo, self.b, self.beta)
        return hit

    def _epilogue_room(self, group: Group, core: int) -> tuple[tuple[int, int, int, int], ...]:
        """The regions an epilogue holds beside its core's output block, as ``room`` counts
        them (accel_model/layer.py), in the layout of accel_model/schedule_layer.py: an
        elementwise op's output unless written in place over an in-group input, its weights
        (loaded once), each input from outside the group (its broadcast dimensions counted
        once), and a pooling's output and the core's rows that wait for a window's last row."""
        if not self.physical_rows:
            return ()
        graph, readers, tensors = self.graph, self.graph.consumer_mask, self.graph.tensors
        _, _, w_out = self._out_shape[core]
        found: dict[object, tuple[int, int, int, int]] = {}
        for e in bits(group & ~(1 << core)):
            node = graph.nodes[e]
            if self.node_weights[e]:  # loaded once and kept (Schedule.resident)
                found[("weights", e)] = (0, 0, 0, self.node_weights[e])
            if node.kind == "pool":
                kh, kw = node.kernel
                found[e] = (1, kh, kw, 1)
                found[("wait", e)] = (1, -kh, -kw, (kh - 1) * w_out)
                continue
            shared = any(
                (group >> tensors[t].producer) & 1 and readers[t] & group == 1 << e
                for t in in_place_inputs(graph, e)
                if tensors[t].producer >= 0
            )
            if not shared:
                found[e] = (1, 1, 1, 1)
            for t in node.inputs:
                p = tensors[t].producer
                if p >= 0 and (group >> p) & 1:
                    continue
                c, h, w = tensors[t].shape
                found[("in", t)] = (int(c > 1), int(h > 1), int(w > 1), 1)
        return tuple(sorted(found.values()))

    def _geometry(self, v: int) -> LayerGeometry:
        """Op ``v``'s layer facts, built once: the layer and each of its epilogues share the
        window sums memoised in it (none depends on the epilogue's room)."""
        hit = self._geometries.get(v)
        if hit is None:
            hit = self._geometries[v] = layer_geometry(
                self.graph, v, self.io_elements(1 << v), self.node_weights[v], self.physical_rows
            )
        return hit

    def layer_tiling(self, v: int) -> LayerTiling:
        """The cheapest intra-layer loop order of op ``v`` alone at this buffer (under the
        ``optimus-single-layer`` convention, Optimus's loop blockings of a dense layer where
        they are cheaper: each is non-increasing in the buffer, so their minimum is).
        Computed once per op: a layer and each of its epilogue groups share it."""
        hit = self._layers.get(v)
        if hit is None:
            hit = self._layers[v] = self._layer_tiling(v)
        return hit

    def _layer_tiling(self, v: int) -> LayerTiling:
        tiled = single_layer_tiling(self._geometry(v), self.b, self.beta)
        if "optimus-single-layer" not in self.accel.conventions:
            return tiled
        graph, node = self.graph, self.graph.nodes[v]
        if channel_role(graph, v) != ChannelRole.MIXING or node.groups != 1:
            return tiled
        c_out, h_out, w_out = graph.out_shape(v)
        c_in = graph.tensors[node.inputs[0]].shape[0]
        if node.kind == "matmul":  # a linear layer: Optimus's 1x1 conv on a 1x1 map
            c_in, h_out, w_out = graph.tensors[node.inputs[0]].size, 1, 1
        blocked = optimus_blocking(
            (c_in, c_out, h_out, w_out),
            node.kernel[0] * node.kernel[1],
            node.stride[0],
            self.node_weights[v],
            self.accel.pe_unroll or 1,
            self.beta // self.b,
        )
        if blocked is None or blocked >= tiled.dram:
            return tiled  # the cheaper of the two keeps the cost monotone in the buffer
        return LayerTiling("optimus-blocking", 1, blocked)

    def monotone_over_downsets(self) -> bool:
        """Whether ``F_beta(S) <= F_beta(G)`` for nested down-sets S of G of any remainder.

        The exact search stops growing a candidate group at the first set that does not fit
        only when this holds (proofs in ``search/exact.py``); the safe default is False.
        """
        return False

    @cached_property
    def tensor_hulls(self) -> tuple[tuple[tuple[int, Group, bool], ...], ...]:
        """Per tensor, ``(consumer, hull, too big)`` for each consumer of a producer that is
        not free alone: the hull is the producer, the consumer and every op on a path between
        them, "too big" when :meth:`buffer_floor` proves no valid group holds it. Kept here,
        once per cost model, because every LNS window's traffic bound reads it."""
        g, free, cons = self.graph, self.free_alone, self.graph.consumer_mask
        out = []
        for ti, t in enumerate(g.tensors):
            p = t.producer
            row = []
            if p >= 0 and not free >> p & 1:
                for c in bits(cons[ti] & ~free):
                    hull = hull_between(g, p, c)
                    row.append((c, hull, self.buffer_floor(hull) >= self.beta))
            out.append(tuple(row))
        return tuple(out)

    def buffer_floor(self, nodes: Group) -> int:
        """Bytes of buffer every group containing ``nodes`` needs at least (0: unknown).

        The exact search proves with it that two ops can never share a group (their hull
        alone does not fit), so the tensor between them is always spilled; a scheme that
        can prove nothing returns 0, which is always sound.
        """
        return 0

    def tool_energy(self) -> ToolEnergy | None:
        """Another tool's own energy model that prices this cost model's groups (the optimus
        profile: Optimus's reported energy, accel_model/optimus_pricing.py), else None: the
        energy objective then reads each group's schedule (accel_model/energy.py)."""
        return None

    def close(self) -> None:  # noqa: B027 (a hook: only an oracle's model holds something)
        """Release what pricing holds (an oracle's program); the built-in models hold
        nothing."""

    def weight_reads_floor(self, nodes: Group, floor: int | None = None) -> tuple[int, int]:
        """How many times at least every valid group containing ``nodes`` reads its weights
        from DRAM (BRR: once per tile when they do not stay beside the rows), and how many
        buffer floors proving it took (work). ``floor``: ``buffer_floor(nodes)`` if known.

        The chain relaxation of the traffic bound charges such a group the reads beyond the
        first; 1, which proves nothing, is always sound.
        """
        return 1, 0

    @abstractmethod
    def _compute(self, group: Group) -> GroupCost:
        """Cost of ``group`` from scratch; called once per distinct group."""

    # -- shared terms (element counts; multiply by self.b for bytes) ------------------
    def io_elements(self, group: Group) -> int:
        """sum |t| over ext_in(g) and ext_out(g), each distinct tensor once."""
        seen_in: set[int] = set()
        total = 0
        ins, outs, near = self._in, self._out, self._io_near
        outside = ~group
        for v in bits(group):
            producers, readers = near[v]
            if producers & outside:
                for ti, producer, size in ins[v]:
                    if (producer < 0 or not (group >> producer) & 1) and ti not in seen_in:
                        seen_in.add(ti)
                        total += size
            if readers & outside:
                for consumers, is_output, size in outs[v]:
                    if is_output or consumers & outside:
                        total += size
        return total

    def weight_elements(self, group: Group) -> int:
        weights = self.node_weights
        return sum(weights[v] for v in bits(group))

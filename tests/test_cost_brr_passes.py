"""BRR's later-pass count and tile footprints, rewritten for speed, against independent forms.

``BRR.recompute_traffic`` splits slice loops with bitmask flood fills memoised across groups
(accel_model/brr.py, ``SliceLoops.pass_masks``); here the split is recomputed from scratch
with sets, one op at a time, as the set-based decomposition did before the bitmask rewrite
(docs/cost-model.md, "Channel slices"), on random groups of random graphs sharing one cost
model (so memo hits are checked too) and on squeeze-excite chains, where loops do split.
``_tallest_tile`` is held to a row-by-row search of the tile footprint on random lines.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_model import Accelerator, make_cost_model
from accel_model.brr import _tallest_tile, external_readers
from accel_model.channels import ChannelRole
from accel_model.schedule import ScheduleError
from accel_model.windows import concat_offset
from fusionplan.ir.graph import Group, Node, OpGraph, Tensor, bits
from tests.random_dags import random_dag


def _whole(cm, group: Group, sliced: Group, again: Group, external) -> dict[int, bool]:
    """External tensor -> held with all its channels, reader by reader."""
    role, pe, out = cm._role, cm.accel.pe_unroll, {}
    for t, readers in external.items():
        w = (
            cm._physical
            and len(readers) > 1
            and any(role[v] == ChannelRole.LOCAL for v, _ in readers)
        )
        for v, _ in readers:
            w = (
                w
                or (role[v] == ChannelRole.BARRIER and cm._barrier_reads_whole)
                or cm._overlap_whole[v]
                or bool(again >> v & 1)
                or (role[v] == ChannelRole.MIXING and bool(sliced >> v & 1))
            )
        c = cm.graph.tensors[t].shape[0]
        out[t] = w or not pe or min(pe, c) >= c
    return out


def _passes(cm, group: Group, sliced: Group, members: set[int], external, held: set[int]):
    """(ops, partial, tensors) of each pass of one loop, with sets and producer walks."""
    graph, tensors = cm.graph, cm.graph.tensors
    desc, pred = graph.descendant_mask, graph.pred_mask
    outside = group & ~sum(1 << m for m in members)
    remaining, earlier, passes = set(members), set(), []
    while remaining:
        run = set(remaining)
        while True:
            partial: set[int] = set()
            concats: set[int] = set()
            for v in sorted(run):
                if not sliced >> v & 1:
                    continue
                for c in bits(graph.succ_mask[v] & group):
                    if c in members:
                        continue
                    is_fill = graph.nodes[c].kind == "concat"
                    if is_fill and concat_offset(graph, c, 0) is not None:
                        concats.add(c)
                    else:
                        partial.add(c)
            reach = 0
            for c in partial | concats:
                reach |= (desc[c] & group) | 1 << c
            for m in run:
                reach |= desc[m] & group
            reach &= outside
            bad = {m for m in run if pred[m] & reach}
            below = 0
            for m in bad:
                below |= desc[m]
            bad |= {m for m in run if below >> m & 1}
            if not bad:
                break
            run -= bad
            if not run:
                raise ScheduleError("a slice loop reads its own output")
        again: set[int] = set()
        stack = list(run)
        while stack:
            for t in graph.nodes[stack.pop()].inputs:
                p = tensors[t].producer
                if p in earlier and p not in again:
                    again.add(p)
                    stack.append(p)
        ops = run | again
        ts = {t for t in held if any(v in ops or v in partial for v, _ in external[t])}
        passes.append((ops, partial, ts))
        earlier |= run
        remaining -= run
    return passes


def recompute_by_sets(cm, group: Group, sliced: Group, split: tuple[Group, ...]):
    """(rerun, reread) counted pass by pass over dicts, from the set-based split."""
    again = cm.slice_rereaders((sliced, sliced), group)[2]
    external = external_readers(cm.graph, group)
    whole = _whole(cm, group, sliced, again, external)
    try:
        passes = []
        for ops in split:
            members = set(bits(ops))
            held = {
                t
                for t, readers in external.items()
                if not whole[t] and any(v in members for v, _ in readers)
            }
            passes += _passes(cm, group, sliced, members, external, held)
    except ScheduleError:
        return 0, 0
    runs: dict[int, int] = {}
    reads: dict[int, int] = {}
    for ops, partial, ts in passes:
        for v in ops | partial:
            runs[v] = runs.get(v, 0) + 1
        for t in ts:
            reads[t] = reads.get(t, 0) + 1
    rerun = sum(cm.node_weights[v] * (n - 1) for v, n in runs.items())
    reread = sum(cm.graph.tensors[t].size * (n - 1) for t, n in reads.items())
    return rerun, reread


def _compare_on(cm, groups) -> int:
    """Assert the bitmask count equals the set-based one on every group and slicing that
    needs a later pass; returns how many such cases were checked."""
    checked = 0
    for g in groups:
        for sliced in cm.slice_rereaders(cm.sliced_ops(g), g)[:2]:
            split = cm._split_loops(g, sliced) if sliced else ()
            if split:
                checked += 1
                expected = recompute_by_sets(cm, g, sliced, split)
                assert cm.recompute_traffic(g, sliced, split) == expected, (g, sliced)
    return checked


def _se_chain(blocks: int) -> OpGraph:
    """Squeeze-excite blocks (conv 16->16, global pool, conv, sigmoid, scale), each scale
    reading the conv that its squeeze reads: a sliced conv's output scaled by what its
    own readers make, the case that splits a slice loop into passes."""
    tensors = [Tensor("x", (16, 8, 8), -1)]
    nodes: list[Node] = []

    def add(op_type, kind, inputs, shape, **kw) -> int:
        tensors.append(Tensor(f"t{len(tensors)}", shape, len(nodes)))
        nodes.append(Node(f"n{len(nodes)}", op_type, kind, inputs, (len(tensors) - 1,), **kw))
        return len(tensors) - 1

    x = 0
    for _ in range(blocks):
        conv = dict(kernel=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1), groups=1)
        y = add("Conv", "conv", (x,), (16, 8, 8), weights=16 * 16 * 9, macs=1, **conv)
        s = add("GlobalAveragePool", "global_pool", (y,), (16, 1, 1), whole_input=True)
        one = dict(kernel=(1, 1), stride=(1, 1), pads=(0, 0, 0, 0), groups=1)
        s = add("Conv", "conv", (s,), (16, 1, 1), weights=16 * 16, macs=1, **one)
        s = add("Sigmoid", "act", (s,), (16, 1, 1))
        x = add("Mul", "eltwise", (y, s), (16, 8, 8))
    return OpGraph.build("se_chain", nodes, tensors, [0], [x])


def test_se_chains_split_and_count_as_the_set_based_passes():
    graph = _se_chain(3)
    n = len(graph)
    for pe in (2, 4, 8):
        cm = make_cost_model(graph, Accelerator(1 << 12, "brr", 1, pe_unroll=pe))
        groups = [(1 << hi) - (1 << lo) for lo in range(n) for hi in range(lo + 1, n + 1)]
        assert _compare_on(cm, groups) > 0  # the loops do split here


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), pe=st.sampled_from([1, 2, 4, 8]))
def test_random_groups_count_as_the_set_based_passes(seed, pe):
    graph = random_dag(seed, max_nodes=12)
    cm = make_cost_model(graph, Accelerator(1 << 14, "brr", 1, pe_unroll=pe))
    rng = random.Random(seed)
    groups = [rng.randrange(1, 1 << len(graph)) for _ in range(60)]
    _compare_on(cm, groups + groups)  # the second round reads the memo


def _footprint_at(lines, parity: int, h: int) -> int:
    """A tile's footprint of ``h`` sink rows, line by line: each row count grows by its
    scale per sink row until it reaches its tensor's height (docs/cost-model.md, "BRR")."""
    return sum(
        line[1 + parity] * min(r + (h - 1) * g, cap) for *line, r, g, cap in lines
    )


@given(
    lines=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 50),
            st.integers(0, 50),
            st.integers(1, 9),
            st.integers(0, 4),
            st.integers(1, 12),
        ),
        max_size=8,
    ),
    parity=st.integers(0, 1),
    height=st.integers(1, 20),
    slack=st.integers(0, 400),
)
def test_the_tallest_tile_is_the_last_height_whose_footprint_fits(lines, parity, height, slack):
    limit = _footprint_at(lines, parity, 1) + slack  # one sink row fits
    h = max(h for h in range(1, height + 1) if _footprint_at(lines, parity, h) <= limit)
    assert _tallest_tile(lines, parity, height, limit) == (h, _footprint_at(lines, parity, h))

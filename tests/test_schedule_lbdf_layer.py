"""LBDF and single-layer schedules against their closed forms and the replay
(docs/cost-model.md, "LBDF", "Single-layer cost", "Schedules and replay").

The LBDF schedule must allot exactly ``F_beta`` and move exactly ``F_D``; a layer or
epilogue schedule must move what the layer cost charges and hold less than the buffer.
Where the closed form is not a schedule that works, the case is pinned as a strict xfail
naming the gap, so fixing the formula flips it.

residual_block (b = 1): x (4,8,8) -> stem 3x3 -> conv1 3x3 -> relu1 -> conv2 3x3 ->
add(conv2, stem) -> relu2; every tensor 4x8x8 = 256 elements, a row 32; each conv 148
weights. conv_chain: x (4,8,8) -> conv1 3x3 (148 w) -> relu -> conv2 3x3 4->8 (296 w).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from accel_model import Accelerator, make_cost_model
from accel_model.base import CostModel
from accel_model.layer import LayerTiling, _channel_reads, tile_counts
from accel_model.lbdf import LBDF
from accel_model.replay import ReplayError, replay
from accel_model.schedule import Region, Schedule, ScheduleError, TrafficKey, build_schedule
from accel_model.schedule_layer import layer_schedule
from accel_model.schedule_lbdf import (
    lbdf_pipeline,
    lbdf_region_rows,
    lbdf_schedule,
    least_rows,
)
from accel_model.windows import input_channels, reduces_over_inputs
from fusionplan.data.zoo import load_zoo_model
from fusionplan.ir.graph import Group, Node, OpGraph, Tensor, bits, mask_of
from tests import numeric_models as nm
from tests.onnx_builders import (
    conv_chain,
    fan_out,
    linear_gelu,
    residual_block,
    se_block,
    split_model,
    strided_chain,
    strided_residual,
    to_graph,
    upsample_chain,
)
from tests.random_dags import random_dag

BUILDERS = {
    f.__name__: f
    for f in (
        conv_chain,
        residual_block,
        se_block,
        strided_chain,
        strided_residual,
        fan_out,
        split_model,
        upsample_chain,
        linear_gelu,
    )
}
BUFFERS = (48, 100, 160, 256, 400, 700, 1200, 2000, 4000, 16000)


def model(graph: OpGraph, beta: int, scheme: str, b: int = 1, profile: str = "fusionplan"):
    return make_cost_model(graph, Accelerator.of(beta, scheme, b, profile=profile))


def named(graph: OpGraph, *names: str) -> Group:
    return mask_of(graph.node_index[n] for n in names)


def connected_groups(graph: OpGraph, size: int = 4) -> list[Group]:
    """Every connected group of up to ``size`` ops, and the whole graph."""
    found: set[Group] = set()
    frontier = {1 << v for v in range(len(graph))}
    for _ in range(size):
        found |= frontier
        grown = set()
        for g in frontier:
            near = 0
            for v in bits(g):
                near |= graph.neighbour_mask[v]
            grown |= {g | 1 << u for u in bits(near & ~g)}
        frontier = grown
    return sorted(found | {graph.all_nodes})


def with_sink_rows(schedule: Schedule, graph: OpGraph, streamed) -> Schedule:
    """The paper profile's LBDF schedule plus one output row per tensor it writes with no
    region (the paper counts none), and an unbounded buffer: what its replay checks."""
    extra = []
    for t in sorted(streamed):
        c, _, w = graph.tensors[t].shape
        extra.append(Region("tensor", t, 1, c, w, c * w))
    return dataclasses.replace(
        schedule, regions=schedule.regions + tuple(extra), buffer_bytes=2**40
    )


# -- LBDF ---------------------------------------------------------------------------------
def test_lbdf_residual_block_by_hand():
    g = to_graph(residual_block())
    cm = model(g, 1 << 20, "lbdf")
    s = lbdf_schedule(cm, g.all_nodes)
    names = {t.name: i for i, t in enumerate(g.tensors)}
    # x: the stem's 3 rows; stem.out: one ring for conv1 (starts at d(stem) = 1, 3 rows)
    # and the add (starts at d(conv2) = 3, 1 row): max(1 + 3, 3 + 1) - 1 = 3 rows;
    # relu1.out: conv2's 3; conv1.out, conv2.out, add.out and the sink y: one row each
    rows = {g.tensors[r.key].name: r.rows for r in s.regions if r.kind == "tensor"}
    assert rows == {
        "x": 3,
        "stem.out": 3,
        "conv1.out": 1,
        "relu1.out": 3,
        "conv2.out": 1,
        "add.out": 1,
        "y": 1,
    }
    assert [r.elements for r in s.regions if r.kind == "weights"] == [148, 148, 148]
    assert s.peak == 444 + 13 * 32 == cm.buffer_bytes(g.all_nodes)  # 860, docs' worked example
    assert len(s.steps) == 8 and s.h_tile == 8 and s.weights_resident
    assert s.dram[TrafficKey("tensor", names["x"])] == 256
    assert s.dram[TrafficKey("tensor", names["y"])] == 256
    assert s.dram_elements == 956 == cm.dram_bytes(g.all_nodes)
    # no region holds a row the pipeline does not need
    assert all(
        least_rows(cm, g.all_nodes, t) == n for t, n in lbdf_region_rows(cm, g.all_nodes).items()
    )
    r = replay(s, g, cm.node_weights)
    assert (r.peak_bytes, r.dram_bytes) == (860, 956)


@pytest.mark.parametrize("profile", ["fusionplan", "paper"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_lbdf_schedules_allot_f_beta_and_move_f_d(name, profile):
    g = to_graph(BUILDERS[name]())
    cm = model(g, 1 << 20, "lbdf", profile=profile)
    assert isinstance(cm, LBDF)
    for group in connected_groups(g):
        s = lbdf_schedule(cm, group)
        _, line, skip = cm.buffer_terms(group)
        rows = lbdf_region_rows(cm, group)
        assert sum(n * g.tensors[t].shape[0] * g.tensors[t].shape[2] for t, n in rows.items()) == (
            line + skip
        )
        assert s.peak_bytes == cm.buffer_bytes(group)
        assert s.dram_bytes == cm.dram_bytes(group)


def check_lbdf_replay(g: OpGraph, cm: LBDF, group: Group) -> None:
    """Default profile: the schedule replays as priced (peak = F_beta, DRAM = F_D) and its
    pipeline never overfills a region. Paper profile: the pipeline fits the paper's rows
    exactly when the replay of its schedule (with the sinks' rows added) does."""
    s = lbdf_schedule(cm, group)
    pipe = lbdf_pipeline(cm, group)
    assert s.peak_bytes == cm.buffer_bytes(group) and s.dram_bytes == cm.dram_bytes(group)
    if cm.physical_rows:
        r = replay(s, g, cm.node_weights)
        assert (r.peak_bytes, r.dram_bytes) == (s.peak_bytes, s.dram_bytes)
        assert not pipe.overflows and not pipe.streamed
        return
    try:
        r = replay(with_sink_rows(s, g, pipe.streamed), g, cm.node_weights)
    except ReplayError as exc:
        assert pipe.overflows, exc
        assert "overflows" in str(exc)
        return
    assert not pipe.overflows
    assert r.dram_bytes == s.dram_bytes
    assert all(pipe.peak_rows[t] <= n for t, n in lbdf_region_rows(cm, group).items())


@pytest.mark.parametrize("profile", ["fusionplan", "paper"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_lbdf_schedules_replay(name, profile):
    g = to_graph(BUILDERS[name]())
    cm = model(g, 1 << 20, "lbdf", profile=profile)
    for group in connected_groups(g):
        check_lbdf_replay(g, cm, group)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), paper=st.booleans())
def test_lbdf_random_groups_replay(seed, paper):
    g = random_dag(seed, max_nodes=10)
    cm = model(g, 1 << 30, "lbdf", profile="paper" if paper else "fusionplan")
    for group in connected_groups(g, 3):
        check_lbdf_replay(g, cm, group)


def test_lbdf_pipeline_refuses_a_line_buffer_short_of_the_window():
    # conv_chain with conv1's input x given 2 rows for a 3-row window: no order fits
    g = to_graph(conv_chain())
    cm = model(g, 1 << 20, "lbdf")
    rows = lbdf_region_rows(cm, g.all_nodes)
    x = g.nodes[0].inputs[0]
    pipe = lbdf_pipeline(cm, g.all_nodes, {**rows, x: 2})
    assert [(o.tensor, o.allotted) for o in pipe.overflows] == [(x, 2)]
    assert least_rows(cm, g.all_nodes, x) == 3


def test_lbdf_sink_rows_have_a_region():
    # conv_chain: the sink conv2's output y (8,8,8) holds one row of 8 * 8 = 64 while it is
    # written; F_beta = 444 weights + x 3 * 32 + conv1.out 32 + relu.out 3 * 32 + y 64 = 732
    g = to_graph(conv_chain())
    cm = model(g, 1 << 20, "lbdf")
    y = g.nodes[2].outputs[0]
    assert lbdf_region_rows(cm, g.all_nodes)[y] == 1
    r = replay(lbdf_schedule(cm, g.all_nodes), g, cm.node_weights)
    assert (r.peak_bytes, r.dram_bytes) == (732, 256 + 512 + 444)


def external_read_at_two_delays(profile: str) -> tuple[LBDF, Group, int]:
    """random_dag(35), group {n7 concat, n8 conv 5x5, n9 add}: tensor t4 (8x4x4, from
    outside) is read by the concat (starts at 0) and by the add, which starts at the 5x5
    conv's delay 0 + 2 = 2."""
    g = random_dag(35)
    cm = model(g, 1 << 20, "lbdf", profile=profile)
    return cm, named(g, "n7", "n8", "n9"), g.nodes[g.node_index["n9"]].inputs[1]


def test_lbdf_external_input_read_at_two_delays():
    # t4's ring spans the add's row and the two the concat has read since:
    # max(0 + 1, 2 + 1) - min(0, 2) = 3 rows, the fewest the pipeline runs with
    cm, group, t4 = external_read_at_two_delays("fusionplan")
    assert lbdf_region_rows(cm, group)[t4] == 3 == least_rows(cm, group, t4)
    assert not lbdf_pipeline(cm, group).overflows


@pytest.mark.xfail(
    strict=True,
    reason="the paper's LBDF gives an input from outside no skip rows: 't4' needs 3 rows, "
    "the paper's count allots 2 (kept: its digests are pinned)",
)
def test_lbdf_paper_external_input_read_at_two_delays():
    cm, group, t4 = external_read_at_two_delays("paper")
    assert lbdf_region_rows(cm, group)[t4] == 2
    assert least_rows(cm, group, t4) == 3
    assert not lbdf_pipeline(cm, group).overflows


def test_lbdf_squeeze_excite_with_an_external_input():
    # se_block without its conv: conv.out (8,8,8) comes from outside, read by the pool
    # (starts at 0) and the multiply (starts at d(sigmoid) = 0 + H 8 = 8):
    # min(8, max(0 + 1, 8 + 1) - 0) = 8 rows, the whole map, as the pipeline needs
    g = to_graph(se_block())
    cm = model(g, 1 << 20, "lbdf")
    group = g.all_nodes & ~named(g, "conv")
    x = g.nodes[g.node_index["conv"]].outputs[0]
    assert (lbdf_region_rows(cm, group)[x], least_rows(cm, group, x)) == (8, 8)
    assert not lbdf_pipeline(cm, group).overflows
    r = replay(lbdf_schedule(cm, group), g, cm.node_weights)
    assert (r.peak_bytes, r.dram_bytes) == (cm.buffer_bytes(group), cm.dram_bytes(group))


def down_up_join() -> OpGraph:
    """x (4,16,16) -> c0 3x3 -> a -> down 1x1/2 -> b (4,8,8) -> mid 3x3 -> c -> up nearest x2
    -> d (4,16,16) -> add(d, a): a U-Net block's skip joined with its down-up path."""
    t = [Tensor("x", (4, 16, 16), -1)]
    nodes = []

    def op(name, op_type, kind, inputs, shape, **attrs):
        t.append(Tensor(name + ".out", shape, len(nodes)))
        nodes.append(Node(name, op_type, kind, inputs, (len(t) - 1,), **attrs))
        return len(t) - 1

    a = op("c0", "Conv", "conv", (0,), (4, 16, 16), kernel=(3, 3), pads=(1, 1, 1, 1), weights=148)
    b = op("down", "Conv", "conv", (a,), (4, 8, 8), stride=(2, 2), weights=20)
    c = op("mid", "Conv", "conv", (b,), (4, 8, 8), kernel=(3, 3), pads=(1, 1, 1, 1), weights=148)
    d = op("up", "Resize", "resize", (c,), (4, 16, 16))
    e = op("add", "Add", "eltwise", (d, a), (4, 16, 16))
    return OpGraph.build("down_up", nodes, t, [0], [e])


def test_lbdf_upsampling_join_needs_rescaled_delays():
    # on a clock of 16 ticks per pass (a row of x, a, d: 1 tick; of b, c: 2): d(c0) = 1,
    # down 1 (its row o reads a row 2o), mid 1 + one row of b = 3, up 3 (row o reads c row
    # o // 2), the add fires row o at tick 3 + o; a's row o + 2 is made by then (tick 3 + o)
    # and the add still reads row o: 3 rows (the old per-row lags counted 2)
    g = down_up_join()
    cm = model(g, 1 << 20, "lbdf")
    a = g.nodes[0].outputs[0]
    assert lbdf_region_rows(cm, g.all_nodes)[a] == least_rows(cm, g.all_nodes, a) == 3
    assert not lbdf_pipeline(cm, g.all_nodes).overflows


def scheme_priced(cm: CostModel, groups) -> list[Group]:
    return [g for g in groups if cm.priced_order(g)[0] == "scheme"]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), beta=st.sampled_from((400, 2000, 16000, 1 << 30)))
def test_lbdf_default_schedules_replay_as_priced(seed, beta):
    """Every connected group the default LBDF prices by its scheme replays with DRAM = F_D
    and peak = F_beta, within the buffer when it is valid."""
    g = random_dag(seed, max_nodes=10)
    cm = model(g, beta, "lbdf")
    for group in scheme_priced(cm, connected_groups(g, 4)):
        cost = cm.cost(group)
        s = lbdf_schedule(cm, group)
        if not cost.valid:  # a group over the buffer: replay its schedule unbounded
            s = dataclasses.replace(s, buffer_bytes=2**40)
        r = replay(s, g, cm.node_weights)
        assert (r.dram_bytes, r.peak_bytes) == (cost.dram, cost.buffer), group


# -- single layers -------------------------------------------------------------------------
def layer_groups(cm: CostModel, groups) -> list[tuple[Group, str]]:
    return [(g, k) for g in groups for k in [cm.priced_order(g)[0]] if k in ("layer", "epilogue")]


def tiling_of(cm: CostModel, group: Group) -> LayerTiling:
    kind, core = cm.priced_order(group)
    return cm.layer_tiling(core) if kind == "layer" else cm.epilogue_tiling(group, core)


def check_layer(g: OpGraph, cm: CostModel, group: Group, kind: str) -> None:
    """A layer or epilogue schedule moves what the cost charges and holds what it reports
    (docs/cost-model.md, "Single-layer cost"), under the buffer; the replay agrees."""
    t = tiling_of(cm, group)
    s = layer_schedule(cm, group)
    assert s.order == f"{kind}:{t.order}" and s.core == cm.priced_order(group)[1]
    cost = cm.cost(group)
    assert (s.dram_bytes, s.peak_bytes) == (cost.dram, cost.buffer)
    assert cost.buffer == t.held * cm.b < cm.beta
    r = replay(s, g, cm.node_weights)
    assert (r.dram_bytes, r.peak_bytes) == (s.dram_bytes, s.peak_bytes)


def scheduled(cm: CostModel, group: Group) -> bool:
    """Priced by an order whose schedule fits the buffer, small enough to replay here:
    ``direct`` (one output element a step) only up to 600 output elements."""
    t = tiling_of(cm, group)
    return t.order != "direct" or (t.held * cm.b < cm.beta and t.repeats <= 600)


@pytest.mark.parametrize("b", [1, 2])
@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_layer_schedules_move_the_layer_cost(name, scheme, b):
    g = to_graph(BUILDERS[name]())
    seen = 0
    for beta in BUFFERS:
        cm = model(g, beta, scheme, b)
        singles = [1 << v for v in range(len(g))]
        for group, kind in layer_groups(cm, singles):
            if scheduled(cm, group):
                check_layer(g, cm, group, kind)
                seen += 1
    assert seen or name in ("linear_gelu", "split_model", "fan_out", "upsample_chain")


# derandomized: the same examples every run
@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), beta=st.sampled_from(BUFFERS), b=st.sampled_from([1, 2]))
# x + conv(x): an epilogue reading its core's input is not priced as one (it moved 9000 B
# where the epilogue formula charged 7976)
@example(seed=2406, beta=400, b=1)
def test_layer_and_epilogue_groups_of_random_graphs_replay_exactly(seed, beta, b):
    # every layer- or epilogue-priced group of up to 3 ops: replayed DRAM = cost.dram and
    # peak = cost.buffer < beta (the default profile)
    g = random_dag(seed, max_nodes=8)
    for scheme in ("lbdf", "brr"):
        cm = model(g, beta, scheme, b)
        for group, kind in layer_groups(cm, connected_groups(g, 3)):
            if scheduled(cm, group):
                check_layer(g, cm, group, kind)


@pytest.mark.parametrize("buffer", [1 << 15, 1 << 16])
def test_layer_and_epilogue_groups_of_a_zoo_model_replay_exactly(buffer):
    # MobileNetV2's single layers and their epilogue pairs (depthwise, pointwise, residual
    # adds, the classifier) under both schemes, 2 bytes per element
    graph = load_zoo_model("mobilenet_v2")
    for scheme in ("lbdf", "brr"):
        cm = make_cost_model(graph, Accelerator.of(buffer, scheme, 2))
        pairs = [1 << v | 1 << u for v in range(len(graph)) for u in bits(graph.succ_mask[v])]
        groups = [1 << v for v in range(len(graph))] + pairs
        found = layer_groups(cm, groups)
        assert found
        for group, kind in found:
            if scheduled(cm, group):
                check_layer(graph, cm, group, kind)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_channel_sums_match_the_read_windows(seed):
    # the layer's closed-form channel sums over output-channel tiles equal the schedule's
    # windows (accel_model/windows.py), summed tile by tile
    g = random_dag(seed, max_nodes=10)
    cm = model(g, 1 << 20, "brr")
    for v, node in enumerate(g.nodes):
        geo = cm._geometry(v)
        c_out = geo.out_channels
        mixing = reduces_over_inputs(g, v)
        for i in range(len(node.inputs)):
            for m in tile_counts(c_out):
                tiles = [(a, min(a + m, c_out)) for a in range(0, c_out, m)]
                reads = [input_channels(g, v, i, t) for t in tiles]
                per_tile = sum(b - a for a, b in reads)
                ones = [input_channels(g, v, i, (o, o + 1)) for o in range(c_out)]
                per_channel = per_tile if mixing else sum(b - a for a, b in ones)
                most = max(b - a for a, b in reads)
                assert _channel_reads(geo, i, m) == (per_channel, per_tile, most)


def test_channel_passes_by_hand():
    # docs' worked example: conv_chain conv2 alone, (4,8,8) -> (8,8,8), 296 weights, 200 B:
    # passes of m = 2 channels stage 2 * 37 weights, x's 3-row window (96) and one output row
    # of 2 channels (16): 74 + 96 + 16 = 186 = m (w_c + W_out) + f(1) - r_out; 4 passes read
    # the input 4 times: 768 + 296 + 3 * 256 = 1832
    g = to_graph(conv_chain())
    cm = model(g, 200, "lbdf")
    conv2 = g.node_index["conv2"]
    t = cm.layer_tiling(conv2)
    assert (t.order, t.channels, t.held) == ("channel-passes", 2, 186)
    s = layer_schedule(cm, 1 << conv2)
    assert [(r.kind, r.elements) for r in s.regions] == [
        ("weights", 74),
        ("tensor", 96),
        ("tensor", 16),
    ]
    assert len(s.steps) == 4 and not s.weights_resident
    assert s.dram[TrafficKey("weights", conv2)] == 296
    assert s.dram[TrafficKey("tensor", g.nodes[conv2].inputs[0])] == 4 * 256
    r = replay(s, g, cm.node_weights)
    assert (r.dram_bytes, r.peak_bytes) == (1832, 186) == tuple(cm.cost(1 << conv2)[:2])[::-1]


# -- epilogues -----------------------------------------------------------------------------
def test_epilogue_add_by_hand():
    # residual_block [stem, add] under BRR at 256 B: the stem's channel passes of 3 channels
    # (weights 3 * 37 = 111, x's 3-row window 96, one output row of 3 channels 24); the add
    # writes its row over the stem's (in place) and reads conv2.out's block from DRAM (24)
    g = to_graph(residual_block())
    cm = model(g, 256, "brr")
    group = named(g, "stem", "add")
    assert cm.priced_order(group) == ("epilogue", g.node_index["stem"])
    s = layer_schedule(cm, group)
    shape = [(r.kind, r.elements) for r in s.regions]
    assert shape == [("weights", 111), ("tensor", 96), ("tensor", 24), ("tensor", 24)]
    assert s.regions[2].aliases == g.nodes[g.node_index["add"]].outputs
    assert s.in_place == 1 << g.node_index["add"]
    assert s.dram_bytes == cm.dram_bytes(group) == 1428
    r = replay(s, g, cm.node_weights)
    assert (
        (r.dram_bytes, r.peak_bytes)
        == (1428, 255)
        == (cm.dram_bytes(group), cm.buffer_bytes(group))
    )


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_epilogue_schedules_move_the_epilogue_cost(name, scheme):
    g = to_graph(BUILDERS[name]())
    for beta in BUFFERS:
        for b in (1, 2):
            cm = model(g, beta, scheme, b)
            for group, kind in layer_groups(cm, connected_groups(g, 3)):
                if kind == "epilogue" and scheduled(cm, group):
                    check_layer(g, cm, group, kind)


def test_output_tiles_count_only_real_rows():
    # conv_chain conv1 (4,8,8) -> (4,8,8), 3x3 pad 1, 148 weights, alone at 160 B: output
    # tiles of 2 channels x 5 rows (the fit test: 18 weights, 80 partial sums, a 7 x 8
    # window, 154 < 160). Row tiles 0..5 and 5..8 read input rows 0..6 and 4..8 (the padding
    # rows do not exist): 10 rows of 8 per input channel, 4 channels, 2 channel tiles: 640;
    # the weights twice: 296; io without the input 256: 1192 (the (h - 1) S + K rows, 7 + 5,
    # would charge 1320). It holds 18 + 80 + the largest window 6 x 8 = 146.
    g = to_graph(conv_chain())
    cm = model(g, 160, "lbdf")
    conv1 = 1 << g.node_index["conv1"]
    s = layer_schedule(cm, conv1)
    assert (s.dram_elements, s.peak) == (1192, 146)
    assert tuple(cm.cost(conv1)[:2]) == (146, 1192)
    check_layer(g, cm, conv1, "layer")


def test_streaming_holds_what_it_counts():
    # conv_chain conv1 alone at 100 B: one output channel's 8 x 8 partial sums, the 9
    # weights of one (output, input) channel pair and the input row being scattered (8):
    # 64 + 9 + 8 = 81 < 100, one band; each output channel reads the 4 input channels once:
    # 256 (output) + 148 + 4 * 4 * 64 = 1428
    g = to_graph(conv_chain())
    cm = model(g, 100, "lbdf")
    conv1 = g.node_index["conv1"]
    t = cm.layer_tiling(conv1)
    assert (t.order, t.held, t.dram) == ("streaming", 81, 1428)
    check_layer(g, cm, 1 << conv1, "layer")


def test_weightless_streaming_has_a_fit_test():
    # se_block's global pool (8,8,8) -> (8,1,1): at 48 B even one channel's window (64) and
    # its output (1) do not fit: no streaming schedule. Direct folds one input row of its
    # channel (8) at a time into each output element (1): holds 9, reads every input once:
    # io 520 (the old convention charged a second pass, 1032, with no schedule)
    g = to_graph(se_block())
    gap = g.node_index["gap"]
    cm = model(g, 48, "lbdf")
    t = cm.layer_tiling(gap)
    assert (t.order, t.dram, t.held) == ("direct", 520, 9)
    if cm.priced_order(1 << gap)[0] == "layer":
        check_layer(g, cm, 1 << gap, "layer")
    # at 70 B one channel at a time fits: 64 + 1 = 65, every input element read once: io
    t = model(g, 70, "lbdf").layer_tiling(gap)
    assert (t.order, t.dram, t.held) == ("streaming", 520, 65)


def test_attention_streams_one_head_at_a_time():
    # transformer_block's 'qk' (Q (2,8,8) x K^T (16,8,1) -> (2,8,8), 2 heads of d = 8) at 2
    # B/element: head h reads Q's channel h and K^T's channels 8h..8h+8 (windows.batch_channels),
    # and every output row reads them whole. One head at a time, one output row over Q_h and
    # K^T_h held whole: 64 + 64 + 8 = 136 (272 B) reads each once: io. At 256 B nothing but
    # direct fits; at 300 B one head does (holding both heads' operands, 272 elements, did not)
    g = to_graph(nm.transformer_block())
    qk = g.node_index["qk"]
    assert model(g, 256, "lbdf", 2).layer_tiling(qk).order == "direct"
    for buffer in (300, 600):
        cm = model(g, buffer, "lbdf", 2)
        t = cm.layer_tiling(qk)
        assert (t.order, t.held, t.dram, t.channels) == ("streaming", 136, 128 + 128 + 128, 1)
        if cm.priced_order(1 << qk)[0] == "layer":
            check_layer(g, cm, 1 << qk, "layer")


def test_direct_has_a_schedule():
    # conv_chain conv1 (4,8,8) -> (4,8,8), 3x3 pad 1, 148 weights, alone at 16 B: output
    # tiles of one channel and one position hold 9 weights + 1 sum + a 3x3 window = 19, too
    # many. Direct: one output element at a time, its 37 weights streamed, its window read
    # one input row of one input channel (3 columns) at a time: it holds 1 + 3 = 4. Each
    # element reads 4 channels x rows x columns of its clipped window: per channel
    # 22 x 22 = 484 (rows 2, 3 x 6, 2), 4 x 4 x 484 = 7744; weights 37 x 256 = 9472; the
    # output 256: 17472 (the old charge, io 512 + 2 x 37 x 256 = 19456, was no schedule)
    g = to_graph(conv_chain())
    cm = model(g, 16, "lbdf")
    t = cm.layer_tiling(0)
    assert (t.order, t.repeats, t.dram, t.held) == ("direct", 256, 17472, 4)
    s = layer_schedule(cm, 1)
    assert [(r.kind, r.elements) for r in s.regions] == [("tensor", 3), ("tensor", 1)]
    check_layer(g, cm, 1, "layer")
    # a buffer of 4 B holds no output element with its row segment: no loop order runs it
    cm = model(g, 4, "lbdf")
    assert cm.layer_tiling(0)[:2] == ("direct", 256) and cm.cost(1).buffer == 4
    with pytest.raises(ScheduleError, match="no loop order runs it"):
        layer_schedule(cm, 1)


def test_epilogue_fits_the_buffer():
    # strided_residual [conv, add] under BRR at 160 B: conv (4,4,4) -> (4,4,4), 148 weights;
    # the add reads the pool's block from DRAM beside conv's, so the fit test counts it:
    # channel passes of 2 channels hold 2 * 37 weights, the 3-row window of the input
    # (3 * 4 * 4 = 48), one output row of 2 channels (8) and the pool's matching block (8):
    # 138 < 160
    g = to_graph(strided_residual())
    cm = model(g, 160, "brr")
    group = named(g, "conv", "add")
    s = layer_schedule(cm, group)
    assert s.peak == 138 == cm.cost(group).buffer
    check_layer(g, cm, group, "epilogue")


def test_pooling_epilogue_holds_its_waiting_row():
    # pooling_epilogues [conv1, relu, maxpool 2x2/2] under BRR at 1500 B: conv1 (8,16,16) ->
    # (16,16,16), 1168 weights (73 per output channel). Channel passes of m channels hold
    # m * 73 weights, x's 3-row window (3 * 8 * 16 = 384), conv1's output row of m channels
    # with the row before it waiting for the pool's second row (2 * 16 m, relu in place) and
    # the pool's output row (8 m): 73 m + 48 m + 384 < 1500 gives m = 9: 657 + 384 + 288 + 72
    # = 1401. Two passes read x twice: conv1 alone moves 2048 + 4096 + 1168 + 2048 = 9360;
    # the group swaps conv1's output (4096) for the pool's (16 * 8 * 8 = 1024): 6288
    g = to_graph(nm.pooling_epilogues())
    cm = model(g, 1500, "brr")
    group = named(g, "conv1", "relu", "maxpool")
    t = cm.epilogue_tiling(group, g.node_index["conv1"])
    assert (t.order, t.channels, t.held, t.dram) == ("channel-passes", 9, 1401, 9360)
    s = layer_schedule(cm, group)
    assert [r.elements for r in s.regions] == [657, 384, 288, 72]
    assert tuple(cm.cost(group)[:2]) == (1401, 6288)
    check_layer(g, cm, group, "epilogue")


def test_epilogue_weights_stay_resident():
    # linear_gelu [fc, bias] under BRR at 160 B, 2 B/element: fc's output tiles (two tiles
    # of 8 channels x all 4 token rows) stream its 128 weights once, 64 per tile; the bias's
    # 16 weights are read once and stay (Schedule.resident), as W(G - core) charges them
    g = to_graph(linear_gelu())
    cm = model(g, 160, "brr", 2)
    group = named(g, "fc", "bias")
    fc, bias = g.node_index["fc"], g.node_index["bias"]
    s = layer_schedule(cm, group)
    assert s.resident == 1 << bias and len(s.steps) == 2
    r = replay(s, g, cm.node_weights)
    assert r.per_tensor[TrafficKey("weights", bias)] == 2 * 16
    assert r.per_tensor[TrafficKey("weights", fc)] == 2 * 128
    assert r.dram_bytes == s.dram_bytes == cm.dram_bytes(group)


def test_optimus_profile_layers_have_no_builder():
    # the optimus profile prices a layer by Optimus's own blockings, not LayerTiling's order
    g = to_graph(conv_chain())
    cm = model(g, 400, "brr", profile="optimus")
    assert cm.priced_order(1) == ("layer", 0)
    with pytest.raises(ScheduleError, match="Optimus's own loop blockings"):
        layer_schedule(cm, 1)


def test_optimus_profile_fused_groups_have_no_schedule():
    # Optimus's fused-group formulas read no halo: build_schedule names that, instead of
    # laying out a BRR schedule of other traffic that the replay would then reject
    g = to_graph(conv_chain())
    cm = model(g, 1 << 20, "brr", profile="optimus")
    assert cm.priced_order(7) == ("scheme", -1)
    with pytest.raises(ScheduleError, match="Optimus's own formulas"):
        build_schedule(cm, 7)

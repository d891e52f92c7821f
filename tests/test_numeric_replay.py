"""Numeric proof that schedules compute their graph with the traffic they claim
(docs/cost-model.md, "Numeric replay"; accel_model/numeric).

Each schedule runs on real values, every compute reading only what the schedule put in the
buffer; the graph outputs assembled from the groups' DRAM writes must equal onnxruntime's
(relative error <= 1e-5, float32 in onnxruntime, float64 here) and the unscheduled float64
evaluation (1e-9), and each group must move exactly the elements its cost model charges.
Hand-built schedules show that the replay fails where a schedule is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from accel_model import Accelerator, make_cost_model
from accel_model.numeric import Dram, NumericGraph, replay_plan, replay_schedule
from accel_model.numeric.layout import Layout
from accel_model.replay import ReplayError
from accel_model.rows import row_window
from accel_model.schedule import (
    LAYER,
    SCHEDULE_BUILDERS,
    Compute,
    Region,
    Schedule,
    ScheduleError,
    Step,
    Transfer,
    build_schedule,
    traffic,
)
from fusionplan.app.api import plan
from fusionplan.ir.graph import bits
from tests import numeric_models as nm
from tests import onnx_builders as ob

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "conv_chain": ob.conv_chain,
    "residual_block": lambda: ob.residual_block(16),
    "se_block": ob.se_block,
    "strided_chain": ob.strided_chain,
    "fan_out": ob.fan_out,
    "strided_residual": ob.strided_residual,
    "split": ob.split_model,
    "dw_gap_gemm": ob.macs_model,
    "channel_shuffle": ob.channel_shuffle,
    "linear_gelu": ob.linear_gelu,
    "depthwise_separable": nm.depthwise_separable,
    "inverted_residual_se": nm.inverted_residual_se,
    "pooling_epilogues": nm.pooling_epilogues,
    "overlapping_maxpool": nm.overlapping_maxpool,
    "inception": nm.inception,
    "dilated_grouped": nm.dilated_grouped,
    "bottleneck_bn": nm.bottleneck_bn,
    "two_stage_residual": nm.two_stage_residual,
    "classifier_heads": nm.classifier_heads,
    "conv1d_chain": nm.conv1d_chain,
    "encoder_gelu": nm.transformer_block,
    "encoder_relu": lambda: nm.transformer_block("relu"),
    "mlp_block": nm.mlp_block,
    "attention_core": nm.attention_core,
    "channels_last_block": nm.channels_last_block,
    "class_token": ob.computed_expand,
}
"""26 graphs, channels <= 64 and maps <= 16x16 (tokens <= 16)."""

SCHEMES = {"lbdf": {}, "brr": {"pe_unroll": 4}}
BUFFERS = (2048, 8192)
"""Bytes (1 byte per element) where the graphs fuse: whole-graph groups with resident
weights at 8 KB for most, streamed weights and several groups at 2 KB."""


@cache
def model(name: str) -> onnx.ModelProto:
    return nm.fan_in_scaled(MODELS[name]())


@cache
def numeric(name: str) -> NumericGraph:
    return NumericGraph.from_model(model(name), name)


@cache
def feeds(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    weights = {i.name for i in model(name).graph.initializer}
    return {
        vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for vi in model(name).graph.input
        if vi.name not in weights
    }


@cache
def onnxruntime_outputs(name: str) -> dict[str, np.ndarray]:
    proto = model(name)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = session.run(None, feeds(name))
    return {o.name: value for o, value in zip(proto.graph.output, outs, strict=True)}


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest absolute difference over the reference's largest magnitude."""
    return float(np.abs(got.reshape(want.shape) - want).max() / np.abs(want).max())


# ----------------------------------------------------------------------- kernels, layouts
@pytest.mark.parametrize("name", sorted(MODELS))
def test_unscheduled_evaluation_matches_onnxruntime(name):
    """The kernels and layouts alone: every op evaluated whole, in graph order."""
    net = numeric(name)
    values = net.forward(feeds(name))
    for out, want in onnxruntime_outputs(name).items():
        t = net.tensor_index[net.sources[out]]
        assert relative_error(net.to_onnx(t, values[t]), want) <= 1e-5


def test_layouts_address_onnx_elements_by_row():
    """(C, H, W) element (c, h, w) is the ONNX element the docs' normalisation names."""
    x = np.arange(2 * 3 * 4 * 5, dtype=float)
    spatial = Layout.of((1, 3, 4, 5), 2)  # (N, C, H, W)
    tokens = Layout.of((1, 4, 3), 1)  # (1, T, D): D channels, T rows
    seq_first = Layout.of((4, 1, 3), 0)  # (T, 1, D)
    heads = Layout.of((1, 2, 4, 3), 2)  # (1, heads, T, d)
    signal = Layout.of((1, 3, 4), 2)  # (N, C, L): rows last
    channels_last = Layout.of((1, 4, 5, 3), 1)  # (1, H, W, C)
    cases = [
        (spatial, (3, 4, 5), lambda a, c, h, w: a[0, c, h, w]),
        (tokens, (3, 4, 1), lambda a, c, h, w: a[0, h, c]),
        (seq_first, (3, 4, 1), lambda a, c, h, w: a[h, 0, c]),
        (heads, (2, 4, 3), lambda a, c, h, w: a[0, c, h, w]),
        (signal, (3, 4, 1), lambda a, c, h, w: a[0, c, h]),
        (channels_last, (3, 4, 5), lambda a, c, h, w: a[0, h, w, c]),
    ]
    for layout, shape, element in cases:
        assert layout.shape == shape
        onnx_array = x[: np.prod(layout.dims)].reshape(layout.dims)
        chw = layout.to_chw(onnx_array)
        for c, h, w in np.ndindex(*shape):
            assert chw[c, h, w] == element(onnx_array, c, h, w)
        assert np.array_equal(layout.to_onnx(chw), onnx_array)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_weight_slices_add_up_to_the_importers_weights(name):
    """Weight elements per output channel, summed over the channels, are the importer's
    ``Node.weights`` (which a weight transfer of a channel slice is checked against)."""
    net = numeric(name)
    for v, node in enumerate(net.graph.nodes):
        c_out = net.graph.out_shape(v)[0]
        assert net.weight_elements(v, (0, c_out)) == node.weights, node.name
        if node.kind == "conv" and c_out > 1:
            half = net.weight_elements(v, (0, c_out // 2))
            assert half == node.weights * (c_out // 2) // c_out, node.name


# ----------------------------------------------------------------------- plans
def planned(name: str, scheme: str, buffer: int, **settings):
    p = plan(numeric(name).graph, buffer, scheme, **{**SCHEMES[scheme], **settings})
    for group in p.groups:
        kind, _ = p.cost_model.priced_order(group)
        builder = p.cost_model.name if kind == "scheme" else LAYER
        if kind != "free" and builder not in SCHEDULE_BUILDERS:
            pytest.skip(f"no schedule builder for {builder} loop orders yet")
    return p


def check_plan(name: str, scheme: str, buffer: int, **settings) -> list[Schedule]:
    """Replay every group of the plan found for ``name``; return the schedules."""
    p = planned(name, scheme, buffer, **settings)
    net, cm = numeric(name), p.cost_model
    replay = replay_plan(net, cm, p.groups, feeds(name))
    for out, want in onnxruntime_outputs(name).items():
        assert relative_error(replay.outputs[out], want) <= 1e-5, out
    exact = net.forward(feeds(name))
    for t in net.graph.outputs:
        got = replay.outputs[net.graph.tensors[t].name]
        assert np.allclose(got, net.to_onnx(t, exact[t]), rtol=1e-9, atol=1e-12)
    for group, run in zip(p.groups, replay.groups, strict=True):
        moved = sum(run.traffic.values()) * cm.b
        assert moved == cm.cost(group).dram, (run.schedule.order, bits(group))
    return [run.schedule for run in replay.groups]


KNOWN: dict[tuple[str, str, int], str] = {}
TRAFFIC_DIFFERS: dict[tuple[str, str, int], str] = {}
"""Plans whose schedules compute the graph but move other traffic than their cost model
charges (more: a cost below its schedule; less: a closed form above it), or that a replay
rule refuses on the way (a recompute from weights streamed once)."""

"""Plans whose schedules do not compute the graph today (the replay's counterexample, or a
builder that cannot write them out): strict, so a fixed builder or cost model flips its case
to a failure until it is removed."""


def plan_cases(buffers):
    """Every graph under both schemes at ``buffers``, the known counterexamples marked,
    then the plans known to move more than charged."""
    keys = [(n, s, b) for n in sorted(MODELS) for s in sorted(SCHEMES) for b in buffers]
    for key in keys + sorted(set(TRAFFIC_DIFFERS) - set(keys)):
        marks = []
        if key in KNOWN:
            broken = (ReplayError, ScheduleError)
            marks.append(pytest.mark.xfail(raises=broken, strict=True, reason=KNOWN[key]))
        if key in TRAFFIC_DIFFERS:
            reason = TRAFFIC_DIFFERS[key]
            differs = (AssertionError, ReplayError)
            marks.append(pytest.mark.xfail(raises=differs, strict=True, reason=reason))
        yield pytest.param(*key, marks=marks, id="-".join(map(str, key)))


@pytest.mark.parametrize(("name", "scheme", "buffer"), list(plan_cases(BUFFERS)))
def test_plan_replays_the_graph(name, scheme, buffer):
    check_plan(name, scheme, buffer)


@pytest.mark.bench
@pytest.mark.parametrize("b", [1, 2])
@pytest.mark.parametrize("pe", [4, 8])
@pytest.mark.parametrize("buffer", [512, 1024, 2048, 4096, 8192, 32768, 262144])
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_plan_replays_the_graph_sweep(name, scheme, buffer, pe, b):
    if scheme == "lbdf" and pe != 4:
        pytest.skip("LBDF does not slice channels")
    check_plan(name, scheme, buffer, pe_unroll=pe, bytes_per_element=b)


def test_the_plans_exercise_every_loop_order():
    """Among the default cases: resident and streamed BRR with and without channel slices,
    LBDF, and single layers' row bands and output tiles."""
    seen = set()
    for name, scheme, buffer in [
        ("inception", "brr", 8192),
        ("fan_out", "brr", 2048),
        ("mlp_block", "brr", 2048),
        ("inception", "lbdf", 8192),
        ("pooling_epilogues", "lbdf", 2048),
        ("mlp_block", "lbdf", 2048),
    ]:
        for s in check_plan(name, scheme, buffer):
            seen.add((s.order, bool(s.sliced)))
    assert {("brr-resident", True), ("brr-resident", False), ("brr-streamed", True)} <= seen
    assert {("lbdf", False), ("layer:row-bands", False), ("layer:output-tiles", False)} <= seen


def test_attention_matmuls_computed_one_head_at_a_time_give_onnxruntimes_output():
    """attention_core under BRR at 300 B: Q.K^T and P.V each run alone, streaming one head
    at a time over that head's own channels (windows.batch_channels); the groups' outputs,
    computed from only what the schedules read, equal onnxruntime's."""
    schedules = check_plan("attention_core", "brr", 300)
    p = planned("attention_core", "brr", 300)
    g = p.cost_model.graph
    for op in ("qk", "pv"):
        v = g.node_index[op]
        assert 1 << v in p.result.best.groups
        t = p.cost_model.layer_tiling(v)
        assert (t.order, t.channels) == ("streaming", 1)
    assert sum(s.order == "layer:streaming" for s in schedules) >= 2


def test_the_class_tokens_concat_holds_the_two_rows_its_window_spans():
    """class_token under BRR (pe 4, 2048 B, b = 1): one group {proj, concat, add, ln},
    weights 64 + 8 + 40 + 16 = 128 resident. The Concat makes 5 token rows from proj's 4
    (the class token, its weight, is row 0): output row r reads proj rows floor(4r/5) ..
    ceil(4(r+1)/5) - 1, two rows for r = 1..3 (row r - 1 among them), so K = ceil((4 + 5 -
    1)/5) = 2, not max(1, S) = 1. proj keeps 2 rows of its 4-channel slice (8), x the 2 rows
    they read (16), the concat 1 row of 8 (the add in place over it), ln 1 row (8): 40,
    F_beta = 168; F_D = x 32 + y 40 + weights 128 = 200. Every pass of the concat over a
    slice of proj makes its class-token row, which reads no lane of proj."""
    p = planned("class_token", "brr", 2048)
    concat = next(v for v, n in enumerate(p.cost_model.graph.nodes) if n.kind == "concat")
    assert row_window(p.cost_model.graph, concat, exact=True) == (2.0, 0.8)
    assert row_window(p.cost_model.graph, concat) == (1.0, 0.8)  # the paper's and Optimus's
    (group,) = p.groups
    assert p.cost_model.tile_rows(group, 1) == ({0: 2, 1: 1, 2: 1, 3: 1}, {0: 2})
    assert (p.cost_model.dram_bytes(group), p.cost_model.buffer_bytes(group)) == (200, 168)
    (schedule,) = check_plan("class_token", "brr", 2048)
    assert sum(r.elements for r in schedule.regions) == 168


# ----------------------------------------------------------------------- hand-built
# conv_chain: x(4,8,8) -> conv1 3x3 -> relu (in place) -> conv2 3x3 4->8; tensors x 0,
# conv1.out 1, relu.out 2, conv2.out 3; weights 148 and 296.
X, CONV1, RELU, CONV2 = 0, 1, 2, 3


def chain_schedule(
    *, x_rows: int = 3, ahead: int = 1, sliced: bool = False, skip_read: int = -1
) -> Schedule:
    """conv_chain one sink row per step (weights resident): x read row by row, ``ahead``
    rows beyond what conv1 needs, conv1 a row ahead of conv2; ``sliced`` runs conv1 and relu
    in 2-channel slices, recomputing their 3 rows, and conv2 in partial passes over them."""
    steps = []
    for s in range(8):
        acts: list = []
        if s == 0:
            acts += [Transfer("read", -1, 0, (0, 0), (0, 4), 148)]
            acts += [Transfer("read", -1, 2, (0, 0), (0, 8), 296)]
        first = 0 if s == 0 else min(s + 1 + ahead, 8)
        for r in range(first, min(s + 2 + ahead, 8)):
            if s != skip_read:
                acts.append(Transfer("read", X, -1, (r, r + 1), (0, 4), 32))
        if sliced:
            rows = (max(s - 1, 0), min(s + 2, 8))
            for c in (0, 2):
                acts += [Compute(0, rows, (c, c + 2)), Compute(1, rows, (c, c + 2))]
                acts.append(Compute(2, (s, s + 1), (0, 8), in_channels=(c, c + 2)))
        else:
            rows = (0, 2) if s == 0 else (s + 1, min(s + 2, 8))
            if rows[0] < rows[1]:
                acts += [Compute(0, rows, (0, 4)), Compute(1, rows, (0, 4))]
            acts.append(Compute(2, (s, s + 1), (0, 8)))
        acts.append(Transfer("write", CONV2, -1, (s, s + 1), (0, 8), 64))
        steps.append(Step(0, (s, s + 1), tuple(acts)))
    conv1_channels, conv1_rows = (2, 3) if sliced else (4, 3)
    regions = (
        Region("weights", 0, 0, 0, 0, 148),
        Region("weights", 2, 0, 0, 0, 296),
        Region("tensor", X, x_rows, 4, 8, x_rows * 32),
        Region(
            "tensor", CONV1, conv1_rows, conv1_channels, 8, conv1_rows * conv1_channels * 8, (RELU,)
        ),
        Region("tensor", CONV2, 1, 8, 8, 64),
    )
    return Schedule(
        (1 << 3) - 1,
        "brr",
        "brr-resident",
        1,
        4096,
        regions=regions,
        steps=tuple(steps),
        dram=traffic(steps),
    )


def run_chain(schedule: Schedule) -> np.ndarray:
    net = numeric("conv_chain")
    cm = make_cost_model(net.graph, Accelerator(buffer_bytes=4096, scheme="brr"))
    dram = Dram.with_inputs(net.feeds_chw(feeds("conv_chain")))
    replay_schedule(net, cm, schedule, dram)
    return dram.values[CONV2]


def expected_chain() -> np.ndarray:
    return numeric("conv_chain").forward(feeds("conv_chain"))[CONV2]


def test_a_rolling_schedule_computes_the_chain():
    assert np.array_equal(run_chain(chain_schedule()), expected_chain())


def test_partial_passes_over_channel_slices_add_up():
    """conv1 recomputes its 3 rows per slice, so x keeps the 5 rows they read."""
    got = run_chain(chain_schedule(sliced=True, x_rows=5))
    assert np.allclose(got, expected_chain(), rtol=1e-12, atol=1e-12)


def test_a_row_never_read_is_named():
    with pytest.raises(ReplayError, match=r"step 3 .*'conv1'.* needs 'x' row 5 channels 0\.\.4"):
        run_chain(chain_schedule(skip_read=3))


def test_a_ring_too_short_loses_the_rows_a_window_needs():
    """3 x rows hold conv1's window when x is read one row ahead; read two rows ahead, row 3
    takes row 0's slot before conv1's rows 0..2 have read it. 4 rows hold it again."""
    with pytest.raises(ReplayError, match=r"step 0 .*'conv1'.* needs 'x' row 0 channels 0\.\.4"):
        run_chain(chain_schedule(ahead=2))
    assert np.array_equal(run_chain(chain_schedule(ahead=2, x_rows=4)), expected_chain())


def replace_action(schedule: Schedule, step: int, index: int, action) -> Schedule:
    steps = list(schedule.steps)
    actions = list(steps[step].actions)
    if action is None:
        del actions[index]
    else:
        actions[index] = action
    steps[step] = steps[step]._replace(actions=tuple(actions))
    return Schedule(
        schedule.group,
        schedule.scheme,
        schedule.order,
        1,
        4096,
        regions=schedule.regions,
        steps=tuple(steps),
        dram=traffic(steps),
    )


def test_a_transfer_counting_other_elements_fails():
    s = chain_schedule()
    wrong = Transfer("write", CONV2, -1, (0, 1), (0, 8), 63)
    with pytest.raises(ReplayError, match="counts 63 elements for a block of 64"):
        run_chain(replace_action(s, 0, -1, wrong))


def test_a_weight_transfer_is_checked_against_the_weights_of_its_channels():
    s = chain_schedule()
    half = Transfer("read", -1, 2, (0, 0), (0, 4), 148)  # conv2: 4 x (4*9) + 4 bias = 148
    ok = replace_action(s, 0, 1, half)
    with pytest.raises(ReplayError, match="without the weights of its channels"):
        run_chain(ok)
    wrong = Transfer("read", -1, 2, (0, 0), (0, 4), 150)
    with pytest.raises(ReplayError, match=r"counts 150 weight elements .* needs 148"):
        run_chain(replace_action(s, 0, 1, wrong))


def test_a_partial_sum_cannot_be_written():
    """Dropping the second slice's pass leaves conv2's row a partial sum."""
    s = chain_schedule(sliced=True, x_rows=5)
    actions = s.steps[0].actions
    last_pass = max(i for i, a in enumerate(actions) if isinstance(a, Compute) and a.op == 2)
    with pytest.raises(ReplayError, match="does not hold as a final value"):
        run_chain(replace_action(s, 0, last_pass, None))


def test_a_slice_consumed_twice_is_refused():
    s = chain_schedule(sliced=True, x_rows=5)
    actions = list(s.steps[0].actions)
    first_pass = min(i for i, a in enumerate(actions) if isinstance(a, Compute) and a.op == 2)
    actions.insert(first_pass, actions[first_pass])
    steps = (s.steps[0]._replace(actions=tuple(actions)), *s.steps[1:])
    twice = Schedule(s.group, s.scheme, s.order, 1, 4096, regions=s.regions, steps=steps)
    with pytest.raises(ReplayError, match="consumes input lane 0 a second time"):
        run_chain(twice)


def test_an_output_row_never_written_fails():
    s = replace_action(chain_schedule(), 7, -1, None)
    with pytest.raises(
        ReplayError, match=r"never writes all of 'conv2.out' \(rows written: 0\.\.7\)"
    ):
        run_chain(s)


def test_claimed_traffic_must_be_what_moved():
    s = chain_schedule()
    claimed = dict(s.dram)
    claimed[next(iter(claimed))] += 1
    lying = Schedule(
        s.group, s.scheme, s.order, 1, 4096, regions=s.regions, steps=s.steps, dram=claimed
    )
    with pytest.raises(ReplayError, match="claims traffic"):
        run_chain(lying)


def test_the_builders_schedule_of_the_chain_matches_the_hand_built_one():
    """The BRR builder's schedule of conv_chain at 4 KB (resident) replays to the same
    values and moves what the hand-built one moves: io + W."""
    net = numeric("conv_chain")
    cm = make_cost_model(net.graph, Accelerator(buffer_bytes=4096, scheme="brr"))
    built = build_schedule(cm, net.graph.all_nodes)
    dram = Dram.with_inputs(net.feeds_chw(feeds("conv_chain")))
    run = replay_schedule(net, cm, built, dram)
    assert np.array_equal(dram.values[CONV2], expected_chain())
    assert run.traffic == dict(chain_schedule().dram)

"""Schedules as data and their replay (docs/cost-model.md, "Schedules and replay").

The replay executes a schedule with its own read windows and a buffer allocator; these tests
hold the BRR closed forms to it: by hand on ``conv_chain``, on hand-broken schedules the
replay must refuse, and over random groups of random graphs at several buffers.

conv_chain (b = 1): x (4,8,8) -> conv1 3x3 4->4 (148 w) -> relu -> conv2 3x3 4->8 (296 w).
A row of x, conv1 or relu is 32 elements, of conv2 64; io = x 256 + y 512 = 768.
"""

from __future__ import annotations

import random

import pytest

from accel_model import Accelerator, make_cost_model
from accel_model.accelerator import PROFILES
from accel_model.brr import BRR
from accel_model.replay import ReplayError, replay
from accel_model.schedule import (
    Compute,
    Region,
    Schedule,
    Step,
    TrafficKey,
    Transfer,
    build_schedule,
)
from fusionplan.app.api import plan as plan_model
from fusionplan.app.bench.replay_table import random_graph, random_groups
from fusionplan.ir.graph import Group, OpGraph, mask_of
from fusionplan.planning.plan import Plan
from tests.onnx_builders import conv_chain, residual_block, save, to_graph
from tests.random_dags import random_dag, small_buffer

WHOLE = mask_of((0, 1, 2))


def chain(beta: int, **settings):
    return make_cost_model(to_graph(conv_chain()), Accelerator(beta, "brr", 1, **settings))


def run(cm, group: Group):
    return replay(build_schedule(cm, group), cm.graph, cm.node_weights)


# -- by hand ------------------------------------------------------------------------------
def test_resident_conv_chain_by_hand():
    # 1024 B: weights 444 stay; regions x 5 rows (160), conv1 3 rows with the relu written
    # over them (96), conv2 1 row (64): 444 + 320 = 764; DRAM io + weights once = 1212
    cm = chain(1024, pe_unroll=0)
    s = build_schedule(cm, WHOLE)
    assert s.order == "brr-resident" and len(s.steps) == 8 and s.weights_resident
    assert [(r.kind, r.rows, r.elements) for r in s.regions] == [
        ("weights", 0, 148),
        ("weights", 0, 296),
        ("tensor", 5, 160),
        ("tensor", 3, 96),
        ("tensor", 1, 64),
    ]
    assert s.regions[3].aliases == (cm.graph.nodes[1].outputs[0],)  # relu in place
    r = run(cm, WHOLE)
    assert (r.dram_bytes, r.peak_bytes) == (1212, 764)
    assert (cm.dram_bytes(WHOLE), cm.buffer_bytes(WHOLE)) == (1212, 764)
    # the rolling rows need less than the regions reserve: x 3 rows and conv1 3 rows while
    # conv2's row is made (96 + 96 + 64) beside the weights
    assert r.live_peak_bytes < r.peak_bytes


def test_streamed_conv_chain_by_hand():
    # 600 B: the weights stream. A tile of 3 rows holds conv2 3 rows (192), conv1/relu 5
    # (160) and x 7 (224) = 576 < 600; 4 rows would need 256 + 224 + 256 = 736. ceil(8/3) = 3
    # tiles, each reads both convs' weights once: 768 + 3 * 444 = 2100
    cm = chain(600, pe_unroll=0)
    s = build_schedule(cm, WHOLE)
    assert (s.order, s.h_tile, s.tiles) == ("brr-streamed", 3, ((0, 3), (3, 6), (6, 8)))
    r = run(cm, WHOLE)
    assert (r.dram_bytes, r.peak_bytes) == (2100, 576)
    assert r.per_tensor[TrafficKey("weights", 0)] == 3 * 148
    assert r.per_tensor[TrafficKey("tensor", cm.graph.inputs[0])] == 256


def test_channel_slices_by_hand():
    # k = 2, 1 MB, weights resident (444): parity 0 slices conv1 and the relu written over
    # it, 2 of 4 channels x 3 rows (48); x keeps all 4 channels x 5 rows (160: a sliced conv
    # reads it); conv2 one row (64): 444 + 272 = 716. conv2 accumulates over conv1's two
    # slices, each recomputing conv1's 3 rows of that slice; io + weights once = 1212
    cm = chain(1 << 20, pe_unroll=2)
    s = build_schedule(cm, WHOLE)
    assert (s.parity, s.sliced) == (0, mask_of((0, 1)))
    assert [r.elements for r in s.regions] == [148, 296, 160, 48, 64]
    partial = [a for step in s.steps for a in step.computes if a.in_channels is not None]
    assert {a.op for a in partial} == {2} and {a.in_channels for a in partial} == {(0, 2), (2, 4)}
    r = run(cm, WHOLE)
    assert (r.dram_bytes, r.peak_bytes) == (1212, 716)
    assert (cm.dram_bytes(WHOLE), cm.buffer_bytes(WHOLE)) == (1212, 716)


# -- the replay refuses broken schedules -------------------------------------------------
def relu_alone(beta: int = 1024) -> tuple[OpGraph, Schedule]:
    """A valid schedule of the relu alone (one row a step), to break by hand."""
    cm = chain(beta, pe_unroll=0)
    return cm.graph, build_schedule(cm, 1 << 1)


def test_a_compute_before_its_input_is_read_fails_where_it_happens():
    graph, s = relu_alone()
    first = s.steps[0]
    broken = first._replace(actions=tuple(reversed(first.actions[:2])) + first.actions[2:])
    s = Schedule(**{**s.__dict__, "steps": (broken, *s.steps[1:])})
    with pytest.raises(ReplayError, match=r"step 0 .*action 0: 'relu' .* not in the buffer"):
        replay(s, graph, [0] * len(graph))


def test_a_region_too_small_overflows():
    graph, s = relu_alone()
    small = tuple(r._replace(elements=r.elements // 2) for r in s.regions)
    with pytest.raises(ReplayError, match="overflows"):
        replay(Schedule(**{**s.__dict__, "regions": small}), graph, [0] * len(graph))


def test_regions_over_the_buffer_fail_at_allocation():
    graph, s = relu_alone()
    with pytest.raises(ReplayError, match="over the 40 B buffer"):
        replay(Schedule(**{**s.__dict__, "buffer_bytes": 40}), graph, [0] * len(graph))


def test_an_output_never_written_fails():
    graph, s = relu_alone()
    steps = tuple(
        st_._replace(actions=tuple(a for a in st_.actions if not _is_write(a))) for st_ in s.steps
    )
    with pytest.raises(ReplayError, match=r"unwritten to DRAM"):
        replay(Schedule(**{**s.__dict__, "steps": steps}), graph, [0] * len(graph))


def _is_write(a) -> bool:
    return isinstance(a, Transfer) and a.direction == "write"


def test_a_window_wider_than_what_was_read_fails():
    # conv1 alone: its first row reads x rows 0..1 (padding 1); reading only row 0 is short
    cm = chain(1 << 20, pe_unroll=0)
    g = cm.graph
    x = g.inputs[0]
    steps = (
        Step(
            0,
            (0, 1),
            (
                Transfer("read", -1, 0, (0, 0), (0, 4), 148),
                Transfer("read", x, -1, (0, 1), (0, 4), 32),
                Compute(0, (0, 1), (0, 4)),
            ),
        ),
    )
    s = build_schedule(cm, 1)
    with pytest.raises(ReplayError, match=r"row 1 .*not in the buffer"):
        replay(Schedule(**{**s.__dict__, "steps": steps}), g, cm.node_weights)


def test_a_recompute_needs_its_streamed_weights_again():
    cm = chain(1 << 20, pe_unroll=0)
    g = cm.graph
    s = build_schedule(cm, 1)
    x, y = g.inputs[0], g.nodes[0].outputs[0]
    acts = (
        Transfer("read", x, -1, (0, 8), (0, 4), 256),
        Transfer("read", -1, 0, (0, 0), (0, 4), 148),
        Compute(0, (0, 8), (0, 4)),
        Transfer("write", y, -1, (0, 8), (0, 4), 256),
        Compute(0, (0, 8), (0, 4)),
    )
    whole = (  # room for all of x and of conv1's output
        Region("tensor", x, 8, 4, 8, 256),
        Region("tensor", y, 8, 4, 8, 256),
    )
    streamed = Schedule(
        **{
            **s.__dict__,
            "weights_resident": False,
            "regions": whole,
            "steps": (Step(0, (0, 8), acts),),
        }
    )
    with pytest.raises(ReplayError, match="again without reading its streamed weights"):
        replay(streamed, g, cm.node_weights)


# -- random groups, closed form against replay ---------------------------------------------
def fused_groups(cm, graph: OpGraph, seed: int):
    """Random convex connected groups the cost model prices as a fused BRR schedule."""
    for grp in random_groups(graph, random.Random(seed), 12):
        if cm.is_valid(grp) and cm.priced_order(grp)[0] == "scheme":
            yield grp


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 8.0])
@pytest.mark.parametrize("seed", range(30))
def test_replay_confirms_the_closed_form_on_random_groups(seed, scale):
    graph = random_dag(seed)
    beta = max(16, int(small_buffer(BRR, graph, seed) * scale))
    cm = make_cost_model(graph, Accelerator(beta, "brr"))
    for grp in fused_groups(cm, graph, seed):
        r = run(cm, grp)
        # every external input read once and every output written once (io), every op's
        # weights once (resident) or once per tile (streamed): F_D; the regions are F_beta
        assert (r.dram_bytes, r.peak_bytes) == (cm.dram_bytes(grp), cm.buffer_bytes(grp))
        assert r.peak_bytes < beta


# -- counterexamples the replay found (docs/cost-model.md, "Schedules and replay") -------
def rw(seed: int, beta: int):
    return make_cost_model(random_graph(seed), Accelerator(beta, "brr"))


def test_a_tile_streams_every_ops_weights():
    # random_dag(0) at 1448 B, ops 0-4 streamed in 8 one-row tiles. The 5x5 conv n0 makes
    # all its rows by the 6th tile (its consumers' windows read 2 rows ahead), yet every tile
    # streams every op's weights, as F_D charges: (1608 + 0 + 72 + 72 + 804) * 8 = 20,448 B
    cm = make_cost_model(random_dag(0), Accelerator(1448, "brr"))
    r = run(cm, 31)
    weights = sum(n for k, n in r.per_tensor.items() if k.kind == "weights")
    assert weights == 2556 * 8 == 20448
    assert r.dram_bytes == cm.dram_bytes(31)


def test_two_readers_of_an_input_hold_the_union_of_their_windows():
    # random_dag(35) at 4094 B, {n1 1x1 s2, n2 3x3 pool (no pad), n3 3x3 s2 pad 1, n7 concat
    # of n3 and n1}, sinks n2 and n7 at row r (b = 1, weights 8 + 296 resident). n1 keeps
    # the pool's rows r..r+2, which read x rows 2r..2r+4 (5 rows from 2r); n3's row r reads
    # x rows 2r-1..2r+1 (3 rows from 2r-1): x holds their union 2r-1..2r+4, 6 rows of
    # 4 * 8 (the larger window alone, 5 rows, overflowed at row 6). Footprint x 6 * 32 +
    # n1 3 * 16 + n2 16 + n3 32 + n7 48 = 336, F_beta 336 + 304 = 640; io x 256 + n2 64 +
    # n3 128 + n7 192 = 640, F_D = 640 + 304 = 944
    cm = make_cost_model(random_dag(35), Accelerator(4094, "brr"))
    group = mask_of((1, 2, 3, 7))
    assert cm.tile_rows(group, 1)[1] == {0: 6}
    r = run(cm, group)
    assert (r.dram_bytes, r.peak_bytes) == (944, 640)
    assert (cm.dram_bytes(group), cm.buffer_bytes(group)) == (944, 640)


def test_an_input_read_by_a_local_op_and_another_keeps_all_its_channels():
    # RandWire seed 0 at 29056 B (b = 1, parity 0, weights resident): conv_6's output
    # (48, 16, 16) comes from outside and is read by two sliced adds at two times (add_55
    # and add_70, in other slice loops). Held as a 32-channel slice it was read twice
    # (23,040 B); it now keeps all 48 channels of its 5 rows: 5 * 48 * 16 = 3,840 elements
    # instead of 2,560, so F_beta = 20,160 + 1,280 = 21,440 B; io reads it once: 7 tensors
    # of 12,288 B = 86,016 B, plus resident weights 432 + 2352 + 432 + 2352 = 5,568 B
    cm = rw(0, 29056)
    grp = 0x80400101F8
    r = run(cm, grp)
    assert (r.dram_bytes, r.peak_bytes) == (86016 + 5568, 21440)
    assert (cm.dram_bytes(grp), cm.buffer_bytes(grp)) == (r.dram_bytes, r.peak_bytes)


def test_a_recompute_pass_streams_its_weights_again():
    # RandWire seed 0 at 29056 B (b = 1, parity 0, 8 tiles of 2 rows): the sliced convs
    # conv_18 and conv_24 feed add_25 (-> relu, conv_28, the whole conv_31) and add_32;
    # add_33 = add_32 + conv_31 needs conv_31, which the slice loop makes, so a second pass
    # recomputes conv_18, conv_24 and add_32, streaming the two convs' weights again in each
    # tile. io 4 tensors of 12,288 B = 49,152; weights (2352 + 2352 + 432 + 2352 + 432) * 8
    # = 63,360; the second pass (2352 + 2352) * 8 = 37,632: F_D = 150,144 B
    cm = rw(0, 29056)
    grp = 0xFF900
    tt = cm.terms(grp)
    assert (tt.tiles, tt.rerun, tt.reread) == (8, 2 * 2352, 0)
    r = run(cm, grp)
    assert r.dram_bytes == 49152 + 63360 + 37632 == cm.dram_bytes(grp)
    assert r.per_tensor[TrafficKey("weights", 8)] == 2 * 8 * 2352


@pytest.mark.parametrize("seed", range(6))
def test_the_papers_tile_rule_can_overflow_and_its_io_is_confirmed(seed):
    # the paper profile grows a tile by row_step (the ops' rows only) and reports f(1): its
    # schedule holds f(h_tile), which the replay measures and may find over the buffer
    graph = random_dag(seed)
    beta = small_buffer(BRR, graph, seed)
    cm = make_cost_model(graph, Accelerator(beta, "brr", **PROFILES["paper"]))
    for grp in fused_groups(cm, graph, seed):
        s = build_schedule(cm, grp)
        try:
            r = replay(s, graph, cm.node_weights)
        except ReplayError as exc:
            assert "over the" in str(exc) and s.peak_bytes > beta
            continue
        assert r.dram_bytes - sum(
            n for k, n in r.per_tensor.items() if k.kind == "weights"
        ) == cm.b * cm.io_elements(grp)
        assert r.peak_bytes >= cm.buffer_bytes(grp)


# -- the plan ---------------------------------------------------------------------------
def test_the_plan_file_carries_each_groups_compact_schedule(tmp_path):
    path = save(residual_block(), tmp_path)
    plan = plan_model(str(path), "1KB", "brr", search="exact")
    data = plan.to_dict()
    for entry, grp in zip(data["groups"], plan.groups, strict=True):
        compact = entry["schedule"]
        if "unavailable" in compact:
            continue
        full = plan.schedule(grp)
        assert compact["order"] == full.order and compact["steps"] == len(full.steps)
        moved = sum(compact["dram_bytes"]["tensors"].values())
        moved += sum(compact["dram_bytes"]["weights"].values())
        assert moved == full.dram_bytes
    # a plan file written before schedules existed still reads
    for entry in data["groups"]:
        del entry["schedule"]
    back = Plan.from_dict(plan.graph, plan.cost_model, data)
    assert back.groups == plan.groups


def test_a_sliced_op_runs_in_place_only_over_a_sliced_producer():
    # RandWire seed 0 at 29056 B (b = 1, weights 2352 + 432 + 2352 + 432 = 5,568 resident).
    # Parity 0 slices add_48, which recomputes rows for conv_51's 3x3 window, and wrote it in
    # place over the whole conv_47 (3 rows x 48 channels): the recompute read rows it had
    # overwritten. A sliced op now runs in place only over a sliced producer, so add_48
    # keeps its own 3 x 32 x 16 = 1,536 elements and parity 0 holds
    # 17,152 + 1,536 = 18,688; parity 1 (conv_47 and add_48 sliced, the add in place over
    # its sliced producer) holds 2560 + 2560 + 3840 + 3840 + 2304 + 1536 + 512 = 17,152 and
    # wins: F_beta = 17,152 + 5,568 = 22,720 B; io 3 tensors of 12,288 B: F_D = 42,432 B
    cm = rw(0, 29056)
    grp = 0x1FD00000
    assert cm.terms(grp).parity == 1
    r = run(cm, grp)
    assert (r.dram_bytes, r.peak_bytes) == (3 * 12288 + 5568, 17152 + 5568)
    assert (cm.dram_bytes(grp), cm.buffer_bytes(grp)) == (r.dram_bytes, r.peak_bytes)

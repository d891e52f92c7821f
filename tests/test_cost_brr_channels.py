"""BRR's channel slices, in-place ops and Optimus's conventions (docs/cost-model.md, "BRR"
and "The optimus profile") against hand arithmetic, and their properties on random graphs.

conv_chain: x (4,8,8) -> 0 conv1 3x3 4->4 (148 w) -> 1 relu -> 2 conv2 3x3 4->8 (296 w), all
8x8. Rows kept in the whole group: conv2 1, relu 3, conv1 3, x 5 (tests/test_cost_brr.py).
With ``pe_unroll`` k = 2 a sliced op keeps min(2, C) channels: conv1 and relu 2 of 4, conv2 2
of 8. A row of C channels is C * 8 elements.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_model import Accelerator, make_cost_model
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import mask_of
from tests.onnx_builders import conv_chain, residual_block, to_graph
from tests.random_dags import random_dag

WHOLE = mask_of((0, 1, 2))


def chain(beta: int = 1 << 20, **settings):
    return make_cost_model(to_graph(conv_chain()), Accelerator(beta, "brr", 1, **settings))


def footprint(cm, nodes=(0, 1, 2)):
    t = cm.terms(mask_of(nodes))
    return t.footprint, t.row_step, t.parity


def test_in_place_relu_shares_its_producers_rows():
    # relu is conv1's only in-group reader: conv2 64*1 + conv1 32*3 + relu 0 + x 32*5 = 320;
    # row step conv2 64 + conv1 32 (full channels: pe_unroll 0)
    assert footprint(chain(pe_unroll=0))[:2] == (320, 96)
    # without in place the relu keeps its own 3 rows (the paper's BRR): 416, 128
    assert footprint(chain(pe_unroll=0, in_place=False))[:2] == (416, 128)
    # relu alone reads conv1's output from DRAM: nothing to overwrite in the group
    assert footprint(chain(pe_unroll=0), (1,))[:2] == (64, 32)


def test_channel_slices_both_parities_by_hand():
    cm = chain(pe_unroll=2, in_place=False)
    g = cm.graph
    # parity 0: conv1 (mixing depth 1) sliced, relu follows it, conv2 (depth 2) whole:
    # conv1 2*8*3 + relu 2*8*3 + conv2 8*8*1 + x (all 4 channels: a sliced conv needs them)
    # 4*8*5 = 48 + 48 + 64 + 160 = 320; row step 16 + 16 + 64 = 96
    # parity 1: conv1 whole, relu whole, conv2 sliced: 96 + 96 + 2*8*1 + x a 2-channel slice
    # 2*8*5 = 96 + 96 + 16 + 80 = 288; row step 32 + 32 + 16 = 80
    sliced = cm.sliced_ops(WHOLE)
    assert sliced == (mask_of((0, 1)), mask_of((2,)))
    rows, scale, _ = cm._rows(WHOLE, [0, 1, 2])
    assert cm.footprints(WHOLE, rows, scale, sliced) == ((320, 96), (288, 80))
    # with room for everything the smaller footprint wins
    assert footprint(cm) == (288, 80, 1)
    assert len(g) == 3


def test_the_parity_with_fewer_tiles_wins():
    # beta 600, W 444: parity 0 streams with h = floor((600-320)/96) + 1 = 3, 3 tiles;
    # parity 1 with h = floor((600-288)/80) + 1 = 4, 2 tiles: DRAM = io 768 + 444 * 2
    cm = chain(600, pe_unroll=2, in_place=False)
    t = cm.terms(WHOLE)
    assert (t.parity, t.h_tile, t.tiles) == (1, 4, 2)
    assert cm.cost(WHOLE) == (288, 768 + 2 * 444, True)
    # the full-channel BRR at the same buffer: 416 + 444 >= 600, h = floor(184/128) + 1 = 2,
    # 4 tiles: 768 + 4 * 444
    full = chain(600, pe_unroll=0, in_place=False)
    assert full.cost(WHOLE) == (416, 768 + 4 * 444, True)


def test_slices_and_in_place_together():
    # parity 1 and relu in place over conv1: 96 + 0 + 16 + 80 = 192; row step 32 + 16 = 48
    assert footprint(chain(pe_unroll=2)) == (192, 48, 1)


def test_optimus_conventions_by_hand():
    # unbuffered inputs: x is read by a whole conv1 (parity 1) and takes no buffer:
    # 96 + 96 + 16 = 208 (relu kept, in place off)
    cm = chain(pe_unroll=2, in_place=False, conventions=frozenset({"unbuffered-inputs"}))
    assert footprint(cm)[0] == 208
    # free activations: the relu takes no buffer and costs nothing alone
    cm = chain(pe_unroll=2, in_place=False, conventions=frozenset({"free-activations"}))
    assert footprint(cm)[0] == 96 + 16 + 80
    assert cm.cost(mask_of((1,))) == (0, 0, True)
    # no-local-start: a group may not start with the residual add (local), but may with an
    # activation (Optimus's networks have none: the group starts at the next conv)
    graph = to_graph(residual_block())  # 3 conv2 -> 4 add -> 5 relu2
    accel = Accelerator(1 << 20, "brr", conventions=frozenset({"no-local-start"}))
    cm = make_cost_model(graph, accel)
    assert not cm.cost(mask_of((4, 5))).valid
    assert cm.cost(mask_of((3, 4, 5))).valid and cm.cost(mask_of((4,))).valid
    assert cm.cost(mask_of((2, 3))).valid  # relu1 -> conv2


def test_residual_add_in_place_over_its_conv():
    # residual_block: x -> 0 stem -> 1 conv1 -> 2 relu1 -> 3 conv2 -> 4 add(conv2, stem)
    # -> 5 relu2, every tensor 4x8x8. In {conv2, add, relu2} the add overwrites conv2's rows
    # (its only in-group reader) and relu2 the add's: only conv2's row is kept, plus the
    # relu1 input rows (3) and the stem input row the add reads (1): 32 + 96 + 32 = 160.
    graph = to_graph(residual_block())
    group = mask_of((3, 4, 5))
    inplace = make_cost_model(graph, Accelerator(1 << 20, "brr", pe_unroll=0))
    paper = make_cost_model(graph, Accelerator(1 << 20, "brr", pe_unroll=0, in_place=False))
    assert inplace.terms(group).footprint == 160
    assert paper.terms(group).footprint == 160 + 2 * 32


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), k=st.sampled_from([1, 2, 3, 4, 32]))
def test_slices_never_need_more_buffer_than_full_channels(seed, k):
    graph = random_dag(seed, max_nodes=10)
    full = make_cost_model(graph, Accelerator(1 << 30, "brr", pe_unroll=0, in_place=False))
    for in_place in (False, True):
        part = make_cost_model(graph, Accelerator(1 << 30, "brr", pe_unroll=k, in_place=in_place))
        rng = random.Random(seed)
        for _ in range(40):
            g = rng.randrange(1, 1 << len(graph))
            a, z = part.terms(g), full.terms(g)
            assert a.footprint <= z.footprint and a.row_step <= z.row_step
            assert part.buffer_floor(g) <= a.footprint


def test_accelerator_settings_are_checked():
    with pytest.raises(ConfigError, match="pe_unroll"):
        Accelerator(1024, "brr", pe_unroll=-1)
    with pytest.raises(ConfigError, match="brr scheme only"):
        Accelerator.of("1KB", "lbdf", profile="optimus")
    with pytest.raises(ConfigError, match="unknown convention"):
        Accelerator(1024, "brr", conventions=frozenset({"free-lunch"}))
    with pytest.raises(ConfigError, match="unknown profile"):
        Accelerator.of("1KB", "brr", profile="fast")
    assert Accelerator.of("1KB", "brr", profile="paper").profile == "paper"
    assert Accelerator.of("1KB", "brr", pe_unroll=8).profile == "custom"


def test_an_activation_runs_as_its_layers_epilogue():
    # beta 140: conv1 + relu fits (footprint 32 + x 3*32 = 128, the relu in place) but its
    # 148 weights stream once per row: BRR gives 512 + 8 * 148 = 1696. conv1 alone runs by
    # row bands over 4 column strips (f(8) = 256 + 256, a quarter 128 < 140): one band, 4
    # weight reads, 512 + 4 * 148 = 1104; the relu, applied to each output as it is
    # written, moves nothing more (its output replaces conv1's): the pair costs 1104 too.
    cm = chain(140, pe_unroll=0)
    pair = mask_of((0, 1))
    assert cm._compute(pair) == (128, 512 + 8 * 148, True)
    assert cm.layer_tiling(0).dram == 512 + 4 * 148
    assert cm.cost(pair) == (128, 1104, True) and cm.cost(mask_of((0,))).dram == 1104
    # no epilogue under the paper's conventions (nothing runs in place there)
    paper = chain(140, pe_unroll=0, in_place=False)
    assert paper._epilogue_core(pair) is None
    # a group of two layers is not a layer with an epilogue
    assert chain(1 << 20)._epilogue_core(WHOLE) is None

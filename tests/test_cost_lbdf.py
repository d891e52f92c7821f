"""LBDF cost model (docs/cost-model.md, "LBDF") against hand arithmetic on tiny graphs.

Every expected number is written out from the cost-model formulas; nothing is derived by calling
the code under test. Row size of a tensor (C, H, W) is W * C elements.

    F_beta = b * (W(g) + line + skip)        F_D = DRAM_io(g) + b * W(g)

Default profile: one ring per tensor the group reads or writes. An op v starts at
s(v) = max over its in-group producers u of d(u) (+ H when it reads u's output whole) and
has delay d(v) = s(v) + lag(v) (lag: the last input row its first output row reads, 1 for a
3x3 conv padded by 1). A tensor read in the group holds
min(H, max over readers (s(v) + K_v) - a) rows, a = d(producer), or for an input from outside
the group the earliest s(v) of its readers; line = the largest window K_v, skip = the rest.
A tensor no op of the group reads holds one row (a reduction's output: all its rows).
"""

from __future__ import annotations

import pytest

from accel_model import Accelerator, compulsory_traffic, make_cost_model, unfusable_nodes
from accel_model.lbdf import LBDF
from fusionplan.ir.graph import Node, OpGraph, Tensor, mask_of
from tests.onnx_builders import (
    conv_chain,
    residual_block,
    se_block,
    strided_chain,
    strided_residual,
    to_graph,
    upsample_chain,
)


def lbdf(builder, beta: int = 1 << 20, b: int = 1) -> LBDF:
    model = make_cost_model(to_graph(builder()), Accelerator(beta, "lbdf", b))
    assert isinstance(model, LBDF)
    return model


def check(model: LBDF, nodes, weights, line, skip, io, buffer, dram) -> None:
    g = mask_of(nodes)
    assert model.buffer_terms(g) == (weights, line, skip)
    assert model.weight_elements(g) == weights
    assert model.io_elements(g) == io
    assert model.buffer_bytes(g) == buffer
    assert model.dram_bytes(g) == dram


# ----------------------------------------------------------------------------- chain
# conv_chain: 0 conv1 3x3 (148 w), 1 relu, 2 conv2 3x3 4->8 (296 w); x, conv1.out and
# relu.out are (4,8,8) = 256 elements (row 8*4 = 32), conv2.out is (8,8,8) = 512 (row 64).
# Delays: conv1 0 + 1 = 1, relu 1, conv2 1 + 1 = 2; every reader starts at its producer's
# delay, so each ring holds its reader's window and no skip rows.
CHAIN_CASES = [
    # nodes, weights, line, skip, io, F_beta, F_D
    # conv1: x 3 rows * W 8 * C 4 = 96 + its output's row 32 = 128; io x 256 + conv1.out 256
    ((0,), 148, 128, 0, 512, 148 + 128, 512 + 148),
    # relu: conv1.out 1 row 32 + relu.out 1 row 32 = 64; io 256 + 256
    ((1,), 0, 64, 0, 512, 64, 512),
    # conv2: relu.out 3 * 32 = 96 + y's row 64 = 160; io relu.out 256 + y 512 = 768
    ((2,), 296, 160, 0, 768, 296 + 160, 768 + 296),
    # conv1+relu: x 96 + conv1.out 32 + relu.out 32 = 160; io x 256 + relu.out 256
    ((0, 1), 148, 160, 0, 512, 148 + 160, 512 + 148),
    # relu+conv2: conv1.out 32 + relu.out 96 + y 64 = 192; io conv1.out 256 + y 512
    ((1, 2), 296, 192, 0, 768, 296 + 192, 768 + 296),
    # whole: weights 148 + 296 = 444; x 96 + conv1.out 32 + relu.out 96 + y 64 = 288;
    # io x 256 + y 512 = 768
    ((0, 1, 2), 444, 288, 0, 768, 444 + 288, 768 + 444),
]


@pytest.mark.parametrize("case", CHAIN_CASES, ids=lambda c: str(c[0]))
def test_conv_chain_terms(case) -> None:
    check(lbdf(conv_chain), *case)


def test_conv_chain_two_bytes_per_element() -> None:
    model = lbdf(conv_chain, b=2)
    whole = mask_of((0, 1, 2))
    assert model.buffer_terms(whole) == (444, 288, 0)  # still elements
    assert model.buffer_bytes(whole) == 2 * (444 + 288)  # 1464
    assert model.dram_bytes(whole) == 2 * (768 + 444)  # 2424
    assert model.dram_bytes(mask_of((0,))) == 2 * (512 + 148)  # conv1 alone fits: io + W


def test_validity_is_strict() -> None:
    whole = mask_of((0, 1, 2))  # F_beta = 444 + 288 = 732 bytes
    assert lbdf(conv_chain, beta=733).is_valid(whole)
    assert not lbdf(conv_chain, beta=732).is_valid(whole)


def test_unfusable_singletons() -> None:
    # singletons F_beta: conv1 148 + 128 = 276, relu 64, conv2 296 + 160 = 456
    assert unfusable_nodes(lbdf(conv_chain, beta=200)) == 0b101
    assert unfusable_nodes(lbdf(conv_chain, beta=277)) == 0b100
    assert unfusable_nodes(lbdf(conv_chain, beta=457)) == 0
    model = lbdf(conv_chain, beta=200)
    # An unfusable op runs alone by its cheapest loop order (docs/cost-model.md,
    # "Single-layer cost"). conv2: x (4,8,8) -> (8,8,8), io 256 + 512, 296 weights.
    # Row bands: one output row needs 64 + 3 input rows * 32 = 160 < 200, two need
    # 128 + 4 * 32 = 256: h = 1, 8 bands -> 768 + 8 * 296 = 3136.
    # Channel passes: per channel ceil(296 / 8) + 8 = 45, room 200 - 96 = 104 -> m = 2,
    # 4 passes re-read the 256-element input 3 more times -> 768 + 296 + 768 = 1832.
    # The buffer is what the passes hold: 2 * 37 weights, one output row of 2 channels (16)
    # and the 3-row window of x (96): 186.
    assert model.cost(mask_of((2,))) == (186, 1832, False)
    assert model.layer_tiling(2)[:3] == ("channel-passes", 4, 1832)
    # the paper's convention: its own io + weights once, and its line buffer alone (296 + 96)
    paper = make_cost_model(model.graph, Accelerator(200, "lbdf", 1, "paper"))
    assert paper.cost(mask_of((2,))) == (392, 768 + 296, False)


# -------------------------------------------------------------------------- residual
# residual: 0 stem, 1 conv1, 2 relu1, 3 conv2, 4 add(conv2, stem), 5 relu2. Every tensor
# is (4,8,8) = 256 elements, row 8*4 = 32; each 3x3 conv 148 weights.
# Delays: stem 1, conv1 1+1 = 2, relu1 2, conv2 3; the add starts at max(3, 1) = 3.
RESIDUAL_CASES = [
    # whole: x 3 rows (stem); stem.out max(conv1 1 + 3, add 3 + 1) - d(stem) 1 = 3 rows (one
    # ring: conv1's window already spans the add's lag); conv1.out 1; relu1.out 3;
    # conv2.out 1; add.out 1; y 1 -> 13 rows * 32 = 416, skip 0; io x 256 + y 256 = 512
    ((0, 1, 2, 3, 4, 5), 444, 416, 0, 512, 444 + 416, 512 + 444),
    # without relu2: add.out is the sink (1 row), no y: 12 rows * 32 = 384
    ((0, 1, 2, 3, 4), 444, 384, 0, 512, 444 + 384, 512 + 444),
    # block without the stem: stem.out comes from outside, read by conv1 (start 0, 3 rows)
    # and the add (start d(conv2) = 2, 1 row): max(0 + 3, 2 + 1) - 0 = 3 rows; conv1.out 1,
    # relu1.out 3, conv2.out 1, add.out 1, y 1 -> 10 rows = 320; io stem.out 256 + y 256
    ((1, 2, 3, 4, 5), 296, 320, 0, 512, 296 + 320, 512 + 296),
    # conv2+add: relu1.out 3 rows; stem.out from outside, read by the add at start
    # d(conv2) = 1: 1 row; conv2.out 1; add.out 1 -> 6 rows = 192; io relu1.out + stem.out
    # + add.out = 768
    ((3, 4), 148, 192, 0, 768, 148 + 192, 768 + 148),
    # stem+add only (not connected through conv2): x 3 rows; stem.out read by the add at
    # start d(stem) = 1: 1 row; conv2.out (outside) 1; add.out 1 -> 6 rows = 192; io x,
    # conv2.out, stem.out (read by conv1 outside), add.out
    ((0, 4), 148, 192, 0, 1024, 148 + 192, 1024 + 148),
]


@pytest.mark.parametrize("case", RESIDUAL_CASES, ids=lambda c: str(c[0]))
def test_residual_terms(case) -> None:
    check(lbdf(residual_block), *case)


def test_residual_two_bytes_per_element() -> None:
    model = lbdf(residual_block, b=2)
    whole = model.graph.all_nodes
    assert model.buffer_bytes(whole) == 2 * 860  # 2 * (444 + 416) = 1720
    assert model.dram_bytes(whole) == 2 * 956  # 2 * (512 + 444) = 1912


# ------------------------------------------------------------------------------- SE
# se: 0 conv 3x3 8->8 (584 w), 1 gap, 2 fc1 (18 w), 3 relu, 4 fc2 (24 w), 5 sigmoid,
# 6 mul(conv, sigmoid). x, conv.out, y are (8,8,8) = 512 (row 8*8 = 64); gap.out, fc2.out,
# sig.out are (8,1,1) (row 8); fc1.out, relu.out are (2,1,1) (row 2).
# Delays: conv 1; gap (a reduction, one row a pass) lag H_in 8 -> 9; fc1..sigmoid 9 (1x1
# convs lag 0); the mul starts at max(1, 9) = 9. gap.out is an accumulator: its 1 row.
SE_CASES = [
    # whole: x 3 rows 192; conv.out read by gap (start 1, 1 row) and mul (start 9, 1 row):
    # min(8, 9 + 1 - 1) = 8 rows, window 1 (64) + skip 7 (448): the whole map; gap.out 8,
    # fc1.out 2, relu.out 2, fc2.out 8, sig.out 8, y 64 -> line 192 + 64 + 8 + 2 + 2 + 8
    # + 8 + 64 = 348, skip 448; io x 512 + y 512
    ((0, 1, 2, 3, 4, 5, 6), 626, 348, 448, 1024, 626 + 348 + 448, 1024 + 626),
    # everything but the conv: conv.out comes from outside, read by gap (start 0) and mul
    # (start 8): min(8, 8 + 1 - 0) = 8 rows, still the whole map (window 64 + skip 448);
    # line 64 + 8 + 2 + 2 + 8 + 8 + 64 = 156; io conv.out 512 (once) + y 512
    ((1, 2, 3, 4, 5, 6), 42, 156, 448, 1024, 42 + 156 + 448, 1024 + 42),
    # conv+gap: x 192 + conv.out 1 row 64 + gap.out's accumulator 8 = 264; io x 512
    # + conv.out 512 (read by mul) + gap.out 8
    ((0, 1), 584, 264, 0, 1032, 584 + 264, 1032 + 584),
    # sigmoid+mul: fc2.out 8 + sig.out 8 + conv.out 1 row 64 (the mul starts at 0) + y 64
    # = 144; io fc2.out 8 + conv.out 512 + y 512
    ((5, 6), 0, 144, 0, 1032, 144, 1032),
]


@pytest.mark.parametrize("case", SE_CASES, ids=lambda c: str(c[0]))
def test_se_terms(case) -> None:
    check(lbdf(se_block), *case)


def test_se_ring_is_the_whole_feature_map() -> None:
    # the multiply reads conv.out 8 rows after the pool has read all 8: one row of window
    # and 7 of skip hold the whole map, whether the conv is in the group or not
    model = lbdf(se_block)
    conv_out = model.graph.nodes[0].outputs[0]
    for group in (model.graph.all_nodes, model.graph.all_nodes & ~1):
        assert model.rings(group)[conv_out] == (1, 8)
        assert model.buffer_terms(group)[2] == 7 * 64 == model.graph.tensors[conv_out].size - 64


def test_se_two_bytes_per_element() -> None:
    model = lbdf(se_block, beta=2844, b=2)
    whole = model.graph.all_nodes
    assert model.buffer_bytes(whole) == 2 * 1422  # 2 * (626 + 348 + 448) = 2844: not < beta
    assert model.dram_bytes(whole) == 2 * 1650  # 3300
    assert not model.is_valid(whole)
    assert compulsory_traffic(model.graph, 2) == 2 * (512 + 512 + 626)


# -------------------------------------------------------------------------- strided
# strided: 0 relu0 on (4,16,16) (row 16*4 = 64), 1 conv_s 3x3/2 4->8 (296 w) -> (8,8,8)
# (row 8*8 = 64), 2 conv_b 3x3 8->8 (584 w), 3 conv_c 1x1 8->4 (36 w) -> (4,8,8) = 256
# (row 32). conv_s's output row o reads input rows 2o-1..2o+1: 3 rows.
STRIDED_CASES = [
    # whole: x 1 row 64 + relu0.out 3 rows * W 16 * C 4 = 192 (consumer's input rows)
    # + conv_s.out 3 * 64 = 192 + conv_b.out 1 * 64 + y 1 * 32 = 544; io x 1024 + y 256
    ((0, 1, 2, 3), 916, 544, 0, 1280, 916 + 544, 1280 + 916),
    # conv_s: relu0.out 192 + conv_s.out's row 64 = 256; io relu0.out 1024 + conv_s.out 512
    ((1,), 296, 256, 0, 1536, 296 + 256, 1536 + 296),
    # conv_s+conv_b: 192 + 192 + conv_b.out's row 64 = 448; io 1024 + conv_b.out 512
    ((1, 2), 880, 448, 0, 1536, 880 + 448, 1536 + 880),
]


@pytest.mark.parametrize("case", STRIDED_CASES, ids=lambda c: str(c[0]))
def test_strided_terms(case) -> None:
    check(lbdf(strided_chain), *case)


# ----------------------------------------------------------------- strided residual
def test_lags_are_rescaled_across_strides() -> None:
    # strided_residual: 0 stem relu (4,8,8) row 32, 1 conv_s 3x3/2 -> (4,4,4) row 16,
    # 2 conv 3x3, 3 pool (kernel 1, stride 2: not windowed) -> (4,4,4), 4 add(conv, pool).
    # On a clock of 8 ticks per pass (a row of an 8-row tensor lasts 1, of a 4-row one 2):
    # stem 0; conv_s's row o (tick 2o after its first) reads stem rows up to 2o + 1: d 1;
    # conv's row o reads conv_s row o + 1 (made at 1 + 2(o + 1)): d 1 + 2 = 3 (one row of
    # conv_s.out is 2 ticks; the old plain row counts gave 2); pool's row o reads stem row
    # 2o: d 0. The add fires row o at tick 3 + 2o, when pool rows up to o + 1 are made and
    # it reads row o: pool.out holds 2 rows, 1 of window, 1 of skip (W 4 * C 4 = 16; the
    # pipeline needs only 1: conv_s's window keeps the rows the pool reads, so the pool
    # could run late; this formula does not see that).
    # line: x 1*32 + stem.out max(conv_s 3, pool 1) = 3 rows * W 8 * C 4 = 96
    # + conv_s.out 3*16 = 48 + conv.out 16 + pool.out 16 + y 16 = 224; weights 296;
    # io x 256 + y 64 = 320
    check(lbdf(strided_residual), range(5), 296, 224, 16, 320, 296 + 224 + 16, 320 + 296)


# ---------------------------------------------------------------------- upsampling
def test_upsampling_rows() -> None:
    # upsample: 0 deconv ConvTranspose 4x4/2 pad 1 on x (4,4,4) -> (4,8,8), 260 w;
    # 1 resize linear x2 -> (4,16,16); 2 relu.
    # The deconv's output row o gathers inputs i with o = 2i - 1 + j, j < 4: at most 2 rows
    # (o = 1: i = 0, 1); the linear resize's output row o reads floor(o/2 - 1/4) and the
    # next: 2 rows; every first output row reads input row 0 only: every lag is 0.
    # line: x 2 rows * W 4 * C 4 = 32; deconv.out 2 rows * 8 * 4 = 64; resize.out 1 * 16 * 4
    # = 64; y 64 -> 224. io x 64 + y 1024 = 1088
    check(lbdf(upsample_chain), (0, 1, 2), 260, 224, 0, 1088, 260 + 224, 1088 + 260)
    # nearest resize reads 1 row: line 32 + 32 + 64 + 64 = 192
    check(lbdf(lambda: upsample_chain("nearest")), (0, 1, 2), 260, 192, 0, 1088, 452, 1348)


# ---------------------------------------------------------------------- model level
def test_compulsory_traffic() -> None:
    # inputs + outputs + all weights
    assert compulsory_traffic(to_graph(conv_chain())) == 256 + 512 + 444
    assert compulsory_traffic(to_graph(conv_chain()), 2) == 2 * (256 + 512 + 444)
    assert compulsory_traffic(to_graph(residual_block())) == 256 + 256 + 444
    assert compulsory_traffic(to_graph(strided_chain())) == 1024 + 256 + 916


def test_memo_hit_returns_the_same_object() -> None:
    model = lbdf(residual_block)
    g = mask_of((0, 1, 2))
    first = model.cost(g)
    assert (model.stats.queries, model.stats.hits) == (1, 0)
    again = model.cost(g)
    assert again is first
    assert (model.stats.queries, model.stats.hits) == (2, 1)
    assert model.buffer_bytes(g) == first.buffer  # a third query, also a hit
    assert model.stats.hits == 2
    assert model.stats.hit_rate == pytest.approx(2 / 3)


def attention_scores() -> OpGraph:
    """q = relu(x), k = sigmoid(x), s = MatMul(q, k): x, q, k (2, 4, 3), s (2, 4, 4)."""
    x = Tensor("x", (2, 4, 3), -1)
    q, k, s = Tensor("q", (2, 4, 3), 0), Tensor("k", (2, 4, 3), 1), Tensor("s", (2, 4, 4), 2)
    nodes = [
        Node("relu", "Relu", "act", (0,), (1,)),
        Node("sig", "Sigmoid", "act", (0,), (2,)),
        Node("mm", "MatMul", "matmul", (1, 2), (3,), whole_input=True),
    ]
    return OpGraph.build("attn", nodes, [x, q, k, s], [0], [3])


def test_activation_matmul_holds_its_second_operand_whole() -> None:
    # q = relu(x), k = sigmoid(x) on x (2, 4, 3): rows of 2 * 3 = 6 elements, 4 rows.
    # s = MatMul(q, k) reads all 4 rows of k, so it starts at d(sigmoid) 0 + 4 = 4, and reads
    # row o of q then: q, made from row 0 on, holds min(4, 4 + 1 - 0) = 4 rows (window 1,
    # skip 3 * 6 = 18): beside a whole k, q is whole too. x: 1 row (relu and sigmoid start
    # at 0) 6; k 4 * 6 = 24; s 1 row of 2 * 4 = 8. Line 6 + 6 + 24 + 8 = 44, skip 18.
    graph = attention_scores()
    model = make_cost_model(graph, Accelerator(1 << 20, "lbdf"))
    assert model.buffer_terms(mask_of((0, 1, 2))) == (0, 44, 18)


def test_activation_matmul_alone_rereads_its_second_operand() -> None:
    # The same q.k matmul alone at 40 B: window of one output row = out 2 * 4 + all 4 rows of
    # q and k (6 * 4 each) = 56, too big; a strip of output columns still reads every column
    # of q and k (a matmul contracts whole rows), so no strip fits either, and streaming one
    # output row over q and k held whole (56) neither. What is left is ``direct``: each of
    # the 32 output elements reads what a whole-input op's window is, all of q and k
    # (24 + 24), one row of one channel at a time (3 + 3, + the element: 7 held):
    # 32 * 48 + the output 32 = 1568.
    graph = attention_scores()
    model = make_cost_model(graph, Accelerator(40, "lbdf"))
    assert model.layer_tiling(2)[:4] == ("direct", 32, 1568, 7)
    # LBDF itself holds one row of q (both from outside: q is read as late as it is
    # needed), all of k and one row of s (6 + 24 + 8 = 38 < 40): it fits, io only
    assert model.cost(mask_of((2,))) == (38, 80, True)

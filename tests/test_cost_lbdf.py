"""LBDF cost model (docs/cost-model.md, "LBDF") against hand arithmetic on tiny graphs.

Every expected number is written out from the cost-model formulas; nothing is derived by calling
the code under test. Row size of a tensor (C, H, W) is W * C elements.

    F_beta = b * (W(g) + line + skip)        F_D = DRAM_io(g) + b * W(g)
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
# relu.out are (4,8,8) = 256 elements (row 8*4 = 32), conv2.out is (8,8,8) = 512.
CHAIN_CASES = [
    # nodes, weights, line, skip, io, F_beta, F_D
    # conv1: line 3 rows * W 8 * C 4 = 96; io x 256 + conv1.out 256 = 512
    ((0,), 148, 96, 0, 512, 148 + 96, 512 + 148),
    # relu: line 1 row * 8 * 4 = 32; io 256 + 256
    ((1,), 0, 32, 0, 512, 32, 512),
    # conv2: line 3 * 8 * 4 = 96; io relu.out 256 + y 512 = 768
    ((2,), 296, 96, 0, 768, 296 + 96, 768 + 296),
    # conv1+relu: line 96 + 32 = 128; io x 256 + relu.out 256
    ((0, 1), 148, 128, 0, 512, 148 + 128, 512 + 148),
    # relu+conv2: line 32 + 96 = 128; io conv1.out 256 + y 512
    ((1, 2), 296, 128, 0, 768, 296 + 128, 768 + 296),
    # whole: weights 148 + 296 = 444; line 96 + 32 + 96 = 224; io x 256 + y 512 = 768
    ((0, 1, 2), 444, 224, 0, 768, 444 + 224, 768 + 444),
]


@pytest.mark.parametrize("case", CHAIN_CASES, ids=lambda c: str(c[0]))
def test_conv_chain_terms(case) -> None:
    check(lbdf(conv_chain), *case)


def test_conv_chain_two_bytes_per_element() -> None:
    model = lbdf(conv_chain, b=2)
    whole = mask_of((0, 1, 2))
    assert model.buffer_terms(whole) == (444, 224, 0)  # still elements
    assert model.buffer_bytes(whole) == 2 * (444 + 224)  # 1336
    assert model.dram_bytes(whole) == 2 * (768 + 444)  # 2424
    assert model.dram_bytes(mask_of((0,))) == 2 * (512 + 148)  # conv1 alone fits: io + W


def test_validity_is_strict() -> None:
    whole = mask_of((0, 1, 2))  # F_beta = 668 bytes
    assert lbdf(conv_chain, beta=669).is_valid(whole)
    assert not lbdf(conv_chain, beta=668).is_valid(whole)


def test_unfusable_singletons() -> None:
    # singletons F_beta: conv1 244, relu 32, conv2 392
    assert unfusable_nodes(lbdf(conv_chain, beta=200)) == 0b101
    assert unfusable_nodes(lbdf(conv_chain, beta=250)) == 0b100
    assert unfusable_nodes(lbdf(conv_chain, beta=393)) == 0
    model = lbdf(conv_chain, beta=200)
    # An unfusable op runs alone by its cheapest loop order (docs/cost-model.md,
    # "Single-layer cost"). conv2: x (4,8,8) -> (8,8,8), io 256 + 512, 296 weights.
    # Row bands: one output row needs 64 + 3 input rows * 32 = 160 < 200, two need
    # 128 + 4 * 32 = 256: h = 1, 8 bands -> 768 + 8 * 296 = 3136.
    # Channel passes: per channel ceil(296 / 8) + 8 = 45, room 200 - 96 = 104 -> m = 2,
    # 4 passes re-read the 256-element input 3 more times -> 768 + 296 + 768 = 1832.
    assert model.cost(mask_of((2,))) == (392, 1832, False)
    assert model.layer_tiling(2)[:3] == ("channel-passes", 4, 1832)
    # the paper's convention: its own io + weights once
    paper = make_cost_model(model.graph, Accelerator(200, "lbdf", 1, "paper"))
    assert paper.cost(mask_of((2,))) == (392, 768 + 296, False)


# -------------------------------------------------------------------------- residual
# residual: 0 stem, 1 conv1, 2 relu1, 3 conv2, 4 add(conv2, stem), 5 relu2. Every tensor
# is (4,8,8) = 256 elements, row 8*4 = 32; each 3x3 conv 148 weights, line 3*32 = 96.
# Delays: stem 1, conv1 1+1 = 2, relu1 2, conv2 3, add D = max(3, 1) = 3.
RESIDUAL_CASES = [
    # whole: line 96+96+32+96 + add 2 inputs (32+32) + relu2 32 = 416;
    # skip: add holds the stem input (3 - 1) rows * 32 = 64, conv2 input (3 - 3) * 32 = 0;
    # io x 256 + y 256 = 512
    ((0, 1, 2, 3, 4, 5), 444, 416, 64, 512, 444 + 416 + 64, 512 + 444),
    # without relu2: line 416 - 32 = 384; same skip; io x 256 + add.out 256
    ((0, 1, 2, 3, 4), 444, 384, 64, 512, 444 + 384 + 64, 512 + 444),
    # block without the stem: the add has ONE in-group input -> no skip buffer;
    # line 96 + 32 + 96 + 64 + 32 = 320; io stem.out 256 (read by conv1 and add, once) + y
    ((1, 2, 3, 4, 5), 296, 320, 0, 512, 296 + 320, 512 + 296),
    # conv2+add: line 96 + 64 = 160; io relu1.out + stem.out + add.out = 768
    ((3, 4), 148, 160, 0, 768, 148 + 160, 768 + 148),
    # stem+add only (not connected through conv2): one in-group input again, skip 0;
    # line 96 + 64 = 160; io x, conv2.out, stem.out (read by conv1 outside), add.out
    ((0, 4), 148, 160, 0, 1024, 148 + 160, 1024 + 148),
]


@pytest.mark.parametrize("case", RESIDUAL_CASES, ids=lambda c: str(c[0]))
def test_residual_terms(case) -> None:
    check(lbdf(residual_block), *case)


def test_residual_two_bytes_per_element() -> None:
    model = lbdf(residual_block, b=2)
    whole = model.graph.all_nodes
    assert model.buffer_bytes(whole) == 2 * 924  # 2 * (444 + 416 + 64) = 1848
    assert model.dram_bytes(whole) == 2 * 956  # 2 * (512 + 444) = 1912


# ------------------------------------------------------------------------------- SE
# se: 0 conv 3x3 8->8 (584 w), 1 gap, 2 fc1 (18 w), 3 relu, 4 fc2 (24 w), 5 sigmoid,
# 6 mul(conv, sigmoid). x, conv.out, y are (8,8,8) = 512 (row 8*8 = 64); gap.out, fc2.out,
# sig.out are (8,1,1) (row 8); fc1.out, relu.out are (2,1,1) (row 2).
# Delays: conv 1; gap lag = H_in 8 -> 9; fc1..sigmoid 9 (1x1 convs lag 0); mul D = 9.
SE_CASES = [
    # whole: line conv 3*64 = 192, gap 64, fc1 8, relu 2, fc2 2, sigmoid 8, mul 64 + 8 = 72
    # -> 348; skip: mul holds the conv input (9 - 1) rows * 64 = 512 (the whole map),
    # the sigmoid input (9 - 9) * 8 = 0; io x 512 + y 512
    ((0, 1, 2, 3, 4, 5, 6), 626, 348, 512, 1024, 626 + 348 + 512, 1024 + 626),
    # everything but the conv: the mul's conv input comes from outside -> skip 0;
    # line 64 + 8 + 2 + 2 + 8 + 72 = 156; io conv.out 512 (once) + y 512
    ((1, 2, 3, 4, 5, 6), 42, 156, 0, 1024, 42 + 156, 1024 + 42),
    # conv+gap: line 192 + 64 = 256; io x 512 + conv.out 512 (read by mul) + gap.out 8
    ((0, 1), 584, 256, 0, 1032, 584 + 256, 1032 + 584),
    # sigmoid+mul: line 8 + 72 = 80; io fc2.out 8 + conv.out 512 + y 512
    ((5, 6), 0, 80, 0, 1032, 80, 1032),
]


@pytest.mark.parametrize("case", SE_CASES, ids=lambda c: str(c[0]))
def test_se_terms(case) -> None:
    check(lbdf(se_block), *case)


def test_se_skip_is_the_whole_feature_map() -> None:
    model = lbdf(se_block)
    conv_out = model.graph.nodes[0].outputs[0]
    _, _, skip = model.buffer_terms(model.graph.all_nodes)
    assert skip == model.graph.tensors[conv_out].size == 8 * 8 * 8


def test_se_two_bytes_per_element() -> None:
    model = lbdf(se_block, beta=2972, b=2)
    whole = model.graph.all_nodes
    assert model.buffer_bytes(whole) == 2 * 1486  # 2972: not < beta
    assert model.dram_bytes(whole) == 2 * 1650  # 3300
    assert not model.is_valid(whole)
    assert compulsory_traffic(model.graph, 2) == 2 * (512 + 512 + 626)


# -------------------------------------------------------------------------- strided
# strided: 0 relu0 on (4,16,16) (row 16*4 = 64), 1 conv_s 3x3/2 4->8 (296 w) -> (8,8,8)
# (row 8*8 = 64), 2 conv_b 3x3 8->8 (584 w), 3 conv_c 1x1 8->4 (36 w) -> (4,8,8) = 256.
STRIDED_CASES = [
    # whole: line relu0 1*64 + conv_s 3 rows * W 16 * C 4 = 192 (consumer's input rows)
    # + conv_b 3*64 = 192 + conv_c 1*64 = 512; io x 1024 + y 256 = 1280
    ((0, 1, 2, 3), 916, 512, 0, 1280, 916 + 512, 1280 + 916),
    # conv_s: line 192; io relu0.out 1024 + conv_s.out 512
    ((1,), 296, 192, 0, 1536, 296 + 192, 1536 + 296),
    # conv_s+conv_b: line 192 + 192 = 384; io 1024 + conv_b.out 512
    ((1, 2), 880, 384, 0, 1536, 880 + 384, 1536 + 880),
]


@pytest.mark.parametrize("case", STRIDED_CASES, ids=lambda c: str(c[0]))
def test_strided_terms(case) -> None:
    check(lbdf(strided_chain), *case)


# ----------------------------------------------------------------- strided residual
def test_lags_are_added_without_rescaling_across_strides() -> None:
    # strided_residual: 0 stem relu (4,8,8) row 32, 1 conv_s 3x3/2 -> (4,4,4) row 16,
    # 2 conv 3x3, 3 pool (kernel 1, stride 2: not windowed) -> (4,4,4), 4 add(conv, pool).
    # Delays: stem 0, conv_s 0 + 1 = 1, conv 1 + 1 = 2 (not rescaled by the stride), pool 0,
    # add D = 2: holds the pool input 2 rows * W 4 * C 4 = 32.
    # line: stem 1*32 + conv_s 3 rows * W 8 * C 4 = 96 + conv 3*16 = 48 + pool 1*32
    # + add 16 + 16 = 240; weights 296; io x 256 + y 64 = 320
    check(lbdf(strided_residual), range(5), 296, 240, 32, 320, 296 + 240 + 32, 320 + 296)


# ---------------------------------------------------------------------- upsampling
def test_upsampling_rows() -> None:
    # upsample: 0 deconv ConvTranspose 4x4/2 on x (4,4,4) -> (4,8,8), 260 w;
    # 1 resize linear x2 -> (4,16,16); 2 relu.
    # line: deconv K_h 4 rows * W 4 * C 4 = 64; linear resize 2 rows * 8 * 4 = 64;
    # relu 1 * 16 * 4 = 64 -> 192. io x 64 + y 1024 = 1088
    check(lbdf(upsample_chain), (0, 1, 2), 260, 192, 0, 1088, 260 + 192, 1088 + 260)
    # nearest resize keeps 1 row: line 64 + 32 + 64 = 160
    check(lbdf(lambda: upsample_chain("nearest")), (0, 1, 2), 260, 160, 0, 1088, 420, 1348)


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
    # s = MatMul(q, k) reads all 4 rows of k: line q 1 row 6 + k whole 4 * 6 = 24, plus
    # relu and sigmoid one row each (6 + 6); k is held whole, so no skip rows although
    # MatMul waits for it. Group {relu, sigmoid, matmul}: line 6 + 6 + 6 + 24 = 42, skip 0.
    graph = attention_scores()
    model = make_cost_model(graph, Accelerator(1 << 20, "lbdf"))
    assert model.buffer_terms(mask_of((0, 1, 2))) == (0, 42, 0)


def test_activation_matmul_alone_rereads_its_second_operand() -> None:
    # The same q.k matmul alone at 40 B: window of one output row = out 2 * 4 + all 4 rows of
    # q and k (6 * 4 each) = 56, too big. A strip of 2 of the 4 output columns holds half the
    # window of 3 rows (8 * 3 + 48 = 72, half 36 < 40; 4 rows: 40): 2 strips of 2 bands,
    # each reading all of k (24): io 24 + 24 + 32 = 80, + 3 * 24 re-reads = 152. Streaming q
    # row by row re-reads k for each of the 4 output rows, as much (80 + 3 * 24 = 152): the
    # tie goes to row bands.
    graph = attention_scores()
    model = make_cost_model(graph, Accelerator(40, "lbdf"))
    assert model.layer_tiling(2)[:3] == ("row-bands", 4, 152)
    # LBDF itself holds one row of q and all of k (6 + 24 = 30 < 40): it fits, io only
    assert model.cost(mask_of((2,))) == (30, 80, True)

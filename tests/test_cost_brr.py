"""BRR cost model (docs/cost-model.md, "BRR") against hand arithmetic on tiny graphs.

Every expected number is written out from the cost-model formulas; nothing is derived by calling
the code under test. For a node v with output (C, H, W): h(v) = 1 on last nodes, else
max over in-group consumers c of min((h(c) - 1) * S_c + K_c, H_out(v)); external inputs get
rows the same way (capped at their height). footprint = sum C*W*h (+ external input rows),
row_step = sum C*W*scale. Weights are resident iff b*W + footprint < beta, else h_tile =
the largest h whose tile (every op's and external input's rows for h output rows) fits and
tiles = ceil(H_out(L) / h_tile); a streamed group's F_beta is that tile's footprint.
"""

from __future__ import annotations

import pytest

from accel_model import Accelerator, compulsory_traffic, make_cost_model, unfusable_nodes
from accel_model.brr import BRR
from accel_model.rows import row_window
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

# Full-channel buffering, every op keeping its own rows: the BRR of these hand computations.
# Channel slices and in-place ops are tested by hand in tests/test_cost_brr_channels.py.
FULL = {"pe_unroll": 0, "in_place": False}


def brr(builder, beta: int = 1 << 20, b: int = 1) -> BRR:
    model = make_cost_model(to_graph(builder()), Accelerator(beta, "brr", b, **FULL))
    assert isinstance(model, BRR)
    return model


def check_terms(model: BRR, nodes, footprint, row_step, last_height, weights, io) -> None:
    g = mask_of(nodes)
    t = model.terms(g)
    assert t.footprint == footprint
    assert t.row_step == row_step
    assert t.last_height == last_height
    assert t.weights == weights == model.weight_elements(g)
    assert model.io_elements(g) == io


def check_tiling(model: BRR, nodes, resident: bool, h_tile: int, tiles: int) -> None:
    t = model.terms(mask_of(nodes))
    assert (t.resident, t.h_tile, t.tiles) == (resident, h_tile, tiles)


# ----------------------------------------------------------------------------- chain
# conv_chain: 0 conv1 3x3 4->4 (148 w), 1 relu, 2 conv2 3x3 4->8 (296 w), all 8x8.
# Row sizes C*W: x 32, conv1.out 32, relu.out 32, conv2.out 64.
CHAIN_TERMS = [
    # nodes, footprint, row_step, H_out(L), W, io
    # whole: h(conv2) 1; h(relu) = (1-1)*1 + 3 = 3; h(conv1) = (3-1)*1 + 1 = 3;
    # x rows for conv1 = (3-1)*1 + 3 = 5. footprint 64*1 + 32*3 + 32*3 + 32*5 = 416;
    # scale 1 everywhere: row_step 64 + 32 + 32 = 128
    ((0, 1, 2), 416, 128, 8, 444, 768),
    # conv1+relu: h 1, 1; x rows 3: 32 + 32 + 96 = 160; row_step 32 + 32 = 64
    ((0, 1), 160, 64, 8, 148, 512),
    # conv1: 32*1 + x 3 rows * 32 = 128; row_step 32
    ((0,), 128, 32, 8, 148, 512),
    # relu: 32 + conv1.out 1 row * 32 = 64
    ((1,), 64, 32, 8, 0, 512),
    # conv2: 64*1 + relu.out 3 rows * 32 = 160
    ((2,), 160, 64, 8, 296, 768),
]


@pytest.mark.parametrize("case", CHAIN_TERMS, ids=lambda c: str(c[0]))
def test_conv_chain_terms(case) -> None:
    check_terms(brr(conv_chain), *case)


def test_conv_chain_resident_weights() -> None:
    # W 444 + footprint 416 = 860 < beta 1024: resident, tiles 1
    model = brr(conv_chain, beta=1024)
    assert model.cost(mask_of((0, 1, 2))) == (416 + 444, 768 + 444, True)
    check_tiling(model, (0, 1, 2), True, 8, 1)  # one tile of all H_out(L) = 8 rows
    # beta 861 is the smallest buffer that holds both (strict, like every fit test)
    assert brr(conv_chain, beta=861).cost(mask_of((0, 1, 2))) == (860, 1212, True)
    check_tiling(brr(conv_chain, beta=861), (0, 1, 2), True, 8, 1)


# A tile of h output rows of the whole chain holds conv2 h rows (64 h), relu and conv1 h + 2
# rows each (32 (h + 2) each) and x min(h + 4, 8) rows: f(h) = 128 h + 128 + 32 min(h + 4, 8);
# f(1) = 416, f(2) = 576, f(3) = 736, f(4) = 896.


def test_conv_chain_boundary_byte_streams() -> None:
    # beta 860 == W + footprint exactly: weights do not fit beside the rows, so they stream:
    # f(3) = 736 < 860 <= f(4): h_tile 3, tiles 3; F_D = 768 + 444 * 3 = 2100
    model = brr(conv_chain, beta=860)
    assert model.cost(mask_of((0, 1, 2))) == (736, 2100, True)
    check_tiling(model, (0, 1, 2), False, 3, 3)
    # the footprint itself at the boundary byte: 416 is invalid, 417 valid
    assert not brr(conv_chain, beta=416).is_valid(mask_of((0, 1, 2)))
    assert brr(conv_chain, beta=417).is_valid(mask_of((0, 1, 2)))


def test_conv_chain_streamed_weights() -> None:
    # beta 600 < 860: streamed; f(2) = 576 < 600 <= f(3): h_tile 2, tiles = ceil(8 / 2) = 4;
    # F_D = 768 + 444 * 4 = 2544; F_beta = the tile's footprint 576
    assert brr(conv_chain, beta=600).cost(mask_of((0, 1, 2))) == (576, 2544, True)
    check_tiling(brr(conv_chain, beta=600), (0, 1, 2), False, 2, 4)
    # beta 859: f(3) = 736 fits, h_tile 3, tiles 3: F_D = 768 + 1332 = 2100
    assert brr(conv_chain, beta=859).cost(mask_of((0, 1, 2))) == (736, 2100, True)
    check_tiling(brr(conv_chain, beta=859), (0, 1, 2), False, 3, 3)
    # conv1+relu at beta 256 < 148 + 160: a tile of h rows holds relu and conv1 32 h each and
    # x h + 2 rows: f(h) = 96 h + 64; f(2) = 256 is not below 256, so h_tile 1, tiles 8
    # (the old rule grew a tile by the ops' 64 elements a row only and claimed 4 tiles)
    assert brr(conv_chain, beta=256).cost(mask_of((0, 1))) == (160, 512 + 148 * 8, True)
    # ... and resident at 512: F_beta 160 + 148 = 308
    assert brr(conv_chain, beta=512).cost(mask_of((0, 1))) == (308, 512 + 148, True)


def test_conv_chain_two_bytes_per_element() -> None:
    whole = mask_of((0, 1, 2))
    # bytes: footprint 2*416 = 832, weights 2*444 = 888
    # beta 1200 < 1720: 2 f(2) = 1152 < 1200 <= 2 f(3): h_tile 2, tiles 4
    model = brr(conv_chain, beta=1200, b=2)
    assert model.terms(whole).footprint == 416  # terms stay in elements
    check_tiling(model, (0, 1, 2), False, 2, 4)
    assert model.cost(whole) == (1152, 2 * 768 + 888 * 4, True)  # F_D 1536 + 3552 = 5088
    # beta 2048 >= 1720: resident
    assert brr(conv_chain, beta=2048, b=2).cost(whole) == (1720, 1536 + 888, True)
    assert compulsory_traffic(model.graph, 2) == 2 * (256 + 512 + 444)


def test_footprint_must_be_strictly_below_beta() -> None:
    whole = mask_of((0, 1, 2))
    assert not brr(conv_chain, beta=416).is_valid(whole)
    assert brr(conv_chain, beta=417).is_valid(whole)


def test_unfusable_singletons() -> None:
    # singleton footprints: conv1 128, relu 64, conv2 160
    assert unfusable_nodes(brr(conv_chain, beta=100)) == 0b101
    assert unfusable_nodes(brr(conv_chain, beta=150)) == 0b100
    assert unfusable_nodes(brr(conv_chain, beta=161)) == 0
    # run alone (docs/cost-model.md, "Single-layer cost"); the buffer is what its schedule
    # holds. conv1 (4,8,8) -> (4,8,8): one output row needs 32 + 3 * 32 = 128 >= 100 and
    # leaves no room for a channel pass. Streaming one output channel at a time: its 64
    # partial sums, the 9 weights of one input channel and the input row being scattered
    # (64 + 9 + 8 = 81 < 100), the input read once per channel: 512 + 148 + 3 * 256 = 1428.
    # (Output tiles of m = 2 channels x 2 rows: per input channel 2 * 9 weights, 2 * 16
    # partial sums and a 4 x 8 window, 82 < 100; 4 row tiles read the weights 4 times and,
    # padding left out, 3 + 4 + 4 + 3 = 14 input rows of 8 a pass, 2 passes:
    # 256 + 4 * 148 + 2 * 4 * 112 = 1744. Row bands in 2 strips of 4 columns, one row a band
    # (16 + 3 * 4 * 6 = 88), 5 input columns each (the sixth is padding): 512 + 4 * 8 * 2
    # halo + 16 * 148 = 2944.)
    assert brr(conv_chain, beta=100).cost(mask_of((0,))) == (81, 1428, False)
    assert brr(conv_chain, beta=100).layer_tiling(0)[:3] == ("streaming", 4, 1428)
    paper = make_cost_model(to_graph(conv_chain()), Accelerator(100, "brr", 1, "paper", **FULL))
    assert paper.cost(mask_of((0,))) == (128, 512 + 148, False)
    check_tiling(brr(conv_chain, beta=100), (0,), False, 0, 1)


# -------------------------------------------------------------------------- strided
# strided: 0 relu0 (4,16,16) row 64, 1 conv_s 3x3/2 -> (8,8,8) row 64, 2 conv_b 3x3 row 64,
# 3 conv_c 1x1 -> (4,8,8) row 32. Weights 0, 296, 584, 36 (916). x row 64.
STRIDED_TERMS = [
    # whole: h conv_c 1; conv_b (1-1)*1 + 1 = 1; conv_s (1-1)*1 + 3 = 3;
    # relu0 (3-1)*2 + 3 = 7 (capped at 16, not reached); x for relu0 (7-1)*1 + 1 = 7.
    # footprint 32*1 + 64*1 + 64*3 + 64*7 + x 64*7 = 32+64+192+448+448 = 1184.
    # scale: conv_c, conv_b, conv_s 1; relu0 = 1 * S(conv_s) 2 = 2.
    # row_step 32 + 64 + 64 + 64*2 = 288. io x 1024 + y 256
    ((0, 1, 2, 3), 1184, 288, 8, 916, 1280),
    # conv_s+conv_b: h 3 for conv_s, relu0.out rows (3-1)*2 + 3 = 7:
    # 64 + 192 + 7*64 = 704; row_step 64 + 64 = 128; io 1024 + 512
    ((1, 2), 704, 128, 8, 880, 1536),
    # relu0+conv_s: h conv_s 1, relu0 3, x 3: 64 + 192 + 192 = 448; row_step 64 + 128
    ((0, 1), 448, 192, 8, 296, 1024 + 512),
    # conv_s: 64 + relu0.out 3 rows * 64 = 256
    ((1,), 256, 64, 8, 296, 1536),
]


@pytest.mark.parametrize("case", STRIDED_TERMS, ids=lambda c: str(c[0]))
def test_strided_terms(case) -> None:
    check_terms(brr(strided_chain), *case)


def test_strided_costs() -> None:
    whole = mask_of((0, 1, 2, 3))
    # resident: 4096 >= 916 + 1184 = 2100
    assert brr(strided_chain, beta=4096).cost(whole) == (2100, 1280 + 916, True)
    # A tile of h output rows (h <= 5) holds conv_c h rows (32 h), conv_b h (64 h), conv_s h + 2
    # (64 (h + 2)), relu0 (h + 2 - 1) * 2 + 3 = 2h + 5 rows (64 (2h + 5)) and x 2h + 5 rows:
    # f(h) = 96 h + 64 (h + 2) + 128 (2h + 5) = 416 h + 768; f(1) = 1184, f(2) = 1600,
    # f(3) = 2016. x's rows grow by 2 a row (relu0's scale), so a tile grows by 416, not by the
    # ops' row_step 288 (the old rule: h_tile = floor(416 / 288) + 1 = 2 at 1600).
    # streamed at 1600: f(2) = 1600 is not below 1600, so h_tile 1, tiles 8
    assert brr(strided_chain, beta=1600).cost(whole) == (1184, 1280 + 916 * 8, True)
    check_tiling(brr(strided_chain, beta=1600), range(4), False, 1, 8)
    # streamed at 1700: f(2) = 1600 < 1700 <= f(3): h_tile 2, tiles ceil(8 / 2) = 4
    assert brr(strided_chain, beta=1700).cost(whole) == (1600, 1280 + 916 * 4, True)
    check_tiling(brr(strided_chain, beta=1700), range(4), False, 2, 4)
    # b = 2, beta 3300 < 2 * 2100: 2 f(2) = 3200 < 3300 <= 2 f(3) = 4032: h_tile 2, tiles 4;
    # F_beta 3200, F_D = 2 * 1280 + 2 * 916 * 4 = 2560 + 7328
    assert brr(strided_chain, beta=3300, b=2).cost(whole) == (3200, 2560 + 1832 * 4, True)
    # conv_s+conv_b at 1024 < 880 + 704: a tile of h rows holds conv_b h, conv_s h + 2 and
    # relu0.out 2h + 5 rows, 64 each: f(h) = 64 h + 64 (h + 2) + 64 (2h + 5) = 256 h + 448;
    # f(2) = 960 < 1024 <= f(3) = 1216: h_tile 2, tiles 4; F_D = 1536 + 880 * 4 = 5056
    # (the old rule: h_tile = floor(320 / 128) + 1 = 3 with 3 tiles, but a 3-row tile needs 1216)
    assert brr(strided_chain, beta=1024).cost(mask_of((1, 2))) == (960, 5056, True)
    check_tiling(brr(strided_chain, beta=1024), (1, 2), False, 2, 4)


# -------------------------------------------------------------------------- residual
# residual (hw 8): 0 stem, 1 conv1, 2 relu1, 3 conv2, 4 add(conv2, stem), 5 relu2; every
# tensor (4,8,8), row 32; 444 weights in all.
def test_residual_terms() -> None:
    model = brr(residual_block)
    # whole: h relu2 1, add 1, conv2 (1-1)+1 = 1, relu1 (1-1)+3 = 3, conv1 (3-1)+1 = 3,
    # stem max(conv1: (3-1)+3 = 5, add: 1) = 5; x for stem (5-1)+3 = 7.
    # footprint 32 * (1+1+1+3+3+5) + 32*7 = 448 + 224 = 672; row_step 6 * 32 = 192
    check_terms(model, (0, 1, 2, 3, 4, 5), 672, 192, 8, 444, 512)
    # block without stem: h relu2 1, add 1, conv2 1, relu1 3, conv1 3;
    # stem.out (external) rows: for conv1 (3-1)+3 = 5, for add 1 -> 5.
    # footprint 32 * (1+1+1+3+3) + 32*5 = 288 + 160 = 448; row_step 5 * 32 = 160
    check_terms(model, (1, 2, 3, 4, 5), 448, 160, 8, 296, 512)
    # conv2+add: h add 1, conv2 1; relu1.out rows 3, stem.out rows 1:
    # 32 + 32 + 96 + 32 = 192; row_step 64
    check_terms(model, (3, 4), 192, 64, 8, 148, 768)


def test_residual_costs() -> None:
    whole = mask_of(range(6))
    # resident: 2048 >= 444 + 672 = 1116
    assert brr(residual_block, beta=2048).cost(whole) == (1116, 512 + 444, True)
    # A tile of h output rows holds relu2, add, conv2 h rows each, relu1 and conv1 min(h + 2, 8),
    # stem min(h + 4, 8) and x min(h + 6, 8), 32 each:
    # f(h) = 32 (3h + 2 min(h + 2, 8) + min(h + 4, 8) + min(h + 6, 8));
    # f(1) = 32 * 21 = 672, f(2) = 32 * (6 + 8 + 6 + 8) = 896, f(3) = 32 * (9 + 10 + 7 + 8) = 1088
    # streamed at 800: f(1) = 672 < 800 <= f(2): h_tile 1, tiles 8: F_D = 512 + 444*8 = 4064
    assert brr(residual_block, beta=800).cost(whole) == (672, 4064, True)
    # streamed at 1000: f(2) = 896 < 1000 <= f(3): h_tile 2, tiles 4: F_D = 512 + 1776 = 2288;
    # F_beta = the tile's 896
    assert brr(residual_block, beta=1000).cost(whole) == (896, 2288, True)


def test_rows_are_capped_at_the_producer_height() -> None:
    model = brr(lambda: residual_block(hw=4))  # every tensor (4,4,4), row 4*4 = 16
    # stem needs min((3-1)+3 = 5, H 4) = 4 rows; x needs min((4-1)+3 = 6, 4) = 4 rows.
    # footprint 16 * (1+1+1+3+3+4) + 16*4 = 208 + 64 = 272; row_step 6 * 16 = 96
    check_terms(model, range(6), 272, 96, 4, 444, 64 + 64)
    # A tile of h rows: relu2, add, conv2 h each, relu1 and conv1 min(h + 2, 4), stem and x 4
    # (capped whatever h): f(h) = 16 (3h + 2 min(h + 2, 4) + 8); f(1) = 272, f(2) = 352,
    # f(3) = 400. beta 400 < 444 + 272: streamed, f(2) = 352 < 400 <= f(3) = 400: h_tile 2,
    # tiles = ceil(4 / 2) = 2; F_beta = the tile's 352
    assert brr(lambda: residual_block(hw=4), beta=400).cost(mask_of(range(6))) == (
        352,
        128 + 444 * 2,
        True,
    )


# ------------------------------------------------------------------------------- SE
# se: 0 conv 3x3 8->8 (584), 1 gap, 2 fc1 (18), 3 relu, 4 fc2 (24), 5 sigmoid, 6 mul.
# Rows C*W: x, conv.out, y 64; gap.out, fc2.out, sig.out 8; fc1.out, relu.out 2.
def test_se_terms() -> None:
    model = brr(se_block)
    # whole: h mul 1; sigmoid min(1, H 1) = 1; fc2, relu, fc1, gap 1;
    # conv: for gap (K = H_in 8, S = 8/1): (1-1)*8 + 8 = 8; for mul 1 -> 8 (whole map);
    # x for conv min((8-1)+3 = 10, 8) = 8.
    # footprint 64 + 8 + 8 + 2 + 2 + 8 + 64*8 + x 64*8 = 92 + 512 + 512 = 1116.
    # scale: 1 for mul..gap; conv max(scale(gap) 1 * S_gap 8, 1 * 1) = 8:
    # row_step 92 + 64*8 = 604
    check_terms(model, range(7), 1116, 604, 8, 626, 1024)
    # without conv: conv.out is external, read by gap (8 rows) and mul (1 row) -> 8 rows;
    # footprint 92 + 64*8 = 604; row_step 92
    check_terms(model, range(1, 7), 604, 92, 8, 42, 1024)


def test_se_costs() -> None:
    whole = mask_of(range(7))
    # resident at 2048 >= 626 + 1116 = 1742
    assert brr(se_block, beta=2048).cost(whole) == (1742, 1024 + 626, True)
    # A tile of h output rows holds mul h rows (64 h), sigmoid, fc2, relu, fc1, gap 1 row each
    # (8 + 8 + 2 + 2 + 8 = 28), conv its whole map (8 rows, 512: gap reads all of it) and x 8
    # rows (512): f(h) = 64 h + 1052; f(1) = 1116, f(2) = 1180, f(3) = 1244.
    # streamed at 1200 < 1742: f(2) = 1180 < 1200 <= f(3): h_tile 2, tiles 4:
    # F_D = 1024 + 626 * 4 = 3528, F_beta 1180 (the old rule grew a tile by row_step 604, which
    # counts conv's 8 rows again for every output row although they are capped at the map's
    # height, and claimed h_tile 1 with 8 tiles)
    assert brr(se_block, beta=1200).cost(whole) == (1180, 1024 + 2504, True)
    check_tiling(brr(se_block, beta=1200), range(7), False, 2, 4)
    check_tiling(brr(se_block, beta=2048), range(7), True, 8, 1)
    # invalid at 1116 (footprint not below beta)
    assert not brr(se_block, beta=1116).is_valid(whole)


# ----------------------------------------------------------------- strided residual
def test_strided_residual_takes_the_max_over_consumers() -> None:
    # strided_residual: 0 stem relu (4,8,8) row 32, 1 conv_s 3x3/2 -> (4,4,4) row 16,
    # 2 conv 3x3, 3 pool (K 1, S 2), 4 add(conv, pool). 296 weights.
    # h add 1, conv 1, pool 1, conv_s (1-1)*1 + 3 = 3; stem max(conv_s: (3-1)*2 + 3 = 7,
    # pool: (1-1)*2 + 1 = 1) = 7; x 7. footprint 16*(1+1+1+3) + 32*7 + 32*7 = 96 + 448 = 544.
    # scale: add, conv, pool, conv_s 1; stem max(1 * 2, 1 * 2) = 2:
    # row_step 16*4 + 32*2 = 128. H_out(L) = 4.
    check_terms(brr(strided_residual), range(5), 544, 128, 4, 296, 256 + 64)
    # A tile of h rows: add, conv, pool h each, conv_s min(h + 2, 4) (16 a row); stem
    # max(conv_s: min(2 min(h + 2, 4) + 1, 8), pool: 2h - 1) rows and x as many (32 a row):
    # f(h) = 16 (3h + min(h + 2, 4)) + 64 min(2 min(h + 2, 4) + 1, 8);
    # f(1) = 96 + 448 = 544, f(2) = 160 + 512 = 672 (stem max(8, 3) = 8), f(3) = 208 + 512 = 720.
    # beta 700 < 296 + 544: f(2) = 672 < 700 <= f(3): h_tile 2, tiles = ceil(4 / 2) = 2
    assert brr(strided_residual, beta=700).cost(mask_of(range(5))) == (672, 320 + 592, True)


# ---------------------------------------------------------------- upsampling rows
# upsample: 0 deconv ConvTranspose 4x4/2 on x (4,4,4) (row 16) -> (4,8,8) (row 32), 260 w;
# 1 resize linear x2 -> (4,16,16) (row 64); 2 relu -> (4,16,16).
def test_upsampling_rows_and_fractional_scale() -> None:
    model = brr(upsample_chain)
    # h relu 1, resize 1; deconv for the linear resize (K 2, S 8/16 = 0.5): 0*0.5 + 2 = 2;
    # x for the deconv (K = ceil(4/2) = 2, S = 1/2): ceil((2-1)*0.5 + 2) = 3 (of 4).
    # footprint 64 + 64 + 32*2 + 16*3 = 240.
    # scale relu 1, resize 1, deconv 1 * 0.5 rounded up to whole rows: row_step
    # 64 + 64 + 32 * 1 = 160 (the paper's rule keeps 0.5: 144)
    check_terms(model, range(3), 240, 160, 16, 260, 64 + 1024)
    # A tile of h rows allocates each row count grown by its whole-row scale from the one-row
    # tile, up to its height: relu, resize h each (64 h each), deconv min(2 + (h - 1), 8)
    # rows (32 a row), x min(3 + (h - 1) * ceil(1 * 0.5), 4) rows (16 a row):
    # f(1) = 128 + 64 + 48 = 240; f(2) = 256 + 96 + 64 = 416; f(3) = 384 + 128 + 64 = 576
    # (the backward pass asks for less: deconv ceil((h - 1) * 0.5 + 2), 3 rows at h = 2).
    # streamed at 400 < 260 + 240: f(2) = 416 does not fit: h_tile 1, tiles 16
    # (the old rule: floor(160 / 144) + 1 = 2 with 8 tiles, a tile of 400 in a 400 buffer)
    assert brr(upsample_chain, beta=400).cost(mask_of(range(3))) == (240, 1088 + 260 * 16, True)
    # streamed at 450: f(2) = 416 < 450 <= f(3) = 576: h_tile 2, tiles = ceil(16 / 2) = 8
    assert brr(upsample_chain, beta=450).cost(mask_of(range(3))) == (416, 1088 + 260 * 8, True)
    # nearest resize reads 1 row per output row (K 1): deconv h = 0*0.5 + 1 = 1,
    # x ceil(0*0.5 + 2) = 2: footprint 64 + 64 + 32 + 32 = 192; row_step unchanged 160
    check_terms(brr(lambda: upsample_chain("nearest")), range(3), 192, 160, 16, 260, 1088)


def test_memo_hit_returns_the_same_object() -> None:
    model = brr(se_block, beta=1200)
    g = model.graph.all_nodes
    first = model.cost(g)
    again = model.cost(g)
    assert again is first
    assert (model.stats.queries, model.stats.hits) == (2, 1)
    model.cost(mask_of((0,)))
    assert (model.stats.queries, model.stats.hits) == (3, 1)


def test_an_op_that_merges_rows_reads_all_of_them() -> None:
    # a window-partition Transpose: (4, 14, 2) -> (28, 2, 2), S = 14 / 2 = 7, so one output
    # row reads K = 7 input rows: footprint = out row 28 * 2 + 7 input rows of 4 * 2 = 112
    x, y = Tensor("x", (4, 14, 2), -1), Tensor("y", (28, 2, 2), 0)
    graph = OpGraph.build("merge", [Node("t", "Transpose", "other", (0,), (1,))], [x, y], [0], [1])
    assert row_window(graph, 0) == (7.0, 7.0)
    model = make_cost_model(graph, Accelerator(1 << 20, "brr", **FULL))
    assert model.terms(mask_of((0,))).footprint == 56 + 56

"""Transformers as first-class models (docs/cost-model.md, "Transformers"): tokens are rows,
linear layers and per-token normalisations are row-local, attention's activation-activation
matmuls see their whole input, and the planner fuses and validates an exported encoder."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from accel_model import Accelerator
from accel_model.brr import BRR
from accel_model.lbdf import LBDF
from accel_model.windows import batch_channels, input_channels, streams_channels
from fusionplan.app.api import plan
from fusionplan.data.zoo import load_zoo_model
from fusionplan.ir.graph import OpGraph, mask_of
from fusionplan.ir.onnx_import import load_model
from tests import numeric_models as nm
from tests.onnx_builders import Net, linear_gelu, save, to_graph

D_MODEL, HEADS, TOKENS, FFN = 64, 4, 16, 128


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> OpGraph:
    """torch.nn.TransformerEncoder: 2 layers, d_model 64, 4 heads, feed-forward 128, batch
    first, dropout 0, eval mode, exported at 16 tokens (TorchScript exporter, opset 17)."""
    # torch (seconds to import) only for the tests that export
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        D_MODEL, HEADS, dim_feedforward=FFN, dropout=0.0, batch_first=True
    )
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    path = tmp_path_factory.mktemp("encoder") / "encoder.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exporter deprecation and tracer warnings
        torch.onnx.export(
            model, (torch.zeros(1, TOKENS, D_MODEL),), str(path), dynamo=False, opset_version=17
        )
    return load_model(path, strict_ops=True)  # every op of an encoder is a known op


def shape_in(graph: OpGraph, v: int, i: int = 0) -> tuple[int, int, int]:
    return graph.tensors[graph.nodes[v].inputs[i]].shape


def test_tokens_are_rows(encoder) -> None:
    linear = [v for v, n in enumerate(encoder.nodes) if n.kind == "matmul" and n.weights]
    attention = [v for v, n in enumerate(encoder.nodes) if n.kind == "matmul" and not n.weights]
    # per layer: the packed q/k/v projection, the output projection, two feed-forward layers
    assert len(linear) == 2 * 4 and len(attention) == 2 * 2
    # a linear layer's input is 16 rows of one token's 64 features, whatever the layout the
    # exporter gives it ((1, T, D), or sequence-first (T, 1, D) inside the attention)
    qkv, out_proj, ffn1, ffn2 = linear[:4]
    assert shape_in(encoder, qkv) == shape_in(encoder, ffn1) == (D_MODEL, TOKENS, 1)
    assert encoder.out_shape(qkv) == (3 * D_MODEL, TOKENS, 1)
    assert encoder.out_shape(ffn1) == shape_in(encoder, ffn2) == (FFN, TOKENS, 1)
    assert encoder.out_shape(out_proj)[1] == TOKENS
    # linear layers contract features inside a row; Q.K^T and P.V need all of K and V
    assert not any(encoder.nodes[v].whole_input for v in linear)
    assert all(encoder.nodes[v].whole_input for v in attention)
    scores = attention[0]
    assert encoder.out_shape(scores) == (HEADS, TOKENS, TOKENS)  # (N, heads, T, T): T rows
    # softmax over the keys and layer norm over the features stay inside a row
    rowwise = [n for n in encoder.nodes if n.op_type in ("Softmax", "LayerNormalization")]
    assert len(rowwise) == 2 * 3 and not any(n.whole_input for n in rowwise)
    # every op of the token stream keeps 16 rows
    assert {encoder.out_shape(v)[1] for v in range(len(encoder))} == {TOKENS}


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
def test_encoder_plans_validate(encoder, scheme: str) -> None:
    result = plan(encoder, buffer="64KB", scheme=scheme, search="ls", budget=200)
    assert result.validate() is result
    # row-local linear layers fuse with their neighbours: fewer groups than ops
    assert len(result.groups) < len(encoder)


def test_linear_gelu_costs_by_hand() -> None:
    graph = to_graph(linear_gelu())  # x(1,4,8) -> fc 8x16 -> bias -> gelu -> y(1,4,16)
    fc, bias, gelu = graph.nodes
    # 4 tokens are 4 rows: x (8,4,1), the rest (16,4,1); the linear layer is row-local
    assert shape_in(graph, 0) == (8, 4, 1) and graph.out_shape(2) == (16, 4, 1)
    assert (fc.weights, bias.weights, gelu.weights) == (128, 16, 0)
    assert not fc.whole_input
    group = mask_of(range(3))
    # LBDF: weights 128 + 16 = 144; one row per tensor: x 8, fc.out 16, bias.out 16 and
    # the sink y 16 -> line 56; every lag is 0 -> skip 0;
    # F_beta = 144 + 56 = 200; DRAM_io = x 32 + y 64 = 96, F_D = 96 + 144 = 240.
    lbdf = LBDF(graph, Accelerator.of("64KB", "lbdf"))
    assert lbdf.buffer_terms(group) == (144, 56, 0)
    assert (lbdf.cost(group).buffer, lbdf.cost(group).dram) == (200, 240)
    # BRR: h = 1 for gelu, bias and fc (every window (1, 1)); x needs 1 row of 8.
    # footprint = 16 + 16 + 16 + 8 = 56; row_step = 48; H_out(L) = 4; 144 + 56 < 64 KB:
    # resident, F_beta = 200, F_D = 240. (A whole-input MatMul would need all 4 rows of
    # x, K = 4: footprint 16 * 3 + 32 = 80.)
    brr = BRR(graph, Accelerator.of("64KB", "brr", pe_unroll=0, in_place=False))
    terms = brr.terms(group)
    assert (terms.footprint, terms.row_step, terms.last_height) == (56, 48, 4)
    assert terms.resident and brr.cost(group).buffer == 200
    assert brr.cost(group).dram == 240
    # in place (the default), the bias add and the gelu overwrite the fc's row: 16 + 8 = 24,
    # row step 16; 16 channels are within one 32-channel slice
    brr = BRR(graph, Accelerator.of("64KB", "brr"))
    terms = brr.terms(group)
    assert (terms.footprint, terms.row_step) == (24, 16)
    assert brr.cost(group) == (24 + 144, 240, True)


def test_sequence_first_tokens_are_rows(tmp_path) -> None:
    # PyTorch's attention transposes (1, T, D) to (T, 1, D) before its projections
    net = Net(0)
    t = net.op("Transpose", ["x"], "t", "transpose", perm=[1, 0, 2])
    net.op("MatMul", [t, net.weight("w", 8, 12)], "y", "proj")
    graph = load_model(save(net.model([("x", [1, 5, 8])], [("y", [5, 1, 12])]), tmp_path))
    assert shape_in(graph, 0) == shape_in(graph, 1) == (8, 5, 1)
    assert graph.out_shape(1) == (12, 5, 1) and not graph.nodes[1].whole_input


@pytest.mark.parametrize(
    ("axis", "whole"), [(-1, False), (2, False), (1, True)], ids=["last", "features", "tokens"]
)
def test_softmax_and_layernorm_are_whole_input_only_over_tokens(axis: int, whole: bool) -> None:
    net = Net(0)
    t = net.op("Softmax", ["x"], "s", "softmax", axis=axis)
    scale = net.const("ln.scale", np.ones((6, 8) if axis == 1 else 8, np.float32))
    net.op("LayerNormalization", [t, scale], "y", "ln", axis=axis)
    graph = to_graph(net.model([("x", [1, 6, 8])], [("y", [1, 6, 8])]))
    assert [n.whole_input for n in graph.nodes] == [whole, whole]


@pytest.mark.parametrize(("axis", "kind"), [(-1, "act"), (1, "global_pool")])
def test_decomposed_layernorm_mean_is_row_local_over_features(axis: int, kind: str) -> None:
    net = Net(0)
    net.op("ReduceMean", ["x"], "y", "mean", axes=[axis], keepdims=1)
    out = [1, 6, 1] if axis == -1 else [1, 1, 8]
    graph = to_graph(net.model([("x", [1, 6, 8])], [("y", out)]))
    assert (graph.nodes[0].kind, graph.nodes[0].whole_input) == (kind, kind == "global_pool")


def test_rank3_tensors_of_a_conv1d_keep_channels_first() -> None:
    # (N, C, L) read by a Conv1d, also through a Relu before it: rows are L, as before
    net = Net(0)
    t = net.op("Relu", ["x"], "r", "relu")
    t = net.op("Conv", [t, net.weight("w", 4, 4, 3)], "c", "conv", kernel_shape=[3], pads=[1, 1])
    net.op("Sigmoid", [t], "y", "sigmoid")
    graph = to_graph(net.model([("x", [1, 4, 16])], [("y", [1, 4, 16])]))
    assert {t.shape for t in graph.tensors} == {(4, 16, 1)}


def test_channels_last_block_keeps_the_image_rows() -> None:
    # ConvNeXt: depthwise conv -> to (N, H, W, C) -> LayerNorm -> Linear -> back to NCHW
    net = Net(0)
    t = net.conv("x", "dw", 8, 8, k=3, group=8)
    t = net.op("Transpose", [t], "nhwc", "to_nhwc", perm=[0, 2, 3, 1])
    t = net.op("LayerNormalization", [t, net.weight("ln.w", 8)], "ln.out", "ln", axis=-1)
    t = net.op("MatMul", [t, net.weight("fc.w", 8, 16)], "fc.out", "fc")
    net.op("Transpose", [t], "y", "to_nchw", perm=[0, 3, 1, 2])
    graph = to_graph(net.model([("x", [1, 8, 6, 5])], [("y", [1, 16, 6, 5])]))
    # the transpose between layouts maps (C, H, W) onto itself: 6 rows of 5 pixels x C
    assert [graph.out_shape(v) for v in range(len(graph))] == [
        (8, 6, 5),
        (8, 6, 5),
        (8, 6, 5),
        (16, 6, 5),
        (16, 6, 5),
    ]
    assert not any(n.whole_input for n in graph.nodes)


@pytest.mark.slow
def test_vit_block_matches_the_hand_estimate() -> None:
    """The numbers of docs/cost-model.md, "Transformers" (one ViT-B/16 encoder block)."""
    graph = load_zoo_model("vit_b_16")
    prefix = "/encoder/layers/encoder_layer_0/"
    block = [v for v, n in enumerate(graph.nodes) if n.name.startswith(prefix)]
    mlp = [v for v in block if "/ln_2/" in graph.nodes[v].name or "/mlp/" in graph.nodes[v].name]
    mlp.append(graph.node_index[prefix + "Add_1"])
    core = [graph.node_index[prefix + f"self_attention/{op}"] for op in ("MatMul_1", "Softmax")]
    core.append(graph.node_index[prefix + "self_attention/MatMul_2"])
    attention = [v for v in block if v not in mlp]
    assert (len(block), len(attention), len(mlp)) == (32, 21, 11)
    # the estimate is of full-channel buffering, each op keeping its own rows
    brr = BRR(graph, Accelerator.of("256KB", "brr", pe_unroll=0, in_place=False))
    lbdf = LBDF(graph, Accelerator.of("256KB", "lbdf"))
    assert brr.weight_elements(mask_of(block)) == 7_087_872 + 5  # + 5 scalar constants
    terms = brr.terms(mask_of(mlp))
    assert (terms.footprint, terms.row_step, terms.weights) == (25_344, 24_576, 4_723_971)
    assert (terms.resident, terms.h_tile, terms.tiles) == (False, 10, 20)
    # at 1 MB a tile of h tokens holds 25,344 h elements: 41 tokens, ceil(197 / 41) = 5 tiles
    at_1mb = BRR(graph, Accelerator.of("1MB", "brr", pe_unroll=0, in_place=False))
    assert (at_1mb.terms(mask_of(mlp)).h_tile, at_1mb.terms(mask_of(mlp)).tiles) == (41, 5)
    assert brr.terms(mask_of(core)).footprint == 1_386_072
    assert brr.terms(mask_of(attention)).footprint == 4_112_472
    # LBDF core (Q, K^T, V from outside): Q, the scores, the probabilities and the output
    # one row each, K^T and V whole (197 rows of 768)
    assert lbdf.buffer_terms(mask_of(core)) == (0, 768 + 2_364 + 2_364 + 2 * 151_296 + 768, 0)
    # the attention sub-block: Q, made with K, waits for the last row of K^T, and the block
    # input waits for the residual add: each held whole, 1 row of window and 196 of skip;
    # V is read whole, so it adds no skip: skip = 2 * 196 * 768
    assert lbdf.buffer_terms(mask_of(attention))[2] == 2 * 196 * 768
    # the MLP: one row of each tensor, the sink's included: 5 * 768 (block input, LN2, fc2,
    # its bias, the residual add) + 7 * 3072 (fc1, its bias, the five GELU ops) = 25,344
    assert lbdf.buffer_terms(mask_of(mlp))[1:] == (25_344, 0)


def test_attention_heads_read_their_own_channels() -> None:
    # transformer_block: 2 heads of d = 8 over 8 tokens. Q (2, 8, 8) and K^T (16, 8, 1):
    # head 1 reads Q's channel 1 and K^T's channels 8..16; P (2, 8, 8) and V (2, 8, 8):
    # channel 1 of each. A matmul whose second operand has no head axis (a (1, 1, 8, 8)
    # activation broadcast over the heads) reads all of it for every head.
    g = to_graph(nm.transformer_block())
    qk, pv = g.node_index["qk"], g.node_index["pv"]
    assert [input_channels(g, qk, i, (1, 2)) for i in (0, 1)] == [(1, 2), (8, 16)]
    assert [input_channels(g, pv, i, (1, 2)) for i in (0, 1)] == [(1, 2), (1, 2)]
    assert streams_channels(g, qk) and streams_channels(g, pv)
    net = Net()
    net.op("MatMul", ["q", "kt"], "y", "mm")
    shared = to_graph(net.model([("q", [1, 2, 8, 8]), ("kt", [1, 1, 8, 8])], [("y", [1, 2, 8, 8])]))
    mm = shared.node_index["mm"]
    assert batch_channels(shared, mm, 1) is None and not streams_channels(shared, mm)
    assert input_channels(shared, mm, 1, (1, 2)) == (
        0,
        shared.tensors[shared.nodes[mm].inputs[1]].shape[0],
    )

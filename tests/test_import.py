"""ONNX importer: graph clean-up (BN folding, view and constant removal), node attributes,
topological labels, tensor-level edges, shapes computed inside the graph, and one-line errors
for bad input that say what to do."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from fusionplan.data.zoo import load_zoo_model
from fusionplan.ir.errors import ConfigError, FusionPlanWarning, GraphError, ModelError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.onnx_import import load_model
from tests.onnx_builders import (
    FLOAT,
    Net,
    channel_shuffle,
    computed_expand,
    conv_bn,
    conv_chain,
    cyclic,
    dynamic_batch,
    fan_out,
    macs_model,
    matmul_after_flatten,
    residual_reordered,
    save,
    shape_subgraph,
    split_model,
    to_graph,
    view_ops,
    views_only,
    with_unknown_op,
)


def names(graph: OpGraph) -> list[str]:
    return [n.name for n in graph.nodes]


def named_edges(graph: OpGraph) -> set[tuple[str, str, str]]:
    return {
        (graph.nodes[e.src].name, graph.nodes[e.dst].name, graph.tensors[e.tensor].name)
        for e in graph.edges
    }


def one_line_error(exc_type, fn, *needles: str) -> str:
    with pytest.raises(exc_type) as info:
        fn()
    message = str(info.value)
    assert message and "\n" not in message, message
    for needle in needles:
        assert needle in message, message
    return message


# ------------------------------------------------------------------------- loading
def test_load_model_from_file(tmp_path) -> None:
    graph = load_model(save(conv_chain(), tmp_path, "chain"))
    assert graph.name == "chain"
    assert names(graph) == ["conv1", "relu", "conv2"]
    assert load_model(save(conv_chain(), tmp_path), name="other").name == "other"
    # graph inputs and outputs are recorded per tensor
    assert [graph.tensors[t].name for t in graph.inputs] == ["x"]
    assert [graph.tensors[t].name for t in graph.outputs] == ["conv2.out"]
    assert graph.tensors[graph.inputs[0]].producer == -1
    assert graph.tensors[graph.outputs[0]].producer == 2


# -------------------------------------------------------------------- BN folding
@pytest.mark.parametrize("bias", [False, True])
def test_batchnorm_after_conv_is_folded(bias: bool) -> None:
    graph = to_graph(conv_bn(bias=bias))
    assert names(graph) == ["conv", "relu"]
    conv = graph.nodes[0]
    # weights 4*4*3*3 = 144; a bias of C_out = 4 elements, added by the fold if missing;
    # the BN parameters themselves (4 x 4) are not counted
    assert conv.weights == 144 + 4
    assert named_edges(graph) == {("conv", "relu", "conv.out")}
    assert graph.nodes[1].inputs == conv.outputs


def test_batchnorm_not_after_conv_is_kept() -> None:
    net = Net(0)
    bn = [net.weight(f"bn.{p}", 4) for p in ("scale", "bias", "mean")]
    bn.append(net.const("bn.var", np.ones(4, np.float32)))
    t = net.op("BatchNormalization", ["x", *bn], "bn.out", "bn")
    net.op("Relu", [t], "y", "relu")
    graph = to_graph(net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])]))
    assert names(graph) == ["bn", "relu"]
    assert graph.nodes[0].kind == "act"
    assert graph.nodes[0].weights == 4 * 4


def test_batchnorm_is_not_folded_into_a_conv_with_other_readers() -> None:
    net = Net(0)
    c = net.conv("x", "conv", 4, 4)
    bn = [net.weight(f"bn.{p}", 4) for p in ("scale", "bias", "mean")]
    bn.append(net.const("bn.var", np.ones(4, np.float32)))
    t = net.op("BatchNormalization", [c, *bn], "bn.out", "bn")
    net.op("Add", [t, c], "y", "add")
    graph = to_graph(net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])]))
    assert names(graph) == ["conv", "bn", "add"]
    assert graph.nodes[0].weights == 148


# ------------------------------------------------------------- view / constant removal
def test_view_ops_are_removed_and_edges_reconnected() -> None:
    graph = to_graph(view_ops())
    # Identity, Dropout, Unsqueeze, Squeeze, Flatten, Reshape are gone
    assert names(graph) == ["conv", "relu", "gap", "fc"]
    assert named_edges(graph) == {
        ("conv", "relu", "conv.out"),  # through Identity and Dropout
        ("relu", "gap", "relu.out"),  # through Unsqueeze and Squeeze
        ("gap", "fc", "gap.out"),  # through Flatten
    }
    # the graph output is reconnected through the final Reshape
    assert [graph.tensors[t].name for t in graph.outputs] == ["fc.out"]
    # the Gemm reads the pre-Flatten tensor (4,1,1); its weights 3*4 + 3 = 15, MACs 3*4
    fc = graph.nodes[3]
    assert graph.tensors[fc.inputs[0]].shape == (4, 1, 1)
    assert (fc.weights, fc.macs, fc.whole_input) == (15, 12, True)
    # the axes / shape constants of the removed ops are nobody's weights
    assert sum(n.weights for n in graph.nodes) == (16 + 4) + 15


def test_constant_and_shape_subgraphs_are_removed() -> None:
    graph = to_graph(shape_subgraph())
    # Shape, Gather, Unsqueeze, Constant, Concat compute the Reshape target: all gone
    assert names(graph) == ["conv", "fc"]
    assert named_edges(graph) == {("conv", "fc", "conv.out")}
    fc = graph.nodes[1]
    assert graph.tensors[fc.inputs[0]].shape == (4, 2, 2)
    # Gemm 16 -> 3: weights 48 + 3, MACs 3 * 16
    assert (fc.weights, fc.macs) == (51, 48)


def test_constant_node_weights_count() -> None:
    model = conv_chain()
    w = next(i for i in model.graph.initializer if i.name == "conv1.w")
    model.graph.node.insert(0, helper.make_node("Constant", [], ["conv1.w"], value=w))
    model.graph.initializer.remove(w)
    graph = to_graph(model)
    assert names(graph) == ["conv1", "relu", "conv2"]
    assert graph.nodes[0].weights == 148


def test_settings_inputs_are_not_weights() -> None:
    net = Net(0)
    lo = net.const("lo", np.array(0.0, np.float32))
    hi = net.const("hi", np.array(6.0, np.float32))
    t = net.op("Clip", ["x", lo, hi], "clip.out", "relu6")
    pads = net.const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))
    net.op("Pad", [t, pads], "y", "pad")
    graph = to_graph(net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 10, 10])]))
    assert [(n.kind, n.weights) for n in graph.nodes] == [("act", 0), ("pad", 0)]


# ------------------------------------------------------------------ unknown ops
@pytest.mark.parametrize("op_type", ["Einsum", "MyOp"])
def test_unknown_op_is_kept_as_other(op_type: str) -> None:
    with pytest.warns(FusionPlanWarning, match=f"op type '{op_type}' \\(1 node\\) is not modelled"):
        graph = to_graph(with_unknown_op(op_type))
    assert [n.kind for n in graph.nodes] == ["act", "other", "act"]
    other = graph.nodes[1]
    assert other.op_type == op_type
    # kept with its tensor sizes and wired like any op
    assert graph.tensors[other.inputs[0]].shape == (4, 8, 8)
    assert graph.tensors[other.outputs[0]].shape == (4, 8, 8)
    assert [(e.src, e.dst) for e in graph.edges] == [(0, 1), (1, 2)]


def test_one_warning_per_unknown_op_type_and_none_for_known_ops() -> None:
    net = Net(0)
    t = net.op("Hardmax", ["x"], "h1", "hardmax1")
    t = net.op("Relu", [t], "r", "relu")
    net.op("Hardmax", [t], "y", "hardmax2")
    model = net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])])
    with pytest.warns(FusionPlanWarning) as caught:
        to_graph(model)
    assert [str(w.message) for w in caught] == [
        "op type 'Hardmax' (2 nodes) is not modelled: costed as a generic op (input + output "
        "traffic row by row, constant inputs as weights); --strict-ops refuses it"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FusionPlanWarning)
        to_graph(channel_shuffle())  # Transpose, Gather, Slice: known ops, no warning


@pytest.mark.parametrize("op_type", ["Einsum", "MyOp"])
def test_unknown_op_is_an_error_with_strict_ops(op_type: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FusionPlanWarning)  # the error, not a warning
        one_line_error(
            ModelError, lambda: to_graph(with_unknown_op(op_type), strict_ops=True), op_type
        )


def test_unknown_op_without_a_shape_names_the_op() -> None:
    model = with_unknown_op("MyOp")
    del model.graph.value_info[:]
    # the inputs are static, so the fix is to declare the shape (or report the model)
    one_line_error(ModelError, lambda: to_graph(model), "'u'", "MyOp node 'custom'", "value_info")


# ---------------------------------------------------------- labels and edges
def test_labels_are_topological_for_any_valid_node_order() -> None:
    model = residual_reordered()  # stem, short, main1, main_relu, main2, add
    other = onnx.ModelProto()
    other.CopyFrom(model)
    order = [0, 2, 3, 4, 1, 5]  # stem, main1, main_relu, main2, short, add (also valid)
    nodes = [other.graph.node[i] for i in order]
    del other.graph.node[:]
    other.graph.node.extend(nodes)
    first, second = to_graph(model), to_graph(other)
    for graph in (first, second):
        assert all(e.src < e.dst for e in graph.edges)
        for v, n in enumerate(graph.nodes):
            for t in n.inputs:
                assert graph.tensors[t].producer < v
    assert names(first)[0] == names(second)[0] == "stem"
    assert names(first)[-1] == names(second)[-1] == "add"
    assert named_edges(first) == named_edges(second)
    assert len(first.edges) == 6


def test_one_tensor_read_by_k_nodes_gives_k_edges() -> None:
    graph = to_graph(fan_out())
    r = graph.nodes[0].outputs[0]
    from_relu = [e for e in graph.edges if e.src == 0]
    assert len(from_relu) == 3
    assert {e.tensor for e in from_relu} == {r}
    assert {graph.nodes[e.dst].name for e in from_relu} == {"conv_a", "conv_b", "sigmoid"}
    assert graph.consumer_mask[r] == 0b1110
    summ = graph.nodes[4]
    assert (summ.kind, len(summ.inputs)) == ("eltwise", 3)


def test_split_with_several_outputs() -> None:
    graph = to_graph(split_model())
    assert names(graph) == ["conv", "split", "relu", "sigmoid", "add"]
    split = graph.nodes[1]
    assert split.kind == "split"
    assert [graph.tensors[t].name for t in split.outputs] == ["p0", "p1"]
    assert [graph.tensors[t].shape for t in split.outputs] == [(4, 4, 4), (4, 4, 4)]
    assert graph.out_shape(1) == (8, 4, 4)  # channels of all outputs
    assert split.weights == 0  # the split sizes are a setting, not weights
    assert named_edges(graph) == {
        ("conv", "split", "conv.out"),
        ("split", "relu", "p0"),
        ("split", "sigmoid", "p1"),
        ("relu", "add", "a"),
        ("sigmoid", "add", "b"),
    }


# ------------------------------------------------------------- node attributes
def test_macs_and_weights() -> None:
    graph = to_graph(macs_model())
    conv, dw, gap, fc = graph.nodes
    # conv 3x3 4->8: weights 8*4*9 + 8 = 296; MACs out 8*8*8 * C_in 4 * 9 = 18432
    assert (conv.kernel, conv.stride, conv.pads, conv.groups) == ((3, 3), (1, 1), (1,) * 4, 1)
    assert (conv.weights, conv.macs) == (296, 18432)
    # depthwise 3x3 group 8: weights 8*1*9 + 8 = 80; MACs 512 * 1 * 9 = 4608
    assert (dw.groups, dw.weights, dw.macs) == (8, 80, 4608)
    # global pool: whole input, MACs = input elements 512
    assert (gap.kind, gap.whole_input, gap.macs, gap.weights) == ("global_pool", True, 512, 0)
    # Gemm 8->3: weights 24 + 3 = 27, MACs 3 * 8 = 24
    assert (fc.kind, fc.weights, fc.macs, fc.whole_input) == ("matmul", 27, 24, True)
    assert graph.tensors[fc.outputs[0]].shape == (3, 1, 1)


def test_matmul_after_flatten_counts_the_flattened_length() -> None:
    graph = to_graph(matmul_after_flatten())
    mm = graph.nodes[1]
    # reads the (4,2,2) tensor through the removed Flatten: K = 16, 3 outputs
    assert graph.tensors[mm.inputs[0]].shape == (4, 2, 2)
    assert (mm.weights, mm.macs) == (48, 48)


def test_strided_conv_attributes() -> None:
    graph = to_graph(shape_subgraph())
    conv = graph.nodes[0]
    assert (conv.kernel, conv.stride, conv.pads) == ((3, 3), (2, 2), (1, 1, 1, 1))
    # out (4,2,2) = 16 elements * C_in 4 * 9
    assert conv.macs == 16 * 4 * 9


# ------------------------------------------------------------------------ errors
def test_missing_file(tmp_path) -> None:
    one_line_error(ModelError, lambda: load_model(tmp_path / "nope.onnx"), "nope.onnx")


@pytest.mark.parametrize(
    "content", [b"hello, this is not an ONNX model\n", b"x = 1\ny = 2\n", b""], ids=repr
)
def test_not_onnx(tmp_path, content: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    one_line_error(ModelError, lambda: load_model(path), "bad.onnx", "not an ONNX model")


def test_dynamic_input_shape_names_the_tensor(tmp_path) -> None:
    path = save(dynamic_batch(), tmp_path, "dyn")
    # the message names the input and shows the option that fixes it, batch set to 1
    one_line_error(ModelError, lambda: load_model(path), "'x'", "dynamic", "x=1x4x8x8")
    one_line_error(ModelError, lambda: to_graph(dynamic_batch()), "'x'", "input_shapes")


def test_symbolic_sequence_length_is_shown_as_a_placeholder() -> None:
    net = Net(0)
    net.op("Relu", ["tokens"], "y", "relu")
    model = net.model([("tokens", ["N", "T", 8])], [("y", ["N", "T", 8])])
    one_line_error(ModelError, lambda: to_graph(model), "(N, T, 8)", "tokens=1x<T>x8")


def test_input_shapes_make_a_dynamic_model_loadable(tmp_path) -> None:
    path = save(dynamic_batch(), tmp_path, "dyn")
    graph = load_model(path, input_shapes={"x": (1, 4, 8, 8)})
    assert names(graph) == ["conv1", "relu"]
    assert graph.tensors[graph.outputs[0]].shape == (4, 8, 8)
    graph = to_graph(dynamic_batch(), input_shapes={"x": [1, 4, 8, 8]})
    assert graph.tensors[graph.inputs[0]].shape == (4, 8, 8)


def test_input_shapes_errors(tmp_path) -> None:
    path = save(dynamic_batch(), tmp_path, "dyn")
    one_line_error(ModelError, lambda: load_model(path, input_shapes={"z": (1, 4, 8, 8)}), "'z'")
    one_line_error(ModelError, lambda: load_model(path, input_shapes={"x": (1, 4, 8)}), "'x'")


def test_input_shapes_with_a_batch_other_than_1_are_refused(tmp_path) -> None:
    """The planner plans one inference: a batch of 2 was folded into the channels."""
    path = save(dynamic_batch(), tmp_path, "dyn")
    one_line_error(
        ConfigError,
        lambda: load_model(path, input_shapes={"x": (2, 4, 8, 8)}),
        "x=2x4x8x8 has batch 2",
        "plans batch 1",
        "use x=1x4x8x8",
    )
    net = Net(0)  # sequence-first tokens (T, 1, D): the batch is the second axis
    net.op("Relu", ["tokens"], "y", "relu")
    model = net.model([("tokens", ["T", 1, 8])], [("y", ["T", 1, 8])])
    graph = to_graph(model, input_shapes={"tokens": (5, 1, 8)})
    assert graph.tensors[graph.inputs[0]].shape == (8, 5, 1)


def test_cycle_is_a_graph_error(tmp_path) -> None:
    one_line_error(GraphError, lambda: to_graph(cyclic()), "cycle")
    path = save(cyclic(), tmp_path, "cyclic")
    one_line_error(GraphError, lambda: load_model(path), "cycle")


def test_no_compute_ops(tmp_path) -> None:
    path = save(views_only(), tmp_path, "views_only")
    one_line_error(GraphError, lambda: load_model(path), "no compute ops")


def test_invalid_model_is_reported_on_one_line() -> None:
    model = conv_chain()
    model.graph.node[1].input[0] = "nowhere"
    one_line_error(ModelError, lambda: to_graph(model), "invalid ONNX model", "'nowhere'")


def test_errors_are_model_errors() -> None:
    assert issubclass(GraphError, ModelError)


def test_graph_input_that_is_an_initializer_is_not_an_activation() -> None:
    # old-style models list initializers among the graph inputs
    model = conv_chain()
    w = next(i for i in model.graph.initializer if i.name == "conv1.w")
    model.graph.input.append(helper.make_tensor_value_info("conv1.w", FLOAT, list(w.dims)))
    graph = to_graph(model)
    assert [graph.tensors[t].name for t in graph.inputs] == ["x"]
    assert graph.nodes[0].weights == 148
    assert numpy_helper.to_array(w).shape == (4, 4, 3, 3)


# ------------------------------------------------------------------ computed shapes
def onnx_unknown(model: onnx.ModelProto) -> set[str]:
    """Tensors that onnx's own shape inference (with data propagation) leaves unknown."""
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph.value_info
    return {
        vi.name
        for vi in inferred
        if not all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
    }


def test_channel_shuffle_shapes_computed_in_the_graph_are_resolved() -> None:
    model = channel_shuffle()
    assert {"swapped", "h0"} <= onnx_unknown(model)  # onnx gives up after the Div
    graph = to_graph(model)
    # Shape, Gather, Div, Unsqueeze, Slice(shape), Concat and both Reshapes are gone
    assert names(graph) == ["conv", "transpose", "chunk", "relu"]
    shape = {graph.tensors[t].name: graph.tensors[t].shape for t in range(len(graph.tensors))}
    # the (1,2,4,4,4) transpose output keeps the rows of the map it shuffles: (8, 4, 4)
    assert shape["swapped"] == (8, 4, 4)
    assert shape["h0"] == shape["y"] == (4, 4, 4)  # the Slice's end C/2 was folded
    assert named_edges(graph) == {
        ("conv", "transpose", "conv.out"),  # through the computed Reshape
        ("transpose", "chunk", "swapped"),  # through the Reshape back
        ("chunk", "relu", "h0"),
    }
    assert [n.weights for n in graph.nodes] == [72, 0, 0, 0]  # bounds are settings


def test_computed_expand_is_resolved() -> None:
    model = computed_expand()
    assert {"cls.out", "cat.out"} <= onnx_unknown(model)
    graph = to_graph(model)
    assert names(graph) == ["proj", "concat", "add", "ln"]
    proj, concat, *_ = graph.nodes
    # tokens are rows: 4 tokens of 8 features, then 5 with the class token
    assert graph.tensors[proj.inputs[0]].shape == (8, 4, 1)
    assert graph.tensors[concat.outputs[0]].shape == (8, 5, 1)
    # the expanded class token (a constant subgraph) is the Concat's weight
    assert [n.weights for n in graph.nodes] == [64, 8, 40, 16]


@pytest.mark.slow
def test_shufflenet_imports() -> None:
    graph = load_zoo_model("shufflenet_v2_x1_0")  # exported to the session's cache
    assert len(graph.nodes) == 154
    shuffles = [n for n in graph.nodes if n.op_type == "Transpose"]
    assert len(shuffles) == 16  # one channel shuffle per block
    v = graph.node_index[shuffles[0].name]
    assert graph.tensors[shuffles[0].inputs[0]].shape == graph.out_shape(v) == (116, 28, 28)


@pytest.mark.slow
def test_vit_imports_with_tokens_as_rows() -> None:
    graph = load_zoo_model("vit_b_16")
    linear = [n for n in graph.nodes if n.kind == "matmul" and n.weights]
    attention = [n for n in graph.nodes if n.kind == "matmul" and not n.weights]
    # per block: qkv, out projection and two MLP layers; the classifier reads one row
    assert len(linear) == 12 * 4 + 1 and len(attention) == 12 * 2
    assert [n.whole_input for n in linear] == [False] * 48 + [True]
    assert all(n.whole_input for n in attention)  # Q.K^T and P.V need every row of K, V
    assert graph.tensors[linear[0].inputs[0]].shape == (768, 197, 1)  # 197 tokens
    assert graph.out_shape(graph.node_index[attention[0].name]) == (12, 197, 197)

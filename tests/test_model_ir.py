"""The model IR (docs/design.md, "IR"): one importer that folds constants, and the planner's
op graph as a lowering of it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusionplan.data.zoo import zoo_path
from fusionplan.ir.graph import Node, OpGraph, Tensor
from fusionplan.ir.lowering import lower
from fusionplan.ir.model import ModelGraph, ModelNode, TensorInfo, Weight, make_attrs
from fusionplan.ir.onnx_model import from_onnx, read_onnx, to_onnx
from fusionplan.ir.onnx_run import check_equivalence
from tests.onnx_builders import constant_output

RNG = np.random.default_rng(0)


def weight(*shape: int) -> Weight:
    return Weight.of(RNG.standard_normal(shape).astype(np.float32))


def hand_built() -> ModelGraph:
    """x (1, 4, 8, 8) -> Conv 3x3 (no bias) -> BatchNormalization -> Relu -> Flatten -> Gemm
    (10 outputs), written directly in the model IR."""
    nodes = [
        ModelNode("conv", "Conv", ("x", "w"), ("c",), make_attrs(pads=(1, 1, 1, 1))),
        ModelNode("bn", "BatchNormalization", ("c", "g", "b", "m", "v"), ("n",)),
        ModelNode("relu", "Relu", ("n",), ("r",)),
        ModelNode("flatten", "Flatten", ("r",), ("f",), make_attrs(axis=1)),
        ModelNode("fc", "Gemm", ("f", "wg", "bg"), ("y",), make_attrs(transB=1)),
    ]
    act = {"x": (1, 4, 8, 8), "c": (1, 8, 8, 8), "n": (1, 8, 8, 8), "r": (1, 8, 8, 8)}
    act |= {"f": (1, 512), "y": (1, 10)}
    weights = {"w": weight(8, 4, 3, 3), "wg": weight(10, 512), "bg": weight(10)}
    weights |= {name: weight(8) for name in ("g", "b", "m")}
    weights["v"] = Weight.of(np.ones(8, np.float32))
    tensors = {t: TensorInfo(s) for t, s in act.items()}
    return ModelGraph(nodes, tensors, weights, ["x"], ["y"], name="hand")


def test_lowering_a_hand_built_model_graph_gives_the_expected_op_graph() -> None:
    """BN folds into the conv (which gains a bias of 8), Flatten disappears (the Gemm reads
    the Relu's output), tensors are (C, H, W) with the image rows as rows; the Gemm
    contracts its input's row axis, so it needs its whole input."""
    got = lower(hand_built(), name="hand")
    conv = Node(
        "conv", "Conv", "conv", (0,), (1,), kernel=(3, 3), pads=(1, 1, 1, 1),
        weights=8 * 4 * 9 + 8, macs=8 * 8 * 8 * 4 * 9,
    )  # fmt: skip
    relu = Node("relu", "Relu", "act", (1,), (2,), macs=8 * 8 * 8)
    fc = Node(
        "fc", "Gemm", "matmul", (2,), (3,), weights=10 * 512 + 10, macs=10 * 512, whole_input=True
    )
    tensors = [
        Tensor("x", (4, 8, 8), -1),
        Tensor("c", (8, 8, 8), -1),
        Tensor("r", (8, 8, 8), -1),
        Tensor("y", (10, 1, 1), -1),
    ]
    assert got == OpGraph.build("hand", [conv, relu, fc], tensors, [0], [3])


def attention_scale_model() -> onnx.ModelProto:
    """A ViT's attention scale computed in the graph: x (1, 4, 16) -> Shape -> Gather(-1) ->
    Cast -> Sqrt -> Div(x, .) -> Relu; every input static, so the scale is a constant."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "last"], ["d"], name="gather", axis=0),
        helper.make_node("Cast", ["d"], ["df"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["df"], ["scale"], name="sqrt"),
        helper.make_node("Identity", ["scale"], ["scale_id"], name="identity"),
        helper.make_node("Div", ["x", "scale_id"], ["q"], name="div"),
        helper.make_node("Relu", ["q"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16])],
        [numpy_helper.from_array(np.array(-1, np.int64), "last")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_importer_folds_a_static_shape_chain_into_one_weight() -> None:
    model = attention_scale_model()
    g = from_onnx(model)
    assert list(g.nodes) == ["div", "relu"]
    assert g.nodes["div"].inputs == ("x", "scale")  # the Identity is gone too
    assert list(g.weights) == ["scale"]  # the chain's intermediates are not kept
    scale = g.weights["scale"]
    assert scale.shape == () and scale.dtype == "float32" and float(scale.array) == 4.0
    rewritten = to_onnx(g)
    assert [n.op_type for n in rewritten.graph.node] == ["Div", "Relu"]
    assert check_equivalence(model, rewritten, tolerance=0.0).ok


def test_a_constant_graph_output_stays_computed() -> None:
    """Folding never turns the model's interface into an initializer."""
    g = from_onnx(constant_output())
    assert list(g.nodes) == ["relu", "shape"] and not g.weights


def test_a_random_op_and_what_reads_it_are_never_folded() -> None:
    """RandomNormalLike has only constant inputs but no constant value."""
    nodes = [
        helper.make_node("RandomNormalLike", ["w"], ["noise"], name="noise"),
        helper.make_node("Mul", ["noise", "two"], ["scaled"], name="scale"),
        helper.make_node("Add", ["x", "scaled"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [
            numpy_helper.from_array(np.zeros((1, 4), np.float32), "w"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        ],
    )
    g = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert list(g.nodes) == ["noise", "scale", "add"]


def test_a_large_weight_transform_is_folded_lazily() -> None:
    """A Transpose of a weight above the eager limit becomes a weight whose array is only
    computed when read; its declared shape and dtype come from shape inference."""
    w = RNG.standard_normal((300, 256)).astype(np.float32)  # 76,800 > 65,536 elements
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], name="transpose", perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes,
        "lazy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 300])],
        [numpy_helper.from_array(w, "w")],
    )
    g = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    folded = g.weights["wt"]
    assert list(g.nodes) == ["matmul"] and folded._array is None
    assert (folded.shape, folded.dtype) == ((256, 300), "float32")
    assert np.array_equal(folded.array, w.T)


def test_a_tensor_attribute_survives_the_writer() -> None:
    """ConstantOfShape's ``value`` is held frozen in the IR and written back as a tensor."""
    fill = numpy_helper.from_array(np.array([0.5], np.float32))
    node = ModelNode("fill", "ConstantOfShape", ("s",), ("z",), make_attrs(value=fill))
    add = ModelNode("add", "Add", ("x", "z"), ("y",))
    tensors = {t: TensorInfo((1, 3)) for t in ("x", "z", "y")} | {"s": TensorInfo((2,), "int64")}
    g = ModelGraph([node, add], tensors, {}, ["x", "s"], ["y"])
    written = to_onnx(g).graph.node[0]
    assert helper.get_attribute_value(written.attribute[0]) == fill


@pytest.mark.slow
def test_vit_b16_has_no_shape_op_and_no_constant_op_after_import() -> None:
    """The issue's count: ViT-B/16 kept 24 Shape, 24 Cast and 36 Sqrt ops in substitution's
    graph on a static-shape model; the importer folds every one."""
    path = zoo_path("vit_b_16")
    g = from_onnx(read_onnx(path), path=path)
    ops = {n.op_type for n in g.nodes.values()}
    assert not ops & {"Shape", "Size", "Cast", "Sqrt", "Constant"}
    assert not [n for n in g.nodes.values() if all(t in g.weights for t in n.inputs if t)]

"""Small ONNX models built with ``onnx.helper`` for the importer and cost-model tests.

Every builder returns an ``onnx.ModelProto`` (opset 17, batch 1, static shapes, seeded
random initializers). Channel counts and spatial sizes are tiny so that the tests can state
every cost term as hand arithmetic. :func:`to_graph` imports a model in memory and
:func:`save` writes it to disk for :func:`fusionplan.ir.onnx_import.load_model`.

Node order in the ONNX graph is the topological label order of the imported graph for every
builder here (the importer keeps the given order among ready nodes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fusionplan.ir.onnx_import import graph_from_proto

OPSET = 17
FLOAT = TensorProto.FLOAT


class Net:
    """Accumulates nodes and initializers; ``model()`` wraps them into a ModelProto."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []

    def const(self, name: str, array) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, *shape: int) -> str:
        return self.const(name, self.rng.standard_normal(shape).astype(np.float32))

    def op(
        self, op_type: str, inputs: list[str], outputs: list[str] | str, name: str, **attrs
    ) -> str:
        outs = [outputs] if isinstance(outputs, str) else outputs
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0]

    def conv(
        self,
        x: str,
        name: str,
        cin: int,
        cout: int,
        k: int = 3,
        stride: int = 1,
        group: int = 1,
        bias: bool = True,
    ) -> str:
        """A Conv with 'same' padding for odd k; weights (cout, cin/group, k, k) + bias."""
        ins = [x, self.weight(f"{name}.w", cout, cin // group, k, k)]
        if bias:
            ins.append(self.weight(f"{name}.b", cout))
        p = k // 2
        return self.op(
            "Conv",
            ins,
            f"{name}.out",
            name,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[p, p, p, p],
            group=group,
        )

    def model(
        self,
        inputs: list[tuple[str, list]],
        outputs: list[tuple[str, list]],
        name: str = "g",
        opset_imports=None,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(n, FLOAT, s) for n, s in inputs],
            [helper.make_tensor_value_info(n, FLOAT, s) for n, s in outputs],
            initializer=self.inits,
            value_info=self.value_info,
        )
        opsets = opset_imports or [helper.make_opsetid("", OPSET)]
        return helper.make_model(graph, opset_imports=opsets, producer_name="fusionplan-tests")


def to_graph(model: onnx.ModelProto, **kwargs):
    """Import ``model`` in memory (a copy, so the builder's proto is left untouched)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return graph_from_proto(copy, **kwargs)


def save(model: onnx.ModelProto, directory: Path, name: str = "model") -> Path:
    path = Path(directory) / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


# ------------------------------------------------------------------- cost-model graphs
def constant_output() -> onnx.ModelProto:
    """x -> Relu -> r, and r's Shape as a second graph output: an output whose value is a
    constant of static shapes (folding must keep it computed)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
    ]
    graph = helper.make_graph(
        nodes,
        "const_out",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_chain() -> onnx.ModelProto:
    """x(1,4,8,8) -> conv1 3x3 4->4 -> relu -> conv2 3x3 4->8 -> y(1,8,8,8).

    Labels 0 conv1 (144+4 = 148 weights), 1 relu, 2 conv2 (288+8 = 296 weights).
    """
    net = Net(1)
    t = net.conv("x", "conv1", 4, 4)
    t = net.op("Relu", [t], "relu.out", "relu")
    net.conv(t, "conv2", 4, 8)
    return net.model([("x", [1, 4, 8, 8])], [("conv2.out", [1, 8, 8, 8])], "conv_chain")


def residual_block(hw: int = 8) -> onnx.ModelProto:
    """x(1,4,hw,hw) -> stem 3x3 -> [conv1 3x3 -> relu1 -> conv2 3x3 -> add(+stem) -> relu2].

    Labels 0 stem, 1 conv1, 2 relu1, 3 conv2, 4 add, 5 relu2; every tensor is (4,hw,hw);
    each conv has 4*4*9 + 4 = 148 weights. The stem makes the block input an in-group
    tensor when the stem is in the group (skip buffers only count in-group inputs).
    """
    net = Net(2)
    s = net.conv("x", "stem", 4, 4)
    t = net.conv(s, "conv1", 4, 4)
    t = net.op("Relu", [t], "relu1.out", "relu1")
    t = net.conv(t, "conv2", 4, 4)
    t = net.op("Add", [t, s], "add.out", "add")
    net.op("Relu", [t], "y", "relu2")
    return net.model([("x", [1, 4, hw, hw])], [("y", [1, 4, hw, hw])], "residual")


def se_block() -> onnx.ModelProto:
    """Squeeze-and-excitation: x(1,8,8,8) -> conv 3x3 8->8 -> GAP -> fc1 1x1 8->2 -> relu
    -> fc2 1x1 2->8 -> sigmoid -> mul(conv, sigmoid) -> y(1,8,8,8).

    Labels 0 conv (576+8 = 584), 1 gap, 2 fc1 (16+2 = 18), 3 relu, 4 fc2 (16+8 = 24),
    5 sigmoid, 6 mul.
    """
    net = Net(3)
    c = net.conv("x", "conv", 8, 8)
    t = net.op("GlobalAveragePool", [c], "gap.out", "gap")
    t = net.conv(t, "fc1", 8, 2, k=1)
    t = net.op("Relu", [t], "relu.out", "relu")
    t = net.conv(t, "fc2", 2, 8, k=1)
    t = net.op("Sigmoid", [t], "sig.out", "sigmoid")
    net.op("Mul", [c, t], "y", "mul")
    return net.model([("x", [1, 8, 8, 8])], [("y", [1, 8, 8, 8])], "se")


def strided_chain() -> onnx.ModelProto:
    """x(1,4,16,16) -> relu0 -> conv_s 3x3 stride 2 4->8 -> conv_b 3x3 8->8 -> conv_c 1x1
    8->4 -> y(1,4,8,8).

    Labels 0 relu0, 1 conv_s (288+8 = 296), 2 conv_b (576+8 = 584), 3 conv_c (32+4 = 36).
    """
    net = Net(4)
    t = net.op("Relu", ["x"], "relu0.out", "relu0")
    t = net.conv(t, "conv_s", 4, 8, stride=2)
    t = net.conv(t, "conv_b", 8, 8)
    net.conv(t, "conv_c", 8, 4, k=1)
    return net.model([("x", [1, 4, 16, 16])], [("conv_c.out", [1, 4, 8, 8])], "strided")


# ------------------------------------------------------------------- importer graphs
def conv_bn(bias: bool = False) -> onnx.ModelProto:
    """x(1,4,8,8) -> conv 3x3 4->4 (bias optional) -> BatchNormalization -> relu -> y."""
    net = Net(5)
    t = net.conv("x", "conv", 4, 4, bias=bias)
    bn = [net.weight(f"bn.{p}", 4) for p in ("scale", "bias", "mean")]
    bn.append(net.const("bn.var", np.ones(4, np.float32)))
    t = net.op("BatchNormalization", [t, *bn], "bn.out", "bn")
    net.op("Relu", [t], "y", "relu")
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], "conv_bn")


def view_ops() -> onnx.ModelProto:
    """conv 1x1 -> Identity -> Dropout -> relu -> Unsqueeze -> Squeeze -> GAP -> Flatten
    -> Gemm 4->3 -> Reshape -> y(1,3). Compute nodes left: conv, relu, gap, gemm."""
    net = Net(6)
    t = net.conv("x", "conv", 4, 4, k=1)
    t = net.op("Identity", [t], "id.out", "id")
    t = net.op("Dropout", [t], "drop.out", "drop")
    t = net.op("Relu", [t], "relu.out", "relu")
    t = net.op("Unsqueeze", [t, net.const("ax0", np.array([0], np.int64))], "unsq.out", "unsq")
    t = net.op("Squeeze", [t, "ax0"], "sq.out", "sq")
    t = net.op("GlobalAveragePool", [t], "gap.out", "gap")
    t = net.op("Flatten", [t], "flat.out", "flat", axis=1)
    t = net.op(
        "Gemm", [t, net.weight("fc.w", 3, 4), net.weight("fc.b", 3)], "fc.out", "fc", transB=1
    )
    net.op("Reshape", [t, net.const("shape13", np.array([1, 3], np.int64))], "y", "reshape")
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 3])], "views")


def shape_subgraph() -> onnx.ModelProto:
    """conv 3x3 s2 4->4 on (4,4,4) -> Shape -> Gather -> Unsqueeze -> Concat(-1) -> Reshape
    (conv output to (1,16)) -> Gemm 16->3 -> y(1,3). Compute nodes left: conv, gemm."""
    net = Net(7)
    c = net.conv("x", "conv", 4, 4, stride=2)
    s = net.op("Shape", [c], "shape.out", "shape")
    n = net.op(
        "Gather", [s, net.const("zero", np.array(0, np.int64))], "gather.out", "gather", axis=0
    )
    n = net.op("Unsqueeze", [n, net.const("ax0", np.array([0], np.int64))], "n1", "unsq")
    minus = net.op(
        "Constant",
        [],
        "minus1",
        "minus1",
        value=numpy_helper.from_array(np.array([-1], np.int64), "m1"),
    )
    shp = net.op("Concat", [n, minus], "newshape", "concat_shape", axis=0)
    t = net.op("Reshape", [c, shp], "flat", "reshape")
    net.op("Gemm", [t, net.weight("fc.w", 3, 16), net.weight("fc.b", 3)], "y", "fc", transB=1)
    return net.model([("x", [1, 4, 4, 4])], [("y", [1, 3])], "shape_subgraph")


def fan_out() -> onnx.ModelProto:
    """x -> relu -> (conv_a 1x1, conv_b 1x1, sigmoid) -> sum of the three -> y.

    The relu output tensor is consumed by 3 nodes (3 edges, one tensor id)."""
    net = Net(8)
    r = net.op("Relu", ["x"], "r", "relu")
    a = net.conv(r, "conv_a", 4, 4, k=1)
    b = net.conv(r, "conv_b", 4, 4, k=1)
    s = net.op("Sigmoid", [r], "s", "sigmoid")
    net.op("Sum", [a, b, s], "y", "sum")
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], "fan_out")


def residual_reordered() -> onnx.ModelProto:
    """A two-branch block whose ONNX node list is a valid but non-canonical topological
    order: the shortcut branch's 1x1 conv is listed before the main branch."""
    net = Net(9)
    s = net.op("Relu", ["x"], "s", "stem")
    short = net.conv(s, "short", 4, 4, k=1)
    t = net.conv(s, "main1", 4, 4)
    t = net.op("Relu", [t], "main_relu.out", "main_relu")
    t = net.conv(t, "main2", 4, 4)
    net.op("Add", [t, short], "y", "add")
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], "reordered")


def split_model() -> onnx.ModelProto:
    """x(1,8,4,4) -> conv 1x1 8->8 -> Split(axis 1, [4, 4]) -> relu / sigmoid -> add -> y."""
    net = Net(10)
    c = net.conv("x", "conv", 8, 8, k=1)
    net.op(
        "Split", [c, net.const("sizes", np.array([4, 4], np.int64))], ["p0", "p1"], "split", axis=1
    )
    a = net.op("Relu", ["p0"], "a", "relu")
    b = net.op("Sigmoid", ["p1"], "b", "sigmoid")
    net.op("Add", [a, b], "y", "add")
    return net.model([("x", [1, 8, 4, 4])], [("y", [1, 4, 4, 4])], "split")


def macs_model() -> onnx.ModelProto:
    """x(1,4,8,8) -> conv 3x3 4->8 -> depthwise 3x3 (group 8) -> GAP -> Flatten -> Gemm 8->3."""
    net = Net(11)
    t = net.conv("x", "conv", 4, 8)
    t = net.conv(t, "dw", 8, 8, group=8)
    t = net.op("GlobalAveragePool", [t], "gap.out", "gap")
    t = net.op("Flatten", [t], "flat", "flatten", axis=1)
    net.op("Gemm", [t, net.weight("fc.w", 3, 8), net.weight("fc.b", 3)], "y", "fc", transB=1)
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 3])], "macs")


def matmul_after_flatten() -> onnx.ModelProto:
    """x(1,4,2,2) -> relu -> Flatten -> MatMul (16 x 3) -> y(1,3)."""
    net = Net(12)
    t = net.op("Relu", ["x"], "r", "relu")
    t = net.op("Flatten", [t], "flat", "flatten", axis=1)
    net.op("MatMul", [t, net.weight("w", 16, 3)], "y", "matmul")
    return net.model([("x", [1, 4, 2, 2])], [("y", [1, 3])], "matmul")


def with_unknown_op(op_type: str = "Einsum") -> onnx.ModelProto:
    """x(1,4,8,8) -> relu -> <op> -> sigmoid -> y, where <op> is an op fusionplan does not
    know: ``Einsum`` (standard ONNX) or ``MyOp`` in the custom domain ``com.example``
    (its output shape is declared in value_info, since shape inference cannot know it)."""
    net = Net(13)
    r = net.op("Relu", ["x"], "r", "relu")
    opsets = None
    if op_type == "Einsum":
        u = net.op("Einsum", [r, r], "u", "einsum", equation="nchw,nchw->nchw")
    else:
        net.nodes.append(helper.make_node(op_type, [r], ["u"], name="custom", domain="com.example"))
        u = "u"
        net.value_info.append(helper.make_tensor_value_info("u", FLOAT, [1, 4, 8, 8]))
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.example", 1)]
    net.op("Sigmoid", [u], "y", "sigmoid")
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], "unknown", opsets)


def dynamic_batch() -> onnx.ModelProto:
    """conv_chain with a symbolic batch dimension 'N' on the input and the output."""
    net = Net(14)
    t = net.conv("x", "conv1", 4, 4)
    net.op("Relu", [t], "y", "relu")
    return net.model([("x", ["N", 4, 8, 8])], [("y", ["N", 4, 8, 8])], "dynamic")


def cyclic() -> onnx.ModelProto:
    """add(x, b) -> a -> relu -> b: a cycle. Built without running the checker."""
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "cyclic",
        [helper.make_tensor_value_info("x", FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("a", FLOAT, [1, 4, 8, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def views_only() -> onnx.ModelProto:
    """x -> Identity -> Reshape -> y: no compute op at all."""
    net = Net(15)
    t = net.op("Identity", ["x"], "i", "id")
    net.op("Reshape", [t, net.const("shape", np.array([1, 256], np.int64))], "y", "reshape")
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 256])], "views_only")


def upsample_chain(mode: str = "linear") -> onnx.ModelProto:
    """x(1,4,4,4) -> ConvTranspose 4x4 stride 2 pad 1 4->4 -> (4,8,8) -> Resize x2 (``mode``)
    -> (4,16,16) -> relu -> y.

    Labels 0 deconv (4*4*4*4 + 4 = 260 weights), 1 resize (its scales are settings, not
    weights), 2 relu.
    """
    net = Net(16)
    ins = ["x", net.weight("deconv.w", 4, 4, 4, 4), net.weight("deconv.b", 4)]
    t = net.op(
        "ConvTranspose",
        ins,
        "deconv.out",
        "deconv",
        kernel_shape=[4, 4],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    scales = net.const("scales", np.array([1, 1, 2, 2], np.float32))
    t = net.op("Resize", [t, "", scales], "resize.out", "resize", mode=mode)
    net.op("Relu", [t], "y", "relu")
    return net.model([("x", [1, 4, 4, 4])], [("y", [1, 4, 16, 16])], "upsample")


def strided_residual() -> onnx.ModelProto:
    """x(1,4,8,8) -> stem relu -> conv_s 3x3/2 -> conv 3x3 -> add(., pool) -> y(1,4,4,4), with
    the shortcut pool = AveragePool kernel 1 stride 2 on the stem output.

    Labels 0 stem, 1 conv_s (148 w), 2 conv (148 w), 3 pool, 4 add.
    """
    net = Net(17)
    s = net.op("Relu", ["x"], "s", "stem")
    t = net.conv(s, "conv_s", 4, 4, stride=2)
    t = net.conv(t, "conv", 4, 4)
    p = net.op("AveragePool", [s], "pool.out", "pool", kernel_shape=[1, 1], strides=[2, 2])
    net.op("Add", [t, p], "y", "add")
    return net.model([("x", [1, 4, 8, 8])], [("y", [1, 4, 4, 4])], "strided_residual")


# --------------------------------------------------------------- computed shapes
def _int64(net: Net, name: str, value) -> str:
    return net.const(name, np.array(value, np.int64))


def channel_shuffle() -> onnx.ModelProto:
    """x(1,8,4,4) -> conv 1x1 8->8 -> channel shuffle of 2 groups -> first half -> relu ->
    y(1,4,4,4), every reshape target and slice bound computed from Shape in the graph, as
    torchvision's ShuffleNetV2 exports it: Shape -> Gather(C) -> Div(2) -> Concat -> Reshape
    to (1,2,4,4,4) -> Transpose -> Reshape back to the conv's Shape -> Slice [0, C/2).

    onnx's own shape inference cannot follow the Div. Compute nodes left: conv, transpose,
    chunk (the Slice), relu.
    """
    net = Net(18)
    c = net.conv("x", "conv", 8, 8, k=1)
    shape = net.op("Shape", [c], "shape", "shape")
    channels = net.op("Gather", [shape, _int64(net, "one", 1)], "channels", "gather_c", axis=0)
    half = net.op("Div", [channels, _int64(net, "two", 2)], "half", "div")
    half = net.op("Unsqueeze", [half, _int64(net, "ax0", [0])], "half1", "unsqueeze")
    hw = net.op("Slice", [shape, _int64(net, "s2", [2]), _int64(net, "s4", [4])], "hw", "hw")
    target = net.op("Concat", [_int64(net, "groups", [1, 2]), half, hw], "target", "cat", axis=0)
    t = net.op("Reshape", [c, target], "grouped", "reshape")
    t = net.op("Transpose", [t], "swapped", "transpose", perm=[0, 2, 1, 3, 4])
    t = net.op("Reshape", [t, shape], "shuffled", "reshape_back")
    t = net.op("Slice", [t, _int64(net, "zero", [0]), half, _int64(net, "ax1", [1])], "h0", "chunk")
    net.op("Relu", [t], "y", "relu")
    return net.model([("x", [1, 8, 4, 4])], [("y", [1, 4, 4, 4])], "channel_shuffle")


def computed_expand() -> onnx.ModelProto:
    """A ViT's class token: tokens x(1,4,8) -> MatMul 8x8 -> Concat(Expand(cls), .) on the
    token axis -> Add position embedding (1,5,8) -> LayerNormalization -> y(1,5,8), with the
    Expand shape computed as torchvision's ViT exports it: Where(Equal(s, ConstantOfShape(
    [3], 1) * -1), ConstantOfShape, s) for s = [1, -1, -1].

    onnx's own shape inference leaves the Concat output unknown. Compute nodes left: proj
    (64 weights), concat (the 8-element class token is its weight), add (40), ln (16).
    """
    net = Net(19)
    t = net.op("MatMul", ["x", net.weight("proj.w", 8, 8)], "proj.out", "proj")
    s = _int64(net, "s", [1, -1, -1])
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    ones = net.op("ConstantOfShape", [_int64(net, "three", [3])], "ones", "ones", value=one)
    neg = net.op("Mul", [ones, _int64(net, "minus1", -1)], "neg", "neg")
    eq = net.op("Equal", [s, neg], "eq", "eq")
    target = net.op("Where", [eq, ones, s], "target", "where")
    cls = net.op("Expand", [net.weight("cls", 1, 1, 8), target], "cls.out", "expand")
    t = net.op("Concat", [cls, t], "cat.out", "concat", axis=1)
    t = net.op("Add", [t, net.weight("pos", 1, 5, 8)], "add.out", "add")
    ln = [net.const("ln.scale", np.ones(8, np.float32)), net.weight("ln.bias", 8)]
    net.op("LayerNormalization", [t, *ln], "y", "ln", axis=-1)
    return net.model([("x", [1, 4, 8])], [("y", [1, 5, 8])], "computed_expand")


# ------------------------------------------------------------------- transformers
def linear_gelu(opset: int = 20) -> onnx.ModelProto:
    """Tokens x(1,4,8) -> linear (MatMul 8x16 + Add bias 16) -> Gelu -> y(1,4,16) (opset 20,
    the first with a Gelu op). Labels 0 fc (128 weights), 1 bias (16), 2 gelu."""
    net = Net(20)
    t = net.op("MatMul", ["x", net.weight("fc.w", 8, 16)], "fc.out", "fc")
    t = net.op("Add", [t, net.weight("fc.b", 16)], "bias.out", "bias")
    net.op("Gelu", [t], "y", "gelu")
    opsets = [helper.make_opsetid("", opset)]
    return net.model([("x", [1, 4, 8])], [("y", [1, 4, 16])], "linear_gelu", opsets)


# ------------------------------------------------------------------- long searches
def wide_chains(branches: int = 6, length: int = 6) -> onnx.ModelProto:
    """x(1,4,8,8) feeding ``branches`` parallel chains of ``length`` 1x1 convs 4->4, summed
    by a chain of adds: many valid plans, so a search with a large budget runs for long."""
    net = Net(21)
    ends = []
    for b in range(branches):
        t = "x"
        for i in range(length):
            t = net.conv(t, f"b{b}c{i}", 4, 4, k=1)
        ends.append(t)
    total = ends[0]
    for b, end in enumerate(ends[1:]):
        total = net.op("Add", [total, end], f"add{b}.out", f"add{b}")
    return net.model([("x", [1, 4, 8, 8])], [(total, [1, 4, 8, 8])], "wide_chains")

"""Small ONNX graphs for the numeric replay (tests/test_numeric_replay.py): CNN blocks,
pooling epilogues, branches joined by a concat, squeeze-and-excitation, and transformer
blocks, each with channels <= 64 and maps <= 16x16 (batch 1, opset 17, seeded weights).

Built with :class:`tests.onnx_builders.Net`; node order is a topological order.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from tests.onnx_builders import Net


def fan_in_scaled(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every Conv, MatMul and Gemm weight divided by the square root of its
    fan-in, so activations stay of order 1 through a block (float32 rounding then stays far
    below the replay's 1e-5 tolerance, as in a trained network)."""
    fan_in_axes = {"Conv": (1, 2, 3), "MatMul": (0,), "Gemm": (1,)}
    inits = {i.name: i for i in model.graph.initializer}
    done: set[str] = set()
    for node in model.graph.node:
        axes = fan_in_axes.get(node.op_type)
        if axes is None or len(node.input) < 2 or node.input[1] not in inits:
            continue
        name = node.input[1]
        if name in done:
            continue
        done.add(name)
        w = numpy_helper.to_array(inits[name])
        if node.op_type == "Gemm" and not any(a.name == "transB" and a.i for a in node.attribute):
            axes = (0,)
        fan_in = math.prod(w.shape[a] for a in axes if a < w.ndim)
        inits[name].CopyFrom(numpy_helper.from_array((w / np.sqrt(fan_in)).astype(w.dtype), name))
    return model


def _ints(net: Net, name: str, values) -> str:
    return net.const(name, np.array(values, np.int64))


def _clip(net: Net, x: str, name: str, lo: float = 0.0, hi: float = 6.0) -> str:
    bounds = [net.const(f"{name}.lo", np.float32(lo)), net.const(f"{name}.hi", np.float32(hi))]
    return net.op("Clip", [x, *bounds], f"{name}.out", name)


def depthwise_separable() -> onnx.ModelProto:
    """MobileNetV1 pair: x(1,8,16,16) -> conv 3x3/2 8->16 -> ReLU6 -> depthwise 3x3 ->
    ReLU6 -> pointwise 16->32 -> ReLU6 -> y(1,32,8,8)."""
    net = Net(31)
    t = net.conv("x", "stem", 8, 16, stride=2)
    t = _clip(net, t, "clip0")
    t = net.conv(t, "dw", 16, 16, group=16)
    t = _clip(net, t, "clip1")
    t = net.conv(t, "pw", 16, 32, k=1)
    _clip(net, t, "y")
    return net.model([("x", [1, 8, 16, 16])], [("y.out", [1, 32, 8, 8])], "dw_separable")


def inverted_residual_se() -> onnx.ModelProto:
    """MobileNetV3 block: x(1,16,12,12) -> 1x1 16->48 -> HardSwish -> depthwise 5x5 ->
    HardSwish -> SE (GAP, 1x1 48->12, ReLU, 1x1 12->48, HardSigmoid, Mul) -> 1x1 48->16 ->
    Add(x) -> y."""
    net = Net(32)
    t = net.conv("x", "expand", 16, 48, k=1)
    t = net.op("HardSwish", [t], "hs0.out", "hs0")
    t = net.conv(t, "dw", 48, 48, k=5, group=48)
    d = net.op("HardSwish", [t], "hs1.out", "hs1")
    s = net.op("GlobalAveragePool", [d], "gap.out", "gap")
    s = net.conv(s, "fc1", 48, 12, k=1)
    s = net.op("Relu", [s], "se_relu.out", "se_relu")
    s = net.conv(s, "fc2", 12, 48, k=1)
    s = net.op("HardSigmoid", [s], "hsig.out", "hsig", alpha=1 / 6, beta=0.5)
    t = net.op("Mul", [d, s], "scale.out", "scale")
    t = net.conv(t, "project", 48, 16, k=1)
    net.op("Add", [t, "x"], "y", "add")
    return net.model([("x", [1, 16, 12, 12])], [("y", [1, 16, 12, 12])], "inverted_se")


def pooling_epilogues() -> onnx.ModelProto:
    """x(1,8,16,16) -> conv 3x3 8->16 -> ReLU -> MaxPool 2x2/2 -> conv 3x3 16->16 ->
    Sigmoid -> AveragePool 3x3/1 pad 1 (count_include_pad 0) -> y(1,16,8,8)."""
    net = Net(33)
    t = net.conv("x", "conv1", 8, 16)
    t = net.op("Relu", [t], "relu.out", "relu")
    t = net.op("MaxPool", [t], "mp.out", "maxpool", kernel_shape=[2, 2], strides=[2, 2])
    t = net.conv(t, "conv2", 16, 16)
    t = net.op("Sigmoid", [t], "sig.out", "sigmoid")
    net.op("AveragePool", [t], "y", "avgpool", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return net.model([("x", [1, 8, 16, 16])], [("y", [1, 16, 8, 8])], "pool_epilogues")


def overlapping_maxpool() -> onnx.ModelProto:
    """ResNet stem in small: x(1,4,16,16) -> conv 5x5/2 pad 2 4->16 -> ReLU -> MaxPool
    3x3/2 pad 1 -> conv 3x3 16->16 -> LeakyRelu -> y(1,16,4,4)."""
    net = Net(34)
    t = net.conv("x", "stem", 4, 16, k=5, stride=2)
    t = net.op("Relu", [t], "relu.out", "relu")
    t = net.op(
        "MaxPool", [t], "mp.out", "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4
    )
    t = net.conv(t, "conv", 16, 16)
    net.op("LeakyRelu", [t], "y", "lrelu", alpha=0.1)
    return net.model([("x", [1, 4, 16, 16])], [("y", [1, 16, 4, 4])], "stem_pool")


def inception() -> onnx.ModelProto:
    """An Inception module: x(1,16,12,12) -> ReLU -> branches 1x1 16->8; 1x1 16->8 -> 3x3
    8->16; 1x1 16->4 -> 5x5 4->8; MaxPool 3x3/1 pad 1 -> 1x1 16->8 -> Concat (40 channels)
    -> y."""
    net = Net(35)
    x = net.op("Relu", ["x"], "r.out", "relu_in")
    a = net.conv(x, "b1", 16, 8, k=1)
    b = net.conv(x, "b2a", 16, 8, k=1)
    b = net.conv(b, "b2b", 8, 16)
    c = net.conv(x, "b3a", 16, 4, k=1)
    c = net.conv(c, "b3b", 4, 8, k=5)
    d = net.op("MaxPool", [x], "mp.out", "pool", kernel_shape=[3, 3], pads=[1] * 4)
    d = net.conv(d, "b4", 16, 8, k=1)
    net.op("Concat", [a, b, c, d], "y", "concat", axis=1)
    return net.model([("x", [1, 16, 12, 12])], [("y", [1, 40, 12, 12])], "inception")


def dilated_grouped() -> onnx.ModelProto:
    """x(1,16,16,16) -> conv 3x3 dilation 2 pad 2 16->16 -> ReLU -> grouped conv 3x3 (4
    groups) 16->32 -> Elu -> conv 1x1 32->8 -> Tanh -> y."""
    net = Net(36)
    w = net.weight("dil.w", 16, 16, 3, 3)
    t = net.op(
        "Conv",
        ["x", w, net.weight("dil.b", 16)],
        "dil.out",
        "dilated",
        kernel_shape=[3, 3],
        pads=[2, 2, 2, 2],
        dilations=[2, 2],
    )
    t = net.op("Relu", [t], "relu.out", "relu")
    t = net.conv(t, "grouped", 16, 32, group=4)
    t = net.op("Elu", [t], "elu.out", "elu")
    t = net.conv(t, "pw", 32, 8, k=1)
    net.op("Tanh", [t], "y", "tanh")
    return net.model([("x", [1, 16, 16, 16])], [("y", [1, 8, 16, 16])], "dilated_grouped")


def bottleneck_bn() -> onnx.ModelProto:
    """ResNet bottleneck with BatchNormalization folded into each conv (no conv bias):
    x(1,32,8,8) -> 1x1 32->8 BN ReLU -> 3x3 8->8 BN ReLU -> 1x1 8->32 BN -> Add(x) -> ReLU."""
    net = Net(37)

    def conv_bn(x: str, name: str, cin: int, cout: int, k: int) -> str:
        t = net.conv(x, name, cin, cout, k=k, bias=False)
        params = [net.weight(f"{name}.bn.{p}", cout) for p in ("scale", "bias", "mean")]
        var = net.const(f"{name}.bn.var", net.rng.uniform(0.5, 1.5, cout).astype(np.float32))
        return net.op("BatchNormalization", [t, *params, var], f"{name}.bn.out", f"{name}.bn")

    t = net.op("Relu", [conv_bn("x", "a", 32, 8, 1)], "ra.out", "relu_a")
    t = net.op("Relu", [conv_bn(t, "b", 8, 8, 3)], "rb.out", "relu_b")
    t = conv_bn(t, "c", 8, 32, 1)
    t = net.op("Add", [t, "x"], "add.out", "add")
    net.op("Relu", [t], "y", "relu_out")
    return net.model([("x", [1, 32, 8, 8])], [("y", [1, 32, 8, 8])], "bottleneck_bn")


def two_stage_residual() -> onnx.ModelProto:
    """A downsampling residual stage: x(1,8,16,16) -> conv 3x3/2 8->16 -> ReLU -> conv 3x3
    16->16 -> Add(shortcut 1x1/2 8->16) -> ReLU -> conv 3x3 16->16 -> Sub(·, ReLU out) ->
    y(1,16,8,8)."""
    net = Net(38)
    t = net.conv("x", "conv1", 8, 16, stride=2)
    t = net.op("Relu", [t], "r1.out", "relu1")
    t = net.conv(t, "conv2", 16, 16)
    s = net.conv("x", "short", 8, 16, k=1, stride=2)
    t = net.op("Add", [t, s], "add.out", "add")
    r = net.op("Relu", [t], "r2.out", "relu2")
    t = net.conv(r, "conv3", 16, 16)
    net.op("Sub", [t, r], "y", "sub")
    return net.model([("x", [1, 8, 16, 16])], [("y", [1, 16, 8, 8])], "two_stage")


def classifier_heads() -> onnx.ModelProto:
    """x(1,8,8,8) -> conv 3x3 8->16 -> ReLU -> (GAP -> Flatten -> Gemm 16->10) and
    (MaxPool 2x2/2 -> Flatten -> Gemm 256->6): a classifier contracting every row."""
    net = Net(39)
    t = net.conv("x", "conv", 8, 16)
    t = net.op("Relu", [t], "relu.out", "relu")
    g = net.op("GlobalAveragePool", [t], "gap.out", "gap")
    g = net.op("Flatten", [g], "gflat", "gflatten", axis=1)
    net.op("Gemm", [g, net.weight("fc1.w", 10, 16), net.weight("fc1.b", 10)], "y1", "fc1", transB=1)
    p = net.op("MaxPool", [t], "mp.out", "pool", kernel_shape=[2, 2], strides=[2, 2])
    p = net.op("Flatten", [p], "pflat", "pflatten", axis=1)
    net.op("Gemm", [p, net.weight("fc2.w", 256, 6), net.weight("fc2.b", 6)], "y2", "fc2")
    return net.model([("x", [1, 8, 8, 8])], [("y1", [1, 10]), ("y2", [1, 6])], "heads")


def conv1d_chain() -> onnx.ModelProto:
    """A 1-D signal (rows last: (C, L, 1)): x(1,8,16) -> Conv1d k3 8->16 -> Softplus ->
    Conv1d k5 stride 2 pad 2 16->8 -> Mul(·, Sigmoid(·)) (SiLU) -> y(1,8,8)."""
    net = Net(40)
    t = net.op(
        "Conv",
        ["x", net.weight("c1.w", 16, 8, 3), net.weight("c1.b", 16)],
        "c1.out",
        "c1",
        kernel_shape=[3],
        pads=[1, 1],
    )
    t = net.op("Softplus", [t], "sp.out", "softplus")
    t = net.op(
        "Conv",
        [t, net.weight("c2.w", 8, 16, 5), net.weight("c2.b", 8)],
        "c2.out",
        "c2",
        kernel_shape=[5],
        pads=[2, 2],
        strides=[2],
    )
    s = net.op("Sigmoid", [t], "sig.out", "sigmoid")
    net.op("Mul", [t, s], "y", "silu")
    return net.model([("x", [1, 8, 16])], [("y", [1, 8, 8])], "conv1d")


def _linear(net: Net, x: str, name: str, d_in: int, d_out: int) -> str:
    """A token linear layer as PyTorch exports it: MatMul by (d_in, d_out), then Add bias."""
    t = net.op("MatMul", [x, net.weight(f"{name}.w", d_in, d_out)], f"{name}.mm", f"{name}")
    return net.op("Add", [t, net.weight(f"{name}.b", d_out)], f"{name}.out", f"{name}.bias")


def _layer_norm(net: Net, x: str, name: str, d: int) -> str:
    scale = net.const(f"{name}.scale", net.rng.uniform(0.5, 1.5, d).astype(np.float32))
    return net.op(
        "LayerNormalization",
        [x, scale, net.weight(f"{name}.bias", d)],
        f"{name}.out",
        name,
        axis=-1,
    )


def _gelu(net: Net, x: str, name: str) -> str:
    """GELU as TorchScript decomposes it: x * 0.5 * (1 + erf(x / sqrt 2))."""
    t = net.op(
        "Div", [x, net.const(f"{name}.sqrt2", np.float32(np.sqrt(2)))], f"{name}.d", f"{name}.div"
    )
    t = net.op("Erf", [t], f"{name}.e", f"{name}.erf")
    t = net.op("Add", [t, net.const(f"{name}.one", np.float32(1))], f"{name}.a", f"{name}.add")
    t = net.op("Mul", [x, t], f"{name}.m", f"{name}.mul")
    return net.op("Mul", [t, net.const(f"{name}.half", np.float32(0.5))], f"{name}.out", name)


def _mlp(net: Net, x: str, d: int, hidden: int, act: str) -> str:
    t = _layer_norm(net, x, "ln2", d)
    t = _linear(net, t, "fc1", d, hidden)
    t = _gelu(net, t, "gelu") if act == "gelu" else net.op("Relu", [t], "act.out", "act")
    t = _linear(net, t, "fc2", hidden, d)
    return net.op("Add", [t, x], "y", "residual2")


def _attention(net: Net, x: str, tokens: int, d: int, heads: int) -> str:
    """Pre-norm multi-head self-attention with its residual: LN, fused q/k/v linear, Split,
    heads by Reshape + Transpose, Q.K^T, scale, Softmax, P.V, heads merged, projection."""
    hd = d // heads
    t = _layer_norm(net, x, "ln1", d)
    t = _linear(net, t, "qkv", d, 3 * d)
    net.op("Split", [t, _ints(net, "qkv.sizes", [d, d, d])], ["q", "k", "v"], "split", axis=-1)
    shape = _ints(net, "heads.shape", [1, tokens, heads, hd])
    q = net.op("Reshape", ["q", shape], "q4", "q.reshape")
    q = net.op("Transpose", [q], "qh", "q.heads", perm=[0, 2, 1, 3])
    k = net.op("Reshape", ["k", shape], "k4", "k.reshape")
    k = net.op("Transpose", [k], "kt", "k.heads", perm=[0, 2, 3, 1])
    v = net.op("Reshape", ["v", shape], "v4", "v.reshape")
    v = net.op("Transpose", [v], "vh", "v.heads", perm=[0, 2, 1, 3])
    s = net.op("MatMul", [q, k], "scores", "qk")
    s = net.op("Mul", [s, net.const("scale", np.float32(hd**-0.5))], "scaled", "scale")
    p = net.op("Softmax", [s], "probs", "softmax", axis=-1)
    o = net.op("MatMul", [p, v], "ctx", "pv")
    o = net.op("Transpose", [o], "ctx.t", "merge", perm=[0, 2, 1, 3])
    o = net.op("Reshape", [o, _ints(net, "tokens.shape", [1, tokens, d])], "ctx3", "merge.reshape")
    o = _linear(net, o, "proj", d, d)
    return net.op("Add", [o, x], "attn.out", "residual1")


def transformer_block(act: str = "gelu", tokens: int = 8, d: int = 16, heads: int = 2):
    """A pre-norm encoder block on tokens x(1,T,D): attention (2 heads) and an MLP of 2D
    hidden units with ``act`` (decomposed GELU or ReLU), both with residual adds."""
    net = Net(41 if act == "gelu" else 42)
    a = _attention(net, "x", tokens, d, heads)
    _mlp(net, a, d, 2 * d, act)
    return net.model([("x", [1, tokens, d])], [("y", [1, tokens, d])], f"encoder_{act}")


def mlp_block() -> onnx.ModelProto:
    """The MLP sub-block alone: x(1,16,32) -> LN -> linear 32->64 -> GELU -> linear 64->32
    -> Add(x)."""
    net = Net(43)
    _mlp(net, "x", 32, 64, "gelu")
    return net.model([("x", [1, 16, 32])], [("y", [1, 16, 32])], "mlp")


def attention_core() -> onnx.ModelProto:
    """Attention from given heads: q, k^T, v as graph inputs (1,2,T,d) and (1,2,d,T) ->
    Q.K^T -> Softmax -> P.V -> y(1,2,T,d)."""
    net = Net(44)
    s = net.op("MatMul", ["q", "kt"], "scores", "qk")
    p = net.op("Softmax", [s], "probs", "softmax", axis=-1)
    net.op("MatMul", [p, "v"], "y", "pv")
    ins = [("q", [1, 2, 12, 8]), ("kt", [1, 2, 8, 12]), ("v", [1, 2, 12, 8])]
    return net.model(ins, [("y", [1, 2, 12, 8])], "attention_core")


def channels_last_block() -> onnx.ModelProto:
    """A ConvNeXt block: x(1,16,8,8) -> depthwise 7x7 -> Transpose to (1,8,8,16) -> LN ->
    linear 16->32 -> GELU -> linear 32->16 -> Transpose back -> Add(x) -> y."""
    net = Net(45)
    t = net.conv("x", "dw", 16, 16, k=7, group=16)
    t = net.op("Transpose", [t], "nhwc", "to_nhwc", perm=[0, 2, 3, 1])
    t = _layer_norm(net, t, "ln", 16)
    t = _linear(net, t, "pw1", 16, 32)
    t = _gelu(net, t, "gelu")
    t = _linear(net, t, "pw2", 32, 16)
    t = net.op("Transpose", [t], "nchw", "to_nchw", perm=[0, 3, 1, 2])
    net.op("Add", [t, "x"], "y", "add")
    return net.model([("x", [1, 16, 8, 8])], [("y", [1, 16, 8, 8])], "convnext")

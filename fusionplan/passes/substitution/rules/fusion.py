"""MetaFlow's fusion rules: fold BN into a conv, fuse an activation into its conv or GEMM.

Activations fuse into onnxruntime's contrib ops ``com.microsoft.FusedConv`` and
``FusedGemm`` (one kernel, the activation in the epilogue), the ONNX spelling of TASO's
and MetaFlow's "conv with activation" operator.
"""

from __future__ import annotations

import numpy as np

from fusionplan.ir.model import MS_DOMAIN, ModelGraph, ModelNode
from fusionplan.passes.substitution.pattern import Builder, Match, Rule
from fusionplan.passes.substitution.rules.registry import register

FUSED_CONV = f"{MS_DOMAIN}.FusedConv"
FUSED_GEMM = f"{MS_DOMAIN}.FusedGemm"
FUSABLE_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "LeakyRelu")
"""Activations both contrib ops accept (``activation`` attribute, ``activation_alpha``)."""


def conv_weight_and_bias(b: Builder, m: Match) -> tuple[str, str]:
    """The conv's weight and an explicit bias (a zero bias made up when it had none)."""
    w = m["w"]
    bias = m.get("b")
    if bias is None:
        channels = b.shape(w)[0]
        bias = b.constant(np.zeros(channels, dtype=np.float32))
    return w, bias


@register
class FuseConvBatchNorm(Rule):
    name = "fuse-conv-bn"
    help = "fold an inference BatchNormalization into the conv before it"
    pattern = "c = Conv(x, $w, $b?) ; y = BatchNormalization(c, $scale, $shift, $mean, $var)"

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        eps = float(m.nodes[1].attr("epsilon", 1e-5))
        w, bias = m["w"], m.get("b")

        def factor() -> np.ndarray:
            return b.array(m["scale"]) / np.sqrt(b.array(m["var"]) + eps)

        def new_weight() -> np.ndarray:
            arr = b.array(w)
            return arr * factor().reshape(-1, *([1] * (arr.ndim - 1)))

        def new_bias() -> np.ndarray:
            base = b.array(bias) if bias else 0.0
            return (base - b.array(m["mean"])) * factor() + b.array(m["shift"])

        nw = b.weight(b.shape(w), new_weight)
        nb = b.weight((b.shape(w)[0],), new_bias)
        b.op("Conv", (m["x"], nw, nb), (m["y"],), **dict(m.nodes[0].attrs))

    def check(self, g: ModelGraph, m: Match) -> bool:
        return m.nodes[1].attr("training_mode", 0) == 0 and len(m.nodes[1].outputs) == 1


def _activation_attrs(act: ModelNode, *, gemm: bool = False) -> dict:
    """FusedConv/FusedGemm attributes for the activation node ``act``: FusedConv takes
    the slope as ``activation_params``, FusedGemm as ``activation_alpha``; LeakyRelu's
    ONNX default slope (0.01) is spelled out, as the contrib ops require it."""
    alpha = float(act.attr("alpha", 0.01)) if act.op == "LeakyRelu" else None
    if gemm:
        return {"activation": act.op, "activation_alpha": alpha}
    return {"activation": act.op, "activation_params": (alpha,) if alpha is not None else None}


@register
class FuseConvActivation(Rule):
    name = "fuse-conv-activation"
    help = "fuse a Relu/Sigmoid/Tanh/LeakyRelu into the conv before it (FusedConv)"
    pattern = "c = Conv(x, $w, $b?) ; y = Relu|Sigmoid|Tanh|LeakyRelu(c)"

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w, bias = conv_weight_and_bias(b, m)
        b.op(
            FUSED_CONV,
            (m["x"], w, bias),
            (m["y"],),
            **dict(m.nodes[0].attrs),
            **_activation_attrs(m.nodes[1]),
        )


@register
class FuseGemmActivation(Rule):
    name = "fuse-gemm-activation"
    help = "fuse a Relu/Sigmoid/Tanh/LeakyRelu into the Gemm before it (FusedGemm)"
    pattern = "c = Gemm(a, $w, $bias?) ; y = Relu|Sigmoid|Tanh|LeakyRelu(c)"

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        inputs = (m["a"], m["w"], *([m["bias"]] if m.get("bias") else []))
        b.op(
            FUSED_GEMM,
            inputs,
            (m["y"],),
            **dict(m.nodes[0].attrs),
            **_activation_attrs(m.nodes[1], gemm=True),
        )


@register
class MatMulAddToGemm(Rule):
    name = "matmul-add-to-gemm"
    help = "a 2-D MatMul by a weight plus a bias vector becomes one Gemm"
    pattern = "c = MatMul(a, $w) ; y = Add(c, $bias)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        a, w, bias = g.shape(m["a"]), g.shape(m["w"]), g.shape(m["bias"])
        return len(a) == 2 and len(w) == 2 and bias in ((w[1],), (1, w[1]))

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        bias = m["bias"]
        width = b.shape(m["w"])[1]
        if len(b.shape(bias)) == 2:
            source = bias
            bias = b.weight((width,), lambda: b.array(source).reshape(-1))
        b.op("Gemm", (m["a"], m["w"], bias), (m["y"],))

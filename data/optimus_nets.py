"""Optimus's five benchmark networks, layer for layer (Cai et al., LCTES'21; facts from its
``fusion/nn_models``), as zoo models named ``optimus_resnet18`` ... ``optimus_mobilenet``.

They differ from torchvision's: ResNet-18 ends at pool5 and has a 1x1 projection on its first
shortcut; ResNet-50 strides its first 1x1 conv (Caffe style); VGG-16 is its 13 convs and 5
pools; SqueezeNet 1.0 takes 227x227; MobileNet v1 is the original 28-layer network. Optimus
models no activations and no biases: convs have no bias here, and a ReLU follows every conv
(and every residual add) as in the original networks, which fusionplan's ``optimus`` profile
treats as free (docs/cost-model.md, "The optimus profile").

A network is a list of :class:`Layer` records (the facts), evaluated by a small module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Layer:
    """One layer: ``op`` is conv | dw | maxpool | avgpool | add | concat | fc."""

    name: str
    op: str
    prevs: tuple[str, ...]  # () : the network input
    c_in: int = 0
    c_out: int = 0
    kernel: int = 1
    stride: int = 1
    pad: int = 0
    relu: bool = False


def _conv(name, prev, c_in, c_out, k, s=1, p=None, relu=True) -> Layer:
    pad = k // 2 if p is None else p
    return Layer(name, "conv", (prev,) if prev else (), c_in, c_out, k, s, pad, relu)


def resnet18() -> list[Layer]:
    layers = [
        _conv("conv1", "", 3, 64, 7, 2, 3),
        Layer("pool1", "maxpool", ("conv1",), kernel=3, stride=2, pad=1),
    ]
    prev, c = "pool1", 64
    for stage, width in ((2, 64), (3, 128), (4, 256), (5, 512)):
        for block in range(2):
            stride = 2 if block == 0 and stage > 2 else 1
            a, b = f"conv{stage}_{block}_a", f"conv{stage}_{block}_b"
            layers += [
                _conv(a, prev, c, width, 3, stride),
                _conv(b, a, width, width, 3, relu=False),
            ]
            shortcut = prev
            if block == 0:  # Optimus projects every first shortcut, stage 2's included
                shortcut = f"conv{stage}_br"
                layers.append(_conv(shortcut, prev, c, width, 1, stride, relu=False))
            res = f"conv{stage}_{block}_res"
            layers.append(Layer(res, "add", (shortcut, b), relu=True))
            prev, c = res, width
    layers.append(Layer("pool5", "avgpool", (prev,), kernel=7, stride=7))
    return layers


def resnet50() -> list[Layer]:
    layers = [
        _conv("conv1", "", 3, 64, 7, 2, 3),
        Layer("pool1", "maxpool", ("conv1",), kernel=3, stride=2, pad=1),
    ]
    prev, c = "pool1", 64
    for stage, width, blocks in ((2, 64, 3), (3, 128, 4), (4, 256, 6), (5, 512, 3)):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 2 else 1
            a, b, cc = (f"conv{stage}_{block}_{x}" for x in "abc")
            layers += [
                _conv(a, prev, c, width, 1, stride),  # Caffe style: the 1x1 conv strides
                _conv(b, a, width, width, 3),
                _conv(cc, b, width, 4 * width, 1, relu=False),
            ]
            shortcut = prev
            if block == 0:
                shortcut = f"conv{stage}_br"
                layers.append(_conv(shortcut, prev, c, 4 * width, 1, stride, relu=False))
            res = f"conv{stage}_{block}_res"
            layers.append(Layer(res, "add", (shortcut, cc), relu=True))
            prev, c = res, 4 * width
    layers += [
        Layer("pool5", "avgpool", (prev,), kernel=7, stride=7),
        Layer("fc", "fc", ("pool5",), 2048, 1000),
    ]
    return layers


def vgg16() -> list[Layer]:
    layers: list[Layer] = []
    prev, c, index = "", 3, 1
    for stage, (width, convs) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)), 1):
        for _ in range(convs):
            name = f"conv{index}"
            layers.append(_conv(name, prev, c, width, 3))
            prev, c, index = name, width, index + 1
        layers.append(Layer(f"pool{stage}", "maxpool", (prev,), kernel=2, stride=2))
        prev = f"pool{stage}"
    return layers


def squeezenet() -> list[Layer]:
    layers = [
        _conv("conv1", "", 3, 96, 7, 2, 0),
        Layer("pool1", "maxpool", ("conv1",), kernel=3, stride=2),
    ]
    prev, c = "pool1", 96
    fires = {2: (16, 64), 3: (16, 64), 4: (32, 128), 5: (32, 128), 6: (48, 192), 7: (48, 192)}
    fires |= {8: (64, 256), 9: (64, 256)}
    for fire, (squeeze, expand) in fires.items():
        sq, e1, e3 = (f"fire{fire}_{x}" for x in ("squeeze1x1", "expand1x1", "expand3x3"))
        layers += [
            _conv(sq, prev, c, squeeze, 1),
            _conv(e1, sq, squeeze, expand, 1),
            _conv(e3, sq, squeeze, expand, 3),
            Layer(f"fire{fire}_concat", "concat", (e1, e3)),
        ]
        prev, c = f"fire{fire}_concat", 2 * expand
        if fire in (4, 8):
            layers.append(Layer(f"pool{fire}", "maxpool", (prev,), kernel=3, stride=2))
            prev = f"pool{fire}"
    layers += [
        _conv("conv10", prev, 512, 1000, 1),
        Layer("pool10", "avgpool", ("conv10",), kernel=13, stride=13),
    ]
    return layers


def mobilenet() -> list[Layer]:
    layers = [_conv("conv1", "", 3, 32, 3, 2)]
    prev, c = "conv1", 32
    blocks = [("conv2_1", 64, 1), ("conv2_2", 128, 2), ("conv3_1", 128, 1), ("conv3_2", 256, 2)]
    blocks += [("conv4_1", 256, 1), ("conv4_2", 512, 2)]
    blocks += [(f"conv5_{i}", 512, 1) for i in range(1, 6)]
    blocks += [("conv5_6", 1024, 2), ("conv6", 1024, 1)]
    for name, width, stride in blocks:
        dw, pw = f"{name}_dw", f"{name}_pw"
        layers += [
            Layer(dw, "dw", (prev,), c, c, 3, stride, 1, relu=True),
            _conv(pw, dw, c, width, 1),
        ]
        prev, c = pw, width
    layers += [
        Layer("pool6", "avgpool", (prev,), kernel=7, stride=7),
        Layer("fc", "fc", ("pool6",), 1024, 1000),
    ]
    return layers


NETWORKS: dict[str, tuple[Callable[[], list[Layer]], int, str]] = {
    "optimus_resnet18": (resnet18, 224, "Optimus's ResNet-18: convs to pool5, no FC"),
    "optimus_resnet50": (resnet50, 224, "Optimus's ResNet-50: strided 1x1 convs, with FC"),
    "optimus_vgg16": (vgg16, 224, "Optimus's VGG-16: 13 convs and 5 pools, no FC"),
    "optimus_squeezenet": (squeezenet, 227, "Optimus's SqueezeNet 1.0 at 227x227"),
    "optimus_mobilenet": (mobilenet, 224, "Optimus's MobileNet v1 with its FC"),
}
"""name -> (layer list, input side, description)."""


def build_module(layers: list[Layer]) -> Any:
    """A torch module evaluating ``layers`` in order (each reads its ``prevs``' outputs)."""
    # heavy: torch loads only when a network is exported
    import torch
    from torch import nn

    def make(layer: Layer) -> nn.Module:
        if layer.op == "conv":
            conv = nn.Conv2d(
                layer.c_in, layer.c_out, layer.kernel, layer.stride, layer.pad, bias=False
            )
            return nn.Sequential(conv, nn.ReLU()) if layer.relu else conv
        if layer.op == "dw":
            conv = nn.Conv2d(
                layer.c_in,
                layer.c_out,
                layer.kernel,
                layer.stride,
                layer.pad,
                groups=layer.c_in,
                bias=False,
            )
            return nn.Sequential(conv, nn.ReLU()) if layer.relu else conv
        if layer.op == "maxpool":
            return nn.MaxPool2d(layer.kernel, layer.stride, layer.pad)
        if layer.op == "avgpool":
            return nn.AvgPool2d(layer.kernel, layer.stride, layer.pad)
        if layer.op == "fc":
            return nn.Sequential(nn.Flatten(), nn.Linear(layer.c_in, layer.c_out, bias=False))
        if layer.op == "add":
            return nn.ReLU() if layer.relu else nn.Identity()
        if layer.op == "concat":
            return nn.Identity()
        raise ValueError(f"unknown layer op {layer.op!r}")

    class LayerGraph(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.specs = layers
            self.ops = nn.ModuleList(make(layer) for layer in layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: dict[str, torch.Tensor] = {}
            y = x
            for layer, op in zip(self.specs, self.ops, strict=True):
                ins = [out[p] for p in layer.prevs] or [x]
                if layer.op == "add":
                    y = op(ins[0] + ins[1])
                elif layer.op == "concat":
                    y = torch.cat(ins, dim=1)
                else:
                    y = op(ins[0])
                out[layer.name] = y
            return y

    return LayerGraph()

"""TASO's algebraic rules: fold constants into convs and MatMuls, factor sums of convs and
MatMuls (distributivity, input-channel concat), reassociate MatMuls by constants, cancel
Split/Concat pairs, and move activations across Concat and Split.

Each rewrite is exact: the search, not the rule, decides whether it pays off. Rules whose
pattern is variadic in a way the pattern DSL cannot say (an activation on *every* input of
a Concat, an inner Concat *somewhere* in an outer one) find their matches by a scan of the
graph (:class:`_ScanRule`); their ``pattern`` then documents the shape of a match.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import cached_property
from typing import Any

import numpy as np

from fusionplan.ir.model import Dims, ModelGraph, ModelNode
from fusionplan.passes.substitution.pattern import Builder, Match, Rule
from fusionplan.passes.substitution.rules.registry import register

ACTIVATIONS = frozenset(
    {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Erf", "Clip"}
)
"""Elementwise activations that commute with Concat and Split (Clip's min/max inputs must be
the same constants everywhere)."""
_ACTIVATION_OPS = "|".join(sorted(ACTIVATIONS))


# ---------------------------------------------------------------------- helpers
def _conv_ok(node: ModelNode) -> bool:
    return node.attr("auto_pad", "NOTSET") in ("NOTSET", "")


def _conv_form(node: ModelNode, spatial: int) -> tuple[Any, ...]:
    """A conv's attributes with ONNX's defaults filled in: equal forms compute alike."""
    return (
        tuple(node.attr("strides") or (1,) * spatial),
        tuple(node.attr("dilations") or (1,) * spatial),
        tuple(node.attr("pads") or (0,) * (2 * spatial)),
        int(node.attr("group", 1)),
    )


def _aligned(shape: Dims, rank: int) -> Dims | None:
    """``shape`` right-aligned to ``rank`` dims (numpy broadcasting), None if it has more."""
    if len(shape) > rank:
        return None
    return (1,) * (rank - len(shape)) + tuple(shape)


def _along_axis(const: Dims, out: Dims, axis: int) -> bool:
    """Whether a constant of shape ``const``, broadcast against ``out``, varies only along
    ``axis`` and leaves ``out``'s shape alone (a scalar, ``(C,1,1)``, ``(1,N)``...)."""
    dims = _aligned(const, len(out))
    return dims is not None and all(
        d == 1 or (i == axis and d == out[i]) for i, d in enumerate(dims)
    )


def _axis_vector(arr: np.ndarray, rank: int, axis: int, size: int) -> np.ndarray:
    """The ``size`` values a constant accepted by :func:`_along_axis` takes along ``axis``."""
    dims = _aligned(arr.shape, rank)
    target = tuple(size if i == axis else 1 for i in range(rank))
    return np.broadcast_to(arr.reshape(dims), target).reshape(size)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _sum_bias(b: Builder, first: str | None, second: str | None, channels: int) -> str | None:
    """The bias of a merged conv: the sum of those present (None when neither is)."""
    if first and second:
        return b.weight((channels,), lambda: b.array(first) + b.array(second))
    return first or second


class _Commutative(Rule):
    """A rule whose last pattern node is a commutative binary op (Add, Mul): it also
    matches with that node's two operands swapped (``Mul($s, c)`` as well as ``Mul(c, $s)``)."""

    @cached_property
    def _swapped(self) -> Rule:
        twin = type(self)()
        last = self.nodes[-1]
        twin.__dict__["nodes"] = (*self.nodes[:-1], replace(last, inputs=last.inputs[::-1]))
        return twin

    def matches(self, g: ModelGraph, near: Iterable[str] | None = None) -> list[Match]:
        near = None if near is None else list(near)
        found = {m.key: m for m in super().matches(g, near)}
        for m in Rule.matches(self._swapped, g, near):
            found.setdefault(m.key, m)
        return list(found.values())


class _ScanRule(Rule):
    """A rule matched by :meth:`find`, a scan of the graph, instead of the pattern matcher.

    Matches keep the matcher's contract: nodes in the order ``pattern`` lists them, tensors
    produced and read inside the match have no reader outside it, ``check`` holds.
    """

    def find(self, g: ModelGraph) -> Iterator[tuple[tuple[ModelNode, ...], dict[str, Any]]]:
        raise NotImplementedError

    def matches(self, g: ModelGraph, near: Iterable[str] | None = None) -> list[Match]:
        wanted = None if near is None else set(near)
        found = []
        for nodes, binding in self.find(g):
            m = Match(self, nodes, binding)
            if wanted is not None and wanted.isdisjoint(m.names):
                continue
            produced = {t for n in nodes for t in n.outputs}
            read = {t for n in nodes for t in n.inputs}
            if any(g.external_users(t, m.names) for t in produced & read):
                continue
            if self.check(g, m):
                found.append(m)
        return found


def _same_activation(nodes: Iterable[ModelNode], g: ModelGraph) -> bool:
    """All the same activation, attributes and extra (constant) inputs."""
    nodes = list(nodes)
    first = nodes[0]
    return (
        first.op in ACTIVATIONS
        and all(g.is_const(t) for t in first.inputs[1:] if t)
        and all(
            n.op == first.op and n.attrs == first.attrs and n.inputs[1:] == first.inputs[1:]
            for n in nodes
        )
    )


# ---------------------------------------------------------------------- constant folding
class _FoldIntoConv(_Commutative):
    def check(self, g: ModelGraph, m: Match) -> bool:
        return _conv_ok(m.nodes[0]) and _along_axis(g.shape(m["s"]), g.shape(m["c"]), 1)

    def channel_vector(self, b: Builder, m: Match) -> np.ndarray:
        return _axis_vector(b.array(m["s"]), len(b.shape(m["c"])), 1, b.shape(m["w"])[0])


@register
class FoldMulIntoConv(_FoldIntoConv):
    """TASO's conv-scale rule: ``conv(x, w) * c == conv(x, w * c)`` for a per-output-channel
    ``c``, so the Mul costs nothing at run time."""

    name = "fold-mul-into-conv"
    help = "fold a per-output-channel constant Mul after a conv into its weight and bias"
    pattern = "c = Conv(x, $w, $b?) ; y = Mul(c, $s)"

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w, bias = m["w"], m.get("b")
        shape = b.shape(w)

        def new_weight() -> np.ndarray:
            scale = self.channel_vector(b, m).reshape(-1, *([1] * (len(shape) - 1)))
            return b.array(w) * scale

        inputs = [m["x"], b.weight(shape, new_weight, g.dtype(w))]
        if bias:

            def new_bias() -> np.ndarray:
                return b.array(bias) * self.channel_vector(b, m)

            inputs.append(b.weight((shape[0],), new_bias, g.dtype(bias)))
        b.op("Conv", inputs, (m["y"],), **dict(m.nodes[0].attrs))


@register
class FoldAddIntoConv(_FoldIntoConv):
    """``conv(x, w, b) + c == conv(x, w, b + c)`` for a per-output-channel ``c``."""

    name = "fold-add-into-conv"
    help = "fold a per-output-channel constant Add after a conv into its bias"
    pattern = "c = Conv(x, $w, $b?) ; y = Add(c, $s)"

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w, bias = m["w"], m.get("b")
        channels = b.shape(w)[0]

        def new_bias() -> np.ndarray:
            base = b.array(bias) if bias else 0.0
            return base + self.channel_vector(b, m)

        new = b.weight((channels,), new_bias, g.dtype(w))
        b.op("Conv", (m["x"], w, new), (m["y"],), **dict(m.nodes[0].attrs))


@register
class FoldMulIntoMatMul(_Commutative):
    """``(x @ w) * c == x @ (w * c)`` for a ``c`` that scales output columns."""

    name = "fold-mul-into-matmul"
    help = "fold a per-column constant Mul after a MatMul by a 2-D weight into the weight"
    pattern = "c = MatMul(x, $w) ; y = Mul(c, $s)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        out = g.shape(m["c"])
        return len(g.shape(m["w"])) == 2 and _along_axis(g.shape(m["s"]), out, len(out) - 1)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w, s = m["w"], m["s"]
        shape = b.shape(w)
        rank = len(b.shape(m["c"]))

        def new_weight() -> np.ndarray:
            return b.array(w) * _axis_vector(b.array(s), rank, rank - 1, shape[1])[None, :]

        b.op("MatMul", (m["x"], b.weight(shape, new_weight, g.dtype(w))), (m["y"],))


# ---------------------------------------------------------------------- distributivity
@register
class FactorAddConvs(Rule):
    """TASO's ``conv(x, w1) + conv(x, w2) == conv(x, w1 + w2)``: one conv instead of two
    and an Add."""

    name = "factor-add-convs"
    help = "the sum of two alike convs of one input becomes one conv by the summed weights"
    pattern = "a = Conv(x, $w1, $b1?) ; c = Conv(x, $w2, $b2?) ; y = Add(a, c)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        first, second = m.nodes[0], m.nodes[1]
        spatial = len(g.shape(m["x"])) - 2
        return (
            _conv_ok(first)
            and _conv_ok(second)
            and g.shape(m["w1"]) == g.shape(m["w2"])
            and _conv_form(first, spatial) == _conv_form(second, spatial)
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w1, w2 = m["w1"], m["w2"]
        shape = b.shape(w1)
        weight = b.weight(shape, lambda: b.array(w1) + b.array(w2), g.dtype(w1))
        bias = _sum_bias(b, m.get("b1"), m.get("b2"), shape[0])
        inputs = (m["x"], weight, *([bias] if bias else []))
        b.op("Conv", inputs, (m["y"],), **dict(m.nodes[0].attrs))


@register
class ConcatAddConvs(Rule):
    """TASO's ``conv(x1, w1) + conv(x2, w2) == conv(concat(x1, x2), concat(w1, w2))`` on
    input channels: one conv reads both inputs and the Add disappears."""

    name = "concat-add-convs"
    help = "the sum of two alike convs of different inputs becomes one conv of their concat"
    pattern = "a = Conv(x1, $w1, $b1?) ; c = Conv(x2, $w2, $b2?) ; y = Add(a, c)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        first, second = m.nodes[0], m.nodes[1]
        x1, x2 = g.shape(m["x1"]), g.shape(m["x2"])
        w1, w2 = g.shape(m["w1"]), g.shape(m["w2"])
        spatial = len(x1) - 2
        return (
            m["x1"] != m["x2"]  # the same input is factor-add-convs' case
            and _conv_ok(first)
            and _conv_ok(second)
            and len(x1) == len(x2)
            and x1[0] == x2[0]
            and x1[2:] == x2[2:]
            and w1[0] == w2[0]
            and w1[2:] == w2[2:]
            and _conv_form(first, spatial) == _conv_form(second, spatial)
            and _conv_form(first, spatial)[3] == 1
            and g.shape(m["a"]) == g.shape(m["c"])
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w1, w2 = m["w1"], m["w2"]
        s1, s2 = b.shape(w1), b.shape(w2)
        shape = (s1[0], s1[1] + s2[1], *s1[2:])
        weight = b.weight(
            shape, lambda: np.concatenate([b.array(w1), b.array(w2)], axis=1), g.dtype(w1)
        )
        bias = _sum_bias(b, m.get("b1"), m.get("b2"), shape[0])
        (joined,) = b.op("Concat", (m["x1"], m["x2"]), 1, axis=1)
        inputs = (joined, weight, *([bias] if bias else []))
        b.op("Conv", inputs, (m["y"],), **dict(m.nodes[0].attrs))


@register
class FactorAddMatMuls(Rule):
    """``x @ a + x @ b == x @ (a + b)``: one MatMul instead of two and an Add."""

    name = "factor-add-matmuls"
    help = "the sum of two MatMuls of one input by weights becomes one MatMul"
    pattern = "a = MatMul(x, $w1) ; c = MatMul(x, $w2) ; y = Add(a, c)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        return g.shape(m["w1"]) == g.shape(m["w2"])

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w1, w2 = m["w1"], m["w2"]
        weight = b.weight(b.shape(w1), lambda: b.array(w1) + b.array(w2), g.dtype(w1))
        b.op("MatMul", (m["x"], weight), (m["y"],))


@register
class ConcatAddMatMuls(Rule):
    """``x1 @ a + x2 @ b == concat(x1, x2) @ concat(a, b)`` (concat on the inner
    dimension): one MatMul instead of two and an Add."""

    name = "concat-add-matmuls"
    help = "the sum of two MatMuls of different inputs by 2-D weights becomes one MatMul"
    pattern = "a = MatMul(x1, $w1) ; c = MatMul(x2, $w2) ; y = Add(a, c)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        x1, x2 = g.shape(m["x1"]), g.shape(m["x2"])
        w1, w2 = g.shape(m["w1"]), g.shape(m["w2"])
        return (
            m["x1"] != m["x2"]  # the same input is factor-add-matmuls' case
            and len(w1) == len(w2) == 2
            and w1[1] == w2[1]
            and x1[:-1] == x2[:-1]
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w1, w2 = m["w1"], m["w2"]
        s1, s2 = b.shape(w1), b.shape(w2)
        weight = b.weight(
            (s1[0] + s2[0], s1[1]),
            lambda: np.concatenate([b.array(w1), b.array(w2)], axis=0),
            g.dtype(w1),
        )
        (joined,) = b.op("Concat", (m["x1"], m["x2"]), 1, axis=-1)
        b.op("MatMul", (joined, weight), (m["y"],))


@register
class ReassociateMatMul(Rule):
    """TASO's associativity ``(x @ a) @ b == x @ (a @ b)`` with ``a @ b`` precomputed: one
    MatMul instead of two (the cost decides whether the product weight is worth it)."""

    name = "reassociate-matmul"
    help = "a MatMul by a weight of a MatMul by a weight becomes one MatMul by their product"
    pattern = "a = MatMul(x, $w1) ; y = MatMul(a, $w2)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        return len(g.shape(m["w1"])) == len(g.shape(m["w2"])) == 2

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        w1, w2 = m["w1"], m["w2"]

        def product() -> np.ndarray:
            return b.array(w1).astype(np.float64) @ b.array(w2).astype(np.float64)

        shape = (b.shape(w1)[0], b.shape(w2)[1])
        b.op("MatMul", (m["x"], b.weight(shape, product, g.dtype(w1))), (m["y"],))


# ---------------------------------------------------------------------- split / concat
@register
class CancelSplitConcat(Rule):
    """Concatenating every output of a Split, in order, on its axis gives back its input."""

    name = "cancel-split-concat"
    help = "Concat of all outputs of a Split (in order, same axis) is the Split's input"
    pattern = "*parts = Split(x, *sizes) ; y = Concat(*parts)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        rank = len(g.shape(m["x"]))
        split, concat = m.nodes
        return _axis(split.attr("axis", 0), rank) == _axis(concat.attr("axis"), rank)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        b.alias(m["y"], m["x"])


@register
class CancelConcatSplit(Rule):
    """Splitting a Concat at its inputs' boundaries, on its axis, gives back its inputs."""

    name = "cancel-concat-split"
    help = "Split of a Concat at the boundaries of its inputs (same axis) gives the inputs"
    pattern = "t = Concat(*xs) ; *ys = Split(t, *sizes)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        rank = len(g.shape(m["t"]))
        concat, split = m.nodes
        axis = _axis(concat.attr("axis"), rank)
        xs, ys = m["xs"], m["ys"]
        return (
            _axis(split.attr("axis", 0), rank) == axis
            and len(xs) == len(ys)
            and [g.shape(t)[axis] for t in xs] == [g.shape(t)[axis] for t in ys]
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        for y, x in zip(m["ys"], m["xs"], strict=True):
            b.alias(y, x)


@register
class ConcatOfSplitPrefix(_ScanRule):
    """A whole Split's outputs, in order, as a run of a Concat's inputs (on the same axis)
    are its input: ``Concat(s0, s1, z) -> Concat(x, z)``, as after merging sibling convs
    whose outputs are concatenated. The run may sit anywhere among the Concat's inputs."""

    name = "concat-of-split-prefix"
    help = "a whole Split's outputs as a run of a Concat's inputs become the Split's input"
    pattern = "*ss = Split(x, *sizes) ; y = Concat(*zs)"

    def find(self, g: ModelGraph) -> Iterator[tuple[tuple[ModelNode, ...], dict[str, Any]]]:
        for concat in g.by_op.get("Concat", ()):
            for at, tensor in enumerate(concat.inputs):
                split = g.producer.get(tensor)
                if split is None or split.op != "Split" or split.outputs[0] != tensor:
                    continue
                run = len(split.outputs)
                if concat.inputs[at : at + run] != split.outputs or run == len(concat.inputs):
                    continue  # not the whole split, or the whole concat (cancel-split-concat)
                binding = {
                    "x": split.inputs[0],
                    "ss": split.outputs,
                    "zs": concat.inputs,
                    "y": concat.outputs[0],
                    "at": at,
                }
                yield (split, concat), binding

    def check(self, g: ModelGraph, m: Match) -> bool:
        split, concat = m.nodes
        rank = len(g.shape(m["x"]))
        return _axis(split.attr("axis", 0), rank) == _axis(concat.attr("axis"), rank) and all(
            concat.inputs.count(t) == 1 for t in split.outputs
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        zs, at, run = m["zs"], m["at"], len(m["ss"])
        inputs = (*zs[:at], m["x"], *zs[at + run :])
        b.op("Concat", inputs, (m["y"],), **dict(m.nodes[1].attrs))


@register
class MergeConcatConcat(_ScanRule):
    """A Concat read only by a Concat on the same axis is spliced into it: one copy of the
    data instead of two."""

    name = "merge-concat-concat"
    help = "flatten a Concat read only by another Concat on the same axis into it"
    pattern = "t = Concat(*xs) ; y = Concat(*zs)"

    def find(self, g: ModelGraph) -> Iterator[tuple[tuple[ModelNode, ...], dict[str, Any]]]:
        for outer in g.by_op.get("Concat", ()):
            for tensor in dict.fromkeys(outer.inputs):
                inner = g.producer.get(tensor)
                if inner is None or inner.op != "Concat":
                    continue
                binding = {
                    "t": tensor,
                    "xs": inner.inputs,
                    "zs": outer.inputs,
                    "y": outer.outputs[0],
                }
                yield (inner, outer), binding

    def check(self, g: ModelGraph, m: Match) -> bool:
        inner, outer = m.nodes
        rank = len(g.shape(m["y"]))
        return _axis(inner.attr("axis"), rank) == _axis(outer.attr("axis"), rank)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        inputs = [t for z in m["zs"] for t in (m["xs"] if z == m["t"] else (z,))]
        b.op("Concat", inputs, (m["y"],), **dict(m.nodes[1].attrs))


# ---------------------------------------------------------------------- activations
@register
class ActivationThroughConcat(_ScanRule):
    """TASO's ``concat(relu(a), relu(b)) == relu(concat(a, b))``: one activation kernel
    instead of one per input (and the Concat may then cancel or merge further)."""

    name = "activation-through-concat"
    help = "the same activation on every input of a Concat moves after the Concat"
    pattern = f"r = {_ACTIVATION_OPS}(a) ; y = Concat(*rs)"

    def find(self, g: ModelGraph) -> Iterator[tuple[tuple[ModelNode, ...], dict[str, Any]]]:
        for concat in g.by_op.get("Concat", ()):
            acts = [g.producer.get(t) for t in concat.inputs]
            if len(acts) < 2 or any(a is None or a.op not in ACTIVATIONS for a in acts):
                continue
            binding = {"xs": tuple(a.inputs[0] for a in acts), "y": concat.outputs[0]}
            yield (concat, *acts), binding

    def check(self, g: ModelGraph, m: Match) -> bool:
        concat, *acts = m.nodes
        return len(set(concat.inputs)) == len(concat.inputs) and _same_activation(acts, g)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        concat, act = m.nodes[0], m.nodes[1]
        (joined,) = b.op("Concat", m["xs"], 1, **dict(concat.attrs))
        b.op(act.op, (joined, *act.inputs[1:]), (m["y"],), **dict(act.attrs))


@register
class ActivationThroughSplit(_ScanRule):
    """The same activation on every output of a Split is applied once, before it."""

    name = "activation-through-split"
    help = "the same activation on every output of a Split moves before the Split"
    pattern = f"*ss = Split(x, *sizes) ; r = {_ACTIVATION_OPS}(s)"

    def find(self, g: ModelGraph) -> Iterator[tuple[tuple[ModelNode, ...], dict[str, Any]]]:
        for split in g.by_op.get("Split", ()):
            acts = []
            for tensor in split.outputs:
                users = g.consumers.get(tensor, ())
                if len(users) != 1 or users[0].op not in ACTIVATIONS:
                    break
                if users[0].inputs[0] != tensor or tensor in users[0].inputs[1:]:
                    break
                acts.append(users[0])
            else:
                binding = {"x": split.inputs[0], "ys": tuple(a.outputs[0] for a in acts)}
                yield (split, *acts), binding

    def check(self, g: ModelGraph, m: Match) -> bool:
        split, *acts = m.nodes
        sizes = split.inputs[1] if len(split.inputs) > 1 else ""
        if sizes and not g.is_const(sizes):
            return False
        if not sizes:  # an equal split: the shape rule of the new Split assumes one
            rank = len(g.shape(m["x"]))
            axis = _axis(split.attr("axis", 0), rank)
            if len({g.shape(t)[axis] for t in split.outputs}) != 1:
                return False
        return _same_activation(acts, g)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        split, act = m.nodes[0], m.nodes[1]
        (activated,) = b.op(act.op, (m["x"], *act.inputs[1:]), 1, **dict(act.attrs))
        b.op("Split", (activated, *split.inputs[1:]), m["ys"], **dict(split.attrs))

"""Rules that merge operators into wider ones, or split them back (TASO's and MetaFlow's
"enlarge, then merge" moves, onnxruntime's Conv+Add fusion, AutoGraph's group-conv moves).

Merging two small GEMM-like ops into one wide one trades a Split or Concat for better
utilisation of one kernel launch; some moves (enlarging a kernel, absorbing an Add through
an identity kernel, splitting a grouped conv) cost more on their own and only pay off through
the merges they enable, which is why a search rather than a greedy pass applies them.
The ideas follow MetaFlow (Jia et al., SysML 2019) and TASO (SOSP 2019); the code is ours.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fusionplan.ir.model import MS_DOMAIN, Dims, ModelGraph, ModelNode
from fusionplan.passes.substitution.pattern import Builder, Match, Rule
from fusionplan.passes.substitution.rules.registry import register

FUSED_CONV = f"{MS_DOMAIN}.FusedConv"
FUSED_GEMM = f"{MS_DOMAIN}.FusedGemm"
CONVS = f"Conv|{FUSED_CONV}"
GEMMS = f"Gemm|{FUSED_GEMM}"
ACTIVATIONS = "Relu|Sigmoid|Tanh|LeakyRelu"
_GEOMETRY = frozenset({"auto_pad", "kernel_shape", "strides", "dilations", "pads", "group"})
_GEMM_DEFAULTS = {"transA": 0, "transB": 0, "alpha": 1.0, "beta": 1.0}


# ---------------------------------------------------------------------- helpers
@dataclass(frozen=True)
class ConvGeometry:
    """A conv's window, with ONNX defaults filled in (pads: all begins, then all ends)."""

    kernel: Dims
    strides: Dims
    dilations: Dims
    pads: Dims
    group: int

    @property
    def keeps_size(self) -> bool:
        """Stride 1, dilation 1 and ``begin + end == k - 1``: output spatial dims equal the
        input's, each output pixel centred (at offset ``pads[:n]``) on its input pixel."""
        n = len(self.kernel)
        return (
            all(s == 1 for s in self.strides)
            and all(d == 1 for d in self.dilations)
            and all(self.pads[i] + self.pads[i + n] == self.kernel[i] - 1 for i in range(n))
        )

    def window(self) -> tuple[Dims, Dims, Dims, Dims]:
        """Everything but the group: what two convs must share to be merged."""
        return self.kernel, self.strides, self.dilations, self.pads


def geometry(g: ModelGraph, node: ModelNode) -> ConvGeometry | None:
    """The geometry of a Conv/FusedConv, or None where it is implicit (``auto_pad``) or
    inconsistent (attribute lengths, ``kernel_shape`` against the weight)."""
    if node.attr("auto_pad", "NOTSET") != "NOTSET":
        return None
    kernel = tuple(g.shape(node.inputs[1])[2:])
    n = len(kernel)
    strides = tuple(node.attr("strides") or (1,) * n)
    dilations = tuple(node.attr("dilations") or (1,) * n)
    pads = tuple(node.attr("pads") or (0,) * (2 * n))
    declared = node.attr("kernel_shape")
    if n == 0 or (declared is not None and tuple(declared) != kernel):
        return None
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        return None
    return ConvGeometry(kernel, strides, dilations, pads, int(node.attr("group", 1)))


def epilogue(node: ModelNode) -> tuple[Any, ...]:
    """The op and every non-geometry attribute (a FusedConv's activation and its params):
    two convs merge only if these agree."""
    return node.op, tuple((k, v) for k, v in node.attrs if k not in _GEOMETRY)


def gemm_attrs(node: ModelNode) -> dict[str, Any]:
    """A Gemm/FusedGemm's attributes with ONNX defaults filled in."""
    return {**_GEMM_DEFAULTS, **dict(node.attrs)}


def concat_weights(b: Builder, names: Sequence[str], axis: int) -> str:
    """A lazy weight: the named weights concatenated along ``axis``."""
    shapes = [b.shape(n) for n in names]
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)
    names = tuple(names)
    return b.weight(
        tuple(shape),
        lambda: np.concatenate([b.array(n) for n in names], axis=axis),
        b.g.dtype(names[0]),
    )


def concat_biases(
    b: Builder, parts: Sequence[tuple[str | None, int]], dtype: str = "float32"
) -> str | None:
    """A lazy bias concatenating ``(bias or None, channels)`` parts, zeros for a missing
    bias; None when every part has none."""
    if not any(name for name, _ in parts):
        return None
    parts = tuple(parts)

    def make() -> np.ndarray:
        return np.concatenate(
            [
                b.array(name).reshape(-1) if name else np.zeros(size, dtype=np.float32)
                for name, size in parts
            ]
        )

    return b.weight((sum(size for _, size in parts),), make, dtype)


def slice_weight(b: Builder, name: str, start: int, stop: int) -> str:
    """A lazy weight: ``name[start:stop]`` along axis 0."""
    shape = (stop - start, *b.shape(name)[1:])
    return b.weight(shape, lambda: b.array(name)[start:stop], b.g.dtype(name))


def conv_inputs(x: str, w: str, bias: str | None) -> tuple[str, ...]:
    return (x, w, bias) if bias else (x, w)


def activation_attrs(act: ModelNode) -> dict[str, Any]:
    """FusedConv's attributes for the activation node ``act``; LeakyRelu always passes its
    alpha (onnxruntime rejects a FusedConv LeakyRelu without ``activation_params``)."""
    params = (float(act.attr("alpha", 0.01)),) if act.op == "LeakyRelu" else None
    return {"activation": act.op, "activation_params": params}


@functools.cache
def _swapped_rule(cls: type[EitherAddOrder]) -> type[Rule]:
    """``cls`` with its pattern's Add operands swapped (matched, checked, rewritten alike)."""
    return type(f"{cls.__name__}Swapped", (cls,), {"pattern": cls.swapped, "matches": Rule.matches})


class EitherAddOrder(Rule):
    """A rule whose pattern reads ``Add(c, r)`` and that matches ``Add(r, c)`` as well: the
    pattern DSL has no commutative ops, so the swapped pattern runs as a twin rule of the
    same name whose matches are merged in."""

    swapped: ClassVar[str]

    def matches(self, g: ModelGraph, near: Iterable[str] | None = None) -> list[Match]:
        near = None if near is None else list(near)
        found = {m.key: m for m in super().matches(g, near)}
        for m in self._twin.matches(g, near):
            found.setdefault(m.key, m)
        return list(found.values())

    @functools.cached_property
    def _twin(self) -> Rule:
        return _swapped_rule(type(self))()


# ---------------------------------------------------------------------- sibling merges
@register
class MergeSiblingConvs(Rule):
    """Two convs reading one input become one conv with both filter banks and a Split:
    one wider kernel launch instead of two narrow ones (TASO/MetaFlow's conv merge)."""

    name = "merge-sibling-convs"
    help = "merge two convs of one input (same window, same activation) into one conv + Split"
    pattern = f"a = {CONVS}(x, $w1, $b1?) ; c = {CONVS}(x, $w2, $b2?)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        first, second = m.nodes
        one, two = geometry(g, first), geometry(g, second)
        return (
            one is not None
            and one == two
            and one.group == 1
            and epilogue(first) == epilogue(second)
            and g.dtype(m["w1"]) == g.dtype(m["w2"])
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        first = m.nodes[0]
        o1, o2 = b.shape(m["w1"])[0], b.shape(m["w2"])[0]
        w = concat_weights(b, (m["w1"], m["w2"]), axis=0)
        bias = concat_biases(b, ((m.get("b1"), o1), (m.get("b2"), o2)), g.dtype(m["w1"]))
        (y,) = b.op(first.op, conv_inputs(m["x"], w, bias), 1, **dict(first.attrs))
        sizes = b.constant(np.array([o1, o2], dtype=np.int64))
        b.op("Split", (y, sizes), (m["a"], m["c"]), axis=1)


@register
class EnlargeConvKernel(Rule):
    """Zero-pad a conv's kernel to its sibling's larger size (pads grow to keep the output):
    costlier alone, it lets merge-sibling-convs merge the two (MetaFlow's relaxed rule).

    The sibling is part of the match and re-emitted unchanged, so the match alone decides
    the new kernel size (a step replays the same on any graph holding both convs).
    """

    name = "enlarge-conv-kernel"
    help = "zero-pad a conv's kernel to a sibling conv's larger kernel (enables a merge)"
    pattern = f"y = {CONVS}(x, $w, $b?) ; s = {CONVS}(x, $ws, $bs?)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        small, big = m.nodes
        have, want = geometry(g, small), geometry(g, big)
        if have is None or want is None or epilogue(small) != epilogue(big):
            return False
        if have.group != 1 or want.group != 1 or g.dtype(m["w"]) != g.dtype(m["ws"]):
            return False
        if have.strides != want.strides or have.dilations != want.dilations:
            return False
        grow = [k2 - k1 for k1, k2 in zip(have.kernel, want.kernel, strict=True)]
        if any(d < 0 or d % 2 for d in grow) or not any(grow):
            return False
        return _enlarged_pads(have, want) == want.pads

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        small, big = m.nodes
        have, want = geometry(g, small), geometry(g, big)
        assert have is not None and want is not None
        w = m["w"]
        edges = (
            (0, 0),
            (0, 0),
            *(((k2 - k1) // 2,) * 2 for k1, k2 in zip(have.kernel, want.kernel, strict=True)),
        )
        shape = (*b.shape(w)[:2], *want.kernel)
        nw = b.weight(shape, lambda: np.pad(b.array(w), edges), g.dtype(w))
        kernel = want.kernel if small.attr("kernel_shape") is not None else None
        attrs = small.with_attrs(pads=want.pads, kernel_shape=kernel)
        b.op(small.op, conv_inputs(m["x"], nw, m.get("b")), (m["y"],), **dict(attrs))
        b.op(big.op, big.inputs, big.outputs, **dict(big.attrs))  # the sibling, unchanged


def _enlarged_pads(have: ConvGeometry, want: ConvGeometry) -> Dims:
    """``have``'s pads once its kernel is centred in ``want``'s: each side grows by
    ``dilation * (k2 - k1) / 2``."""
    n = len(have.kernel)
    return tuple(
        p + have.dilations[i % n] * (want.kernel[i % n] - have.kernel[i % n]) // 2
        for i, p in enumerate(have.pads)
    )


@register
class MergeSiblingMatMuls(Rule):
    """``x @ W1`` and ``x @ W2`` become ``x @ [W1 | W2]`` and a Split of the last axis."""

    name = "merge-sibling-matmuls"
    help = "merge two MatMuls of one input by 2-D weights into one MatMul + Split"
    pattern = "a = MatMul(x, $w1) ; c = MatMul(x, $w2)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        w1, w2 = g.shape(m["w1"]), g.shape(m["w2"])
        return (
            len(w1) == 2
            and len(w2) == 2
            and len(g.shape(m["x"])) >= 2
            and g.dtype(m["w1"]) == g.dtype(m["w2"])
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        n1, n2 = b.shape(m["w1"])[1], b.shape(m["w2"])[1]
        w = concat_weights(b, (m["w1"], m["w2"]), axis=1)
        (y,) = b.op("MatMul", (m["x"], w), 1)
        sizes = b.constant(np.array([n1, n2], dtype=np.int64))
        b.op("Split", (y, sizes), (m["a"], m["c"]), axis=len(b.shape(y)) - 1)


@register
class MergeSiblingGemms(Rule):
    """Two Gemms (or FusedGemms with one activation) of one input and equal attributes
    become one Gemm over the concatenated weights and biases, and a Split."""

    name = "merge-sibling-gemms"
    help = "merge two Gemm/FusedGemm of one input (same attributes) into one Gemm + Split"
    pattern = f"a = {GEMMS}(x, $w1, $c1?) ; c = {GEMMS}(x, $w2, $c2?)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        first, second = m.nodes
        return (
            first.op == second.op
            and gemm_attrs(first) == gemm_attrs(second)
            and len(g.shape(m["w1"])) == 2
            and len(g.shape(m["w2"])) == 2
            and g.dtype(m["w1"]) == g.dtype(m["w2"])
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        first = m.nodes[0]
        trans_b = bool(gemm_attrs(first)["transB"])
        cols = [b.shape(m[w])[0 if trans_b else 1] for w in ("w1", "w2")]
        w = concat_weights(b, (m["w1"], m["w2"]), axis=0 if trans_b else 1)
        inputs = [m["x"], w]
        bias = self._bias(b, m, cols)
        if bias:
            inputs.append(bias)
        (y,) = b.op(first.op, inputs, 1, **dict(first.attrs))
        sizes = b.constant(np.array(cols, dtype=np.int64))
        b.op("Split", (y, sizes), (m["a"], m["c"]), axis=1)

    @staticmethod
    def _bias(b: Builder, m: Match, cols: list[int]) -> str | None:
        """Both C inputs broadcast to their outputs' columns and concatenated: a vector when
        both are row-broadcast, else a full ``(rows, n1 + n2)`` matrix; zeros for a missing
        one; None when both are missing."""
        biases = (m.get("c1"), m.get("c2"))
        if not any(biases):
            return None
        rows = b.shape(m["a"])[0]
        full = any(c and len(b.shape(c)) == 2 and b.shape(c)[0] > 1 for c in biases)

        def part(c: str | None, n: int) -> np.ndarray:
            target = (rows, n) if full else (n,)
            if not c:
                return np.zeros(target, dtype=np.float32)
            arr = b.array(c)
            return np.broadcast_to(arr if full else arr.reshape(-1), target)

        shape = (rows, sum(cols)) if full else (sum(cols),)
        return b.weight(
            shape,
            lambda: np.concatenate(
                [part(c, n) for c, n in zip(biases, cols, strict=True)], axis=-1
            ),
            b.g.dtype(m["w1"]),
        )


# ---------------------------------------------------------------------- conv + add
def _residual_ok(g: ModelGraph, m: Match) -> bool:
    """``r`` is another tensor of exactly the conv output's shape and type (no broadcast)."""
    return (
        m["r"] != m["c"]
        and g.shape(m["r"]) == g.shape(m["c"])
        and g.dtype(m["r"]) == g.dtype(m["c"])
    )


def _fusable_add(g: ModelGraph, m: Match) -> bool:
    """FusedConv can take ``r`` as its Z input: explicit pads, float32 (onnxruntime's
    FusedConv kernel is float-only), ``r`` of the conv output's shape."""
    return (
        geometry(g, m.nodes[0]) is not None and g.dtype(m["c"]) == "float32" and _residual_ok(g, m)
    )


@register
class ConvAddIdentity(EitherAddOrder):
    """``Conv(x, W) + r`` is one conv over ``Concat(x, r)`` with weight ``[W | I]``, ``I``
    the identity kernel: the Add disappears into a conv that can then merge with others
    (MetaFlow's "conv + add through an identity kernel")."""

    name = "conv-add-identity"
    help = "absorb Add(Conv(x), r) into one conv over Concat(x, r) with an identity kernel"
    pattern = "c = Conv(x, $w, $b?) ; y = Add(c, r)"
    swapped = "c = Conv(x, $w, $b?) ; y = Add(r, c)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        geo = geometry(g, m.nodes[0])
        return geo is not None and geo.group == 1 and geo.keeps_size and _residual_ok(g, m)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        conv = m.nodes[0]
        geo = geometry(g, conv)
        assert geo is not None
        w = m["w"]
        out, inp = b.shape(w)[:2]
        centre = geo.pads[: len(geo.kernel)]

        def make() -> np.ndarray:
            arr = np.zeros((out, inp + out, *geo.kernel), dtype=np.float32)
            arr[:, :inp] = b.array(w)
            for o in range(out):
                arr[(o, inp + o, *centre)] = 1.0
            return arr

        nw = b.weight((out, inp + out, *geo.kernel), make, g.dtype(w))
        (joined,) = b.op("Concat", (m["x"], m["r"]), 1, axis=1)
        b.op("Conv", conv_inputs(joined, nw, m.get("b")), (m["y"],), **dict(conv.attrs))


def _zero_bias(b: Builder, m: Match) -> str:
    """The conv's bias, or a lazy zero one (FusedConv's Z is its 4th input)."""
    bias = m.get("b")
    if bias:
        return bias
    channels = b.shape(m["w"])[0]
    return b.weight((channels,), lambda: np.zeros(channels), b.g.dtype(m["w"]))


@register
class FuseConvAdd(EitherAddOrder):
    """``Conv(x, W, b) + r`` is onnxruntime's ``FusedConv(x, W, b, r)`` (Z, the 4th input,
    is added before the activation; none here): the residual add rides the conv's epilogue."""

    name = "fuse-conv-add"
    help = "fuse Add(Conv(x), r) into FusedConv(x, w, b, r)"
    pattern = "c = Conv(x, $w, $b?) ; y = Add(c, r)"
    swapped = "c = Conv(x, $w, $b?) ; y = Add(r, c)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        return _fusable_add(g, m)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        inputs = (m["x"], m["w"], _zero_bias(b, m), m["r"])
        b.op(FUSED_CONV, inputs, (m["y"],), **dict(m.nodes[0].attrs))


@register
class FuseConvAddActivation(EitherAddOrder):
    """``act(Conv(x, W, b) + r)`` is ``FusedConv(x, W, b, r, activation=act)``: ResNet's
    residual block tail in one kernel (onnxruntime's Conv+Add+activation fusion)."""

    name = "fuse-conv-add-activation"
    help = "fuse act(Add(Conv(x), r)) into FusedConv(x, w, b, r, activation=act)"
    pattern = f"c = Conv(x, $w, $b?) ; s = Add(c, r) ; y = {ACTIVATIONS}(s)"
    swapped = f"c = Conv(x, $w, $b?) ; s = Add(r, c) ; y = {ACTIVATIONS}(s)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        return _fusable_add(g, m)

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        conv, _, act = m.nodes
        inputs = (m["x"], m["w"], _zero_bias(b, m), m["r"])
        b.op(FUSED_CONV, inputs, (m["y"],), **dict(conv.attrs), **activation_attrs(act))


# ---------------------------------------------------------------------- concat of convs
CONCAT_OF_CONVS = f"a = {CONVS}(x1, $w1, $b1?) ; c = {CONVS}(x2, $w2, $b2?) ; y = Concat(a, c)"


def _concat_of_convs_ok(g: ModelGraph, m: Match) -> ConvGeometry | None:
    """The shared geometry of two convs on different inputs whose outputs are concatenated
    on channels (same op and activation, same window and group, inputs alike but for
    channels); None if they are not such a pair."""
    first, second, concat = m.nodes
    one, two = geometry(g, first), geometry(g, second)
    x1, x2 = g.shape(m["x1"]), g.shape(m["x2"])
    rank = len(x1)
    axis = int(concat.attr("axis", 0))
    if one is None or one != two or epilogue(first) != epilogue(second):
        return None
    if m["x1"] == m["x2"] or axis + (rank if axis < 0 else 0) != 1:
        return None
    if len(x2) != rank or x1[:1] + x1[2:] != x2[:1] + x2[2:]:
        return None
    if g.dtype(m["x1"]) != g.dtype(m["x2"]) or g.dtype(m["w1"]) != g.dtype(m["w2"]):
        return None
    return one


@register
class ConcatConvsExclusive(Rule):
    """``Concat(Conv(x1, W1), Conv(x2, W2))`` is one conv over ``Concat(x1, x2)`` with the
    block-diagonal weight ``[[W1, 0], [0, W2]]`` (MetaFlow's exclusive concat)."""

    name = "concat-convs-exclusive"
    help = "Concat of two convs on different inputs -> one conv with a block-diagonal weight"
    pattern = CONCAT_OF_CONVS

    def check(self, g: ModelGraph, m: Match) -> bool:
        geo = _concat_of_convs_ok(g, m)
        return geo is not None and geo.group == 1

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        first = m.nodes[0]
        w1, w2 = m["w1"], m["w2"]
        (o1, c1, *kernel), (o2, c2, *_) = b.shape(w1), b.shape(w2)
        shape = (o1 + o2, c1 + c2, *kernel)

        def make() -> np.ndarray:
            arr = np.zeros(shape, dtype=np.float32)
            arr[:o1, :c1] = b.array(w1)
            arr[o1:, c1:] = b.array(w2)
            return arr

        w = b.weight(shape, make, g.dtype(w1))
        bias = concat_biases(b, ((m.get("b1"), o1), (m.get("b2"), o2)), g.dtype(m["w1"]))
        (joined,) = b.op("Concat", (m["x1"], m["x2"]), 1, axis=1)
        b.op(first.op, conv_inputs(joined, w, bias), (m["y"],), **dict(first.attrs))


@register
class MergeGroupConvs(Rule):
    """``Concat(Conv(x1, W1), Conv(x2, W2))`` with equal channel counts is one grouped conv
    (twice the groups) over ``Concat(x1, x2)``: no zero blocks (AutoGraph's ResNeXt move)."""

    name = "merge-group-convs"
    help = "Concat of two equal-width convs on different inputs -> one conv with 2x the groups"
    pattern = CONCAT_OF_CONVS

    def check(self, g: ModelGraph, m: Match) -> bool:
        return (
            _concat_of_convs_ok(g, m) is not None
            and g.shape(m["x1"]) == g.shape(m["x2"])
            and g.shape(m["w1"]) == g.shape(m["w2"])
        )

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        first = m.nodes[0]
        out = b.shape(m["w1"])[0]
        w = concat_weights(b, (m["w1"], m["w2"]), axis=0)
        bias = concat_biases(b, ((m.get("b1"), out), (m.get("b2"), out)), g.dtype(m["w1"]))
        (joined,) = b.op("Concat", (m["x1"], m["x2"]), 1, axis=1)
        attrs = first.with_attrs(group=2 * int(first.attr("group", 1)))
        b.op(first.op, conv_inputs(joined, w, bias), (m["y"],), **dict(attrs))


@register
class SplitGroupConv(Rule):
    """A conv with an even group count ``g`` is two convs of ``g/2`` groups on the two
    channel halves, concatenated: the reverse of merge-group-convs."""

    name = "split-group-conv"
    help = "split a conv with an even group count into two convs on the channel halves"
    pattern = f"y = {CONVS}(x, $w, $b?)"

    def check(self, g: ModelGraph, m: Match) -> bool:
        geo = geometry(g, m.nodes[0])
        return geo is not None and geo.group > 1 and geo.group % 2 == 0

    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        conv = m.nodes[0]
        half_groups = int(conv.attr("group")) // 2
        channels = b.shape(m["x"])[1] // 2
        out = b.shape(m["w"])[0] // 2
        sizes = b.constant(np.array([channels, channels], dtype=np.int64))
        halves = b.op("Split", (m["x"], sizes), 2, axis=1)
        attrs = dict(conv.with_attrs(group=half_groups if half_groups > 1 else None))
        ys = []
        for i, part in enumerate(halves):
            w = slice_weight(b, m["w"], i * out, (i + 1) * out)
            bias = slice_weight(b, m["b"], i * out, (i + 1) * out) if m.get("b") else None
            ys.extend(b.op(conv.op, conv_inputs(part, w, bias), 1, **attrs))
        b.op("Concat", ys, (m["y"],), axis=1)

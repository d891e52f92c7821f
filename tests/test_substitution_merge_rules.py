"""Merge/split rules (sibling merges, enlarge, conv+add, concat of convs, group convs) keep
outputs equal under onnxruntime, and apply only where their preconditions hold."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper

from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import to_onnx
from fusionplan.ir.onnx_run import check_equivalence
from fusionplan.passes.substitution.rules import (
    fusion,  # noqa: F401  (registers fuse-conv-activation, used to build FusedConv models)
    merge,  # noqa: F401  (registers the rules under test)
)
from tests.substitution_models import (
    apply_everywhere,
    assert_rule_preserves,
    model,
    weight,
)

FUSED_CONV = "com.microsoft.FusedConv"
X = {"x": (1, 4, 8, 8)}


def ops(g: ModelGraph) -> Counter[str]:
    return Counter(n.op for n in g.nodes.values())


def conv(x: str, w: str, y: str, b: str | None = None, **attrs) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w, *([b] if b else [])], [y], **attrs)


def fused(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` with every Conv + activation fused into a FusedConv."""
    g, _ = apply_everywhere(m, "fuse-conv-activation")
    return to_onnx(g)


def in_turn(m: onnx.ModelProto, *steps: tuple[str, int]) -> ModelGraph:
    """Apply each rule as often as it matches (checking the count), then check the end
    result against ``m``."""
    current = m
    g = None
    for rule, times in steps:
        g, applied = apply_everywhere(current, rule)
        assert applied == times, f"{rule} applied {applied} times, expected {times}"
        current = to_onnx(g)
    assert check_equivalence(m, current).ok
    assert g is not None
    return g


# ---------------------------------------------------------------------- merge-sibling-convs
def test_sibling_convs_merge_into_one_conv_and_split() -> None:
    m = model(
        [conv("x", "w1", "a", "b1", pads=[1, 1, 1, 1]), conv("x", "w2", "c", pads=[1, 1, 1, 1])],
        X,
        ["a", "c"],
        [weight("w1", 3, 4, 3, 3), weight("b1", 3), weight("w2", 5, 4, 3, 3)],
    )
    g = assert_rule_preserves(m, "merge-sibling-convs")
    assert ops(g) == Counter({"Conv": 1, "Split": 1})
    (merged,) = g.by_op["Conv"]
    assert g.shape(merged.inputs[1]) == (8, 4, 3, 3)


def test_three_sibling_convs_merge_twice() -> None:
    m = model(
        [
            conv("x", "w1", "a", strides=[2, 2]),
            conv("x", "w2", "c", strides=[2, 2]),
            conv("x", "w3", "d", "b3", strides=[2, 2]),
            helper.make_node("Concat", ["a", "c", "d"], ["y"], axis=1),
        ],
        X,
        ["y"],
        [*(weight(n, c, 4, 1, 1) for n, c in (("w1", 2), ("w2", 3), ("w3", 4))), weight("b3", 4)],
    )
    g = assert_rule_preserves(m, "merge-sibling-convs", times=2)
    assert ops(g) == Counter({"Conv": 1, "Split": 2, "Concat": 1})


def test_sibling_fused_convs_with_one_activation_merge() -> None:
    m = fused(
        model(
            [
                conv("x", "w1", "a0", "b1"),
                helper.make_node("LeakyRelu", ["a0"], ["a"], alpha=0.2),
                conv("x", "w2", "c0"),
                helper.make_node("LeakyRelu", ["c0"], ["c"], alpha=0.2),
            ],
            X,
            ["a", "c"],
            [weight("w1", 3, 4, 1, 1), weight("b1", 3), weight("w2", 2, 4, 1, 1)],
        )
    )
    g = assert_rule_preserves(m, "merge-sibling-convs")
    assert ops(g) == Counter({FUSED_CONV: 1, "Split": 1})


@pytest.mark.parametrize(
    ("attrs1", "attrs2"),
    [
        ({"strides": [2, 2]}, {}),  # different strides
        ({"pads": [1, 1, 1, 1]}, {"pads": [1, 1, 0, 0]}),  # different pads
        ({"dilations": [2, 2]}, {}),  # different dilations
        ({"auto_pad": "SAME_UPPER"}, {"auto_pad": "SAME_UPPER"}),  # implicit padding
    ],
)
def test_sibling_convs_with_different_windows_do_not_merge(attrs1: dict, attrs2: dict) -> None:
    m = model(
        [conv("x", "w1", "a", **attrs1), conv("x", "w2", "c", **attrs2)],
        X,
        ["a", "c"],
        [weight("w1", 3, 4, 3, 3), weight("w2", 3, 4, 3, 3)],
    )
    assert_rule_preserves(m, "merge-sibling-convs", times=0)


def test_sibling_convs_with_different_kernels_or_groups_do_not_merge() -> None:
    m = model(
        [
            conv("x", "w1", "a"),
            conv("x", "w2", "c"),  # 3x3 next to 1x1
            conv("x", "w3", "d", group=2),
            conv("x", "w4", "e", group=2),  # grouped pair
        ],
        X,
        ["a", "c", "d", "e"],
        [
            weight("w1", 3, 4, 1, 1),
            weight("w2", 3, 4, 3, 3),
            *(weight(n, 4, 2, 2, 2) for n in ("w3", "w4")),
        ],
    )
    assert_rule_preserves(m, "merge-sibling-convs", times=0)


def test_sibling_convs_with_different_activations_do_not_merge() -> None:
    m = fused(
        model(
            [
                conv("x", "w1", "a0"),
                helper.make_node("Relu", ["a0"], ["a"]),
                conv("x", "w2", "c0"),
                helper.make_node("Sigmoid", ["c0"], ["c"]),
                conv("x", "w3", "d"),  # a plain Conv next to FusedConvs
            ],
            X,
            ["a", "c", "d"],
            [weight("w1", 3, 4, 1, 1), weight("w2", 2, 4, 1, 1), weight("w3", 2, 4, 1, 1)],
        )
    )
    assert_rule_preserves(m, "merge-sibling-convs", times=0)


# ---------------------------------------------------------------------- enlarge-conv-kernel
def test_enlarge_pads_a_small_kernel_to_its_sibling() -> None:
    m = model(
        [conv("x", "w1", "a", "b1", kernel_shape=[1, 1]), conv("x", "w2", "c", pads=[1] * 4)],
        X,
        ["a", "c"],
        [weight("w1", 3, 4, 1, 1), weight("b1", 3), weight("w2", 5, 4, 3, 3)],
    )
    g = assert_rule_preserves(m, "enlarge-conv-kernel")
    assert ops(g) == Counter({"Conv": 2})
    assert sorted(g.shape(n.inputs[1]) for n in g.nodes.values()) == [(3, 4, 3, 3), (5, 4, 3, 3)]
    enlarged = g.producer["a"]
    assert enlarged.attr("pads") == (1, 1, 1, 1) and enlarged.attr("kernel_shape") == (3, 3)


def test_enlarge_one_axis_and_strided() -> None:
    m = model(
        [
            conv("x", "w1", "a", strides=[2, 2], pads=[1, 0, 1, 0]),  # 3x1
            conv("x", "w2", "c", strides=[2, 2], pads=[1, 1, 1, 1]),  # 3x3
        ],
        X,
        ["a", "c"],
        [weight("w1", 3, 4, 3, 1), weight("w2", 5, 4, 3, 3)],
    )
    assert_rule_preserves(m, "enlarge-conv-kernel")


@pytest.mark.parametrize(
    ("k1", "attrs1", "attrs2"),
    [
        (2, {"pads": [0, 0, 1, 1]}, {"pads": [1, 1, 1, 1]}),  # kernel parity mismatch (2 vs 3)
        (1, {"strides": [2, 2]}, {"pads": [1, 1, 1, 1]}),  # different strides
        (1, {}, {}),  # the 3x3 sibling is unpadded: enlarging would not reach its window
        (1, {}, {"pads": [1, 1, 1, 1], "group": 2}),  # the sibling is grouped
    ],
)
def test_enlarge_needs_a_mergeable_sibling(k1: int, attrs1: dict, attrs2: dict) -> None:
    group = attrs2.get("group", 1)
    m = model(
        [conv("x", "w1", "a", **attrs1), conv("x", "w2", "c", **attrs2)],
        X,
        ["a", "c"],
        [weight("w1", 3, 4, k1, k1), weight("w2", 4, 4 // group, 3, 3)],
    )
    assert_rule_preserves(m, "enlarge-conv-kernel", times=0)


def test_enlarge_then_merge_an_inception_block() -> None:
    m = model(
        [
            conv("x", "w1", "a", "b1"),
            conv("x", "w3", "c", "b3", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["a"], ["ra"]),
            helper.make_node("Relu", ["c"], ["rc"]),
            helper.make_node("Concat", ["ra", "rc"], ["y"], axis=1),
        ],
        X,
        ["y"],
        [weight("w1", 3, 4, 1, 1), weight("b1", 3), weight("w3", 5, 4, 3, 3), weight("b3", 5)],
    )
    steps = ("merge-sibling-convs", 0), ("enlarge-conv-kernel", 1), ("merge-sibling-convs", 1)
    g = in_turn(m, *steps)
    assert ops(g) == Counter({"Conv": 1, "Split": 1, "Relu": 2, "Concat": 1})


# ---------------------------------------------------------------------- matmuls and gemms
def test_sibling_matmuls_merge() -> None:
    m = model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["a"]),
            helper.make_node("MatMul", ["x", "w2"], ["c"]),
        ],
        {"x": (2, 3, 6)},
        ["a", "c"],
        [weight("w1", 6, 4), weight("w2", 6, 5)],
    )
    g = assert_rule_preserves(m, "merge-sibling-matmuls")
    assert ops(g) == Counter({"MatMul": 1, "Split": 1})
    assert g.shape(g.by_op["MatMul"][0].inputs[1]) == (6, 9)


def test_matmuls_with_batched_or_runtime_weights_do_not_merge() -> None:
    m = model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["a"]),
            helper.make_node("MatMul", ["x", "w2"], ["c"]),  # a 3-D weight
            helper.make_node("MatMul", ["x", "v"], ["d"]),  # a graph input, not a weight
        ],
        {"x": (2, 3, 6), "v": (6, 4)},
        ["a", "c", "d"],
        [weight("w1", 2, 6, 4), weight("w2", 6, 5)],
    )
    assert_rule_preserves(m, "merge-sibling-matmuls", times=0)


@pytest.mark.parametrize(
    ("shapes", "attrs"),
    [
        (((5, 6), (4, 6), (5,), (1, 4)), {"transB": 1}),  # transB: concat along rows
        (((6, 5), (6, 4), (5,), None), {"alpha": 0.5, "beta": 2.0}),  # one bias missing
        (((6, 5), (6, 4), (3, 5), (4,)), {}),  # a full (rows, n) bias
        (((6, 5), (6, 4), None, None), {"transA": 1}),  # no biases
    ],
)
def test_sibling_gemms_merge(shapes: tuple, attrs: dict) -> None:
    w1, w2, c1, c2 = shapes
    x = (6, 3) if attrs.get("transA") else (3, 6)
    inits = [weight("w1", *w1), weight("w2", *w2)]
    inits += [weight(n, *s) for n, s in (("c1", c1), ("c2", c2)) if s]
    m = model(
        [
            helper.make_node("Gemm", ["x", "w1", *(["c1"] if c1 else [])], ["a"], **attrs),
            helper.make_node("Gemm", ["x", "w2", *(["c2"] if c2 else [])], ["c"], **attrs),
        ],
        {"x": x},
        ["a", "c"],
        inits,
    )
    g = assert_rule_preserves(m, "merge-sibling-gemms")
    assert ops(g) == Counter({"Gemm": 1, "Split": 1})


def test_sibling_fused_gemms_merge() -> None:
    m = model(
        [
            helper.make_node("Gemm", ["x", "w1", "c1"], ["a0"]),
            helper.make_node("Relu", ["a0"], ["a"]),
            helper.make_node("Gemm", ["x", "w2"], ["c0"]),
            helper.make_node("Relu", ["c0"], ["c"]),
        ],
        {"x": (3, 6)},
        ["a", "c"],
        [weight("w1", 6, 5), weight("c1", 5), weight("w2", 6, 4)],
    )
    g, _ = apply_everywhere(m, "fuse-gemm-activation")
    g = assert_rule_preserves(to_onnx(g), "merge-sibling-gemms")
    assert ops(g) == Counter({"com.microsoft.FusedGemm": 1, "Split": 1})


def test_gemms_with_different_attributes_do_not_merge() -> None:
    m = model(
        [
            helper.make_node("Gemm", ["x", "w1"], ["a"], transB=1),
            helper.make_node("Gemm", ["x", "w2"], ["c"]),  # transB differs
            helper.make_node("Gemm", ["x", "w3"], ["d"], alpha=2.0),  # alpha differs
        ],
        {"x": (3, 6)},
        ["a", "c", "d"],
        [weight("w1", 5, 6), weight("w2", 6, 4), weight("w3", 6, 4)],
    )
    assert_rule_preserves(m, "merge-sibling-gemms", times=0)


# ---------------------------------------------------------------------- conv + add
def _conv_add(*, residual_first: bool = False, r_shape=(1, 5, 8, 8), **attrs) -> onnx.ModelProto:
    add = ["r", "c"] if residual_first else ["c", "r"]
    return model(
        [conv("x", "w", "c", "b", **attrs), helper.make_node("Add", add, ["y"])],
        {**X, "r": r_shape},
        ["y"],
        [weight("w", 5, 4, 3, 3), weight("b", 5)],
    )


@pytest.mark.parametrize("residual_first", [False, True])
@pytest.mark.parametrize("pads", [[1, 1, 1, 1], [0, 2, 2, 0]])  # centred, and off-centre
def test_conv_add_becomes_one_conv_with_an_identity_kernel(
    residual_first: bool, pads: list[int]
) -> None:
    m = _conv_add(residual_first=residual_first, pads=pads)
    g = assert_rule_preserves(m, "conv-add-identity")
    assert ops(g) == Counter({"Concat": 1, "Conv": 1})
    assert g.shape(g.by_op["Conv"][0].inputs[1]) == (5, 9, 3, 3)


def test_conv_add_of_its_own_input_uses_the_identity_kernel() -> None:
    m = model(
        [conv("x", "w", "c", pads=[1, 1, 1, 1]), helper.make_node("Add", ["x", "c"], ["y"])],
        X,
        ["y"],
        [weight("w", 4, 4, 3, 3)],
    )
    assert_rule_preserves(m, "conv-add-identity")


@pytest.mark.parametrize(
    ("attrs", "r_shape"),
    [
        ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, (1, 5, 4, 4)),  # strided
        ({}, (1, 5, 6, 6)),  # unpadded: output smaller than input
        ({"pads": [1, 1, 1, 1]}, (1, 5, 1, 1)),  # a broadcast Add
        ({"pads": [2, 2, 2, 2], "dilations": [2, 2]}, (1, 5, 8, 8)),  # dilated
    ],
)
def test_conv_add_identity_needs_a_size_keeping_conv(attrs: dict, r_shape: tuple) -> None:
    assert_rule_preserves(_conv_add(r_shape=r_shape, **attrs), "conv-add-identity", times=0)


def test_conv_read_elsewhere_is_not_absorbed() -> None:
    m = model(
        [
            conv("x", "w", "c", pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["c", "r"], ["y"]),
            helper.make_node("Relu", ["c"], ["z"]),
        ],
        {**X, "r": (1, 5, 8, 8)},
        ["y", "z"],
        [weight("w", 5, 4, 3, 3)],
    )
    assert_rule_preserves(m, "conv-add-identity", times=0)
    assert_rule_preserves(m, "fuse-conv-add", times=0)


@pytest.mark.parametrize("residual_first", [False, True])
def test_conv_add_fuses_into_fused_conv(residual_first: bool) -> None:
    m = _conv_add(residual_first=residual_first, strides=[2, 2], r_shape=(1, 5, 3, 3))
    g = assert_rule_preserves(m, "fuse-conv-add")
    assert ops(g) == Counter({FUSED_CONV: 1})


def test_conv_add_with_a_broadcast_residual_does_not_fuse() -> None:
    assert_rule_preserves(_conv_add(r_shape=(1, 5, 1, 1), pads=[1] * 4), "fuse-conv-add", times=0)


@pytest.mark.parametrize(("act", "attrs"), [("Relu", {}), ("LeakyRelu", {})])
def test_residual_block_tail_fuses(act: str, attrs: dict) -> None:
    m = model(
        [
            conv("x", "w", "c", pads=[1, 1, 1, 1]),  # no bias: a zero one is made
            helper.make_node("Add", ["x", "c"], ["s"]),
            helper.make_node(act, ["s"], ["y"], **attrs),
        ],
        X,
        ["y"],
        [weight("w", 4, 4, 3, 3)],
    )
    g = assert_rule_preserves(m, "fuse-conv-add-activation")
    assert ops(g) == Counter({FUSED_CONV: 1})
    assert g.by_op[FUSED_CONV][0].attr("activation") == act


def test_residual_sum_read_twice_does_not_fuse_with_activation() -> None:
    m = model(
        [
            conv("x", "w", "c", pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["c", "x"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        X,
        ["y", "s"],
        [weight("w", 4, 4, 3, 3)],
    )
    assert_rule_preserves(m, "fuse-conv-add-activation", times=0)
    assert_rule_preserves(m, "fuse-conv-add", times=1)


# ---------------------------------------------------------------------- concat of convs
def _concat_convs(w1, w2, x2=(1, 3, 8, 8), concat_axis=1, **attrs) -> onnx.ModelProto:
    return model(
        [
            conv("x1", "w1", "a", "b1", **attrs),
            conv("x2", "w2", "c", **attrs),
            helper.make_node("Concat", ["a", "c"], ["y"], axis=concat_axis),
        ],
        {"x1": (1, 4, 8, 8), "x2": x2},
        ["y"],
        [weight("w1", *w1), weight("b1", w1[0]), weight("w2", *w2)],
    )


def test_concat_of_convs_becomes_one_block_diagonal_conv() -> None:
    m = _concat_convs((5, 4, 3, 3), (2, 3, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2])
    g = assert_rule_preserves(m, "concat-convs-exclusive")
    assert ops(g) == Counter({"Concat": 1, "Conv": 1})
    assert g.shape(g.by_op["Conv"][0].inputs[1]) == (7, 7, 3, 3)


def test_concat_of_convs_on_axis_minus_3_merges() -> None:
    m = _concat_convs((5, 4, 1, 1), (2, 3, 1, 1), concat_axis=-3)
    assert_rule_preserves(m, "concat-convs-exclusive")


@pytest.mark.parametrize(
    ("attrs1", "attrs2"),
    [
        ({"dilations": [2, 2], "pads": [2, 2, 2, 2]}, {"pads": [1, 1, 1, 1]}),  # dilations
        ({"pads": [0, 0, 2, 2]}, {"pads": [1, 1, 1, 1]}),  # pads
    ],
)
def test_concat_of_unlike_convs_does_not_merge(attrs1: dict, attrs2: dict) -> None:
    m = model(
        [
            conv("x1", "w1", "a", **attrs1),
            conv("x2", "w2", "c", **attrs2),
            helper.make_node("Concat", ["a", "c"], ["y"], axis=1),
        ],
        {"x1": (1, 4, 8, 8), "x2": (1, 4, 8, 8)},
        ["y"],
        [weight("w1", 5, 4, 3, 3), weight("w2", 5, 4, 3, 3)],
    )
    assert_rule_preserves(m, "concat-convs-exclusive", times=0)
    assert_rule_preserves(m, "merge-group-convs", times=0)


def test_concat_of_convs_on_one_input_does_not_merge() -> None:
    same_input = model(
        [
            conv("x", "w1", "a"),
            conv("x", "w2", "c"),
            helper.make_node("Concat", ["a", "c"], ["y"], axis=1),
        ],
        X,
        ["y"],
        [weight("w1", 5, 4, 1, 1), weight("w2", 2, 4, 1, 1)],
    )
    assert_rule_preserves(same_input, "concat-convs-exclusive", times=0)
    assert_rule_preserves(same_input, "merge-group-convs", times=0)


def test_concat_of_three_or_of_a_conv_read_elsewhere_does_not_merge() -> None:
    m = model(
        [
            conv("x1", "w1", "a"),
            conv("x2", "w2", "c"),
            helper.make_node("Concat", ["a", "c", "x1"], ["y"], axis=1),  # three inputs
            conv("x1", "w3", "d"),
            conv("x2", "w4", "e"),
            helper.make_node("Concat", ["d", "e"], ["z"], axis=1),
            helper.make_node("Relu", ["e"], ["r"]),  # e is read elsewhere
        ],
        {"x1": (1, 4, 8, 8), "x2": (1, 4, 8, 8)},
        ["y", "z", "r"],
        [weight(f"w{i}", 3, 4, 1, 1) for i in range(1, 5)],
    )
    assert_rule_preserves(m, "concat-convs-exclusive", times=0)
    assert_rule_preserves(m, "merge-group-convs", times=0)


# ---------------------------------------------------------------------- group convs
def test_concat_of_equal_convs_becomes_a_grouped_conv() -> None:
    m = _concat_convs((6, 4, 3, 3), (6, 4, 3, 3), x2=(1, 4, 8, 8), pads=[1, 1, 1, 1])
    g = assert_rule_preserves(m, "merge-group-convs")
    assert ops(g) == Counter({"Concat": 1, "Conv": 1})
    (merged,) = g.by_op["Conv"]
    assert merged.attr("group") == 2 and g.shape(merged.inputs[1]) == (12, 4, 3, 3)


def test_concat_of_grouped_convs_doubles_the_groups() -> None:
    m = _concat_convs((6, 2, 3, 3), (6, 2, 3, 3), x2=(1, 4, 8, 8), group=2)
    g = assert_rule_preserves(m, "merge-group-convs")
    assert g.by_op["Conv"][0].attr("group") == 4
    assert_rule_preserves(m, "concat-convs-exclusive", times=0)  # grouped: no block diagonal


def test_concat_of_unequal_widths_is_not_grouped() -> None:
    m = _concat_convs((6, 4, 3, 3), (5, 3, 3, 3))
    assert_rule_preserves(m, "merge-group-convs", times=0)
    assert_rule_preserves(m, "concat-convs-exclusive", times=1)


def test_grouped_conv_splits_down_to_plain_convs() -> None:
    m = model(
        [conv("x", "w", "y", "b", group=4, pads=[1, 1, 1, 1])],
        {"x": (1, 8, 6, 6)},
        ["y"],
        [weight("w", 12, 2, 3, 3), weight("b", 12)],
    )
    g = assert_rule_preserves(m, "split-group-conv", times=3)  # 4 -> 2 + 2 -> 1 + 1 + 1 + 1
    assert ops(g) == Counter({"Conv": 4, "Split": 3, "Concat": 3})
    assert all(n.attr("group") is None for n in g.by_op["Conv"])
    assert {g.shape(n.inputs[1]) for n in g.by_op["Conv"]} == {(3, 2, 3, 3)}


def test_split_then_merge_groups_round_trips() -> None:
    m = fused(
        model(
            [conv("x", "w", "c", group=2), helper.make_node("Tanh", ["c"], ["y"])],
            {"x": (1, 8, 6, 6)},
            ["y"],
            [weight("w", 6, 4, 1, 1)],
        )
    )
    g = in_turn(m, ("split-group-conv", 1), ("merge-group-convs", 1))
    assert ops(g) == Counter({"Split": 1, "Concat": 1, FUSED_CONV: 1})
    assert g.by_op[FUSED_CONV][0].attr("group") == 2


def test_odd_group_counts_and_plain_convs_do_not_split() -> None:
    m = model(
        [conv("x", "w1", "a", group=3), conv("x", "w2", "c")],
        {"x": (1, 6, 6, 6)},
        ["a", "c"],
        [weight("w1", 6, 2, 3, 3), weight("w2", 4, 6, 3, 3)],
    )
    assert_rule_preserves(m, "split-group-conv", times=0)


def test_rules_leave_weights_lazy_until_written_out() -> None:
    m = _concat_convs((5, 4, 3, 3), (2, 3, 3, 3))
    g, _ = apply_everywhere(m, "concat-convs-exclusive")
    derived = [w for w in g.weights.values() if w._array is None]
    assert derived, "the block-diagonal weight should still be a recipe"
    assert np.count_nonzero(g.weights[g.by_op["Conv"][0].inputs[1]].array[:5, 4:]) == 0

"""MetaFlow's fusion rules keep outputs equal under onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from fusionplan.passes.substitution.rules import fusion  # noqa: F401  (registers the rules)
from tests.substitution_models import assert_rule_preserves, model, weight


def test_conv_bn_folds_into_one_conv() -> None:
    var = numpy_helper.from_array(
        np.abs(np.random.default_rng(1).standard_normal(4)).astype(np.float32) + 0.1, "var"
    )
    m = model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node(
                "BatchNormalization", ["c", "s", "sh", "mu", "var"], ["y"], epsilon=1e-3
            ),
        ],
        {"x": (1, 3, 8, 8)},
        ["y"],
        [
            weight("w", 4, 3, 3, 3),
            weight("b", 4),
            weight("s", 4),
            weight("sh", 4),
            weight("mu", 4),
            var,
        ],
    )
    g = assert_rule_preserves(m, "fuse-conv-bn")
    assert [n.op for n in g.nodes.values()] == ["Conv"]


def test_conv_activation_fuses_with_and_without_bias() -> None:
    m = model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("LeakyRelu", ["c"], ["r"], alpha=0.2),
            helper.make_node("Conv", ["r", "w2", "b2"], ["d"], pads=[1, 1, 1, 1]),
            helper.make_node("Sigmoid", ["d"], ["y"]),
        ],
        {"x": (1, 3, 6, 6)},
        ["y"],
        [weight("w", 5, 3, 1, 1), weight("w2", 2, 5, 3, 3), weight("b2", 2)],
    )
    g = assert_rule_preserves(m, "fuse-conv-activation", times=2)
    assert {n.op for n in g.nodes.values()} == {"com.microsoft.FusedConv"}


def test_activation_read_twice_is_not_fused() -> None:
    m = model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Add", ["c", "r"], ["y"]),
        ],
        {"x": (1, 3, 6, 6)},
        ["y"],
        [weight("w", 3, 3, 1, 1)],
    )
    assert_rule_preserves(m, "fuse-conv-activation", times=0)


def test_gemm_activation_and_matmul_bias() -> None:
    m = model(
        [
            helper.make_node("MatMul", ["x", "w"], ["c"]),
            helper.make_node("Add", ["c", "b"], ["a"]),
            helper.make_node("Gemm", ["a", "w2", "b2"], ["g"], transB=1),
            helper.make_node("Tanh", ["g"], ["y"]),
        ],
        {"x": (2, 6)},
        ["y"],
        [weight("w", 6, 5), weight("b", 5), weight("w2", 4, 5), weight("b2", 4)],
    )
    assert_rule_preserves(m, "matmul-add-to-gemm")
    assert_rule_preserves(m, "fuse-gemm-activation")


def test_leaky_relu_default_slope_fuses_into_conv_and_gemm() -> None:
    m = model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("LeakyRelu", ["c"], ["r"]),
            helper.make_node("Flatten", ["r"], ["f"]),
            helper.make_node("Gemm", ["f", "w2"], ["g"]),
            helper.make_node("LeakyRelu", ["g"], ["y"], alpha=0.3),
        ],
        {"x": (1, 3, 2, 2)},
        ["y"],
        [weight("w", 2, 3, 1, 1), weight("w2", 8, 4)],
    )
    assert_rule_preserves(m, "fuse-conv-activation")
    assert_rule_preserves(m, "fuse-gemm-activation")

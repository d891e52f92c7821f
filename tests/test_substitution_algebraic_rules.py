"""TASO's algebraic rules keep outputs equal under onnxruntime, and refuse where they must."""

from __future__ import annotations

from collections import Counter

from onnx import helper

from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import from_onnx
from fusionplan.passes.substitution.rules import algebraic  # noqa: F401  (registers the rules)
from fusionplan.passes.substitution.rules.registry import RULES
from tests.substitution_models import assert_rule_preserves, int_const, model, weight

node = helper.make_node


def ops(g: ModelGraph) -> Counter[str]:
    return Counter(n.op for n in g.nodes.values())


# ---------------------------------------------------------------------- constant folding
def test_fold_mul_into_conv_both_orders_and_shapes() -> None:
    m = model(
        [
            node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            node("Mul", ["c", "s"], ["m"]),  # (C, 1, 1)
            node("Conv", ["m", "w2"], ["d"]),
            node("Mul", ["s2", "d"], ["n"]),  # (1, C, 1, 1), constant first
            node("Conv", ["n", "w3"], ["e"], strides=[2, 2]),
            node("Mul", ["e", "k"], ["y"]),  # scalar
        ],
        {"x": (1, 3, 6, 6)},
        ["y"],
        [
            weight("w", 4, 3, 3, 3),
            weight("b", 4),
            weight("s", 4, 1, 1),
            weight("w2", 5, 4, 1, 1),
            weight("s2", 1, 5, 1, 1),
            weight("w3", 2, 5, 1, 1),
            weight("k"),
        ],
    )
    g = assert_rule_preserves(m, "fold-mul-into-conv", times=3)
    assert ops(g) == Counter({"Conv": 3})
    rule, graph = RULES.get("fold-mul-into-conv")(), from_onnx(m)
    swapped = graph.producer["n"].name  # Mul(s2, d): found when re-matching near it alone
    assert [x.names[1] for x in rule.matches(graph, near=[swapped])] == [swapped]


def test_fold_mul_into_conv_refuses_spatial_constant_and_shared_conv() -> None:
    m = model(
        [
            node("Conv", ["x", "w"], ["c"]),
            node("Mul", ["c", "s"], ["y"]),  # varies along W: not per channel
            node("Conv", ["x", "w"], ["d"]),
            node("Mul", ["d", "k"], ["z"]),
            node("Add", ["d", "z"], ["v"]),  # the conv output is read twice
        ],
        {"x": (1, 3, 6, 6)},
        ["y", "v"],
        [weight("w", 4, 3, 1, 1), weight("s", 1, 1, 1, 6), weight("k", 4, 1, 1)],
    )
    assert_rule_preserves(m, "fold-mul-into-conv", times=0)


def test_fold_add_into_conv_with_and_without_bias() -> None:
    m = model(
        [
            node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            node("Add", ["s", "c"], ["a"]),  # constant first, conv without bias
            node("Conv", ["a", "w2", "b2"], ["d"]),
            node("Add", ["d", "s2"], ["y"]),
        ],
        {"x": (1, 3, 5, 5)},
        ["y"],
        [
            weight("w", 4, 3, 3, 3),
            weight("s", 1, 4, 1, 1),
            weight("w2", 2, 4, 1, 1),
            weight("b2", 2),
            weight("s2", 2, 1, 1),
        ],
    )
    g = assert_rule_preserves(m, "fold-add-into-conv", times=2)
    assert ops(g) == Counter({"Conv": 2})
    assert all(len(n.inputs) == 3 for n in g.nodes.values())


def test_fold_add_into_conv_refuses_a_full_tensor_and_auto_pad() -> None:
    m = model(
        [
            node("Conv", ["x", "w"], ["c"]),
            node("Add", ["c", "s"], ["y"]),  # (C, H, W): not per channel
            node("Conv", ["x", "w"], ["d"], auto_pad="SAME_UPPER"),
            node("Add", ["d", "k"], ["z"]),
        ],
        {"x": (1, 3, 4, 4)},
        ["y", "z"],
        [weight("w", 4, 3, 1, 1), weight("s", 4, 4, 4), weight("k", 4, 1, 1)],
    )
    assert_rule_preserves(m, "fold-add-into-conv", times=0)


def test_fold_mul_into_matmul_nd_and_2d() -> None:
    m = model(
        [
            node("MatMul", ["x", "w"], ["c"]),
            node("Mul", ["c", "s"], ["m"]),  # (N,)
            node("MatMul", ["m", "w2"], ["d"]),
            node("Mul", ["s2", "d"], ["y"]),  # (1, N), constant first
        ],
        {"x": (2, 3, 6)},
        ["y"],
        [weight("w", 6, 5), weight("s", 5), weight("w2", 5, 4), weight("s2", 1, 4)],
    )
    g = assert_rule_preserves(m, "fold-mul-into-matmul", times=2)
    assert ops(g) == Counter({"MatMul": 2})


def test_fold_mul_into_matmul_refuses_a_per_row_constant() -> None:
    m = model(
        [node("MatMul", ["x", "w"], ["c"]), node("Mul", ["c", "s"], ["y"])],
        {"x": (3, 6)},
        ["y"],
        [weight("w", 6, 5), weight("s", 3, 1)],
    )
    assert_rule_preserves(m, "fold-mul-into-matmul", times=0)


# ---------------------------------------------------------------------- distributivity
def _two_convs(second: dict, x2: str = "x") -> list:
    return [
        node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        node("Conv", [x2, "w2"], ["c"], **second),
        node("Add", ["a", "c"], ["y"]),
    ]


def test_factor_add_convs_same_input() -> None:
    m = model(
        _two_convs({"pads": [1, 1, 1, 1], "strides": [1, 1]}),
        {"x": (1, 3, 6, 6)},
        ["y"],
        [weight("w1", 4, 3, 3, 3), weight("b1", 4), weight("w2", 4, 3, 3, 3)],
    )
    g = assert_rule_preserves(m, "factor-add-convs")
    assert ops(g) == Counter({"Conv": 1})
    assert_rule_preserves(m, "concat-add-convs", times=0)  # same input: not its case


def test_factor_add_convs_refuses_different_kernels() -> None:
    m = model(
        _two_convs({}),
        {"x": (1, 3, 6, 6)},
        ["y"],
        [weight("w1", 4, 3, 3, 3), weight("b1", 4), weight("w2", 4, 3, 1, 1)],
    )
    assert_rule_preserves(m, "factor-add-convs", times=0)


def test_concat_add_convs_different_inputs() -> None:
    m = model(
        _two_convs({"pads": [1, 1, 1, 1]}, x2="x2"),
        {"x": (1, 3, 6, 6), "x2": (1, 2, 6, 6)},
        ["y"],
        [weight("w1", 4, 3, 3, 3), weight("b1", 4), weight("w2", 4, 2, 3, 3)],
    )
    g = assert_rule_preserves(m, "concat-add-convs")
    assert ops(g) == Counter({"Concat": 1, "Conv": 1})
    assert_rule_preserves(m, "factor-add-convs", times=0)


def test_concat_add_convs_refuses_different_kernels_or_groups() -> None:
    m = model(
        [
            *_two_convs({}, x2="x2"),  # 3x3 + 1x1 kernels
            node("Conv", ["x", "g1"], ["p"], group=2),
            node("Conv", ["x3", "g2"], ["q"], group=2),
            node("Add", ["p", "q"], ["z"]),
        ],
        {"x": (1, 4, 6, 6), "x2": (1, 2, 6, 6), "x3": (1, 4, 6, 6)},
        ["y", "z"],
        [
            weight("w1", 4, 4, 3, 3),
            weight("b1", 4),
            weight("w2", 4, 2, 1, 1),
            weight("g1", 2, 2, 1, 1),
            weight("g2", 2, 2, 1, 1),
        ],
    )
    assert_rule_preserves(m, "concat-add-convs", times=0)


def test_factor_add_matmuls() -> None:
    m = model(
        [
            node("MatMul", ["x", "w1"], ["a"]),
            node("MatMul", ["x", "w2"], ["c"]),
            node("Add", ["c", "a"], ["y"]),
        ],
        {"x": (2, 3, 6)},
        ["y"],
        [weight("w1", 6, 5), weight("w2", 6, 5)],
    )
    g = assert_rule_preserves(m, "factor-add-matmuls")
    assert ops(g) == Counter({"MatMul": 1})


def test_factor_add_matmuls_refuses_broadcast_weights() -> None:
    m = model(
        [
            node("MatMul", ["x", "w1"], ["a"]),
            node("MatMul", ["x", "w2"], ["c"]),
            node("Add", ["a", "c"], ["y"]),
        ],
        {"x": (2, 3, 6)},
        ["y"],
        [weight("w1", 6, 5), weight("w2", 2, 6, 5)],
    )
    assert_rule_preserves(m, "factor-add-matmuls", times=0)


def test_concat_add_matmuls() -> None:
    m = model(
        [
            node("MatMul", ["x1", "w1"], ["a"]),
            node("MatMul", ["x2", "w2"], ["c"]),
            node("Add", ["a", "c"], ["y"]),
        ],
        {"x1": (2, 3, 4), "x2": (2, 3, 5)},
        ["y"],
        [weight("w1", 4, 6), weight("w2", 5, 6)],
    )
    g = assert_rule_preserves(m, "concat-add-matmuls")
    assert ops(g) == Counter({"Concat": 1, "MatMul": 1})


def test_concat_add_matmuls_refuses_broadcast_inputs() -> None:
    m = model(
        [
            node("MatMul", ["x1", "w1"], ["a"]),
            node("MatMul", ["x2", "w2"], ["c"]),
            node("Add", ["a", "c"], ["y"]),
        ],
        {"x1": (2, 3, 4), "x2": (3, 5)},
        ["y"],
        [weight("w1", 4, 6), weight("w2", 5, 6)],
    )
    assert_rule_preserves(m, "concat-add-matmuls", times=0)


def test_reassociate_matmul() -> None:
    m = model(
        [node("MatMul", ["x", "w1"], ["a"]), node("MatMul", ["a", "w2"], ["y"])],
        {"x": (2, 3, 4)},
        ["y"],
        [weight("w1", 4, 6), weight("w2", 6, 5)],
    )
    g = assert_rule_preserves(m, "reassociate-matmul", tolerance=1e-4)
    assert ops(g) == Counter({"MatMul": 1})
    assert g.shape(next(iter(g.nodes.values())).inputs[1]) == (4, 5)


def test_reassociate_matmul_refuses_a_shared_intermediate() -> None:
    m = model(
        [node("MatMul", ["x", "w1"], ["a"]), node("MatMul", ["a", "w2"], ["y"])],
        {"x": (2, 4)},
        ["y", "a"],
        [weight("w1", 4, 6), weight("w2", 6, 5)],
    )
    assert_rule_preserves(m, "reassociate-matmul", times=0)


# ---------------------------------------------------------------------- split / concat
def _split_concat(order: list[str], concat_axis: int = 1) -> object:
    return model(
        [
            node("Split", ["x", "sizes"], ["s0", "s1"], axis=1),
            node("Concat", order, ["c"], axis=concat_axis),
            node("Relu", ["c"], ["y"]),
        ],
        {"x": (1, 5, 4)},
        ["y"],
        [int_const("sizes", [2, 3])],
    )


def test_cancel_split_concat() -> None:
    m = _split_concat(["s0", "s1"])
    g = assert_rule_preserves(m, "cancel-split-concat")
    assert ops(g) == Counter({"Relu": 1})
    assert next(iter(g.nodes.values())).inputs == ("x",)
    # found from the Concat alone too (a search re-matching near a changed Concat)
    rule = RULES.get("cancel-split-concat")()
    graph = from_onnx(m)
    concat = graph.by_op["Concat"][0].name
    assert [m.names for m in rule.matches(graph, near=[concat])] == [rule.matches(graph)[0].names]


def test_cancel_split_concat_as_graph_output() -> None:
    m = model(
        [
            node("Split", ["x"], ["s0", "s1"], axis=-1),
            node("Concat", ["s0", "s1"], ["y"], axis=2),
        ],
        {"x": (1, 3, 4)},
        ["y"],
    )
    g = assert_rule_preserves(m, "cancel-split-concat")
    assert ops(g) == Counter({"Identity": 1})


def test_cancel_split_concat_refuses_reordered_or_other_axis() -> None:
    assert_rule_preserves(_split_concat(["s1", "s0"]), "cancel-split-concat", times=0)
    m = model(
        [
            node("Split", ["x", "sizes"], ["s0", "s1"], axis=1),
            node("Concat", ["s0", "s1"], ["y"], axis=2),
        ],
        {"x": (1, 4, 2)},
        ["y"],
        [int_const("sizes", [2, 2])],
    )
    assert_rule_preserves(m, "cancel-split-concat", times=0)


def _concat_split(sizes: list[int]) -> object:
    return model(
        [
            node("Concat", ["a", "b"], ["t"], axis=1),
            node("Split", ["t", "sizes"], ["y0", "y1"], axis=-2),
            node("Relu", ["y0"], ["r0"]),
            node("Sigmoid", ["y1"], ["r1"]),
        ],
        {"a": (1, 2, 4), "b": (1, 3, 4)},
        ["r0", "r1"],
        [int_const("sizes", sizes)],
    )


def test_cancel_concat_split() -> None:
    g = assert_rule_preserves(_concat_split([2, 3]), "cancel-concat-split")
    assert ops(g) == Counter({"Relu": 1, "Sigmoid": 1})
    assert {n.inputs[0] for n in g.nodes.values()} == {"a", "b"}


def test_cancel_concat_split_refuses_other_boundaries() -> None:
    assert_rule_preserves(_concat_split([3, 2]), "cancel-concat-split", times=0)


def _split_into_concat(inputs: list[str], outputs: tuple[str, ...] = ("y",)) -> object:
    nodes = [
        node("Split", ["x", "sizes"], ["s0", "s1"], axis=1),
        node("Concat", inputs, ["y"], axis=1),
    ]
    if "r" in outputs:
        nodes.append(node("Relu", ["s0"], ["r"]))
    return model(
        nodes,
        {"x": (1, 5, 4, 4), "z": (1, 2, 4, 4), "w": (1, 1, 4, 4)},
        list(outputs),
        [int_const("sizes", [2, 3])],
    )


def test_concat_of_split_prefix_and_middle() -> None:
    g = assert_rule_preserves(_split_into_concat(["s0", "s1", "z"]), "concat-of-split-prefix")
    assert ops(g) == Counter({"Concat": 1})
    assert next(iter(g.nodes.values())).inputs == ("x", "z")
    g = assert_rule_preserves(_split_into_concat(["z", "s0", "s1", "w"]), "concat-of-split-prefix")
    assert next(iter(g.nodes.values())).inputs == ("z", "x", "w")


def test_concat_of_split_prefix_refuses_reorder_and_shared_part() -> None:
    assert_rule_preserves(_split_into_concat(["s1", "s0", "z"]), "concat-of-split-prefix", times=0)
    shared = _split_into_concat(["s0", "s1", "z"], outputs=("y", "r"))  # s0 also feeds a Relu
    assert_rule_preserves(shared, "concat-of-split-prefix", times=0)
    assert_rule_preserves(_split_into_concat(["s0", "s1"]), "concat-of-split-prefix", times=0)


def _nested_concat(inner_axis: int, outputs: tuple[str, ...] = ("y",)) -> object:
    return model(
        [
            node("Concat", ["b", "c"], ["t"], axis=inner_axis),
            node("Concat", ["a", "t", "d"], ["y"], axis=1),
        ],
        {"a": (1, 2, 3), "b": (1, 1, 3), "c": (1, 1, 3), "d": (1, 4, 3)},
        list(outputs),
    )


def test_merge_concat_concat() -> None:
    g = assert_rule_preserves(_nested_concat(-2), "merge-concat-concat")
    assert ops(g) == Counter({"Concat": 1})
    assert next(iter(g.nodes.values())).inputs == ("a", "b", "c", "d")


def test_merge_concat_concat_refuses_shared_inner() -> None:
    assert_rule_preserves(_nested_concat(1, ("y", "t")), "merge-concat-concat", times=0)
    m = model(
        [
            node("Concat", ["b", "c"], ["t"], axis=2),
            node("Concat", ["a", "t"], ["y"], axis=1),
        ],
        {"a": (1, 2, 4), "b": (1, 1, 2), "c": (1, 1, 2)},
        ["y"],
    )
    assert_rule_preserves(m, "merge-concat-concat", times=0)


# ---------------------------------------------------------------------- activations
def _acts_into_concat(acts: list[tuple[str, dict]]) -> object:
    nodes = [node(op, [f"x{i}"], [f"r{i}"], **attrs) for i, (op, attrs) in enumerate(acts)]
    nodes.append(node("Concat", [f"r{i}" for i in range(len(acts))], ["y"], axis=1))
    return model(nodes, {f"x{i}": (1, i + 1, 3) for i in range(len(acts))}, ["y"])


def test_activation_through_concat() -> None:
    m = _acts_into_concat([("Relu", {})] * 3)
    g = assert_rule_preserves(m, "activation-through-concat")
    assert ops(g) == Counter({"Concat": 1, "Relu": 1})
    rule, graph = RULES.get("activation-through-concat")(), from_onnx(m)
    assert len(rule.matches(graph, near=[graph.producer["r1"].name])) == 1
    assert rule.matches(graph, near=["elsewhere"]) == []
    leaky = [("LeakyRelu", {"alpha": 0.2})] * 2
    g = assert_rule_preserves(_acts_into_concat(leaky), "activation-through-concat")
    assert ops(g) == Counter({"Concat": 1, "LeakyRelu": 1})


def test_activation_through_concat_refuses_mixed_activations() -> None:
    mixed = [("LeakyRelu", {"alpha": 0.2}), ("LeakyRelu", {"alpha": 0.1})]
    assert_rule_preserves(_acts_into_concat(mixed), "activation-through-concat", times=0)
    mixed = [("Relu", {}), ("Sigmoid", {})]
    assert_rule_preserves(_acts_into_concat(mixed), "activation-through-concat", times=0)


def _split_into_acts(second: str, outputs: tuple[str, ...] = ("r0", "r1", "r2")) -> object:
    return model(
        [
            node("Split", ["x"], ["s0", "s1", "s2"], axis=1),
            node("Tanh", ["s0"], ["r0"]),
            node(second, ["s1"], ["r1"]),
            node("Tanh", ["s2"], ["r2"]),
        ],
        {"x": (1, 6, 3)},
        list(outputs),
    )


def test_activation_through_split() -> None:
    g = assert_rule_preserves(_split_into_acts("Tanh"), "activation-through-split")
    assert ops(g) == Counter({"Split": 1, "Tanh": 1})


def test_activation_through_split_refuses_mixed_or_shared_outputs() -> None:
    assert_rule_preserves(_split_into_acts("Sigmoid"), "activation-through-split", times=0)
    shared = _split_into_acts("Tanh", outputs=("r0", "r1", "r2", "s1"))
    assert_rule_preserves(shared, "activation-through-split", times=0)

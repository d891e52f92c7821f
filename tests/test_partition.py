"""Partitions (fusionplan.ir.partition): the edge-cut encoding, make_sound and topological cuts.

Soundness is checked with the graph module's own primitives (``is_weakly_connected``,
``quotient_order``), never with the code under test. Besides hand-made bad partitions,
seeded random DAGs of up to 25 nodes exercise every function on many shapes.
"""

from __future__ import annotations

import random

import pytest

from fusionplan.ir.graph import (
    Node,
    OpGraph,
    Tensor,
    ancestors_of,
    bits,
    descendants_of,
    is_weakly_connected,
    mask_of,
    quotient_order,
    topological_cut,
    weak_components,
)
from fusionplan.ir.partition import (
    cut_at,
    cut_edges_of,
    groups_from_cut_edges,
    make_sound,
    topological_positions,
)
from tests.onnx_builders import Net, fan_out, residual_block, to_graph


def random_dag(n: int, seed: int) -> OpGraph:
    """A connected DAG: node i reads 1-3 earlier outputs, mostly recent ones (skips too)."""
    rng = random.Random(seed)
    tensors = [Tensor("x", (1, 1, 1), -1)]
    nodes = []
    for i in range(n):
        if i == 0:
            inputs = (0,)
        else:
            k = min(i, rng.choice([1, 1, 2, 3]))
            window = list(range(max(0, i - 4), i)) if rng.random() < 0.8 else list(range(i))
            inputs = tuple(sorted(1 + j for j in rng.sample(window, min(k, len(window)))))
        tensors.append(Tensor(f"t{i}", (1, 1, 1), i))
        nodes.append(Node(f"n{i}", "Add", "eltwise", inputs, (i + 1,)))
    consumed = {t for node in nodes for t in node.inputs}
    outputs = [t for t in range(1, n + 1) if t not in consumed]
    return OpGraph.build(f"dag{seed}", nodes, tensors, [0], outputs)


def edge_pairs(graph: OpGraph, nodes: int | None = None) -> list[tuple[int, int]]:
    nodes = graph.all_nodes if nodes is None else nodes
    pairs = {(e.src, e.dst) for e in graph.edges}
    return sorted((u, v) for u, v in pairs if (nodes >> u) & (nodes >> v) & 1)


def assert_partition_of(groups: list[int], nodes: int) -> None:
    union = 0
    for g in groups:
        assert g, "empty group"
        assert not union & g, "groups overlap"
        union |= g
    assert union == nodes, "groups do not cover the nodes"


def assert_sound(graph: OpGraph, groups: list[int]) -> None:
    for g in groups:
        assert is_weakly_connected(graph, g), f"group {sorted(bits(g))} is not connected"
    assert quotient_order(graph, groups) is not None, "quotient graph has a cycle"


def assert_refines(fine: list[int], coarse: list[int]) -> None:
    for f in fine:
        assert any(f & ~c == 0 for c in coarse), f"{sorted(bits(f))} is in no input group"


def random_groups(graph: OpGraph, rng: random.Random) -> list[int]:
    """An arbitrary partition: each node gets one of k labels (groups need not be sound)."""
    k = rng.randint(1, max(1, len(graph) // 2))
    labels = [rng.randrange(k) for _ in range(len(graph))]
    return [
        g for g in (mask_of(v for v, lab in enumerate(labels) if lab == j) for j in range(k)) if g
    ]


def cyclic_pair_model():
    """a1 = relu(x), b2 = sigmoid(x), a2 = a1 + b2, b1 = a1 * b2 (labels 0 a1, 1 b2, 2 a2, 3 b1)."""
    net = Net(20)
    a1 = net.op("Relu", ["x"], "a1.out", "a1")
    b2 = net.op("Sigmoid", ["x"], "b2.out", "b2")
    net.op("Add", [a1, b2], "a2.out", "a2")
    net.op("Mul", [a1, b2], "b1.out", "b1")
    shape = [1, 4, 8, 8]
    return net.model([("x", shape)], [("a2.out", shape), ("b1.out", shape)], "cyclic_pair")


# ----------------------------------------------------------------------------- edge cuts
@pytest.mark.parametrize("seed", range(30))
def test_cut_edges_round_trip(seed):
    rng = random.Random(seed)
    graph = random_dag(rng.randint(2, 25), seed)
    edges = edge_pairs(graph)
    p = rng.random()
    cut = [rng.random() < p for _ in edges]
    groups = groups_from_cut_edges(graph, graph.all_nodes, cut, edges)
    assert_partition_of(groups, graph.all_nodes)
    assert all(is_weakly_connected(graph, g) for g in groups)
    owner = {v: gi for gi, g in enumerate(groups) for v in bits(g)}
    for (u, v), is_cut in zip(edges, cut, strict=True):
        if not is_cut:
            assert owner[u] == owner[v]

    # re-encoding keeps every uncut edge uncut (an edge cut but bridged elsewhere is not cut)
    encoded = cut_edges_of(groups, edges)
    assert all(c for c, e in zip(cut, encoded, strict=True) if e)
    assert groups_from_cut_edges(graph, graph.all_nodes, encoded, edges) == groups
    assert cut_edges_of(groups, edges) == encoded


def test_cut_edges_extremes():
    graph = to_graph(residual_block())
    edges = edge_pairs(graph)
    assert groups_from_cut_edges(graph, graph.all_nodes, [True] * len(edges), edges) == [
        1 << v for v in range(6)
    ]
    assert groups_from_cut_edges(graph, graph.all_nodes, [False] * len(edges), edges) == [
        graph.all_nodes
    ]
    assert cut_edges_of([graph.all_nodes], edges) == [False] * len(edges)
    assert cut_edges_of([1 << v for v in range(6)], edges) == [True] * len(edges)
    # cutting only the skip edge (stem -> add) keeps everything together: the chain bridges it
    skip = [e == (0, 4) for e in edges]
    assert groups_from_cut_edges(graph, graph.all_nodes, skip, edges) == [graph.all_nodes]


def test_cut_edges_on_a_subset_of_nodes():
    # conv2 (3) excluded, as the search excludes unfusable ops: its neighbours split apart
    graph = to_graph(residual_block())
    nodes = graph.all_nodes & ~(1 << 3)
    edges = edge_pairs(graph, nodes)
    groups = groups_from_cut_edges(graph, nodes, [False] * len(edges), edges)
    assert groups == [nodes]  # stem -> add keeps {stem, conv1, relu1} and {add, relu2} together
    no_skip = [e == (0, 4) for e in edges]
    assert groups_from_cut_edges(graph, nodes, no_skip, edges) == [0b000111, 0b110000]


# ----------------------------------------------------------------------------- make_sound
def check_make_sound(graph: OpGraph, groups: list[int]) -> list[int]:
    out = make_sound(graph, groups)
    assert_partition_of(out, mask_of(v for g in groups for v in bits(g)))
    assert_sound(graph, out)
    assert_refines(out, groups)
    return out


def test_make_sound_splits_a_disconnected_group():
    graph = to_graph(fan_out())  # 0 relu, 1 conv_a, 2 conv_b, 3 sigmoid, 4 sum
    out = check_make_sound(graph, [0b00001, 0b00110, 0b01000, 0b10000])
    assert sorted(out) == [1 << v for v in range(5)]


def test_make_sound_breaks_the_classic_cyclic_pair():
    graph = to_graph(cyclic_pair_model())
    a, b = mask_of([0, 2]), mask_of([1, 3])  # A = {a1, a2}, B = {b2, b1}
    assert is_weakly_connected(graph, a) and is_weakly_connected(graph, b)
    assert quotient_order(graph, [a, b]) is None
    out = check_make_sound(graph, [a, b])
    assert len(out) == 3  # one cut of one group is enough


def test_make_sound_on_a_group_around_an_excluded_node():
    # residual block with conv2 excluded: {stem, conv1, relu1, add, relu2} is connected
    # through the skip edge, but relu1 -> conv2 -> add makes it wait on itself
    graph = to_graph(residual_block())
    big, alone = mask_of([0, 1, 2, 4, 5]), 1 << 3
    assert is_weakly_connected(graph, big)
    assert quotient_order(graph, [big, alone]) is None
    out = check_make_sound(graph, [big, alone])
    assert alone in out
    # the part before conv2 and the part after it end up in different groups
    owner = {v: gi for gi, g in enumerate(out) for v in bits(g)}
    assert owner[2] != owner[4]


def test_make_sound_keeps_sound_partitions():
    graph = to_graph(residual_block())
    for groups in ([graph.all_nodes], [0b000111, 0b111000], [0b011111, 0b100000]):
        assert make_sound(graph, groups) == sorted(groups)


@pytest.mark.parametrize("seed", range(40))
def test_make_sound_on_random_partitions(seed):
    rng = random.Random(1000 + seed)
    graph = random_dag(rng.randint(3, 25), seed)
    groups = random_groups(graph, rng)
    out = check_make_sound(graph, groups)
    # already-sound input groups survive unchanged
    if all(is_weakly_connected(graph, g) for g in groups) and quotient_order(graph, groups):
        assert sorted(out) == sorted(groups)


# ----------------------------------------------------------------------------- topological cuts
@pytest.mark.parametrize("seed", range(20))
def test_topological_cut_never_creates_cycles(seed):
    rng = random.Random(2000 + seed)
    graph = random_dag(rng.randint(3, 25), seed)
    sound = make_sound(graph, random_groups(graph, rng))
    for gi, g in enumerate(sound):
        for p in topological_positions(g):
            low, high = topological_cut(g, p)
            assert low and high and low | high == g and not low & high
            assert not any(e.src in set(bits(high)) and (low >> e.dst) & 1 for e in graph.edges)
            parts = cut_at(graph, g, p)
            assert sorted(parts) == sorted(
                weak_components(graph, low) + weak_components(graph, high)
            )
            new = sound[:gi] + parts + sound[gi + 1 :]
            assert_partition_of(new, graph.all_nodes)
            assert_sound(graph, new)


def test_topological_positions():
    assert topological_positions(mask_of([2, 5, 7])) == [2, 5]
    assert topological_positions(1 << 4) == []


@pytest.mark.parametrize("seed", range(30))
def test_descendants_and_ancestors_of_a_set_are_the_unions_over_its_ops(seed):
    graph = random_dag(14, seed)
    rng = random.Random(seed)
    desc, anc = graph.descendant_mask, graph.ancestor_mask
    for _ in range(50):
        ops = rng.randrange(1 << len(graph))
        assert descendants_of(desc, ops) == mask_of_union(desc, ops)
        assert ancestors_of(anc, ops) == mask_of_union(anc, ops)


def mask_of_union(masks, ops: int) -> int:
    """The union of ``masks[v]`` over the ops of ``ops``, one op at a time."""
    out = 0
    for v in bits(ops):
        out |= masks[v]
    return out
